"""Fault injection: a sweep (two workers, stacked runs) SIGKILLed at seeded random points (after a
random number of its metrics lines), then run again, ends identical to an uninterrupted sweep, with
no temporary files left."""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from repro.analysis.results import check_finished, open_results
from repro.cli import main
from repro.errors import ReproError
from repro.runtime.run_dir import RunDir
from repro.store.grid import load_grid, plan_grid
from repro.store.sweep import sweep_status

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it

TEXT = {"capture_output": True, "text": True, "check": True}

GRID = {
    "fixed": {"model": "tiny", "seq_len": 32, "epochs": 1, "eval_every": 0.5, "threads": 1},
    "axes": {"batch_size": [4, 16], "lr": [1e-3, 3e-3], "weight_decay": [0.1]},
}
TRIALS = 3
# damaged JSON files and what the one-line error says of each
DAMAGES = {
    b"": "is empty",
    b'{"status": "do': "is not valid JSON",
    b'{"status": "\xff"}': "is not UTF-8 text",
    b"[1, 2]": "holds a JSON list, not an object",
}


def _sweep(pool, store) -> list[str]:
    """`repro sweep run` of GRID on `pool` into `store`, with two workers and stacks of two."""
    grid = store.parent / f"{store.name}.yaml"
    grid.write_text(json.dumps(GRID | {"fixed": GRID["fixed"] | {"pool": str(pool)}}))
    command = [sys.executable, "-m", "repro.cli", "sweep", "run", str(grid), "--out", str(store)]
    return command + ["--workers", "2", "--stack", "2", "--quiet"]


@pytest.fixture(scope="module")
def straight(synthetic_pool, tmp_path_factory):
    """The uninterrupted sweep's store."""
    store = tmp_path_factory.mktemp("straight") / "store"
    subprocess.run(_sweep(synthetic_pool, store), check=True)
    return store


def _lines_written(store) -> int:
    return sum(len(m.read_text().splitlines()) for m in store.glob("*/metrics.jsonl"))


def _store_contents(store) -> dict[str, list[dict]]:
    """Each run's metrics lines without wall time, by run id."""
    return {
        run.name: [
            {k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (run / "metrics.jsonl").read_text().splitlines()
        ]
        for run in sorted(store.iterdir())
        if (run / "metrics.jsonl").exists()
    }


@pytest.mark.parametrize("trial", range(TRIALS))
def test_killed_sweep_resumes_to_the_uninterrupted_result(
    synthetic_pool, straight, tmp_path, trial
):
    store = tmp_path / "store"
    kill_after = random.Random(trial).randrange(1, _lines_written(straight))  # metrics lines
    proc = subprocess.Popen(_sweep(synthetic_pool, store), start_new_session=True)
    while _lines_written(store) < kill_after and proc.poll() is None:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes
    proc.wait()
    interrupted = sweep_status(store) if (store / "sweep.json").exists() else {}
    assert interrupted.get("done", 0) < 4  # the kill came before the end
    subprocess.run(_sweep(synthetic_pool, store), check=True)
    assert sweep_status(store) == {"done": 4}
    resumed, reference = _store_contents(store), _store_contents(straight)
    assert resumed.keys() == reference.keys()
    for rid, lines in reference.items():
        for got, expected in zip(resumed[rid], lines, strict=True):
            differ = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
            assert got == expected, f"run {rid} step {expected['step']}: {differ}"
    leftovers = [p for p in store.rglob("*") if ".tmp" in p.name or ".old-" in p.name]
    assert not leftovers, leftovers


def test_a_sweep_killed_alone_takes_its_workers_with_it(synthetic_pool, straight, tmp_path):
    """SIGTERM to the sweep process only (not its group): its workers stop too, instead of
    training on unseen; the sweep then resumes to the uninterrupted result."""
    store = tmp_path / "store"
    proc = subprocess.Popen(_sweep(synthetic_pool, store), start_new_session=True)
    while _lines_written(store) < 2 and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)  # anyone left in the sweep's process group?
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the sweep's workers outlived it by 10 s")
    subprocess.run(_sweep(synthetic_pool, store), check=True)
    assert sweep_status(store) == {"done": 4}
    assert _store_contents(store) == _store_contents(straight)


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES.values()))
@pytest.mark.parametrize("name", ["sweep.json", "status.json"])
def test_a_damaged_store_file_is_one_line_naming_it(synthetic_pool, tmp_path, name, damage, capsys):
    """`repro sweep status|run|table` on a store whose manifest or a run's status is damaged: one
    line naming the file and saying to remove it, before anything trains."""
    grid, store = tmp_path / "grid.yaml", tmp_path / "store"
    grid.write_text(json.dumps(GRID | {"fixed": GRID["fixed"] | {"pool": str(synthetic_pool)}}))
    run_ids = [p.run_id for p in plan_grid(load_grid(grid), store)]
    for rid in run_ids:
        (store / rid).mkdir(parents=True)
        (store / rid / "status.json").write_text(json.dumps({"status": "done"}))
    runs = [{"run_id": rid, "after": None} for rid in run_ids]
    (store / "sweep.json").write_text(json.dumps({"grids": [], "runs": runs}))
    damaged = store / name if name == "sweep.json" else store / run_ids[0] / name
    damaged.write_bytes(damage)
    commands = [["status", str(store)], ["run", str(grid), "--out", str(store), "--quiet"]]
    commands += [["table", str(store)]]
    for command in commands:
        with pytest.raises(SystemExit) as exit_info:
            main(["sweep", *command])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"repro: error: {damaged} {DAMAGES[damage]}") and "; remove it" in err


