"""`repro plan`: runs, tokens, FLOPs and GPU-hours of a preset, before anything is built."""

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from repro.design.grids import batch_sweep_grid
from repro.design.preset_files import PRESETS
from repro.design.presets import changed
from repro.errors import ReproError
from repro.plan import (
    ASSUMED_MFU,
    ASSUMED_PEAK_FLOPS,
    GPU_BENCHMARK,
    GpuSpeed,
    _pass_seconds,
    _Unbuilt,
    cpu_speed,
    describe_plan,
    from_scratch_stages,
    gpu_speed,
    notebook_grids,
    plan,
    plan_text,
    pool_vocab,
    preset_fingerprint,
    record_times,
    run_rows,
    wall_hours,
)
from repro.runtime.config import run_id
from repro.runtime.shapes import flops_per_token, model_config
from repro.store.grid import expand

ROOT = Path(__file__).resolve().parents[1]
SMOKE = changed(  # the selection grids alone
    PRESETS["smoke"], pools={"confirmation_seeds": ()}, repetition={"ensemble_pools": 0}
)
SPEED = GpuSpeed(1e12, "test")


def _rows(preset, grid):
    return run_rows(grid, {"p0": preset.pools.recipe.tokens}, preset.pools.recipe.val_tokens, 300)


def test_each_cosine_budget_trains_in_full_and_pays_its_evaluations():
    grid = batch_sweep_grid(SMOKE, ["p0"], [2], ["tiny"])
    rows = _rows(SMOKE, grid)
    assert len(rows) == len(expand(grid))
    per_token = flops_per_token(model_config("tiny", 300), SMOKE.grid.seq_len)
    for row, config in zip(rows, expand(grid), strict=True):
        assert row["tokens"] == config.epochs * SMOKE.pools.recipe.tokens
        evals = math.floor(config.epochs / config.eval_every) + 1
        expected = per_token * (row["tokens"] + evals * SMOKE.pools.recipe.val_tokens / 3)
        assert row["flops"] == pytest.approx(expected)


def test_a_wsd_family_trains_its_longest_budget_and_only_the_other_cool_downs():
    preset = changed(SMOKE, grid={"epochs": (1, 2, 4), "wsd_branches": True})
    rows = _rows(preset, batch_sweep_grid(preset, ["p0"], [2], ["tiny"]))
    tokens = sorted({row["tokens"] / preset.pools.recipe.tokens for row in rows})
    assert tokens == pytest.approx([0.2, 0.4, 4.0])


def test_a_run_two_notebooks_share_counts_once_where_first_needed():
    table = plan(SMOKE, 300, SPEED).set_index("notebook")
    grids = notebook_grids(SMOKE)
    loader, embedding, combined = (len(expand(g)) for g in grids["03"])
    shuffle_in_02 = loader // 3  # the original recipe's loader is 02's
    tied_off_in_02 = embedding // 4  # untied, no embedding decay
    assert table.loc["02", "runs"] == sum(len(expand(g)) for g in grids["02"])
    assert table.loc["03", "runs"] == loader - shuffle_in_02 + embedding - tied_off_in_02 + combined
    assert table.loc["all", "runs"] == table.drop(index="all")["runs"].sum()
    assert table.loc["all", "GPU-h"] == pytest.approx(table.loc["all", "FLOPs"] / 1e12 / 3600)


def test_confirmation_runs_are_priced_an_arm_per_pool_at_the_cap():
    """With confirmation pools, 02 adds a run per confirmation pool for each model x batch size and
    beta2-ablated batch, 03 for each loader x ablation batch, tying x decay cell and combined
    batch, each at the epoch cap (an upper bound)."""
    confirming = PRESETS["smoke"]
    pools = len(confirming.pools.confirmation_seeds)
    grids, selection = notebook_grids(confirming), notebook_grids(SMOKE)
    added = {nb: grids[nb][len(selection[nb]) :] for nb in ("02", "03")}
    assert grids["04"] == selection["04"] and grids["05"] == selection["05"]
    P = confirming
    arms_02 = len(P.grid.models) * len(P.grid.batch_sizes) + len(
        P.batch_sweep.beta2_ablation_batch_sizes
    )
    arms_03 = 3 * len(P.ablations.batch_sizes) + 4 + len(P.ablations.batch_sizes)
    assert [len(added["02"]), len(added["03"])] == [arms_02, arms_03]
    configs = [c for nb in ("02", "03") for g in added[nb] for c in expand(g)]
    assert len(configs) == pools * (arms_02 + arms_03)
    assert {c.epochs for c in configs} == {P.grid.cap} and all(
        "confirmation" in c.pool for c in configs
    )
    priced = plan(confirming, 300, SPEED).set_index("notebook")["runs"]
    assert priced["02"] - plan(SMOKE, 300, SPEED).set_index("notebook").loc["02", "runs"] > 0


