/*
 * Searching quantizers of gguf_schema.tensors._kernels: the K-quants (Q2_K..Q6_K), the
 * importance-weighted paths of Q4_0, Q4_1, Q5_0, Q5_1, and IQ4_NL / IQ4_XS, with the bytes of
 * ggml's ggml_quantize_chunk (quantize_row_*_ref without an importance matrix, the weighted
 * searches with one).
 *
 * ggml searches each sub-block on its own: candidate scales, and for each a weighted sum over
 * the sub-block's elements, added one at a time (the order fixes the rounding, so it cannot be
 * changed). Here several sub-blocks are searched together, "in lanes": their elements are
 * stored position-major (t[i * G + g] is element i of sub-block g), and every step of the
 * search is a loop over the G lanes, which the compiler turns into vector instructions. Each
 * lane still adds its own terms in ggml's order; a branch of ggml's code becomes a select per
 * lane. Same float32 operations, same order: the same bits, G sub-blocks at a time.
 *
 * Every function here is plain C; WIDE entry points get an AVX2 copy on x86-64 (common.h).
 */
#include "common.h"

#if defined(__GNUC__) || defined(__clang__)
#define LANE_INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define LANE_INLINE static __forceinline
#else
#define LANE_INLINE static inline
#endif

#define MAX_LANES 16
#define MAX_CELLS 256          /* positions x lanes of one search */
#define GROUP_MAX_EPS 1e-15f   /* below this largest magnitude ggml treats a group as zeros */
#define SUPER 256              /* elements of a K-quant / IQ4_XS super-block */

/* ---------------------------------------------------------------------------------- */
/* Scalars                                                                            */

/* ggml's round-to-nearest: the low mantissa bits of v + 1.5 * 2**23 (ties to even for
 * |v| < 2**22; for other values, infinities and NaN the same bit arithmetic as ggml). */
static inline int nearest(float v) {
    return (int)(f32_bits(v + 12582912.0f) & 0x007fffffu) - 0x00400000;
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* float -> half as ggml stores scales: round to nearest even; NaN -> 0x7e00 with its sign. */
static inline uint16_t scale_half(float f) {
    const uint32_t u = f32_bits(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u) : f32_to_half(f);
}

/* A scale stored as a half: writes it at p, returns the float it reads back as. */
static inline float put_scale(uint8_t *p, float f) {
    const uint16_t h = scale_half(f);
    wr16(p, h);
    return half_to_f32(h);
}

/* ---------------------------------------------------------------------------------- */
/* Lanes                                                                              */

/* Groups of n consecutive elements -> position-major lanes: t[i * G + g] = x[g * n + i]. */
LANE_INLINE void to_lanes(const float *restrict x, int n, int G, float *restrict t) {
    for (int g = 0; g < G; g++)
        for (int i = 0; i < n; i++) t[i * G + g] = x[g * n + i];
}

/* Per lane: the largest magnitude and the first value that has it, from 0 (NaN never taken). */
LANE_INLINE void lane_signed_max(const float *restrict x, int n, int G, float *restrict amax, float *restrict mx) {
    for (int g = 0; g < G; g++) amax[g] = mx[g] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < G; g++) {
            const float v = x[i * G + g], a = fabsf(v);
            const int take = a > amax[g];
            amax[g] = take ? a : amax[g];
            mx[g] = take ? v : mx[g];
        }
}

/* make_qx_quants(n, nmax, x, L, 1, w) in G lanes (w NULL: weights x * x). lv receives the
 * levels plus nmax, scale the scale of each lane. */
LANE_INLINE void search_qx(const int n, const int G, const float *restrict x, const float *restrict w, const int nmax,
                           float *restrict lv, float *restrict scale) {
    float ww[MAX_CELLS], wx[MAX_CELLS], tl[MAX_CELLS];
    float amax[MAX_LANES], mx[MAX_LANES], iscale[MAX_LANES], sumlx[MAX_LANES], suml2[MAX_LANES], best[MAX_LANES];
    lane_signed_max(x, n, G, amax, mx);
    for (int c = 0; c < n * G; c++) {
        ww[c] = w ? w[c] : x[c] * x[c];
        wx[c] = ww[c] * x[c];
    }
    for (int step = 0; step <= 18; step++) { /* step 0: -nmax / max; then -(nmax + 0.1 k) / max, k = -9..9, k != 0 */
        const int k = step <= 9 ? step - 10 : step - 9;
        for (int g = 0; g < G; g++) {
            iscale[g] = step == 0 ? (float)(-nmax) / mx[g] : -((float)nmax + 0.1f * (float)k) / mx[g];
            sumlx[g] = suml2[g] = 0.0f;
        }
        for (int i = 0; i < n; i++)
            for (int g = 0; g < G; g++) {
                const int c = i * G + g;
                const float l = (float)clamp_int(nearest(iscale[g] * x[c]), -nmax, nmax - 1);
                tl[c] = l;
                sumlx[g] += wx[c] * l;
                suml2[g] += ww[c] * l * l;
            }
        if (step == 0) {
            for (int g = 0; g < G; g++) {
                scale[g] = suml2[g] != 0.0f ? sumlx[g] / suml2[g] : 0.0f;
                best[g] = scale[g] * sumlx[g];
            }
            for (int c = 0; c < n * G; c++) lv[c] = tl[c] + (float)nmax;
            continue;
        }
        int any = 0;
        for (int g = 0; g < G; g++) {
            const int better = suml2[g] > 0.0f && sumlx[g] * sumlx[g] > best[g] * suml2[g];
            iscale[g] = better ? 1.0f : 0.0f; /* reused as the lane's "take" flag */
            scale[g] = better ? sumlx[g] / suml2[g] : scale[g];
            best[g] = better ? scale[g] * sumlx[g] : best[g];
            any |= better;
        }
        if (any)
            for (int i = 0; i < n; i++)
                for (int g = 0; g < G; g++) {
                    const int c = i * G + g;
                    lv[c] = iscale[g] != 0.0f ? tl[c] + (float)nmax : lv[c];
                }
    }
    for (int g = 0; g < G; g++)
        if (amax[g] < GROUP_MAX_EPS) {
            scale[g] = 0.0f;
            for (int i = 0; i < n; i++) lv[i * G + g] = 0.0f;
        }
}

