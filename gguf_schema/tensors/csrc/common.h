/*
 * Shared by every source file of gguf_schema.tensors._kernels: platform macros, scalar helpers
 * (little-endian loads and stores, exact half <-> float conversions), ggml's block statistics
 * and its float-to-int casts as x86 computes them, and the kernel signatures.
 *
 * Build flags (setup.py): no fast-math and no floating-point contraction (a fused
 * multiply-add would round once where ggml rounds twice).
 */
#ifndef GGUF_SCHEMA_KERNELS_COMMON_H
#define GGUF_SCHEMA_KERNELS_COMMON_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict
#endif
/* GGUF_SCHEMA_PORTABLE: plain C only (the tests build this variant too, so that the code
 * other CPUs run is checked on x86 as well). */
#if !defined(GGUF_SCHEMA_PORTABLE) && (defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#include <emmintrin.h>
#define HAVE_SSE2 1
#endif
/* WIDE: also compile an AVX2 copy of a loop-heavy function, chosen at load time on CPUs that
 * have it (GCC/clang function multi-versioning); elsewhere a plain function. The code is the
 * same C, so both copies give the same bits. */
#if !defined(GGUF_SCHEMA_PORTABLE) && defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WIDE __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef WIDE
#define WIDE
#endif
/* F16C: x86's half <-> float conversion instructions, used when the CPU has them (checked at
 * import); exact for every value but NaN, and a group of 8 holding a NaN goes the scalar way
 * (the instructions quiet signalling NaNs, numpy keeps them as they are). */
#if !defined(GGUF_SCHEMA_PORTABLE) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_F16C_DISPATCH 1
extern int cpu_has_f16c; /* set at import (module.c) */
#endif
#include <stdint.h>
#include <string.h>
#include <math.h>

/* ---------------------------------------------------------------------------------- */
/* Scalars                                                                             */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* IEEE half -> float, exact (a NaN keeps its payload, as numpy does). Written with selects
 * instead of branches so that loops over many halves vectorise. */
static inline float half_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    const uint32_t special = (em << 13) | 0x7f800000u;  /* inf, NaN */
    const uint32_t normal = (em << 13) + 0x38000000u;   /* rebias the exponent by 112 */
    const uint32_t sub = f32_bits((float)(int32_t)em * 5.9604644775390625e-08f); /* em * 2**-24 */
    return bits_f32(sign | (em >= 0x7c00u ? special : em >= 0x0400u ? normal : sub));
}

/* float -> IEEE half, round to nearest even; a NaN keeps the top of its payload and stays a
 * NaN (numpy's rule, which ggml's own conversion shares for every non-NaN value). */
static inline uint16_t f32_to_half(float f) {
    const uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    const uint32_t payload = 0x7c00u | ((ax & 0x7fffffu) >> 13);
    const uint32_t nan = payload == 0x7c00u ? 0x7c01u : payload;
    const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13; /* rebias, round to even */
    /* below 2**-14 the half is subnormal: adding 0.5f rounds |f| to a multiple of 2**-24 (to even) */
    const uint32_t sub = f32_bits(bits_f32(ax) + 0.5f) - 0x3f000000u;
    const uint32_t r = ax < 0x38800000u ? sub
                     : ax < 0x477ff000u ? normal                /* 65520 and up round to inf */
                     : ax <= 0x7f800000u ? 0x7c00u : nan;
    return (uint16_t)(sign | r);
}

static inline float half_at(const uint8_t *p) { return half_to_f32(rd16(p)); }

/* ---------------------------------------------------------------------------------- */
/* Block statistics and rounding, as ggml's quantizers compute them                   */

/* Block statistics. ggml scans a block in order; for input without NaN the SSE2 versions give
 * the same values: max and min do not depend on the order, and where the order does matter
 * (which of +0.0 / -0.0 is the extreme, which of +a / -a is "the max") the first element in
 * order is looked up afterwards, as the sequential scan would have kept it. */
#ifdef HAVE_SSE2
static inline float hmax4(__m128 v) {
    v = _mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1))));
}
static inline float hmin4(__m128 v) {
    v = _mm_min_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_min_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1))));
}
#endif

/* The index of the lowest set bit of m (m != 0). */
static inline int lowest_bit(uint32_t m) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctz(m);
#else
    int i = 0;
    while (!(m & 1u)) {
        m >>= 1;
        i++;
    }
    return i;