def test_a_tying_grid_on_repack_at_the_ablation_batch_trains_two_arms_of_new_runs():
    """tying_batch_size set: 03's tying grid follows from the preset (prefetched, no stand-in);
    on REPACK at the ablation batch, its untied-no-decay cell is the REPACK arm's runs and its
    tied-with-decay cell the combined arm's, so 03 counts two arms of new runs for it."""
    b = SMOKE.ablations.batch_sizes[0]
    on_shuffle = changed(SMOKE, ablations={"tying_batch_size": b})
    on_repack = changed(on_shuffle, ablations={"tying_loader": "repack"})
    assert len(notebook_grids(SMOKE)["03"]) == len(notebook_grids(on_repack)["03"]) == 3
    loader, embedding, combined = (expand(g) for g in notebook_grids(on_repack)["03"])
    ids = {
        name: {run_id(c) for c in runs}
        for name, runs in {"loader": loader, "embedding": embedding, "combined": combined}.items()
    }
    shared = ids["embedding"] & (ids["loader"] | ids["combined"])
    at_b = [c for c in embedding if c.batch_size == b]
    assert len(at_b) == len(embedding) and len(shared) == len(embedding) // 2
    in_02 = {run_id(c) for g in notebook_grids(on_repack)["02"] for c in expand(g)}
    new_in_03 = ids["loader"] | ids["embedding"] | ids["combined"]
    runs_03 = [
        plan(p, 300, SPEED).set_index("notebook").loc["03", "runs"] for p in (on_shuffle, on_repack)
    ]
    assert runs_03[1] == len(new_in_03 - in_02)
    assert runs_03[0] - runs_03[1] == len(embedding) // 2 - len(embedding) // 4


def test_02_prices_and_prefetches_the_beta2_ablation_without_training_the_sweeps_runs_twice():
    """cpu with fixed betas: the ablation is the first model at batches 1 and 2 with beta2 scaled,
    every lr x weight decay x budget on each pool; with the rule's reference batch among the
    ablated ones (batch 8 of a preset scaling from 8), those runs are the sweep's and count
    once."""
    cpu = changed(
        PRESETS["cpu"],
        pools={"confirmation_seeds": ()},
        repetition={"ensemble_pools": 0},
        grid={"beta2_half_life_batch": 0},
        batch_sweep={"beta2_ablation_batch_sizes": ()},
    )
    sweep, ablation = (expand(g) for g in notebook_grids(cpu)["02"])
    assert {(c.model, c.batch_size, c.adam_beta2) for c in ablation} == {
        ("tiny", 1, 0.99361),
        ("tiny", 2, 0.9873),
    }
    per_batch = len(cpu.pools.seeds) * 3 * len(cpu.grid.weight_decays) * len(cpu.grid.epochs)
    assert len(ablation) == 2 * per_batch
    assert plan(cpu, 512, SPEED).set_index("notebook").loc["02", "runs"] == len(sweep) + len(
        ablation
    )
    ruled = changed(
        cpu, grid={"beta2_half_life_batch": 8}, batch_sweep={"beta2_ablation_batch_sizes": (1, 8)}
    )
    grids = notebook_grids(ruled)["02"]
    shared = {run_id(c) for c in expand(grids[0])} & {run_id(c) for c in expand(grids[1])}
    assert len(shared) == per_batch  # batch 8: 0.95 under both settings
    assert plan(ruled, 512, SPEED).set_index("notebook").loc["02", "runs"] == len(sweep) + per_batch
    study = _Unbuilt(cpu, Path("."), Path("data/pools"), Path("runs/cpu"), 1)
    assert study.beta2_ablation_grid() in study.preset_grids()


