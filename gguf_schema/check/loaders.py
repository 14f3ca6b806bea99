"""The chat templates each loader renders: how llama.cpp, llama-cpp-python, transformers and gguf-py extract them.

A file's template key is stored once, but loaders read it in different ways, and some change it on the
way: the audit analyses what each of them renders (a *view*), not only the stored value. Each loader is
a small function from the parsed file to its views, written from the loader's source (the versions
read are in :data:`LOADERS` and in docs/audit.md):

* **llama.cpp** (``llama_model::load_hparams``): every metadata pair that is not an ARRAY goes into a
  map of strings, keyed by the key as a C string, first pair wins (``emplace``); the value is
  ``gguf_kv_to_str``, which for a STRING is the C string (cut at its first NUL).
  ``llama_model_chat_template(model, name)`` returns ``tokenizer.chat_template`` or
  ``tokenizer.chat_template.<name>`` from that map (the server asks for the default and ``tool_use``).
  So an ARRAY stored first under the template key is skipped and a later key that reads the same as a
  C string wins.
* **llama-cpp-python** (``_LlamaModel.metadata``): the same map, copied out through
  ``llama_model_meta_val_str_by_index`` into a reused buffer of 1,024 bytes that grows only when a value
  is *longer* than it (``nbytes > buffer_size``): a value of exactly the buffer's size is cut by
  ``snprintf`` to one byte less (its last byte dropped). The buffer grows to ``n + 1`` for any key or
  value of ``n > 1,024`` bytes read before, so the sizes it can have are 1,024 and those. Every key
  ``tokenizer.chat_template`` and ``tokenizer.chat_template.*`` of the map becomes a chat handler.
* **transformers** (``load_gguf_checkpoint``): gguf-py's ``fields`` (below), the key
  ``tokenizer.chat_template`` only; a STRING, or an ARRAY of one string (a list of one value is
  unwrapped); then every string value containing the architecture name has it replaced by the
  architecture transformers uses (``qwen2moe`` -> ``qwen2_moe``, ``qwen3moe`` -> ``qwen3_moe``, any
  architecture containing ``llama`` -> ``mistral`` when ``general.name`` is ``mistral``, any containing
  ``t5`` -> ``t5`` or ``umt5``). The architecture is the file's own text, so the replacement is of
  any text the file chooses, by a fixed word: it can delete a comment's opening ``{#``.
* **gguf-py** (``GGUFReader.fields``): keys as whole strings (a NUL is part of the key); a second
  pair with the same whole key makes the reader refuse the file; values whole (NULs included).

Views that give the same text are analysed once (:func:`distinct`).

>>> import io, gguf_schema
>>> from gguf_schema.format.values import make_field
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, [make_field("tokenizer.chat_template", "{{ messages }}\\0{# rest")])
>>> with gguf_schema.open(buf.getvalue()) as f:
...     [(v.loader, v.text) for v in template_views(f) if v.loader in ("llama.cpp", "gguf-py")]
[('llama.cpp', '{{ messages }}'), ('gguf-py', '{{ messages }}\\x00{# rest')]
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from ..format import keys as K
from ..format.types import ValueType
from ..format.values import Field
from ..model import GGUFFile
from .ggml_view import c_string

__all__ = ["LOADERS", "LoaderInfo", "View", "distinct", "template_views"]

TEMPLATE_KEY = K.TOKENIZER_CHAT_TEMPLATE
#: llama-cpp-python's first buffer for metadata values (it grows only for longer values)
LLAMA_CPP_PYTHON_BUFFER = 1024


@dataclass(frozen=True)
class LoaderInfo:
    """A loader the audit models: its name, the version of its source read, and how it reads the template."""

    name: str
    version: str
    reads: str


#: The loaders modelled, in the order their views are reported.
LOADERS: tuple[LoaderInfo, ...] = (
    LoaderInfo(
        "llama.cpp",
        "ggml-org/llama.cpp master (src/llama-model.cpp load_hparams, src/llama-impl.cpp gguf_kv_to_str), 2026-11",
        "first non-ARRAY pair whose key reads as the name up to a NUL; the value up to its first NUL",
    ),
    LoaderInfo(
        "llama-cpp-python",
        "abetlen/llama-cpp-python 3691546f (2026-08-17; llama_cpp/_internals.py metadata, llama.py)",
        "llama.cpp's map, copied through a 1,024-byte buffer: a value as long as the buffer loses its last byte",
    ),
    LoaderInfo(
        "transformers",
        "huggingface/transformers 027a2d8f (modeling_gguf_pytorch_utils.py load_gguf_checkpoint)",
        "gguf-py's field 'tokenizer.chat_template' (an ARRAY of one string unwrapped), the architecture name "
        "replaced inside it",
    ),
    LoaderInfo(
        "gguf-py",
        "gguf 0.19.0 (gguf_reader.py GGUFReader._push_field)",
        "whole keys, a duplicate whole key refused; the whole value",
    ),
)


@dataclass(frozen=True)
class View:
    """The template one loader renders under one name.

    Attributes:
        loader: the loader's name (a name in :data:`LOADERS`).
        name: the template's name as the loader knows it (``tokenizer.chat_template[.<name>]``).
        field: the stored pair it comes from.
        text: the text the loader renders.
        change: how the text differs from the stored value, in words ("" when it does not).
    """

    loader: str
    name: str
    field: Field
    text: str
    change: str = ""


def _is_template_name(name: str) -> bool:
    return name == TEMPLATE_KEY or name.startswith(TEMPLATE_KEY + ".")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _decodes(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # a Python loader fails on the file (strict decoding): it renders nothing


def _scalar_text(fld: Field) -> str:
    """``gguf_kv_to_str`` of a scalar: the C string of a STRING, the decimal text of a number."""
    if fld.type == ValueType.STRING:
        return c_string(str(fld.value))
    if fld.type == ValueType.BOOL:
        return "true" if fld.value else "false"
    if fld.type in (ValueType.FLOAT32, ValueType.FLOAT64):
        value = float(fld.value)
        if fld.type == ValueType.FLOAT32:
            value = struct.unpack("<f", struct.pack("<f", value))[0]
        return f"{value:f}"  # std::to_string
    return str(int(fld.value))


def llama_cpp_map(f: GGUFFile) -> dict[str, Field]:
    """llama.cpp's ``gguf_kv``: each key as a C string to the first pair of it that is not an ARRAY."""
    out: dict[str, Field] = {}
    for fld in f.fields.records:
        if fld.type != ValueType.ARRAY:
            out.setdefault(c_string(fld.key), fld)
    return out


