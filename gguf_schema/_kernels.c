/*
 * gguf_schema._kernels: optional compiled block kernels for gguf_schema.quants.
 *
 * The numpy kernels in quants.py are the reference; this module repeats, block by block
 * and in the same float32 operations, the decoders of the types that numpy cannot run at
 * memory speed (F16, BF16, the simple, K-quant, IQ4 and ternary families) and the common
 * quantizers. quants.py calls it when it was built and checks its answers in the tests
 * against the numpy kernels and the `gguf` package, bit for bit.
 *
 * Every function works on whole blocks of little-endian data, never allocates, and
 * releases the GIL, so Python threads decode disjoint chunks of one tensor in parallel.
 * Build flags: no fast-math and no floating-point contraction (a fused multiply-add would
 * round once where ggml rounds twice).
 */
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
static int cpu_has_f16c = 0;
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
/* Decoders: nb blocks at q -> nb * block_size floats at y                              */

WIDE static void dq_q4_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 18, y += 32) {
        const float d = half_at(q);
        const uint8_t *qs = q + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((int)(qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
        }
    }
}

WIDE static void dq_q4_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 20, y += 32) {
        const float d = half_at(q), m = half_at(q + 2);
        const uint8_t *qs = q + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 15) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* FIFTH_BITS[v]: bit k of v as 16 (bit 4) in byte k of a uint64, for k = 0..7. */
static uint64_t FIFTH_BITS[256];

static void init_tables(void) {
    for (int v = 0; v < 256; v++) {
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (uint64_t)(((v >> k) & 1) << 4) << (8 * k);
        FIFTH_BITS[v] = w;
    }
}

/* Q5_0/Q5_1 levels: nibble | bit j of the 32-bit qh << 4 for element j (low nibbles are elements
 * 0-15, high nibbles 16-31). */
static inline void q5_levels(const uint8_t *restrict qh, const uint8_t *restrict qs, uint8_t *restrict lv) {
#ifdef HAVE_SSE2
    const __m128i lo_bits = _mm_set_epi64x((long long)FIFTH_BITS[qh[1]], (long long)FIFTH_BITS[qh[0]]);
    const __m128i hi_bits = _mm_set_epi64x((long long)FIFTH_BITS[qh[3]], (long long)FIFTH_BITS[qh[2]]);
    const __m128i b = _mm_loadu_si128((const __m128i *)qs), nibble = _mm_set1_epi8(15);
    _mm_storeu_si128((__m128i *)lv, _mm_or_si128(_mm_and_si128(b, nibble), lo_bits));
    _mm_storeu_si128((__m128i *)(lv + 16), _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b, 4), nibble), hi_bits));
#else
    uint64_t hb[4];
    for (int k = 0; k < 4; k++) hb[k] = FIFTH_BITS[qh[k]];
    for (int j = 0; j < 16; j++) {
        lv[j] = (uint8_t)((qs[j] & 15) | (uint8_t)(hb[j >> 3] >> (8 * (j & 7))));
        lv[j + 16] = (uint8_t)((qs[j] >> 4) | (uint8_t)(hb[2 + (j >> 3)] >> (8 * (j & 7))));
    }
#endif
}

static void dq_q5_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 22, y += 32) {
        const float d = half_at(q);
        uint8_t lv[32];
        q5_levels(q + 2, q + 6, lv);
        for (int j = 0; j < 32; j++) y[j] = (float)((int)lv[j] - 16) * d;
    }
}

static void dq_q5_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 24, y += 32) {
        const float d = half_at(q), m = half_at(q + 2);
        uint8_t lv[32];
        q5_levels(q + 4, q + 8, lv);
        for (int j = 0; j < 32; j++) y[j] = (float)lv[j] * d + m;
    }
}

