/*
 * gguf_schema.format._scan: the optional compiled walk over the body of a GGUF string array.
 *
 * A string array is `count` records of { length (uint32 in GGUF v1, uint64 after), bytes }.
 * ArrayItems (format/nodes.py) reads it with this module when it was built, and with its own
 * Python loop otherwise; the Python loop is the reference, and the tests check that both give
 * the same strings, the same marks and the same errors on every file.
 *
 * Every length is checked before it is used: the length field must lie inside the buffer, the
 * length must not exceed the caller's cap (Limits.max_string_length), and the string must end
 * inside the buffer. The walk stops at the first string that fails one of these and reports
 * where it stopped (its index and the offset of its length field): the Python side then raises
 * the error, with the same offset, path and value as its own loop. Nothing is read past the
 * buffer, whatever the file claims, and nothing is allocated from a claimed length.
 *
 * The GIL is held throughout (the decoder makes str objects; the walk alone costs about a
 * nanosecond a string); the buffer is held through the buffer protocol while it is read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One length field, in the file's byte order. */
static inline uint64_t load_length(const unsigned char *p, int size4, int swap) {
    if (size4) {
        uint32_t v;
        memcpy(&v, p, 4);
        if (swap)
            v = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        return v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    if (swap) {
        uint64_t r = 0;
        for (int k = 0; k < 8; k++) {
            r = (r << 8) | (v & 0xff);
            v >>= 8;
        }
        v = r;
    }
    return v;
}

typedef struct {
    const unsigned char *data;
    uint64_t size;      /* bytes in the buffer */
    uint64_t pos;       /* where the next length field starts */
    uint64_t cap;       /* the longest string allowed */
    unsigned lsize;     /* 4 or 8 */
    int swap;           /* the file's byte order is not the machine's */
} walk_t;

/* Step over one string; 0 and `walk` unchanged when it fails a check, else 1 with
 * *start and *length set to the string's bytes. */
static inline int step(walk_t *w, uint64_t *start, uint64_t *length) {
    if (w->size - w->pos < w->lsize)
        return 0;
    uint64_t n = load_length(w->data + w->pos, w->lsize == 4, w->swap);
    uint64_t left = w->size - w->pos - w->lsize;
    if (n > w->cap || n > left)
        return 0;
    *start = w->pos + w->lsize;
    *length = n;
    w->pos = *start + n;
    return 1;
}

/* The arguments both functions take: buffer, position, count, length size, big-endian flag, cap. */
static int parse_walk(PyObject *args, Py_buffer *view, walk_t *w, Py_ssize_t *count, Py_ssize_t *extra,
                      const char *format) {
    Py_ssize_t pos;
    int lsize, big;
    unsigned long long cap;
    if (extra != NULL) {
        if (!PyArg_ParseTuple(args, format, view, &pos, count, &lsize, &big, &cap, extra))
            return 0;
    } else if (!PyArg_ParseTuple(args, format, view, &pos, count, &lsize, &big, &cap)) {
        return 0;
    }
    if ((lsize != 4 && lsize != 8) || pos < 0 || pos > view->len || *count < 0 || (extra != NULL && *extra <= 0)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError,
                        "length size must be 4 or 8, the position inside the buffer, the count and stride >= 0");
        return 0;
    }
    w->data = (const unsigned char *)view->buf;
    w->size = (uint64_t)view->len;
    w->pos = (uint64_t)pos;
    w->cap = (uint64_t)cap;
    w->lsize = (unsigned)lsize;
#if PY_BIG_ENDIAN
    w->swap = !big;
#else
    w->swap = big != 0;
#endif
    return 1;
}

