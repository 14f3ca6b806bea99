/*
 * Row quantizers of the IQ lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S),
 * in the shape ggml_quantize_chunk calls them: the same float32 operations in the same order as
 * ggml's quantize_iq*, so the bytes are ggml's. gguf_schema/tensors/lattice.py is the numpy twin
 * and describes the algorithms; the comments here name only what the C needs.
 *
 * The lattices (grid points, the key -> point map and the neighbour lists of keys off the grid)
 * are built from the grids of gguf_schema.tensors.grids: the grid bytes are copied at module
 * import (quantize_iq_init), the maps are built at first use, once, under a lock.
 *
 * Where ggml aborts the process (GGML_ASSERT in its lattice searches: no neighbour at a finite
 * distance, a NaN scale), these functions stop, leave the rest of the output zero and record a
 * message that quantize_iq_error() hands to module.c, which raises ValueError with it.
 */
#include "common.h"
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include "pythread.h"

#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif

#define QK 256

/* ---------------------------------------------------------------------------------- */
/* Failures (where ggml aborts)                                                        */

static THREAD_LOCAL char failure[320];
static THREAD_LOCAL int failed;

const char *quantize_iq_error(void) {
    if (!failed) return NULL;
    failed = 0;
    return failure;
}

/* Record why ggml aborts on the super-block at x (importance weights qw or NULL); returns -1.
 * lattice.py (_fail_message) words it the same way. */
