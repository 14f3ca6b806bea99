/*
 * Decoders of gguf_schema.tensors._kernels: whole little-endian blocks -> float32, block by
 * block in the float32 operations of ggml's dequantize_row_* (the numpy kernels of the
 * family modules are the reference; the tests compare both bit for bit, and with ggml).
 */
#include "common.h"

/* ---------------------------------------------------------------------------------- */
/* Decoders: nb blocks at q -> nb * block_size floats at y                              */

WIDE void dq_q4_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 18, y += 32) {
        const float d = half_at(q);
        const uint8_t *qs = q + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((int)(qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
        }
    }
}

WIDE void dq_q4_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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

void init_decode_tables(void) {
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

void dq_q5_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 22, y += 32) {
        const float d = half_at(q);
        uint8_t lv[32];
        q5_levels(q + 2, q + 6, lv);
        for (int j = 0; j < 32; j++) y[j] = (float)((int)lv[j] - 16) * d;
    }
}

void dq_q5_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 24, y += 32) {
        const float d = half_at(q), m = half_at(q + 2);
        uint8_t lv[32];
        q5_levels(q + 4, q + 8, lv);
        for (int j = 0; j < 32; j++) y[j] = (float)lv[j] * d + m;
    }
}

WIDE void dq_q8_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 34, y += 32) {
        const float d = half_at(q);
        const int8_t *qs = (const int8_t *)(q + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

WIDE void dq_q8_1(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 36, y += 32) {
        const float d = half_at(q); /* the second half, s, is not needed */
        const int8_t *qs = (const int8_t *)(q + 4);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

WIDE void dq_q8_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 292, y += 256) {
        const float d = bits_f32(rd32(q));
        const int8_t *qs = (const int8_t *)(q + 4);
        for (int j = 0; j < 256; j++) y[j] = (float)qs[j] * d;
    }
}

/* Q2_K {scales[16], qs[64], d, dmin}: 16 runs of 16, run r scaled by scales[r] (low nibble:
 * scale, high: min); element 32h + 16p + l of quarter s is crumb s of qs[32h + 16p + l]. */
WIDE void dq_q2_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
void dq_q3_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
WIDE void dq_q4_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
WIDE void dq_q5_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
void dq_q6_k(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
WIDE void dq_tq1_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
WIDE void dq_tq2_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 66) {
        const float d = half_at(q + 64);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 8; s += 2, y += 32)
                for (int m = 0; m < 32; m++) y[m] = (float)((int)((q[32 * h + m] >> s) & 3) - 1) * d;
    }
}

/* Q2_0 {d, qs[16]}: element j is (bits 2(j % 4) of qs[j / 4]) - 1, times d. */
WIDE void dq_q2_0(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
    for (Py_ssize_t i = 0; i < nb; i++, q += 18, y += 64) {
        const float d = half_at(q);
        for (int j = 0; j < 64; j++) y[j] = (float)((int)((q[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

/* IQ4_NL / IQ4_XS: 4-bit indices into ggml's non-linear table kvalues_iq4nl. */
static const int8_t KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL {d, qs[16]}: element j is kv[low nibble of qs[j]], element 16 + j kv[high nibble]. */
void dq_iq4_nl(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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
void dq_iq4_xs(const uint8_t *restrict q, float *restrict y, Py_ssize_t nb) {
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

/* Element-wise: F16 and BF16 -> float32 */

WIDE static void f16_to_f32_c(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = half_at(src + 2 * i);
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
#endif

void f16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
#ifdef HAVE_F16C_DISPATCH
    if (cpu_has_f16c) {
        f16_to_f32_f16c(src, y, n);
        return;
    }
#endif
    f16_to_f32_c(src, y, n);
}

WIDE void bf16_to_f32(const uint8_t *restrict src, float *restrict y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = bits_f32((uint32_t)rd16(src + 2 * i) << 16);
}