/* make_q3_quants(n, nmax, x, L, true) in G lanes (Q3_K's reference): lv receives levels + nmax. */
LANE_INLINE void search_q3(const int n, const int G, const float *restrict x, const int nmax, float *restrict lv,
                           float *restrict scale) {
    float ww[MAX_CELLS], wx[MAX_CELLS];
    float amax[MAX_LANES], mx[MAX_LANES], iscale[MAX_LANES], sumlx[MAX_LANES], suml2[MAX_LANES];
    lane_signed_max(x, n, G, amax, mx);
    for (int g = 0; g < G; g++) {
        iscale[g] = (float)(-nmax) / mx[g];
        sumlx[g] = suml2[g] = 0.0f;
    }
    for (int i = 0; i < n; i++)
        for (int g = 0; g < G; g++) {
            const int c = i * G + g;
            ww[c] = x[c] * x[c];
            wx[c] = ww[c] * x[c];
            const float l = (float)clamp_int(nearest(iscale[g] * x[c]), -nmax, nmax - 1);
            lv[c] = l;
            sumlx[g] += wx[c] * l;
            suml2[g] += ww[c] * l * l;
        }
    for (int pass = 0; pass < 5; pass++) { /* a pass without a change would repeat itself: ggml stops */
        int changed = 0;
        for (int i = 0; i < n; i++)
            for (int g = 0; g < G; g++) {
                const int c = i * G + g;
                const float li = lv[c];
                const float slx = sumlx[g] - wx[c] * li;
                const float sl2 = suml2[g] - ww[c] * li * li;
                const float nl = (float)clamp_int(nearest(x[c] * sl2 / slx), -nmax, nmax - 1);
                const float slx_new = slx + wx[c] * nl;
                const float sl2_new = sl2 + ww[c] * nl * nl;
                const int take = slx > 0.0f && nl != li && sl2_new > 0.0f &&
                                 slx_new * slx_new * suml2[g] > sumlx[g] * sumlx[g] * sl2_new;
                lv[c] = take ? nl : li;
                sumlx[g] = take ? slx_new : sumlx[g];
                suml2[g] = take ? sl2_new : suml2[g];
                changed |= take;
            }
        if (!changed) break;
    }
    for (int g = 0; g < G; g++) {
        const int zero = amax[g] < GROUP_MAX_EPS;
        scale[g] = zero ? 0.0f : (suml2[g] > 0.0f ? sumlx[g] / suml2[g] : 0.0f);
        for (int i = 0; i < n; i++) lv[i * G + g] = zero ? 0.0f : lv[i * G + g] + (float)nmax;
    }
}

/* make_qkx2_quants / make_qkx3_quants (the same steps for finite input) in G lanes: levels in
 * [0, nmax] with a scale and a minimum; lv receives the levels, scale and neg_min (-min). */
