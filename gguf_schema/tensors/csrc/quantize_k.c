/*
 * Searching quantizers of gguf_schema.tensors._kernels: the K-quants (Q2_K..Q6_K), the
 * importance-weighted paths of Q4_0, Q4_1, Q5_0, Q5_1, and IQ4_NL / IQ4_XS, with the bytes of
 * ggml's ggml_quantize_chunk (quantize_row_*_ref without an importance matrix, the weighted
 * searches with one).
 *
 * ggml searches each sub-block on its own: candidate scales, and for each a weighted sum over
 * the sub-block's elements, added one at a time (the order fixes the rounding, so it cannot be
 * changed). Here 8 or 16 sub-blocks are searched together, one per lane of a vector: their
 * elements are stored position-major (t[i] holds element i of 8 sub-blocks), every step of the
 * search is one vector operation, and each lane still adds its own terms in ggml's order. A
 * branch of ggml's code becomes a select per lane. Same float32 operations, same order: the
 * same bits, many sub-blocks at a time.
 *
 * Lane vectors are GCC/clang vector extensions (the compiler picks the instructions: AVX2 in
 * the WIDE copies, SSE2 otherwise, NEON on ARM); other compilers and the GGUF_SCHEMA_PORTABLE
 * build get the same operations as plain loops over 8 floats.
 */
#include "common.h"

#if defined(__GNUC__) || defined(__clang__)
#define LANE_INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define LANE_INLINE static __forceinline
#else
#define LANE_INLINE static inline
#endif

#define LANES 8                /* sub-blocks per lane vector */
#define MAX_NG 2               /* lane vectors searched side by side (16 sub-blocks) */
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
/* Lane vectors                                                                       */

#if !defined(GGUF_SCHEMA_PORTABLE) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9))
/* Operations are macros (statement expressions where an argument is used twice), so that no
 * vector is ever passed by value to a function: that keeps GCC's notes about the AVX calling
 * convention away, and every operation inline in whichever copy (AVX2 or not) uses it. */
typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
#define LANE(v, k) ((v)[k])
#define vset(f) ({ const float f_ = (f); (vf){f_, f_, f_, f_, f_, f_, f_, f_}; })
#define viset(a) ({ const int32_t a_ = (a); (vi){a_, a_, a_, a_, a_, a_, a_, a_}; })
#define vadd(a, b) ((a) + (b))
#define vsub(a, b) ((a) - (b))
#define vmul(a, b) ((a) * (b))
#define vdiv(a, b) ((a) / (b))
#define vlt(a, b) ((vi)((a) < (b)))
#define vgt(a, b) ((vi)((a) > (b)))
#define veq(a, b) ((vi)((a) == (b)))
#define vne(a, b) ((vi)((a) != (b)))
#define visub(a, b) ((a) - (b))
#define vand(a, b) ((a) & (b))
#define vor(a, b) ((a) | (b))
#define vnot(a) (~(a))
#define vsel(m, a, b) ({ const vi m_ = (m); (vf)((m_ & (vi)(a)) | (~m_ & (vi)(b))); })
#define vimax(a, b) ({ const vi a_ = (a), b_ = (b), m_ = a_ > b_; (m_ & a_) | (~m_ & b_); })
#define vimin(a, b) ({ const vi a_ = (a), b_ = (b), m_ = a_ < b_; (m_ & a_) | (~m_ & b_); })
#define vitof(a) __builtin_convertvector((a), vf)
#define vabs(a) ((vf)((vi)(a) & viset(0x7fffffff)))
#define vneg(a) ((vf)((vi)(a) ^ viset(INT32_MIN)))
#define vnear(v) ((((vi)((v) + vset(12582912.0f))) & viset(0x007fffff)) - viset(0x00400000))
#else
typedef struct { float v[LANES]; } vf;
typedef struct { int32_t v[LANES]; } vi;
#define LANE(x, k) ((x).v[k])
#define LANEWISE(T, expr) T r; for (int k = 0; k < LANES; k++) r.v[k] = (expr); return r
LANE_INLINE vf vset(float f) { LANEWISE(vf, f); }
LANE_INLINE vi viset(int32_t a) { LANEWISE(vi, a); }
LANE_INLINE vf vadd(vf a, vf b) { LANEWISE(vf, a.v[k] + b.v[k]); }
LANE_INLINE vf vsub(vf a, vf b) { LANEWISE(vf, a.v[k] - b.v[k]); }
LANE_INLINE vf vmul(vf a, vf b) { LANEWISE(vf, a.v[k] * b.v[k]); }
LANE_INLINE vf vdiv(vf a, vf b) { LANEWISE(vf, a.v[k] / b.v[k]); }
LANE_INLINE vi vlt(vf a, vf b) { LANEWISE(vi, a.v[k] < b.v[k] ? -1 : 0); }
LANE_INLINE vi vgt(vf a, vf b) { LANEWISE(vi, a.v[k] > b.v[k] ? -1 : 0); }
LANE_INLINE vi veq(vf a, vf b) { LANEWISE(vi, a.v[k] == b.v[k] ? -1 : 0); }
LANE_INLINE vi vne(vf a, vf b) { LANEWISE(vi, a.v[k] != b.v[k] ? -1 : 0); }
LANE_INLINE vi visub(vi a, vi b) { LANEWISE(vi, a.v[k] - b.v[k]); }
LANE_INLINE vi vimax(vi a, vi b) { LANEWISE(vi, a.v[k] > b.v[k] ? a.v[k] : b.v[k]); }
LANE_INLINE vi vimin(vi a, vi b) { LANEWISE(vi, a.v[k] < b.v[k] ? a.v[k] : b.v[k]); }
LANE_INLINE vi vand(vi a, vi b) { LANEWISE(vi, a.v[k] & b.v[k]); }
LANE_INLINE vi vor(vi a, vi b) { LANEWISE(vi, a.v[k] | b.v[k]); }
LANE_INLINE vi vnot(vi a) { LANEWISE(vi, ~a.v[k]); }
LANE_INLINE vf vsel(vi m, vf a, vf b) { LANEWISE(vf, m.v[k] ? a.v[k] : b.v[k]); }
LANE_INLINE vf vitof(vi a) { LANEWISE(vf, (float)a.v[k]); }
LANE_INLINE vf vabs(vf a) { LANEWISE(vf, fabsf(a.v[k])); }
LANE_INLINE vf vneg(vf a) { LANEWISE(vf, -a.v[k]); }
LANE_INLINE vi vnear(vf a) { LANEWISE(vi, nearest(a.v[k])); }
#endif