#endif
}

/* max |x|, ggml's `amax = MAX(amax, fabsf(v))` from 0 (k: a multiple of 8). */
static inline float abs_max(const float *restrict x, int k) {
#ifdef HAVE_SSE2
    const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    __m128 a = _mm_setzero_ps(), b = _mm_setzero_ps();
    for (int j = 0; j < k; j += 8) {
        a = _mm_max_ps(a, _mm_and_ps(_mm_loadu_ps(x + j), magnitude));
        b = _mm_max_ps(b, _mm_and_ps(_mm_loadu_ps(x + j + 4), magnitude));
    }
    return hmax4(_mm_max_ps(a, b));
#else
    float amax = 0.0f;
    for (int j = 0; j < k; j++) {
        const float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    return amax;
#endif
}

/* ggml's "max": the first element of largest magnitude (0 if none is non-zero; NaNs never
 * win, as ggml's `amax < |v|` test skips them). */
static inline float signed_max(const float *restrict x, int k) {
    float amax = 0.0f;
#ifdef HAVE_SSE2
    const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    __m128 a = _mm_setzero_ps(), b = _mm_setzero_ps();
    for (int j = 0; j < k; j += 8) { /* max(v, acc): a NaN v leaves acc */
        a = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + j), magnitude), a);
        b = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + j + 4), magnitude), b);
    }
    amax = hmax4(_mm_max_ps(a, b));
    if (amax == 0.0f) return 0.0f;
    const __m128 target = _mm_set1_ps(amax);
    for (int j = 0; j < k; j += 32) { /* the first element whose magnitude is amax: one mask of up to */
        uint32_t m = 0;              /* 32 bits, then its lowest bit (no branch per 4 elements)      */
        const int n = k - j < 32 ? k - j : 32;
        for (int i = 0; i < n; i += 4)
            m |= (uint32_t)_mm_movemask_ps(_mm_cmpeq_ps(_mm_and_ps(_mm_loadu_ps(x + j + i), magnitude), target)) << i;
        if (m) return x[j + lowest_bit(m)];
    }
    return 0.0f; /* not reached */
#else
    for (int j = 0; j < k; j++) {
        const float v = fabsf(x[j]);
        amax = amax < v ? v : amax;
    }
    if (amax == 0.0f) return 0.0f;
    for (int j = 0; j < k; j++)
        if (fabsf(x[j]) == amax) return x[j];
    return 0.0f; /* not reached */
#endif
}

/* The first zero of a block (its sign is what ggml's scan keeps for a zero extreme). */
static inline float first_zero(const float *restrict x, int k) {
    for (int j = 0; j < k; j++)
        if (x[j] == 0.0f) return x[j];
    return 0.0f;
}