LANE_INLINE void search_qkx(const int n, const int G, const float *restrict x, const float *restrict w, const int nmax,
                            const float rmin, const float rdelta, const int nstep, const int mad,
                            float *restrict lv, float *restrict scale, float *restrict neg_min) {
    float tl[MAX_CELLS];
    float mn[MAX_LANES], mx[MAX_LANES], sum_w[MAX_LANES], sum_x[MAX_LANES], best[MAX_LANES], iscale[MAX_LANES];
    float sum_l[MAX_LANES], sum_l2[MAX_LANES], sum_xl[MAX_LANES], det[MAX_LANES], tscale[MAX_LANES], tmin[MAX_LANES];
    float err[MAX_LANES];
    for (int g = 0; g < G; g++) {
        mn[g] = mx[g] = x[g];
        sum_w[g] = w[g];
        sum_x[g] = w[g] * x[g];
    }
    for (int i = 1; i < n; i++)
        for (int g = 0; g < G; g++) {
            const int c = i * G + g;
            mn[g] = x[c] < mn[g] ? x[c] : mn[g];
            mx[g] = x[c] > mx[g] ? x[c] : mx[g];
            sum_w[g] += w[c];
            sum_x[g] += w[c] * x[c];
        }
    for (int g = 0; g < G; g++) {
        mn[g] = mn[g] > 0.0f ? 0.0f : mn[g];
        iscale[g] = (float)nmax / (mx[g] - mn[g]);
        scale[g] = 1.0f / iscale[g];
        best[g] = 0.0f;
    }
    for (int i = 0; i < n; i++)
        for (int g = 0; g < G; g++) {
            const int c = i * G + g;
            const float l = (float)clamp_int(nearest(iscale[g] * (x[c] - mn[g])), 0, nmax);
            lv[c] = l;
            const float diff = scale[g] * l + mn[g] - x[c];
            best[g] += w[c] * (mad ? fabsf(diff) : diff * diff);
        }
    for (int step = 0; step <= nstep; step++) {
        for (int g = 0; g < G; g++) {
            iscale[g] = (rmin + rdelta * (float)step + (float)nmax) / (mx[g] - mn[g]);
            sum_l[g] = sum_l2[g] = sum_xl[g] = 0.0f;
        }
        for (int i = 0; i < n; i++)
            for (int g = 0; g < G; g++) {
                const int c = i * G + g;
                const float l = (float)clamp_int(nearest(iscale[g] * (x[c] - mn[g])), 0, nmax);
                tl[c] = l;
                const float wl = w[c] * l;
                sum_l[g] += wl;
                sum_l2[g] += wl * l;
                sum_xl[g] += wl * x[c];
            }
        for (int g = 0; g < G; g++) {
            det[g] = sum_w[g] * sum_l2[g] - sum_l[g] * sum_l[g];
            const float s = (sum_w[g] * sum_xl[g] - sum_x[g] * sum_l[g]) / det[g];
            const float m = (sum_l2[g] * sum_x[g] - sum_l[g] * sum_xl[g]) / det[g];
            tmin[g] = m > 0.0f ? 0.0f : m;
            tscale[g] = m > 0.0f ? sum_xl[g] / sum_l2[g] : s;
            err[g] = 0.0f;
        }
        for (int i = 0; i < n; i++)
            for (int g = 0; g < G; g++) {
                const int c = i * G + g;
                const float diff = tscale[g] * tl[c] + tmin[g] - x[c];
                err[g] += w[c] * (mad ? fabsf(diff) : diff * diff);
            }
        int any = 0;
        for (int g = 0; g < G; g++) {
            const int better = det[g] > 0.0f && err[g] < best[g];
            det[g] = better ? 1.0f : 0.0f; /* reused as the lane's "take" flag */
            best[g] = better ? err[g] : best[g];
            scale[g] = better ? tscale[g] : scale[g];
            mn[g] = better ? tmin[g] : mn[g];
            any |= better;
        }
        if (any)
            for (int c = 0; c < n * G; c++) lv[c] = det[c % G] != 0.0f ? tl[c] : lv[c];
    }
    /* a flat lane (max == min): levels 0, scale 0; its trials never won (all levels 0: det = 0) */
    for (int g = 0; g < G; g++) {
        const int flat = mx[g] == mn[g];
        scale[g] = flat ? 0.0f : scale[g];
        neg_min[g] = -mn[g];
        for (int i = 0; i < n; i++) lv[i * G + g] = flat ? 0.0f : lv[i * G + g];
    }
}

/* make_qp_quants(n, nmax, x, L, w) for one group (the sub-block scales or minimums of a
 * super-block): L as ggml stores it (uint8), returns the scale. */
