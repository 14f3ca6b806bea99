"""The compiled walk over string arrays (``gguf_schema.format._scan``) and the Python loops agree.

Every file is read twice, once with the compiled walk and once with the Python loops of
:class:`~gguf_schema.format.fast.arrays.ArrayItems` (the reference), eagerly and lazily: the fields, the
marks of the lazy strings and the errors (class, message, offset, path, value) must be the same.
"""

from __future__ import annotations

import gc
import io
import random
import struct
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError, GGUFLimitError, GGUFTruncatedError, Limits
from gguf_schema.format import values
from gguf_schema.format.fast import walk
from gguf_schema.format.values import STRIDE, GGUFArray, LazyStrings, string_marks
from gguf_schema.reader import read
from gguf_schema.testing.fixtures import fixture_files
from gguf_schema.testing.malformed import malformed_cases

from .conftest import demo_bytes

compiled = pytest.mark.skipif(walk.compiled_scan is None, reason="gguf_schema.format._scan was not built")


def _lazy_strings(value: Any) -> list[LazyStrings]:
    """Every LazyStrings inside a value (arrays of arrays included)."""
    if isinstance(value, GGUFArray):
        if isinstance(value.items, LazyStrings):
            return [value.items]
        if value.type == gguf_schema.ValueType.ARRAY:
            return [s for inner in value.items for s in _lazy_strings(inner)]
    return []


def outcome(data: Any, *, lazy: bool, limits: Limits | None = None) -> tuple[Any, ...]:
    """What reading ``data`` gives: the fields and the lazy strings' marks and bytes, or the error's facts."""
    try:
        with read(data, lazy=lazy, limits=limits) as f:
            records = f.fields.records
            lazies = [s for fld in records for s in _lazy_strings(fld.value)]
            marks = [(list(s._marks), bytes(s.raw), s.length_format, len(s)) for s in lazies]
            tensors = [(t.name, t.type, t.dims, t.offset) for t in f.tensor_list]
            where = [(fld.offset, type(fld.value), type(fld.type)) for fld in records]
            return ("ok", records, marks, tensors, where)
    except GGUFError as e:
        return ("error", type(e), str(e), e.offset, e.path, e.value if e.has_value else None)


