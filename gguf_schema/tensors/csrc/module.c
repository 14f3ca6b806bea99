/*
 * gguf_schema.tensors._kernels: optional compiled block kernels for gguf_schema.tensors.
 *
 * The numpy kernels are the reference; this module repeats, block by block and in the same
 * float32 operations, the decoders of the types that numpy cannot run at memory speed (F16,
 * BF16, the legacy, K-quant, IQ4 and ternary families) and the common quantizers.
 * engine.py calls it when it was built; the tests check it bit for bit against the numpy
 * kernels and against ggml's own outputs.
 *
 * Every function works on whole blocks of little-endian data, never allocates, and releases
 * the GIL, so Python threads decode disjoint chunks of one tensor in parallel.
 *
 * Files: common.h (macros, scalar helpers, kernel signatures), decode.c, encode.c, and this
 * one (the table of kernels by ggml type id, and the Python interface).
 */
#include "common.h"

#ifdef HAVE_F16C_DISPATCH
int cpu_has_f16c = 0;
#endif

enum ggml_type_id { /* ggml_type values (gguf_schema.format.types.GGMLType) */
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_Q2_0 = 42,
    /* IQ lattice types (quantize_iq.c) */
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ1_M = 29,
};

/* ---------------------------------------------------------------------------------- */
/* The table: ggml type id, block size, bytes per block, decoder, block quantizer (ggml's    */
/* *_ref), row quantizer (ggml_quantize_chunk, with or without importance weights).        */

typedef struct {
    int id;
    int block_size;
    int type_size;
    decode_fn decode;
    encode_fn encode;
    quantize_rows_fn rows;
} kernel_entry;

static const kernel_entry KERNELS[] = {
    {GGML_TYPE_F16, 1, 2, f16_to_f32, f32_to_f16, NULL},
    {GGML_TYPE_Q4_0, 32, 18, dq_q4_0, q_q4_0, qr_q4_0},
    {GGML_TYPE_Q4_1, 32, 20, dq_q4_1, q_q4_1, qr_q4_1},
    {GGML_TYPE_Q5_0, 32, 22, dq_q5_0, q_q5_0, qr_q5_0},
    {GGML_TYPE_Q5_1, 32, 24, dq_q5_1, q_q5_1, qr_q5_1},
    {GGML_TYPE_Q8_0, 32, 34, dq_q8_0, q_q8_0, NULL},
    {GGML_TYPE_Q8_1, 32, 36, dq_q8_1, q_q8_1, NULL},
    {GGML_TYPE_Q2_K, 256, 84, dq_q2_k, q_q2_k, qr_q2_k},
    {GGML_TYPE_Q3_K, 256, 110, dq_q3_k, q_q3_k, qr_q3_k},
    {GGML_TYPE_Q4_K, 256, 144, dq_q4_k, q_q4_k, qr_q4_k},
    {GGML_TYPE_Q5_K, 256, 176, dq_q5_k, q_q5_k, qr_q5_k},
    {GGML_TYPE_Q6_K, 256, 210, dq_q6_k, q_q6_k, qr_q6_k},
    {GGML_TYPE_Q8_K, 256, 292, dq_q8_k, NULL, NULL},
    {GGML_TYPE_IQ4_NL, 32, 18, dq_iq4_nl, q_iq4_nl, qr_iq4_nl},
    {GGML_TYPE_IQ4_XS, 256, 136, dq_iq4_xs, q_iq4_xs, qr_iq4_xs},
    {GGML_TYPE_BF16, 1, 2, bf16_to_f32, f32_to_bf16, NULL},
    {GGML_TYPE_TQ1_0, 256, 54, dq_tq1_0, q_tq1_0, NULL},
    {GGML_TYPE_TQ2_0, 256, 66, dq_tq2_0, q_tq2_0, NULL},
    {GGML_TYPE_Q2_0, 64, 18, dq_q2_0, q_q2_0, NULL},
    /* IQ lattice types: row quantizers only */
    {GGML_TYPE_IQ2_XXS, 256, 66, NULL, NULL, quantize_rows_iq2_xxs},
    {GGML_TYPE_IQ2_XS, 256, 74, NULL, NULL, quantize_rows_iq2_xs},
    {GGML_TYPE_IQ3_XXS, 256, 98, NULL, NULL, quantize_rows_iq3_xxs},
    {GGML_TYPE_IQ1_S, 256, 50, NULL, NULL, quantize_rows_iq1_s},
    {GGML_TYPE_IQ3_S, 256, 110, NULL, NULL, quantize_rows_iq3_s},
    {GGML_TYPE_IQ2_S, 256, 82, NULL, NULL, quantize_rows_iq2_s},
    {GGML_TYPE_IQ1_M, 256, 56, NULL, NULL, quantize_rows_iq1_m},
};
#define N_KERNELS ((int)(sizeof(KERNELS) / sizeof(KERNELS[0])))

