"""The everyday ``gguf-schema`` subcommands: inspect, edit metadata, convert, split, merge, diff.

Each handler parses its arguments, calls the library module that owns the work
(:mod:`~gguf_schema.tools.edit`, :mod:`~gguf_schema.tools.jsonio`, :mod:`~gguf_schema.tools.convert`,
:mod:`~gguf_schema.tools.split`, :mod:`~gguf_schema.tools.diff`) and prints. Exit codes are those of
:mod:`gguf_schema.cli`: 0 success, 1 differences (``diff``), 2 unreadable input or usage error
(a :class:`~gguf_schema.errors.GGUFError` or ``OSError`` raised here is printed by ``main``
as ``gguf-schema: error: ...``). Results go to stdout, progress bars and notes to stderr.

>>> import argparse
>>> sub = argparse.ArgumentParser(prog="gguf-schema").add_subparsers()
>>> register_cli(sub)
>>> sorted(sub.choices)[:5]
['build', 'convert', 'delete', 'diff', 'dump']
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import durable, shards
from ..errors import GGUFBuildError, GGUFError, GGUFFormatError, GGUFKeyError
from ..format.types import FileType, ValueType
from ..format.values import Field, LazyStrings
from ..io.source import is_url
from ..model import GGUFFile
from ..tools import convert as convert_mod
from ..tools import diff as diff_mod
from ..tools import edit, jsonio
from ..tools import split as split_mod
from .conventions import (
    EXIT_TRUNCATED,
    error,
    open_file,
    open_options,
    positive_int,
    read_options,
    truncation,
    visible,
    warn,
    warn_truncated,
    write,
    write_json,
)
from .progress import Progress, file_size
from .text_values import parse_type, parse_value_text

__all__ = ["register_cli"]

Handler = Callable[[argparse.Namespace], int]


def _num(n: int) -> str:
    return f"{n:,}"


def _human_count(n: int) -> str:
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _type_label(f: Field) -> str:
    return f"ARRAY[{f.element_type.name}]" if f.element_type is not None else f.type.name


# --------------------------------------------------------------------------- info


def _layout(f: GGUFFile) -> list[tuple[str, int]]:
    """The file's parts and their sizes in bytes; a truncated file's missing bytes as a part of
    their own (``missing``), so no part is negative or larger than the file."""
    fixed = 16 if f.version == 1 else 24
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


def _open(args: argparse.Namespace, path: str | None = None, *, lazy: bool = False) -> GGUFFile:
    return open_file(args, args.file if path is None else path, lazy=lazy)


def _info_data(f: GGUFFile, path: str) -> dict[str, Any]:
    """What ``info`` shows, as data (the ``--json`` form)."""
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
    if "split.count" in f.fields:
        data["split"] = {
            "no": int(md.get("split.no", 0)),
            "count": md["split.count"],
            "tensors": md.get("split.tensors.count"),
        }
    arch = md.get("general.architecture")
    if arch is not None:
        model: dict[str, Any] = {"architecture": arch}
        for k in ("general.name", "general.size_label", "general.type", "general.file_type"):
            if k in md:
                model[k.split(".")[-1]] = md[k]
        ft = md.get("general.file_type")
        with contextlib.suppress(ValueError, TypeError):
            model["file_type_name"] = FileType(int(ft)).name if ft is not None else None
        model["hparams"] = {
            k: md[f"{arch}.{k}"]
            for k in _ARCH_KEYS
            if f"{arch}.{k}" in md and not isinstance(md[f"{arch}.{k}"], (list, np.ndarray, LazyStrings))
        }
        data["model"] = model
    if "tokenizer.ggml.model" in md or "tokenizer.ggml.tokens" in f.fields:
        data["tokenizer"] = {
            "model": md.get("tokenizer.ggml.model"),
            "tokens": len(f.fields["tokenizer.ggml.tokens"].value) if "tokenizer.ggml.tokens" in f.fields else None,
            "pre": md.get("tokenizer.ggml.pre"),
            "chat_template": "tokenizer.chat_template" in md,
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
        f"file:        {d['file']} ({_num(d['file_size'])} bytes)",
        f"format:      GGUF v{d['version']}, {d['byte_order']}-endian, alignment {d['alignment']}, "
        f"data at offset {_num(d['data_offset'])}",
        f"counts:      {d['metadata_keys']} metadata keys, {d['tensors']} tensors",
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
            tok.append(f"{_num(t['tokens'])} tokens")
        if t["pre"] is not None:
            tok.append(f"pre {t['pre']!r}")
        if t["chat_template"]:
            tok.append("chat template")
        out.append("tokenizer:   " + ", ".join(tok))
    out.append(f"parameters:  {_num(d['parameters'])} ({_human_count(d['parameters'])})")
    if d["tensor_types"]:
        out.append("tensor types:")
        for r in d["tensor_types"]:
            out.append(
                f"  {r['type']:8} {r['tensors']:5} tensors {_num(r['elements']):>16} elements "
                f"{_num(r['bytes']):>16} bytes  {r['bits_per_weight']:5.2f} bits/weight"
            )
    out.append("file layout:")
    size = d["file_size"]
    for r in d["layout"]:
        if r["part"].startswith("missing"):
            out.append(f"  {r['part']:22} {_num(r['bytes']):>16} bytes (past the end of the file)")
        else:
            share = 100 * r["bytes"] / size if size else 0
            out.append(f"  {r['part']:22} {_num(r['bytes']):>16} bytes {share:6.2f}%")
    share = 100 * min(d["data_offset"], size) / size if size else 0
    out.append(f"  {'metadata in all':22} {_num(d['data_offset']):>16} bytes {share:6.2f}% (before the data section)")
    return out


def _done(f: GGUFFile, path: str) -> int:
    """The exit code of an inspect command: 3 (and a warning) for a truncated file, else 0."""
    return EXIT_TRUNCATED if warn_truncated(f, path) else 0


def _cmd_info(args: argparse.Namespace) -> int:
    with _open(args, lazy=True) as f:  # a vocabulary is counted, never decoded
        data = _info_data(f, args.file)
        if args.json:
            write_json(data)
        else:
            write("\n".join(_info_text(data)) + "\n")
        return _done(f, args.file)


# --------------------------------------------------------------------------- dump, tensors, get


#: characters other than "\n" that some tools treat as line breaks: escaped in the text dump
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def _value_text(f: Field, full: bool, limit: int = 8) -> str:
    if f.type == ValueType.ARRAY:
        items = f.value.items
        n = len(items)
        shown = items if full else items[:limit]
        enc = jsonio.encode_value(ValueType.ARRAY, f.value.__class__(f.value.type, shown))
        body = json.dumps(enc, ensure_ascii=False).translate(_LINE_BREAKS)
        if not full and n > limit:
            body = body[:-1] + ", ...]"
        return f"({_num(n)} items) {body}"
    if f.type == ValueType.STRING:
        text = repr(f.value)
        if not full and len(text) > 200:
            text = text[:197] + "...'" + f" ({_num(len(f.value))} chars)"
        return text
    return json.dumps(jsonio.encode_value(f.type, f.value))


def _cmd_dump(args: argparse.Namespace) -> int:
    with _open(args) as f:
        if args.json:
            write_json(jsonio.to_json(f, tensors=not args.no_tensors))
            return _done(f, args.file)
        out = [
            f"GGUF v{f.version}, {f.byte_order}-endian, alignment {f.alignment}: "
            f"{len(f.fields.records)} metadata keys, {len(f.tensor_list)} tensors"
        ]
        out.append("metadata:")
        width = max((len(r.key) for r in f.fields.records), default=0)
        for i, r in enumerate(f.fields.records, 1):
            out.append(f"  {i:4}  {r.key:{width}}  {_type_label(r):14}  {_value_text(r, args.full_arrays)}")
        if not args.no_tensors:
            out.append("tensors:")
            width = max((len(t.name) for t in f.tensor_list), default=0)
            for i, t in enumerate(f.tensor_list, 1):
                try:
                    size = f"{_num(t.nbytes)} bytes"
                except Exception as e:  # unknown type: show the info record anyway
                    size = f"size unknown ({e})"
                out.append(
                    f"  {i:4}  {t.name:{width}}  {t.type_name:7}  shape {list(t.shape)}  dims {list(t.dims)}"
                    f"  offset {_num(t.stored_offset)} (absolute {_num(t.offset)})  {size}"
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


def _cmd_tensors(args: argparse.Namespace) -> int:
    with _open(args) as f:
        rows = [t for t in f.tensor_list if not args.filter or any(fnmatch.fnmatchcase(t.name, g) for g in args.filter)]
        if args.filter and not rows:
            print(f"gguf-schema: no tensor name matches {' or '.join(args.filter)}", file=sys.stderr)
            return 1
        if args.json:
            write_json({"tensors": [_tensor_row(t) for t in rows], "total": len(f.tensor_list)})
        else:
            width = max([len(t.name) for t in rows] + [4])
            out = [
                f"{'NAME':{width}}  {'TYPE':7}  {'SHAPE (numpy order)':24}  {'ELEMENTS':>14}  {'BYTES':>14}  {'OFFSET':>14}"
            ]
            for r in map(_tensor_row, rows):
                size = "?" if r["bytes"] is None else _num(r["bytes"])
                out.append(
                    f"{r['name']:{width}}  {r['type']:7}  {r['shape']!s:24}  {_num(r['elements']):>14}  {size:>14}  {_num(r['offset']):>14}"
                )
            out.append(f"{len(rows)} of {len(f.tensor_list)} tensors, {_num(sum(t.n_elements for t in rows))} elements")
            write("\n".join(out) + "\n")
        return _done(f, args.file)


def _cmd_get(args: argparse.Namespace) -> int:
    with _open(args) as f:
        if args.key not in f.fields:
            raise f.fields.missing(args.key).replace(path=args.file)
        fld = f.fields[args.key]
        if args.json:
            write_json(jsonio.field_json(fld), indent=None)
        elif args.type:
            write(_type_label(fld) + "\n")
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


# --------------------------------------------------------------------------- build and edits


def _cmd_build(args: argparse.Namespace) -> int:
    durable.refuse_overwriting_inputs([args.output], [args.json_file, args.tensors_from], command="build")
    if args.json_file == "-":
        raw = sys.stdin.buffer.read()
    else:
        with open(args.json_file, "rb") as fh:
            raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GGUFBuildError(f"the JSON file is not UTF-8: {e.reason}", offset=e.start, path=args.json_file) from None
    model = jsonio.loads(text)
    with Progress(file_size(args.tensors_from), "build") as bar:
        jsonio.build(model, args.output, tensors_from=args.tensors_from, progress=bar.update, **open_options(args))
    print(f"wrote {args.output} ({_num(os.path.getsize(args.output))} bytes)", file=sys.stderr)
    return 0


def _report_edit(what: str, result: edit.EditResult, args: argparse.Namespace | None = None, **data: Any) -> int:
    """The status line of an edit on stderr; with ``--json`` the result as data on stdout."""
    if args is not None and getattr(args, "json", False):
        write_json(
            {
                "command": args.command,
                **data,
                "path": result.path,
                "in_place": result.in_place,
                "cloned": result.cloned,
                "bytes_written": result.bytes_written,
            },
            indent=None,
        )
        return _edited_truncated(result)
    if result.in_place:
        how = f"in place, {_num(result.bytes_written)} header bytes changed"
    elif result.cloned:
        how = f"a clone renamed over it, {_num(result.bytes_written)} header bytes changed"
    else:
        how = f"rewritten, {_num(result.bytes_written)} bytes"
    print(f"{what}: {result.path} ({how})", file=sys.stderr)
    return _edited_truncated(result)


def _edited_truncated(result: edit.EditResult) -> int:
    """An edit does not repair a truncated file: say so, exit 3 (the edit itself was made)."""
    if not result.missing_bytes:
        return 0
    warn(
        f"{result.path} is truncated: {result.missing_bytes:,} bytes of tensor data are missing (the edit was made; "
        "the file is as incomplete as before)"
    )
    return EXIT_TRUNCATED


def _new_key_allowed(args: argparse.Namespace) -> bool:
    """Whether ``set``/``set-file`` may add ``args.key`` as a new key: yes with ``--add``; for a key
    that is not in the file, on a terminal the user is asked; otherwise the edit is refused (a typo
    in a key must not silently add one and rewrite the file)."""
    if args.add:
        return True
    with open_file(args, args.file, lazy=True) as f:
        if args.key in f.fields:
            return False  # not new: nothing to allow (a key deleted meanwhile is refused by the edit)
        near = f.fields.near(args.key)
    hint = f" (did you mean {' or '.join(repr(k) for k in near)}?)" if near else ""
    if _interactive():
        sys.stderr.write(
            visible(f"gguf-schema: {args.file} has no key {args.key!r}{hint}; add it as a new key? [y/N] ")
        )
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return True
    raise GGUFKeyError(
        f"no metadata key {args.key!r}{hint}: nothing was written (pass --add to add it as a new key)",
        path=args.file,
        value=args.key,
    )


def _interactive() -> bool:
    """Whether the user can be asked a question: standard input and standard error are terminals."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _refuse_new_key(f: GGUFFile, args: argparse.Namespace, allowed: bool, added: list[bool]) -> None:
    """Inside the edit (under the lock): a key that is not there may only be added when allowed
    (``added`` records whether it was new)."""
    added[:] = [args.key not in f.fields]
    if added[0] and not allowed:
        raise f.fields.missing(args.key).replace(
            reason=f"no metadata key {args.key!r}: nothing was written (pass --add to add it as a new key)",
            path=args.file,
        )