static float search_qp(const int n, const int nmax, const float *restrict x, const float *restrict w, uint8_t *restrict L) {
    float mx = 0.0f;
    for (int i = 0; i < n; i++) mx = mx > x[i] ? mx : x[i];
    if (mx < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)nmax / mx;
    const float scale = 1.0f / iscale;
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)(uint8_t)nearest(iscale * x[i]);
        best += w[i] * diff * diff;
    }
    for (int k = -4; k <= 4; k++) {
        if (k == 0) continue;
        const float trial = (0.1f * (float)k + (float)nmax) / mx, trial_scale = 1.0f / trial;
        float mse = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = nearest(trial * x[i]);
            const float diff = x[i] - trial_scale * (float)(l < nmax ? l : nmax);
            mse += w[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = trial;
        }
    }
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = nearest(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float li = (float)L[i];
            float slx = sumlx - w[i] * x[i] * li;
            float sl2 = suml2 - w[i] * li * li;
            if (slx > 0.0f && sl2 > 0.0f) {
                int nl = nearest(x[i] * sl2 / slx);
                nl = nl < nmax ? nl : nmax;
                if (nl != (int)L[i]) {
                    slx += w[i] * x[i] * (float)nl;
                    sl2 += w[i] * (float)nl * (float)nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = 1;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---------------------------------------------------------------------------------- */
/* K-quant pieces                                                                     */

/* The importance weights qw * sqrtf(sigma2 + x * x), position-major like t, with sigma2 =
 * factor * sum(x * x) / 256 over the super-block x. */
LANE_INLINE void kq_weights(const float *restrict x, const float *restrict t, const float *restrict qw, int n, int G,
                            float factor, float *restrict w) {
    float sumx2 = 0.0f;
    for (int j = 0; j < SUPER; j++) sumx2 += x[j] * x[j];
    const float sigma2 = factor * sumx2 / (float)SUPER;
    float q[SUPER];
    to_lanes(qw, n, G, q);
    for (int c = 0; c < n * G; c++) w[c] = q[c] * sqrtf(sigma2 + t[c] * t[c]);
}

/* Per lane: the in-order sum of its weights (ggml's sw[j]). */
LANE_INLINE void lane_sums(const float *restrict w, int n, int G, float *restrict s) {
    for (int g = 0; g < G; g++) s[g] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < G; g++) s[g] += w[i * G + g];
}

/* ggml's last pass: where the stored sub-block scale d[g] is non-zero the level is
 * nearest_int((x + m) / d) clipped (plus offset); elsewhere the search's level stays. Writes
 * the levels in element order (L[g * n + i]). */
LANE_INLINE void requantize(const float *restrict t, const float *restrict lv, int n, int G, const float *restrict d,
                            const float *restrict m, int lo, int hi, int offset, uint8_t *restrict L) {
    for (int g = 0; g < G; g++)
        for (int i = 0; i < n; i++) {
            const int c = i * G + g;
            const float v = m ? t[c] + m[g] : t[c];
            L[g * n + i] = (uint8_t)(d[g] != 0.0f ? clamp_int(nearest(v / d[g]), lo, hi) + offset : (int)lv[c]);
        }
}

/* 256 levels < 4 -> 64 bytes: byte 32h + l holds levels 128h + l + 32k at bits 2k. */
static inline void pack_crumbs(const uint8_t *restrict L, uint8_t *restrict qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
        }
}

/* The positive maximum from 0 (ggml's `if (v > max) max = v`). */
static inline float positive_max(const float *restrict v, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* The first value of largest magnitude (0 if none is non-zero; NaN never taken). */
static inline float first_max_abs(const float *restrict v, int n, float *amax_out) {
    float amax = 0.0f, mx = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(v[i]) > amax) {
            amax = fabsf(v[i]);
            mx = v[i];
        }
    if (amax_out) *amax_out = amax;
    return mx;
}

/* ---------------------------------------------------------------------------------- */
/* Q2_K: 16 sub-blocks of 16, 4-bit scales and mins                                    */

static void q2_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    float t[SUPER], w[SUPER], lv[SUPER], scales[16], mins[16], d[16], m[16];
    uint8_t sc[16], L[SUPER];
    to_lanes(x, 16, 16, t);
    float dm, mm;
    if (!qw) {
        for (int c = 0; c < SUPER; c++) w[c] = fabsf(t[c]);
        search_qkx(16, 16, t, w, 3, -0.5f, 0.1f, 15, 1, lv, scales, mins);
        const float max_scale = positive_max(scales, 16), max_min = positive_max(mins, 16);
        for (int j = 0; j < 16; j++) {
            sc[j] = max_scale > 0.0f ? (uint8_t)nearest(15.0f / max_scale * scales[j]) : 0;
            if (max_min > 0.0f) sc[j] |= (uint8_t)((unsigned)nearest(15.0f / max_min * mins[j]) << 4);
        }
        dm = max_scale > 0.0f ? max_scale / 15.0f : 0.0f;
        mm = max_min > 0.0f ? max_min / 15.0f : 0.0f;
    } else {
        float sw[16];
        uint8_t ls[16], lm[16];
        kq_weights(x, t, qw, 16, 16, 1.0f, w);
        lane_sums(w, 16, 16, sw);
        search_qkx(16, 16, t, w, 3, -0.9f, 0.05f, 36, 0, lv, scales, mins);
        dm = search_qp(16, 15, scales, sw, ls);
        mm = search_qp(16, 15, mins, sw, lm);
        for (int j = 0; j < 16; j++) sc[j] = (uint8_t)(ls[j] | (lm[j] << 4));
    }
    dm = put_scale(b + 80, dm);
    mm = put_scale(b + 82, mm);
    for (int j = 0; j < 16; j++) {
        d[j] = dm * (float)(sc[j] & 15);
        m[j] = mm * (float)(sc[j] >> 4);
    }
    requantize(t, lv, 16, 16, d, m, 0, 3, 0, L);
    memcpy(b, sc, 16);
    pack_crumbs(L, b + 16);
}

/* ---------------------------------------------------------------------------------- */
/* Q3_K: 16 sub-blocks of 16, signed 6-bit scales, levels -4..3                       */

static void q3_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    float t[SUPER], lv[SUPER], scales[16], d[16];
    int ls[16];
    uint8_t L[SUPER];
    float dq;
    to_lanes(x, 16, 16, t);
    if (!qw) {
        search_q3(16, 16, t, 4, lv, scales);
        const float max_scale = first_max_abs(scales, 16, NULL);
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; j++)
            ls[j] = max_scale != 0.0f ? clamp_int((int8_t)nearest(iscale * scales[j]), -32, 31) + 32 : 0;
        dq = max_scale != 0.0f ? 1.0f / iscale : 0.0f;
    } else {
        float w[SUPER], sw[16], lsf[16];
        kq_weights(x, t, qw, 16, 16, 2.0f, w);
        lane_sums(w, 16, 16, sw);
        search_qx(16, 16, t, w, 4, lv, scales);
        search_qx(16, 1, scales, sw, 32, lsf, &dq);
        for (int j = 0; j < 16; j++) ls[j] = (int)lsf[j];
    }
    uint8_t *sc = b + 96;
    memset(sc, 0, 12);
    for (int j = 0; j < 16; j++) {
        sc[j & 7] |= (uint8_t)((ls[j] & 15) << (j < 8 ? 0 : 4));
        sc[8 + (j & 3)] |= (uint8_t)((ls[j] >> 4) << (2 * (j >> 2)));
    }
    dq = put_scale(b + 108, dq);
    for (int j = 0; j < 16; j++) {
        const int low = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
        d[j] = dq * (float)((int8_t)(low | (((sc[8 + (j & 3)] >> (2 * (j >> 2))) & 3) << 4)) - 32);
    }
    requantize(t, lv, 16, 16, d, NULL, -4, 3, 4, L);
    memset(b, 0, 32);
    for (int j = 0; j < SUPER; j++)
        if (L[j] > 3) {
            b[j & 31] |= (uint8_t)(1u << (j >> 5));
            L[j] -= 4;
        }
    pack_crumbs(L, b + 32);
}