WIDE static void dq_q8_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 34, y += 32) {
        const float d = half_at(q);
        const int8_t *qs = (const int8_t *)(q + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

WIDE static void dq_q8_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 36, y += 32) {
        const float d = half_at(q); /* the second half, s, is not needed */
        const int8_t *qs = (const int8_t *)(q + 4);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

WIDE static void dq_q8_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 292, y += 256) {
        const float d = bits_f32(rd32(q));
        const int8_t *qs = (const int8_t *)(q + 4);
        for (int j = 0; j < 256; j++) y[j] = (float)qs[j] * d;
    }
}

/* Q2_K {scales[16], qs[64], d, dmin}: 16 runs of 16, run r scaled by scales[r] (low nibble:
 * scale, high: min); element 32h + 16p + l of quarter s is crumb s of qs[32h + 16p + l]. */
WIDE static void dq_q2_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 84) {
        const uint8_t *sc = q, *qs = q + 16;
        const float d = half_at(q + 80), dmin = half_at(q + 82);
        int r = 0;
        for (int h = 0; h < 2; h++, qs += 32) {
            for (int s = 0; s < 8; s += 2) {
                for (int p = 0; p < 2; p++, r++, y += 16) {
                    const float dl = d * (float)(sc[r] & 15), ml = dmin * (float)(sc[r] >> 4);
                    for (int l = 0; l < 16; l++) y[l] = dl * (float)((qs[16 * p + l] >> s) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K {hmask[32], qs[64], scales[12], d}: sixteen 6-bit scales (minus 32); level is the crumb,
 * minus 4 where the hmask bit of the element is clear. */
static void dq_q3_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 110) {
        const uint8_t *hm = q, *qs = q + 32, *raw = q + 96;
        const float d = half_at(q + 108);
        const uint32_t a = rd32(raw), b = rd32(raw + 4), c = rd32(raw + 8);
        const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
        const uint32_t w[4] = {
            (a & m4) | ((c & m2) << 4), (b & m4) | (((c >> 2) & m2) << 4),
            ((a >> 4) & m4) | (((c >> 4) & m2) << 4), ((b >> 4) & m4) | (((c >> 6) & m2) << 4),
        };
        int r = 0;
        unsigned bit = 0;
        for (int h = 0; h < 2; h++, qs += 32) {
            for (int s = 0; s < 8; s += 2, bit++) {
                for (int p = 0; p < 2; p++, r++, y += 16) {
                    const int scale = (int)((w[r >> 2] >> (8 * (r & 3))) & 0xffu) - 32;
                    const float dl = d * (float)scale;
                    for (int l = 0; l < 16; l++) {
                        const int k = 16 * p + l;
                        const int lv = (int)((qs[k] >> s) & 3) - (((hm[k] >> bit) & 1) ? 0 : 4);
                        y[l] = dl * (float)lv;
                    }
                }
            }
        }
    }
}

/* get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 packed bytes. */
static inline void k4_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K {d, dmin, scales[12], qs[128]}: 8 sub-blocks of 32, low nibbles then high nibbles of
 * each 32-byte run. */
WIDE static void dq_q4_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 144) {
        const float d = half_at(q), dmin = half_at(q + 2);
        const uint8_t *s = q + 4, *qs = q + 16;
        for (int j = 0; j < 8; j += 2, qs += 32) {
            int sc, mn;
            k4_scale_min(j, s, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k4_scale_min(j + 1, s, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)(qs[l] & 15) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * (float)(qs[l] >> 4) - m2;
            y += 64;
        }
    }
}

/* Q5_K {d, dmin, scales[12], qh[32], qs[128]}: as Q4_K, plus bit j of qh[l] as the fifth bit
 * of element l of sub-block j. */
WIDE static void dq_q5_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 176) {
        const float d = half_at(q), dmin = half_at(q + 2);
        const uint8_t *s = q + 4, *qh = q + 16, *qs = q + 48;
        for (int j = 0; j < 8; j += 2, qs += 32) {
            int sc, mn;
            k4_scale_min(j, s, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k4_scale_min(j + 1, s, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++)
                y[l] = d1 * (float)((qs[l] & 15) | (((qh[l] >> j) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++)
                y[l + 32] = d2 * (float)((qs[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
            y += 64;
        }
    }
}

/* Q6_K {ql[128], qh[64], scales[16] int8, d}: per half of 128, four quarters of 32; quarter g
 * takes the low (g < 2) or high nibble of ql[32 (g & 1) + l] and crumb g of qh[l]; minus 32. */
static void dq_q6_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 210) {
        const uint8_t *ql = q, *qh = q + 128;
        const int8_t *sc = (const int8_t *)(q + 192);
        const float d = half_at(q + 208);
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int g = 0; g < 4; g++) {
                const uint8_t *src = ql + 32 * (g & 1);
                const int shift = (g >> 1) * 4;
                for (int half16 = 0; half16 < 2; half16++) {
                    const float ds = d * (float)sc[2 * g + half16];
                    for (int l = 16 * half16; l < 16 * half16 + 16; l++) {
                        const int lv = (int)(((src[l] >> shift) & 15) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
                        y[32 * g + l] = ds * (float)lv;
                    }
                }
            }
        }
    }
}

/* TQ1_0 {qs[48], qh[4], d}: base-3 digits; digit n of byte b is (uint8)(b * 3**n) * 3 >> 8. */
WIDE static void dq_tq1_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (Py_ssize_t i = 0; i < nb; i++, q += 54) {
        const float d = half_at(q + 52);
        for (int n = 0; n < 5; n++, y += 32)
            for (int m = 0; m < 32; m++) {
                const uint8_t v = (uint8_t)(q[m] * pow3[n]);
                y[m] = (float)((int)((v * 3u) >> 8) - 1) * d;
            }
        for (int n = 0; n < 5; n++, y += 16)
            for (int m = 0; m < 16; m++) {
                const uint8_t v = (uint8_t)(q[32 + m] * pow3[n]);
                y[m] = (float)((int)((v * 3u) >> 8) - 1) * d;
            }
        for (int n = 0; n < 4; n++, y += 4)
            for (int m = 0; m < 4; m++) {
                const uint8_t v = (uint8_t)(q[48 + m] * pow3[n]);
                y[m] = (float)((int)((v * 3u) >> 8) - 1) * d;
            }
    }
}

/* TQ2_0 {qs[64], d}: element 128h + 32s + m is crumb s of qs[32h + m], minus one. */
WIDE static void dq_tq2_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 66) {
        const float d = half_at(q + 64);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 8; s += 2, y += 32)
                for (int m = 0; m < 32; m++) y[m] = (float)((int)((q[32 * h + m] >> s) & 3) - 1) * d;
    }
}