def _value_for(key: str, text: str, vt: ValueType | None, et: ValueType | None) -> Any:
    """``text`` read as a value of type ``vt`` for ``key``; an error names the key."""
    try:
        return parse_value_text(text, vt, et)[1]
    except GGUFBuildError as e:
        raise e.replace(path=f"key {key!r}") from None


def _cmd_set(args: argparse.Namespace) -> int:
    vt, et = parse_type(args.type) if args.type else (None, None)
    allowed, added = _new_key_allowed(args), [False]

    def apply(f: GGUFFile) -> None:
        _refuse_new_key(f, args, allowed, added)
        t, e = vt, et
        if t is None and args.key in f.fields:
            old = f.fields[args.key]
            t, e = old.type, old.element_type
        f.set(args.key, _value_for(args.key, args.value, t, e), t, e)

    with Progress(file_size(args.file), "write") as bar:
        result = edit.edit_file(
            args.file, apply, output=args.output, progress=bar.update, in_place=args.in_place, **read_options(args)
        )
    return _report_edit(f"set {args.key}" + (" (a new key)" if added[0] else ""), result, args, key=args.key)


def _cmd_set_file(args: argparse.Namespace) -> int:
    with open(args.path, "rb") as fh:
        text = fh.read().decode("utf-8", "surrogateescape")  # the bytes kept exactly
    allowed, added = _new_key_allowed(args), [False]

    def apply(f: GGUFFile) -> None:
        _refuse_new_key(f, args, allowed, added)
        old = f.fields.get(args.key)
        if old is None or old.type == ValueType.STRING:
            f.set(args.key, text, ValueType.STRING)
            return
        try:  # a key of another type keeps it: the text is read as `set` reads a value
            _, value = parse_value_text(text.strip(), old.type, old.element_type)
        except GGUFBuildError as e:
            raise GGUFBuildError(
                f"{args.key} is stored as {_type_label(old)}, and the contents of {args.path} are not such a value: "
                f"{e.reason} (delete the key first to store the text as a STRING)",
                path=args.key,
            ) from None
        f.set(args.key, value, old.type, old.element_type)

    with Progress(file_size(args.file), "write") as bar:
        result = edit.edit_file(
            args.file, apply, output=args.output, progress=bar.update, in_place=args.in_place, **read_options(args)
        )
    return _report_edit(
        f"set {args.key} from {args.path}" + (" (a new key)" if added[0] else ""), result, args, key=args.key
    )