/* ---------------------------------------------------------------------------------- */
/* Q4_K, Q5_K: 8 sub-blocks of 32, 6-bit scales and mins                              */

static void q45_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b, const int nmax) {
    float t[SUPER], w[SUPER], lv[SUPER], scales[8], mins[8], d[8], m[8];
    uint8_t ls[8], lm[8], L[SUPER];
    float dq, mq;
    to_lanes(x, 32, 8, t);
    if (!qw) {
        float sx2[8];
        for (int g = 0; g < 8; g++) sx2[g] = 0.0f;
        for (int i = 0; i < 32; i++)
            for (int g = 0; g < 8; g++) sx2[g] += t[i * 8 + g] * t[i * 8 + g];
        for (int g = 0; g < 8; g++) sx2[g] = sqrtf(sx2[g] / 32.0f);
        for (int c = 0; c < SUPER; c++) w[c] = sx2[c & 7] + fabsf(t[c]);
        if (nmax == 15)
            search_qkx(32, 8, t, w, 15, -1.0f, 0.1f, 20, 0, lv, scales, mins);
        else
            search_qkx(32, 8, t, w, 31, -0.5f, 0.1f, 15, 0, lv, scales, mins);
        const float max_scale = positive_max(scales, 8), max_min = positive_max(mins, 8);
        const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; j++) {
            const uint8_t s = (uint8_t)nearest(inv_scale * scales[j]), mm = (uint8_t)nearest(inv_min * mins[j]);
            ls[j] = s < 63 ? s : 63;
            lm[j] = mm < 63 ? mm : 63;
        }
        dq = max_scale / 63.0f;
        mq = max_min / 63.0f;
    } else {
        float sw[8];
        kq_weights(x, t, qw, 32, 8, 2.0f, w);
        lane_sums(w, 32, 8, sw);
        search_qkx(32, 8, t, w, nmax, -0.9f, 0.05f, 36, 0, lv, scales, mins);
        dq = search_qp(8, 63, scales, sw, ls);
        mq = search_qp(8, 63, mins, sw, lm);
        if (nmax == 31)
            for (int j = 0; j < 8; j++) {
                ls[j] = ls[j] < 63 ? ls[j] : 63;
                lm[j] = lm[j] < 63 ? lm[j] : 63;
            }
    }
    uint8_t *sc = b + 4;
    for (int j = 0; j < 4; j++) {
        sc[j] = (uint8_t)(ls[j] | ((ls[j + 4] >> 4) << 6));
        sc[j + 4] = (uint8_t)(lm[j] | ((lm[j + 4] >> 4) << 6));
        sc[j + 8] = (uint8_t)((ls[j + 4] & 15) | ((lm[j + 4] & 15) << 4));
    }
    dq = put_scale(b, dq);
    mq = put_scale(b + 2, mq);
    for (int j = 0; j < 8; j++) { /* the 6-bit scale and min of sub-block j, as stored */
        const int s6 = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        const int m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        d[j] = dq * (float)s6;
        m[j] = mq * (float)m6;
    }
    requantize(t, lv, 32, 8, d, m, 0, nmax, 0, L);
    if (nmax == 15) {
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) b[16 + 32 * k + l] = (uint8_t)(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
    } else {
        uint8_t *qh = b + 16, *ql = b + 48;
        memset(qh, 0, 32);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t a = L[64 * k + l], c = L[64 * k + 32 + l];
                qh[l] |= (uint8_t)(((a >> 4) << (2 * k)) | ((c >> 4) << (2 * k + 1)));
                ql[32 * k + l] = (uint8_t)((a & 15) | ((c & 15) << 4));
            }
    }
}

/* ---------------------------------------------------------------------------------- */
/* Q6_K: 16 sub-blocks of 16, int8 scales, levels -32..31                             */

static void q6_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    float t[SUPER], lv[SUPER], scales[16], d[16];
    uint8_t L[SUPER];
    to_lanes(x, 16, 16, t);
    if (qw) {
        float q[SUPER];
        to_lanes(qw, 16, 16, q);
        search_qx(16, 16, t, q, 32, lv, scales);
    } else {
        search_qx(16, 16, t, NULL, 32, lv, scales);
    }
    float amax;
    const float max_scale = first_max_abs(scales, 16, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        return;
    }
    const float iscale = -128.0f / max_scale;
    const float dq = put_scale(b + 208, 1.0f / iscale);
    int8_t *sc = (int8_t *)(b + 192);
    for (int j = 0; j < 16; j++) {
        const int l = nearest(iscale * scales[j]);
        sc[j] = (int8_t)(l < 127 ? l : 127);
        d[j] = dq * (float)sc[j];
    }
    requantize(t, lv, 16, 16, d, NULL, -32, 31, 32, L);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = L + 128 * h + l;
            b[64 * h + l] = (uint8_t)((e[0] & 15) | ((e[64] & 15) << 4));
            b[64 * h + 32 + l] = (uint8_t)((e[32] & 15) | ((e[96] & 15) << 4));
            b[128 + 32 * h + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
        }
}