/* IQ4_NL / IQ4_XS: 4-bit indices into ggml's non-linear table kvalues_iq4nl. */
static const int8_t KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL {d, qs[16]}: element j is kv[low nibble of qs[j]], element 16 + j kv[high nibble]. */
static void dq_iq4_nl(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 18, y += 32) {
        const float d = half_at(q);
        const uint8_t *qs = q + 2;
        float level[16]; /* the 16 possible products, each d * kv as ggml computes it */
        for (int k = 0; k < 16; k++) level[k] = d * (float)KVALUES_IQ4NL[k];
        for (int j = 0; j < 16; j++) {
            y[j] = level[qs[j] & 15];
            y[j + 16] = level[qs[j] >> 4];
        }
    }
}

/* IQ4_XS {d, scales_h u16, scales_l[4], qs[128]}: 8 runs of 32 as IQ4_NL, run r scaled by
 * d * (6-bit scale - 32): low 4 bits from nibble r of scales_l, high 2 from bits 2r of scales_h. */
static void dq_iq4_xs(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 136) {
        const float d = half_at(q);
        const unsigned sh = rd16(q + 2);
        const uint8_t *sl = q + 4, *qs = q + 8;
        for (int r = 0; r < 8; r++, qs += 16, y += 32) {
            const int ls = (int)(((sl[r >> 1] >> (4 * (r & 1))) & 15) | (((sh >> (2 * r)) & 3) << 4));
            const float dl = d * (float)(ls - 32);
            float level[16];
            for (int k = 0; k < 16; k++) level[k] = dl * (float)KVALUES_IQ4NL[k];
            for (int j = 0; j < 16; j++) {
                y[j] = level[qs[j] & 15];
                y[j + 16] = level[qs[j] >> 4];
            }
        }
    }
}

