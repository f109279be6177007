"""The notebooks are the source of the series: each NN_name.ipynb is paired with a percent-format
script NN_name.py (notebooks/jupytext.toml), and the two must hold the same cells."""

from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _cells(path: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(type, source, tags) of every cell, as jupytext reads the file."""
    notebook = jupytext.read(path)
    return [
        (c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in notebook.cells
    ]


def test_every_notebook_has_a_script_and_every_script_a_notebook():
    notebooks = {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    scripts = {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py")}
    assert notebooks and notebooks == scripts


@pytest.mark.parametrize(
    "notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem
)
def test_notebook_and_script_hold_the_same_cells(notebook):
    script = notebook.with_suffix(".py")
    assert _cells(script) == _cells(notebook), (
        f"{notebook.name} and {script.name} differ; run `jupytext --sync {notebook}`"
    )


def test_an_edit_on_one_side_is_detected(tmp_path):
    notebook = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))[0]
    script = tmp_path / notebook.with_suffix(".py").name
    script.write_text(notebook.with_suffix(".py").read_text() + "\n# %%\nprint('edited')\n")
    assert _cells(script) != _cells(notebook)


@pytest.mark.parametrize(
    "notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem
)
def test_committed_notebook_shows_the_cpu_study_without_running(notebook):
    """Opened on a code host or in JupyterLab, a notebook shows the cpu study's results (the
    README's main job, which takes every branch: downstream tasks, confirmation pools, ensembles):
    `repro reproduce --preset cpu --store-outputs` put them there."""
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    outputs = [output for cell in cells for output in cell.get("outputs", [])]
    printed = "".join(output.get("text", "") for output in outputs)
    assert printed.startswith("preset cpu:")
    assert any("image/png" in output.get("data", {}) for output in outputs)
    assert "claims" in cells[-1].source and cells[-1].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)


def test_results_show_the_committed_claim_tables():
    """docs/RESULTS.md's tables are the notebooks' tables, verbatim: every cpu claim table and
    cpu-regime's batch-size tables."""
    results = (ROOT / "docs" / "RESULTS.md").read_text()
    tables = sorted((ROOT / "figures" / "cpu").glob("0*_claims.md"))
    assert len(tables) == 7
    regime = ROOT / "figures" / "cpu-regime"
    tables += [regime / "02_claims.md", regime / "02_optimum_per_size.md"]
    for table in tables:
        assert table.read_text().strip() in results, f"docs/RESULTS.md's copy of {table} is stale"


@pytest.mark.parametrize(
    "notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem
)
def test_papermill_reads_every_parameter(notebook):
    """`repro reproduce` passes preset, workers, train and dry_run: papermill must parse each of
    them in the parameters cell (a line it cannot parse is skipped with a warning)."""
    declared = set(papermill.inspect_notebook(str(notebook)))
    assert declared == {"preset", "workers", "train", "dry_run"}


@pytest.mark.parametrize(
    "notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem
)
def test_every_figure_a_notebook_saves_is_shown_in_it(notebook):
    """The committed notebooks carry the cpu study's outputs: one image per `study.save` call of
    the notebook's source and per figure that its run saved in figures/cpu/ (Study.save shows
    what it saves), so no branch of the notebook hides a figure."""
    number = notebook.stem[:2]
    saved = sorted((ROOT / "figures" / "cpu").glob(f"{number}_*.png"))
    calls = notebook.with_suffix(".py").read_text().count("study.save(")
    shown = [
        output
        for cell in nbformat.read(notebook, as_version=4).cells
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert saved and len(shown) == len(saved) == calls


@pytest.mark.parametrize(
    "notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem
)
def test_every_committed_notebook_opens_with_what_its_run_found(notebook):
    """The first code cell after the parameters shows the findings table that the notebook's
    claim tables filled in (repro.analysis.findings), not the line it shows while running."""
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    opening = [
        output.get("data", {}).get("text/markdown", "") for output in cells[1].get("outputs", [])
    ]
    found = [text for text in opening if text.startswith("**What this run found** (preset ")]
    assert len(found) == 1 and "| claim | the paper | this run |" in found[0], notebook.name