/* ---------------------------------------------------------------------------------- */
/* Entry points: block quantizers (ggml's *_ref) and row quantizers (ggml_quantize_chunk) */

typedef void (*super_block_fn)(const float *restrict x, const float *restrict qw, uint8_t *restrict b);

static inline void super_blocks(super_block_fn fn, const float *restrict x, uint8_t *restrict b, Py_ssize_t nb,
                                int type_size) {
    for (Py_ssize_t i = 0; i < nb; i++) fn(x + SUPER * i, NULL, b + type_size * i);
}

/* Without weights ggml quantizes the rows as one run of blocks; with them row by row, each
 * block weighted by the importance of its columns. */
static inline void super_block_rows(super_block_fn fn, const float *restrict x, uint8_t *restrict y, int64_t nrows,
                                    int64_t n_per_row, const float *restrict imatrix, int type_size) {
    const int64_t nb = n_per_row / SUPER;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t i = 0; i < nb; i++)
            fn(x + r * n_per_row + SUPER * i, imatrix ? imatrix + SUPER * i : NULL, y + (r * nb + i) * type_size);
}

static void q4_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) { q45_k_block(x, qw, b, 15); }
static void q5_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) { q45_k_block(x, qw, b, 31); }

#define K_QUANT_ENTRIES(name, block, size)                                                                      \
    WIDE void q_##name(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {                          \
        super_blocks(block, x, b, nb, size);                                                                    \
    }                                                                                                           \
    WIDE void qr_##name(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,        \
                        const float *restrict imatrix) {                                                        \
        super_block_rows(block, x, y, nrows, n_per_row, imatrix, size);                                         \
    }

K_QUANT_ENTRIES(q2_k, q2_k_block, 84)
K_QUANT_ENTRIES(q3_k, q3_k_block, 110)
K_QUANT_ENTRIES(q4_k, q4_k_block, 144)
K_QUANT_ENTRIES(q5_k, q5_k_block, 176)
K_QUANT_ENTRIES(q6_k, q6_k_block, 210)

/* ---------------------------------------------------------------------------------- */
/* Q4_0, Q4_1, Q5_0, Q5_1 with importance weights                                      */
/* Blocks of 32 weighted by imatrix * sqrtf(sigma2 + x * x), sigma2 the mean square of the whole
 * row; eight blocks are searched together (a short last group repeats its first block). */

#define LEGACY_LANES 8

typedef void (*legacy_pack_fn)(const uint8_t *restrict L, float d, float neg_min, uint8_t *restrict b);

static void pack_q4_0(const uint8_t *restrict L, float d, float neg_min, uint8_t *restrict b) {
    (void)neg_min;
    wr16(b, scale_half(d));
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void pack_q4_1(const uint8_t *restrict L, float d, float neg_min, uint8_t *restrict b) {
    wr16(b, scale_half(d));
    wr16(b + 2, scale_half(-neg_min));
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static inline void pack_q5(const uint8_t *restrict L, uint8_t *restrict qh, uint8_t *restrict qs) {
    uint32_t bits = 0;
    for (int j = 0; j < 32; j++) bits |= (uint32_t)((L[j] >> 4) & 1) << j;
    wr32(qh, bits);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 15) | ((L[j + 16] & 15) << 4));
}

static void pack_q5_0(const uint8_t *restrict L, float d, float neg_min, uint8_t *restrict b) {
    (void)neg_min;
    wr16(b, scale_half(d));
    pack_q5(L, b + 2, b + 6);
}

static void pack_q5_1(const uint8_t *restrict L, float d, float neg_min, uint8_t *restrict b) {
    wr16(b, scale_half(d));
    wr16(b + 2, scale_half(-neg_min));
    pack_q5(L, b + 4, b + 8);
}

/* One group of up to 8 blocks of a row: lanes, weights, search, pack. */
LANE_INLINE void legacy_group(const float *restrict x, const float *restrict qw, int count, float sigma2, int nmax,
                              int with_min, legacy_pack_fn pack, int type_size, uint8_t *restrict y) {
    enum { G = LEGACY_LANES };
    float t[32 * G], q[32 * G], w[32 * G], lv[32 * G], scale[G], neg_min[G];
    for (int g = 0; g < G; g++) { /* a missing block repeats block 0 (its result is dropped) */
        const int s = g < count ? g : 0;
        for (int i = 0; i < 32; i++) {
            t[i * G + g] = x[32 * s + i];
            q[i * G + g] = qw[32 * s + i];
        }
    }
    for (int c = 0; c < 32 * G; c++) w[c] = q[c] * sqrtf(sigma2 + t[c] * t[c]);
    if (with_min)
        search_qkx(32, G, t, w, nmax, -0.9f, 0.05f, 36, 0, lv, scale, neg_min);
    else
        search_qx(32, G, t, w, nmax, lv, scale);
    for (int g = 0; g < count; g++) {
        uint8_t L[32];
        for (int i = 0; i < 32; i++) L[i] = (uint8_t)(int)lv[i * G + g];
        pack(L, scale[g], with_min ? neg_min[g] : 0.0f, y + type_size * g);
    }
}