def test_the_gpu_speed_is_the_latest_benchmark_when_there_is_one(tmp_path):
    assumed = gpu_speed(tmp_path)
    assert assumed.flops_per_s == ASSUMED_MFU * ASSUMED_PEAK_FLOPS
    assert assumed.source.startswith("assumed")
    path = tmp_path / GPU_BENCHMARK
    path.parent.mkdir(parents=True)
    runs = [
        {"model": "150m", "micro_batch": 4, "mfu": 0.31},
        {"model": "150m", "micro_batch": 16, "mfu": 0.45},
    ]
    path.write_text(json.dumps({"peak_matmul_flops_per_s": 7e14, "runs": runs}))
    measured = gpu_speed(tmp_path)
    assert measured.flops_per_s == pytest.approx(0.45 * 7e14)
    assert measured.source.startswith("measured: MFU 45% (150m, micro-batch 16)")


def test_the_wall_time_is_never_below_the_longest_run():
    assert wall_hours(100.0, 2.0, 8) == 12.5
    assert wall_hours(100.0, 40.0, 8) == 40.0


def test_a_hub_tokenizer_of_unknown_size_asks_for_the_pool_or_vocab():
    preset = changed(PRESETS["gpu"], pools={"recipe": {"tokenizer": "someone/tok"}})
    with pytest.raises(ReproError, match="build it .* or pass --vocab"):
        pool_vocab(preset, None)
    assert pool_vocab(preset, {"vocab_size": 1234}) == 1234
    assert pool_vocab(PRESETS["gpu"], None) == 128_256


def test_the_readme_shows_the_gpu_presets_plans():
    readme = (ROOT / "README.md").read_text()
    for name in ("gpu-small", "gpu"):
        text = plan_text(PRESETS[name], ROOT, (1, 8))
        assert text in readme, f"README's plan of {name} is stale:\n{text}"


def test_a_growing_preset_says_its_growth_is_not_priced():
    grown = changed(PRESETS["smoke"], growth={"rounds": 2})
    assert "up to 2 rounds" in plan_text(grown, ROOT, (1,), vocab=300)
    assert "twice a best epoch budget" not in plan_text(grown, ROOT, (1,), vocab=300)
    longer = changed(grown, growth={"epochs": True})
    assert "twice a best epoch budget" in plan_text(longer, ROOT, (1,), vocab=300)
    assert "grid growth" not in plan_text(PRESETS["smoke"], ROOT, (1,), vocab=300)


def test_a_run_on_several_gpus_is_shorter_but_needs_them():
    preset = changed(SMOKE, execution={"gpus_per_run": {"cpu-s": 2}})
    one, two = plan(SMOKE, 300, SPEED), plan(preset, 300, SPEED)
    assert two["GPU-h"].tolist() == pytest.approx(one["GPU-h"].tolist())
    assert two["GPUs per run"].iloc[-1] == 2
    text = describe_plan(two, SPEED, (1, 2))
    total = text.splitlines()[-4]
    assert total.startswith("all") and total.split()[-3] == "-"  # on 1 GPU: a run needs 2


@pytest.mark.parametrize(
    "option, message",
    [
        (["--gpus", "0"], "--gpus takes GPU counts of at least 1, got 0"),
        (["--gpus", "8,-1"], "--gpus takes GPU counts of at least 1, got -1"),
        (["--vocab", "-5"], "--vocab takes a vocab size of at least 1, got -5"),
    ],
)
def test_gpu_counts_and_vocab_must_be_positive(option, message, capsys):
    from repro.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--preset", "smoke", *option])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err


@pytest.fixture
def fake_pass_times(monkeypatch):
    """Training passes that take 0.01 s x micro-batch ** 0.5 (a power law), with the calls
    counted; the per-process cache cleared before and after."""
    calls = []

    def throughput(model, vocab, seq_len, micro_batch, steps, warmup):
        calls.append((model, seq_len, micro_batch))
        return {"step_s": 0.01 * micro_batch**0.5}

    monkeypatch.setattr("repro.bench.measure.throughput", throughput)
    _pass_seconds.cache_clear()
    yield calls
    _pass_seconds.cache_clear()


