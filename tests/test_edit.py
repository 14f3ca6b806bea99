"""Metadata edits on files: in place when the header keeps its size, streamed copy otherwise; tensor bytes untouched."""

from __future__ import annotations

import hashlib
import mmap
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import ValueType
from gguf_schema.cli.text_values import parse_type, parse_value_text
from gguf_schema.errors import GGUFBuildError, GGUFKeyError
from gguf_schema.tools.edit import delete_key, edit_file, rename_key, set_key, set_key_from_file
from gguf_schema.writer import TensorRecord, header_bytes


def hashes(p: Path) -> dict[str, str]:
    with gguf_schema.open(p) as f:
        return {t.name: hashlib.sha256(t.raw()).hexdigest() for t in f.tensor_list}


def test_same_size_value_is_written_in_place_touching_only_its_bytes(demo: Path) -> None:
    before = demo.read_bytes()
    inode = demo.stat().st_ino
    r = set_key(demo, "llama.context_length", 4096, in_place=True)
    assert (r.in_place, r.bytes_written) == (True, 2)  # 128 -> 4096: two little-endian bytes change
    after = demo.read_bytes()
    assert demo.stat().st_ino == inode and len(after) == len(before)
    changed = [i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y]
    with gguf_schema.open(demo) as f:
        at = f.fields["llama.context_length"].offset
        assert f.metadata["llama.context_length"] == 4096
    key_len = len("llama.context_length")
    assert changed == [at + 8 + key_len + 4, at + 8 + key_len + 5]


def test_in_place_write_is_seen_by_an_open_memory_map(demo: Path) -> None:
    with open(demo, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert set_key(demo, "general.name", "GGUF-SCHEMA DEMO", in_place=True).in_place
        assert b"GGUF-SCHEMA DEMO" in m[:200]


def test_shorter_header_is_absorbed_by_the_padding(demo: Path) -> None:
    size = demo.stat().st_size
    before = hashes(demo)
    r = set_key(
        demo, "general.name", "gguf-schema de", in_place=True
    )  # 2 bytes shorter: the header ends at 1569, padded to 1600
    with gguf_schema.open(demo) as f:
        assert f.metadata["general.name"] == "gguf-schema de"
        assert (f.metadata_end, f.data_offset) == (1569, 1600)
    assert r.in_place and demo.stat().st_size == size
    assert hashes(demo) == before


def test_growth_rewrites_atomically_and_keeps_tensors(demo: Path) -> None:
    before = hashes(demo)
    inode = demo.stat().st_ino
    r = set_key(demo, "general.description", "x" * 1000)
    assert not r.in_place
    assert demo.stat().st_ino != inode
    assert hashes(demo) == before
    assert [p.name for p in demo.parent.iterdir()] == ["demo.gguf"]  # no temporary file left behind


def test_output_path_leaves_the_source_untouched(demo: Path, tmp_path: Path) -> None:
    original = demo.read_bytes()
    out = tmp_path / "out.gguf"
    r = delete_key(demo, "demo.nested", output=out)
    assert (r.path, r.in_place) == (str(out), False)
    assert demo.read_bytes() == original
    assert hashes(out) == hashes(demo)


def test_rename_keeps_position_type_and_value(demo: Path) -> None:
    rename_key(demo, "demo.int16", "demo.i16")
    with gguf_schema.open(demo) as f:
        keys = list(f.fields)
        assert keys.index("demo.i16") == 15
        assert (f.fields["demo.i16"].type, f.fields["demo.i16"].value) == (ValueType.INT16, -32768)


def test_set_key_from_file_keeps_bytes_exactly(demo: Path, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_bytes(b"{{ bos_token }}\r\n\xff not utf-8")
    set_key_from_file(demo, "tokenizer.chat_template", template)
    with gguf_schema.open(demo) as f:
        assert f.fields["tokenizer.chat_template"].type == ValueType.STRING
        assert f.fields["tokenizer.chat_template"].value.encode("utf-8", "surrogateescape") == template.read_bytes()


def test_changing_alignment_relays_tensors_and_keeps_their_bytes(demo: Path) -> None:
    before = hashes(demo)
    r = set_key(demo, "general.alignment", 64)
    assert not r.in_place
    with gguf_schema.open(demo) as f:
        assert f.alignment == 64 and f.data_offset % 64 == 0
        assert all(t.stored_offset % 64 == 0 for t in f.tensor_list)
    assert hashes(demo) == before


def test_failed_edits_leave_the_file_alone(demo: Path) -> None:
    original = demo.read_bytes()
    with pytest.raises(GGUFKeyError, match="no metadata key 'absent'"):
        delete_key(demo, "absent")
    with pytest.raises(GGUFBuildError, match="256 does not fit in UINT8"):
        set_key(demo, "demo.uint8", 256)
    with pytest.raises(GGUFBuildError):
        edit_file(demo, lambda f: f.set("k", object()))
    assert demo.read_bytes() == original


def test_header_bytes_is_the_prefix_of_the_file(demo: Path) -> None:
    data = demo.read_bytes()
    with gguf_schema.open(demo) as f:
        infos = [TensorRecord(t.name, int(t.type), t.dims, t.stored_offset) for t in f.tensor_list]
        head = header_bytes(
            f.fields.records, infos, version=3, byte_order="little", padding=f.padding, data_size=f.data_section.size
        )
    assert head == data[:1600]


def test_parse_type_names() -> None:
    assert parse_type("UINT64") == (ValueType.UINT64, None)
    assert parse_type("string") == (ValueType.STRING, None)
    assert parse_type("array:int8") == (ValueType.ARRAY, ValueType.INT8)
    assert parse_type("ARRAY[STRING]") == (ValueType.ARRAY, ValueType.STRING)
    with pytest.raises(GGUFBuildError, match="unknown value type 'u99'"):
        parse_type("u99")
    for guess in ("FLOAT", "float", "str", "int", "double"):  # not type names: refused, never guessed (issue 28)
        with pytest.raises(GGUFBuildError, match=f"unknown value type '{guess}'.*; the value types are uint8, int8"):
            parse_type(guess)


def test_parse_value_text_guesses_and_converts() -> None:
    assert parse_value_text("true") == (None, True)
    assert parse_value_text("-3") == (None, -3)
    assert parse_value_text("1e-6") == (None, 1e-6)
    assert parse_value_text("[1, 2]") == (None, [1, 2])
    assert parse_value_text("hello world") == (None, "hello world")
    assert parse_value_text("[not json") == (None, "[not json")
    assert parse_value_text("123", ValueType.STRING) == (ValueType.STRING, "123")
    assert parse_value_text("no", ValueType.BOOL) == (ValueType.BOOL, False)
    vt, arr = parse_value_text("[0.5, 1.5]", ValueType.ARRAY, ValueType.FLOAT32)
    assert vt == ValueType.ARRAY and arr.items.dtype == np.float32 and arr.items.tolist() == [0.5, 1.5]
    with pytest.raises(GGUFBuildError, match="BOOL needs true or false, got 'maybe'"):
        parse_value_text("maybe", ValueType.BOOL)
    with pytest.raises(GGUFBuildError, match="an ARRAY value is a JSON list"):
        parse_value_text("{}", ValueType.ARRAY)
