"""Shipped results: each CPU preset's committed bundle (results/<preset>.tar.xz, exported with
`repro results export runs/<preset>/store --out results/<preset>.tar.xz --read figures/<preset>`)
lets the notebooks of a fresh checkout, training nothing, write the committed outputs of
figures/<preset>: the Markdown tables and the records of what they read byte for byte, the CSV
tables' numbers to 1e-9 (a CPU with other vector units may round a last digit differently)."""

import shutil
from pathlib import Path

import pandas as pd
import papermill
import pytest

from repro.store.bundle import DOCUMENTS_READ, volumes

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", ["cpu", "cpu-regime"])
def test_a_shipped_bundle_gives_back_every_committed_table(
    tmp_path, monkeypatch, claim_tables, preset
):
    (tmp_path / "repro").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    (tmp_path / "results").mkdir()
    for volume in volumes(ROOT / "results" / f"{preset}.tar.xz"):
        (tmp_path / "results" / volume.name).symlink_to(volume)
    monkeypatch.chdir(tmp_path)
    notebooks = sorted((tmp_path / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for notebook in notebooks:
        papermill.execute_notebook(
            str(notebook),
            str(tmp_path / notebook.name),
            parameters={"preset": preset, "train": False},
            cwd=str(tmp_path),
            progress_bar=False,
        )
    committed, written = ROOT / "figures" / preset, tmp_path / "figures" / preset
    outputs = _outputs(committed)
    assert sum(name.endswith("_claims.md") for name in outputs) == claim_tables
    assert sum(name.endswith(DOCUMENTS_READ) for name in outputs) == len(notebooks)
    assert _outputs(written) == outputs
    for name in outputs:
        if name.endswith(".csv"):
            pd.testing.assert_frame_equal(
                pd.read_csv(written / name), pd.read_csv(committed / name), rtol=1e-9, obj=name
            )
        else:
            assert (written / name).read_text() == (committed / name).read_text(), name


def _outputs(figures: Path) -> list[str]:
    """A figures folder's tables (.md, .csv) and records of what the notebooks read."""
    return sorted(
        p.name for p in figures.iterdir() if p.suffix in (".md", ".csv") or DOCUMENTS_READ in p.name
    )