/* Whether any lane of a mask is set. */
LANE_INLINE int any_lane(const vi *restrict m) {
    int32_t r = 0;
    for (int k = 0; k < LANES; k++) r |= LANE(*m, k);
    return r != 0;
}
#define vany(m) any_lane(&(m))

/* nearest_int clamped to [lo, hi], as a float. */
#define vlevel(v, lo, hi) vitof(vimin(vimax(vnear(v), viset(lo)), viset(hi)))

/* Position-major lanes of ng * 8 groups of n elements: t[i * ng + q] holds element i of groups
 * 8q .. 8q + 7; group g starts at x + src[g] * n (src NULL: g). */
LANE_INLINE void load_lanes(const float *restrict x, int n, int ng, const int *restrict src, vf *restrict t) {
    for (int q = 0; q < ng; q++)
        for (int k = 0; k < LANES; k++) {
            const float *s = x + (src ? src[q * LANES + k] : q * LANES + k) * n;
            for (int i = 0; i < n; i++) LANE(t[i * ng + q], k) = s[i];
        }
}

/* ---------------------------------------------------------------------------------- */
/* The scale searches, in lanes: n positions, ng lane vectors, arrays indexed i * ng + q  */

/* Per lane: the largest magnitude and the first value that has it, from 0 (NaN never taken). */
LANE_INLINE void lanes_signed_max(const int n, const int ng, const vf *restrict x, vf *restrict amax, vf *restrict mx) {
    for (int q = 0; q < ng; q++) amax[q] = mx[q] = vset(0.0f);
    for (int i = 0; i < n; i++)
        for (int q = 0; q < ng; q++) {
            const vf v = x[i * ng + q], a = vabs(v);
            const vi take = vgt(a, amax[q]);
            amax[q] = vsel(take, a, amax[q]);
            mx[q] = vsel(take, v, mx[q]);
        }
}

/* make_qx_quants(n, nmax, x, L, 1, w) in lanes (w NULL: weights x * x): lv receives the levels
 * plus nmax, scale the scale of each lane. 19 trial scales: -nmax / max, then
 * -(nmax + 0.1 k) / max for k = -9..-1, 1..9. */
LANE_INLINE void search_qx(const int n, const int ng, const vf *restrict x, const vf *restrict w, const int nmax,
                           vf *restrict lv, vf *restrict scale) {
    vf ww[32 * MAX_NG], wx[32 * MAX_NG], tl[32 * MAX_NG];
    vf amax[MAX_NG], mx[MAX_NG], best[MAX_NG];
    const vf zero = vset(0.0f), top = vset((float)nmax);
    lanes_signed_max(n, ng, x, amax, mx);
    for (int q = 0; q < ng; q++) best[q] = zero; /* set by the first trial */
    for (int c = 0; c < n * ng; c++) {
        ww[c] = w ? w[c] : vmul(x[c], x[c]);
        wx[c] = vmul(ww[c], x[c]);
    }
    for (int step = 0; step <= 18; step++) {
        const int k = step <= 9 ? step - 10 : step - 9;
        const vf numerator = vset(step == 0 ? (float)(-nmax) : -((float)nmax + 0.1f * (float)k));
        vf iscale[MAX_NG], sumlx[MAX_NG], suml2[MAX_NG];
        for (int q = 0; q < ng; q++) {
            iscale[q] = vdiv(numerator, mx[q]);
            sumlx[q] = suml2[q] = zero;
        }
        for (int i = 0; i < n; i++)
            for (int q = 0; q < ng; q++) {
                const int c = i * ng + q;
                const vf l = vlevel(vmul(iscale[q], x[c]), -nmax, nmax - 1);
                tl[c] = l;
                sumlx[q] = vadd(sumlx[q], vmul(wx[c], l));
                suml2[q] = vadd(suml2[q], vmul(vmul(ww[c], l), l));
            }
        for (int q = 0; q < ng; q++) {
            const vf fit = vdiv(sumlx[q], suml2[q]);
            if (step == 0) {
                scale[q] = vsel(vne(suml2[q], zero), fit, zero);
                best[q] = vmul(scale[q], sumlx[q]);
                for (int i = 0; i < n; i++) lv[i * ng + q] = vadd(tl[i * ng + q], top);
                continue;
            }
            const vi better = vand(vgt(suml2[q], zero), vgt(vmul(sumlx[q], sumlx[q]), vmul(best[q], suml2[q])));
            if (!vany(better)) continue;
            scale[q] = vsel(better, fit, scale[q]);
            best[q] = vsel(better, vmul(scale[q], sumlx[q]), best[q]);
            for (int i = 0; i < n; i++) lv[i * ng + q] = vsel(better, vadd(tl[i * ng + q], top), lv[i * ng + q]);
        }
    }
    for (int q = 0; q < ng; q++) {
        const vi none = vlt(amax[q], vset(GROUP_MAX_EPS));
        scale[q] = vsel(none, zero, scale[q]);
        for (int i = 0; i < n; i++) lv[i * ng + q] = vsel(none, zero, lv[i * ng + q]);
    }
}

