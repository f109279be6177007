"""The notebooks' parameters are checked before any work (repro.study.notebook_study): a name the
parameters cell lacks or a value of the wrong type is a one-line error, in papermill's kernel as in
`repro reproduce`."""

from pathlib import Path

import nbformat
import papermill
import pytest

from repro.design.parameters import INJECTED_PREFIX, check_parameters, injected_names
from repro.errors import ReproError

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_data_pool.ipynb"
GOOD = {"preset": "smoke", "workers": None, "train": False, "dry_run": False}


@pytest.mark.parametrize(
    "values, says",
    [
        ({"prest": "smoke"}, "unknown notebook parameter 'prest'; the notebook takes preset, "),
        ({"workers": "abc"}, "notebook parameter workers takes a whole number"),
        ({"workers": -3}, "got -3"),
        ({"workers": 0}, "got 0"),
        ({"workers": 2.0}, "got 2.0"),
        ({"workers": True}, "got True"),
        ({"train": "yes"}, "notebook parameter train takes True or False"),
        ({"dry_run": 1}, "notebook parameter dry_run takes True or False"),
        ({"preset": 3}, "notebook parameter preset takes a preset name or file"),
    ],
)
def test_an_unknown_name_or_a_wrong_type_is_a_one_line_error(values, says):
    with pytest.raises(ReproError) as info:
        check_parameters(GOOD | values)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_good_values_and_papermills_own_path_parameters_pass():
    check_parameters(GOOD | {"workers": 4, "PAPERMILL_INPUT_PATH": "in.ipynb"})
    check_parameters({"preset": "cpu", "extra": 1}, declared=("preset", "extra"))


def test_the_names_come_from_papermills_injected_cell_only():
    cells = ["preset = 'cpu'\nworkers = None", f"{INJECTED_PREFIX}prest = 'smoke'\nworkers = 2\n"]
    assert injected_names(cells) == ["prest", "workers"]
    assert injected_names(cells[:1]) == []


@pytest.mark.parametrize(
    "parameters, says",
    [
        ({"prest": "smoke"}, "unknown notebook parameter 'prest'"),
        ({"workers": "abc"}, "notebook parameter workers takes a whole number"),
        ({"preset": "smok"}, "unknown preset 'smok'"),
    ],
)
def test_papermill_stops_at_the_opening_cell_with_one_line(parameters, says, tmp_path):
    """The kernel refuses the parameter in the cell after the parameters (no pool built, no run
    trained) and shows the ReproError as its one line, not a traceback."""
    executed = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(
            str(NOTEBOOK), str(executed), parameters, progress_bar=False, kernel_name="python3"
        )
    assert info.value.ename == "ReproError" and says in info.value.evalue
    cells = nbformat.read(executed, as_version=4).cells
    failed = next(c for c in cells if c.get("outputs") and c.outputs[0].output_type == "error")
    assert "notebook_study(globals())" in failed.source
    assert failed.outputs[0].traceback == [f"ReproError: {info.value.evalue}"]
