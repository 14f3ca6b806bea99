"""Arrays of arrays: the loop of :meth:`ArrayItems._parse_arrays` gives what the general path gives.

That loop reads each inner array's header and body in place (numbers, strings, empty arrays of
arrays) and hands anything else to :meth:`ArrayItems.parse_items`. Two witnesses check it, on a
file holding an inner array of every element type (empty and not, bools other than 0/1, invalid
UTF-8, arrays of arrays), in both byte orders and every version, whole and cut at every byte:

* the general path, element by element (:func:`general_parse_arrays`: every inner array through
  ``parse_items``, as the loop did before it read bodies in place): the same values (type,
  dtype, byte order, read-only flag, every byte) and the same errors (class, message, offset,
  path, value), eagerly and lazily;
* the reference variant (construct's own ``Array``): the same values and the same errors
  (class, offset, value; it words its messages and spells its paths its own way).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from gguf_schema import GGUFError, Limits
from gguf_schema.format import nodes
from gguf_schema.format.fast import arrays
from gguf_schema.format.types import ValueType
from gguf_schema.format.values import GGUFArray, LazyStrings
from gguf_schema.reader import read
from gguf_schema.testing.malformed import nested_empty_arrays_file

from .helpers import read_reference

VT = ValueType
ORDERS_VERSIONS = [("little", 3), ("big", 3), ("little", 2), ("big", 2), ("little", 1), ("big", 1)]


def general_parse_arrays(self: arrays.ArrayItems, r: Any, n: int, context: Any, path: str) -> list[GGUFArray]:
    """Every inner array through ``parse_items``; a header that fails, through the declared struct."""
    head = struct.Struct(self.length.format[0] + "I" + self.length.format[1])
    out = []
    for i in range(n):
        start = r.pos
        try:
            vt, count = head.unpack_from(r.data, start)
            r.pos = start + head.size
            out.append(GGUFArray(ValueType(vt), self.parse_items(r, ValueType(vt), count, context, f"{path}[{i}]")))
        except GGUFError:
            raise
        except (struct.error, ValueError):
            r.pos = start
            self.nested._parsereport(r, context, f"{path}[{i}]")
            raise AssertionError("the struct read a header the loop could not") from None
    return out


class Writer:
    """Values of one byte order and version, as bytes."""

    def __init__(self, order: str, version: int):
        self.e = "<" if order == "little" else ">"
        self.L = "I" if version == 1 else "Q"
        self.version = version

    def u32(self, x: int) -> bytes:
        return struct.pack(self.e + "I", x)

    def length(self, x: int) -> bytes:
        return struct.pack(self.e + self.L, x)

    def string(self, b: bytes) -> bytes:
        return self.length(len(b)) + b

    def array(self, vt: ValueType, count: int, body: bytes) -> bytes:
        """An array value without its outer value type: element type, count, items."""
        return self.u32(int(vt)) + self.length(count) + body

    def numbers(self, vt: ValueType, values: list[Any]) -> bytes:
        return self.array(
            vt, len(values), np.asarray(values, vt.numpy_dtype("little" if self.e == "<" else "big")).tobytes()
        )

    def file(self, pairs: list[tuple[bytes, ValueType, bytes]]) -> bytes:
        head = b"GGUF" + self.u32(self.version) + self.length(0) + self.length(len(pairs))
        return head + b"".join(self.string(k) + self.u32(int(vt)) + v for k, vt, v in pairs)


def inner_arrays(w: Writer) -> list[bytes]:
    """An inner array of every element type, empty and not."""
    out = []
    for vt in ValueType:
        if vt.is_numeric:
            out.append(w.array(vt, 0, b""))
            if vt == VT.BOOL:
                out.append(w.array(vt, 3, b"\x00\x01\x07"))  # 7: kept as a BoolByte
            elif vt in (VT.FLOAT32, VT.FLOAT64):
                out.append(w.numbers(vt, [1.5, -0.0, float("nan")]))
            else:
                out.append(w.numbers(vt, [1, 2, 127]))
    out.append(w.array(VT.STRING, 0, b""))
    out.append(w.array(VT.STRING, 3, w.string(b"ab") + w.string(b"") + w.string(b"\xff\xc3\xa9")))
    out.append(w.array(VT.ARRAY, 0, b""))
    out.append(w.array(VT.ARRAY, 2, w.numbers(VT.INT16, [-3]) + w.array(VT.STRING, 1, w.string(b"x"))))
    out.append(w.array(VT.ARRAY, 1, w.array(VT.ARRAY, 2, w.numbers(VT.UINT8, [9]) + w.array(VT.ARRAY, 0, b""))))
    return out


def nested_file(order: str, version: int) -> bytes:
    """One key holding an array of the arrays above, and a key after it (so a cut inside is truncation)."""
    w = Writer(order, version)
    items = inner_arrays(w)
    value = w.array(VT.ARRAY, len(items), b"".join(items))
    return w.file([(b"nested", VT.ARRAY, value), (b"after", VT.UINT8, b"\x05")])


def describe(value: Any) -> Any:
    """A value with everything that could differ spelled out (dtype and byte order, read-only flag, class)."""
    if isinstance(value, GGUFArray):
        return ("array", value.type, describe(value.items))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.flags.writeable, value.shape, value.tobytes())
    if isinstance(value, LazyStrings):
        return ("lazy", list(value._marks), bytes(value.raw), value.length_format, list(value))
    if isinstance(value, list):
        return ("list", [describe(x) for x in value])
    return (type(value).__name__, value if not isinstance(value, np.generic) else value.tobytes())


def outcome(data: bytes, *, lazy: bool = False, limits: Limits | None = None, reference: bool = False) -> Any:
    try:
        f = read_reference(data, limits=limits) if reference else read(data, lazy=lazy, limits=limits)
        with f:
            return ("ok", [(r.key, r.type, describe(r.value), r.offset) for r in f.fields.records])
    except GGUFError as e:
        return ("error", type(e), str(e), e.offset, e.path, e.value if e.has_value else None)


def general(data: bytes, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    with monkeypatch.context() as m:
        m.setattr(arrays.ArrayItems, "_parse_arrays", general_parse_arrays)
        return outcome(data, **kw)


def facts(result: Any) -> Any:
    """An outcome as the reference variant can be held to it: the values, or the error's class, offset and value
    (the reference words its messages and spells its paths inside arrays its own way: ``array[3] -> array[2] -> len``
    where the schema names the string ``array[3][2]``)."""
    return result if result[0] == "ok" else (result[0], result[1], result[3], result[5])


@pytest.mark.parametrize("order,version", ORDERS_VERSIONS)
def test_every_element_type_reads_as_the_general_path_and_the_reference(order, version, monkeypatch):
    data = nested_file(order, version)
    fast = outcome(data)
    assert fast[0] == "ok"
    value = fast[1][0][2]
    assert value[:2] == ("array", VT.ARRAY)
    assert {kind for kind, _, _ in value[2][1]} == {"array"}  # every inner array is a GGUFArray
    assert {t for _, t, _ in value[2][1]} == set(ValueType)  # of every element type
    assert fast == general(data, monkeypatch) == outcome(data, reference=True)
    assert outcome(data, lazy=True) == general(data, monkeypatch, lazy=True)
    with read(data) as f:  # a few values spelled out, so the witnesses cannot agree on nothing
        arrays = f.fields.records[0].value.items
        bools = next(a for a in arrays if a.type == VT.BOOL and len(a))
        assert bools.items.tolist() == [False, True, True] and bools.items.view(np.uint8).tolist() == [0, 1, 7]
        strings = next(a for a in arrays if a.type == VT.STRING and len(a))
        assert strings.items == ["ab", "", "\udcff\xe9"]
        deep = [a for a in arrays if a.type == VT.ARRAY][1]
        assert deep[0].type == VT.INT16 and deep[0].items.tolist() == [-3] and deep[1].items == ["x"]
        deeper = [a for a in arrays if a.type == VT.ARRAY][2][0]  # three levels below the key's array
        assert deeper.type == VT.ARRAY and deeper[0].items.tolist() == [9] and deeper[1].type == VT.ARRAY
        assert all(not a.items.flags.writeable for a in arrays if a.type.is_numeric)
        assert f.metadata["after"] == 5


@pytest.mark.parametrize("order,version", ORDERS_VERSIONS)
def test_every_cut_fails_as_the_general_path_and_the_reference(order, version, monkeypatch):
    data = nested_file(order, version)
    start = data.index(b"nested")
    for cut in range(start, len(data)):
        piece = data[:cut]
        fast = outcome(piece)
        assert fast[0] == "error", cut
        assert fast == general(piece, monkeypatch), cut
        assert outcome(piece, lazy=True) == general(piece, monkeypatch, lazy=True), cut
        if cut % 3 == 0 or version == 3:  # the reference is slow: every byte once, a third in the other versions
            assert facts(fast) == facts(outcome(piece, reference=True)), cut


def _with_inner_type(order: str, version: int, vt: int) -> bytes:
    w = Writer(order, version)
    value = w.array(VT.ARRAY, 2, w.array(VT.UINT8, 1, b"\x01") + w.u32(vt) + w.length(0))
    return w.file([(b"nested", VT.ARRAY, value)])


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 1)])
@pytest.mark.parametrize("vt", [13, 255, 2**32 - 1])
def test_an_inner_type_that_names_no_value_type(order, version, vt, monkeypatch):
    data = _with_inner_type(order, version, vt)
    fast = outcome(data)
    assert fast[0] == "error" and fast[4] == "header -> metadata_kv[0] 'nested' -> value -> array[1] -> type", fast
    assert fast[5] == vt
    assert fast == general(data, monkeypatch)
    assert facts(fast) == facts(outcome(data, reference=True))


LIMITS = {
    "max_array_length=2": Limits(max_array_length=2),  # the outer array (and inner ones) are longer
    "max_array_length=3": Limits(max_array_length=3),  # the outer one passes a smaller file; inner ones of 3 pass
    "max_string_length=1": Limits(max_string_length=1),
    "max_depth=2": Limits(max_depth=2),  # the outer array of arrays is allowed, an inner one of arrays is not
    "max_depth=3": Limits(max_depth=3),
}


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 2), ("little", 1)])
@pytest.mark.parametrize("limits", LIMITS.values(), ids=LIMITS.keys())
def test_limits_fail_as_the_general_path_and_the_reference(order, version, limits, monkeypatch):
    w = Writer(order, version)
    cases = [
        nested_file(order, version),
        w.file([(b"n", VT.ARRAY, w.array(VT.ARRAY, 2, w.array(VT.ARRAY, 0, b"") + w.array(VT.UINT8, 3, b"abc")))]),
        w.file([(b"n", VT.ARRAY, w.array(VT.ARRAY, 1, w.array(VT.STRING, 1, w.string(b"xy"))))]),
    ]
    for data in cases:
        fast = outcome(data, limits=limits)
        assert fast == general(data, monkeypatch, limits=limits)
        assert outcome(data, lazy=True, limits=limits) == general(data, monkeypatch, lazy=True, limits=limits)
        assert facts(fast) == facts(outcome(data, limits=limits, reference=True))
    assert outcome(cases[1], limits=Limits(max_depth=2))[0:2] == ("error", nodes.GGUFLimitError)


@pytest.mark.parametrize("count", [0, 1, 5])
def test_counts_the_file_cannot_hold(count, monkeypatch):
    """An inner count past the bytes left, for each kind of element: truncation named at the inner array."""
    w = Writer("little", 3)
    for vt in ValueType:
        value = w.array(VT.ARRAY, 1 + count, w.array(VT.UINT8, 0, b"") * count + w.array(vt, 2**40, b"\x00" * 16))
        data = w.file([(b"n", VT.ARRAY, value)])
        fast = outcome(data)
        assert fast[0] == "error" and fast[4] == f"header -> metadata_kv[0] 'n' -> value -> array[{count}]", (vt, fast)
        assert fast == general(data, monkeypatch)
        assert facts(fast) == facts(outcome(data, reference=True))


def test_the_hostile_file_reads_as_the_general_path(monkeypatch):
    """The builder behind the cost benchmark: many empty arrays, shared read-only empties, same values."""
    data = nested_empty_arrays_file(1000)
    fast = outcome(data)
    assert fast == general(data, monkeypatch)
    with read(data) as f:
        arrays = f.fields.records[0].value.items
        assert len(arrays) == 1000 and all(a.type == VT.UINT8 and a.items.shape == (0,) for a in arrays)
        with pytest.raises(ValueError):
            arrays[0].items[:] = 1  # read-only: sharing one empty array is safe
