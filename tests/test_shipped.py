"""Shipped results: the cpu study's bundle (results/cpu.tar.xz: 14.1 MiB, over the 5 MB the
project tracks, so placed there by hand, e.g. `repro results export runs/cpu/store --out
results/cpu.tar.xz`) lets the notebooks of a fresh checkout, training nothing, write the committed
tables of figures/cpu: the Markdown tables byte for byte, the CSV tables' numbers to 1e-9 (a CPU
with other vector units may round a last digit differently)."""

import shutil
from pathlib import Path

import pandas as pd
import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "results" / "cpu.tar.xz"


@pytest.mark.skipif(not BUNDLE.is_file(), reason="no results/cpu.tar.xz (not tracked: 14 MiB)")
def test_the_shipped_cpu_bundle_gives_back_every_committed_table(
    tmp_path, monkeypatch, claim_tables
):
    (tmp_path / "repro").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "cpu.tar.xz").symlink_to(BUNDLE)
    monkeypatch.chdir(tmp_path)
    for notebook in sorted((tmp_path / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        papermill.execute_notebook(
            str(notebook),
            str(tmp_path / notebook.name),
            parameters={"preset": "cpu", "train": False},
            cwd=str(tmp_path),
            progress_bar=False,
        )
    committed = ROOT / "figures" / "cpu"
    tables = sorted(p.name for p in committed.iterdir() if p.suffix in (".md", ".csv"))
    assert sum(name.endswith("_claims.md") for name in tables) == claim_tables
    written = tmp_path / "figures" / "cpu"
    assert sorted(p.name for p in written.iterdir() if p.suffix in (".md", ".csv")) == tables
    for name in tables:
        if name.endswith(".md"):
            assert (written / name).read_text() == (committed / name).read_text(), name
        else:
            pd.testing.assert_frame_equal(
                pd.read_csv(written / name), pd.read_csv(committed / name), rtol=1e-9, obj=name
            )
