"""Cross-checks against the `gguf` package (llama.cpp's gguf-py), in both directions.

Where gguf-py is known to differ it is said here: it flattens nested arrays, and inside a
flattened nested array it returns each string as the integers of its UTF-8 bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

import gguf_schema
from gguf_schema import ValueType

from .conftest import VOCAB_DIR, demo_bytes, write

gguf = pytest.importorskip("gguf")

_SYNTHETIC = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


def _flatten_like_gguf(value) -> list:
    out: list = []
    for v in value:
        if isinstance(v, (list, np.ndarray)):
            out.extend(_flatten_like_gguf(v.tolist() if isinstance(v, np.ndarray) else v))
        elif isinstance(v, str):
            out.extend(v.encode())
        else:
            out.append(v)
    return out


def _as_list(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


def assert_same_as_gguf(path, *, nested_keys=()):
    theirs = gguf.GGUFReader(str(path))
    with gguf_schema.open(path) as ours:
        keys = [k for k in theirs.fields if k not in _SYNTHETIC]
        assert keys == list(ours.fields)
        assert theirs.fields["GGUF.version"].contents() == ours.version
        for key in keys:
            field, mine = theirs.fields[key], ours.fields[key]
            assert int(field.types[0]) == mine.type, key
            if mine.type == ValueType.ARRAY:
                assert int(field.types[1]) == mine.element_type, key
            expected = field.contents()
            got = _as_list(mine.plain())
            if key in nested_keys:  # gguf-py flattens nested arrays: compare the flattened values
                got = _flatten_like_gguf(got)
            assert got == expected, key
        assert [t.name for t in theirs.tensors] == list(ours.tensors)
        for t in theirs.tensors:
            mine_t = ours.tensors[t.name]
            assert int(t.tensor_type) == int(mine_t.type)
            assert int(t.data_offset) == mine_t.offset
            assert t.n_bytes == mine_t.nbytes
            assert np.asarray(t.data).tobytes() == mine_t.data.tobytes(), t.name
        assert int(theirs.data_offset) == ours.data_offset or len(ours.tensors) == 0


@pytest.mark.parametrize("name", ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf"])
def test_vocab_metadata_equals_what_gguf_reads(name):
    # one file per tokenizer model (the package takes seconds per vocabulary; every file is checked
    # against our own reference variant and rebuilt byte for byte elsewhere)
    assert_same_as_gguf(VOCAB_DIR / name)


@pytest.mark.parametrize("order", ["little", "big"])
def test_files_we_write_are_read_by_gguf_with_identical_values(order, tmp_path):
    path = write(tmp_path, demo_bytes(order))
    assert_same_as_gguf(path, nested_keys={"demo.nested"})


def test_gemma_tensor_table_equals_what_gguf_reads(gemma, gemma_reader):
    theirs = gemma_reader
    with gguf_schema.open(gemma) as ours:
        assert len(theirs.tensors) == len(ours.tensors) == 236
        for t in theirs.tensors:
            mine = ours.tensors[t.name]
            assert (int(t.tensor_type), int(t.data_offset), int(t.n_bytes)) == (
                int(mine.type),
                mine.offset,
                mine.nbytes,
            )
            assert tuple(int(d) for d in t.shape) == mine.dims
        assert theirs.fields["tokenizer.ggml.tokens"].contents()[-3:] == ours.metadata["tokenizer.ggml.tokens"][-3:]