def _cmd_delete(args: argparse.Namespace) -> int:
    with Progress(file_size(args.file), "write") as bar:
        result = edit.delete_key(
            args.file, args.key, output=args.output, progress=bar.update, in_place=args.in_place, **read_options(args)
        )
    return _report_edit(f"deleted {args.key}", result, args, key=args.key)


def _cmd_rename(args: argparse.Namespace) -> int:
    with Progress(file_size(args.file), "write") as bar:
        result = edit.rename_key(
            args.file,
            args.old,
            args.new,
            output=args.output,
            progress=bar.update,
            in_place=args.in_place,
            **read_options(args),
        )
    return _report_edit(f"renamed {args.old} to {args.new}", result, args, old=args.old, new=args.new)


# --------------------------------------------------------------------------- convert, split, merge, diff


def _cmd_convert(args: argparse.Namespace) -> int:
    with Progress(file_size(args.file), "convert") as bar:
        convert_mod.convert(
            args.file,
            args.output,
            byte_order=args.byte_order,
            version=args.version,
            progress=bar.update,
            **open_options(args),
        )
    if args.json:
        write_json({"command": "convert", "path": args.output, "bytes": os.path.getsize(args.output)}, indent=None)
    else:
        print(f"wrote {args.output} ({_num(os.path.getsize(args.output))} bytes)", file=sys.stderr)
    return 0


