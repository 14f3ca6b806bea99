/*
 * Quantizers of gguf_schema.tensors._kernels: float32 -> whole little-endian blocks, as ggml's
 * quantize_row_*_ref compute them, block by block in the same float32 operations.
 */
#include "common.h"


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

void q_q4_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 18) {
        block_levels(x, 0.0f, max_header(x, b, 8.0f), 8.5f, 15, lv);
        pack_q4(lv, b + 2);
    }
}

void q_q4_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 20) {
        float mn;
        const float id = min_header(x, b, 15.0f, &mn);
        block_levels(x, mn, id, 0.5f, 15, lv);
        pack_q4(lv, b + 4);
    }
}

void q_q5_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    uint8_t lv[32];
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 22) {
        block_levels(x, 0.0f, max_header(x, b, 16.0f), 16.5f, 31, lv);
        pack_q5(lv, b + 2, b + 6);
    }
}

void q_q5_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
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

void q_q8_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, x += 32, b += 34) {
        float d;
        q8_levels(x, (int8_t *)(b + 2), &d);
        wr16(b, f32_to_half(d));
    }
}

void q_q8_1(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
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

void q_tq1_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
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

void q_tq2_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
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

/* Q2_0 {d, qs[16]} (ggml's quantize_row_q2_0_ref): d = max |x|; level round(x / d) + 1 clamped to
 * [0, 3], element j in bits 2(j % 4) of qs[j / 4]. */
void q_q2_0(const float *restrict x, uint8_t *restrict b, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, x += 64, b += 18) {
        const float d = abs_max(x, 64), id = inverse(d);
        wr16(b, f32_to_half(d));
        for (int j = 0; j < 16; j++) {
            unsigned v = 0;
            for (int k = 0; k < 4; k++) {
                const int r = round_int(x[4 * j + k] * id); /* INT_MIN for what overflows, as ggml's cast */
                const int q = r < -1 ? 0 : r > 2 ? 3 : r + 1;
                v |= (unsigned)q << (2 * k);
            }
            b[2 + j] = (uint8_t)v;
        }
    }
}

/* Element-wise: float32 -> F16 and BF16 */

WIDE static void f32_to_f16_c(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) wr16(dst + 2 * i, f32_to_half(x[i]));
}

#ifdef HAVE_F16C_DISPATCH
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

void f32_to_f16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
#ifdef HAVE_F16C_DISPATCH
    if (cpu_has_f16c) {
        f32_to_f16_f16c(x, dst, n);
        return;
    }
#endif
    f32_to_f16_c(x, dst, n);
}

/* ggml_compute_fp32_to_bf16: round to nearest even; a NaN becomes a quiet NaN. */
WIDE void f32_to_bf16(const float *restrict x, uint8_t *restrict dst, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint32_t u = f32_bits(x[i]);
        const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 64u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        wr16(dst + 2 * i, (uint16_t)r);
    }
}