def both(data: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The outcome with the compiled walk, then with the Python loops."""
    fast = outcome(data, **kw)
    with monkeypatch.context() as m:
        m.setattr(walk, "compiled_scan", None)
        slow = outcome(data, **kw)
    return fast, slow


def assert_agree(data: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Any, ...]:
    fast, slow = both(data, monkeypatch, **kw)
    assert fast == slow
    return fast


def big_endian_copy(data: bytes) -> bytes:
    """The same header in the other byte order (tensor infos dropped: their data is not the point)."""
    with read(data) as f:
        out = io.BytesIO()
        gguf_schema.save(out, f.fields.records, {}, byte_order="big", sync=False)
    return out.getvalue()


@compiled
def test_paths_agree_on_every_vocab_file_in_both_byte_orders(vocab_file, monkeypatch):
    data = vocab_file.read_bytes()
    big = big_endian_copy(data)
    for lazy in (False, True):
        result = assert_agree(data, monkeypatch, lazy=lazy)
        assert result[0] == "ok"
        if lazy:  # the marks are where every STRIDE-th string starts, as the independent walk finds them
            assert result[2]
            for marks, raw, fmt, count in result[2]:
                assert marks == list(string_marks(raw, count, fmt)) and len(marks) == -(-count // STRIDE) + 1
        other = assert_agree(big, monkeypatch, lazy=lazy)
        assert other[0] == "ok" and (lazy or other[1] == result[1])  # lazily: the same marks, another byte order
        assert [m[0] for m in other[2]] == [m[0] for m in result[2]]


@compiled
def test_paths_agree_on_gemma(gemma, monkeypatch):
    for lazy in (False, True):
        result = assert_agree(str(gemma), monkeypatch, lazy=lazy)
        tokens = next(fld.value.items for fld in result[1] if fld.key == "tokenizer.ggml.tokens")
        assert len(tokens) == 262144 and tokens[:3] == ["<pad>", "<eos>", "<bos>"]
        assert len(result[3]) == 236


@compiled
def test_paths_agree_on_every_generated_fixture_and_malformed_file(monkeypatch):
    files = [(fx.name, fx.data) for fx in fixture_files(small=True)]
    files += [(c.name, c.data) for c in malformed_cases()]
    files += [("demo-big-v1", demo_bytes("big", 1)), ("demo-big-v3", demo_bytes("big", 3))]
    errors = 0
    for name, data in files:
        for lazy in (False, True):
            fast, slow = both(data, monkeypatch, lazy=lazy)
            assert fast == slow, name
            errors += fast[0] == "error"
    assert errors > 10  # the malformed files do fail


def string_array_file(strings: list[bytes], *, version: int = 3, byte_order: str = "little") -> tuple[bytes, int]:
    """A file whose only key is a STRING array of ``strings`` (raw bytes), and where the array's items start."""
    items = [s.decode("utf-8", "surrogateescape") for s in strings]
    out = io.BytesIO()
    gguf_schema.save(
        out,
        [gguf_schema.make_field("a", GGUFArray(gguf_schema.ValueType.STRING, items))],
        {},
        version=version,
        byte_order=byte_order,
        sync=False,
    )
    data = out.getvalue()
    size_t = 4 if version == 1 else 8
    start = 4 + 4 + 2 * size_t + (size_t + 1) + 4 + 4 + size_t  # header, key "a", value type, item type, count
    return data, start


@compiled
@pytest.mark.parametrize(("version", "order"), [(3, "little"), (3, "big"), (1, "little"), (1, "big")])
def test_invalid_utf8_is_kept_as_surrogate_escapes_by_both_paths(version, order, monkeypatch):
    rng = random.Random(7)
    pool = [
        b"",
        b"a",
        b"\xff",
        b"\xc3\xa9",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xc0\xaf",
        "é".encode(),
    ]
    strings = [rng.choice(pool) + bytes(rng.randrange(256) for _ in range(rng.randrange(6))) for _ in range(700)]
    strings += [bytes(range(128)), bytes(range(128, 256)), "日本語".encode(), "\U0001f600".encode()]
    data, _ = string_array_file(strings, version=version, byte_order=order)
    want = [s.decode("utf-8", "surrogateescape") for s in strings]
    for lazy in (False, True):
        result = assert_agree(data, monkeypatch, lazy=lazy)
        items = result[1][0].value.items
        assert list(items) == want and all(type(s) is str for s in items)
        assert [s.encode("utf-8", "surrogateescape") for s in items] == strings


@compiled
@pytest.mark.parametrize("version", [3, 1])
def test_a_file_cut_anywhere_in_a_string_array_fails_the_same_way(version, monkeypatch):
    strings = [b"x" * (i % 7) for i in range(2 * STRIDE + 3)]
    data, start = string_array_file(strings, version=version)
    end = len(data) - 32  # well inside the array (the padding and nothing else follow it)
    seen = set()
    for cut in range(start - 4, end, 3):
        for lazy in (False, True):
            fast = assert_agree(data[:cut], monkeypatch, lazy=lazy)
            assert fast[0] == "error" and issubclass(fast[1], GGUFTruncatedError)
            seen.add(fast[2].split(" (at")[0].split(",")[0][:30])
    assert any("file ends inside the length" in s for s in seen) and any("needs" in s for s in seen)


@compiled
@pytest.mark.parametrize("version", [3, 1])
def test_hostile_lengths_fail_the_same_way_and_name_the_string(version, monkeypatch):
    size_t, e = (4, "<I") if version == 1 else (8, "<Q")
    strings = [b"abc"] * (STRIDE + 10)
    data, start = string_array_file(strings, version=version)
    huge = [2**32 - 1] if version == 1 else [2**63, 2**64 - 1, 2**32]
    for index in (0, 1, STRIDE - 1, STRIDE, STRIDE + 9):
        at = start + index * (size_t + 3)
        for length in [4, 100, len(data), *huge]:
            bad = data[:at] + struct.pack(e, length) + data[at + size_t :]
            for lazy in (False, True):
                fast = assert_agree(bad, monkeypatch, lazy=lazy)
                if length in (4, 100):  # may swallow the lengths that follow: the walks agree, wherever they stop
                    continue
                assert fast[0] == "error" and fast[3] == at and fast[4].endswith(f"array[{index}]"), fast
                assert fast[5] == length
        # a limit below the length: the limit's error, in both walks, for that string
        limits = Limits(max_string_length=2)
        for lazy in (False, True):
            fast = assert_agree(data, monkeypatch, lazy=lazy, limits=limits)
            assert fast[1] is GGUFLimitError and fast[3] == start and fast[4].endswith("array[0]") and fast[5] == 3


@compiled
def test_lazy_and_eager_name_the_same_failure(monkeypatch):
    """Where a string exceeds the limit and a later one runs past the end, both modes name the first."""
    strings = [b"ab", b"abcdef", b"ab"] * 30
    data, start = string_array_file(strings)
    cut = data[: start + 90 * 8 + 100]  # room for the count, not for all the strings
    limits = Limits(max_string_length=4)
    eager = assert_agree(cut, monkeypatch, lazy=False, limits=limits)
    lazy = assert_agree(cut, monkeypatch, lazy=True, limits=limits)
    assert eager == lazy and eager[1] is GGUFLimitError and eager[4].endswith("array[1]")


@compiled
def test_compiled_walk_checks_its_arguments_and_bounds():
    scan = walk.compiled_scan
    raw = struct.pack("<Q", 2) + b"hi" + struct.pack("<Q", 1) + b"!"
    assert scan.decode(raw, 0, 2, 8, False, 2**64 - 1) == (2, len(raw), ["hi", "!"])
    stopped, at, marks = scan.skip(raw, 0, 2, 8, False, 2**64 - 1, 1)
    assert (stopped, at) == (2, len(raw)) and list(np.frombuffer(marks, np.uint64)) == [0, 10, len(raw)]
    # a count far beyond what the buffer can hold allocates nothing for it and stops where the bytes end
    assert scan.decode(raw, 0, 2**40, 8, False, 2**64 - 1) == (2, len(raw), None)
    assert scan.skip(raw, 0, 2**40, 8, False, 2**64 - 1, 64) == (2, len(raw), None)
    assert scan.decode(raw, 0, 2, 8, False, 1) == (0, 0, None)  # the cap
    assert scan.decode(raw[:-1], 0, 2, 8, False, 99) == (1, 10, None)  # the last string runs past the end
    assert scan.decode(memoryview(raw)[:5], 0, 1, 8, False, 99) == (0, 0, None)  # the length field itself is cut
    with pytest.raises(ValueError):
        scan.decode(raw, 0, 1, 2, False, 9)
    with pytest.raises(ValueError):
        scan.skip(raw, len(raw) + 1, 1, 8, False, 9, 64)
    with pytest.raises(ValueError):
        scan.skip(raw, 0, 1, 8, False, 9, 0)


def test_without_the_compiled_walk_strings_still_decode_and_index(monkeypatch):
    monkeypatch.setattr(walk, "compiled_scan", None)
    data = demo_bytes()
    with read(data, lazy=True) as lazy, read(data) as eager:
        assert lazy.fields.records == eager.fields.records
        tokens = lazy.metadata["tokenizer.ggml.tokens"]
        assert tokens[-1] == eager.metadata["tokenizer.ggml.tokens"][-1]


@compiled
def test_compiled_decoding_equals_pythons_on_random_and_boundary_bytes():
    """Each decoded str equals ``str(b, "utf-8", "surrogateescape")`` (same characters, same width)."""
    rng = random.Random(3)
    edges = [0, 0x7F, 0x80, 0xFF, 0x100, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF]
    samples = [chr(cp).encode() for cp in edges] + [b"a" + chr(cp).encode() + b"z" for cp in edges]
    samples += [  # not UTF-8: surrogates, overlong forms, past U+10FFFF, cut sequences, stray bytes
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xf0\x80\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xf8\x88\x80\x80\x80",
        b"\xff",
        b"\x80",
        b"\xc3",
        b"\xe2\x82",
        b"\xf0\x9f\x98",
        b"ab\xe2\x82",
        b"\xe2\x82\xac\xe2",
    ]
    valid = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    for _ in range(3000):
        samples.append("".join(chr(rng.choice(valid)) for _ in range(rng.randrange(5))).encode())
        samples.append(
            bytes(rng.choice((rng.randrange(128), rng.randrange(128, 256))) for _ in range(rng.randrange(9)))
        )
    raw = b"".join(struct.pack("<Q", len(b)) + b for b in samples)
    stopped, at, got = walk.compiled_scan.decode(raw, 0, len(samples), 8, False, 2**64 - 1)
    want = [b.decode("utf-8", "surrogateescape") for b in samples]
    assert (stopped, at) == (len(samples), len(raw)) and got == want
    assert [s.encode("utf-8", "surrogateescape") for s in got] == samples
    # and the check that finds the strings that are not UTF-8, without decoding, both ways
    bad = [i for i, b in enumerate(samples) if not _is_utf8(b)]
    assert 20 < len(bad) < len(samples) // 2
    lazy = LazyStrings(raw, len(samples), "<Q")
    assert lazy.invalid_utf8() == bad
    with pytest.MonkeyPatch.context() as m:
        m.setattr(values, "compiled_scan", None)
        assert lazy.invalid_utf8() == bad
    big = b"".join(struct.pack(">Q", len(b)) + b for b in samples)
    assert LazyStrings(big, len(samples), ">Q").invalid_utf8() == bad


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@compiled
@pytest.mark.parametrize(("version", "order"), [(3, "little"), (3, "big"), (1, "little"), (2, "big")])
def test_pairs_of_every_scalar_type_read_the_same_both_ways(version, order, monkeypatch):
    vt = gguf_schema.ValueType
    edges = {
        vt.UINT8: [0, 255],
        vt.INT8: [-128, 127],
        vt.UINT16: [0, 65535],
        vt.INT16: [-32768, 32767],
        vt.UINT32: [0, 2**32 - 1],
        vt.INT32: [-(2**31), 2**31 - 1],
        vt.UINT64: [0, 2**64 - 1],
        vt.INT64: [-(2**63), 2**63 - 1],
        vt.BOOL: [False, True, gguf_schema.BoolByte(2), gguf_schema.BoolByte(255)],
        vt.STRING: ["", "a", "é\udcff", "日本"],
        vt.FLOAT32: [np.float32(1.5)],
        vt.FLOAT64: [np.float64(-2.25)],
    }
    fields = [
        gguf_schema.make_field(f"k.{t.name}.{j}", v, t) for t, values in edges.items() for j, v in enumerate(values)
    ]
    fields.append(gguf_schema.make_field("k.\udcfe", 7, vt.UINT32))  # a key that is not UTF-8
    fields.append(gguf_schema.make_field("k.array", [1, 2], vt.ARRAY, vt.INT16))
    fields.append(gguf_schema.make_field("k.after", "last", vt.STRING))
    out = io.BytesIO()
    gguf_schema.save(out, fields, {}, version=version, byte_order=order, sync=False)
    for lazy in (False, True):
        result = assert_agree(out.getvalue(), monkeypatch, lazy=lazy)
        assert result[1] == fields
        got = {f.key: f.value for f in result[1]}
        assert type(got["k.BOOL.2"]) is gguf_schema.BoolByte and got["k.BOOL.2"] == 2 and got["k.BOOL.1"] is True
        assert got["k.UINT64.1"] == 2**64 - 1 and got["k.INT64.0"] == -(2**63) and got["k.INT8.0"] == -128
    with read(out.getvalue()) as f:
        pair = f.fields["k.UINT32.1"]
        assert not gc.is_tracked(pair)  # holds only atomic values: never part of a cycle
        with pytest.raises(AttributeError):
            pair.value = 3  # type: ignore[misc]