/* make_qkx2_quants / make_qkx3_quants (the same steps for finite input) in lanes: levels in
 * [0, nmax] with a scale and a minimum. lv receives the levels, scale and neg_min (-min). */
LANE_INLINE void search_qkx(const int n, const int ng, const vf *restrict x, const vf *restrict w, const int nmax,
                            const float rmin, const float rdelta, const int nstep, const int mad,
                            vf *restrict lv, vf *restrict scale, vf *restrict neg_min) {
    vf tl[32 * MAX_NG];
    vf mn[MAX_NG], mx[MAX_NG], sum_w[MAX_NG], sum_x[MAX_NG], best[MAX_NG];
    vi flat[MAX_NG];
    const vf zero = vset(0.0f), top = vset((float)nmax);
    for (int q = 0; q < ng; q++) {
        mn[q] = mx[q] = x[q];
        sum_w[q] = w[q];
        sum_x[q] = vmul(w[q], x[q]);
    }
    for (int i = 1; i < n; i++)
        for (int q = 0; q < ng; q++) {
            const int c = i * ng + q;
            mn[q] = vsel(vlt(x[c], mn[q]), x[c], mn[q]);
            mx[q] = vsel(vgt(x[c], mx[q]), x[c], mx[q]);
            sum_w[q] = vadd(sum_w[q], w[c]);
            sum_x[q] = vadd(sum_x[q], vmul(w[c], x[c]));
        }
    for (int q = 0; q < ng; q++) {
        mn[q] = vsel(vgt(mn[q], zero), zero, mn[q]);
        flat[q] = veq(mx[q], mn[q]);
        const vf iscale = vdiv(top, vsub(mx[q], mn[q]));
        scale[q] = vdiv(vset(1.0f), iscale);
        best[q] = zero;
        for (int i = 0; i < n; i++) {
            const int c = i * ng + q;
            const vf l = vlevel(vmul(iscale, vsub(x[c], mn[q])), 0, nmax);
            lv[c] = l;
            const vf diff = vsub(vadd(vmul(scale[q], l), mn[q]), x[c]);
            best[q] = vadd(best[q], vmul(w[c], mad ? vabs(diff) : vmul(diff, diff)));
        }
    }
    for (int step = 0; step <= nstep; step++) {
        const vf numerator = vset(rmin + rdelta * (float)step + (float)nmax);
        vf iscale[MAX_NG], sum_l[MAX_NG], sum_l2[MAX_NG], sum_xl[MAX_NG];
        for (int q = 0; q < ng; q++) {
            iscale[q] = vdiv(numerator, vsub(mx[q], mn[q]));
            sum_l[q] = sum_l2[q] = sum_xl[q] = zero;
        }
        for (int i = 0; i < n; i++)
            for (int q = 0; q < ng; q++) {
                const int c = i * ng + q;
                const vf l = vlevel(vmul(iscale[q], vsub(x[c], mn[q])), 0, nmax);
                tl[c] = l;
                const vf wl = vmul(w[c], l);
                sum_l[q] = vadd(sum_l[q], wl);
                sum_l2[q] = vadd(sum_l2[q], vmul(wl, l));
                sum_xl[q] = vadd(sum_xl[q], vmul(wl, x[c]));
            }
        vf det[MAX_NG], tscale[MAX_NG], tmin[MAX_NG], err[MAX_NG];
        for (int q = 0; q < ng; q++) {
            det[q] = vsub(vmul(sum_w[q], sum_l2[q]), vmul(sum_l[q], sum_l[q]));
            const vf s = vdiv(vsub(vmul(sum_w[q], sum_xl[q]), vmul(sum_x[q], sum_l[q])), det[q]);
            const vf m = vdiv(vsub(vmul(sum_l2[q], sum_x[q]), vmul(sum_l[q], sum_xl[q])), det[q]);
            const vi positive = vgt(m, zero);
            tmin[q] = vsel(positive, zero, m);
            tscale[q] = vsel(positive, vdiv(sum_xl[q], sum_l2[q]), s);
            err[q] = zero;
        }
        for (int i = 0; i < n; i++)
            for (int q = 0; q < ng; q++) {
                const int c = i * ng + q;
                const vf diff = vsub(vadd(vmul(tscale[q], tl[c]), tmin[q]), x[c]);
                err[q] = vadd(err[q], vmul(w[c], mad ? vabs(diff) : vmul(diff, diff)));
            }
        for (int q = 0; q < ng; q++) {
            const vi better = vand(vgt(det[q], zero), vlt(err[q], best[q]));
            if (!vany(better)) continue;
            best[q] = vsel(better, err[q], best[q]);
            scale[q] = vsel(better, tscale[q], scale[q]);
            mn[q] = vsel(better, tmin[q], mn[q]);
            for (int i = 0; i < n; i++) lv[i * ng + q] = vsel(better, tl[i * ng + q], lv[i * ng + q]);
        }
    }
    /* a flat lane (max == min): levels 0, scale 0; its trials never won (all levels 0: det = 0) */
    for (int q = 0; q < ng; q++) {
        scale[q] = vsel(flat[q], zero, scale[q]);
        neg_min[q] = vneg(mn[q]);
        for (int i = 0; i < n; i++) lv[i * ng + q] = vsel(flat[q], zero, lv[i * ng + q]);
    }
}

/* make_q3_quants(n, nmax, x, L, true) in lanes (Q3_K's reference): levels from -nmax / max,
 * then up to five passes moving single levels while the fit (weights x * x) improves. lv
 * receives the levels plus nmax. */
