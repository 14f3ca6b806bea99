"""scan: the headers of many files (local, remote, broken), one record each, in threads, on Dask, in Parquet."""

from __future__ import annotations

import json
import pickle
import sys
from collections import Counter

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFDependencyError, ScanRecord, scan, scan_file
from gguf_schema.check import PROFILES, check
from gguf_schema.tools.scan import expand, write_parquet

from .conftest import VOCAB_FILES, demo_bytes, gemma_path
from .helpers import run_cli


def expected(path, f: gguf_schema.GGUFFile) -> ScanRecord:
    """What a scan must say of an open file, worked out here from the file itself."""
    md = f.metadata
    counts = Counter(t.type_name for t in f.tensor_list)
    reports = {p: check(f, p) for p in PROFILES}
    return ScanRecord(
        path=str(path),
        size=f.file_size,
        version=f.version,
        byte_order=f.byte_order,
        alignment=f.alignment,
        data_offset=f.data_offset,
        architecture=md.get("general.architecture"),
        name=md.get("general.name"),
        file_type=gguf_schema.FileType(md["general.file_type"]).name if "general.file_type" in md else None,
        tensor_count=len(f.tensor_list),
        parameter_count=int(sum(np.prod(t.shape, dtype=np.int64) for t in f.tensor_list)),
        type_histogram=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        vocab_size=len(md["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in md else None,
        verdicts={p: r.ok for p, r in reports.items()},
        failed_rules={
            p: sorted({x.rule for x in r.errors}, key=[x.rule for x in r.errors].index) for p, r in reports.items()
        },
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Generated files (both byte orders, v1-v3), a truncated file, a file that is not there."""
    d = tmp_path_factory.mktemp("corpus")
    good = []
    for order, version in (("little", 3), ("big", 3), ("little", 2), ("little", 1)):
        p = d / "models" / f"demo-{order}-v{version}.gguf"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(demo_bytes(order, version))
        good.append(p)
    broken = d / "broken.gguf"
    broken.write_bytes(demo_bytes()[:100])
    return d, good, broken, d / "absent.gguf"


def test_every_record_says_what_the_file_says(corpus):
    _d, good, broken, absent = corpus
    paths = [str(p) for p in (*good, *VOCAB_FILES[:4], broken, absent)]
    records = scan(paths, threads=3)
    assert [r.path for r in records] == paths
    for p, r in zip(paths[: len(good) + len(VOCAB_FILES[:4])], records, strict=False):
        with gguf_schema.open(p) as f:
            assert r == expected(p, f)
            assert r.readable and r.error is None
    bad, missing = records[-2:]
    assert (bad.error_type, bad.verdicts, bad.failed_rules) == (
        "GGUFTruncatedError",
        dict.fromkeys(PROFILES, False),
        {p: ["GGUF-E001"] for p in PROFILES},
    )
    assert bad.size is None and "offset" in bad.error
    assert (missing.error_type, missing.verdicts, missing.failed_rules) == ("GGUFFileNotFoundError", {}, {})
    assert not missing.readable


def test_gemma_record(gemma):
    r = scan_file(gemma, profiles=("ggml",))
    assert (r.architecture, r.file_type, r.tensor_count, r.vocab_size, r.version) == (
        "gemma3",
        "MOSTLY_Q4_K_M",
        236,
        262_144,
        3,
    )
    with gguf_schema.open(gemma, lazy=True) as f:
        assert r.parameter_count == sum(t.n_elements for t in f.tensor_list)
        assert r.type_histogram == dict(Counter(t.type_name for t in f.tensor_list).most_common())
        assert sum(r.type_histogram.values()) == 236 and set(r.type_histogram) == {
            "F32",
            "Q5_0",
            "Q8_0",
            "Q4_K",
            "Q6_K",
        }
    assert r.verdicts == {"ggml": True} and r.data_offset == 6_525_120


def test_remote_files_are_scanned_by_their_headers(corpus):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from .http_server import FileServer

    _, good, broken, _ = corpus
    with FileServer() as server:
        urls = [server.add(p.name, p.read_bytes()) for p in (*good, broken)] + [server.url("gone.gguf")]
        records = scan(urls, profiles=("lenient",))
        assert [r.path for r in records] == urls
        for p, r in zip(good, records, strict=False):
            with gguf_schema.open(p) as f:
                want = expected(urls[good.index(p)], f)
            assert r == ScanRecord(**{**want.to_dict(), "verdicts": {"lenient": True}, "failed_rules": {"lenient": []}})
        assert records[-2].error_type == "GGUFTruncatedError" and records[-2].verdicts == {"lenient": False}
        assert records[-1].error_type == "GGUFFileNotFoundError" and "HTTP 404" in records[-1].error
        # per file: its size, then one read from its start (these small files come whole); nothing else
        for p in (*good, broken):
            sizes = [(e.method, e.range) for e in server.entries(p.name)]
            assert sizes == [("HEAD", None), ("GET", f"bytes=0-{p.stat().st_size - 1}")]


def test_expand_reads_globs_folders_and_url_globs(corpus, tmp_path):
    d, good, broken, absent = corpus
    assert expand([str(d / "models")]) == sorted(str(p) for p in good)
    assert expand([str(d / "**" / "*.gguf")]) == [str(broken), *sorted(str(p) for p in good)]
    assert expand([str(absent), str(good[0]), str(good[0])]) == [str(absent), str(good[0])]  # kept as given, once
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    for name in ("b.gguf", "a.gguf", "notes.txt", "sub/c.gguf"):
        mem.pipe_file(f"/scan-test/{name}", demo_bytes())
    # fsspec names what a glob finds in its own form (memory paths are rooted: memory:///...)
    assert expand(["memory://scan-test/*.gguf"]) == ["memory:///scan-test/a.gguf", "memory:///scan-test/b.gguf"]
    assert expand(["memory://scan-test/**/*.gguf"])[-1] == "memory:///scan-test/sub/c.gguf"
    assert [r.readable for r in scan(expand(["memory://scan-test/**/*.gguf"]))] == [True, True, True]
    with pytest.raises(ValueError, match="memory://scan-test/\\*\\*.gguf"):
        expand(["memory://scan-test/**.gguf"])


def test_argument_mistakes_are_value_and_type_errors(corpus):
    with pytest.raises(ValueError, match="profiles"):
        scan_file(str(corpus[1][0]), profiles=("strict",))
    with pytest.raises(TypeError, match="list of paths"):
        scan(str(corpus[1][0]))
    with pytest.raises(ValueError, match="threads"):
        scan([], threads=0)


def test_records_and_the_per_file_function_pickle(corpus):
    records = scan([str(p) for p in corpus[1]] + [str(corpus[3])])
    assert pickle.loads(pickle.dumps(records)) == records
    assert pickle.loads(pickle.dumps(scan_file)) is scan_file


def test_scan_file_distributes_on_dask(corpus):
    """The documented recipe: a dask.bag over a LocalCluster of worker processes (each imports the package afresh)."""
    db = pytest.importorskip("dask.bag")
    distributed = pytest.importorskip("dask.distributed")
    _d, good, broken, absent = corpus
    paths = [str(p) for p in (*good, broken, absent)]
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster),
    ):
        records = db.from_sequence(paths, npartitions=2).map(scan_file, profiles=("ggml", "spec")).compute()
    assert records == scan(paths, profiles=("ggml", "spec"))


# --------------------------------------------------------------------------- the command line


def test_scan_command_prints_a_line_per_file_and_fails_on_unreadable_ones(corpus):
    d, good, broken, _absent = corpus
    result = run_cli("scan", str(d / "models"), "--profile", "ggml")
    assert result.returncode == 0
    lines = dict(line.split(": ", 1) for line in result.stdout.decode().splitlines())
    assert list(lines) == sorted(str(p) for p in good)
    assert lines[str(good[0])] == (
        "4,640 bytes, v3 little, llama 'gguf-schema demo', file type MOSTLY_Q8_0, 5 tensors (F32x2,F16x1,I32x1,Q8_0x1),"
        " 1.2K parameters, vocabulary 8, ggml:rejected"  # the demo has a nested array
    )
    assert lines[str(good[1])].startswith("4,640 bytes, v3 big")
    spec = run_cli("scan", str(good[0]), "--profile", "lenient", "--profile", "spec")
    assert spec.stdout.endswith(b"lenient:ok spec:ok\n")
    assert result.stderr == b"4 files, 0 unreadable\n"
    failed = run_cli("scan", str(good[0]), str(broken))
    assert failed.returncode == 2 and b"unreadable: GGUFTruncatedError" in failed.stdout
    nothing = run_cli("scan", str(d / "none-*.gguf"))
    assert nothing.returncode == 2 and b"no file matches" in nothing.stderr


def test_scan_command_json_and_parquet(corpus, tmp_path):
    _d, good, broken, absent = corpus
    paths = [str(p) for p in (*good, broken, absent)]
    result = run_cli("scan", *paths, "--json", "--threads", "2")
    assert result.returncode == 2
    assert json.loads(result.stdout) == [r.to_dict() for r in scan(paths)]
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # absent, or built for another numpy than this one
        pytest.skip(f"pyarrow cannot be used here: {e}")
    out = tmp_path / "scan.parquet"
    assert run_cli("scan", *paths, "--parquet", str(out)).returncode == 2
    rows = pq.read_table(out).to_pylist()
    want = [r.to_dict() for r in scan(paths)]
    for row in rows:
        for key in ("type_histogram", "verdicts", "failed_rules"):
            row[key] = dict(row[key])
    assert rows == want


def test_parquet_without_pyarrow_says_which_extra_to_install(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(GGUFDependencyError, match=r"pip install 'gguf-schema\[parquet\]'"):
        write_parquet(scan([str(corpus[1][0])]), tmp_path / "x.parquet")
    result = run_cli("scan", str(corpus[1][0]), "--parquet", str(tmp_path / "x.parquet"))
    assert result.returncode == 2 and b"gguf-schema[parquet]" in result.stderr


@pytest.mark.skipif(gemma_path() is None, reason="gemma-3-270m is not installed")
def test_scan_command_on_gemma_json():
    result = run_cli("scan", str(gemma_path()), "--json", "--profile", "lenient")
    (record,) = json.loads(result.stdout)
    assert result.returncode == 0 and record["vocab_size"] == 262_144 and record["verdicts"] == {"lenient": True}
