"""Stacked training: K configs at once equal K separate runs; divergence, resume and the sweep
option."""

import json
from dataclasses import asdict, replace

import pytest
import torch

from repro.data.build import PoolSpec, build_pool
from repro.data.pool import load_pool
from repro.errors import ReproError
from repro.runtime.config import make_run_config
from repro.runtime.model import Transformer
from repro.runtime.shapes import model_config
from repro.runtime.stacked import StackedForward, stack_parameters
from repro.runtime.train import check_config, train, train_stacked
from repro.store.grid import estimated_cost, plan_grid
from repro.store.sweep import longest_first, run_sweep, stacks

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it

BASE = dict(
    model="tiny",
    seq_len=32,
    batch_size=4,
    micro_batch=2,
    epochs=2,
    eval_every=0.5,
    threads=1,
    loader="repack",
)
CONFIGS = [
    dict(lr=1e-3, weight_decay=0.1),
    dict(lr=3e-3, weight_decay=1.0, embedding_weight_decay=0.1, adam_beta2=0.99),
    dict(lr=1e-2, weight_decay=0.0, adam_beta1=0.8),
]


# members that differ in everything a stack allows: pool, seed, loader, epoch budget, schedule,
# evaluation points, optimizer; the 1-epoch member leaves the stack halfway
WIDE = [
    dict(lr=1e-3, weight_decay=0.1),
    dict(lr=3e-3, seed=1, loader="shuffle", epochs=1, embedding_weight_decay=0.1),
    dict(lr=1e-2, loader="repeat", schedule="wsd", eval_every=1.0, min_lr_ratio=0.1),
    dict(lr=2e-3, epochs=3, warmup=0.1, pool="other", adam_beta2=0.99),
]


@pytest.fixture(scope="module")
def other_pool(tmp_path_factory):
    """A second pool of the same vocabulary (300) but other documents and size."""
    spec = PoolSpec(source="synthetic", tokens=12_000, val_tokens=3_000, vocab_size=300, seed=7)
    return build_pool(spec, tmp_path_factory.mktemp("pools") / "other", progress=False)


def _wide_configs(synthetic_pool, other_pool):
    pools = {"other": str(other_pool)}
    return [
        make_run_config(BASE | c | {"pool": pools.get(c.get("pool"), str(synthetic_pool))})
        for c in WIDE
    ]


def _metrics(run):
    return [
        {k: v for k, v in json.loads(line).items() if k != "wall_s"}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


def _weights(run):
    return torch.load(run / "checkpoint.pt", weights_only=True)["model"]


def _betas(run):
    """The betas of every parameter group of the run's last checkpoint."""
    groups = torch.load(run / "checkpoint.pt", weights_only=True)["optimizer"]["param_groups"]
    return {tuple(group["betas"]) for group in groups}


def _assert_same_run(a, b):
    """Every metric (wall time aside) and every weight bit-identical."""
    assert _metrics(a) == _metrics(b)
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[name], wb[name]) for name in wa)