LANE_INLINE void search_q3(const int n, const int ng, const vf *restrict x, const int nmax, vf *restrict lv,
                           vf *restrict scale) {
    vf ww[16 * MAX_NG], wx[16 * MAX_NG];
    vf amax[MAX_NG], mx[MAX_NG], sumlx[MAX_NG], suml2[MAX_NG];
    const vf zero = vset(0.0f), top = vset((float)nmax);
    lanes_signed_max(n, ng, x, amax, mx);
    for (int q = 0; q < ng; q++) {
        const vf iscale = vdiv(vset((float)(-nmax)), mx[q]);
        sumlx[q] = suml2[q] = zero;
        for (int i = 0; i < n; i++) {
            const int c = i * ng + q;
            ww[c] = vmul(x[c], x[c]);
            wx[c] = vmul(ww[c], x[c]);
            const vf l = vlevel(vmul(iscale, x[c]), -nmax, nmax - 1);
            lv[c] = l;
            sumlx[q] = vadd(sumlx[q], vmul(wx[c], l));
            suml2[q] = vadd(suml2[q], vmul(vmul(ww[c], l), l));
        }
    }
    for (int pass = 0; pass < 5; pass++) { /* a pass without a change would repeat itself: ggml stops */
        vi changed = viset(0);
        for (int i = 0; i < n; i++)
            for (int q = 0; q < ng; q++) {
                const int c = i * ng + q;
                const vf li = lv[c];
                const vf slx = vsub(sumlx[q], vmul(wx[c], li));
                const vf sl2 = vsub(suml2[q], vmul(vmul(ww[c], li), li));
                const vf nl = vlevel(vdiv(vmul(x[c], sl2), slx), -nmax, nmax - 1);
                const vf slx_new = vadd(slx, vmul(wx[c], nl));
                const vf sl2_new = vadd(sl2, vmul(vmul(ww[c], nl), nl));
                const vi take = vand(vand(vgt(slx, zero), vne(nl, li)),
                                     vand(vgt(sl2_new, zero), vgt(vmul(vmul(slx_new, slx_new), suml2[q]),
                                                                  vmul(vmul(sumlx[q], sumlx[q]), sl2_new))));
                lv[c] = vsel(take, nl, li);
                sumlx[q] = vsel(take, slx_new, sumlx[q]);
                suml2[q] = vsel(take, sl2_new, suml2[q]);
                changed = vor(changed, take);
            }
        if (!vany(changed)) break;
    }
    for (int q = 0; q < ng; q++) {
        const vi none = vlt(amax[q], vset(GROUP_MAX_EPS));
        scale[q] = vsel(none, zero, vsel(vgt(suml2[q], zero), vdiv(sumlx[q], suml2[q]), zero));
        for (int i = 0; i < n; i++) lv[i * ng + q] = vsel(none, zero, vadd(lv[i * ng + q], top));
    }
}

/* The searches as the quantizers use them, one function per shape (positions x lane vectors),
 * each with an AVX2 copy where WIDE has one: the generic bodies above are inlined only here. */
#define QKX_SHAPE(n, ng)                                                                                        \
    WIDE static void search_qkx_##n##x##ng(const vf *restrict x, const vf *restrict w, int nmax, float rmin,    \
                                           float rdelta, int nstep, int mad, vf *restrict lv, vf *restrict s,   \
                                           vf *restrict m) {                                                     \
        search_qkx(n, ng, x, w, nmax, rmin, rdelta, nstep, mad, lv, s, m);                                      \
    }
#define QX_SHAPE(n, ng)                                                                                         \
    WIDE static void search_qx_##n##x##ng(const vf *restrict x, const vf *restrict w, int nmax, vf *restrict lv, \
                                          vf *restrict s) {                                                      \
        search_qx(n, ng, x, w, nmax, lv, s);                                                                     \
    }
QKX_SHAPE(16, 2)
QKX_SHAPE(32, 1)
QKX_SHAPE(32, 2)
QX_SHAPE(16, 1)
QX_SHAPE(16, 2)
QX_SHAPE(32, 2)

WIDE static void search_q3_16x2(const vf *restrict x, vf *restrict lv, vf *restrict s) { search_q3(16, 2, x, 4, lv, s); }

/* make_qp_quants(n, nmax, x, L, w) for one group (the sub-block scales or minimums of a
 * super-block; IQ2_XXS's scale search starts from it too): L as ggml stores it (uint8), returns
 * the scale. */
