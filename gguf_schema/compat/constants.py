"""The code tables of the ``gguf`` package's API, built from ours: tensor types, value types, file types.

gguf-py names the spec's code tables ``GGMLQuantizationType``, ``GGUFValueType`` and
``LlamaFileType`` and gives ``GGML_QUANT_SIZES`` (block size, bytes per block). Clients import them
by those names, so :mod:`gguf_schema.compat` offers them with gguf-py's names and values, built
here from :mod:`gguf_schema.format.types` (one table of codes in the library, not two):

* :data:`GGMLQuantizationType` holds every live ggml type (removed ids are not members, as in
  gguf-py, so ``GGMLQuantizationType(4)`` is a ``ValueError``);
* :data:`GGML_QUANT_SIZES` gives ggml's geometry. Where gguf-py and ggml disagree we give ggml's,
  because files are written by ggml: Q8_1's block is 36 bytes in ggml (two float16s and 32
  int8s), 40 in gguf-py 0.19.

Tables that are not the spec's (architectures, tensor names, key names) are never copied here:
:func:`gguf_schema.compat.patch` leaves gguf-py's own in place.

>>> GGMLQuantizationType.Q4_K, GGML_QUANT_SIZES[GGMLQuantizationType.Q4_K]
(<GGMLQuantizationType.Q4_K: 12>, (256, 144))
>>> GGUFValueType.get_type(1.5).name, GGUFValueType.get_type([1]).name, LlamaFileType.MOSTLY_Q4_K_M.value
('FLOAT32', 'ARRAY', 15)
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from ..format.types import FileType, GGMLType, ValueType
from .originals import original

__all__ = [
    "GGML_QUANT_SIZES",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
    "GGUF_VERSION",
    "QK_K",
    "GGMLQuantizationType",
    "GGUFEndian",
    "GGUFValueType",
    "LlamaFileType",
    "members",
]

#: the magic ``GGUF`` read as a little-endian uint32
GGUF_MAGIC = int.from_bytes(b"GGUF", "little")
#: the version GGUFWriter writes
GGUF_VERSION = 3
#: ALIGNMENT when ``general.alignment`` is absent (the spec's default)
GGUF_DEFAULT_ALIGNMENT = 32
#: elements in a K-quant super-block
QK_K = GGMLType.Q4_K.block_size

#: ``general.file_type`` ids that llama.cpp's ``llama_ftype`` no longer defines (gguf-py leaves them out)
_RETIRED_FILE_TYPES = frozenset({4, 5, 6, 33, 34, 35})


def _int_enum(name: str, members: list[tuple[str, int]]) -> Any:
    cls = enum.IntEnum(name, members, module=__name__, qualname=name)  # type: ignore[misc]
    return cls


#: ``ggml_type`` under gguf-py's name: the live types (removed ids are not members)
GGMLQuantizationType: Any = _int_enum("GGMLQuantizationType", [(t.name, int(t)) for t in GGMLType if not t.removed])

#: ``gguf_metadata_value_type`` under gguf-py's name
GGUFValueType: Any = _int_enum("GGUFValueType", [(t.name, int(t)) for t in ValueType])

#: ``general.file_type`` (llama.cpp's ``llama_ftype``) under gguf-py's name
LlamaFileType: Any = _int_enum(
    "LlamaFileType", [(t.name, int(t)) for t in FileType if int(t) not in _RETIRED_FILE_TYPES]
)


class GGUFEndian(enum.IntEnum):
    """A file's byte order, as gguf-py's reader and writer name it."""

    LITTLE = 0
    BIG = 1


def _get_type(val: Any) -> Any:
    """The value type gguf-py's writer gives a Python value in an array (``GGUFValueType.get_type``):
    str and bytes are STRING, a list is ARRAY, float FLOAT32, bool BOOL, int INT32."""
    if isinstance(val, (str, bytes, bytearray)):
        return GGUFValueType.STRING
    if isinstance(val, list):
        return GGUFValueType.ARRAY
    if isinstance(val, float):
        return GGUFValueType.FLOAT32
    if isinstance(val, bool):
        return GGUFValueType.BOOL
    if isinstance(val, int):
        return GGUFValueType.INT32
    raise ValueError(f"Unknown type: {type(val)}")


GGUFValueType.get_type = staticmethod(_get_type)

#: (elements per block, bytes per block) of each live type, as ggml has them
GGML_QUANT_SIZES: dict[Any, tuple[int, int]] = {
    GGMLQuantizationType(int(t)): (t.block_size, t.type_size) for t in GGMLType if not t.removed
}


@functools.cache
def members() -> tuple[dict[int, Any], dict[int, Any], dict[int, Any]]:
    """id -> enum member for tensor types, value types and byte orders, as the reader and writer give them:
    the installed ``gguf`` package's own members (``x is gguf.GGMLQuantizationType.Q4_K``), and ours
    only for the ids gguf-py lacks or when it is not installed. Built once.

    >>> quant, value, endian = members()
    >>> quant[12].name, value[8].name, endian[1].name
    ('Q4_K', 'STRING', 'BIG')
    """
    out: list[dict[int, Any]] = []
    for name, ours in (
        ("GGMLQuantizationType", GGMLQuantizationType),
        ("GGUFValueType", GGUFValueType),
        ("GGUFEndian", GGUFEndian),
    ):
        theirs = original(name)
        table = {int(m): m for m in ours}
        if theirs is not None:
            table.update({int(m): m for m in theirs})
        out.append(table)
    return out[0], out[1], out[2]
