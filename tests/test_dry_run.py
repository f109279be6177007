"""The gpu-small preset dry-run end to end on a CPU: every run of its plan, shrunk, and every
notebook (its own module, so that pytest-xdist runs it beside the smoke reproduction)."""

import shutil
from pathlib import Path

import pytest

from repro.cli import main

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it


def test_the_gpu_small_preset_dry_runs_every_notebook_on_a_cpu(tmp_path, monkeypatch, claim_tables):
    """Every run of gpu-small's plan, shrunk to CPU-seconds, and every notebook end to end, with
    downstream accuracy (the local pool task in place of the hub's)."""
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    (tmp_path / "repro").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copytree(notebooks, tmp_path / "notebooks")
    monkeypatch.chdir(tmp_path)
    main(["reproduce", "--preset", "gpu-small", "--dry-run"])
    figures = tmp_path / "figures" / "gpu-small-dry-run"
    assert len(list(figures.glob("0*_claims.md"))) == claim_tables
    assert (figures / "02_accuracy_vs_batch.png").is_file()  # downstream: the pool task
    for table in ("02_claims.md", "03_claims.md"):
        assert "downstream accuracy follows validation loss" in (figures / table).read_text()
    assert len(list((tmp_path / "runs" / "gpu-small-dry-run" / "notebooks").glob("*.ipynb"))) == 6