def _kill_at_evaluation(n, configs, outs, monkeypatch):
    """Train the stack into `outs` until its n-th evaluation (of any member) raises
    KeyboardInterrupt, as a kill would stop it."""
    import repro.runtime.train

    evaluate, calls = repro.runtime.train.evaluate, []

    def evaluate_then_die(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(repro.runtime.train, "evaluate", evaluate_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_stacked(configs, outs, progress=False)
    monkeypatch.setattr(repro.runtime.train, "evaluate", evaluate)


@pytest.mark.parametrize("tie", [False, True])
def test_stacked_forward_equals_each_model(tie):
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(Transformer(model_config("tiny", 300, tie_embeddings=tie)))
    tokens = torch.randint(0, 300, (2, 16))
    expected = [m(tokens) for m in models]
    stack = StackedForward(models, stack_parameters(models))
    logits = stack(tokens)
    assert logits.shape == (3, 2, 16, 300)
    for k in range(3):
        torch.testing.assert_close(logits[k], expected[k], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            models[k](tokens), expected[k], rtol=0, atol=0
        )  # models are views of the stack
    assert not torch.equal(logits[0], logits[1])  # the configs really differ


def test_stack_equals_separate_runs(synthetic_pool, tmp_path):
    configs = [make_run_config(BASE | c | {"pool": str(synthetic_pool)}) for c in CONFIGS]
    for i, config in enumerate(configs):
        train(config, tmp_path / f"alone{i}", progress=False)
    statuses = train_stacked(configs, [tmp_path / f"stacked{i}" for i in range(3)], progress=False)
    assert [s["status"] for s in statuses] == ["done"] * 3 and all(
        s["stacked"] == 3 for s in statuses
    )
    for i in range(3):
        _assert_same_run(tmp_path / f"alone{i}", tmp_path / f"stacked{i}")
        # each member stepped with its own betas
        assert _betas(tmp_path / f"stacked{i}") == {(configs[i].adam_beta1, configs[i].adam_beta2)}
    # a finished stack is a no-op; a stacked run's checkpoint is an ordinary single-run checkpoint
    assert (
        train_stacked(configs, [tmp_path / f"stacked{i}" for i in range(3)], progress=False)
        == statuses
    )
    assert train(configs[1], tmp_path / "stacked1", progress=False) == statuses[1]


def test_diverging_member_leaves_the_others_unchanged(synthetic_pool, tmp_path):
    configs = [
        make_run_config(BASE | c | {"pool": str(synthetic_pool)})
        for c in (CONFIGS[0], {"lr": 1e4}, CONFIGS[2])
    ]
    statuses = train_stacked(configs, [tmp_path / f"s{i}" for i in range(3)], progress=False)
    assert [s["status"] for s in statuses] == ["done", "diverged", "done"]
    train(configs[2], tmp_path / "alone", progress=False)
    _assert_same_run(tmp_path / "alone", tmp_path / "s2")


def test_interrupted_stack_resumes(synthetic_pool, tmp_path, monkeypatch):
    """A kill between two members' checkpoint writes leaves them at different steps; both resume
    exactly."""

    configs = [make_run_config(BASE | c | {"pool": str(synthetic_pool)}) for c in CONFIGS[:2]]
    straight, killed = (
        [tmp_path / "a", tmp_path / "b"],
        [tmp_path / "killed_a", tmp_path / "killed_b"],
    )
    train_stacked(configs, straight, progress=False)
    # killed at member b's third evaluation, after member a's third checkpoint
    _kill_at_evaluation(6, configs, killed, monkeypatch)
    steps = [torch.load(k / "checkpoint.pt", weights_only=False)["step"] for k in killed]
    assert steps[0] > steps[1]
    assert [json.loads((k / "status.json").read_text())["status"] for k in killed] == [
        "running",
        "running",
    ]
    train_stacked(configs, killed, progress=False)
    for a, b in zip(straight, killed):
        _assert_same_run(a, b)


def test_stack_rejects_configs_of_different_shape(synthetic_pool, tmp_path):
    configs = [
        make_run_config(BASE | {"pool": str(synthetic_pool)}),
        make_run_config(BASE | {"pool": str(synthetic_pool), "batch_size": 8}),
    ]
    with pytest.raises(ReproError, match="stacked runs differ in batch_size, which must agree"):
        train_stacked(configs, [tmp_path / "a", tmp_path / "b"], progress=False)


def test_sweep_with_stacks_equals_sweep_without(synthetic_pool, tmp_path):
    grid = {
        "fixed": BASE | {"pool": str(synthetic_pool), "epochs": 1},
        "axes": {"batch_size": [2, 4], "lr": [1e-3, 1e-2], "weight_decay": [0.0, 1.0]},
    }
    groups = stacks(plan_grid(grid, tmp_path / "x"), 3)
    assert sorted(len(g) for g in groups) == [
        1,
        1,
        3,
        3,
    ]  # per batch size: a stack of 3 and one left over
    assert all(len({p.config.batch_size for p in g}) == 1 for g in groups)
    run_sweep(grid, tmp_path / "plain", progress=False)
    assert run_sweep(grid, tmp_path / "stacked", progress=False, stack=3).outcomes == {"done": 8}
    for p in plan_grid(grid, tmp_path / "stacked"):
        _assert_same_run(tmp_path / "plain" / p.run_id, tmp_path / "stacked" / p.run_id)


def test_stacks_leave_compiled_and_batch_schedule_runs_single(synthetic_pool, tmp_path):
    grid = {
        "fixed": BASE | {"pool": str(synthetic_pool)},
        "axes": {"lr": [1e-3, 1e-2], "compile": [False, True]},
    }
    assert sorted(len(g) for g in stacks(plan_grid(grid, tmp_path), 6)) == [
        1,
        1,
        2,
    ]  # compiled runs never stack
    grid = {
        "fixed": BASE | {"pool": str(synthetic_pool), "batch_schedule": "0:2,0.5:8"},
        "axes": {"lr": [1e-3, 1e-2]},
    }
    for max_batch in (4, 8):  # a batch schedule changes the batch with the epochs: always alone
        assert [len(g) for g in stacks(plan_grid(grid, tmp_path), 6, max_batch)] == [1, 1]
    configs = [p.config for p in plan_grid(grid, tmp_path)]
    with pytest.raises(ReproError, match="a batch_schedule trains alone"):
        train_stacked(configs, [tmp_path / "a", tmp_path / "b"], progress=False)
    wsd = {
        "fixed": BASE
        | {
            "pool": str(synthetic_pool),
            "schedule": "wsd",
            "warmup_steps": 1,
            "batch_schedule": "0:2,0.5:8",
        },
        "axes": {"epochs": [1, 2]},
        "wsd_branches": True,
    }
    with pytest.raises(ReproError, match="does not support batch_schedule"):
        plan_grid(wsd, tmp_path)


def test_longest_jobs_first(synthetic_pool, tmp_path):
    grid = {
        "fixed": BASE | {"pool": str(synthetic_pool), "epochs": 2},
        "axes": {"batch_size": [8, 2], "lr": [1e-3, 1e-2, 3e-2]},
    }
    planned = plan_grid(grid, tmp_path)
    small = next(p for p in planned if p.config.batch_size == 2).config
    loader = check_config(small, load_pool(small.pool))
    steps = 2 * loader.sequences_per_epoch // 2  # whole batches of 2 in the 2-epoch stream
    assert estimated_cost(small) == steps * 2 + steps  # sequences + passes
    split = make_run_config(asdict(small) | {"micro_batch": 1})  # two passes per step
    assert estimated_cost(split) == steps * 2 + 2 * steps
    jobs = longest_first(stacks(planned, 2))
    assert [(len(j), j[0].config.batch_size) for j in jobs] == [(2, 2), (2, 8), (1, 2), (1, 8)]
    assert estimated_cost(make_run_config(BASE | {"pool": str(tmp_path / "not-built")})) == 0.0


def test_a_runs_bits_do_not_depend_on_its_stack(synthetic_pool, tmp_path):
    """The same config alone, first of two, and in the middle of three: identical metrics (every
    bit, wall time aside) and identical weights."""
    configs = [make_run_config(BASE | c | {"pool": str(synthetic_pool)}) for c in CONFIGS]
    train(configs[0], tmp_path / "alone", progress=False)
    train_stacked(configs[:2], [tmp_path / "pair0", tmp_path / "pair1"], progress=False)
    trio = [configs[1], configs[0], configs[2]]
    train_stacked(trio, [tmp_path / f"trio{i}" for i in range(3)], progress=False)
    for other in (tmp_path / "pair0", tmp_path / "trio1"):
        _assert_same_run(tmp_path / "alone", other)


def test_a_runs_bits_do_not_depend_on_the_thread_count(synthetic_pool, tmp_path):
    for threads in (1, 2):
        config = make_run_config(BASE | CONFIGS[1] | {"pool": str(synthetic_pool)})
        train_stacked(
            [replace(config, threads=threads), replace(config, lr=2e-3, threads=threads)],
            [tmp_path / f"t{threads}", tmp_path / f"other{threads}"],
            progress=False,
        )
    _assert_same_run(tmp_path / "t1", tmp_path / "t2")


def test_a_wide_stack_equals_separate_runs(synthetic_pool, other_pool, tmp_path):
    configs = _wide_configs(synthetic_pool, other_pool)
    outs = [tmp_path / f"stacked{i}" for i in range(len(configs))]
    statuses = train_stacked(configs, outs, progress=False)
    assert [s["status"] for s in statuses] == ["done"] * len(configs)
    assert len({s["total_steps"] for s in statuses}) == 3  # 1, 2 and 3 epochs of two pools
    for i, config in enumerate(configs):
        train(config, tmp_path / f"alone{i}", progress=False)
        _assert_same_run(tmp_path / f"alone{i}", outs[i])


def test_a_killed_wide_stack_resumes_exactly(synthetic_pool, other_pool, tmp_path, monkeypatch):

    configs = _wide_configs(synthetic_pool, other_pool)
    straight = [tmp_path / f"a{i}" for i in range(len(configs))]
    killed = [tmp_path / f"k{i}" for i in range(len(configs))]
    train_stacked(configs, straight, progress=False)
    _kill_at_evaluation(7, configs, killed, monkeypatch)
    steps = {
        torch.load(k / "checkpoint.pt", weights_only=True)["step"]
        if (k / "checkpoint.pt").exists()
        else 0
        for k in killed
    }
    assert len(steps) > 2  # the members resume from different steps, in one stack
    train_stacked(configs, killed, progress=False)
    for a, b in zip(straight, killed):
        _assert_same_run(a, b)


def test_the_planner_stacks_across_pools_seeds_and_budgets(synthetic_pool, other_pool, tmp_path):
    grid = {
        "fixed": BASE | {"epochs": 1},
        "axes": {
            "pool": [str(synthetic_pool), str(other_pool)],
            "seed": [0, 1],
            "epochs": [1, 2],
            "batch_size": [2, 4],
        },
    }
    groups = stacks(plan_grid(grid, tmp_path), 8)
    assert sorted(len(g) for g in groups) == [8, 8]  # one stack per batch size
    assert all(len({p.config.batch_size for p in g}) == 1 for g in groups)
    third = PoolSpec(source="synthetic", tokens=12_000, val_tokens=3_000, vocab_size=320)
    other_vocab = build_pool(third, tmp_path / "vocab320", progress=False)
    grid["axes"]["pool"].append(str(other_vocab))
    assert sorted(len(g) for g in stacks(plan_grid(grid, tmp_path), 8)) == [4, 4, 8, 8]
    configs = [make_run_config(BASE | {"pool": str(p)}) for p in (synthetic_pool, other_vocab)]
    with pytest.raises(ReproError, match="stacked runs differ in vocab, which must agree"):
        train_stacked(configs, [tmp_path / "a", tmp_path / "b"], progress=False)
