"""`repro reproduce`: the preset's runs first (whole series only), then the notebooks; a failure
names the notebook and cell and exits non-zero."""

import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from repro.cli import main
from repro.errors import ReproError
from repro.reproduce import (
    KERNEL_PREFIX,
    _stage_line,
    copy_outputs,
    remove_leftovers,
    reproduce,
    terminal_text,
)
from repro.runtime.run_dir import RunDir
from repro.store.grid import plan_grid
from repro.study import TERMINAL_PROGRESS_ENV, Study, open_study

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it


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


def test_a_dry_run_refuses_a_notebook_without_a_dry_run_parameter(tmp_path, monkeypatch, capsys):
    """A notebook that does not declare `dry_run` would train the full preset in a dry run."""
    _project(tmp_path, "raise RuntimeError('the kernel started')")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "smoke", "--only", "01", "--dry-run"])
    err = capsys.readouterr().err
    assert "01_only.ipynb has no dry_run parameter" in err and "kernel started" not in err
    assert not list((tmp_path / "runs").glob("smoke/*")), "the full preset's folder was used"


def test_a_notebook_without_a_preset_parameter_or_bad_workers_is_refused_before_any_work(
    tmp_path, monkeypatch, capsys
):
    """A notebook that does not declare `preset` would run another preset than the one asked for
    (papermill only warns); workers under 1 would reach the pool. Neither takes the lock."""
    _project(tmp_path, "raise RuntimeError('the kernel started')")
    nb = tmp_path / "notebooks" / "01_only.ipynb"
    notebook = nbformat.read(nb, as_version=4)
    notebook.cells[0].source = "preset_name = 'smoke'"
    nbformat.write(notebook, nb)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "smoke", "--only", "01"])
    err = capsys.readouterr().err
    assert "01_only.ipynb has no preset parameter, so it would not run the preset" in err
    assert "kernel started" not in err and err.count("\n") == 1
    with pytest.raises(ReproError, match="notebook parameter workers takes a whole number"):
        reproduce("smoke", ["01"], workers=0)
    assert not (tmp_path / "runs").exists()


def test_a_preset_that_scores_lm_eval_tasks_needs_lm_eval_before_any_work(
    tmp_path, monkeypatch, capsys
):
    """cpu scores its tuned runs on a local lm-eval task: without lm-eval (`pip install -e .`
    alone) the reproduction would fail in notebook 02, after its training; a notebook opened by
    hand says so when it opens its study."""
    _project(tmp_path, "raise RuntimeError('the kernel started')")
    monkeypatch.chdir(tmp_path)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "lm_eval" else real_find_spec(name),
    )
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "cpu", "--only", "01"])
    err = capsys.readouterr().err
    assert "preset cpu scores lm-eval tasks (grid.downstream_tasks: pool_continuation)" in err
    assert 'pip install -e ".[eval]"' in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ReproError, match="lm-eval is not installed"):  # a notebook run by hand
        open_study("cpu", train=False)
    with pytest.raises(ReproError, match="the kernel started"):  # smoke scores no task
        reproduce("smoke", ["01"])


def test_a_notebook_replaces_its_figures_only_when_it_succeeds(tmp_path, monkeypatch, capsys):
    """A failing notebook leaves figures/<preset>/ as it was (its new table is staged, then
    dropped); a succeeding one replaces its files there. No staging folder stays behind."""
    _project(
        tmp_path,
        "import pandas as pd\nfrom pathlib import Path\nfrom repro.study import open_study\n"
        "open_study(preset).save_table(pd.DataFrame({'loss': [2.5]}), '01_table')",
        "if Path('FAIL').exists():\n    raise RuntimeError('broken analysis')",
    )
    monkeypatch.chdir(tmp_path)
    figures = tmp_path / "figures" / "smoke"
    figures.mkdir(parents=True)
    (figures / "01_table.md").write_text("old\n")
    (tmp_path / "FAIL").touch()
    with pytest.raises(SystemExit):
        main(["reproduce", "--preset", "smoke", "--only", "01"])
    assert "01_only.ipynb failed in cell" in capsys.readouterr().err
    assert sorted(p.name for p in figures.iterdir()) == ["01_table.md"]
    assert (figures / "01_table.md").read_text() == "old\n"
    (tmp_path / "FAIL").unlink()
    main(["reproduce", "--preset", "smoke", "--only", "01"])
    written = ["01_documents_read.json", "01_table.csv", "01_table.md"]
    assert sorted(p.name for p in figures.iterdir()) == written
    assert "2.5" in (figures / "01_table.md").read_text()
    assert not list((tmp_path / "runs" / "smoke").glob("staging-*"))


