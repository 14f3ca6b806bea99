"""gguf-schema: the GGUF model file format as a declarative schema, with a lazy reader and a byte-exact writer.

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "llama", "general.name": "tiny"},
...                  {"token_embd.weight": np.ones((4, 8), np.float32)})
>>> with gguf_schema.open(buf.getvalue()) as f:
...     f.metadata["general.name"], f.fields["general.name"].type.name, f.tensors["token_embd.weight"].shape
('tiny', 'STRING', (4, 8))
"""

from .errors import (
    GGUFBuildError,
    GGUFError,
    GGUFFormatError,
    GGUFLimitError,
    GGUFRoundTripError,
    GGUFTruncatedError,
)
from .format.limits import Limits
from .reader import Fields, GGUFFile, GGUFKeyError, Metadata, Tensor, open
from .format.types import FileType, GGMLType, ValueType
from .format.values import BoolByte, Field, GGUFArray, make_field
from .writer import RawTensor, save


def open_split(first_shard):  # type: ignore[no-untyped-def]
    """Open a model split into shards (``NAME-00001-of-0000N.gguf``) as one: see :func:`gguf_schema.tools.split.open_split`."""
    from .tools.split import open_split as _open_split

    return _open_split(first_shard)

__version__ = "0.1.0"

__all__ = [
    "open",
    "open_split",
    "save",
    "GGUFFile",
    "Tensor",
    "RawTensor",
    "Fields",
    "Metadata",
    "Field",
    "GGUFArray",
    "BoolByte",
    "make_field",
    "ValueType",
    "GGMLType",
    "FileType",
    "Limits",
    "GGUFError",
    "GGUFFormatError",
    "GGUFTruncatedError",
    "GGUFLimitError",
    "GGUFBuildError",
    "GGUFRoundTripError",
    "GGUFKeyError",
]