def _size(text: str) -> int:
    try:
        return split_mod.parse_size(text)
    except GGUFBuildError as e:
        raise argparse.ArgumentTypeError(e.reason) from None


def _cmd_split(args: argparse.Namespace) -> int:
    with Progress(0 if args.dry_run else file_size(args.file), "split") as bar:
        plan = split_mod.split_plan(
            args.file,
            args.output,
            max_size=args.max_size,
            max_tensors=args.max_tensors,
            no_tensor_first_split=args.no_tensor_first_split,
            llama_layout=args.llama_layout,
            dry_run=args.dry_run,
            progress=bar.update,
            **open_options(args),
        )
    for w in plan.warnings:
        print(f"gguf-schema: warning: {w}", file=sys.stderr)
    if args.json:
        write_json({"dry_run": args.dry_run, **plan.to_json()})
        return 0
    for shard in plan.shards:
        write(f"{shard.path}: {len(shard.tensors)} tensors, {_num(shard.size)} bytes\n")
    if args.dry_run:
        print(f"dry run: {len(plan.shards)} shards planned, nothing written", file=sys.stderr)
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    out = args.output
    local = not is_url(args.first_shard)  # a progress total for local shards (URLs: the bar has none)
    if local:
        durable.refuse_overwriting_inputs([out], [args.first_shard], command="merge")
    options = open_options(args)
    total = sum(file_size(p) for p in shards.shard_paths(args.first_shard, **options)) if local else 0
    with Progress(total, "merge") as bar:
        split_mod.merge(args.first_shard, out, progress=bar.update, **options)
    print(f"wrote {out} ({_num(os.path.getsize(out))} bytes)", file=sys.stderr)
    return 0