/* ---------------------------------------------------------------------------------- */
/* Quantizers: nb blocks of block_size floats at x -> nb blocks at b (ggml's *_ref)     */

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
    for (int j = 0; j < k; j += 4) { /* the first lane whose magnitude is amax */
        const int m = _mm_movemask_ps(_mm_cmpeq_ps(_mm_and_ps(_mm_loadu_ps(x + j), magnitude), target));
        if (m) return x[j + ((m & 1) ? 0 : (m & 2) ? 1 : (m & 4) ? 2 : 3)];
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

/* The 32 levels of a Q4/Q5 block, as bytes: the low byte of trunc_int((x - mn) * id + add), and
 * with a cap the int8 of it clamped there first, as ggml's MIN(cap, (int8_t)...). (Q4_0 and Q5_0
 * pass mn = 0: x - 0.0f is x, bit for bit.) */
static inline void block_levels(const float *restrict x, float mn, float id, float add, int cap, uint8_t *restrict lv) {
#ifdef HAVE_SSE2
    const __m128 vmn = _mm_set1_ps(mn), vid = _mm_set1_ps(id), vadd = _mm_set1_ps(add);
    const __m128i vcap = _mm_set1_epi32(cap);
    for (int j = 0; j < 32; j += 16) {
        __m128i t[4];
        for (int k = 0; k < 4; k++) {
            t[k] = _mm_cvttps_epi32(_mm_add_ps(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(x + j + 4 * k), vmn), vid), vadd));
            if (cap) {
                const __m128i v = _mm_srai_epi32(_mm_slli_epi32(t[k], 24), 24); /* as int8 */
                const __m128i over = _mm_cmpgt_epi32(v, vcap);
                t[k] = _mm_or_si128(_mm_and_si128(over, vcap), _mm_andnot_si128(over, v));
            }
        }
        _mm_storeu_si128((__m128i *)(lv + j), low_bytes16(t[0], t[1], t[2], t[3]));
    }
#else
    for (int j = 0; j < 32; j++) {
        int t = trunc_int((x[j] - mn) * id + add);
        if (cap) {
            const int8_t v = (int8_t)t;
            t = v < cap ? v : cap;
        }
        lv[j] = (uint8_t)t;
    }
#endif
}

/* Q4: byte j = level j | level j + 16 << 4, in ggml's uint8 arithmetic (no masking). */
static inline void pack_q4(const uint8_t *restrict lv, uint8_t *restrict qs) {
#ifdef HAVE_SSE2
    const __m128i lo = _mm_loadu_si128((const __m128i *)lv), hi = _mm_loadu_si128((const __m128i *)(lv + 16));
    _mm_storeu_si128((__m128i *)qs, _mm_or_si128(lo, _mm_and_si128(_mm_slli_epi16(hi, 4), _mm_set1_epi8((char)0xf0))));
#else
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(lv[j] | (lv[j + 16] << 4));
#endif
}

/* Q5: the low nibbles of levels j and j + 16 in byte j of qs, bit 4 of level j in bit j of the
 * 32-bit qh. */
static inline void pack_q5(const uint8_t *restrict lv, uint8_t *restrict qh, uint8_t *restrict qs) {
#ifdef HAVE_SSE2
    const __m128i lo = _mm_loadu_si128((const __m128i *)lv), hi = _mm_loadu_si128((const __m128i *)(lv + 16));
    const __m128i m15 = _mm_set1_epi8(15);
    _mm_storeu_si128((__m128i *)qs, _mm_or_si128(_mm_and_si128(lo, m15), _mm_slli_epi16(_mm_and_si128(hi, m15), 4)));
    /* bit 4 of each byte moved to bit 7, then gathered by movemask */
    wr32(qh, (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(lo, 3)) | ((uint32_t)_mm_movemask_epi8(_mm_slli_epi16(hi, 3)) << 16));
#else
    uint32_t bits = 0;
    for (int j = 0; j < 32; j++) bits |= (uint32_t)((lv[j] >> 4) & 1) << j;
    wr32(qh, bits);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((lv[j] & 15) | ((lv[j + 16] & 15) << 4));
#endif
}