static int fail(const char *type, const float *x, const float *qw) {
    float amax = 0.0f, wmax = 0.0f;
    char weights[64] = "";
    for (int i = 0; i < QK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    if (qw != NULL) {
        for (int i = 0; i < QK; i++) wmax = fabsf(qw[i]) > wmax ? fabsf(qw[i]) : wmax;
        snprintf(weights, sizeof weights, ", importance up to %.3g", (double)wmax);
    }
    snprintf(failure, sizeof failure,
             "ggml's %s quantizer aborts on a block of 256 values (magnitudes up to %.3g%s): its lattice "
             "search overflows float32 and ggml writes no bytes for it; scale the values or the weights down",
             type, (double)amax, weights);
    failed = 1;
    return -1;
}

/* ---------------------------------------------------------------------------------- */
/* Lattices                                                                            */

/* A lattice: grid points whose coordinates are levels 0..7 (a coordinate's level is the rank of
 * its byte among the grid's distinct byte values; ggml's search works on 2 * level + 1). A key
 * packs the levels of one group, `bits` per coordinate, coordinate 0 lowest. The map gives, for
 * every key a search can look up (all levels <= top), the point with that key, or -(o + 1) where
 * near[o] is the count of its neighbours and near[o + 1 ...] the neighbours themselves: the grid
 * points at the `nwant` smallest distinct squared distances from the key, by (distance, index). */
typedef struct {
    const char *grid;
    int points, dim, bits, nwant, top;
    int nlevels;      /* distinct coordinate values */
    uint8_t *level;
    int32_t *map;
    uint16_t *near;
    volatile int built;
} lattice;

enum { L_IQ2XXS, L_IQ2XS, L_IQ2S, L_IQ1S, L_IQ3XXS, L_IQ3S, N_LATTICES };

static lattice lattices[N_LATTICES] = {
    {"IQ2XXS_GRID", 256, 8, 2, 2, 2, 0, NULL, NULL, NULL, 0},
    {"IQ2XS_GRID", 512, 8, 2, 2, 2, 0, NULL, NULL, NULL, 0},
    {"IQ2S_GRID", 1024, 8, 2, 1, 2, 0, NULL, NULL, NULL, 0},
    {"IQ1S_GRID", 2048, 8, 2, 3, 2, 0, NULL, NULL, NULL, 0},
    {"IQ3XXS_GRID", 256, 4, 3, 2, 7, 0, NULL, NULL, NULL, 0},
    {"IQ3S_GRID", 512, 4, 3, 3, 7, 0, NULL, NULL, NULL, 0},
};
static PyThread_type_lock build_lock;

/* Copy the grids' levels out of gguf_schema.tensors.grids (called with the GIL at import). */
int quantize_iq_init(void) {
    build_lock = PyThread_allocate_lock();
    if (build_lock == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *mod = PyImport_ImportModule("gguf_schema.tensors.grids");
    if (mod == NULL) return -1;
    int rc = 0;
    for (int g = 0; g < N_LATTICES && rc == 0; g++) {
        lattice *lat = &lattices[g];
        Py_buffer b;
        PyObject *arr = PyObject_GetAttrString(mod, lat->grid);
        if (arr == NULL || PyObject_GetBuffer(arr, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            Py_XDECREF(arr);
            rc = -1;
            break;
        }
        const int is_signed = b.format != NULL && b.format[0] == 'b';
        const Py_ssize_t n = (Py_ssize_t)lat->points * lat->dim;
        if (b.len != n || b.itemsize != 1) {
            PyErr_Format(PyExc_ImportError, "grid %s has %zd bytes, %zd expected", lat->grid, b.len, n);
            rc = -1;
        } else if ((lat->level = malloc((size_t)n)) == NULL) {
            PyErr_NoMemory();
            rc = -1;
        } else {
            int value[256], nvalues = 0;
            const uint8_t *raw = b.buf;
            for (Py_ssize_t i = 0; i < n; i++) { /* the distinct values, in order */
                const int v = is_signed ? (int)(int8_t)raw[i] : (int)raw[i];
                int j = 0;
                while (j < nvalues && value[j] < v) j++;
                if (j < nvalues && value[j] == v) continue;
                memmove(value + j + 1, value + j, (size_t)(nvalues - j) * sizeof(int));
                value[j] = v;
                nvalues++;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                const int v = is_signed ? (int)(int8_t)raw[i] : (int)raw[i];
                int j = 0;
                while (value[j] != v) j++;
                lat->level[i] = (uint8_t)j;
            }
            lat->nlevels = nvalues;
            if (nvalues > (1 << lat->bits)) {
                PyErr_Format(PyExc_ImportError, "grid %s has %d levels", lat->grid, nvalues);
                rc = -1;
            }
        }
        PyBuffer_Release(&b);
        Py_DECREF(arr);
    }
    Py_DECREF(mod);
    return rc;
}

static int key_of(const lattice *lat, const uint8_t *lv) {
    int key = 0;
    for (int i = 0; i < lat->dim; i++) key |= lv[i] << (lat->bits * i);
    return key;
}

/* Build the map and the neighbour lists (0, or -1 without memory). */
static int build(lattice *lat) {
    const int dim = lat->dim, nkeys = 1 << (lat->bits * dim), mask = (1 << lat->bits) - 1;
    int32_t *map = malloc((size_t)nkeys * sizeof(int32_t));
    int *dist = malloc((size_t)lat->points * sizeof(int));
    uint16_t *order = malloc((size_t)lat->points * sizeof(uint16_t));
    size_t cap = 1 << 14, used = 0;
    uint16_t *near = malloc(cap * sizeof(uint16_t));
    if (map == NULL || dist == NULL || order == NULL || near == NULL) goto nomem;
    for (int k = 0; k < nkeys; k++) map[k] = INT32_MIN; /* never looked up */
    for (int p = 0; p < lat->points; p++) map[key_of(lat, lat->level + (size_t)p * dim)] = p;
    for (int k = 0; k < nkeys; k++) {
        int lk[8], reachable = 1;
        for (int i = 0; i < dim; i++) {
            lk[i] = (k >> (lat->bits * i)) & mask;
            reachable &= lk[i] <= lat->top;
        }
        if (!reachable || map[k] >= 0) continue;
        for (int p = 0; p < lat->points; p++) {
            const uint8_t *lv = lat->level + (size_t)p * dim;
            int d = 0;
            for (int i = 0; i < dim; i++) d += (lv[i] - lk[i]) * (lv[i] - lk[i]);
            dist[p] = d;
        }
        int limit = -1; /* the nwant-th smallest distinct distance */
        for (int r = 0; r < lat->nwant; r++) {
            int next = INT32_MAX;
            for (int p = 0; p < lat->points; p++)
                if (dist[p] > limit && dist[p] < next) next = dist[p];
            if (next == INT32_MAX) break;
            limit = next;
        }
        int count = 0; /* the points within the limit, by (distance, index): insertion keeps index order */
        for (int p = 0; p < lat->points; p++) {
            if (dist[p] > limit) continue;
            int j = count++;
            while (j > 0 && dist[order[j - 1]] > dist[p]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = (uint16_t)p;
        }
        if (used + 1 + (size_t)count > cap) {
            while (used + 1 + (size_t)count > cap) cap *= 2;
            uint16_t *grown = realloc(near, cap * sizeof(uint16_t));
            if (grown == NULL) goto nomem;
            near = grown;
        }
        map[k] = -(int32_t)used - 1;
        near[used++] = (uint16_t)count;
        memcpy(near + used, order, (size_t)count * sizeof(uint16_t));
        used += (size_t)count;
    }
    free(dist);
    free(order);
    lat->map = map;
    lat->near = near;
    return 0;
nomem:
    free(map);
    free(dist);
    free(order);
    free(near);
    return -1;
}

/* The lattice, built at first use (NULL without memory). */
static const lattice *get_lattice(int which) {
    lattice *lat = &lattices[which];
    PyThread_acquire_lock(build_lock, WAIT_LOCK);
    if (!lat->built && lat->level != NULL && build(lat) == 0) lat->built = 1;
    const int ok = lat->built;
    PyThread_release_lock(build_lock);
    return ok ? lat : NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Scalar helpers as ggml computes them                                                */

/* ggml's nearest_int: the low mantissa bits of v + 1.5 * 2**23 (for every v, NaN included). */
static inline int nearest(float v) {
    return (int)(f32_bits(v + 12582912.0f) & 0x007fffffu) - 0x00400000;
}

static inline int clamp_level(int l, int hi) { return l < 0 ? 0 : l > hi ? hi : l; }

/* GGML_FP32_TO_FP16: round to nearest even; a NaN becomes 0x7e00 with its sign. */
static inline uint16_t half_bits(float f) {
    return f != f ? (uint16_t)(((f32_bits(f) >> 16) & 0x8000u) | 0x7e00u) : f32_to_half(f);
}

/* sum of x[i]^2 over a super-block, in order */
static inline float sum_squares(const float *x) {
    float s = 0.0f;
    for (int i = 0; i < QK; i++) s += x[i] * x[i];
    return s;
}

static inline float max_abs(const float *x, int n) {
    float m = fabsf(x[0]);
    for (int i = 1; i < n; i++) m = m > fabsf(x[i]) ? m : fabsf(x[i]);
    return m;
}

/* ---------------------------------------------------------------------------------- */
/* The lattice search of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S                     */

/* Among the neighbours of an off-grid key (map entry e), the point at the least weighted distance
 * sum_i w_i (scale * value[level_i] - x_i)^2 below FLT_MAX, summed in order, the first of equals;
 * -1 if none. value: 2 * level + 1 (IQ2, IQ3) or IQ1's shifted values. Each term depends only on
 * the coordinate and its level: with more neighbours than levels, the dim * nlevels possible
 * terms are computed first (the same float operations ggml repeats per neighbour). */
static int best_neighbour(const lattice *lat, int32_t e, const float *x, const float *w, float scale,
                          const float *value, int nlevels) {
    const uint16_t *nb = lat->near + (-(int64_t)e - 1);
    const int dim = lat->dim, count = nb[0];
    float best = FLT_MAX;
    int found = -1;
    if (count <= nlevels) {
        for (int j = 1; j <= count; j++) {
            const uint8_t *lv = lat->level + (size_t)nb[j] * dim;
            float d2 = 0.0f;
            for (int i = 0; i < dim; i++) {
                const float diff = scale * value[lv[i]] - x[i];
                d2 += w[i] * diff * diff;
            }
            if (d2 < best) {
                best = d2;
                found = nb[j];
            }
        }
        return found;
    }
    float term[8][8];
    for (int i = 0; i < dim; i++)
        for (int l = 0; l < nlevels; l++) {
            const float diff = scale * value[l] - x[i];
            term[i][l] = w[i] * diff * diff;
        }
    for (int j = 1; j <= count; j++) {
        const uint8_t *lv = lat->level + (size_t)nb[j] * dim;
        float d2 = 0.0f;
        for (int i = 0; i < dim; i++) d2 += term[i][lv[i]];
        if (d2 < best) {
            best = d2;
            found = nb[j];
        }
    }
    return found;
}

static const float ODD[8] = {1, 3, 5, 7, 9, 11, 13, 15}; /* 2 * level + 1 */

/* One group: levels nearest to x * id, clamped to 0..kmax-1, looked up; off the grid, the best
 * neighbour at this scale. Writes the point's levels to lv; returns the point (-1: none). */
static int place(const lattice *lat, int kmax, const float *x, const float *waux, float id, float scale,
                 uint8_t *lv, int *on_grid) {
    int key = 0;
    for (int i = 0; i < lat->dim; i++) {
        const int l = clamp_level(nearest(0.5f * (id * x[i] - 1)), kmax - 1);
        lv[i] = (uint8_t)l;
        key |= l << (lat->bits * i);
    }
    const int32_t e = lat->map[key];
    *on_grid = e >= 0;
    if (e >= 0) return e;
    const int p = best_neighbour(lat, e, x, waux, scale, ODD, lat->nlevels);
    if (p >= 0) memcpy(lv, lat->level + (size_t)p * lat->dim, (size_t)lat->dim);
    return p;
}

typedef struct {
    int n;            /* elements per sub-block */
    int kmax;         /* ggml's kMaxQ: levels 0 .. kmax-1 */
    int steps;        /* candidate scales is = -steps .. steps */
    float step;       /* ... with id = (2 kmax - 1 + is * step) / top */
    int always;       /* IQ2_XXS: the second pass runs whenever scale > 0 */
    int all_groups;   /* the second pass places every group (else only those off the grid) */
    int start_off;    /* IQ3_S: groups count as off the grid until a candidate is taken */
} search_spec;

/* sum w * x * q and sum w * q * q with q = 2 * level + 1, in order */
static inline void weighted_sums(int n, const float *w, const float *x, const uint8_t *lv, float *sqx, float *sq2) {
    float a = 0.0f, b = 0.0f;
    for (int i = 0; i < n; i++) {
        const float q = (float)(2 * lv[i] + 1);
        a += w[i] * x[i] * q;
        b += w[i] * q * q;
    }
    *sqx = a;
    *sq2 = b;
}

/* Search the scale and the points of one sub-block of magnitudes x (weights w, sqrt weights waux):
 * candidates at 2 * steps + 1 scales from top, the best by sum(w x q)^2 / sum(w q^2), then a second
 * pass at the best scale. In: *scale the starting scale; out: *scale, levels lv (n), points pt
 * (n / dim). 0, or -1 where ggml aborts (a group with no neighbour at a finite distance). */
static int search(const lattice *lat, const search_spec *s, const float *x, const float *w, const float *waux,
                  float top, float *scale_io, uint8_t *lv, int *pt) {
    const int n = s->n, groups = n / lat->dim;
    uint8_t aux[32];
    int on[8], on_aux[8], dummy;
    float scale = *scale_io, best = 0.0f;
    memset(lv, 0, (size_t)n);
    for (int g = 0; g < groups; g++) on[g] = !s->start_off;
    for (int is = -s->steps; is <= s->steps; is++) {
        const float id = ((float)(2 * s->kmax - 1) + (float)is * s->step) / top;
        const float this_scale = 1 / id;
        for (int g = 0; g < groups; g++) {
            const int o = g * lat->dim;
            if (place(lat, s->kmax, x + o, waux + o, id, this_scale, aux + o, &on_aux[g]) < 0) return -1;
        }
        float sqx, sq2;
        weighted_sums(n, w, x, aux, &sqx, &sq2);
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            scale = sqx / sq2;
            best = scale * sqx;
            memcpy(lv, aux, (size_t)n);
            memcpy(on, on_aux, sizeof on);
        }
    }
    int off = 0;
    for (int g = 0; g < groups; g++) off += !on[g];
    if ((s->always || off > 0) && scale > 0) {
        const float id = 1 / scale;
        for (int g = 0; g < groups; g++) {
            const int o = g * lat->dim;
            if ((s->all_groups || !on[g]) && place(lat, s->kmax, x + o, waux + o, id, scale, lv + o, &dummy) < 0)
                return -1;
        }
        float sqx, sq2;
        weighted_sums(n, w, x, lv, &sqx, &sq2);
        if (sq2 > 0) scale = sqx / sq2;
    }
    for (int g = 0; g < groups; g++) {
        const int32_t e = lat->map[key_of(lat, lv + g * lat->dim)];
        if (e < 0) return -1; /* not reached: the levels are always a grid point */
        pt[g] = e;
    }
    *scale_io = scale;
    return 0;
}

/* Magnitudes and sign bits of 8 values. With parity (IQ2_XXS, IQ2_XS, IQ3_XXS: 7 stored sign bits,
 * the 8th implied by an even count), an odd count of negatives keeps the sign of the value of least
 * w * x * x instead (its magnitude turns negative) and returns 7 bits. */
static uint8_t group_signs(const float *x, const float *w, float *xval, int parity) {
    unsigned s = 0, neg = 0;
    for (int i = 0; i < 8; i++) {
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            s |= 1u << i;
            neg++;
        }
    }
    if (!parity) return (uint8_t)s;
    if (neg & 1) {
        int m = 0;
        float least = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; i++) {
            const float a = w[i] * x[i] * x[i];
            if (a < least) {
                least = a;
                m = i;
            }
        }
        xval[m] = -xval[m];
        s ^= 1u << m;
    }
    return (uint8_t)(s & 127);
}

/* ggml's make_qp_quants (quantize_k.c: search_qp) over n <= 32 values, as IQ2_XXS uses it: only its scale. */
static float qp_scale(int n, int nmax, const float *x, const float *w) {
    uint8_t L[32];
    return search_qp(n, nmax, x, w, L);
}

/* The 4-bit sub-block scale: nearest(0.5 (id * scale - 1)) in 0..15. */
static inline int scale_nibble(float id, float scale) { return clamp_level(nearest(0.5f * (id * scale - 1)), 15); }

/* ---------------------------------------------------------------------------------- */
/* IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S                                              */

enum lattice_type { T_IQ2_XXS, T_IQ2_XS, T_IQ2_S, T_IQ3_XXS, T_IQ3_S };

typedef struct {
    const char *name;
    int lat;
    int type_size;
    search_spec spec;
    int parity;          /* 7-bit signs with an implied 8th */
    float eps;           /* sub-blocks whose largest magnitude is below this are zero (0: exactly zero) */
    float sigma_mul;     /* sigma2 = sigma_mul * sum(x^2) / 256 */
    float fudge;         /* the stored d is max_scale / 31 * fudge (1: none) */
    int needs_imatrix;   /* ggml refuses to quantize the type without importance weights */
} lattice_type;

static const lattice_type LTYPES[] = {
    {"IQ2_XXS", L_IQ2XXS, 66, {32, 3, 6, 0.1f, 1, 1, 0}, 1, 1e-15f, 1.0f, 1.0f, 1},
    {"IQ2_XS", L_IQ2XS, 74, {16, 3, 9, 0.1f, 0, 0, 0}, 1, 1e-15f, 1.0f, 1.0f, 1},
    {"IQ2_S", L_IQ2S, 82, {16, 3, 9, 0.1f, 0, 0, 0}, 0, 1e-8f, 2.0f, 0.9875f, 0},
    {"IQ3_XXS", L_IQ3XXS, 98, {32, 8, 15, 0.2f, 0, 0, 0}, 1, 1e-8f, 2.0f, 1.0125f, 0},
    {"IQ3_S", L_IQ3S, 110, {32, 8, 9, 0.2f, 0, 1, 1}, 0, 0.0f, 2.0f, 1.033f, 0},
};

/* One super-block of a lattice type into y (zeroed by the caller). 0, or -1 where ggml aborts. */
static int lattice_block(const lattice_type *T, const lattice *lat, const float *xbl, const float *qw, uint8_t *y) {
    const search_spec *s = &T->spec;
    const int n = s->n, nsub = QK / n, groups = n / lat->dim;
    float scales[16], weight[32], waux[32], xval[32];
    uint8_t signs[4], lv[32];
    int pt[8];
    float max_scale = 0.0f;
    const float sigma2 = T->sigma_mul * sum_squares(xbl) / QK;
    int qs_at = 0; /* IQ3_S: the next sub-block's slot (ggml advances it only past non-zero sub-blocks) */
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = xbl + n * ib;
        if (qw != NULL) {
            for (int i = 0; i < n; i++) weight[i] = qw[n * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
        } else if (lat == &lattices[L_IQ2S]) {
            for (int i = 0; i < n; i++) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
        } else {
            for (int i = 0; i < n; i++) weight[i] = xb[i] * xb[i];
        }
        for (int i = 0; i < n; i++) waux[i] = sqrtf(weight[i]);
        for (int k = 0; k < n / 8; k++) signs[k] = group_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, T->parity);
        float max = xval[0];
        for (int i = 1; i < n; i++) max = max > xval[i] ? max : xval[i];
        scales[ib] = 0.0f;
        if (T->eps > 0 ? max < T->eps : !max) continue;
        float scale, top;
        if (s->always) { /* IQ2_XXS: candidates around the scale of make_qp_quants */
            scale = qp_scale(n, s->kmax + 1, xval, weight);
            top = scale * (float)s->kmax;
            if (top <= 0) continue;
        } else {
            scale = max / (float)(2 * s->kmax - 1);
            top = max;
        }
        if (search(lat, s, xval, weight, waux, top, &scale, lv, pt) < 0) return fail(T->name, xbl, qw);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4 && k < n / 8; k++) signs[k] = (uint8_t)(~signs[k] & (T->parity ? 127 : 255));
        }
        if (!(scale >= 0)) return fail(T->name, xbl, qw);
        switch (lat - lattices) {
        case L_IQ2XXS: { /* per 32: 4 point bytes, then 4 x 7 sign bits (the scale goes on top later) */
            uint8_t *q = y + 2 + 8 * ib;
            uint32_t sg = 0;
            for (int k = 0; k < 4; k++) {
                q[k] = (uint8_t)pt[k];
                sg |= (uint32_t)signs[k] << (7 * k);
            }
            wr32(q + 4, sg);
            break;
        }
        case L_IQ2XS: /* per 8: 9-bit point | 7 sign bits << 9 */
            for (int k = 0; k < 2; k++) wr16(y + 2 + 2 * (2 * ib + k), (uint16_t)(pt[k] | (signs[k] << 9)));
            break;
        case L_IQ2S: /* point low bytes, 2 high bits per point in qh, 8 sign bits per 8 */
            for (int k = 0; k < 2; k++) {
                const int i8 = 2 * ib + k;
                y[2 + i8] = (uint8_t)pt[k];
                y[2 + 64 + i8 / 4] |= (uint8_t)((pt[k] >> 8) << (2 * (i8 % 4)));
                y[2 + 32 + i8] = signs[k];
            }
            break;
        case L_IQ3XXS: { /* 8 point bytes per 32; the 4 x 7 sign bits in the words after all points */
            uint32_t sg = 0;
            for (int k = 0; k < 8; k++) y[2 + 8 * ib + k] = (uint8_t)pt[k];
            for (int k = 0; k < 4; k++) sg |= (uint32_t)signs[k] << (7 * k);
            wr32(y + 2 + 64 + 4 * ib, sg);
            break;
        }
        default: /* IQ3_S: qs and signs at the running slot; the 9th point bit in qh[ib] */
            for (int k = 0; k < groups; k++) {
                y[2 + 8 * qs_at + k] = (uint8_t)pt[k];
                y[2 + 64 + ib] |= (uint8_t)((pt[k] >> 8) << k);
            }
            for (int k = 0; k < 4; k++) y[2 + 64 + 8 + 4 * qs_at + k] = signs[k];
            qs_at++;
            break;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) { /* all scales zero: IQ2_XXS, IQ2_XS and IQ3_XXS drop the points and signs too */
        if (T->parity) memset(y + 2, 0, (size_t)T->type_size - 2);
        return 0;
    }
    const float d = max_scale / 31;
    wr16(y, half_bits(d * T->fudge));
    const float id = 1 / d;
    switch (lat - lattices) {
    case L_IQ2XXS:
        for (int ib = 0; ib < nsub; ib++) y[2 + 8 * ib + 7] |= (uint8_t)(scale_nibble(id, scales[ib]) << 4);
        break;
    case L_IQ3XXS:
        for (int ib = 0; ib < nsub; ib++) y[2 + 64 + 4 * ib + 3] |= (uint8_t)(scale_nibble(id, scales[ib]) << 4);
        break;
    default: { /* two nibbles per byte in the last field */
        uint8_t *sc = y + T->type_size - nsub / 2;
        for (int ib = 0; ib < nsub; ib += 2)
            sc[ib / 2] = (uint8_t)(scale_nibble(id, scales[ib]) | (scale_nibble(id, scales[ib + 1]) << 4));
        break;
    }
    }
    return 0;
}