float search_qp(const int n, const int nmax, const float *restrict x, const float *restrict w, uint8_t *restrict L) {
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

/* The importance weights qw * sqrtf(sigma2 + x * x) of a super-block x, position-major like t,
 * with sigma2 = factor * sum(x * x) / 256 (summed in order). */
LANE_INLINE void kq_weights(const float *restrict x, const vf *restrict t, const float *restrict qw, int n, int ng,
                            float factor, vf *restrict w) {
    float sumx2 = 0.0f;
    for (int j = 0; j < SUPER; j++) sumx2 += x[j] * x[j];
    const vf sigma2 = vset(factor * sumx2 / (float)SUPER);
    load_lanes(qw, n, ng, NULL, w);
    for (int c = 0; c < n * ng; c++) {
        const vf s = vadd(sigma2, vmul(t[c], t[c]));
        for (int k = 0; k < LANES; k++) LANE(w[c], k) *= sqrtf(LANE(s, k));
    }
}

/* Per lane: the in-order sum of its weights (ggml's sw[j]), into s[8q + k]. */
LANE_INLINE void lane_sums(const vf *restrict w, int n, int ng, float *restrict s) {
    for (int q = 0; q < ng; q++) {
        vf acc = vset(0.0f);
        for (int i = 0; i < n; i++) acc = vadd(acc, w[i * ng + q]);
        for (int k = 0; k < LANES; k++) s[q * LANES + k] = LANE(acc, k);
    }
}

/* Lane vectors -> per-group floats v[8q + k], and back. */
LANE_INLINE void unlane(const vf *restrict a, int ng, float *restrict v) { memcpy(v, a, sizeof(vf) * (size_t)ng); }

LANE_INLINE void relane(const float *restrict v, int ng, vf *restrict a) { memcpy(a, v, sizeof(vf) * (size_t)ng); }

/* ggml's last pass: where the stored sub-block scale d is non-zero the level is
 * nearest_int((x + m) / d) clipped to [lo, hi] (plus offset); elsewhere the search's level
 * stays. Writes the levels in element order, L[(8q + k) * n + i]. */
LANE_INLINE void requantize(const vf *restrict t, const vf *restrict lv, int n, int ng, const float *restrict d,
                            const float *restrict m, int lo, int hi, int offset, uint8_t *restrict L) {
    vf dv[MAX_NG], mv[MAX_NG];
    relane(d, ng, dv);
    if (m) relane(m, ng, mv);
    for (int q = 0; q < ng; q++) {
        const vi use = vne(dv[q], vset(0.0f));
        for (int i = 0; i < n; i++) {
            const int c = i * ng + q;
            const vf v = m ? vadd(t[c], mv[q]) : t[c];
            const vf l = vsel(use, vadd(vlevel(vdiv(v, dv[q]), lo, hi), vset((float)offset)), lv[c]);
            for (int k = 0; k < LANES; k++) L[(q * LANES + k) * n + i] = (uint8_t)(int)LANE(l, k);
        }
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

/* ---------------------------------------------------------------------------------- */
/* Q2_K: 16 sub-blocks of 16, 4-bit scales and mins                                    */

static void q2_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    vf t[SUPER / LANES], w[SUPER / LANES], lv[SUPER / LANES], vs[2], vm[2];
    float scales[16], mins[16], d[16], m[16];
    uint8_t sc[16], L[SUPER];
    load_lanes(x, 16, 2, NULL, t);
    float dm, mm;
    if (!qw) {
        for (int c = 0; c < 32; c++) w[c] = vabs(t[c]);
        search_qkx_16x2(t, w, 3, -0.5f, 0.1f, 15, 1, lv, vs, vm);
        unlane(vs, 2, scales);
        unlane(vm, 2, mins);
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
        kq_weights(x, t, qw, 16, 2, 1.0f, w);
        lane_sums(w, 16, 2, sw);
        search_qkx_16x2(t, w, 3, -0.9f, 0.05f, 36, 0, lv, vs, vm);
        unlane(vs, 2, scales);
        unlane(vm, 2, mins);
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
    requantize(t, lv, 16, 2, d, m, 0, 3, 0, L);
    memcpy(b, sc, 16);
    pack_crumbs(L, b + 16);
}

/* ---------------------------------------------------------------------------------- */
/* Q3_K: 16 sub-blocks of 16, signed 6-bit scales, levels -4..3                       */

static void q3_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    vf t[SUPER / LANES], lv[SUPER / LANES], vs[2];
    float scales[16], d[16];
    int ls[16];
    uint8_t L[SUPER];
    float dq;
    load_lanes(x, 16, 2, NULL, t);
    if (!qw) {
        search_q3_16x2(t, lv, vs);
        unlane(vs, 2, scales);
        const float max_scale = signed_max(scales, 16);
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; j++)
            ls[j] = max_scale != 0.0f ? clamp_int((int8_t)nearest(iscale * scales[j]), -32, 31) + 32 : 0;
        dq = max_scale != 0.0f ? 1.0f / iscale : 0.0f;
    } else {
        vf w[SUPER / LANES], s[16], sw[16], lsv[16], dv;
        float swf[16];
        kq_weights(x, t, qw, 16, 2, 2.0f, w);
        lane_sums(w, 16, 2, swf);
        search_qx_16x2(t, w, 4, lv, vs);
        unlane(vs, 2, scales);
        for (int j = 0; j < 16; j++) { /* the one search over the 16 scales, in every lane */
            s[j] = vset(scales[j]);
            sw[j] = vset(swf[j]);
        }
        search_qx_16x1(s, sw, 32, lsv, &dv);
        for (int j = 0; j < 16; j++) ls[j] = (int)LANE(lsv[j], 0);
        dq = LANE(dv, 0);
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
    requantize(t, lv, 16, 2, d, NULL, -4, 3, 4, L);
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
    vf t[32], w[32], lv[32], vs, vm;
    float scales[8], mins[8], d[8], m[8];
    uint8_t ls[8], lm[8], L[SUPER];
    float dq, mq;
    load_lanes(x, 32, 1, NULL, t);
    if (!qw) {
        vf sx2 = vset(0.0f);
        for (int i = 0; i < 32; i++) sx2 = vadd(sx2, vmul(t[i], t[i]));
        sx2 = vdiv(sx2, vset(32.0f));
        for (int k = 0; k < LANES; k++) LANE(sx2, k) = sqrtf(LANE(sx2, k));
        for (int i = 0; i < 32; i++) w[i] = vadd(sx2, vabs(t[i]));
        if (nmax == 15)
            search_qkx_32x1(t, w, 15, -1.0f, 0.1f, 20, 0, lv, &vs, &vm);
        else
            search_qkx_32x1(t, w, 31, -0.5f, 0.1f, 15, 0, lv, &vs, &vm);
        unlane(&vs, 1, scales);
        unlane(&vm, 1, mins);
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
        kq_weights(x, t, qw, 32, 1, 2.0f, w);
        lane_sums(w, 32, 1, sw);
        search_qkx_32x1(t, w, nmax, -0.9f, 0.05f, 36, 0, lv, &vs, &vm);
        unlane(&vs, 1, scales);
        unlane(&vm, 1, mins);
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
    requantize(t, lv, 32, 1, d, m, 0, nmax, 0, L);
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

static void q4_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) { q45_k_block(x, qw, b, 15); }
static void q5_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) { q45_k_block(x, qw, b, 31); }

/* ---------------------------------------------------------------------------------- */
/* Q6_K: 16 sub-blocks of 16, int8 scales, levels -32..31                             */

static void q6_k_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    vf t[SUPER / LANES], lv[SUPER / LANES], vs[2];
    float scales[16], d[16];
    uint8_t L[SUPER];
    load_lanes(x, 16, 2, NULL, t);
    if (qw) {
        vf w[SUPER / LANES];
        load_lanes(qw, 16, 2, NULL, w);
        search_qx_16x2(t, w, 32, lv, vs);
    } else {
        search_qx_16x2(t, NULL, 32, lv, vs);
    }
    unlane(vs, 2, scales);
    const float max_scale = signed_max(scales, 16);
    if (fabsf(max_scale) < GROUP_MAX_EPS) {
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
    requantize(t, lv, 16, 2, d, NULL, -32, 31, 32, L);
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

/* Without weights ggml quantizes the rows as one run of blocks; with them row by row, each
 * block weighted by the importance of its columns. */
#define K_QUANT_ENTRIES(name, block, size)                                                                      \
    void q_##name(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {                               \
        for (Py_ssize_t i = 0; i < nb; i++) block(x + SUPER * i, NULL, b + (size) * i);                        \
    }                                                                                                           \
    void qr_##name(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,             \
                   const float *restrict imatrix) {                                                             \
        const int64_t nb = n_per_row / SUPER;                                                                   \
        for (int64_t r = 0; r < nrows; r++)                                                                     \
            for (int64_t i = 0; i < nb; i++)                                                                    \
                block(x + r * n_per_row + SUPER * i, imatrix ? imatrix + SUPER * i : NULL,                      \
                      y + (r * nb + i) * (size));                                                               \
    }

K_QUANT_ENTRIES(q2_k, q2_k_block, 84)
K_QUANT_ENTRIES(q3_k, q3_k_block, 110)
K_QUANT_ENTRIES(q4_k, q4_k_block, 144)
K_QUANT_ENTRIES(q5_k, q5_k_block, 176)
K_QUANT_ENTRIES(q6_k, q6_k_block, 210)

/* ---------------------------------------------------------------------------------- */
/* Q4_0, Q4_1, Q5_0, Q5_1 with importance weights                                      */
/* Blocks of 32 weighted by imatrix * sqrtf(sigma2 + x * x), sigma2 the mean square of the whole
 * row; 16 blocks are searched together (a short last group repeats the row's first block in the
 * missing lanes and drops their results). */

#define ROW_GROUP (LANES * MAX_NG)

static inline void pack_nibbles(const uint8_t *restrict L, uint8_t *restrict qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static inline void pack_q5(const uint8_t *restrict L, uint8_t *restrict qh, uint8_t *restrict qs) {
    uint32_t bits = 0;
    for (int j = 0; j < 32; j++) bits |= (uint32_t)((L[j] >> 4) & 1) << j;
    wr32(qh, bits);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 15) | ((L[j + 16] & 15) << 4));
}