def _cmd_recover(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            done = durable.recover(path)
            with open_file(args, path, lazy=True) as f:  # it must read again
                state = f"it reads: {len(f.fields)} keys, {len(f.tensor_list)} tensors"
                cut = warn_truncated(f, path)
        except GGUFError as e:
            error(f"{path}: {e}")
            status = 2
            continue
        write(f"{path}: {done or 'no interrupted edit to recover'}; {state}\n")
        if cut and status == 0:
            status = EXIT_TRUNCATED
    return status


_HEADER_VALUES: dict[str, Callable[[Any], Any]] = {
    "version": lambda m: m.version,
    "byte_order": lambda m: m.byte_order,
    "alignment": lambda m: m.alignment,
    "metadata keys": lambda m: len(m.fields.records),
    "tensors": lambda m: len(m.tensor_list),
}


def _side(model: Any, d: diff_mod.Difference) -> Any:
    """The value of a difference's item in one model, as data (None where it is absent)."""
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


def _cmd_diff(args: argparse.Namespace) -> int:
    options = open_options(args)
    a = shards.open_model(args.a, **options)
    try:
        b = shards.open_model(args.b, **options)
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
        write_json({"equal": not found, "differences": records})
        return truncated or (1 if found else 0)
    if not found:
        print("no differences in header, metadata or tensors")
        return truncated or 0
    write("\n".join(str(d) for d in found) + "\n")
    return truncated or 1


# --------------------------------------------------------------------------- registration

_ADD_HELP = (
    "KEY is a new key: add it (without --add a key that is not in FILE is refused, naming the keys it may have "
    "meant; on a terminal you are asked)"
)


def register_cli(subparsers: Any) -> None:
    """Add this module's subcommands to the ``gguf-schema`` parser (called by :mod:`gguf_schema.cli`)."""

    def add(name: str, fn: Handler, help: str, description: str | None = None) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help, description=description or help[0].upper() + help[1:] + ".")
        p.set_defaults(func=fn)
        return p

    def output(p: argparse.ArgumentParser) -> None:
        p.add_argument("-o", "--output", metavar="OUT", help="write the edited file to OUT instead of changing FILE")
        p.add_argument(
            "--json",
            action="store_true",
            help="print the result as JSON: {command, key..., path, in_place, cloned, bytes_written}",
        )
        p.add_argument(
            "--no-in-place",
            dest="in_place",
            action="store_const",
            const=False,
            default=None,
            help="never change FILE's bytes where they are: write a new file (a clone where the filesystem "
            "makes them, else a full copy) and rename it over FILE, so that programs reading FILE meanwhile "
            "see the old or the new file, never a torn header (the default where the filesystem clones files)",
        )

    p = add("info", _cmd_info, "summarise a file: format, model, tensor types, parameters, size breakdown")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = add(
        "dump",
        _cmd_dump,
        "list every metadata key with its stored type, and the tensor infos",
        "List every metadata key with its stored type and value, then the tensor infos. Long arrays and "
        "strings are abbreviated unless --full-arrays. --json prints the complete, lossless JSON form "
        "(never abbreviated) that `build` turns back into the same file.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the lossless JSON form")
    p.add_argument("--no-tensors", action="store_true", help="leave out the tensor infos")
    p.add_argument("--full-arrays", action="store_true", help="print long arrays and strings in full")

    p = add(
        "build",
        _cmd_build,
        "write a GGUF file from the JSON form (dump --json)",
        "Write a GGUF file from the JSON form printed by `dump --json` (FROM.json may be - for stdin). "
        "Tensor data comes from --tensors-from FILE: copied verbatim when its tensor infos match the JSON "
        "(the original file comes back byte for byte), else tensor by tensor by name.",
    )
    p.add_argument("json_file", metavar="FROM.json")
    p.add_argument("output", metavar="OUT.gguf")
    p.add_argument("--tensors-from", metavar="FILE", help="GGUF file to take tensor data from")

    p = add(
        "tensors",
        _cmd_tensors,
        "list tensors: name, type, shape, elements, bytes, offset",
        "List tensors: name, type, shape, elements, bytes, offset. Exit 1 if --filter matches no tensor.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--filter", metavar="GLOB", action="append", help="only names matching GLOB (repeatable), e.g. 'blk.0.*'"
    )
    p.add_argument("--json", action="store_true", help='print {"tensors": [{name, type, shape, ...}], "total": N}')

    p = add(
        "get",
        _cmd_get,
        "print one metadata value",
        "Print one metadata value: strings as they are, numbers and arrays as JSON. Exit 2 if KEY is absent.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("key", metavar="KEY")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the typed JSON record {key, type, value}")
    g.add_argument("--type", action="store_true", help="print the stored type only")
    g.add_argument("--raw", action="store_true", help="print a string without the trailing newline")

    types = ", ".join(t.name.lower() for t in ValueType if t != ValueType.ARRAY) + ", array[TYPE]"
    p = add(
        "set",
        _cmd_set,
        "set a metadata key (tensor data is never loaded)",
        "Set metadata KEY to VALUE. An existing key keeps its stored type unless --type is given. A key that is "
        "not in FILE is added only with --add (or when you say so on a terminal): a typo is refused, with the keys "
        "it may have meant; a new key's type is guessed (true/false, integer, decimal number, JSON list, else "
        "string). Arrays are JSON lists. "
        "The file is changed in place when its header keeps its size, else rewritten through a temporary "
        "file; tensor bytes are copied unchanged.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE")
    p.add_argument("--type", metavar="T", help=f"value type: {types}")
    p.add_argument("--add", action="store_true", help=_ADD_HELP)
    output(p)

    p = add(
        "set-file",
        _cmd_set_file,
        "set a key to the contents of a file (e.g. a chat template)",
        "Set metadata KEY to the contents of PATH (a key that is not in FILE only with --add, as `set`). A new "
        "key or a STRING key stores the bytes exactly as a "
        "STRING; a key of another type keeps its type, the text read as `set` reads a value (a number for "
        "UINT32, a JSON list for an ARRAY), or the edit is refused.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("key", metavar="KEY")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--add", action="store_true", help=_ADD_HELP)
    output(p)

    p = add("delete", _cmd_delete, "remove a metadata key")
    p.add_argument("file", metavar="FILE")
    p.add_argument("key", metavar="KEY")
    output(p)

    p = add("rename", _cmd_rename, "rename a metadata key (position, type and value kept)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    output(p)

    p = add(
        "convert",
        _cmd_convert,
        "convert a file to another byte order and/or GGUF version",
        "Write FILE to OUT in another byte order (every tensor type converted, quantized blocks field by field) "
        "and/or format version.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--byte-order", choices=("little", "big"), help="target byte order (default: unchanged)")
    p.add_argument("--version", type=int, choices=(2, 3), help="target GGUF version (default: unchanged)")
    p.add_argument("--json", action="store_true", help='print the result as JSON: {"command", "path", "bytes"}')

    p = add(
        "split",
        _cmd_split,
        "split a model into shards OUT_PREFIX-00001-of-0000N.gguf",
        "Split FILE into shards named OUT_PREFIX-00001-of-0000N.gguf, with llama.cpp's split.no / split.count / "
        "split.tensors.count keys (and split.id, the identity of the set); the full metadata goes in the first "
        "shard. The shards are written as a set: all to temporary files first, then renamed. Prints each shard's "
        "path, tensors and size. SIZE: 500M, 2G (powers of 1000), 512MiB, 2GiB (powers of 1024) or bytes.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("output", metavar="OUT_PREFIX")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--max-size", type=_size, metavar="SIZE", help="largest shard file size")
    g.add_argument("--max-tensors", type=positive_int, metavar="N", help="most tensors per shard")
    p.add_argument(
        "--no-tensor-first-split",
        action="store_true",
        help="the first shard holds the metadata only, the tensors start in the second (as llama.cpp's gguf-split)",
    )
    p.add_argument(
        "--llama-layout",
        action="store_true",
        help="the shards exactly as llama-gguf-split writes them (no split.id, its key order and size rule)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan (shards, tensors, sizes); write nothing")
    p.add_argument(
        "--json",
        action="store_true",
        help='print the plan as JSON: {"dry_run", "split_id", "shards": [{"path", "tensors", "size"}], "warnings"}',
    )

    p = add("merge", _cmd_merge, "merge the shards of a split model into one file")
    p.add_argument("first_shard", metavar="FIRST_SHARD")
    p.add_argument("output", metavar="OUT")

    p = add(
        "recover",
        _cmd_recover,
        "undo the interrupted in-place edit of each FILE (its journal FILE-journal)",
        "Undo an in-place edit that was interrupted (killed, power cut): the bytes saved in FILE-journal are "
        "written back and the journal removed; an incomplete journal (the file was not touched yet) is just "
        "removed; a journal that does not fit the file (it was replaced since) is never applied nor deleted, "
        "but kept aside as FILE-journal.orphan-TIME. FILE may be a symbolic link (the journal is beside the "
        "real file). Waits for an edit still under way. Prints what was done for each FILE; exit 0 when every "
        "FILE reads afterwards, 2 otherwise.",
    )
    p.add_argument("files", metavar="FILE", nargs="+")

    p = add(
        "diff",
        _cmd_diff,
        "compare two files: header, metadata by key and type, tensors by content (exit 1 if different)",
        "Compare A and B: header fields, metadata by key and stored type, tensors added, removed or changed "
        "(SHA-256 of the data, byte order normalised). A first shard stands for its whole split model. "
        "Exit 0 when equal, 1 when different.",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--no-data", action="store_true", help="do not hash tensor data")
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"equal": bool, "differences": [{section, kind, name, old, new, detail}, ...]}',
    )