static void lattice_rows(int which, const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                         const float *restrict imatrix) {
    const lattice_type *T = &LTYPES[which];
    const lattice *lat = get_lattice(T->lat);
    if (lat == NULL || (T->needs_imatrix && imatrix == NULL)) {
        snprintf(failure, sizeof failure, lat == NULL ? "no memory for the %s lattice"
                                                      : "ggml quantizes %s only with an importance matrix", T->name);
        failed = 1;
        return;
    }
    const int64_t nb = n_per_row / QK;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t b = 0; b < nb; b++) {
            const float *qw = imatrix != NULL ? imatrix + QK * b : NULL;
            if (lattice_block(T, lat, x + r * n_per_row + QK * b, qw, y + (r * nb + b) * T->type_size) < 0) return;
        }
}

void quantize_rows_iq2_xxs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                           const float *restrict imatrix) {
    lattice_rows(T_IQ2_XXS, x, y, nrows, n_per_row, imatrix);
}
void quantize_rows_iq2_xs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                          const float *restrict imatrix) {
    lattice_rows(T_IQ2_XS, x, y, nrows, n_per_row, imatrix);
}
void quantize_rows_iq2_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                         const float *restrict imatrix) {
    lattice_rows(T_IQ2_S, x, y, nrows, n_per_row, imatrix);
}
void quantize_rows_iq3_xxs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                           const float *restrict imatrix) {
    lattice_rows(T_IQ3_XXS, x, y, nrows, n_per_row, imatrix);
}
void quantize_rows_iq3_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                         const float *restrict imatrix) {
    lattice_rows(T_IQ3_S, x, y, nrows, n_per_row, imatrix);
}