/* Q4_1/Q5_1 block header: d = (max - min) / top and m = min, stored as halves; returns 1/d. */
static inline float min_header(const float *restrict x, uint8_t *restrict b, float top, float *mn) {
    float mx;
    min_max(x, 32, mn, &mx);
    const float d = (mx - *mn) / top;
    wr16(b, f32_to_half(d));
    wr16(b + 2, f32_to_half(*mn));
    return inverse(d);
}

/* Q4_0/Q5_0 block header: d = ggml's signed max / -half, stored as a half; returns 1/d. */
static inline float max_header(const float *restrict x, uint8_t *restrict b, float half) {
    const float d = signed_max(x, 32) / -half;
    wr16(b, f32_to_half(d));
    return inverse(d);
}

static void q_q4_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 18) {
        block_levels(x, 0.0f, max_header(x, b, 8.0f), 8.5f, 15, lv);
        pack_q4(lv, b + 2);
    }
}

static void q_q4_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 20) {
        float mn;
        const float id = min_header(x, b, 15.0f, &mn);
        block_levels(x, mn, id, 0.5f, 15, lv);
        pack_q4(lv, b + 4);
    }
}

static void q_q5_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 22) {
        block_levels(x, 0.0f, max_header(x, b, 16.0f), 16.5f, 31, lv);
        pack_q5(lv, b + 2, b + 6);
    }
}

static void q_q5_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 24) {
        float mn;
        const float id = min_header(x, b, 31.0f, &mn);
        block_levels(x, mn, id, 0.5f, 0, lv);
        pack_q5(lv, b + 4, b + 8);
    }
}

/* Q8_0/Q8_1 levels: d = max |x| / 127, q = roundf(x / d); returns the sum of the levels. */
static inline int q8_levels(const float *restrict x, int8_t *restrict qs, float *d_out) {
    const float d = abs_max(x, 32) / 127.0f, id = inverse(d);
    int sum = 0;
#ifdef HAVE_SSE2
    const __m128 vid = _mm_set1_ps(id);
    __m128i acc = _mm_setzero_si128();
    for (int j = 0; j < 32; j += 16) {
        const __m128i q = low_bytes16(round_int4(_mm_mul_ps(_mm_loadu_ps(x + j), vid)),
                                      round_int4(_mm_mul_ps(_mm_loadu_ps(x + j + 4), vid)),
                                      round_int4(_mm_mul_ps(_mm_loadu_ps(x + j + 8), vid)),
                                      round_int4(_mm_mul_ps(_mm_loadu_ps(x + j + 12), vid)));
        _mm_storeu_si128((__m128i *)(qs + j), q);
        acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(q, _mm_set1_epi8((char)0x80)), _mm_setzero_si128()));
    }
    sum = _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc)) - 128 * 32;
#else
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)round_int(x[j] * id);
        sum += qs[j];
    }
#endif
    *d_out = d;
    return sum;
}

static void q_q8_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 34) {
        float d;
        q8_levels(x, (int8_t *)(b + 2), &d);
        wr16(b, f32_to_half(d));
    }
}

static void q_q8_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 36) {
        float d;
        const int sum = q8_levels(x, (int8_t *)(b + 4), &d);
        wr16(b, f32_to_half(d));
        wr16(b + 2, f32_to_half((float)sum * d));
    }
}

/* Ternary level of x / d: lroundf(x * id) + 1, in {0, 1, 2} for |x| <= d; where 1/d overflowed,
 * x86's lroundf gives LONG_MIN, and ggml's int of LONG_MIN + 1 is 1. */