/* ggml's min and max from FLT_MAX / -FLT_MAX with `v < min` / `v > max` (NaNs skipped). */
static inline void min_max(const float *restrict x, int k, float *mn, float *mx) {
    float lo = 3.402823466e+38f, hi = -3.402823466e+38f;
#ifdef HAVE_SSE2
    __m128 l = _mm_set1_ps(lo), h = _mm_set1_ps(hi);
    for (int j = 0; j < k; j += 4) {
        const __m128 v = _mm_loadu_ps(x + j);
        l = _mm_min_ps(v, l);
        h = _mm_max_ps(v, h);
    }
    lo = hmin4(l);
    hi = hmax4(h);
    if (lo == 0.0f) lo = first_zero(x, k);
    if (hi == 0.0f) hi = first_zero(x, k);
#else
    for (int j = 0; j < k; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
#endif
    *mn = lo;
    *mx = hi;
}

static inline float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* float -> int as ggml's casts compute it on x86 (cvttss2si): truncation, and INT_MIN for NaN
 * and out-of-range values, which a later cast to 8 bits turns into 0. Written out so that
 * every platform gives x86's bytes (C leaves these cases undefined). They arise only when
 * 1/d overflows for a block of subnormal values. */
static inline int trunc_int(float v) {
    return (v > -2147483648.0f && v < 2147483648.0f) ? (int)v : (int)(-2147483647 - 1);
}

/* roundf to an int (halves away from zero), without a libm call so that loops vectorise:
 * v - trunc(v) is exact for |v| < 2**31. Out of range and NaN: as trunc_int. */
static inline int round_int(float v) {
    const int t = trunc_int(v);
    const float frac = v - (float)t;
    const int in_range = v > -2147483648.0f && v < 2147483648.0f;
    return in_range ? t + (frac >= 0.5f) - (frac <= -0.5f) : t;
}

#ifdef HAVE_SSE2
/* round_int of 4 lanes, as int32 (cvttps2dq is trunc_int: INT_MIN when out of range). */
static inline __m128i round_int4(__m128 v) {
    const __m128i t = _mm_cvttps_epi32(v);
    const __m128 frac = _mm_sub_ps(v, _mm_cvtepi32_ps(t));
    const __m128 limit = _mm_set1_ps(2147483648.0f);
    const __m128 in_range = _mm_and_ps(_mm_cmplt_ps(v, limit), _mm_cmpgt_ps(v, _mm_sub_ps(_mm_setzero_ps(), limit)));
    const __m128i up = _mm_castps_si128(_mm_and_ps(_mm_cmpge_ps(frac, _mm_set1_ps(0.5f)), in_range));
    const __m128i down = _mm_castps_si128(_mm_and_ps(_mm_cmple_ps(frac, _mm_set1_ps(-0.5f)), in_range));
    return _mm_add_epi32(_mm_sub_epi32(t, up), down); /* masks are -1: subtracting adds one */
}

/* The low bytes of 16 int32 lanes (C's conversion to int8), in order. */
static inline __m128i low_bytes16(__m128i a, __m128i b, __m128i c, __m128i d) {
    const __m128i m = _mm_set1_epi32(0xff);
    const __m128i ab = _mm_packs_epi32(_mm_and_si128(a, m), _mm_and_si128(b, m));
    const __m128i cd = _mm_packs_epi32(_mm_and_si128(c, m), _mm_and_si128(d, m));
    return _mm_packus_epi16(ab, cd);
}
#endif

/* ---------------------------------------------------------------------------------- */
/* Kernel signatures: nb whole little-endian blocks at q -> nb * block_size floats at y,  */
/* and back. Plain types (F16, BF16) count single elements as blocks.                  */

typedef void (*decode_fn)(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
typedef void (*encode_fn)(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
/* ggml_quantize_chunk's shape: nrows rows of n_per_row floats at x -> nrows rows of blocks at y,
 * with importance weights imatrix[n_per_row] (NULL: none). For the types whose quantizers search
 * per row (K-quants, IQ) or weigh elements by importance. */
typedef void (*quantize_rows_fn)(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row,
                                 const float *restrict imatrix);

/* decode.c */
void init_decode_tables(void);
void dq_q4_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q4_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q5_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q5_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q8_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q8_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q2_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q3_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q4_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q5_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q6_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q8_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_iq4_nl(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_iq4_xs(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_tq1_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_tq2_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void dq_q2_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb);
void f16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n);
void bf16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n);

/* encode.c */
void q_q4_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q4_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q5_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q5_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q8_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q8_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_tq1_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_tq2_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q2_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void f32_to_f16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n);
void f32_to_bf16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n);

/* quantize_k.c: searching quantizers (K-quants, IQ4) and the importance paths of Q4_0..Q5_1 */
void q_q2_k(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q3_k(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q4_k(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q5_k(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_q6_k(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_iq4_nl(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
void q_iq4_xs(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb);
float search_qp(int n, int nmax, const float *restrict x, const float *restrict w, uint8_t *restrict L);
void qr_q4_0(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q4_1(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q5_0(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q5_1(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q2_k(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q3_k(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q4_k(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q5_k(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_q6_k(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_iq4_nl(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void qr_iq4_xs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);

/* quantize_iq.c: row quantizers of the IQ lattice types; their lattices come from
 * gguf_schema.tensors.grids at import; a row ggml would abort on leaves a message. */
int quantize_iq_init(void);
const char *quantize_iq_error(void);
void quantize_rows_iq2_xxs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq2_xs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq2_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq3_xxs(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq3_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq1_s(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);
void quantize_rows_iq1_m(const float *restrict x, uint8_t *restrict y, int64_t nrows, int64_t n_per_row, const float *restrict imatrix);

Py_ssize_t first_nonfinite(const float *restrict x, Py_ssize_t n);

#endif