@pytest.mark.parametrize("middle", [b"\xff\xfe binary\n", b'{"step": 3, "val_l\n', b"[1]\n"])
def test_a_damaged_metrics_line_is_one_line_naming_it(synthetic_pool, tmp_path, middle, capsys):
    """A metrics.jsonl line that is not a JSON object before the last line is damage: `repro
    sweep table` names the file and the line; a torn last line (no newline: a live run is writing
    it) is skipped."""
    grid, store = tmp_path / "grid.yaml", tmp_path / "store"
    grid.write_text(json.dumps(GRID | {"fixed": GRID["fixed"] | {"pool": str(synthetic_pool)}}))
    run = store / plan_grid(load_grid(grid), store)[0].run_id
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"batch_size": 4}))
    record = b'{"step": 1, "epoch": 0.5, "lr": 0.001, "train_loss": 3.0, "val_loss": 3.1}\n'
    (run / "metrics.jsonl").write_bytes(record + b'{"step": 2, "ep')  # torn last line: skipped
    main(["sweep", "table", str(store)])
    capsys.readouterr()
    (run / "metrics.jsonl").write_bytes(record + middle + record)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "table", str(store)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"repro: error: {run / 'metrics.jsonl'} line 2 is not a JSON object")


def _last_line_lost(run):
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:-1]))


def _scaled(run, factor):
    step = json.loads((run / "status.json").read_text())["step"]
    path = run / "val_docs" / f"step-{step}.npy"
    np.save(path, np.load(path) * factor) if factor else path.write_bytes(b"")


def _edit_config(run, **changes):
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | changes))


def _bare_status(run):
    shutil.rmtree(run)
    run.mkdir()
    (run / "status.json").write_text('{"status": "done"}')


RUN_DAMAGES = {
    "last metrics line lost": (_last_line_lost, "its last evaluation in metrics.jsonl"),
    "metrics.jsonl missing": (lambda r: (r / "metrics.jsonl").unlink(), "(step none)"),
    "metrics.jsonl empty": (lambda r: (r / "metrics.jsonl").write_text(""), "(step none)"),
    "documents' losses halved": (lambda r: _scaled(r, 0.5), "per-document losses at step"),
    "documents' losses empty": (lambda r: _scaled(r, 0), "val_docs is damaged (No data left"),
    "bare status": (_bare_status, "has no config.json"),
    "config.json missing": (lambda r: (r / "config.json").unlink(), "has no config.json"),
    "config.json edited": (lambda r: _edit_config(r, lr=0.5), "does not hash to its run id"),
    "lr not a number": (lambda r: _edit_config(r, lr="abc"), "lr: expected float, got 'abc'"),
    "documents' losses not numbers": (
        lambda r: [np.save(p, np.array(["a", "b"])) for p in (r / "val_docs").glob("step-*.npy")],
        "val_docs is damaged (not a numeric array)",
    ),
    "status not a word": (
        lambda r: (r / "status.json").write_text('{"status": 5}'),
        "holds a status that is not a word",
    ),
    "downstream not objects": (
        lambda r: (r / "downstream.json").write_text('{"arc_easy": 5}'),
        "holds a task whose result is not an object",
    ),
}


@pytest.mark.parametrize("damage", list(RUN_DAMAGES))
def test_sweep_table_refuses_a_damaged_finished_run(straight, tmp_path, damage, capsys):
    """A finished run damaged after the fact: `repro sweep table` names it in one line (rc 2)
    instead of printing a silently different table (what the analyses' check_finished does for
    `repro reproduce`)."""
    store = tmp_path / "store"
    shutil.copytree(straight, store)
    run = sorted(p for p in store.iterdir() if p.is_dir())[0]
    apply, says = RUN_DAMAGES[damage]
    apply(run)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "table", str(store)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert str(run) in err and says in err, err  # names the folder, not only the id


def test_a_run_asked_for_but_never_started_is_not_dropped(straight):
    """open_results of a grid's run ids: one never started is a pending row, so check_finished
    names it instead of tuning over the others."""
    ids = sorted(p.name for p in straight.iterdir() if p.is_dir())
    results = open_results(straight, [*ids, "0123456789ab"])
    assert len(results.runs) == len(ids) + 1
    never = re.escape(str(straight / "0123456789ab"))
    with pytest.raises(ReproError, match=rf"run {never} is pending \(1 of"):
        check_finished(results)


def test_sweep_table_of_a_store_without_a_finished_run_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "table", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "has no evaluated runs yet" in err


@pytest.mark.parametrize(
    ("axes", "says"),
    [({"batch_size": [0]}, "batch_size must be positive, got 0"), ({"epochs": [-2]}, "epochs")],
)
def test_a_grid_a_run_could_not_train_is_refused_before_the_store_changes(
    synthetic_pool, tmp_path, axes, says, capsys
):
    grid = {"fixed": GRID["fixed"] | {"pool": str(synthetic_pool), "batch_size": 4}, "axes": axes}
    (tmp_path / "grid.yaml").write_text(json.dumps(grid))
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "run", str(tmp_path / "grid.yaml"), "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").iterdir())


def test_status_tells_a_dead_holder_from_a_live_one(tmp_path):
    """A run whose status says running counts as interrupted once its lock's pid is gone (a sweep
    killed with -9); while a live process holds it, as running."""
    store, rid = tmp_path / "store", "0123456789ab"
    run = RunDir(store / rid)
    with run.held():
        run.write_status({"status": "running"})
        (store / "sweep.json").write_text(json.dumps({"grids": [], "runs": [{"run_id": rid}]}))
        assert sweep_status(store) == {"running": 1}
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **TEXT)
    run.lock_file.write_text(f"{int(dead.stdout)} {socket.gethostname()}\n")
    assert sweep_status(store) == {"interrupted": 1}
    run.lock_file.write_text(f"{int(dead.stdout)} another-host\n")  # not to be probed from here
    assert sweep_status(store) == {"running": 1}