static inline unsigned trit(float v, float id) {
    const float r = v * id;
    return fabsf(r) <= 2.0f ? (unsigned)(round_int(r) + 1) : 1u;
}

/* The 256 ternary levels of a TQ block, as bytes in element order. */
static inline void block_trits(const float *restrict x, float id, uint8_t *restrict t) {
#ifdef HAVE_SSE2
    /* for |r| <= 2, lroundf(r) + 1 = 1 + [r >= 0.5] + [r >= 1.5] - [r <= -0.5] - [r <= -1.5];
     * beyond (only where 1/d overflowed) and for NaN every test fails or is masked: 1 */
    const __m128 vid = _mm_set1_ps(id), two = _mm_set1_ps(2.0f), neg_two = _mm_set1_ps(-2.0f);
    const __m128 h1 = _mm_set1_ps(0.5f), h3 = _mm_set1_ps(1.5f), n1 = _mm_set1_ps(-0.5f), n3 = _mm_set1_ps(-1.5f);
    const __m128i one = _mm_set1_epi32(1);
    for (int j = 0; j < 256; j += 16) {
        __m128i lv[4];
        for (int k = 0; k < 4; k++) {
            const __m128 r = _mm_mul_ps(_mm_loadu_ps(x + j + 4 * k), vid);
            const __m128 pos = _mm_cmple_ps(r, two), neg = _mm_cmpge_ps(r, neg_two);
            const __m128i up = _mm_castps_si128(_mm_and_ps(pos, _mm_cmpge_ps(r, h1)));
            const __m128i up2 = _mm_castps_si128(_mm_and_ps(pos, _mm_cmpge_ps(r, h3)));
            const __m128i down = _mm_castps_si128(_mm_and_ps(neg, _mm_cmple_ps(r, n1)));
            const __m128i down2 = _mm_castps_si128(_mm_and_ps(neg, _mm_cmple_ps(r, n3)));
            /* masks are -1: subtracting one adds one */
            lv[k] = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(one, up), up2), _mm_add_epi32(down, down2));
        }
        _mm_storeu_si128((__m128i *)(t + j), low_bytes16(lv[0], lv[1], lv[2], lv[3]));
    }
#else
    for (int j = 0; j < 256; j++) t[j] = (uint8_t)trit(x[j], id);
#endif
}

/* Base-3 digits (first most significant), scaled to a byte: ceil(q * 256 / 243). */
static inline uint8_t trits_to_byte(unsigned q) { return (uint8_t)(((q & 255u) * 256u + 242u) / 243u); }

static void q_tq1_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t t[256];
    for (Py_ssize_t i = 0; i < nb; i++, x += 256, b += 54) {
        const float d = abs_max(x, 256);
        block_trits(x, inverse(d), t);
        for (int m = 0; m < 32; m++) { /* 5 digits of element m + 32n, n = 0..4 */
            unsigned q = 0;
            for (int n = 0; n < 5; n++) q = q * 3 + t[m + 32 * n];
            b[m] = trits_to_byte(q);
        }
        for (int m = 0; m < 16; m++) { /* 5 digits of element 160 + m + 16n */
            unsigned q = 0;
            for (int n = 0; n < 5; n++) q = q * 3 + t[160 + m + 16 * n];
            b[32 + m] = trits_to_byte(q);
        }
        for (int m = 0; m < 4; m++) { /* 4 digits of element 240 + m + 4n, shifted up one */
            unsigned q = 0;
            for (int n = 0; n < 4; n++) q = q * 3 + t[240 + m + 4 * n];
            b[48 + m] = trits_to_byte(q * 3);
        }
        wr16(b + 52, f32_to_half(d));
    }
}

