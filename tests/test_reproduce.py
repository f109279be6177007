"""`repro reproduce` names the failing notebook and cell and exits non-zero."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from repro.cli import main


def test_failure_names_notebook_and_cell(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "repro").mkdir()
    (tmp_path / "notebooks").mkdir()
    nb = new_notebook(cells=[new_code_cell("preset = 'smoke'", metadata={"tags": ["parameters"]}),
                             new_code_cell("x = 1"), new_code_cell("raise RuntimeError('broken analysis')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "notebooks" / "01_broken.ipynb")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--preset", "smoke", "--only", "01"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "01_broken.ipynb failed in cell" in err and "RuntimeError: broken analysis" in err and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "smoke", "--only", "07"])
    assert "no notebook numbered 07" in capsys.readouterr().err