static PyObject *py_skip(PyObject *self, PyObject *args) {
    Py_buffer view;
    walk_t w;
    Py_ssize_t count, stride;
    if (!parse_walk(args, &view, &w, &count, &stride, "y*nnipKn"))
        return NULL;
    /* every string takes at least its length field: the walk stops by this index, whatever `count` says */
    Py_ssize_t possible = (Py_ssize_t)((w.size - w.pos) / w.lsize) + 1;
    Py_ssize_t bounded = count < possible ? count : possible;
    Py_ssize_t n_marks = bounded / stride + (bounded % stride != 0) + 1;
    PyObject *marks = PyBytes_FromStringAndSize(NULL, n_marks * (Py_ssize_t)sizeof(uint64_t));
    if (marks == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint64_t *m = (uint64_t *)PyBytes_AS_STRING(marks);
    const uint64_t origin = w.pos;
    uint64_t start, length;
    Py_ssize_t i = 0;
    for (; i < count; i++) {
        if (i % stride == 0)
            *m++ = w.pos - origin;
        if (!step(&w, &start, &length))
            break;
    }
    PyBuffer_Release(&view);
    if (i < count) {
        Py_DECREF(marks);
        return Py_BuildValue("nKO", i, (unsigned long long)w.pos, Py_None);
    }
    *m = w.pos - origin;
    return Py_BuildValue("nKN", i, (unsigned long long)w.pos, marks);
}

/* Validate UTF-8 as CPython's strict decoder does (no overlong forms, no surrogates, nothing past
 * U+10FFFF, no truncated sequence): 1 with the number of code points and the largest one, or 0. */
static int utf8_measure(const unsigned char *p, uint64_t length, Py_ssize_t *chars, Py_UCS4 *largest) {
    Py_ssize_t n = 0;
    Py_UCS4 top = 0;
    uint64_t i = 0;
    while (i < length) {
        unsigned c = p[i];
        Py_UCS4 cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if (c < 0xC2) { /* a continuation byte, or an overlong 2-byte lead */
            return 0;
        } else if (c < 0xE0) {
            if (length - i < 2 || (p[i + 1] & 0xC0) != 0x80)
                return 0;
            cp = ((Py_UCS4)(c & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            if (length - i < 3 || (p[i + 1] & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] >= 0xA0)) /* overlong; surrogate */
                return 0;
            cp = ((Py_UCS4)(c & 0x0F) << 12) | ((Py_UCS4)(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            i += 3;
        } else if (c < 0xF5) {
            if (length - i < 4 || (p[i + 1] & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80 ||
                (p[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] >= 0x90)) /* overlong; past U+10FFFF */
                return 0;
            cp = ((Py_UCS4)(c & 0x07) << 18) | ((Py_UCS4)(p[i + 1] & 0x3F) << 12) |
                 ((Py_UCS4)(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
            i += 4;
        } else {
            return 0;
        }
        if (cp > top)
            top = cp;
        n++;
    }
    *chars = n;
    *largest = top;
    return 1;
}

/* One string as str, equal to str(b, "utf-8", "surrogateescape"). Valid UTF-8 (nearly every token)
 * is measured, then written into a str of the right width at once; one code point below 256 is
 * CPython's shared single-character str; anything else goes through CPython's own decoder, which
 * turns invalid bytes into surrogate escapes. */
static PyObject *to_str(const unsigned char *p, uint64_t length) {
    Py_ssize_t chars;
    Py_UCS4 largest;
    if (length == 0 || !utf8_measure(p, length, &chars, &largest))
        return PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)length, "surrogateescape");
    if (chars == 1 && largest < 256)
        return PyUnicode_FromOrdinal((int)largest);
    PyObject *s = PyUnicode_New(chars, largest);
    if (s == NULL)
        return NULL;
    if (largest < 0x80) {
        memcpy(PyUnicode_DATA(s), p, (size_t)length);
        return s;
    }
    int kind = PyUnicode_KIND(s);
    void *data = PyUnicode_DATA(s);
    Py_ssize_t k = 0;
    for (uint64_t i = 0; i < length; k++) { /* validated above: every sequence is complete */
        unsigned c = p[i];
        Py_UCS4 cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if (c < 0xE0) {
            cp = ((Py_UCS4)(c & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            cp = ((Py_UCS4)(c & 0x0F) << 12) | ((Py_UCS4)(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            i += 3;
        } else {
            cp = ((Py_UCS4)(c & 0x07) << 18) | ((Py_UCS4)(p[i + 1] & 0x3F) << 12) |
                 ((Py_UCS4)(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
            i += 4;
        }
        PyUnicode_WRITE(kind, data, k, cp);
    }
    return s;
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    walk_t w;
    Py_ssize_t count;
    if (!parse_walk(args, &view, &w, &count, NULL, "y*nnipK"))
        return NULL;
    Py_ssize_t possible = (Py_ssize_t)((w.size - w.pos) / w.lsize) + 1;
    PyObject *out = PyList_New(count < possible ? count : possible); /* no allocation from a claimed count */
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint64_t start, length;
    Py_ssize_t i = 0;
    for (; i < count; i++) {
        if (!step(&w, &start, &length))
            break; /* reached by i < possible at the latest */
        PyObject *s = to_str(w.data + start, length);
        if (s == NULL) { /* out of memory: nothing else can fail with surrogateescape */
            PyBuffer_Release(&view);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, s);
    }
    PyBuffer_Release(&view);
    if (i < count) {
        Py_DECREF(out); /* the items not yet set are NULL, which the list's deallocation skips */
        return Py_BuildValue("nKO", i, (unsigned long long)w.pos, Py_None);
    }
    return Py_BuildValue("nKN", i, (unsigned long long)w.pos, out);
}

static PyObject *py_invalid_utf8(PyObject *self, PyObject *args) {
    Py_buffer view;
    walk_t w;
    Py_ssize_t count;
    if (!parse_walk(args, &view, &w, &count, NULL, "y*nnipK"))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint64_t start, length;
    Py_ssize_t chars;
    Py_UCS4 largest;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!step(&w, &start, &length)) {
            PyBuffer_Release(&view);
            Py_DECREF(out);
            return PyErr_Format(PyExc_ValueError, "string %zd of %zd runs past the buffer", i, count);
        }
        if (length && !utf8_measure(w.data + start, length, &chars, &largest)) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(out, index) < 0) {
                Py_XDECREF(index);
                PyBuffer_Release(&view);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(index);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* ------------------------------------------------------------------------------------------- */
/* Metadata pairs: { key: string, value_type: uint32, value } read in one loop while they are     */
/* scalars or strings; the first pair that is a float, an array or fails a check is left to the */
/* Python loop of KeyValueArray (which reads it, or raises its error), and the walk resumes after. */

static PyObject *s_key, *s_type, *s_value, *s_offset; /* the slots of format.values.Field */

enum { VT_UINT8, VT_INT8, VT_UINT16, VT_INT16, VT_UINT32, VT_INT32, VT_FLOAT32, VT_BOOL, VT_STRING, VT_ARRAY,
       VT_UINT64, VT_INT64, VT_FLOAT64, VT_COUNT };

/* An unsigned integer of `size` bytes in the file's byte order (whatever the machine's). */
static inline uint64_t load_uint(const unsigned char *p, int size, int file_big) {
    uint64_t v = 0;
    if (file_big)
        for (int k = 0; k < size; k++)
            v = (v << 8) | p[k];
    else
        for (int k = size - 1; k >= 0; k--)
            v = (v << 8) | p[k];
    return v;
}

/* The value of a scalar of type vt at p (its bytes are there), or NULL with an error set. */
static PyObject *scalar(int vt, const unsigned char *p, int file_big, PyObject *bool_cls) {
    switch (vt) {
    case VT_UINT8: return PyLong_FromUnsignedLong(p[0]);
    case VT_INT8: return PyLong_FromLong((int8_t)p[0]);
    case VT_UINT16: return PyLong_FromUnsignedLong((uint16_t)load_uint(p, 2, file_big));
    case VT_INT16: return PyLong_FromLong((int16_t)(uint16_t)load_uint(p, 2, file_big));
    case VT_UINT32: return PyLong_FromUnsignedLong((uint32_t)load_uint(p, 4, file_big));
    case VT_INT32: return PyLong_FromLong((int32_t)(uint32_t)load_uint(p, 4, file_big));
    case VT_UINT64: return PyLong_FromUnsignedLongLong(load_uint(p, 8, file_big));
    case VT_INT64: return PyLong_FromLongLong((int64_t)load_uint(p, 8, file_big));
    case VT_BOOL:
        if (p[0] <= 1)
            return PyBool_FromLong(p[0]);
        return PyObject_CallFunction(bool_cls, "i", (int)p[0]);
    }
    PyErr_SetString(PyExc_SystemError, "not a scalar type");
    return NULL;
}

static const int SCALAR_SIZE[VT_COUNT] = {1, 1, 2, 2, 4, 4, 0, 1, 0, 0, 8, 8, 0};

static PyObject *make_field(PyTypeObject *cls, PyObject *key, PyObject *type, PyObject *value, PyObject *at) {
    PyObject *f = cls->tp_alloc(cls, 0);
    if (f == NULL || PyObject_GenericSetAttr(f, s_key, key) < 0 || PyObject_GenericSetAttr(f, s_type, type) < 0 ||
        PyObject_GenericSetAttr(f, s_value, value) < 0 || PyObject_GenericSetAttr(f, s_offset, at) < 0) {
        Py_XDECREF(f);
        return NULL;
    }
    /* A pair read here holds only a str, an int, a bool (or BoolByte) and a ValueType, and Field is
     * frozen: it can never be part of a reference cycle, so the cyclic GC need not track it (CPython
     * untracks tuples of such objects the same way). 800,000 tracked pairs cost the GC more than the
     * loop that reads them. */
    if (PyObject_IS_GC(f))
        PyObject_GC_UnTrack(f);
    return f;
}

static PyObject *py_pairs(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, count;
    int lsize, big;
    unsigned long long key_cap, string_cap;
    PyObject *types, *field_cls, *bool_cls;
    if (!PyArg_ParseTuple(args, "y*nnipKKO!O!O", &view, &pos, &count, &lsize, &big, &key_cap, &string_cap,
                          &PyTuple_Type, &types, &PyType_Type, &field_cls, &bool_cls))
        return NULL;
    if ((lsize != 4 && lsize != 8) || pos < 0 || pos > view.len || count < 0 || PyTuple_GET_SIZE(types) != VT_COUNT) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "length size 4 or 8, a position inside the buffer, 13 value types");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    const uint64_t size = (uint64_t)view.len;
#if PY_BIG_ENDIAN
    const int swap = !big;
#else
    const int swap = big != 0;
#endif
    PyObject *fields = PyList_New(0), *offsets = PyList_New(0);
    if (fields == NULL || offsets == NULL)
        goto fail;
    uint64_t p = (uint64_t)pos;
    Py_ssize_t i = 0;
    for (; i < count; i++) {
        uint64_t start = p, q = p;
        if (size - q < (uint64_t)lsize)
            break;
        uint64_t klen = load_length(data + q, lsize == 4, swap);
        q += lsize;
        if (klen > key_cap || klen > size - q)
            break;
        uint64_t kat = q;
        q += klen;
        if (size - q < 4)
            break;
        uint64_t vt = load_length(data + q, 1, swap);
        q += 4;
        if (vt >= VT_COUNT)
            break;
        PyObject *value;
        if (SCALAR_SIZE[vt]) {
            if (size - q < (uint64_t)SCALAR_SIZE[vt])
                break;
            value = scalar((int)vt, data + q, big != 0, bool_cls);
            q += SCALAR_SIZE[vt];
        } else if (vt == VT_STRING) {
            if (size - q < (uint64_t)lsize)
                break;
            uint64_t n = load_length(data + q, lsize == 4, swap);
            q += lsize;
            if (n > string_cap || n > size - q)
                break;
            value = to_str(data + q, n);
            q += n;
        } else { /* floats (numpy scalars) and arrays: the Python loop */
            break;
        }
        if (value == NULL)
            goto fail;
        PyObject *key = to_str(data + kat, klen);
        PyObject *at = PyLong_FromUnsignedLongLong(start); /* one int for the Field and the offsets list */
        PyObject *f = key && at ? make_field((PyTypeObject *)field_cls, key, PyTuple_GET_ITEM(types, vt), value, at)
                                : NULL;
        Py_XDECREF(key);
        Py_DECREF(value);
        int bad = f == NULL || PyList_Append(fields, f) < 0 || PyList_Append(offsets, at) < 0;
        Py_XDECREF(f);
        Py_XDECREF(at);
        if (bad)
            goto fail;
        p = q;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("NNnK", fields, offsets, i, (unsigned long long)p);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(fields);
    Py_XDECREF(offsets);
    return NULL;
}

static PyMethodDef methods[] = {
    {"skip", py_skip, METH_VARARGS,
     "skip(data, pos, count, length_size, big_endian, max_length, stride) -> (stopped, at, marks)\n\n"
     "Walk `count` strings from `pos` without decoding them. `stopped` is the index of the first string that "
     "fails a check (its length field past the end, longer than max_length, or running past the end), and `at` "
     "where its length field starts; when all pass, `stopped` == count, `at` is the end of the last string and "
     "`marks` is bytes of native uint64: the offset from `pos` of strings 0, stride, 2*stride ... and the end. "
     "Otherwise marks is None."},
    {"decode", py_decode, METH_VARARGS,
     "decode(data, pos, count, length_size, big_endian, max_length) -> (stopped, at, strings)\n\n"
     "As skip, but decode each string as UTF-8 with surrogate escapes for invalid bytes: `strings` is the "
     "list of str when all pass, else None."},
    {"pairs", py_pairs, METH_VARARGS,
     "pairs(data, pos, count, length_size, big_endian, max_key_length, max_string_length, types, field, boolbyte)"
     " -> (fields, offsets, stopped, at)\n\n"
     "Read up to `count` metadata pairs from `pos` while they are scalars or strings (not floats, not arrays) and "
     "pass every check: `fields` are made as `field` objects (slots key, type = types[value type], value, offset), "
     "a BOOL byte other than 0/1 as boolbyte(byte); `stopped` is the number read and `at` where the next starts."},
    {"invalid_utf8", py_invalid_utf8, METH_VARARGS,
     "invalid_utf8(data, pos, count, length_size, big_endian, max_length) -> list of int\n\n"
     "The indices of the strings that are not valid UTF-8 (as CPython's strict decoder judges); a ValueError "
     "if the strings fail the walk's checks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gguf_schema.format._scan",
    "Optional compiled walk over GGUF string arrays (see gguf_schema.format.nodes.ArrayItems).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    s_key = PyUnicode_InternFromString("key");
    s_type = PyUnicode_InternFromString("type");
    s_value = PyUnicode_InternFromString("value");
    s_offset = PyUnicode_InternFromString("offset");
    if (!s_key || !s_type || !s_value || !s_offset)
        return NULL;
    return PyModule_Create(&module);
}
