"""`repro reproduce`: the preset's runs first (whole series only), then the notebooks; a failure
names the notebook and cell and exits non-zero."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from repro.cli import main
from repro.study import Study


def _project(root, *sources):
    """A project root whose one notebook, 01_only.ipynb, runs `sources` after its parameters
    cell."""
    (root / "pyproject.toml").write_text("")
    (root / "repro").mkdir()
    (root / "notebooks").mkdir()
    nb = new_notebook(
        cells=[
            new_code_cell("preset = 'smoke'", metadata={"tags": ["parameters"]}),
            *map(new_code_cell, sources),
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "notebooks" / "01_only.ipynb")


def test_failure_names_notebook_and_cell(tmp_path, monkeypatch, capsys):
    _project(tmp_path, "x = 1", "raise RuntimeError('broken analysis')")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--preset", "smoke", "--only", "01"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert (
        "01_only.ipynb failed in cell" in err
        and "RuntimeError: broken analysis" in err
        and err.count("\n") == 1
    )
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "smoke", "--only", "07"])
    assert "no notebook numbered 07" in capsys.readouterr().err


def test_whole_series_trains_the_preset_runs_first(tmp_path, monkeypatch, capsys):
    _project(tmp_path, "x = 1")
    monkeypatch.chdir(tmp_path)
    prefetched = []
    monkeypatch.setattr(
        Study, "prefetch", lambda study: prefetched.append((study.preset.name, study.workers))
    )
    main(["reproduce", "--preset", "smoke", "--workers", "3"])
    assert prefetched == [("smoke", 3)]
    assert "preset sweeps (prefetch)" in capsys.readouterr().out
    main(
        ["reproduce", "--preset", "smoke", "--only", "01"]
    )  # part of the series: only its notebooks
    assert prefetched == [("smoke", 3)]
