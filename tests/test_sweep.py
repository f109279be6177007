"""Sweeps: hashing, grids, skip/resume, concurrent executors, failures, endpoints, WSD branches."""

import io
import json
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

import repro.runtime.progress as bars
import repro.store.grid as grid_module
import repro.store.progress as progress
from repro.analysis.results import load_results, open_results
from repro.analysis.selection import tuned
from repro.errors import ReproError
from repro.runtime.config import make_run_config, run_id
from repro.store.grid import expand, plan_grid
from repro.store.sweep import run_sweep, sweep_status

TINY = {"model": "tiny", "seq_len": 32, "epochs": 1, "eval_every": 0.5, "threads": 1}


def _grid(pool, **axes):
    return {
        "fixed": TINY | {"pool": str(pool)},
        "axes": axes or {"batch_size": [8, 16], "lr": [1e-3, 3e-3]},
    }


def _sweep_command(grid: dict, tmp_path) -> list[str]:
    """`repro sweep run` of `grid` (written to tmp_path/grid.yaml) into tmp_path/s, as a process."""
    (tmp_path / "grid.yaml").write_text(json.dumps(grid))
    run = ["sweep", "run", str(tmp_path / "grid.yaml"), "--out", str(tmp_path / "s"), "--quiet"]
    return [sys.executable, "-m", "repro.cli", *run]


def test_hash_is_stable_and_ignores_defaults():
    config = make_run_config({"pool": "p", "lr": 1e-3, "batch_size": 8})
    assert run_id(config) == run_id(make_run_config({"batch_size": 8, "lr": 0.001, "pool": "p"}))
    assert run_id(config) == "505c25a8585e"  # pinned: ids change only with NUMERICS
    assert run_id(make_run_config({"pool": "p", "lr": 1e-3, "batch_size": 8, "seed": 0})) == run_id(
        config
    )
    assert run_id(make_run_config({"pool": "p", "lr": 2e-3, "batch_size": 8})) != run_id(config)


def test_conditional_axes():
    grid = {
        "fixed": {"pool": "p"},
        "axes": {"batch_size": [4, 64], "lr": [1e-3, 3e-3]},
        "when": [{"if": {"batch_size": 64}, "axes": {"lr": [1e-2, 3e-2, 1e-1]}}],
    }
    points = sorted((c.batch_size, c.lr) for c in expand(grid))
    assert points == [(4, 1e-3), (4, 3e-3), (64, 1e-2), (64, 3e-2), (64, 1e-1)]


def test_sweep_runs_skips_and_reports(synthetic_pool, tmp_path, capsys):
    grid = _grid(synthetic_pool)
    result = run_sweep(grid, tmp_path / "s", workers=2, progress=False)
    assert result.outcomes == {"done": 4}
    assert result.run_ids == [p.run_id for p in plan_grid(grid, tmp_path / "s")]
    assert (
        run_sweep(grid, tmp_path / "s", workers=2, progress=False).outcomes == {}
    )  # everything finished: nothing runs
    assert sweep_status(tmp_path / "s") == {"done": 4}
    results = open_results(tmp_path / "s")
    runs, evals = results.runs, results.evals
    assert len(runs) == 4 and len(evals) == 8 and set(runs["status"]) == {"done"}
    table = tuned(results, ["batch_size"])
    assert list(table["batch_size"]) == [8, 16]
    finals = evals.sort_values("step").groupby("run_id").last()
    finals = finals.join(runs.set_index("run_id")["batch_size"])
    for _, row in table.iterrows():
        group = finals[finals["batch_size"] == row["batch_size"]]
        assert row["run_id"] == group["val_loss"].idxmin()  # the choice on all documents
        assert group["val_loss"].min() - 1e-6 <= row["val_loss"] <= group["val_loss"].max() + 1e-6