def test_cpu_pass_times_are_measured_at_three_micro_batches_and_interpolated(fake_pass_times):
    keys = {("tiny", 32, b) for b in (1, 2, 4, 8, 16)} | {("cpu-s", 16, 8)}
    speed = cpu_speed(keys, 300, workers=2)
    assert sorted(fake_pass_times) == [("cpu-s", 16, 8), *(("tiny", 32, b) for b in (1, 4, 16))]
    for key in keys:  # a power law is a line on log-log axes: exact between the measured points
        assert speed.pass_seconds[key] == pytest.approx(0.01 * key[2] ** 0.5)


def test_a_cpu_preset_is_priced_in_worker_hours_and_wall_time_on_its_workers(fake_pass_times):
    """Each run costs its training passes (steps x micro-batches a step) and a third of a pass per
    evaluation micro-batch, at the measured pass time; a preset of GPU-sized models is not
    measured on the CPU."""
    table = plan(SMOKE, 300, SPEED, cpu=True).set_index("notebook")
    study = _Unbuilt(SMOKE, Path("."), Path("data/pools"), Path("runs"), 1)
    tokens = {str(p): SMOKE.pools.recipe.tokens for p in study.pools()}
    grids = notebook_grids(SMOKE)["02"]
    rows = {
        r["run_id"]: r
        for g in grids
        for r in run_rows(g, tokens, SMOKE.pools.recipe.val_tokens, 300)
    }
    for row, config in zip(
        run_rows(grids[0], tokens, SMOKE.pools.recipe.val_tokens, 300), expand(grids[0])
    ):
        micro = min(config.micro_batch or config.batch_size, config.batch_size)
        steps = math.ceil(row["tokens"] / SMOKE.grid.seq_len / config.batch_size)
        evals = math.floor(config.epochs / config.eval_every) + 1
        evaluation = (
            evals * math.ceil(SMOKE.pools.recipe.val_tokens / SMOKE.grid.seq_len / micro) / 3
        )
        assert row["passes"] == steps * math.ceil(config.batch_size / micro) + evaluation
    expected = sum(r["passes"] * 0.01 * r["micro_batch"] ** 0.5 for r in rows.values()) / 3600
    assert table.loc["02", "CPU-h"] == pytest.approx(expected)
    assert table.loc["all", "CPU-h"] == pytest.approx(table["CPU-h"].drop("all").sum())
    text = plan_text(SMOKE, ROOT, (1,), vocab=300)
    assert f"wall {SMOKE.execution.workers} CPU" in text and "CPU-h" in text
    assert "CPU-h" not in plan_text(PRESETS["gpu-small"], ROOT, (1,))


def test_the_last_whole_reproductions_measured_time_is_shown_beside_the_estimate(tmp_path):
    preset = replace(SMOKE, name="timed")
    assert "last whole reproduction" not in plan_text(preset, tmp_path, (1,), vocab=300)
    runs, figures, fingerprint = tmp_path / "runs" / "timed", tmp_path / "figures" / "timed", "x"
    record_times(runs, [("prefetch", 5400.0), ("02_batch_sweep", 1800.0)], fingerprint)
    text = plan_text(preset, tmp_path, (1,), vocab=300)
    assert "last whole reproduction" in text and "took 2.00 h of wall time" in text
    assert "with other preset fields than now" in text  # recorded for preset "x"
    assert "from scratch" not in text  # a reproduction over runs it found trained
    record_times(runs, [("prefetch", 1800.0)], preset_fingerprint(preset), figures)
    text = plan_text(preset, tmp_path, (1,), vocab=300)
    line = next(t for t in text.splitlines() if t.startswith("from scratch"))
    assert f"{os.cpu_count()} CPUs) took 0.50 h" in line and str(figures) in line
    assert "other preset fields" not in text
    assert from_scratch_stages(figures, preset_fingerprint(preset)) == {"prefetch": 1800.0}
    other = changed(preset, execution={"workers": preset.execution.workers + 1})
    assert preset_fingerprint(other) != preset_fingerprint(preset)
    assert from_scratch_stages(figures, preset_fingerprint(other)) == {}
    (figures / "from-scratch-times.json").write_text('{"finished": "2026-12-03 02:57"}')
    with pytest.raises(ReproError, match="from-scratch-times.json is not a record of stage times"):
        plan_text(preset, tmp_path, (1,), vocab=300)