static void q_tq2_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t t[256];
    for (Py_ssize_t i = 0; i < nb; i++, x += 256, b += 66) {
        const float d = abs_max(x, 256);
        block_trits(x, inverse(d), t);
        for (int h = 0; h < 2; h++) /* byte m of half h: elements 128h + 32n + m, 2 bits each */
            for (int m = 0; m < 32; m++) {
                const uint8_t *e = t + 128 * h + m;
                b[32 * h + m] = (uint8_t)((e[0] & 3) | ((e[32] & 3) << 2) | ((e[64] & 3) << 4) | ((e[96] & 3) << 6));
            }
        wr16(b + 64, f32_to_half(d));
    }
}

/* ---------------------------------------------------------------------------------- */
/* Element-wise conversions                                                            */

WIDE static void f16_to_f32_c(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = half_at(src + 2 * i);
}

WIDE static void f32_to_f16_c(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) wr16(dst + 2 * i, f32_to_half(x[i]));
}

#ifdef HAVE_F16C_DISPATCH
__attribute__((target("avx,f16c")))
static void f16_to_f32_f16c(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + 2 * i));
        const __m128i em = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(em, _mm_set1_epi16(0x7c00)))) /* a NaN */
            f16_to_f32_c(src + 2 * i, y + i, 8);
        else
            _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    f16_to_f32_c(src + 2 * i, y + i, n - i);
}

__attribute__((target("avx,f16c")))
static void f32_to_f16_f16c(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) /* a NaN */
            f32_to_f16_c(x + i, dst + 2 * i, 8);
        else
            _mm_storeu_si128((__m128i *)(dst + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    f32_to_f16_c(x + i, dst + 2 * i, n - i);
}
#endif

static void f16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
#ifdef HAVE_F16C_DISPATCH
    if (cpu_has_f16c) {
        f16_to_f32_f16c(src, y, n);
        return;
    }
#endif
    f16_to_f32_c(src, y, n);
}

static void f32_to_f16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
#ifdef HAVE_F16C_DISPATCH
    if (cpu_has_f16c) {
        f32_to_f16_f16c(x, dst, n);
        return;
    }
#endif
    f32_to_f16_c(x, dst, n);
}

WIDE static void bf16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = bits_f32((uint32_t)rd16(src + 2 * i) << 16);
}

/* ggml_compute_fp32_to_bf16: round to nearest even; a NaN becomes a quiet NaN. */
WIDE static void f32_to_bf16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint32_t u = f32_bits(x[i]);
        const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        wr16(dst + 2 * i, (uint16_t)r);
    }
}

/* ---------------------------------------------------------------------------------- */
/* The table: ggml type id, block size, bytes per block, decoder, quantizer.           */

typedef void (*decode_fn)(const uint8_t *, float *, Py_ssize_t);
typedef void (*encode_fn)(const float *, uint8_t *, Py_ssize_t);

typedef struct {
    int id;
    int block_size;
    int type_size;
    decode_fn decode;
    encode_fn encode;
} kernel_entry;

static const kernel_entry KERNELS[] = {
    {1, 1, 2, f16_to_f32, f32_to_f16},
    {2, 32, 18, dq_q4_0, q_q4_0},
    {3, 32, 20, dq_q4_1, q_q4_1},
    {6, 32, 22, dq_q5_0, q_q5_0},
    {7, 32, 24, dq_q5_1, q_q5_1},
    {8, 32, 34, dq_q8_0, q_q8_0},
    {9, 32, 36, dq_q8_1, q_q8_1},
    {10, 256, 84, dq_q2_k, NULL},
    {11, 256, 110, dq_q3_k, NULL},
    {12, 256, 144, dq_q4_k, NULL},
    {13, 256, 176, dq_q5_k, NULL},
    {14, 256, 210, dq_q6_k, NULL},
    {15, 256, 292, dq_q8_k, NULL},
    {20, 32, 18, dq_iq4_nl, NULL},
    {23, 256, 136, dq_iq4_xs, NULL},
    {30, 1, 2, bf16_to_f32, f32_to_bf16},
    {34, 256, 54, dq_tq1_0, q_tq1_0},
    {35, 256, 66, dq_tq2_0, q_tq2_0},
};
#define N_KERNELS ((int)(sizeof(KERNELS) / sizeof(KERNELS[0])))

