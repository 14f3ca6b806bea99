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

The header bytes come from the one assembler, :func:`gguf_schema.writer.header_bytes`.

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

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ..errors import GGUFChangedError
from ..format.types import ValueType
from ..model import GGUFFile
from ..reader import read
from ..writer import Progress, TensorInfo, header_bytes, save_file

__all__ = ["EditResult", "delete_key", "edit_file", "rename_key", "set_key", "set_key_from_file"]

PathLike = Union[str, "os.PathLike[str]"]


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


def edit_file(
    path: PathLike,
    edit: Callable[[GGUFFile], object],
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
) -> EditResult:
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
    f = read(src)
    try:
        old_alignment = f.alignment
        edit(f)
        if out is None and f.alignment == old_alignment:
            new_header = header_bytes(
                f.fields.records,
                [TensorInfo.of(t) for t in f.tensor_list],
                version=f.version,
                byte_order=f.byte_order,
                padding=f.padding,
                data_size=f.data_section.size,
            )
            if len(new_header) == f.data_offset:
                f.close()
                return _write_in_place(src, new_header)
        target = out if out is not None else src
        save_file(f, target, progress=progress)
        return EditResult(target, False, os.path.getsize(target))
    finally:
        f.close()


def _write_in_place(path: str, new_header: bytes) -> EditResult:
    with open(path, "r+b") as fh:
        old = fh.read(len(new_header))
        if len(old) != len(new_header):  # the file shrank under us: refuse rather than guess
            raise GGUFChangedError("the file changed while it was being edited", path=path)
        diff = np.flatnonzero(np.frombuffer(old, np.uint8) != np.frombuffer(new_header, np.uint8))
        if diff.size == 0:
            return EditResult(path, True, 0)
        first, last = int(diff[0]), int(diff[-1]) + 1
        fh.seek(first)
        fh.write(new_header[first:last])
        fh.flush()
        os.fsync(fh.fileno())
    return EditResult(path, True, last - first)


def set_key(
    path: PathLike,
    key: str,
    value: Any,
    type: ValueType | int | None = None,
    element_type: ValueType | int | None = None,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
) -> EditResult:
    """Set metadata ``key`` to ``value`` (an existing key keeps its stored type unless ``type`` is given)."""
    return edit_file(path, lambda f: f.set(key, value, type, element_type), output=output, progress=progress)


def set_key_from_file(
    path: PathLike, key: str, source: PathLike, *, output: PathLike | None = None, progress: Progress | None = None
) -> EditResult:
    """Set ``key`` to the contents of the text file ``source`` as a STRING (e.g. a chat template).

    The bytes are stored exactly as they are in ``source`` (not decoded and re-encoded).
    """
    with open(source, "rb") as fh:
        text = fh.read().decode("utf-8", "surrogateescape")
    return edit_file(path, lambda f: f.set(key, text, ValueType.STRING), output=output, progress=progress)


def delete_key(
    path: PathLike, key: str, *, output: PathLike | None = None, progress: Progress | None = None
) -> EditResult:
    """Remove every occurrence of metadata ``key``; raises :class:`~gguf_schema.reader.GGUFKeyError` if absent."""
    return edit_file(path, lambda f: f.delete(key), output=output, progress=progress)


def rename_key(
    path: PathLike, old: str, new: str, *, output: PathLike | None = None, progress: Progress | None = None
) -> EditResult:
    """Rename metadata key ``old`` to ``new``, keeping its position, type and value."""
    return edit_file(path, lambda f: f.rename(old, new), output=output, progress=progress)
