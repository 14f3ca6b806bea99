"""Metadata edits on files: set, delete, rename keys without loading tensor data.

An edit opens the file (memory-mapped: tensor data is never read into memory), changes its
metadata records with :meth:`GGUFFile.set` / ``delete`` / ``rename`` and writes the result:

* **in place** when the new header (metadata, tensor infos and padding, everything before
  the data section) has exactly the old size, so every tensor keeps its offset: only the
  changed header bytes are written, into the same file. A shorter header still fits when the
  padding before the data section can absorb the difference. A process that has the file
  memory-mapped at that moment sees the new header bytes (writes into the same inode are
  visible to every map of it); tensor data is untouched.
* **streamed copy** otherwise (or with an output path): the new header followed by the old
  data section copied verbatim in chunks (or laid out afresh when ``general.alignment``
  changed), written to a temporary file that atomically replaces the target.

Tensor bytes are copied unchanged either way.

This module also owns :func:`header_bytes` (the exact bytes before the data section for a
list of records and tensor infos) and :func:`parse_value_text`, which turns command-line
text into a value of a given :class:`~gguf_schema.format.types.ValueType`.

>>> import os, tempfile, numpy as np, gguf_schema
>>> path = os.path.join(tempfile.mkdtemp(), "m.gguf")
>>> gguf_schema.save(path, {"general.name": "abc"}, {"w": np.ones(4, np.float32)})
>>> set_key(path, "general.name", "xyz").in_place   # same length: header rewritten in place
True
>>> set_key(path, "general.name", "a longer name").in_place
False
>>> with gguf_schema.open(path) as f:
...     f.metadata["general.name"], f.tensors["w"].data.tolist()
('a longer name', [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np
from construct import ConstructError, Container

from ..errors import GGUFBuildError, GGUFError
from ..cli.progress import CountingWriter, Progress
from ..reader import GGUFFile
from ..reader import open as gguf_open
from ..format.schema import gguf_schema
from ..format.types import ValueType
from ..format.values import Field, GGUFArray
from ..writer import atomic_write

__all__ = [
    "EditResult",
    "TensorInfo",
    "edit_file",
    "set_key",
    "set_key_from_file",
    "delete_key",
    "rename_key",
    "header_bytes",
    "parse_type",
    "parse_value_text",
]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class TensorInfo:
    """A tensor info record as stored: name, ggml type id, dims (innermost first), relative offset."""

    name: str
    type: int
    dims: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class EditResult:
    """What an edit did.

    Attributes:
        path: the file written.
        in_place: True when only header bytes of the original file were overwritten.
        bytes_written: bytes written to disk (the changed span in place, the whole file for a copy).
    """

    path: str
    in_place: bool
    bytes_written: int


class _NoData:
    """A stand-in for a non-empty data section that writes nothing (the padding node asks its size)."""

    def __init__(self, size: int):
        self.size = size

    def write_to(self, stream: Any) -> None:
        return None


def header_bytes(fields: Iterable[Field], tensors: Sequence[TensorInfo], *, version: int, byte_order: str,
                 padding: bytes | None = None, data_size: int = 1) -> bytes:
    """The bytes of a GGUF file before its data section, built by the schema.

    Args:
        fields: metadata records in file order (duplicates allowed).
        tensors: tensor infos with their stored (relative) offsets.
        version, byte_order: the file variant.
        padding: the padding bytes to keep after the tensor infos when they fit (else zeros).
        data_size: size of the data section that will follow; with 0 a short ``padding`` is kept
            as it is (a file with no data may end before the padding is complete).

    >>> from gguf_schema import make_field
    >>> len(header_bytes([make_field("a", 1)], [TensorInfo("t", 0, (4,), 0)], version=3, byte_order="little"))
    96
    """
    schema = gguf_schema(byte_order, version)
    obj = Container(
        header=Container(metadata_kv=[Container(key=f.key, value_type=f.type, value=f.value) for f in fields]),
        tensor_infos=[Container(name=t.name, dimensions=list(t.dims), type=int(t.type), offset=int(t.offset)) for t in tensors],
        _padding=padding,
        tensor_data=b"" if data_size == 0 else _NoData(data_size),
    )
    try:
        return schema.gguf_file_t.build(obj)
    except GGUFError:
        raise
    except ConstructError as e:
        msg = str(e).split("\n", 1)[-1]
        raise GGUFBuildError(f"cannot build: {msg}", path=(e.path or "").replace("(building) -> ", "") or None) from None
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        raise GGUFBuildError(f"cannot build: {type(e).__name__}: {e}") from None


def tensor_infos(f: GGUFFile) -> list[TensorInfo]:
    """The tensor infos of an open file, as stored."""
    return [TensorInfo(t.name, int(t.type), tuple(t.dims), t.stored_offset) for t in f.tensor_list]


def edit_file(path: PathLike, edit: Callable[[GGUFFile], None], *, output: PathLike | None = None,
              progress: Progress | None = None) -> EditResult:
    """Apply ``edit`` (a function changing an open :class:`GGUFFile`'s metadata) to a file.

    Without ``output`` the file itself changes: in place when the header size is unchanged,
    else by a streamed copy that atomically replaces it. With ``output`` the edited file is
    written there (atomically) and the original stays as it was.

    >>> import os, tempfile, gguf_schema
    >>> p = os.path.join(tempfile.mkdtemp(), "v.gguf")
    >>> gguf_schema.save(p, {"a": 1, "b": 2})
    >>> edit_file(p, lambda f: f.delete("a")).in_place
    False
    >>> list(gguf_schema.open(p).metadata)
    ['b']
    """
    src = os.fspath(path)
    out = os.fspath(output) if output is not None else None
    if out is not None and os.path.exists(out) and os.path.samefile(src, out):
        out = None
    f = gguf_open(src)
    try:
        old_alignment = f.alignment
        edit(f)
        if out is None and f.alignment == old_alignment:
            new_header = header_bytes(f.fields.records, tensor_infos(f), version=f.version, byte_order=f.byte_order,
                                      padding=f.padding, data_size=f.data_section.size)
            if len(new_header) == f.data_offset:
                f.close()
                return _write_in_place(src, new_header)
        target = out if out is not None else src
        total = f.file_size
        bar = progress if progress is not None else Progress(total, "write")
        try:
            atomic_write(target, lambda stream: f.save(CountingWriter(stream, bar)))
        finally:
            bar.close()
        return EditResult(target, False, os.path.getsize(target))
    finally:
        f.close()


def _write_in_place(path: str, new_header: bytes) -> EditResult:
    with open(path, "r+b") as fh:
        old = fh.read(len(new_header))
        if len(old) != len(new_header):  # the file shrank under us: refuse rather than guess
            raise GGUFError("the file changed while it was being edited", path=path)
        diff = np.flatnonzero(np.frombuffer(old, np.uint8) != np.frombuffer(new_header, np.uint8))
        if diff.size == 0:
            return EditResult(path, True, 0)
        first, last = int(diff[0]), int(diff[-1]) + 1
        fh.seek(first)
        fh.write(new_header[first:last])
        fh.flush()
        os.fsync(fh.fileno())
    return EditResult(path, True, last - first)


def set_key(path: PathLike, key: str, value: Any, type: ValueType | int | None = None,
            element_type: ValueType | int | None = None, *, output: PathLike | None = None,
            progress: Progress | None = None) -> EditResult:
    """Set metadata ``key`` to ``value`` (an existing key keeps its stored type unless ``type`` is given)."""
    return edit_file(path, lambda f: f.set(key, value, type, element_type), output=output, progress=progress)


def set_key_from_file(path: PathLike, key: str, source: PathLike, *, output: PathLike | None = None,
                      progress: Progress | None = None) -> EditResult:
    """Set ``key`` to the contents of the text file ``source`` as a STRING (e.g. a chat template).

    The bytes are stored exactly as they are in ``source`` (not decoded and re-encoded).
    """
    with open(source, "rb") as fh:
        text = fh.read().decode("utf-8", "surrogateescape")
    return edit_file(path, lambda f: f.set(key, text, ValueType.STRING), output=output, progress=progress)


def delete_key(path: PathLike, key: str, *, output: PathLike | None = None, progress: Progress | None = None) -> EditResult:
    """Remove every occurrence of metadata ``key``; raises :class:`~gguf_schema.reader.GGUFKeyError` if absent."""
    return edit_file(path, lambda f: f.delete(key), output=output, progress=progress)


def rename_key(path: PathLike, old: str, new: str, *, output: PathLike | None = None, progress: Progress | None = None) -> EditResult:
    """Rename metadata key ``old`` to ``new``, keeping its position, type and value."""
    return edit_file(path, lambda f: f.rename(old, new), output=output, progress=progress)


# --------------------------------------------------------------------------- values from text

_TYPE_ALIASES = {"str": "STRING", "float": "FLOAT32", "double": "FLOAT64", "int": "INT32", "uint": "UINT32"}
_ARRAY_RE = re.compile(r"^array\s*(?:\[\s*([A-Za-z0-9_]+)\s*\]|:\s*([A-Za-z0-9_]+))?$", re.IGNORECASE)


def parse_type(text: str) -> tuple[ValueType, ValueType | None]:
    """A value type from its name (case-insensitive): ``uint32``, ``string``, ``ARRAY[STRING]`` ...

    >>> parse_type("uint8")
    (<ValueType.UINT8: 0>, None)
    >>> parse_type("array[float32]")
    (<ValueType.ARRAY: 9>, <ValueType.FLOAT32: 6>)
    """
    m = _ARRAY_RE.match(text.strip())
    if m:
        inner = m.group(1) or m.group(2)
        return ValueType.ARRAY, (_scalar_type(inner) if inner else None)
    return _scalar_type(text), None


def _scalar_type(text: str) -> ValueType:
    name = _TYPE_ALIASES.get(text.strip().lower(), text.strip().upper())
    try:
        return ValueType[name]
    except KeyError:
        names = ", ".join(t.name.lower() for t in ValueType)
        raise GGUFBuildError(f"unknown value type {text!r} (one of: {names}; arrays as array[TYPE])", value=text) from None


_NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$")
_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|\d+)$")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_value_text(text: str, vt: ValueType | None = None, et: ValueType | None = None) -> tuple[ValueType | None, Any]:
    """Turn command-line text into a value, for type ``vt`` (and array element type ``et``).

    Without ``vt`` the type is guessed: ``true``/``false`` -> BOOL, an integer -> the
    smallest fitting of UINT32/INT32/UINT64/INT64, a decimal number -> FLOAT32, a JSON list
    -> ARRAY, anything else -> STRING. Returns ``(type or None when guessed, value)``.

    >>> parse_value_text("4096")
    (None, 4096)
    >>> parse_value_text("0x10", ValueType.UINT8)
    (<ValueType.UINT8: 0>, 16)
    >>> parse_value_text('["a", "b"]', ValueType.ARRAY, ValueType.STRING)
    (<ValueType.ARRAY: 9>, GGUFArray(STRING, ['a', 'b']))
    """
    if vt is None:
        low = text.strip().lower()
        if low in ("true", "false"):
            return None, low == "true"
        if _INT_RE.match(text.strip()):
            return None, int(text.strip(), 0)
        if _NUMBER_RE.match(text.strip()):
            return None, float(text)
        if text.strip().startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                return None, text
            return None, items
        return None, text
    if vt == ValueType.STRING:
        return vt, text
    if vt == ValueType.ARRAY:
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise GGUFBuildError(f"an ARRAY value is a JSON list, e.g. [1, 2] or [\"a\"]: {e.msg}", value=text) from None
        if not isinstance(items, list):
            raise GGUFBuildError("an ARRAY value is a JSON list", value=text)
        if et is None:
            return vt, items
        return vt, GGUFArray(et, _typed_items(items, et))
    return vt, _scalar_from_text(text, vt)


def _typed_items(items: list, et: ValueType) -> Any:
    if et == ValueType.STRING:
        return [x if isinstance(x, str) else json.dumps(x) for x in items]
    if et == ValueType.ARRAY:
        raise GGUFBuildError("nested arrays cannot be given on the command line: use dump --json / build", value=et.name)
    vals = [_scalar_from_text(x, et) if isinstance(x, str) else x for x in items]
    from ..format.values import coerce_value

    return coerce_value(vals, ValueType.ARRAY, et)[1].items


def _scalar_from_text(text: Any, vt: ValueType) -> Any:
    s = str(text).strip()
    if vt == ValueType.BOOL:
        if s.lower() in _TRUE:
            return True
        if s.lower() in _FALSE:
            return False
        raise GGUFBuildError(f"BOOL needs true or false, got {s!r}", value=s)
    if vt.is_integer:
        if not _INT_RE.match(s):
            raise GGUFBuildError(f"{vt.name} needs an integer, got {s!r}", value=s)
        return int(s, 0)
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        try:
            v = float(s)
        except ValueError:
            raise GGUFBuildError(f"{vt.name} needs a number, got {s!r}", value=s) from None
        return v
    return s  # pragma: no cover - STRING handled by the caller