/* The lanes' sources: block g of the group, or block 0 where the group is short. */
static inline void group_sources(int count, int *restrict src) {
    for (int g = 0; g < ROW_GROUP; g++) src[g] = g < count ? g : 0;
}

/* One group of up to 16 blocks of a row: weights, search, pack (nmax: 8 Q4_0, 16 Q5_0, 15 Q4_1,
 * 31 Q5_1). */
static void legacy_group(const float *restrict x, const float *restrict qw, int count, float sigma2, int nmax,
                              int type_size, uint8_t *restrict y) {
    const int with_min = nmax == 15 || nmax == 31;
    vf t[32 * MAX_NG], w[32 * MAX_NG], lv[32 * MAX_NG], vs[MAX_NG], vm[MAX_NG];
    float scale[ROW_GROUP], neg_min[ROW_GROUP];
    int src[ROW_GROUP];
    group_sources(count, src);
    load_lanes(x, 32, MAX_NG, src, t);
    load_lanes(qw, 32, MAX_NG, src, w);
    for (int c = 0; c < 32 * MAX_NG; c++) {
        const vf s = vadd(vset(sigma2), vmul(t[c], t[c]));
        for (int k = 0; k < LANES; k++) LANE(w[c], k) *= sqrtf(LANE(s, k));
    }
    if (with_min)
        search_qkx_32x2(t, w, nmax, -0.9f, 0.05f, 36, 0, lv, vs, vm);
    else
        search_qx_32x2(t, w, nmax, lv, vs);
    unlane(vs, MAX_NG, scale);
    if (with_min) unlane(vm, MAX_NG, neg_min);
    for (int g = 0; g < count; g++) {
        uint8_t L[32], *b = y + type_size * g;
        for (int i = 0; i < 32; i++) L[i] = (uint8_t)(int)LANE(lv[i * MAX_NG + g / LANES], g % LANES);
        wr16(b, scale_half(scale[g]));
        if (with_min) wr16(b + 2, scale_half(-neg_min[g]));
        if (nmax == 8 || nmax == 15)
            pack_nibbles(L, b + 2 + 2 * with_min);
        else
            pack_q5(L, b + 2 + 2 * with_min, b + 6 + 2 * with_min);
    }
}

static void legacy_rows(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                             const float *restrict imatrix, int nmax, int type_size) {
    const int64_t nb = n_per_row / 32;
    for (int64_t r = 0; r < nrows; r++, x += n_per_row, y += nb * type_size) {
        float sum_x2 = 0.0f;
        for (int64_t j = 0; j < n_per_row; j++) sum_x2 += x[j] * x[j];
        const float sigma2 = sum_x2 / (float)n_per_row;
        for (int64_t i = 0; i < nb; i += ROW_GROUP) {
            const int count = nb - i < ROW_GROUP ? (int)(nb - i) : ROW_GROUP;
            legacy_group(x + 32 * i, imatrix + 32 * i, count, sigma2, nmax, type_size, y + type_size * i);
        }
    }
}