def _llama_cpp(f: GGUFFile, kv: dict[str, Field]) -> Iterator[View]:
    for name, fld in kv.items():
        if not _is_template_name(name):
            continue
        text = _scalar_text(fld)
        change = ""
        if fld.type == ValueType.STRING and text != fld.value:
            change = f"cut at the NUL at character {len(text):,} of {len(str(fld.value)):,}"
        elif fld.type != ValueType.STRING:
            change = f"a {fld.type.name} shown as text"
        yield View("llama.cpp", name, fld, text, change)


def _llama_cpp_python(f: GGUFFile, kv: dict[str, Field]) -> Iterator[View]:
    texts = {name: _utf8(_scalar_text(fld)) for name, fld in kv.items()}
    # the sizes the reused buffer can have when a value is copied: 1,024, or one more than any key or value
    # longer than that (read before it, in the map's order, which the audit does not know)
    sizes = {LLAMA_CPP_PYTHON_BUFFER}
    for name, data in texts.items():
        for n in (len(_utf8(name)), len(data)):
            if n > LLAMA_CPP_PYTHON_BUFFER:
                sizes.add(n + 1)
    for name, fld in kv.items():
        if not _is_template_name(name):
            continue
        data = texts[name]
        whole = _decodes(data)
        if whole is not None:
            yield View("llama-cpp-python", name, fld, whole, "" if whole == fld.value else "cut at a NUL")
        if len(data) in sizes:
            cut = _decodes(data[:-1])
            if cut is not None:
                yield View(
                    "llama-cpp-python",
                    name,
                    fld,
                    cut,
                    f"its last byte dropped: the value is {len(data):,} bytes, the size of the buffer it is copied into",
                )


def gguf_py_fields(f: GGUFFile) -> dict[str, Field] | None:
    """gguf-py's ``GGUFReader.fields``: whole keys to pairs; None when it refuses the file (a duplicate key)."""
    out: dict[str, Field] = {}
    for fld in f.fields.records:
        if fld.key in out:
            return None
        out[fld.key] = fld
    return out


def _values(fld: Field) -> list[str] | None:
    """The strings gguf-py's ``parts``/``data`` give for a STRING or an ARRAY of STRING."""
    if fld.type == ValueType.STRING:
        return [str(fld.value)]
    if fld.type == ValueType.ARRAY and fld.element_type == ValueType.STRING:
        return [str(s) for s in fld.value.items]
    return None


def _gguf_py(fields: dict[str, Field]) -> Iterator[View]:
    for name, fld in fields.items():
        if _is_template_name(name) and fld.type == ValueType.STRING:
            yield View("gguf-py", name, fld, str(fld.value))


def _first_text(fld: Field | None) -> str | None:
    if fld is None:
        return None
    values = _values(fld)
    return values[0] if values else None


def transformers_architecture(fields: dict[str, Field]) -> tuple[str, str] | None:
    """(the file's architecture, the one transformers replaces it with), as ``load_gguf_checkpoint`` decides."""
    arch = _first_text(fields.get(K.GENERAL_ARCHITECTURE))
    if arch is None:
        return None
    name_field = fields.get(K.GENERAL_NAME)
    names = (_values(name_field) or []) if name_field is not None else []
    if "llama" in arch and "mistral" in names:
        updated = "mistral"
    elif "t5" in arch:
        updated = "umt5" if names and "umt5" in names[0].lower() else "t5"
    else:
        updated = arch
    if "qwen2moe" in arch:
        updated = "qwen2_moe"
    elif "qwen3moe" in arch:
        updated = "qwen3_moe"
    return arch, updated


def _transformers(fields: dict[str, Field]) -> Iterator[View]:
    fld = fields.get(TEMPLATE_KEY)
    values = _values(fld) if fld is not None else None
    if fld is None or values is None or len(values) != 1:
        return  # no template, or a list of several values (not a template string)
    text = values[0]
    change = "" if fld.type == ValueType.STRING else "the one string of an ARRAY"
    names = transformers_architecture(fields)
    if names is not None and names[0] and names[0] in text:
        arch, updated = names
        text = text.replace(arch, updated)
        change = (change + "; " if change else "") + f"the architecture {arch!r} replaced by {updated!r}"
    yield View("transformers", TEMPLATE_KEY, fld, text, change)


def template_views(f: GGUFFile) -> list[View]:
    """Every template every modelled loader renders from ``f``, in the order of :data:`LOADERS`."""
    kv = llama_cpp_map(f)
    views = [*_llama_cpp(f, kv), *_llama_cpp_python(f, kv)]
    fields = gguf_py_fields(f)
    if fields is not None:
        views += [*_transformers(fields), *_gguf_py(fields)]
    return views


def distinct(views: list[View]) -> dict[str, list[View]]:
    """The views grouped by text, in first-seen order: each text is analysed (and rendered) once."""
    out: dict[str, list[View]] = {}
    for v in views:
        out.setdefault(v.text, []).append(v)
    return out
