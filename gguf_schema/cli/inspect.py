"""The commands that read a file and print what it holds: ``info``, ``dump``, ``tensors``, ``get``, ``diff``.

Each opens its files with :func:`gguf_schema.open` (``diff``: a first shard stands for its split
model) as the reading options say, and prints: results on stdout, warnings and progress on stderr.
Exit codes (:mod:`.conventions`): ``EXIT_OK``; ``EXIT_FINDINGS`` for differences (``diff``) or a
``tensors --filter`` that matches nothing; ``EXIT_ERROR`` for an unreadable file or a key that is
absent (``get``: printed by :func:`gguf_schema.cli.main`); ``EXIT_TRUNCATED`` for a file whose
tensor data runs past its end (the output printed, and a warning).

>>> [c.name for c in COMMANDS]
['info', 'dump', 'tensors', 'get', 'diff']
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import open as open_gguf
from ..errors import GGUFError, GGUFFormatError
from ..format import keys as K
from .command import Family, Trait, arg, exclusive
from .conventions import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_TRUNCATED,
    count,
    error,
    human_count,
    open_options,
    plural,
    truncation,
    warn,
    warn_truncated,
    write,
    write_json,
)
from .progress import Progress

if TYPE_CHECKING:  # the family is imported for `--help` too: what reading needs is imported where it is used
    from .. import Field, GGUFFile
    from ..tools import diff as diff_mod

__all__ = ["COMMANDS"]

COMMANDS = Family()

# --------------------------------------------------------------------------- info


def _layout(f: GGUFFile) -> list[tuple[str, int]]:
    """The file's parts and their sizes in bytes; a truncated file's missing bytes as a part of
    their own (``missing``), so no part is negative or larger than the file."""
    fixed = 8 + 2 * f.variant.size_t  # magic, version, the two counts
    kv_end = f.tensor_list[0].info_offset if f.tensor_list else f.metadata_end  # where the tensor infos begin
    tensor_bytes = 0
    for t in f.tensor_list:
        with contextlib.suppress(GGUFFormatError):  # unknown type: counted with the data section's slack
            tensor_bytes += t.nbytes
    present = min(tensor_bytes, f.data_section.size)
    parts = [
        ("header", fixed),
        ("metadata key-values", kv_end - fixed),
        ("tensor infos", f.metadata_end - kv_end),
        ("padding", len(f.padding)),
        ("tensor data", present),
        ("data padding / other", f.data_section.size - present),
    ]
    missing, _ = truncation(f)
    if missing:
        parts.append(("missing (truncated)", missing))
    return parts


_ARCH_KEYS = (
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "rope.dimension_count",
    "expert_count",
    "vocab_size",
)


def _open(args: argparse.Namespace, *, lazy: bool = False) -> GGUFFile:
    """``args.file`` opened with :func:`gguf_schema.open` as the reading options say."""
    return open_gguf(args.file, lazy=lazy, **open_options(args))


def _info_data(f: GGUFFile, path: str) -> dict[str, Any]:
    """What ``info`` shows, as data (the ``--json`` form)."""
    import numpy as np

    from ..format.types import FileType
    from ..format.values import LazyStrings

    md = f.metadata
    data: dict[str, Any] = {
        "file": path,
        "file_size": f.file_size,
        "version": f.version,
        "byte_order": f.byte_order,
        "alignment": f.alignment,
        "data_offset": f.data_offset,
        "metadata_keys": len(f.fields.records),
        "tensors": len(f.tensor_list),
    }
    if K.SPLIT_COUNT in f.fields:
        data["split"] = {
            "no": int(md.get(K.SPLIT_NO, 0)),
            "count": md[K.SPLIT_COUNT],
            "tensors": md.get(K.SPLIT_TENSORS_COUNT),
        }
    arch = md.get(K.GENERAL_ARCHITECTURE)
    if arch is not None:
        model: dict[str, Any] = {"architecture": arch}
        for k in (K.GENERAL_NAME, K.GENERAL_SIZE_LABEL, K.GENERAL_TYPE, K.GENERAL_FILE_TYPE):
            if k in md:
                model[k.split(".")[-1]] = md[k]
        ft = md.get(K.GENERAL_FILE_TYPE)
        with contextlib.suppress(ValueError, TypeError):
            model["file_type_name"] = FileType(int(ft)).name if ft is not None else None
        model["hparams"] = {
            k: md[f"{arch}.{k}"]
            for k in _ARCH_KEYS
            if f"{arch}.{k}" in md and not isinstance(md[f"{arch}.{k}"], (list, np.ndarray, LazyStrings))
        }
        data["model"] = model
    if K.TOKENIZER_GGML_MODEL in md or K.TOKENIZER_GGML_TOKENS in f.fields:
        data["tokenizer"] = {
            "model": md.get(K.TOKENIZER_GGML_MODEL),
            "tokens": len(f.fields[K.TOKENIZER_GGML_TOKENS].value) if K.TOKENIZER_GGML_TOKENS in f.fields else None,
            "pre": md.get(K.TOKENIZER_GGML_PRE),
            "chat_template": K.TOKENIZER_CHAT_TEMPLATE in md,
        }
    data["parameters"] = sum(t.n_elements for t in f.tensor_list)
    hist: Counter[str] = Counter()
    elems: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for t in f.tensor_list:
        name = t.type_name
        hist[name] += 1
        elems[name] += t.n_elements
        with contextlib.suppress(GGUFFormatError):
            nbytes[name] += t.nbytes
    data["tensor_types"] = [
        {
            "type": name,
            "tensors": n,
            "elements": elems[name],
            "bytes": nbytes[name],
            "bits_per_weight": round(nbytes[name] * 8 / elems[name], 4) if elems[name] else 0.0,
        }
        for name, n in sorted(hist.items(), key=lambda kv: -nbytes[kv[0]])
    ]
    data["layout"] = [{"part": label, "bytes": size} for label, size in _layout(f)]
    missing, cut = truncation(f)
    data["truncated"] = {"missing_bytes": missing, "tensors": cut} if cut else None
    return data


def _info_text(d: dict[str, Any]) -> list[str]:
    out = [
        f"file:        {d['file']} ({count(d['file_size'])} bytes)",
        f"format:      GGUF v{d['version']}, {d['byte_order']}-endian, alignment {d['alignment']}, "
        f"data at offset {count(d['data_offset'])}",
        f"counts:      {plural(d['metadata_keys'], 'metadata key')}, {plural(d['tensors'], 'tensor')}",
    ]
    if "split" in d:
        s = d["split"]
        out.append(
            f"split:       shard {s['no'] + 1} of {s['count']} ({'?' if s['tensors'] is None else s['tensors']} tensors in the model)"
        )
    if "model" in d:
        m = d["model"]
        desc = [str(m["architecture"])]
        for k in ("name", "size_label", "type"):
            if k in m:
                desc.append(f"{k} {m[k]!r}")
        if "file_type" in m:
            name = m.get("file_type_name")
            desc.append(f"file type {name} ({m['file_type']})" if name else f"file type {m['file_type']}")
        out.append("model:       " + ", ".join(desc))
        if m["hparams"]:
            out.append("hparams:     " + ", ".join(f"{k} {v}" for k, v in m["hparams"].items()))
    if "tokenizer" in d:
        t = d["tokenizer"]
        tok = [str(t["model"] if t["model"] is not None else "?")]
        if t["tokens"] is not None:
            tok.append(f"{count(t['tokens'])} tokens")
        if t["pre"] is not None:
            tok.append(f"pre {t['pre']!r}")
        if t["chat_template"]:
            tok.append("chat template")
        out.append("tokenizer:   " + ", ".join(tok))
    out.append(f"parameters:  {count(d['parameters'])} ({human_count(d['parameters'])})")
    if d["tensor_types"]:
        out.append("tensor types:")
        for r in d["tensor_types"]:
            out.append(
                f"  {r['type']:8} {r['tensors']:5} tensors {count(r['elements']):>16} elements "
                f"{count(r['bytes']):>16} bytes  {r['bits_per_weight']:5.2f} bits/weight"
            )
    out.append("file layout:")
    size = d["file_size"]
    for r in d["layout"]:
        if r["part"].startswith("missing"):
            out.append(f"  {r['part']:22} {count(r['bytes']):>16} bytes (past the end of the file)")
        else:
            share = 100 * r["bytes"] / size if size else 0
            out.append(f"  {r['part']:22} {count(r['bytes']):>16} bytes {share:6.2f}%")
    share = 100 * min(d["data_offset"], size) / size if size else 0
    out.append(f"  {'metadata in all':22} {count(d['data_offset']):>16} bytes {share:6.2f}% (before the data section)")
    return out


#: the files of ``info``, ``dump`` and ``tensors``: one or many, as ``check``, ``audit`` and ``scan`` take them
_FILES = arg("files", metavar="FILE", nargs="+")


def _each_file(args: argparse.Namespace, one: Callable[[argparse.Namespace, Callable[[Any], None]], int]) -> int:
    """Run ``one`` (a command for one file, as ``args.file``) for each FILE. Several files: each one's
    text after a ``==> FILE <==`` line, ``--json`` a list (an unreadable file as ``{"file", "error"}``),
    and a file that cannot be read reported on stderr while the others go on. The exit code is the
    worst: 2 if a file could not be read, else 3 if one is truncated, else 1 if every file had
    findings (``tensors --filter`` matched nothing), else 0."""
    several = len(args.files) > 1
    codes: list[int] = []
    docs: list[Any] = []
    for i, path in enumerate(args.files):
        single = argparse.Namespace(**{**vars(args), "file": path})
        if several and not args.json:
            write(("\n" if i else "") + f"==> {path} <==\n")
        try:
            codes.append(one(single, docs.append))
        except (GGUFError, OSError) as e:
            if not several:
                raise
            text = str(e) if isinstance(e, GGUFError) else f"{e.strerror or e}: {path}"
            error(text)
            codes.append(EXIT_ERROR)
            docs.append({"file": path, "error": text})
    if args.json:
        write_json(docs if several else docs[0])
    if EXIT_ERROR in codes:
        return EXIT_ERROR
    if EXIT_TRUNCATED in codes:
        return EXIT_TRUNCATED
    return EXIT_FINDINGS if all(c == EXIT_FINDINGS for c in codes) else EXIT_OK


def _done(f: GGUFFile, path: str) -> int:
    """The exit code of an inspect command: ``EXIT_TRUNCATED`` (and a warning) for a truncated file."""
    return EXIT_TRUNCATED if warn_truncated(f, path) else EXIT_OK


@COMMANDS.command(
    "info",
    "summarise a file: format, model, tensor types, parameters, size breakdown",
    _FILES,
    arg("--json", action="store_true", help="print the summary as JSON (several files: a list)"),
    traits=Trait.READS,
)
def _cmd_info(args: argparse.Namespace) -> int:
    return _each_file(args, _info_one)


def _info_one(args: argparse.Namespace, emit: Callable[[Any], None]) -> int:
    with _open(args, lazy=True) as f:  # a vocabulary is counted, never decoded
        data = _info_data(f, args.file)
        if args.json:
            emit(data)
        else:
            write("\n".join(_info_text(data)) + "\n")
        return _done(f, args.file)


# --------------------------------------------------------------------------- dump, tensors, get, diff


def _value_text(f: Field, full: bool, limit: int = 8) -> str:
    from ..tools import jsonio

    return jsonio.value_text(f, full=full, items=limit)


@COMMANDS.command(
    "dump",
    "list every metadata key with its stored type, and the tensor infos",
    _FILES,
    arg("--json", action="store_true", help="print the lossless JSON form (several files: a list)"),
    arg("--no-tensors", action="store_true", help="leave out the tensor infos"),
    arg("--full-arrays", action="store_true", help="print long arrays and strings in full"),
    description="List every metadata key with its stored type and value, then the tensor infos. Long arrays and "
    "strings are abbreviated unless --full-arrays. --json prints the complete, lossless JSON form "
    "(never abbreviated) that `build` turns back into the same file.",
    traits=Trait.READS,
)
def _cmd_dump(args: argparse.Namespace) -> int:
    return _each_file(args, _dump_one)


def _dump_one(args: argparse.Namespace, emit: Callable[[Any], None]) -> int:
    from ..tools import jsonio
    from .text_values import type_label

    with _open(args) as f:
        if args.json:
            emit(jsonio.to_json(f, tensors=not args.no_tensors))
            return _done(f, args.file)
        out = [
            f"GGUF v{f.version}, {f.byte_order}-endian, alignment {f.alignment}: "
            f"{plural(len(f.fields.records), 'metadata key')}, {plural(len(f.tensor_list), 'tensor')}"
        ]
        out.append("metadata:")
        width = max((len(r.key) for r in f.fields.records), default=0)
        for i, r in enumerate(f.fields.records, 1):
            out.append(f"  {i:4}  {r.key:{width}}  {type_label(r):14}  {_value_text(r, args.full_arrays)}")
        if not args.no_tensors:
            out.append("tensors:")
            width = max((len(t.name) for t in f.tensor_list), default=0)
            for i, t in enumerate(f.tensor_list, 1):
                try:
                    size = f"{count(t.nbytes)} bytes"
                except Exception as e:  # unknown type: show the info record anyway
                    size = f"size unknown ({e})"
                out.append(
                    f"  {i:4}  {t.name:{width}}  {t.type_name:7}  shape {list(t.shape)}  dims {list(t.dims)}"
                    f"  offset {count(t.stored_offset)} (absolute {count(t.offset)})  {size}"
                )
        write("\n".join(out) + "\n")
        return _done(f, args.file)


def _tensor_row(t: Any) -> dict[str, Any]:
    try:
        nbytes: int | None = t.nbytes
    except GGUFFormatError:
        nbytes = None
    return {
        "name": t.name,
        "type": t.type_name,
        "shape": list(t.shape),
        "elements": t.n_elements,
        "bytes": nbytes,
        "offset": t.offset,
    }


@COMMANDS.command(
    "tensors",
    "list tensors: name, type, shape, elements, bytes, offset",
    _FILES,
    arg("--filter", metavar="GLOB", action="append", help="only names matching GLOB (repeatable), e.g. 'blk.0.*'"),
    arg(
        "--json",
        action="store_true",
        help='print {"tensors": [{name, type, shape, ...}], "total": N} (several files: a list of them)',
    ),
    description="List tensors: name, type, shape, elements, bytes, offset. Exit 1 if --filter matches no tensor "
    "(of any FILE).",
    traits=Trait.READS,
)
def _cmd_tensors(args: argparse.Namespace) -> int:
    return _each_file(args, _tensors_one)


def _tensors_one(args: argparse.Namespace, emit: Callable[[Any], None]) -> int:
    with _open(args) as f:
        rows = [t for t in f.tensor_list if not args.filter or any(fnmatch.fnmatchcase(t.name, g) for g in args.filter)]
        if args.filter and not rows:
            which = f"{args.file}: " if len(args.files) > 1 else ""
            write(f"gguf-schema: {which}no tensor name matches {' or '.join(args.filter)}\n", sys.stderr)
            if args.json:
                emit({"tensors": [], "total": len(f.tensor_list)})
            return EXIT_FINDINGS
        if args.json:
            emit({"tensors": [_tensor_row(t) for t in rows], "total": len(f.tensor_list)})
        else:
            width = max([len(t.name) for t in rows] + [4])
            out = [
                f"{'NAME':{width}}  {'TYPE':7}  {'SHAPE (numpy order)':24}  {'ELEMENTS':>14}  {'BYTES':>14}  {'OFFSET':>14}"
            ]
            for r in map(_tensor_row, rows):
                size = "?" if r["bytes"] is None else count(r["bytes"])
                out.append(
                    f"{r['name']:{width}}  {r['type']:7}  {r['shape']!s:24}  {count(r['elements']):>14}  {size:>14}  {count(r['offset']):>14}"
                )
            out.append(
                f"{len(rows)} of {len(f.tensor_list)} tensors, {count(sum(t.n_elements for t in rows))} elements"
            )
            write("\n".join(out) + "\n")
        return _done(f, args.file)


@COMMANDS.command(
    "get",
    "print one metadata value",
    arg("file", metavar="FILE"),
    arg("key", metavar="KEY"),
    exclusive(
        arg("--json", action="store_true", help="print the typed JSON record {key, type, value}"),
        arg("--type", action="store_true", help="print the stored type only"),
        arg("--raw", action="store_true", help="print a string without the trailing newline"),
    ),
    description="Print one metadata value: strings as they are, numbers and arrays as JSON. Exit 2 if KEY is absent.",
    traits=Trait.READS,
)
def _cmd_get(args: argparse.Namespace) -> int:
    from ..format.types import ValueType
    from ..tools import jsonio
    from .text_values import type_label

    with _open(args) as f:
        if args.key not in f.fields:
            raise f.fields.missing(args.key).replace(path=args.file)
        fld = f.fields[args.key]
        if args.json:
            write_json(jsonio.field_json(fld), indent=None)
        elif args.type:
            write(type_label(fld) + "\n")
        elif fld.type == ValueType.STRING:
            buffer = getattr(sys.stdout, "buffer", None)
            if args.raw and buffer is not None:  # the stored bytes, unchanged (e.g. a chat template to a file)
                sys.stdout.flush()
                buffer.write(fld.value.encode("utf-8", "surrogateescape"))
            elif args.raw:
                write(fld.value)
            else:
                write(fld.value + "\n")
        elif fld.type == ValueType.ARRAY:
            write_json(jsonio.encode_value(ValueType.ARRAY, fld.value), indent=None)
        else:
            write_json(jsonio.encode_value(fld.type, fld.value), indent=None)
        return _done(f, args.file)


_HEADER_VALUES: dict[str, Callable[[Any], Any]] = {
    "version": lambda m: m.version,
    "byte_order": lambda m: m.byte_order,
    "alignment": lambda m: m.alignment,
    "metadata keys": lambda m: len(m.fields.records),
    "tensors": lambda m: len(m.tensor_list),
}


def _side(model: Any, d: diff_mod.Difference) -> Any:
    """The value of a difference's item in one model, as data (None where it is absent)."""
    from ..tools import jsonio

    if d.section == "header" and d.name in _HEADER_VALUES:
        return _HEADER_VALUES[d.name](model)
    if d.section == "metadata" and d.name in model.fields:
        j = jsonio.field_json(model.fields[d.name])
        return {
            "type": j["type"],
            **({"element_type": j["element_type"]} if "element_type" in j else {}),
            "value": j["value"],
        }
    if d.section == "tensor" and d.name in model.tensors:
        t = model.tensors[d.name]
        return {"type": t.type_name, "shape": list(t.shape)}
    return None