#define LEGACY_ENTRY(name, nmax, size)                                                                           \
    void qr_##name(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,              \
                   const float *restrict imatrix) {                                                              \
        if (!imatrix)                                                                                            \
            q_##name(x, y, (Py_ssize_t)(nrows * n_per_row / 32));                                                \
        else                                                                                                     \
            legacy_rows(x, y, nrows, n_per_row, imatrix, nmax, size);                                            \
    }

LEGACY_ENTRY(q4_0, 8, 18)
LEGACY_ENTRY(q4_1, 15, 20)
LEGACY_ENTRY(q5_0, 16, 22)
LEGACY_ENTRY(q5_1, 31, 24)

/* ---------------------------------------------------------------------------------- */
/* IQ4_NL, IQ4_XS                                                                      */
/* Blocks of 32 on the non-linear levels kvalues_iq4nl: each block's scale is fitted by least */
/* squares for 16 trial scales; IQ4_XS then stores the eight scales of a super-block as 6-bit */
/* multiples of one half.                                                                      */

static const float IQ4_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 16 levels, one vector each. */
LANE_INLINE void iq4_levels(vf *restrict lev) {
    for (int k = 0; k < 16; k++) lev[k] = vset(IQ4_LEVELS[k]);
}

/* ggml's best_index_int8 on kvalues_iq4nl in lanes: the nearest level, the upper one on a tie
 * (for NaN 15, where ggml's bisection ends). The bisection ends between the levels lo and
 * lo + 1 where lo is the number of levels 1-14 that v is not below; a and b follow lo. Writes
 * the level's value; with idx, its index too. */
LANE_INLINE void iq4_nearest(const vf *restrict vp, const vf *restrict lev, vf *restrict level, vi *restrict idx) {
    const vf v = *vp;
    vf a = lev[0], b = lev[1];
    vi lo = viset(0);
    for (int k = 1; k < 15; k++) {
        const vi below = vlt(v, lev[k]);
        a = vsel(below, a, lev[k]);
        b = vsel(below, b, lev[k + 1]);
        if (idx) lo = visub(lo, vnot(below)); /* a mask is -1: subtracting it adds one */
    }
    const vi up = vnot(vlt(vsub(v, a), vsub(b, v)));
    if (idx) *idx = visub(lo, up);
    *level = vsel(up, b, a);
}

/* In-order sums over the 32 positions of the fit for trial inverse scales iscale. */
LANE_INLINE void iq4_fit(const vf *restrict t, const vf *restrict w, const vf *restrict iscale, int ng,
                         const vf *restrict lev, vf *restrict sumqx, vf *restrict sumq2) {
    for (int q = 0; q < ng; q++) sumqx[q] = sumq2[q] = vset(0.0f);
    for (int i = 0; i < 32; i++)
        for (int q = 0; q < ng; q++) {
            const int c = i * ng + q;
            const vf v = vmul(iscale[q], t[c]);
            vf lv;
            iq4_nearest(&v, lev, &lv, NULL);
            const vf wq = vmul(w[c], lv);
            sumqx[q] = vadd(sumqx[q], vmul(wq, t[c]));
            sumq2[q] = vadd(sumq2[q], vmul(wq, lv));
        }
}

/* quantize_row_iq4_nl_impl's scale of each block (lane): the fit at max / -127, then the best of
 * 15 trial scales (itry - 127) / max; 0 for a block below GROUP_MAX_EPS. */
LANE_INLINE void iq4_scales(const vf *restrict t, const vf *restrict w, int ng, vf *restrict d) {
    vf amax[MAX_NG], mx[MAX_NG], iscale[MAX_NG], sumqx[MAX_NG], sumq2[MAX_NG], best[MAX_NG], lev[16];
    const vf zero = vset(0.0f);
    iq4_levels(lev);
    lanes_signed_max(32, ng, t, amax, mx);
    for (int q = 0; q < ng; q++) iscale[q] = vdiv(vset(1.0f), vdiv(vneg(mx[q]), vset(-127.0f)));
    iq4_fit(t, w, iscale, ng, lev, sumqx, sumq2);
    for (int q = 0; q < ng; q++) {
        d[q] = vsel(vgt(sumq2[q], zero), vdiv(sumqx[q], sumq2[q]), zero);
        best[q] = vmul(d[q], sumqx[q]);
    }
    for (int k = -7; k <= 7; k++) {
        for (int q = 0; q < ng; q++) iscale[q] = vdiv(vset((float)(k - 127)), mx[q]);
        iq4_fit(t, w, iscale, ng, lev, sumqx, sumq2);
        for (int q = 0; q < ng; q++) {
            const vi better = vand(vgt(sumq2[q], zero), vgt(vmul(sumqx[q], sumqx[q]), vmul(best[q], sumq2[q])));
            d[q] = vsel(better, vdiv(sumqx[q], sumq2[q]), d[q]);
            best[q] = vsel(better, vmul(d[q], sumqx[q]), best[q]);
        }
    }
    for (int q = 0; q < ng; q++) d[q] = vsel(vlt(amax[q], vset(GROUP_MAX_EPS)), zero, d[q]);
}

/* The final levels for inverse scales id, packed two per byte: 16 bytes per block at q + stride * g. */
LANE_INLINE void iq4_pack(const vf *restrict t, const vf *restrict id, int ng, int count, uint8_t *restrict q,
                          int stride) {
    uint8_t L[32 * ROW_GROUP];
    vf lev[16];
    iq4_levels(lev);
    for (int i = 0; i < 32; i++)
        for (int p = 0; p < ng; p++) {
            vi k;
            const vf v = vmul(id[p], t[i * ng + p]);
            vf lv;
            iq4_nearest(&v, lev, &lv, &k);
            for (int j = 0; j < LANES; j++) L[(p * LANES + j) * 32 + i] = (uint8_t)LANE(k, j);
        }
    for (int g = 0; g < count; g++)
        for (int j = 0; j < 16; j++) q[stride * g + j] = (uint8_t)(L[g * 32 + j] | (L[g * 32 + 16 + j] << 4));
}