static const kernel_entry *find(int id) {
    for (int k = 0; k < N_KERNELS; k++)
        if (KERNELS[k].id == id) return &KERNELS[k];
    return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Python interface                                                                    */

/* Quantize nb blocks in runs of about 4096 elements, each first checked for NaN and infinity
 * (while it is in the L1 cache): returns -1, or the index of the first bad float (its run and
 * the runs after it are not quantized). */
static Py_ssize_t encode_finite(const kernel_entry *k, const float *x, uint8_t *b, Py_ssize_t nb) {
    const Py_ssize_t run = k->block_size >= 4096 ? 1 : 4096 / k->block_size;
    for (Py_ssize_t i = 0; i < nb; i += run) {
        const Py_ssize_t n = nb - i < run ? nb - i : run;
        const Py_ssize_t bad = first_nonfinite(x + i * k->block_size, n * k->block_size);
        if (bad >= 0) return i * k->block_size + bad;
        k->encode(x + i * k->block_size, b + i * k->type_size, n);
    }
    return -1;
}

/* Check both buffers, then run fn over whole blocks without the GIL. encode(..., True) refuses
 * non-finite input: it returns the index of the first NaN or infinity, or -1 when done. */
static PyObject *run(PyObject *args, int encode) {
    int id, finite = 0;
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, encode ? "iy*w*|p" : "iy*w*", &id, &src, &dst, &finite)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t bad = -1;
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
    if (encode && finite)
        bad = encode_finite(k, (const float *)src.buf, (uint8_t *)dst.buf, nb);
    else if (encode)
        k->encode((const float *)src.buf, (uint8_t *)dst.buf, nb);
    else
        k->decode((const uint8_t *)src.buf, (float *)dst.buf, nb);
    Py_END_ALLOW_THREADS
    if (encode && finite) {
        result = PyLong_FromSsize_t(bad);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* quantize_rows(type_id, src, dst, n_per_row, imatrix or None): whole rows, without the GIL. */
static PyObject *py_quantize_rows(PyObject *self, PyObject *args) {
    (void)self;
    int id, finite = 0;
    Py_ssize_t n_per_row, bad = -1;
    Py_buffer src, dst, imat = {0};
    PyObject *imatrix;
    if (!PyArg_ParseTuple(args, "iy*w*nO|p", &id, &src, &dst, &n_per_row, &imatrix, &finite)) return NULL;
    PyObject *result = NULL;
    int have_imat = 0;
    const kernel_entry *k = find(id);
    if (k == NULL || k->rows == NULL) {
        PyErr_Format(PyExc_ValueError, "no compiled row quantizer for ggml type %d", id);
        goto done;
    }
    if (n_per_row <= 0 || n_per_row % k->block_size != 0 || src.len % (n_per_row * 4) != 0) {
        PyErr_Format(PyExc_ValueError, "%zd floats are not whole rows of %zd elements of type %d", src.len / 4, n_per_row, id);
        goto done;
    }
    const Py_ssize_t nrows = src.len / (n_per_row * 4);
    if (dst.len != nrows * (n_per_row / k->block_size) * k->type_size) {
        PyErr_Format(PyExc_ValueError, "output of %zd bytes does not hold %zd rows of type %d", dst.len, nrows, id);
        goto done;
    }
    if (imatrix != Py_None) {
        if (PyObject_GetBuffer(imatrix, &imat, PyBUF_SIMPLE) < 0) goto done;
        have_imat = 1;
        if (imat.len != n_per_row * 4) {
            PyErr_Format(PyExc_ValueError, "importance matrix of %zd bytes, %zd floats expected", imat.len, n_per_row);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if (finite) { /* row by row, each checked first */
        const Py_ssize_t row_bytes = n_per_row / k->block_size * k->type_size;
        for (Py_ssize_t r = 0; r < nrows && bad < 0; r++) {
            const float *x = (const float *)src.buf + r * n_per_row;
            const Py_ssize_t at = first_nonfinite(x, n_per_row);
            if (at >= 0)
                bad = r * n_per_row + at;
            else
                k->rows(x, (uint8_t *)dst.buf + r * row_bytes, 1, (int64_t)n_per_row, have_imat ? (const float *)imat.buf : NULL);
        }
    } else {
        k->rows((const float *)src.buf, (uint8_t *)dst.buf, (int64_t)nrows, (int64_t)n_per_row,
                have_imat ? (const float *)imat.buf : NULL);
    }
    Py_END_ALLOW_THREADS
    const char *why = quantize_iq_error(); /* a row ggml aborts on */
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        goto done;
    }
    if (finite) {
        result = PyLong_FromSsize_t(bad);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    if (have_imat) PyBuffer_Release(&imat);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* first_nonfinite(src): index of the first NaN or infinity of a float32 buffer, or -1. */
static PyObject *py_first_nonfinite(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src;
    if (!PyArg_ParseTuple(args, "y*", &src)) return NULL;
    Py_ssize_t found;
    Py_BEGIN_ALLOW_THREADS
    found = first_nonfinite((const float *)src.buf, src.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    return PyLong_FromSsize_t(found);
}

/* error_sums(type_id, q, x): (sum of (decoded q - x)^2, sum of x^2), in double, for whole blocks
 * q of ggml type type_id (0: float32) and float32 x of as many elements. Decodes runs of 4096
 * elements into a buffer on the stack, each compared while x's run is in the cache: the measure
 * of a quantization's error in one pass, without the GIL. */
static void sums(const float *x, const float *y, Py_ssize_t n, double *e, double *t) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            const double a = x[i + k], d = (double)y[i + k] - a;
            e[k] += d * d;
            t[k] += a * a;
        }
    for (; i < n; i++) {
        const double a = x[i], d = (double)y[i] - a;
        e[0] += d * d;
        t[0] += a * a;
    }
}

static PyObject *py_error_sums(PyObject *self, PyObject *args) {
    (void)self;
    int id;
    Py_buffer qb, xb;
    if (!PyArg_ParseTuple(args, "iy*y*", &id, &qb, &xb)) return NULL;
    const kernel_entry *k = id == 0 ? NULL : find(id);
    const Py_ssize_t bs = id == 0 ? 1 : k != NULL ? k->block_size : 0, ts = id == 0 ? 4 : k != NULL ? k->type_size : 0;
    if ((id != 0 && (k == NULL || k->decode == NULL)) || xb.len % (4 * bs) != 0 || qb.len != xb.len / (4 * bs) * ts) {
        PyBuffer_Release(&qb);
        PyBuffer_Release(&xb);
        PyErr_Format(PyExc_ValueError, "error_sums: no decoder for type %d, or buffers that are not whole blocks", id);
        return NULL;
    }
    double e[8] = {0}, t[8] = {0};
    Py_BEGIN_ALLOW_THREADS
    const float *x = (const float *)xb.buf;
    const uint8_t *q = (const uint8_t *)qb.buf;
    const Py_ssize_t n = xb.len / 4;
    if (id == 0) {
        sums(x, (const float *)qb.buf, n, e, t);
    } else {
        float y[4096];
        const Py_ssize_t per = bs >= 4096 ? 1 : 4096 / bs; /* blocks per run */
        for (Py_ssize_t b = 0; b * bs < n; b += per) {
            const Py_ssize_t nb = (n / bs - b) < per ? n / bs - b : per;
            k->decode(q + b * ts, y, nb);
            sums(x + b * bs, y, nb * bs, e, t);
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&qb);
    PyBuffer_Release(&xb);
    const double err = ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
    const double tot = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    return Py_BuildValue("(dd)", err, tot);
}

static PyObject *py_decode(PyObject *self, PyObject *args) { (void)self; return run(args, 0); }
static PyObject *py_encode(PyObject *self, PyObject *args) { (void)self; return run(args, 1); }

static PyObject *py_layouts(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (int k = 0; k < N_KERNELS; k++) {
        PyObject *v = Py_BuildValue("(iiOOO)", KERNELS[k].block_size, KERNELS[k].type_size,
                                    KERNELS[k].decode ? Py_True : Py_False,
                                    KERNELS[k].encode ? Py_True : Py_False,
                                    KERNELS[k].rows ? Py_True : Py_False);
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
     "encode(type_id, src, dst, finite=False): float32 src (whole blocks) -> little-endian blocks into dst; "
     "with finite, returns -1, or the index of the first NaN/infinity (checked run by run, before encoding it)."},
    {"quantize_rows", py_quantize_rows, METH_VARARGS,
     "quantize_rows(type_id, src, dst, n_per_row, imatrix, finite=False): float32 rows -> blocks, as "
     "ggml_quantize_chunk (imatrix: n_per_row float32 importance weights, or None); finite as in encode, row by row."},
    {"first_nonfinite", py_first_nonfinite, METH_VARARGS,
     "first_nonfinite(src) -> index of the first NaN or infinity of a float32 buffer, or -1."},
    {"error_sums", py_error_sums, METH_VARARGS,
     "error_sums(type_id, q, x) -> (sum (decoded q - x)^2, sum x^2), in double (type_id 0: q is float32)."},
    {"layouts", py_layouts, METH_NOARGS,
     "layouts() -> {type_id: (block_size, type_size, decodes, encodes, quantizes_rows)} for every compiled type."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gguf_schema.tensors._kernels",
    "Optional compiled block kernels for gguf_schema.tensors (see engine.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    init_decode_tables();
    if (quantize_iq_init() < 0) return NULL;
#ifdef HAVE_F16C_DISPATCH
    __builtin_cpu_init();
    cpu_has_f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
    return PyModule_Create(&module);
}