@COMMANDS.command(
    "diff",
    "compare two files: header, metadata by key and type, tensors by content (exit 1 if different)",
    arg("a", metavar="A"),
    arg("b", metavar="B"),
    arg("--no-data", action="store_true", help="do not hash tensor data"),
    arg(
        "--json",
        action="store_true",
        help='print {"equal": bool (null: nothing differs but the data was not compared), "data_compared": bool, '
        '"differences": [{section, kind, name, old, new, detail}, ...]}',
    ),
    description="Compare A and B: header fields, metadata by key and stored type, tensors added, removed or changed "
    "(SHA-256 of the data, byte order normalised). A first shard stands for its whole split model. "
    "Exit 0 when equal, 1 when different, 3 when a file is truncated (its tensor data is then not compared, "
    "and the output says so).",
    traits=Trait.READS,
)
def _cmd_diff(args: argparse.Namespace) -> int:
    from ..tools import diff as diff_mod

    options = open_options(args)
    a = open_gguf(args.a, split=True, **options)
    try:
        b = open_gguf(args.b, split=True, **options)
        try:
            cut = [warn_truncated(m, p) for m, p in ((a, args.a), (b, args.b))]
            data = not args.no_data and not any(cut)
            if any(cut) and not args.no_data:
                warn("tensor data not compared: a file is truncated (types and shapes are)")
            total = 0 if not data else sum(t.nbytes for t in a.tensor_list if t.name in b.tensors) * 2
            with Progress(total, "hashing") as bar:
                found = diff_mod.diff(a, b, data=data, progress=bar.update)
            records = (
                [
                    {
                        "section": d.section,
                        "kind": d.kind,
                        "name": d.name,
                        "old": _side(a, d) if d.kind != "+" else None,
                        "new": _side(b, d) if d.kind != "-" else None,
                        "detail": d.detail,
                    }
                    for d in found
                ]
                if args.json
                else []
            )
        finally:
            b.close()
    finally:
        a.close()
    truncated = EXIT_TRUNCATED if any(cut) else None
    if args.json:
        # equal is null when nothing differs but the tensor data was not compared: not known to be equal
        equal = (not found) if data else (False if found else None)
        write_json({"equal": equal, "data_compared": data, "differences": records})
        return truncated or (EXIT_FINDINGS if found else EXIT_OK)
    if not found:
        if data:
            print("no differences in header, metadata or tensors")
        else:
            why = "--no-data" if args.no_data else "a file is truncated: exit 3"
            print(f"no differences in header, metadata or tensor types and shapes; tensor data not compared ({why})")
        return truncated or EXIT_OK
    write("\n".join(str(d) for d in found) + "\n")
    return truncated or EXIT_FINDINGS