/* ---------------------------------------------------------------------------------- */
/* IQ1_S and IQ1_M                                                                      */

static const float X_PLUS[3] = {-1 + 0.125f, 0.125f, 1 + 0.125f}; /* levels -1, 0, 1 shifted by +delta */
static const float X_MINUS[3] = {-1 - 0.125f, -0.125f, 1 - 0.125f};

/* Stable order of n values, ascending (ggml's qsort of (value, index) pairs is glibc's merge sort:
 * equal values keep their order). */
static void sort_order(const float *x, int n, int *order) {
    for (int j = 0; j < n; j++) {
        int k = j;
        while (k > 0 && x[order[k - 1]] > x[j]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = j;
    }
}

/* The points of the groups of levels L (8 per group), with the shifted values xx[g] of group g;
 * off the grid, the best neighbour at this scale, and then the scale refitted. 0 or -1. */
static int iq1_points(const lattice *lat, int groups, uint8_t *L, const float *xb, const float *w,
                      const float *const *xx, float *scale, int *pt) {
    int all_on = 1;
    for (int k = 0; k < groups; k++) {
        const int32_t e = lat->map[key_of(lat, L + 8 * k)];
        if (e >= 0) {
            pt[k] = e;
            continue;
        }
        all_on = 0;
        /* no neighbour at a finite distance: ggml then scans the whole grid reading values past the
         * group, out of its row (no defined result) and aborts where that finds none either */
        pt[k] = best_neighbour(lat, e, xb + 8 * k, w + 8 * k, *scale, xx[k], lat->nlevels);
        if (pt[k] < 0) return -1;
        memcpy(L + 8 * k, lat->level + (size_t)pt[k] * 8, 8);
    }
    if (!all_on) {
        float sqx = 0.0f, sq2 = 0.0f;
        for (int k = 0; k < groups; k++)
            for (int j = 0; j < 8; j++) {
                const float ww = w[8 * k + j], q = xx[k][L[8 * k + j]];
                sqx += ww * q * xb[8 * k + j];
                sq2 += ww * q * q;
            }
        if (sqx > 0 && sq2 > 0) *scale = sqx / sq2;
    }
    return 0;
}

/* IQ1_S: sub-blocks of 32, one shift sign per sub-block. */
static int iq1_s_block(const lattice *lat, const float *xbl, const float *qw, uint8_t *y) {
    float scales[8], weight[32], sumx[33], sumw[33];
    int8_t shifts[8];
    int order[32], pt[4];
    uint8_t L[32];
    float max_scale = 0.0f;
    const float sigma2 = 2 * sum_squares(xbl) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = xbl + 32 * ib;
        for (int i = 0; i < 32; i++) weight[i] = qw[32 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
        scales[ib] = 0.0f;
        shifts[ib] = 1;
        const float max = max_abs(xb, 32);
        if (max < 1e-12f) continue;
        sort_order(xb, 32, order);
        sumx[0] = sumw[0] = 0.0f;
        for (int j = 0; j < 32; j++) {
            const int i = order[j];
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        /* every split of the sorted values into levels -1 | 0 | 1, with either shift */
        float best = -FLT_MAX, scale = max;
        int b1 = -1, b2 = -1, shift = 0;
        for (int i1 = 0; i1 <= 32; i1++)
            for (int i2 = i1; i2 <= 32; i2++)
                for (int sgn = 1; sgn >= -1; sgn -= 2) {
                    const float *v = sgn > 0 ? X_PLUS : X_MINUS;
                    const float sqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[32] - sumx[i2]) * v[2];
                    const float sq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1]
                                      + (sumw[32] - sumw[i2]) * v[2] * v[2];
                    if (sq2 > 0 && sqx * sqx > best * sq2) {
                        scale = sqx / sq2;
                        best = scale * sqx;
                        b1 = i1;
                        b2 = i2;
                        shift = sgn;
                    }
                }
        if (b1 < 0) continue;
        for (int j = 0; j < 32; j++) L[order[j]] = (uint8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)(2 - L[j]);
            scale = -scale;
            shift = -shift;
        }
        const float *v = shift == 1 ? X_PLUS : X_MINUS;
        const float *const xx[4] = {v, v, v, v};
        if (iq1_points(lat, 4, L, xb, weight, xx, &scale, pt) < 0) return fail("IQ1_S", xbl, qw);
        uint16_t h = 0;
        for (int k = 0; k < 4; k++) {
            y[2 + 4 * ib + k] = (uint8_t)pt[k];
            h |= (uint16_t)((pt[k] >> 8) << (3 * k));
        }
        wr16(y + 34 + 2 * ib, h);
        if (!(scale >= 0)) return fail("IQ1_S", xbl, qw);
        scales[ib] = scale;
        shifts[ib] = (int8_t)shift;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return 0;
    const float d = max_scale / 15;
    wr16(y, half_bits(d * 1.125f));
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = clamp_level(nearest(0.5f * (id * scales[ib] - 1)), 7);
        if (shifts[ib] == -1) l |= 8;
        wr16(y + 34 + 2 * ib, (uint16_t)(rd16(y + 34 + 2 * ib) | (l << 12)));
    }
    return 0;
}