LANE_INLINE void legacy_rows(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                             const float *restrict imatrix, int nmax, int with_min, legacy_pack_fn pack, int type_size) {
    const int64_t nb = n_per_row / 32;
    for (int64_t r = 0; r < nrows; r++, x += n_per_row, y += nb * type_size) {
        float sum_x2 = 0.0f;
        for (int64_t j = 0; j < n_per_row; j++) sum_x2 += x[j] * x[j];
        const float sigma2 = sum_x2 / (float)n_per_row;
        for (int64_t i = 0; i < nb; i += LEGACY_LANES) {
            const int count = nb - i < LEGACY_LANES ? (int)(nb - i) : LEGACY_LANES;
            legacy_group(x + 32 * i, imatrix + 32 * i, count, sigma2, nmax, with_min, pack, type_size, y + type_size * i);
        }
    }
}

#define LEGACY_ENTRY(name, nmax, with_min, size)                                                                 \
    WIDE void qr_##name(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,         \
                        const float *restrict imatrix) {                                                         \
        if (!imatrix)                                                                                            \
            q_##name(x, y, (Py_ssize_t)(nrows * n_per_row / 32));                                                \
        else                                                                                                     \
            legacy_rows(x, y, nrows, n_per_row, imatrix, nmax, with_min, pack_##name, size);                    \
    }

LEGACY_ENTRY(q4_0, 8, 0, 18)
LEGACY_ENTRY(q4_1, 15, 1, 20)
LEGACY_ENTRY(q5_0, 16, 0, 22)
LEGACY_ENTRY(q5_1, 31, 1, 24)

/* ---------------------------------------------------------------------------------- */
/* IQ4_NL, IQ4_XS                                                                      */
/* Blocks of 32 on the non-linear levels kvalues_iq4nl: each block's scale is fitted by least */
/* squares for 16 trial scales; IQ4_XS then stores the eight scales of a super-block as 6-bit */
/* multiples of one half.                                                                      */

static const float IQ4_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ggml's best_index_int8 on kvalues_iq4nl: the nearest level's index, the upper one on a tie
 * (for NaN, 15, where ggml's bisection ends). Branch-free: lo counts the levels 1-14 that v is
 * not below, which is the bisection's lower bound. */
static inline int iq4_index(float v, float *level) {
    int lo = 0;
    for (int k = 1; k < 15; k++) lo += !(v < IQ4_LEVELS[k]);
    const float a = IQ4_LEVELS[lo], b = IQ4_LEVELS[lo + 1];
    const int up = !(v - a < b - v);
    *level = up ? b : a;
    return lo + up;
}

/* The fitted scale of G blocks (lanes) for trial inverse scales iscale[g]; returns sums. */
LANE_INLINE void iq4_fit(const float *restrict t, const float *restrict w, const float *restrict iscale, int G,
                         float *restrict sumqx, float *restrict sumq2, uint8_t *restrict idx) {
    for (int g = 0; g < G; g++) sumqx[g] = sumq2[g] = 0.0f;
    for (int i = 0; i < 32; i++)
        for (int g = 0; g < G; g++) {
            const int c = i * G + g;
            float q;
            const int k = iq4_index(iscale[g] * t[c], &q);
            if (idx) idx[c] = (uint8_t)k;
            const float wq = w[c] * q;
            sumqx[g] += wq * t[c];
            sumq2[g] += wq * q;
        }
}

/* quantize_row_iq4_nl_impl's first part for G blocks of 32: the scale of each (0 below
 * GROUP_MAX_EPS); ntry < 0 is the reference (no trials; first-pass levels into idx). */
LANE_INLINE void iq4_scales(const float *restrict t, const float *restrict w, int G, int ntry, float *restrict d,
                            uint8_t *restrict idx) {
    float amax[MAX_LANES], mx[MAX_LANES], iscale[MAX_LANES], sumqx[MAX_LANES], sumq2[MAX_LANES], best[MAX_LANES];
    lane_signed_max(t, 32, G, amax, mx);
    for (int g = 0; g < G; g++) iscale[g] = 1.0f / ((ntry > 0 ? -mx[g] : mx[g]) / -127.0f);
    iq4_fit(t, w, iscale, G, sumqx, sumq2, idx);
    for (int g = 0; g < G; g++) {
        d[g] = sumq2[g] > 0.0f ? sumqx[g] / sumq2[g] : 0.0f;
        best[g] = d[g] * sumqx[g];
    }
    for (int k = -ntry; k <= ntry; k++) {
        for (int g = 0; g < G; g++) iscale[g] = (float)(k - 127) / mx[g];
        iq4_fit(t, w, iscale, G, sumqx, sumq2, NULL);
        for (int g = 0; g < G; g++) {
            const int better = sumq2[g] > 0.0f && sumqx[g] * sumqx[g] > best[g] * sumq2[g];
            d[g] = better ? sumqx[g] / sumq2[g] : d[g];
            best[g] = better ? d[g] * sumqx[g] : best[g];
        }
    }
    for (int g = 0; g < G; g++) d[g] = amax[g] < GROUP_MAX_EPS ? 0.0f : d[g];
}

/* Levels of G blocks for inverse scales id[g], packed two per byte into q (16 bytes per block). */
LANE_INLINE void iq4_pack(const float *restrict t, const float *restrict id, int G, uint8_t *restrict q, int stride) {
    uint8_t L[32 * MAX_LANES];
    for (int i = 0; i < 32; i++)
        for (int g = 0; g < G; g++) {
            float lv;
            L[g * 32 + i] = (uint8_t)iq4_index(id[g] * t[i * G + g], &lv);
        }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < 16; j++) q[stride * g + j] = (uint8_t)(L[g * 32 + j] | (L[g * 32 + 16 + j] << 4));
}

/* The weights of G blocks of 32 at x: qw * sqrtf(sigma2 + x * x) with sigma2 twice the mean
 * square of the super-block (size elements at sb), or x * x without importance. */
LANE_INLINE void iq4_weights(const float *restrict t, const float *restrict qw, const float *restrict sb, int size,
                             int G, const int *restrict src, float *restrict w) {
    if (!qw) {
        for (int c = 0; c < 32 * G; c++) w[c] = t[c] * t[c];
        return;
    }
    float sigma2[MAX_LANES];
    for (int g = 0; g < G; g++) {
        const float *s = sb + (size == 32 ? 32 * src[g] : 0);
        float acc = 0.0f;
        for (int j = 0; j < size; j++) acc += s[j] * s[j];
        sigma2[g] = acc * (2.0f / (float)size);
    }
    for (int i = 0; i < 32; i++)
        for (int g = 0; g < G; g++) {
            const int c = i * G + g;
            w[c] = qw[32 * src[g] + i] * sqrtf(sigma2[g] + t[c] * t[c]);
        }
}

#define IQ4_LANES 8

/* IQ4_NL: up to 8 blocks of 32 at x (weights qw for them, or NULL). */
static void iq4_nl_group(const float *restrict x, const float *restrict qw, int count, uint8_t *restrict y) {
    enum { G = IQ4_LANES };
    float t[32 * G], w[32 * G], d[G], id[G];
    int src[G];
    for (int g = 0; g < G; g++) src[g] = g < count ? g : 0;
    for (int i = 0; i < 32; i++)
        for (int g = 0; g < G; g++) t[i * G + g] = x[32 * src[g] + i];
    iq4_weights(t, qw, x, 32, G, src, w);
    iq4_scales(t, w, G, 7, d, NULL);
    uint8_t q[18 * G];
    for (int g = 0; g < G; g++) {
        wr16(q + 18 * g, scale_half(d[g]));
        id[g] = d[g] != 0.0f ? 1.0f / d[g] : 0.0f;
    }
    iq4_pack(t, id, G, q + 2, 18);
    memcpy(y, q, (size_t)18 * count);
}

/* IQ4_XS: one super-block of 256 (8 blocks of 32). */
static void iq4_xs_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    enum { G = 8 };
    float t[SUPER], w[SUPER], s[G], id[G];
    const int src[G] = {0, 1, 2, 3, 4, 5, 6, 7};
    to_lanes(x, 32, G, t);
    iq4_weights(t, qw, x, SUPER, G, src, w);
    iq4_scales(t, w, G, 7, s, NULL);
    const float d = -first_max_abs(s, G, NULL) / 32.0f;
    wr16(b, scale_half(d));
    const float dinv = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t high = 0;
    memset(b + 4, 0, 4);
    for (int g = 0; g < G; g++) {
        const int l = clamp_int(nearest(dinv * s[g]), -32, 31);
        const float dl = d * (float)l;
        id[g] = dl != 0.0f ? 1.0f / dl : 0.0f;
        b[4 + g / 2] |= (uint8_t)(((l + 32) & 15) << (4 * (g & 1)));
        high |= (uint16_t)(((l + 32) >> 4) << (2 * g));
    }
    wr16(b + 2, high);
    iq4_pack(t, id, G, b + 8, 16);
}