def test_several_grids_run_as_one_sweep(synthetic_pool, tmp_path):
    first, second = (
        _grid(synthetic_pool, batch_size=[8], lr=[1e-3, 3e-3]),
        _grid(synthetic_pool, batch_size=[8], lr=[3e-3, 1e-2]),
    )
    assert run_sweep([first, second], tmp_path / "s", workers=2, progress=False).outcomes == {
        "done": 3
    }  # the shared run once
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["grids"] == [first, second]
    assert run_sweep(second, tmp_path / "s", progress=False).outcomes == {}


@pytest.mark.slow
def test_interrupted_sweep_resumes_without_losing_or_repeating(synthetic_pool, tmp_path):
    grid = _grid(synthetic_pool, lr=[1e-3, 3e-3])
    grid["fixed"] |= {"epochs": 4, "eval_every": 0.25, "batch_size": 8}
    cmd = _sweep_command(grid, tmp_path)
    proc = subprocess.Popen(cmd)
    first = tmp_path / "s" / run_id(expand(grid)[0]) / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (
        not first.exists() or len(first.read_text().splitlines()) < 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert sweep_status(tmp_path / "s").get("done", 0) == 0
    subprocess.run(cmd, check=True)
    run_sweep(grid, tmp_path / "straight", progress=False)
    for config in expand(grid):
        rid = run_id(config)
        killed = [
            {k: v for k, v in json.loads(x).items() if k != "wall_s"}
            for x in (tmp_path / "s" / rid / "metrics.jsonl").read_text().splitlines()
        ]
        straight = [
            {k: v for k, v in json.loads(x).items() if k != "wall_s"}
            for x in (tmp_path / "straight" / rid / "metrics.jsonl").read_text().splitlines()
        ]
        assert killed == straight


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_sweep_exits_within_seconds_and_the_same_command_finishes_it(
    synthetic_pool, tmp_path, stop, popen_as_in_a_terminal
):
    """Ctrl-C (SIGINT) or SIGTERM to `repro sweep run` with 2 workers once the first run trains:
    the queued runs never start, the running ones stop, the process exits within seconds with one
    line on how to go on; that command then finishes the sweep."""
    grid = _grid(synthetic_pool, lr=[1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3, 7e-3, 8e-3])
    grid["fixed"] |= {"epochs": 2, "batch_size": 8}
    cmd = [*_sweep_command(grid, tmp_path), "--workers", "2"]
    proc = popen_as_in_a_terminal(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((tmp_path / "s").glob("*/status.json")):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    stopped = time.time()
    proc.send_signal(stop)
    err = proc.communicate(timeout=120)[1]
    assert time.time() - stopped < 5 and proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "repro: stopped; finished runs are kept and stopped ones resume from their checkpoints: "
        f"run the same command again to go on: repro {shlex.join(cmd[3:])}"
    )
    assert sweep_status(tmp_path / "s").get("done", 0) < 8
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    assert sweep_status(tmp_path / "s") == {"done": 8}


def test_two_executors_on_one_directory_never_run_a_config_twice(synthetic_pool, tmp_path):
    """Two sweeps of one grid at once: each config trains once, and each sweep waits for the
    runs the other holds, so both end with every run finished (none left 'busy')."""
    grid = _grid(synthetic_pool, lr=[1e-3, 2e-3, 3e-3, 4e-3])
    grid["fixed"] |= {"batch_size": 8}
    cmd = _sweep_command(grid, tmp_path)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    done = sum(
        int(part.split()[0])
        for out in outputs
        for part in out.split(": ", 1)[1].split(" in ")[0].split(", ")
        if part.endswith("done")
    )
    assert done == 4, outputs  # each config trained by exactly one executor
    assert not any("busy" in out for out in outputs), outputs  # the other's runs waited for
    assert sweep_status(tmp_path / "s") == {"done": 4}
    for config in expand(grid):
        steps = [
            json.loads(x)["step"]
            for x in (tmp_path / "s" / run_id(config) / "metrics.jsonl").read_text().splitlines()
        ]
        assert steps == sorted(set(steps))


def test_failures_are_recorded_and_isolated(synthetic_pool, tmp_path):
    """A run that fails on what only its pool reveals (a vocab that does not match it); one wrong
    whatever the pool is refused before the sweep starts (test_sweep_faults)."""
    grid = _grid(synthetic_pool, batch_size=[8], lr=[1e-3], vocab_size=[0, 999])
    result = run_sweep(grid, tmp_path / "s", progress=False)
    bad = run_id(make_run_config(grid["fixed"] | {"batch_size": 8, "lr": 1e-3, "vocab_size": 999}))
    assert result.outcomes == {"done": 1, "failed": 1} and result.failed == [bad]
    failed = tmp_path / "s" / bad / "status.json"
    with pytest.raises(ReproError, match=rf"1 run\(s\) failed; the error is in .*{bad}/status"):
        result.raise_if_failed(tmp_path / "s")
    status = json.loads(failed.read_text())
    assert (
        status["status"] == "failed"
        and "does not match the model's vocab_size 999" in status["error"]
        and "Traceback" in status["traceback"]
    )
    again = run_sweep(grid, tmp_path / "s", progress=False)
    assert again.outcomes == {"skipped (failed)": 1} and again.failed == [bad]


def test_local_workers_are_capped_at_the_cpu_cores(synthetic_pool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    started = []
    monkeypatch.setattr(
        "repro.store.sweep._run_local", lambda jobs, workers: started.append(workers) or iter([])
    )
    run_sweep(_grid(synthetic_pool, lr=[1e-3]), tmp_path / "s", workers=12, progress=False)
    assert started and set(started) == {2}  # every call of the executor
    err = capsys.readouterr().err
    assert err == "repro: warning: --workers 12 > 2 CPU cores; using 2\n"


def test_a_missing_pool_stops_the_sweep_before_anything_is_recorded(tmp_path):
    grid = _grid(tmp_path / "no-pool", lr=[1e-3])
    with pytest.raises(
        ReproError, match="no-pool is not built; build it first: repro data build --source"
    ):
        run_sweep(grid, tmp_path / "s", progress=False)
    assert not (tmp_path / "s" / "sweep.json").exists()
    grid["fixed"].pop("pool")
    with pytest.raises(ReproError, match="names no pool"):
        run_sweep(grid, tmp_path / "s", progress=False)


def test_submitit_local_executor(synthetic_pool, tmp_path):
    pytest.importorskip("submitit")
    grid = _grid(synthetic_pool, lr=[1e-3, 3e-3])
    grid["fixed"] |= {"batch_size": 16}
    assert run_sweep(grid, tmp_path / "s", executor="submitit-local", progress=False).outcomes == {
        "done": 2
    }
    assert sweep_status(tmp_path / "s") == {"done": 2}


def test_wsd_branches_equal_standalone_runs(synthetic_pool, tmp_path):
    grid = {
        "fixed": TINY
        | {
            "pool": str(synthetic_pool),
            "schedule": "wsd",
            "warmup_steps": 5,
            "batch_size": 16,
            "eval_every": 1.0,
        },
        "axes": {"epochs": [1, 2, 3]},
        "wsd_branches": True,
    }
    planned = plan_grid(grid, tmp_path / "s")
    trunk = [p for p in planned if p.after is None]
    branches = [p for p in planned if p.after is not None]
    assert len(trunk) == 1 and trunk[0].config.epochs == 3 and len(branches) == 2
    from repro.data.pool import load_pool
    from repro.runtime.loaders import EpochLoader

    pool = load_pool(synthetic_pool)
    sequences = EpochLoader(pool.train, pool.eos_id, 32, 16, "repack", 0).sequences_per_epoch
    totals = [e * sequences // 16 for e in (1, 2)]  # whole batches of the stream of e epochs
    starts = list(trunk[0].config.save_steps)
    assert starts == [total - -(-2 * total // 10) for total in totals]  # minus ceil(20%)
    assert all(
        b.config.init_from.endswith(f"step-{s}.pt") and trunk[0].run_id in b.config.init_from
        for b, s in zip(branches, starts)
    )
    run_sweep(grid, tmp_path / "s", progress=False)
    # each branch equals a standalone WSD run with the same epoch budget, bit for bit
    standalone = {"fixed": grid["fixed"], "axes": {"epochs": [1, 2]}}
    run_sweep(standalone, tmp_path / "alone", progress=False)

    def strip(p):
        return [
            {k: v for k, v in json.loads(x).items() if k != "wall_s"}
            for x in p.read_text().splitlines()
        ]

    for b, alone in zip(branches, expand(standalone)):
        assert strip(tmp_path / "s" / b.run_id / "metrics.jsonl") == strip(
            tmp_path / "alone" / run_id(alone) / "metrics.jsonl"
        )


def test_a_branch_without_cool_down_steps_keeps_the_trunks_document_losses(
    synthetic_pool, tmp_path
):
    """A budget whose cool-down would start inside the warmup starts at its last step: it trains
    nothing itself, and its final per-document losses are its trunk's at that step."""
    from repro.data.pool import load_pool
    from repro.runtime.loaders import EpochLoader

    pool = load_pool(synthetic_pool)
    sequences = EpochLoader(pool.train, pool.eos_id, 32, 64, "repack", 0).sequences_per_epoch
    spe, two_epochs = sequences // 64, 2 * sequences // 64
    fixed = TINY | {"pool": str(synthetic_pool), "schedule": "wsd", "batch_size": 64}
    grid = {
        "fixed": fixed | {"warmup_steps": spe, "eval_every": 1.0},
        "axes": {"epochs": [1, 2]},
        "wsd_branches": True,
    }
    trunk, branch = plan_grid(grid, tmp_path)
    assert branch.config.init_from.endswith(f"step-{spe}.pt")
    run_sweep(grid, tmp_path, progress=False)
    losses = [tmp_path / p.run_id / "val_docs" / f"step-{spe}.npy" for p in (trunk, branch)]
    np.testing.assert_array_equal(np.load(losses[1]), np.load(losses[0]))
    assert not (tmp_path / branch.run_id / "val_docs" / f"step-{two_epochs}.npy").exists()


def test_a_budget_shorter_than_one_batch_is_refused_before_training(synthetic_pool, tmp_path):
    from repro.data.pool import load_pool
    from repro.runtime.loaders import EpochLoader

    pool = load_pool(synthetic_pool)
    sequences = EpochLoader(pool.train, pool.eos_id, 32, 4, "repack", 0).sequences_per_epoch
    fixed = TINY | {"pool": str(synthetic_pool), "schedule": "wsd", "batch_size": sequences + 1}
    grid = {"fixed": fixed, "axes": {"epochs": [1, 4]}, "wsd_branches": True}
    with pytest.raises(ReproError, match=f"less than one batch of {sequences + 1} in 1 epoch"):
        plan_grid(grid, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_branch_costs_only_its_steps_after_the_trunks_checkpoint(synthetic_pool, tmp_path):
    """The progress bar's and the job order's estimate: a 2-epoch branch cut from a 4-epoch trunk
    at step N of its T costs (1 - N / T) of a standalone 2-epoch run."""
    from dataclasses import replace

    from repro.store.grid import estimated_cost

    fixed = TINY | {"pool": str(synthetic_pool), "schedule": "wsd", "batch_size": 4}
    grid = {"fixed": fixed, "axes": {"epochs": [2, 4]}, "wsd_branches": True}
    trunk, branch = plan_grid(grid, tmp_path)
    start = trunk.config.save_steps[0]
    alone = estimated_cost(replace(branch.config, init_from=""))
    total = alone / (fixed["batch_size"] + 1)  # sequences + one pass per step
    assert estimated_cost(branch.config) == pytest.approx(alone * (1 - start / total))


def test_a_wsd_family_warms_up_over_one_percent_of_its_longest_run(synthetic_pool, tmp_path):
    fixed = TINY | {"pool": str(synthetic_pool), "schedule": "wsd", "batch_size": 4}
    grid = {"fixed": fixed, "axes": {"epochs": [1, 4], "lr": [1e-3, 1e-2]}, "wsd_branches": True}
    from repro.data.pool import load_pool
    from repro.runtime.loaders import EpochLoader

    pool = load_pool(synthetic_pool)
    sequences = EpochLoader(pool.train, pool.eos_id, 32, 4, "repack", 0).sequences_per_epoch
    planned = plan_grid(grid, tmp_path)
    # ceil(1% of the 4-epoch run's steps)
    assert {p.config.warmup_steps for p in planned} == {-(-(4 * sequences // 4) // 100)}
    assert sum(p.after is None for p in planned) == 2  # a trunk per lr
    with pytest.raises(ReproError, match="wsd_branches needs schedule: wsd in every run"):
        plan_grid(grid | {"fixed": fixed | {"schedule": "cosine"}}, tmp_path)


def test_moving_the_checkout_keeps_pools_and_runs(tmp_path):
    import shutil

    from repro.data.build import PoolSpec, build_pool

    first = build_pool(
        PoolSpec(source="synthetic", tokens=6_000, val_tokens=2_000, vocab_size=300),
        tmp_path / "a" / "p0",
        progress=False,
    )
    second_spec = PoolSpec(
        source="synthetic",
        tokens=6_000,
        val_tokens=2_000,
        seed=1,
        val_seed=0,
        tokenizer=str(first / "tokenizer.json"),
    )
    second = build_pool(second_spec, tmp_path / "a" / "p1", progress=False)
    grid = {"fixed": TINY | {"pool": str(second), "batch_size": 8}, "axes": {"lr": [1e-3]}}
    assert run_sweep(grid, tmp_path / "a" / "store", progress=False).outcomes == {"done": 1}
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = tmp_path / "b" / "p1"
    stamp = (moved / "meta.json").stat().st_mtime_ns
    build_pool(
        replace(second_spec, tokenizer=str(tmp_path / "b" / "p0" / "tokenizer.json")),
        moved,
        progress=False,
    )
    assert (moved / "meta.json").stat().st_mtime_ns == stamp  # same pool: nothing rebuilt
    grid["fixed"]["pool"] = str(moved)
    result = run_sweep(grid, tmp_path / "b" / "store", progress=False)
    assert result.outcomes == {}  # same runs: nothing retrained
    runs, _ = load_results(tmp_path / "b" / "store", result.run_ids, result.pools)
    assert runs["pool"].tolist() == [str(moved)]  # where the pool is now, for the analyses


def test_cli_sweep_exits_non_zero_naming_failed_runs_and_table_says_so(
    synthetic_pool, tmp_path, capsys
):
    from repro.cli import main

    grid = _grid(synthetic_pool, batch_size=[8], lr=[1e-3], vocab_size=[0, 999])
    (tmp_path / "grid.yaml").write_text(json.dumps(grid))
    store = tmp_path / "s"
    for _ in range(2):  # failing now, then skipped as failed
        with pytest.raises(SystemExit) as exit_info:
            main(["sweep", "run", str(tmp_path / "grid.yaml"), "--out", str(store), "--quiet"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "1 run(s) failed" in err
    main(["sweep", "table", str(store)])
    captured = capsys.readouterr()
    assert "not in the table: 1 run(s) failed; their errors:" in captured.err
    assert "status.json" in captured.err and "val_loss" in captured.out  # the done run
    assert len(captured.out.splitlines()) == 2


def test_the_numerics_version_is_part_of_every_run_id(monkeypatch):
    """Runs trained by code with other numerics never share an id with today's."""
    import repro.runtime.config as config_module

    config = make_run_config(TINY | {"lr": 2e-3})
    before = run_id(config), run_id(make_run_config({}))
    monkeypatch.setattr(config_module, "NUMERICS", config_module.NUMERICS + 1)
    assert run_id(config) != before[0] and run_id(make_run_config({})) != before[1]


def test_the_work_bar_counts_the_trained_part_of_the_runs_in_flight(
    synthetic_pool, tmp_path, monkeypatch
):
    """Between finishes the bar fills by each running run's status.json (a branch from its
    checkpoint on), so an ETA shows before the first run ends; a damaged status counts nothing,
    the bar never goes back, and a finished run counts its whole cost."""

    monkeypatch.setattr(progress, "POLL_S", 0.02)
    fixed = TINY | {"pool": str(synthetic_pool), "schedule": "wsd", "batch_size": 4}
    grid = {"fixed": fixed, "axes": {"epochs": [2, 4]}, "wsd_branches": True}
    trunk, branch = plan_grid(grid, tmp_path)
    start = grid_module.branch_start(branch.config)
    assert start > 0
    cost = {p.run_id: grid_module.estimated_cost(p.config) for p in (trunk, branch)}

    def status(run, **fields):
        (tmp_path / run.run_id).mkdir(exist_ok=True)
        (tmp_path / run.run_id / "status.json").write_text(json.dumps(fields))

    def settled(bar, expected):
        deadline = time.monotonic() + 5
        while abs(bar.bar.n - expected) > 1e-6 and time.monotonic() < deadline:
            time.sleep(0.01)
        return bar.bar.n

    with progress.WorkBar(True, file=io.StringIO()) as bar:
        bar.add([trunk, branch])
        status(trunk, status="running", step=25, total_steps=100)
        status(branch, status="running", step=start + 5, total_steps=start + 10)  # half its own
        bar.submitted([tmp_path / trunk.run_id, tmp_path / branch.run_id])
        both = cost[trunk.run_id] / 4 + cost[branch.run_id] / 2
        assert settled(bar, both) == pytest.approx(both)
        (tmp_path / trunk.run_id / "status.json").write_text("{not json")
        time.sleep(10 * progress.POLL_S)
        assert bar.bar.n == pytest.approx(both)  # never back
        with progress.WorkBar(True, file=io.StringIO()) as fresh:  # a damaged status counts nothing
            fresh.add([trunk, branch])
            fresh.submitted([tmp_path / trunk.run_id, tmp_path / branch.run_id])
            half = cost[branch.run_id] / 2
            assert settled(fresh, half) == pytest.approx(half)
        bar.done([trunk.run_id])
        done = cost[trunk.run_id] + cost[branch.run_id] / 2
        assert settled(bar, done) == pytest.approx(done)


def test_a_bar_writes_a_line_now_and_then_where_redraws_do_not_show(monkeypatch):
    """A log file or a saved notebook gets whole lines, at most one per LINE_EVERY_S seconds,
    and the last state at the end; no carriage return."""
    clock = iter(range(0, 10_000, 10))  # 10 s per reading
    monkeypatch.setattr(bars.time, "monotonic", lambda: float(next(clock)))
    log = io.StringIO()
    stream = bars.LineStream(log)
    for n in range(12):
        stream.write(f"\rruns: {n}/12")
    stream.write("\n")
    stream.close()
    assert log.getvalue() == "runs: 0/12\nruns: 3/12\nruns: 6/12\nruns: 9/12\nruns: 11/12\n"


def test_a_pool_or_training_bar_in_a_log_writes_lines_and_its_end(monkeypatch):
    """progress_bar (pool builds, hashing, training) where stderr is a file: a first line, then
    its last state when it closes; no carriage return."""
    log = io.StringIO()
    monkeypatch.setattr(bars.sys, "stderr", log)
    with bars.progress_bar(total=3, desc="tokens", bar_format="{desc}: {n}/{total}") as bar:
        for _ in range(3):
            bar.update()
    assert log.getvalue() == "tokens: 0/3\ntokens: 3/3\n"


def test_a_run_of_less_than_one_batch_costs_its_passes_not_a_crash(synthetic_pool):
    """The trainer refuses a run with no step in one line; pricing it must not raise first."""
    from repro.store.grid import estimated_cost

    config = make_run_config(TINY | {"pool": str(synthetic_pool), "batch_size": 100_000})
    assert estimated_cost(config) == 0.0
