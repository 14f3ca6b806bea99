"""Without the dask extra, `quantize ... --dask ADDRESS` says which extra to install, and writes nothing (in a fresh
process in which `distributed` cannot be imported, as on a machine without it; runs whether or not it is installed
here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gguf_schema.testing.quant_models import save_quant_model

CLI = "import sys\nsys.modules['distributed'] = None\nfrom gguf_schema.cli import main\nsys.exit(main(sys.argv[1:]))"


def test_dask_without_distributed_names_the_extra(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    save_quant_model(src, "falcon")
    args = ["quantize", src, tmp_path / "o", "-t", "Q8_0", "--dask", "tcp://127.0.0.1:9"]
    r = subprocess.run([sys.executable, "-c", CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--dask needs dask.distributed: pip install 'gguf-schema[dask]'" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    # the plan alone needs no cluster
    r = subprocess.run(
        [sys.executable, "-c", CLI, *map(str, [*args, "--dry-run"])], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "Q8_0: " in r.stdout and not (tmp_path / "o").exists()


def test_misuse_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import pytest

    from gguf_schema.tools.onepass import requantize_many

    src = tmp_path / "m.gguf"
    save_quant_model(src, "falcon")
    with pytest.raises(TypeError, match="client must be a distributed.Client, got object"):
        requantize_many(src, tmp_path / "o", ["Q8_0"], client=object())
    with pytest.raises(ValueError, match=r"task_bytes is for a run on a cluster \(client=\)"):
        requantize_many(src, tmp_path / "o", ["Q8_0"], task_bytes=1000)
    with pytest.raises(ValueError, match="task_bytes must be a positive int or None, got 0"):
        requantize_many(src, tmp_path / "o", ["Q8_0"], task_bytes=0)
    assert not (tmp_path / "o").exists()