WIDE void q_iq4_nl(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i += IQ4_LANES)
        iq4_nl_group(x + 32 * i, NULL, nb - i < IQ4_LANES ? (int)(nb - i) : IQ4_LANES, b + 18 * i);
}

WIDE void qr_iq4_nl(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                    const float *restrict imatrix) {
    const int64_t nb = n_per_row / 32;
    if (!imatrix) {
        q_iq4_nl(x, y, (Py_ssize_t)(nrows * nb));
        return;
    }
    for (int64_t r = 0; r < nrows; r++, x += n_per_row, y += 18 * nb)
        for (int64_t i = 0; i < nb; i += IQ4_LANES)
            iq4_nl_group(x + 32 * i, imatrix + 32 * i, nb - i < IQ4_LANES ? (int)(nb - i) : IQ4_LANES, y + 18 * i);
}

K_QUANT_ENTRIES(iq4_xs, iq4_xs_block, 136)

/* ---------------------------------------------------------------------------------- */
/* Input check                                                                         */

/* The index of the first NaN or infinity among n floats, or -1. */
WIDE Py_ssize_t first_nonfinite(const float *restrict x, Py_ssize_t n) {
    const Py_ssize_t step = 1024;
    for (Py_ssize_t i = 0; i < n; i += step) {
        const Py_ssize_t end = n - i < step ? n : i + step;
        uint32_t bad = 0;
        for (Py_ssize_t j = i; j < end; j++) bad |= (f32_bits(x[j]) & 0x7f800000u) == 0x7f800000u;
        if (bad)
            for (Py_ssize_t j = i; j < end; j++)
                if ((f32_bits(x[j]) & 0x7f800000u) == 0x7f800000u) return j;
    }
    return -1;
}