/* IQ1_M's split search for one sub-block of 16 in sorted order, as ggml does it since llama.cpp
 * PR #28706 (not byte-identical to the search before it): prefix sums of w*x and w over the sorted
 * elements, kept per half of the sub-block (each half has its own shift sign); since the three
 * levels of either shift are a unit apart, a split's sum is T*v[2] - P(i1) - P(i2) per half. Every
 * (i1, i2), each of the four shift choices k (bit 1: the first 8 elements' shift is minus, bit 0:
 * the last 8's), in ggml's order and float32 operations. */
static void iq1_m_search(const float *xb, const float *w, const int *order, float *scale, int *b1, int *b2, int *bk) {
    float px[2][17], pw[2][17];
    px[0][0] = px[1][0] = 0.0f;
    pw[0][0] = pw[1][0] = 0.0f;
    for (int j = 0; j < 16; j++) {
        const int i = order[j], h = i < 8 ? 0 : 1;
        px[h][j + 1] = px[h][j] + w[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + w[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float txs[2] = {px[0][16], px[1][16]}, tws[2] = {pw[0][16], pw[1][16]};
    const float p2 = X_PLUS[2], m2 = X_MINUS[2];
    const float cp1 = X_PLUS[0] * X_PLUS[0] - X_PLUS[1] * X_PLUS[1];
    const float cp2 = X_PLUS[1] * X_PLUS[1] - X_PLUS[2] * X_PLUS[2];
    const float cm1 = X_MINUS[0] * X_MINUS[0] - X_MINUS[1] * X_MINUS[1];
    const float cm2 = X_MINUS[1] * X_MINUS[1] - X_MINUS[2] * X_MINUS[2];
    float best = -FLT_MAX;
    for (int i1 = 0; i1 <= 16; i1++)
        for (int i2 = i1; i2 <= 16; i2++) {
            float qxp[2], qxm[2], q2p[2], q2m[2];
            for (int h = 0; h < 2; h++) {
                const float sx = px[h][i1] + px[h][i2];
                qxp[h] = txs[h] * p2 - sx;
                qxm[h] = txs[h] * m2 - sx;
                q2p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            const float sx[4] = {qxp[0] + qxp[1], qxp[0] + qxm[1], qxm[0] + qxp[1], qxm[0] + qxm[1]};
            const float sq[4] = {q2p[0] + q2p[1], q2p[0] + q2m[1], q2m[0] + q2p[1], q2m[0] + q2m[1]};
            for (int k = 0; k < 4; k++)
                if (sq[k] > 0 && sx[k] * sx[k] > best * sq[k]) {
                    *scale = sx[k] / sq[k];
                    best = *scale * sx[k];
                    *b1 = i1;
                    *b2 = i2;
                    *bk = k;
                }
        }
}

/* IQ1_M: sub-blocks of 16, a shift sign per 8, 3-bit sub-block scales, the f16 scale in the top
 * nibbles of the four scale words. */
static int iq1_m_block(const lattice *lat, const float *xbl, const float *qw, uint8_t *y) {
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[16], weight[16];
    int8_t shifts[16];
    int order[16], pt[2];
    uint8_t L[16];
    uint8_t *qs = y, *qh = y + 32;
    uint16_t sc[4] = {0, 0, 0, 0};
    float max_scale = 0.0f;
    const float sigma2 = 2 * sum_squares(xbl) / QK;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = xbl + 16 * ib;
        if (qw != NULL) {
            for (int i = 0; i < 16; i++) weight[i] = qw[16 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
        } else {
            for (int i = 0; i < 16; i++) weight[i] = xb[i] * xb[i];
        }
        scales[ib] = 0.0f;
        shifts[ib] = 0;
        const float max = max_abs(xb, 16);
        if (max < 1e-7f) continue;
        sort_order(xb, 16, order);
        float scale = max;
        int b1 = -1, b2 = -1, bk = -1;
        iq1_m_search(xb, weight, order, &scale, &b1, &b2, &bk);
        if (b1 < 0) continue;
        for (int j = 0; j < 16; j++) L[order[j]] = (uint8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 16; j++) L[j] = (uint8_t)(2 - L[j]);
            scale = -scale;
            bk = 3 - bk;
        }
        const float *const xx[2] = {bk < 2 ? X_PLUS : X_MINUS, bk % 2 == 0 ? X_PLUS : X_MINUS};
        if (iq1_points(lat, 2, L, xb, weight, xx, &scale, pt) < 0) return fail("IQ1_M", xbl, qw);
        qs[2 * ib] = (uint8_t)pt[0];
        qs[2 * ib + 1] = (uint8_t)pt[1];
        qh[ib] = (uint8_t)((pt[0] >> 8) | ((pt[1] >> 8) << 4));
        if (!(scale >= 0)) return fail("IQ1_M", xbl, qw);
        scales[ib] = scale;
        shifts[ib] = (int8_t)bk;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return 0;
    float d = max_scale / 15;
    const float id = 1 / d;
    float sqx = 0.0f, sq2 = 0.0f; /* the super-block scale refitted to the stored 3-bit scales */
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = xbl + 16 * ib;
        const int l = clamp_level(nearest(0.5f * (id * scales[ib] - 1)), 7);
        sc[ib / 4] |= (uint16_t)(l << (3 * (ib % 4)));
        qh[ib] |= masks[shifts[ib]];
        if (qw != NULL) {
            for (int i = 0; i < 16; i++) weight[i] = qw[16 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
        } else {
            for (int i = 0; i < 16; i++) weight[i] = xb[i] * xb[i];
        }
        for (int k = 0; k < 2; k++) {
            const float *xx = (k == 0 ? shifts[ib] < 2 : shifts[ib] % 2 == 0) ? X_PLUS : X_MINUS;
            const int p = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700);
            const uint8_t *lv = lat->level + (size_t)p * 8;
            for (int j = 0; j < 8; j++) {
                const float ww = weight[8 * k + j], q = xx[lv[j]] * (float)(2 * l + 1);
                sqx += ww * q * xb[8 * k + j];
                sq2 += ww * q * q;
            }
        }
    }
    if (sq2 > 0) d = sqx / sq2;
    const uint16_t h = half_bits(d * 1.1125f);
    sc[0] |= (uint16_t)((h & 0x000f) << 12);
    sc[1] |= (uint16_t)((h & 0x00f0) << 8);
    sc[2] |= (uint16_t)((h & 0x0f00) << 4);
    sc[3] |= (uint16_t)(h & 0xf000);
    for (int k = 0; k < 4; k++) wr16(y + 48 + 2 * k, sc[k]);
    return 0;
}

static void iq1_rows(int m, const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                     const float *restrict imatrix) {
    const lattice *lat = get_lattice(L_IQ1S);
    const int type_size = m ? 56 : 50;
    if (lat == NULL || (!m && imatrix == NULL)) {
        snprintf(failure, sizeof failure, lat == NULL ? "no memory for the IQ1 lattice"
                                                      : "ggml quantizes IQ1_S only with an importance matrix");
        failed = 1;
        return;
    }
    const int64_t nb = n_per_row / QK;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xbl = x + r * n_per_row + QK * b, *qw = imatrix != NULL ? imatrix + QK * b : NULL;
            uint8_t *yb = y + (r * nb + b) * type_size;
            if ((m ? iq1_m_block(lat, xbl, qw, yb) : iq1_s_block(lat, xbl, qw, yb)) < 0) return;
        }
}

void quantize_rows_iq1_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                         const float *restrict imatrix) {
    iq1_rows(0, x, y, nrows, n_per_row, imatrix);
}
void quantize_rows_iq1_m(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                         const float *restrict imatrix) {
    iq1_rows(1, x, y, nrows, n_per_row, imatrix);
}
