"""Runs on several processes (run field `gpus`): launched by the sweep's executors, they give the
single-process result (gloo on this CPU, within the DDP tolerance of tests/test_train.py)."""

import json
import math

import pytest

from repro.errors import ReproError
from repro.runtime.config import check_fields, make_run_config
from repro.runtime.train import train
from repro.store.grid import plan_grid
from repro.store.launch import job_resources
from repro.store.sweep import run_sweep, stacks

pytestmark = pytest.mark.slow  # real multi-process runs or lm-eval: CI runs it, `pytest` skips it

FIELDS = {
    "model": "tiny",
    "seq_len": 32,
    "batch_size": 8,
    "micro_batch": 2,
    "epochs": 1,
    "eval_every": 0.5,
    "threads": 1,
}


def _losses(store):
    (run,) = [d for d in store.iterdir() if (d / "metrics.jsonl").is_file()]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(m["step"], m["train_loss"], m["val_loss"]) for m in lines]


def _sweep(pool, store, gpus, executor):
    grid = {"fixed": FIELDS | {"pool": str(pool), "gpus": gpus}}
    return run_sweep(grid, store, executor=executor, progress=False)


@pytest.fixture(scope="module")
def one_process(synthetic_pool, tmp_path_factory):
    store = tmp_path_factory.mktemp("one")
    assert _sweep(synthetic_pool, store, 1, "local").outcomes == {"done": 1}
    return _losses(store)


@pytest.mark.parametrize("executor", ["local", "submitit-local"])
def test_a_two_process_run_gives_the_single_process_result(
    executor, synthetic_pool, one_process, tmp_path
):
    if executor == "submitit-local":
        pytest.importorskip("submitit")
    assert _sweep(synthetic_pool, tmp_path / "s", 2, executor).outcomes == {"done": 1}
    two = _losses(tmp_path / "s")
    assert [step for step, *_ in two] == [step for step, *_ in one_process]
    for (_, train_a, val_a), (_, train_b, val_b) in zip(one_process, two, strict=True):
        assert train_b == pytest.approx(train_a, abs=1e-4)
        assert val_b == pytest.approx(val_a, abs=1e-4)


def test_a_multi_process_run_started_alone_says_how_to_launch_it(synthetic_pool, tmp_path):
    config = make_run_config(FIELDS | {"pool": str(synthetic_pool), "gpus": 2})
    with pytest.raises(ReproError, match="torchrun --nproc-per-node 2"):
        train(config, tmp_path / "run", progress=False)
    with pytest.raises(ReproError, match="not divisible by micro_batch 3 x world size 2"):
        check_fields(make_run_config(FIELDS | {"pool": "x", "gpus": 2, "micro_batch": 3}))


def test_multi_process_runs_never_stack(tmp_path):
    grid = {"fixed": FIELDS | {"pool": "p", "gpus": 2}, "axes": {"lr": [1e-3, 3e-3]}}
    assert [len(s) for s in stacks(plan_grid(grid, tmp_path), size=8)] == [1, 1]


def test_slurm_jobs_take_a_task_per_gpu_over_whole_nodes():
    assert job_resources(1, 8, local=False) == {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1}
    assert job_resources(4, 8, local=False) == {"nodes": 1, "tasks_per_node": 4, "gpus_per_node": 4}
    assert job_resources(16, 8, local=False) == {
        "nodes": 2,
        "tasks_per_node": 8,
        "gpus_per_node": 8,
    }
    with pytest.raises(ReproError, match="does not fill whole nodes of 8 GPUs"):
        job_resources(12, 8, local=False)


def test_a_sweep_mixing_gpu_counts_runs_each_group_and_reports_a_childs_error(
    synthetic_pool, tmp_path
):
    """A child's error that only the pool reveals (a vocab that does not match it) is reported
    from the run's status; a config wrong whatever the pool (6 = 2 processes x 3, not x 2 x 2) is
    refused before anything runs."""
    fixed = FIELDS | {"pool": str(synthetic_pool), "batch_size": 6, "micro_batch": 3}
    grid = {"fixed": fixed, "axes": {"gpus": [1, 2], "vocab_size": [0, 999]}}
    result = run_sweep(grid, tmp_path / "s", progress=False)
    assert result.outcomes == {"done": 2, "failed": 2}
    for failed in result.failed:
        error = json.loads((tmp_path / "s" / failed / "status.json").read_text())["error"]
        assert "does not match the model's vocab_size 999" in error
    indivisible = {"fixed": fixed | {"micro_batch": 2}, "axes": {"gpus": [1, 2]}}
    with pytest.raises(ReproError, match="batch_size 6 is not divisible by micro_batch 2 x world"):
        run_sweep(indivisible, tmp_path / "t", progress=False)
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").iterdir())


def test_lm_evals_missing_standard_error_is_nan():
    pytest.importorskip("lm_eval")
    from repro.store.downstream import _number

    assert math.isnan(_number("N/A")) and _number("0.25") == 0.25