def test_whole_series_trains_the_preset_runs_first(tmp_path, monkeypatch, capsys):
    _project(tmp_path, "x = 1")
    monkeypatch.chdir(tmp_path)
    prefetched = []
    monkeypatch.setattr(
        Study, "prefetch", lambda study: prefetched.append((study.preset.name, study.workers))
    )
    main(["reproduce", "--preset", "smoke", "--workers", "3"])
    assert prefetched == [("smoke", 3)]
    out = capsys.readouterr().out
    assert "[1/2] preset sweeps (prefetch)" in out and "[2/2] 01_only" in out
    main(
        ["reproduce", "--preset", "smoke", "--only", "01"]
    )  # part of the series: only its notebooks
    assert prefetched == [("smoke", 3)]
    assert "measured here: the last whole reproduction" in capsys.readouterr().out  # the plan


def test_only_a_whole_reproduction_into_an_empty_store_records_its_from_scratch_time(
    tmp_path, monkeypatch, capsys
):
    _project(tmp_path, "x = 1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Study, "prefetch", lambda study: None)
    record = tmp_path / "figures" / "smoke" / "from-scratch-times.json"
    main(["reproduce", "--preset", "smoke"])  # no store yet: every run trains here
    assert set(json.loads(record.read_text())["stages"]) == {
        "preset sweeps (prefetch)",
        "01_only.ipynb",
    }
    assert "all stages: about" not in capsys.readouterr().out  # nothing recorded before
    main(["reproduce", "--preset", "smoke"])  # from scratch again: the record gives the ETA
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [h.split("  (all stages: about ")[0] for h in headers] == [
        "[1/2] preset sweeps (prefetch)",
        "[2/2] 01_only",
    ]
    assert all(" min left, done about " in h for h in headers)
    (tmp_path / "runs" / "smoke" / "store").mkdir(parents=True, exist_ok=True)
    (tmp_path / "runs" / "smoke" / "store" / "sweep.json").write_text("{}")
    main(["reproduce", "--preset", "smoke"])  # a store that holds runs: the record would overstate
    assert "all stages: about" not in capsys.readouterr().out
    shutil.rmtree(tmp_path / "runs" / "smoke" / "store")
    record.unlink()
    main(["reproduce", "--preset", "smoke", "--only", "01"])
    (tmp_path / "runs" / "smoke" / "store").mkdir(parents=True, exist_ok=True)
    (tmp_path / "runs" / "smoke" / "store" / "sweep.json").write_text("{}")
    main(["reproduce", "--preset", "smoke"])  # over a store that holds runs
    assert not record.exists()
    assert "from scratch" not in capsys.readouterr().out


def test_the_time_left_is_the_recorded_stages_still_to_run_at_this_runs_pace():
    expected = {"sweeps": 1200.0, "01.ipynb": 600.0, "02.ipynb": 3000.0}
    first = _stage_line(1, 3, "sweeps", [], expected)  # the recorded pace: 4,800 s
    assert first.startswith("[1/3] sweeps  (all stages: about 80 min left, done about ")
    twice_as_slow = _stage_line(2, 3, "01.ipynb", [("sweeps", 2400.0)], expected)
    assert twice_as_slow.startswith("[2/3] 01  (all stages: about 2.0 h left, done about ")
    half_as_slow = [("sweeps", 600.0), ("01.ipynb", 300.0)]
    last = _stage_line(3, 3, "02.ipynb", half_as_slow, expected)
    assert last.startswith("[3/3] 02  (all stages: about 25 min left, done about ")
    assert _stage_line(2, 3, "01.ipynb", [("sweeps", 1.0)], {}) == "[2/3] 01"


def test_retry_failed_lets_the_presets_failed_runs_train_again(tmp_path, monkeypatch, capsys):
    """The advice of a failed run (rerun with --retry-failed) can be followed: the failed runs of
    the preset's store lose their failed status before anything trains, so that the sweeps
    retrain them; without it they stay failed."""
    _project(tmp_path, "x = 1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("papermill.execute_notebook", lambda *args, **kwargs: None)
    store = tmp_path / "runs" / "smoke" / "store"
    for status in ("failed", "done"):
        (store / status).mkdir(parents=True)
        (store / status / "status.json").write_text(json.dumps({"status": status}))
    seen = []
    monkeypatch.setattr(
        Study, "prefetch", lambda study: seen.append(RunDir(study.store / "failed").state())
    )
    main(["reproduce", "--preset", "smoke"])
    main(["reproduce", "--preset", "smoke", "--retry-failed"])
    assert seen == ["failed", "pending"] and RunDir(store / "done").state() == "done"
    assert "retrying 1 failed run(s)" in capsys.readouterr().out


def test_only_takes_numbers_with_or_without_the_leading_zero(tmp_path, monkeypatch, capfd):
    """Also: kernels talk over IPC (no unencrypted-TCP warning), the environment is untouched, a
    stage header names the notebook, and the kernel's progress reaches this terminal (its
    inherited stderr, where TERMINAL_PROGRESS_ENV tells a Study to print its bars)."""
    _project(
        tmp_path,
        "import os, sys\n"
        f"print('progress on', os.environ[{TERMINAL_PROGRESS_ENV!r}], file=sys.__stderr__)",
    )
    monkeypatch.chdir(tmp_path)
    environment = dict(os.environ)
    main(["reproduce", "--preset", "smoke", "--only", "1"])
    assert (tmp_path / "runs" / "smoke" / "notebooks" / "01_only.ipynb").is_file()
    out, err = capfd.readouterr()
    assert "without encryption" not in err and "progress on 1" in err
    assert "[1/1] 01_only" in out
    assert dict(os.environ) == environment


def test_kernel_sockets_lie_in_a_private_folder_removed_afterwards(tmp_path, monkeypatch):
    """Nothing of the kernel's lands in the checkout (where a second reproduction would pick the
    same socket names): its connection file lies in a folder of its own, gone after the run."""
    _project(
        tmp_path,
        "import glob\nfrom ipykernel.connect import get_connection_file\n"
        "assert not glob.glob('kernel*'), glob.glob('kernel*')\nprint(get_connection_file())",
    )
    monkeypatch.chdir(tmp_path)
    main(["reproduce", "--preset", "smoke", "--only", "01"])
    executed = nbformat.read(tmp_path / "runs" / "smoke" / "notebooks" / "01_only.ipynb", 4)
    connection = Path(executed.cells[2].outputs[0]["text"].strip())
    assert tmp_path not in connection.parents and not connection.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notebooks",
        "pyproject.toml",
        "repro",
        "runs",
    ]


def test_leftovers_of_a_killed_reproduction_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    """A kill -9 leaves a staging folder in runs/<preset>/ and a kernel socket folder in $TMPDIR;
    the next reproduction of the preset removes both, but not a live reproduction's sockets."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    (tmp_path / "tmp").mkdir()
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    results = tmp_path / "runs" / "smoke"
    left = [results / "staging-x1", tmp_path / "tmp" / f"{KERNEL_PREFIX}{dead.pid}-ab"]
    live = tmp_path / "tmp" / f"{KERNEL_PREFIX}{os.getpid()}-cd"
    for folder in [*left, live, results / "store"]:
        folder.mkdir(parents=True)
        (folder / "file").write_text("x")
    remove_leftovers(results)
    assert not any(folder.exists() for folder in left)
    assert (live / "file").exists() and (results / "store" / "file").exists()


@pytest.fixture
def reproduce_process(popen_as_in_a_terminal):
    """Start `repro reproduce --preset P --only 01` in a folder, as a process; those still running
    at the end are killed (their kernels follow: ipykernel exits when its parent dies)."""
    started = []

    def start(root: Path, preset: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "repro.cli", "reproduce", "--preset", preset]
        started.append(
            popen_as_in_a_terminal(
                [*command, "--only", "01"],
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_one_reproduction_per_preset_at_a_time(tmp_path, monkeypatch, reproduce_process):
    """Two presets reproduce side by side; a second reproduction of a preset is refused while the
    first holds it, naming the holder; a killed holder leaves the preset free."""
    _project(
        tmp_path,
        "import pathlib, time\npathlib.Path(f'started-{pathlib.Path(preset).stem}').touch()\n"
        "while not pathlib.Path('go').exists():\n    time.sleep(0.05)",
    )
    (tmp_path / "mine.yaml").write_text("base: smoke\n")
    monkeypatch.chdir(tmp_path)
    first = reproduce_process(tmp_path, "smoke")
    _wait_for(tmp_path / "started-smoke", first)
    other = reproduce_process(tmp_path, "mine.yaml")
    _wait_for(tmp_path / "started-mine", other)
    refused = reproduce_process(tmp_path, "smoke")
    err = refused.communicate(timeout=120)[1]
    assert refused.returncode == 2 and err.count("\n") == 1, err
    assert f"preset smoke is being reproduced by repro reproduce pid {first.pid}" in err
    (tmp_path / "go").touch()
    assert [p.wait(120) for p in (first, other)] == [0, 0], [
        p.stderr.read() for p in (first, other)
    ]
    for path in ("go", "started-smoke"):
        (tmp_path / path).unlink()
    crashed = reproduce_process(tmp_path, "smoke")
    _wait_for(tmp_path / "started-smoke", crashed)
    crashed.kill()
    crashed.wait()
    (tmp_path / "go").touch()
    main(["reproduce", "--preset", "smoke", "--only", "01"])
    assert not list(tmp_path.glob("kernel*"))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_reproduction_exits_within_seconds(tmp_path, reproduce_process, stop):
    """Ctrl-C (SIGINT) or SIGTERM while a notebook runs: its kernel is stopped and the command
    exits within seconds with one line naming the command that goes on; nothing is left staged."""
    _project(tmp_path, "import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(120)")
    process = reproduce_process(tmp_path, "smoke")
    _wait_for(tmp_path / "started", process)
    stopped = time.time()
    process.send_signal(stop)
    err = process.communicate(timeout=120)[1]
    assert time.time() - stopped < 10 and process.returncode == 130
    assert err == (
        "repro: stopped; finished runs are kept and stopped ones resume from their checkpoints: "
        "run the same command again to go on: repro reproduce --preset smoke --only 01\n"
    )
    assert sorted(p.name for p in (tmp_path / "runs" / "smoke").iterdir()) == [
        "notebooks",
        "reproduce.lock",
    ]


def test_outside_a_checkout_fails_before_any_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Study, "prefetch", lambda study: pytest.fail("trained outside a checkout"))
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--preset", "smoke"])
    assert exit_info.value.code == 2 and "inside a checkout" in capsys.readouterr().err


def test_preset_file_runs_under_its_own_name_and_outputs_can_be_stored(tmp_path, monkeypatch):
    _project(tmp_path, "print(preset)")
    (tmp_path / "mine.yaml").write_text("base: smoke\ngrid: {epochs: 1}\n")
    monkeypatch.chdir(tmp_path)
    main(["reproduce", "--preset", "mine.yaml", "--only", "01", "--store-outputs"])
    executed = nbformat.read(tmp_path / "runs" / "mine" / "notebooks" / "01_only.ipynb", 4)
    stored = nbformat.read(tmp_path / "notebooks" / "01_only.ipynb", 4)
    assert not (tmp_path / "runs" / "smoke").exists()
    assert len(executed.cells) == 3  # papermill's injected parameters cell
    assert [c.source for c in stored.cells] == ["preset = 'smoke'", "print(preset)"]
    assert stored.cells[1].outputs[0]["text"].strip() == str(tmp_path / "mine.yaml")
    stored.cells[1].source = "print('edited')"
    nbformat.write(stored, tmp_path / "notebooks" / "01_only.ipynb")
    with pytest.raises(ReproError, match="changed after"):
        copy_outputs(
            tmp_path / "runs" / "mine" / "notebooks" / "01_only.ipynb",
            tmp_path / "notebooks" / "01_only.ipynb",
        )


def test_stored_outputs_keep_a_text_bars_last_state_not_its_redraws(tmp_path, monkeypatch):
    bar = r"import sys; _ = sys.stderr.write('\rruns:  0%| 0/4\rruns: 50%| 2/4\rruns: 100%| 4/4\n')"
    _project(tmp_path, bar)
    monkeypatch.chdir(tmp_path)
    main(["reproduce", "--preset", "smoke", "--only", "01", "--store-outputs"])
    stored = nbformat.read(tmp_path / "notebooks" / "01_only.ipynb", 4)
    assert [o.get("text") for o in stored.cells[1].outputs] == ["runs: 100%| 4/4\n"]
    assert terminal_text("a\rb\nc\r\rd\n") == "b\nd\n"


def test_a_smoke_reproduction_writes_every_table_and_refuses_damaged_runs(
    tmp_path, monkeypatch, capsys, claim_tables
):
    """From scratch (pools, runs, notebooks) with 2 workers: every claim table; then damaged
    runs (below). That the tables do not depend on the worker count follows from a run's bits not
    depending on its stack or thread count (tests/test_stacked.py) nor on being killed and
    resumed (tests/test_sweep_faults.py)."""
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    (tmp_path / "repro").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copytree(notebooks, tmp_path / "notebooks")
    monkeypatch.chdir(tmp_path)
    main(["reproduce", "--preset", "smoke", "--workers", "2"])
    tables = {p.name: p.read_bytes() for p in (tmp_path / "figures" / "smoke").glob("*_claims.*")}
    assert len(tables) == 2 * claim_tables  # .md and .csv
    trained = {
        p.name for p in (tmp_path / "runs" / "smoke" / "store").iterdir() if RUN.fullmatch(p.name)
    }
    with tarfile.open(notebooks.parent / "results" / "smoke.tar.xz") as bundle:
        shipped = {name.split("/")[0] for name in bundle.getnames() if RUN.match(name)}
    assert shipped == trained, (
        "results/smoke.tar.xz (nbval reads it) is not smoke's runs: repro reproduce --preset "
        "smoke into an empty store, then repro results export runs/smoke/store --out "
        "results/smoke.tar.xz"
    )
    _damaged_runs_fail_naming_them_or_give_the_same_tables(tmp_path, tables, capsys)


RUN = re.compile(r"[0-9a-f]{12}")
"""A run folder's name in a store (its run id)."""


def _damaged_runs_fail_naming_them_or_give_the_same_tables(root, tables, capsys) -> None:
    """One of notebook 02's finished runs damaged at a time, then `repro reproduce --only 02`:
    a run left unfinished is trained to its end (the same tables); damage the analysis cannot
    trust is rc 2 and one line naming the run."""
    study = open_study("smoke")
    run = study.store / plan_grid(study.batch_sweep_grid(), study.store)[0].run_id
    step = json.loads((run / "status.json").read_text())["step"]
    damages = {
        "status running": ("status.json", lambda b: b.replace(b'"done"', b'"running"'), None),
        "last metrics line lost": ("metrics.jsonl", lambda b: b[: b.rstrip().rfind(b"\n") + 1], ""),
        "documents' losses halved": (f"val_docs/step-{step}.npy", _halved, "val_docs"),
    }
    for name, (file, damage, says) in damages.items():
        kept = (run / file).read_bytes()
        (run / file).write_bytes(damage(kept))
        if says is None:
            main(["reproduce", "--preset", "smoke", "--only", "02"])
            after = (root / "figures" / "smoke" / "02_claims.md").read_bytes()
            assert after == tables["02_claims.md"], name
        else:
            with pytest.raises(SystemExit) as exit_info:
                main(["reproduce", "--preset", "smoke", "--only", "02"])
            err = capsys.readouterr().err  # progress bars, then the one line
            last = err.strip().splitlines()[-1]
            assert exit_info.value.code == 2 and err.count("repro: error:") == 1, (name, err)
            assert last.startswith("repro: error:") and run.name in last and says in last, last
        (run / file).write_bytes(kept)


def _halved(npy: bytes) -> bytes:
    """An .npy file of float losses with every value halved."""
    values = np.load(io.BytesIO(npy))
    out = io.BytesIO()
    np.save(out, values / 2)
    return out.getvalue()