static const kernel_entry *find(int id) {
    for (int k = 0; k < N_KERNELS; k++)
        if (KERNELS[k].id == id) return &KERNELS[k];
    return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Python interface                                                                    */

/* Check both buffers, then run fn over whole blocks without the GIL. */
static PyObject *run(PyObject *args, int encode) {
    int id;
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "iy*w*", &id, &src, &dst)) return NULL;
    PyObject *result = NULL;
    const kernel_entry *k = find(id);
    if (k == NULL || (encode ? k->encode == NULL : k->decode == NULL)) {
        PyErr_Format(PyExc_ValueError, "no compiled %s for ggml type %d", encode ? "quantizer" : "decoder", id);
        goto done;
    }
    const Py_ssize_t in_unit = encode ? (Py_ssize_t)k->block_size * 4 : k->type_size;
    const Py_ssize_t out_unit = encode ? k->type_size : (Py_ssize_t)k->block_size * 4;
    if (src.len % in_unit != 0 || dst.len != src.len / in_unit * out_unit) {
        PyErr_Format(PyExc_ValueError, "buffers of %zd and %zd bytes are not whole blocks of type %d",
                     src.len, dst.len, id);
        goto done;
    }
    const Py_ssize_t nb = src.len / in_unit;
    Py_BEGIN_ALLOW_THREADS
    if (encode)
        k->encode((const float *)src.buf, (uint8_t *)dst.buf, nb);
    else
        k->decode((const uint8_t *)src.buf, (float *)dst.buf, nb);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *py_decode(PyObject *self, PyObject *args) { (void)self; return run(args, 0); }
static PyObject *py_encode(PyObject *self, PyObject *args) { (void)self; return run(args, 1); }

static PyObject *py_layouts(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (int k = 0; k < N_KERNELS; k++) {
        PyObject *v = Py_BuildValue("(iiOO)", KERNELS[k].block_size, KERNELS[k].type_size,
                                    KERNELS[k].decode ? Py_True : Py_False,
                                    KERNELS[k].encode ? Py_True : Py_False);
        PyObject *key = PyLong_FromLong(KERNELS[k].id);
        if (v == NULL || key == NULL || PyDict_SetItem(d, key, v) < 0) {
            Py_XDECREF(v);
            Py_XDECREF(key);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
        Py_DECREF(key);
    }
    return d;
}

static PyObject *py_features(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    int sse2 = 0, clones = 0, f16c = 0;
#ifdef HAVE_SSE2
    sse2 = 1;
#endif
#if defined(__has_attribute) && !defined(GGUF_SCHEMA_PORTABLE) && defined(__x86_64__) && defined(__linux__)
#if __has_attribute(target_clones)
    clones = 1;
#endif
#endif
#ifdef HAVE_F16C_DISPATCH
    f16c = cpu_has_f16c;
#endif
    return Py_BuildValue("{sOsOsO}", "sse2", sse2 ? Py_True : Py_False, "avx2_copies", clones ? Py_True : Py_False,
                         "f16c", f16c ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"features", py_features, METH_NOARGS,
     "features() -> {'sse2', 'avx2_copies', 'f16c': bool}: the code paths built in and usable here."},
    {"decode", py_decode, METH_VARARGS,
     "decode(type_id, src, dst): whole little-endian blocks of src -> float32 into dst."},
    {"encode", py_encode, METH_VARARGS,
     "encode(type_id, src, dst): float32 src (whole blocks) -> little-endian blocks into dst."},
    {"layouts", py_layouts, METH_NOARGS,
     "layouts() -> {type_id: (block_size, type_size, decodes, encodes)} for every compiled type."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gguf_schema._kernels",
    "Optional compiled block kernels for gguf_schema.quants (see quants.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    init_tables();
#ifdef HAVE_F16C_DISPATCH
    __builtin_cpu_init();
    cpu_has_f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
    return PyModule_Create(&module);
}