/* The IQ4 scale search and packing for one (IQ4_XS) or two (IQ4_NL) lane vectors of blocks. */
WIDE static void iq4_scales_x1(const vf *restrict t, const vf *restrict w, vf *restrict d) { iq4_scales(t, w, 1, d); }
WIDE static void iq4_scales_x2(const vf *restrict t, const vf *restrict w, vf *restrict d) { iq4_scales(t, w, 2, d); }
WIDE static void iq4_pack_x1(const vf *restrict t, const vf *restrict id, int count, uint8_t *restrict q, int stride) {
    iq4_pack(t, id, 1, count, q, stride);
}
WIDE static void iq4_pack_x2(const vf *restrict t, const vf *restrict id, int count, uint8_t *restrict q, int stride) {
    iq4_pack(t, id, 2, count, q, stride);
}

/* Importance weights qw * sqrtf(sigma2 + x * x) per element, sigma2 twice the mean square of
 * the element's super-block (sigma2 per lane in s2), or x * x without importance. */
LANE_INLINE void iq4_weights(const vf *restrict t, const float *restrict qw, const int *restrict src, int ng,
                             const float *restrict s2, vf *restrict w) {
    if (!qw) {
        for (int c = 0; c < 32 * ng; c++) w[c] = vmul(t[c], t[c]);
        return;
    }
    vf sigma2[MAX_NG];
    relane(s2, ng, sigma2);
    load_lanes(qw, 32, ng, src, w);
    for (int i = 0; i < 32; i++)
        for (int q = 0; q < ng; q++) {
            const int c = i * ng + q;
            const vf s = vadd(sigma2[q], vmul(t[c], t[c]));
            for (int k = 0; k < LANES; k++) LANE(w[c], k) *= sqrtf(LANE(s, k));
        }
}

/* twice the mean square of n elements, summed in order */
static inline float iq4_sigma2(const float *restrict x, int n) {
    float acc = 0.0f;
    for (int j = 0; j < n; j++) acc += x[j] * x[j];
    return acc * (2.0f / (float)n);
}

/* IQ4_NL: up to 16 blocks of 32 at x (their weights at qw, or NULL). */
static void iq4_nl_group(const float *restrict x, const float *restrict qw, int count, uint8_t *restrict y) {
    vf t[32 * MAX_NG], w[32 * MAX_NG], d[MAX_NG], id[MAX_NG];
    float s2[ROW_GROUP] = {0}, df[ROW_GROUP];
    int src[ROW_GROUP];
    group_sources(count, src);
    load_lanes(x, 32, MAX_NG, src, t);
    if (qw)
        for (int g = 0; g < ROW_GROUP; g++) s2[g] = iq4_sigma2(x + 32 * src[g], 32);
    iq4_weights(t, qw, src, MAX_NG, s2, w);
    iq4_scales_x2(t, w, d);
    unlane(d, MAX_NG, df);
    for (int q = 0; q < MAX_NG; q++) id[q] = vsel(vne(d[q], vset(0.0f)), vdiv(vset(1.0f), d[q]), vset(0.0f));
    for (int g = 0; g < count; g++) wr16(y + 18 * g, scale_half(df[g]));
    iq4_pack_x2(t, id, count, y + 2, 18);
}

/* IQ4_XS: one super-block of 256 (8 blocks of 32). */
static void iq4_xs_block(const float *restrict x, const float *restrict qw, uint8_t *restrict b) {
    vf t[32], w[32], vs, id;
    float s[LANES], s2[LANES] = {0};
    load_lanes(x, 32, 1, NULL, t);
    if (qw) {
        const float sigma2 = iq4_sigma2(x, SUPER);
        for (int g = 0; g < LANES; g++) s2[g] = sigma2;
    }
    iq4_weights(t, qw, NULL, 1, s2, w);
    iq4_scales_x1(t, w, &vs);
    unlane(&vs, 1, s);
    const float d = -signed_max(s, LANES) / 32.0f;
    wr16(b, scale_half(d));
    const float dinv = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t high = 0;
    memset(b + 4, 0, 4);
    for (int g = 0; g < LANES; g++) {
        const int l = clamp_int(nearest(dinv * s[g]), -32, 31);
        const float dl = d * (float)l;
        LANE(id, g) = dl != 0.0f ? 1.0f / dl : 0.0f;
        b[4 + g / 2] |= (uint8_t)(((l + 32) & 15) << (4 * (g & 1)));
        high |= (uint16_t)(((l + 32) >> 4) << (2 * g));
    }
    wr16(b + 2, high);
    iq4_pack_x1(t, &id, LANES, b + 8, 16);
}

void q_iq4_nl(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i += ROW_GROUP)
        iq4_nl_group(x + 32 * i, NULL, nb - i < ROW_GROUP ? (int)(nb - i) : ROW_GROUP, b + 18 * i);
}

void qr_iq4_nl(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                    const float *restrict imatrix) {
    const int64_t nb = n_per_row / 32;
    if (!imatrix) {
        q_iq4_nl(x, y, (Py_ssize_t)(nrows * nb));
        return;
    }
    for (int64_t r = 0; r < nrows; r++, x += n_per_row, y += 18 * nb)
        for (int64_t i = 0; i < nb; i += ROW_GROUP)
            iq4_nl_group(x + 32 * i, imatrix + 32 * i, nb - i < ROW_GROUP ? (int)(nb - i) : ROW_GROUP, y + 18 * i);
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
