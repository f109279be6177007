"""Presets: built-in names and preset YAML files (a base plus overrides), validated where defined;
the example preset reads a local corpus split into paragraphs; `repro preset show`."""

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from repro.cli import main
from repro.design.dry_run import DRY_CONFIRMATION_POOLS, dry_run_preset
from repro.design.grids import (
    batch_sweep_grid,
    beta2_ablation,
    beta2_ablation_batches,
    beta2_at,
    scaling_grids,
    schedule_grid,
)
from repro.design.preset_files import BUILTIN_DIR, PRESETS, get_preset, load_preset, preset_yaml
from repro.design.presets import changed
from repro.design.regime import (
    NOISE_RATIO,
    PAPER_NOISE_SCALE,
    PAPER_REGIME,
    describe_regime,
    deviations,
    preset_regime,
    zhang_critical_batch,
)
from repro.errors import ReproError
from repro.runtime.config import run_id
from repro.store.grid import expand

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _preset_file(tmp_path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_yaml_preset_overrides_a_base_and_types_its_fields(tmp_path):
    (tmp_path / "notes.txt").write_text("one paragraph\n\nanother paragraph\n")
    path = _preset_file(
        tmp_path,
        "base: cpu\npools: {recipe: {source: notes.txt, text_unit: paragraph, tokens: 2.5k}}\n"
        "grid: {batch_sizes: [4, 8], lrs: {4: [1e-3], 8: [2.0e-3, 4.0e-3]}, epochs: [1, 3]}\n"
        "critical_batch: {noise_scale_batches: [8], pool_tokens: [1100]}\n"
        "ablations: {batch_sizes: [4, 8], tying_batch_size: 8}\n"
        "batch_sweep: {beta2_ablation_batch_sizes: [4]}\n",
    )
    preset = get_preset(str(path))
    assert (
        preset.ablations.tying_batch_size == 8 and preset.ablations.tying_loader == "repack"
    )  # the latter cpu's
    assert (
        preset.name == "mine" and preset.grid.epochs == (1, 3) and preset.grid.batch_sizes == (4, 8)
    )
    assert preset.grid.lrs == {4: (0.001,), 8: (0.002, 0.004)}
    assert (
        preset.pools.recipe.source == str(tmp_path / "notes.txt")
        and preset.pools.recipe.tokens == 2500
    )
    assert preset.pools.recipe.text_unit == "paragraph"
    assert preset.pools.recipe.val_tokens == PRESETS["cpu"].pools.recipe.val_tokens  # from the base
    assert preset.grid.models == PRESETS["cpu"].grid.models
    assert preset.pool_dir("pools", 0) == Path("pools/mine-notes.txt-seed0")


@pytest.mark.parametrize(
    "text, message",
    [
        ("batch_size: [2]", "mine.yaml: unknown field 'batch_size'; fields: name, pools, grid"),
        ("grid: {batch_size: [2]}", "grid: unknown field 'batch_size'"),
        ("pools: {recipe: {tokenz: 3}}", "pools.recipe: unknown field 'tokenz'"),
        ("grid: {epochs: two}", "grid.epochs[0]: expected int, got 'two'"),
        ("grid: {epochs: true}", "grid.epochs[0]: expected int, got True"),
        ("grid: {lrs: {2: [.nan], 8: [0.1]}}", "grid.lrs[2][0]: expected a finite float"),
        ("grid: {batch_sizes: [2, 4]}", "grid: no lr grid for batch size 4"),
        ("grid: {models: [huge]}", "unknown model size 'huge'"),
        ("grid: 3", "grid: expected a mapping of fields, got 3"),
        ("name: cpu", "name 'cpu' is a built-in preset's"),
        ("name: a/b", "name must be letters"),
        ("base: laptop", "unknown base 'laptop'"),
        ("grid: {epochs: [2}", "not valid YAML"),
        ("base: smoke\nbase: cpu", "key 'base' is given twice, on lines 1 and 2; keep one"),
        ("- 1\n- 2", "a preset file is a mapping"),
        (
            "ablations: {batch_sizes: [2, 4]}",
            "ablations.batch_sizes: batch size 4 is not one of grid.batch_sizes",
        ),
        ("ablations: {batch_sizes: []}", "ablations.batch_sizes is empty"),
        (
            "ablations: {tying_batch_size: 4}",
            "ablations.tying_batch_size: batch size 4 is not one of grid.batch_sizes",
        ),
        ("ablations: {tying_loader: pack}", "unknown tying_loader 'pack'; choose one of: repeat"),
        ("base: [smoke]", "unknown base ['smoke']"),
        ("name: null", "name must be a string"),
        ("pools: {recipe: {seed: 5}}", "pool seeds come from pools.seeds"),
        ("pools: {seeds: [0, 0]}", "pools.seeds and pools.confirmation_seeds repeat a seed"),
        ("pools: {confirmation_seeds: [1, 7]}", "pools.seeds and pools.confirmation_seeds repeat"),
        ("grid: {eval_every: 0.3}", "eval_every=0.3 epochs must be 1/k"),
        ("frontier: {micro_batch: 0}", "frontier.micro_batch must be >= 1, got 0"),
        ("execution: {workers: 0}", "execution.workers must be >= 1, got 0"),
        ("growth: {rounds: -1}", "growth.rounds must be >= 0"),
        ("growth: {epochs: true}", "growth.epochs needs rounds of growth"),
        ("grid: {beta2_half_life_batch: -1}", "grid.beta2_half_life_batch must be >= 0"),
        (
            "batch_sweep: {beta2_ablation_batch_sizes: [4]}",
            "batch_sweep.beta2_ablation_batch_sizes: batch size 4 is not one of grid.batch_sizes",
        ),
        (
            "batch_sweep: {beta2_ablation_batch_sizes: [2, 2]}",
            "batch_sweep.beta2_ablation_batch_sizes repeats a batch size",
        ),
        ("grid: {run_fields: {adam_beta2: 1.0}}", "adam_beta2=1.0 is outside [0, 1)"),
        (
            "grid: {beta2_half_life_batch: 2, run_fields: {adam_beta2: 1.5}}",
            "adam_beta2=1.5 is outside [0, 1)",
        ),
        (
            "grid: {beta2_half_life_batch: 2, run_fields: {adam_beta2: x}}",
            "grid.run_fields.adam_beta2: expected float, got 'x'",
        ),
        ("grid: {lrs: {2: [0.0], 8: [0.1]}}", "lr must be positive"),
        ("grid: {weight_decays: [-0.1]}", "weight decays must be >= 0"),
        ("schedules: {ramps: {up: 'fast'}}", "schedules.ramps[up]='fast' must look like"),
        (
            "grid: {run_fields: {devcie: cuda}}",
            "grid.run_fields: unknown field 'devcie'; fields: pool, model",
        ),
        ("critical_batch: {noise_scale_batches: [2]}", "noise_scale needs at least two micro-"),
        ("critical_batch: {pool_tokens: [8000]}", "pool of 8000 tokens is not smaller"),
        ("grid: {epochs: '1.4'}", "grid.epochs[0]: expected int, got '1.4'"),
        ("grid: {epochs: 4}", "add 1 to grid.epochs or give one_pass_batch_size"),
        ("ablations: {embedding_weight_decays: [0.1]}", "needs 0.0 and a positive value"),
        ("grid: {epochs: [1, -2]}", "grid.epochs must be >= 1, got -2"),
        ("grid: {epoch_cap: 1}", "grid.epoch_cap 1 is below the largest of grid.epochs (2)"),
        ("grid: {epoch_cap: -1}", "grid.epoch_cap must be >= 0, got -1"),
        ("critical_batch: {pool_tokens: [40]}", "the smallest pool (40 tokens) holds a batch of"),
        ("pools: {recipe: {val_tokens: -100}}", "val_tokens must be positive, got -100"),
        ("pools: {recipe: {tokens: 0}}", "tokens must be positive, got 0"),
        ("critical_batch: {pool_tokens: [-5]}", "critical_batch.pool_tokens must be >= 1, got -5"),
        ("name: cpu-dry-run", "name 'cpu-dry-run' is a built-in preset's"),
        ("repetition: {fresh_multiples: [1, 2]}", "needs 3 or more distinct positive multiples"),
        ("repetition: {fresh_multiples: [0, 1, 2]}", "needs 3 or more distinct positive multiples"),
        ("repetition: {ensemble_pools: 3}", "ensemble_pools (3) is more than the 2 pools."),
        ("repetition: {ensemble_members: 1}", "ensemble_members must be >= 2"),
        (
            "grid: {run_fields: {device: [cpu]}}",
            "grid.run_fields: device must be one value, not a list or mapping",
        ),
        pytest.param(  # 9**9 strings if expanded
            "grid:\n run_fields:\n  device:\n    - &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"    - &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
            ),
            "grid.run_fields: device must be one value",
            id="yaml-alias-bomb",
        ),
    ],
)
def test_malformed_preset_file_is_a_one_line_error_naming_the_field(tmp_path, text, message):
    with pytest.raises(ReproError) as info:
        load_preset(_preset_file(tmp_path, text + "\n"))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_preset_name_or_missing_file(tmp_path):
    with pytest.raises(ReproError, match="unknown preset 'laptop'"):
        get_preset("laptop")
    with pytest.raises(ReproError, match="preset file .*nope.yaml not found"):
        get_preset(str(tmp_path / "nope.yaml"))


def test_example_preset_reads_the_shipped_corpus_by_paragraph():
    preset = get_preset(str(EXAMPLES / "own_corpus.yaml"))
    assert preset.name == "own-corpus" and preset.name not in PRESETS
    assert Path(preset.pools.recipe.source) == EXAMPLES / "corpus.txt"
    assert preset.pools.recipe.text_unit == "paragraph"


def test_preset_show_prints_every_field_and_round_trips(tmp_path, capsys):
    main(["preset", "show", "smoke"])
    shown = capsys.readouterr().out
    assert shown == preset_yaml(PRESETS["smoke"])
    copy = _preset_file(tmp_path, "base: cpu\n" + shown.replace("name: smoke", "name: copy"))
    assert load_preset(copy) == PRESETS["smoke"].__class__(
        **{**PRESETS["smoke"].__dict__, "name": "copy"}
    )


def test_the_built_in_presets_are_yaml_files_in_the_users_form(tmp_path):
    """Each built-in preset is a file of repro/design/builtin_presets/ that names only what it
    sets over its base (cpu-regime over cpu) or the defaults; written out by `repro preset show` and
    read back as a user's file, it is the same preset."""
    assert sorted(path.stem for path in BUILTIN_DIR.glob("*.yaml")) == sorted(PRESETS)
    assert yaml.safe_load((BUILTIN_DIR / "cpu-regime.yaml").read_text())["base"] == "cpu"
    for name, preset in PRESETS.items():
        shown = preset_yaml(preset).replace(f"name: {name}\n", "")
        assert replace(load_preset(_preset_file(tmp_path, shown)), name=name) == preset
    assert PRESETS["cpu-regime"].pools.seeds == PRESETS["cpu"].pools.seeds  # from its base


def test_example_grid_is_a_valid_grid():
    from repro.store.grid import expand

    runs = expand(yaml.safe_load((EXAMPLES / "grid.yaml").read_text()))
    assert len(runs) == 4 and {r.batch_size for r in runs} == {4, 16}


def test_example_preset_builds_a_pool_of_paragraph_documents(tmp_path):
    from repro.data.build import build_pool
    from repro.data.pool import load_pool

    preset = get_preset(str(EXAMPLES / "own_corpus.yaml"))
    pool = load_pool(
        build_pool(preset.seeded_pool_spec(0, None), tmp_path / "pool", progress=False)
    )
    paragraphs = (EXAMPLES / "corpus.txt").read_text().count("\n\n") + 1
    assert pool.train.n_docs + pool.val.n_docs > 30 and pool.train.n_docs < paragraphs
    assert pool.train.n_tokens >= preset.pools.recipe.tokens


def test_regime_states_the_presets_ratios_against_the_papers():
    from repro.runtime.model import Transformer
    from repro.runtime.shapes import model_config

    preset = PRESETS["cpu"]
    params = Transformer(model_config(preset.grid.models[0], 512)).num_params()
    regime = preset_regime(preset, 512)
    tokens = preset.pools.recipe.tokens
    assert regime["batch / pool (tokens)"] == (
        min(preset.grid.batch_sizes) * preset.grid.seq_len / tokens,
        max(preset.grid.batch_sizes) * preset.grid.seq_len / tokens,
    )
    assert regime["pool tokens per parameter"] == (tokens / params, tokens / params)
    assert regime["epochs"] == (1.0, 32.0)
    assert all(math.isnan(end) for end in regime[NOISE_RATIO])  # not measured
    # a noise scale of 1,024 to 4,096 tokens: batch 1 (128 tokens) over 4,096, 32 over 1,024
    assert preset_regime(preset, 512, (1024.0, 4096.0))[NOISE_RATIO] == (128 / 4096, 4096 / 1024)


def test_the_papers_noise_scale_is_zhangs_critical_batch_under_both_readings_of_its_units():
    """At D = 1M tokens, D in millions is 1: B* = 22.9 sequences of 512 = 11,724.8 tokens; D in
    tokens: 22.9 * 1e6^0.47 = 22.9 * 10^2.82."""
    assert zhang_critical_batch(1e6) == pytest.approx((22.9 * 512, 22.9 * 10**2.82))
    low, high = PAPER_NOISE_SCALE  # at 200M tokens: 35 and 45 sequences of 4,096
    assert (round(low / 4096), round(high / 4096)) == (35, 45)
    assert PAPER_REGIME[NOISE_RATIO] == pytest.approx((16 * 4096 / high, 512 * 4096 / low))
    assert PAPER_REGIME[NOISE_RATIO] == pytest.approx((0.36, 14.8), abs=0.03)  # 0.36 to 15


@pytest.mark.parametrize(
    "ratio,verdict",
    [
        ((1.0, 10.0), "inside"),
        ((0.1, 20.0), "covers it"),
        ((0.04, 1.4), "overlaps it from 0.36 to 1.4"),
        ((0.005, 0.16), "outside"),
    ],
)
def test_describe_regime_compares_batch_over_noise_scale_with_the_papers_estimate(ratio, verdict):
    line = describe_regime({NOISE_RATIO: ratio})
    assert line.endswith(f", notebook 05's measurement (paper's estimate 0.36 to 15: {verdict})")
    above = describe_regime({NOISE_RATIO: ratio}, noise_gap=0.9)
    assert ", notebook 05's measurement 0.9 nats/token above the tuned loss, not at it (" in above
    assert describe_regime({NOISE_RATIO: ratio}, noise_gap=0.05) == line  # within the limit
    not_measured = describe_regime({NOISE_RATIO: (math.nan, math.nan)})
    assert not_measured == (
        f"  {NOISE_RATIO}: not measured yet, notebook 05 measures it (paper's estimate 0.36 to 15)"
    )


@pytest.mark.parametrize(
    "ratio,verdict",
    [
        ((1e-3, 5e-3), "inside"),
        ((1e-4, 0.1), "covers it"),
        ((1e-4, 5e-3), "overlaps it from 0.00033 to 0.005"),
        ((5.3e-4, 0.017), "overlaps it from 0.00053 to 0.01"),
        ((0.02, 0.1), "outside"),
        ((1e-5, 1e-4), "outside"),
    ],
)
def test_describe_regime_says_inside_only_when_the_whole_range_is(ratio, verdict):
    line = describe_regime({"batch / pool (tokens)": ratio})
    assert line.endswith(f": {verdict})") and "paper 0.00033 to 0.01" in line


def test_readme_states_every_built_in_presets_regime():
    """The block, with each preset's batch / noise scale from its committed notebook 05 table
    (else "not measured yet"; smoke's figures are git-ignored), and the prose's numbers for the
    paper's estimated noise scale."""
    from repro.analysis.noise import NOISE_SCALE_TABLE, noise_scale_gap, noise_scale_range

    readme = (EXAMPLES.parent / "README.md").read_text()
    prose = " ".join(readme.split())
    (low, high), (ratio_low, ratio_high) = PAPER_NOISE_SCALE, PAPER_REGIME[NOISE_RATIO]
    assert f"{low / 1e3:.0f}k to {high / 1e3:.0f}k tokens" in prose
    assert f"({low / 4096:.0f} to {high / 4096:.0f} sequences of 4,096)" in prose
    assert prose.count(f"{ratio_low:.2g} to {ratio_high:.2g} times") == 2
    vocab = {
        "smoke": 300,
        "cpu": 512,
        "cpu-regime": 512,
        "gpu-small": 8192,
        "gpu": 128256,
    }  # gpu: Llama 3's
    assert set(vocab) == set(PRESETS)
    for name, preset in PRESETS.items():
        assert preset.pools.recipe.tokenizer or preset.pools.recipe.vocab_size == vocab[name]
        table = EXAMPLES.parent / "figures" / name / f"{NOISE_SCALE_TABLE}.csv"
        committed = table.is_file() and name != "smoke"  # figures/smoke/: CI's, never committed
        noise = noise_scale_range(pd.read_csv(table)) if committed else None
        gap = noise_scale_gap(pd.read_csv(table)) if committed else 0.0
        regime = preset_regime(preset, vocab[name], noise)
        block = f"{name} (vocab {vocab[name]:,}):\n" + describe_regime(regime, gap)
        assert NOISE_RATIO in regime
        assert block in readme, f"README's regime block is stale for {name}:\n{block}"


def test_deviations_from_the_reference_recipe_are_listed():
    cpu, gpu = deviations(PRESETS["cpu"]), deviations(PRESETS["gpu"])
    assert any(n.startswith("models tiny: not in the reference ladder") for n in cpu)
    assert any(n.startswith("AdamW beta2 scaled with the batch") for n in cpu)
    assert any(n.startswith("seq_len 128") for n in cpu) and any("float32" in n for n in cpu)
    assert gpu == ["epoch budgets 4, 8, 16, 32, each its own run (reference grid: 1 to 64 epochs)"]


def test_the_epoch_cap_is_the_papers_at_the_cpu_presets_else_the_largest_budget():
    """cpu and cpu-regime state their claims within the paper's 32 epochs and train every lr x
    weight decay point to it (issue 48); a preset that sets no cap is capped at its largest
    budget."""
    caps = {name: PRESETS[name].grid.cap for name in ("smoke", "cpu", "cpu-regime", "gpu")}
    assert caps == {"smoke": 2, "cpu": 32, "cpu-regime": 32, "gpu": 32}
    for name in ("cpu", "cpu-regime"):
        assert max(PRESETS[name].grid.epochs) == PRESETS[name].grid.epoch_cap


def test_a_wsd_branches_preset_branches_its_budgets_from_one_run(tmp_path):
    preset = changed(PRESETS["smoke"], grid={"wsd_branches": True})
    grid = batch_sweep_grid(preset, ["p0"])
    assert grid["wsd_branches"] and grid["fixed"]["schedule"] == "wsd"
    assert "wsd_branches" not in batch_sweep_grid(PRESETS["smoke"], ["p0"])
    assert any("as WSD cool-downs" in note for note in deviations(preset))
    assert any("each its own run" in note for note in deviations(PRESETS["smoke"]))


def test_the_regime_preset_sits_in_the_papers_ratios():
    """cpu-regime (issue 32: a grid that straddles the noise scale): 2+ sizes, the smallest first
    (03-05 study it, as the paper's ablations study its smallest), at 0.13-1.3 pool tokens per
    parameter; batches from a quarter or less of the B_simple its notebook 05 measured (410-482
    sequences of 16 tokens, per pool, figures/cpu-regime/05_noise_scale_regime.csv) to above it
    (4x above would hold a whole pool); budgets within the paper's 1-32 epochs; 3 independent
    pools; beta2 by the half-life rule."""
    from repro.runtime.shapes import model_config, parameter_count

    preset = PRESETS["cpu-regime"]
    params = [parameter_count(model_config(m, 512)) for m in preset.grid.models]
    assert len(params) >= 2 and params == sorted(params)
    assert all(0.13 <= preset.pools.recipe.tokens / p <= 1.3 for p in params)
    assert min(preset.grid.batch_sizes) * 4 <= 410 and max(preset.grid.batch_sizes) >= 482
    assert (
        1 <= min(preset.grid.epochs)
        and max(preset.grid.epochs) <= 32
        and len(preset.pools.seeds) >= 3
    )
    assert preset.grid.beta2_half_life_batch == max(preset.grid.batch_sizes)


def test_the_pool_size_sweep_trains_only_the_model_notebook_05_reads():
    small, large = scaling_grids(PRESETS["smoke"], {4_000: ["p4k"], 8_000: ["p8k"]})
    assert small["axes"]["model"] == [PRESETS["smoke"].grid.models[0]]
    assert small["axes"]["weight_decay"] == [PRESETS["smoke"].grid.weight_decays[0]]
    assert small["axes"]["pool"] == ["p4k"] and large["axes"]["pool"] == ["p8k"]


def test_the_pool_size_sweep_trains_the_batches_a_pool_holds_twice():
    """cpu, 129-token sequences: 4,000 tokens hold a batch of 1 to 16 sequences, not of 32
    (4,128 tokens); the 16k-token main pool holds every batch of the grid."""
    cpu = PRESETS["cpu"]
    assert cpu.scaling_batch_sizes(4_000) == (1, 2, 4, 8, 16)
    assert cpu.scaling_batch_sizes(cpu.pools.recipe.tokens) == cpu.grid.batch_sizes
    grids = scaling_grids(cpu, {4_000: ["a"], cpu.pools.recipe.tokens: ["b"]})
    assert [g["axes"]["batch_size"] for g in grids] == [
        [1, 2, 4, 8, 16],
        list(cpu.grid.batch_sizes),
    ]
    with pytest.raises(ReproError, match=r"the smallest pool \(200 tokens\) holds a batch of"):
        changed(cpu, critical_batch={"pool_tokens": (200, 8_000)})


def test_gpus_per_run_gives_each_model_its_gpus_in_every_grid():
    preset = changed(PRESETS["smoke"], execution={"gpus_per_run": {"cpu-s": 2}})
    runs = expand(batch_sweep_grid(preset, ["p0"]))
    assert {(c.model, c.gpus) for c in runs} == {("tiny", 1), ("cpu-s", 2)}
    assert len(runs) == len(expand(batch_sweep_grid(PRESETS["smoke"], ["p0"])))
    first = changed(PRESETS["smoke"], execution={"gpus_per_run": {"tiny": 2}})
    assert {c.gpus for c in expand(schedule_grid(first, "p0", 2, 0.1))} == {2}
    with pytest.raises(ReproError, match="gpus_per_run names a model that is not in grid.models"):
        changed(PRESETS["smoke"], execution={"gpus_per_run": {"1.5b": 8}})


def test_beta2_half_life_batch_scales_beta2_with_the_batch_in_every_grid(tmp_path):
    """By hand: 0.95 at batch 2 has the token half-life of 0.95 ** (8 / 2) = 0.81450625 at batch
    8, 0.815 at 3 significant digits of 1 - beta2; 0.99 at batch 8 is 0.99 ** (2 / 8) =
    0.9974906, 0.99749, at batch 2. The reference batch keeps the default and its run ids."""
    smoke = PRESETS["smoke"]
    preset = load_preset(_preset_file(tmp_path, "base: smoke\ngrid: {beta2_half_life_batch: 2}\n"))
    assert preset.grid.beta2_half_life_batch == 2 and smoke.grid.beta2_half_life_batch == 0
    sweep = expand(batch_sweep_grid(preset, ["p0"]))
    assert {(c.batch_size, c.adam_beta2) for c in sweep} == {(2, 0.95), (8, 0.815)}
    assert {c.adam_beta2 for c in expand(schedule_grid(preset, "p0", 2, 0.1))} == {0.815}
    plain = expand(batch_sweep_grid(smoke, ["p0"]))
    assert {c.adam_beta2 for c in plain} == {0.95}  # fixed betas: the built-in presets
    assert [run_id(c) for c in sweep if c.batch_size == 2] == [
        run_id(c) for c in plain if c.batch_size == 2
    ]
    assert any("beta2 scaled with the batch" in note for note in deviations(preset))
    other = changed(
        preset,
        grid={"beta2_half_life_batch": 8, "run_fields": {"adam_beta2": 0.99}},
        execution={"gpus_per_run": {"cpu-s": 2}},
    )
    runs = expand(batch_sweep_grid(other, ["p0"]))
    assert {(c.batch_size, c.adam_beta2) for c in runs} == {(2, 0.99749), (8, 0.99)}
    assert (
        dry_run_preset(
            changed(PRESETS["gpu"], grid={"beta2_half_life_batch": 64})
        ).grid.beta2_half_life_batch
        == 3
    )


def test_the_beta2_ablation_runs_the_other_setting_at_the_smallest_batches():
    """Fixed betas: the ablation scales 0.95 from schedules.batch 8 at the two smallest batches
    (0.95 ** (1 / 8) = 0.99361); a preset with the rule (cpu: 0.95 at batch 32) ablates the
    reference betas at its beta2_ablation_batch_sizes."""
    cpu = changed(
        PRESETS["cpu"],
        grid={"beta2_half_life_batch": 0},
        batch_sweep={"beta2_ablation_batch_sizes": ()},
    )
    assert beta2_ablation_batches(cpu) == (1, 2) and beta2_ablation_batches(PRESETS["smoke"]) == (
        2,
    )
    ablation = beta2_ablation(cpu)
    assert ablation.grid.beta2_half_life_batch == cpu.schedules.batch == 8
    assert [beta2_at(ablation, b) for b in (1, 2, 8)] == [0.99361, 0.9873, 0.95]
    assert [beta2_at(cpu, b) for b in (1, 2)] == [0.95, 0.95]
    assert beta2_ablation_batches(PRESETS["cpu"]) == (1,)
    assert beta2_at(beta2_ablation(PRESETS["cpu"]), 1) == 0.95
    ruled = changed(
        cpu,
        grid={"beta2_half_life_batch": 4},
        batch_sweep={"beta2_ablation_batch_sizes": (8, 1, 4)},
    )
    assert beta2_ablation_batches(ruled) == (1, 4, 8)
    assert beta2_ablation(ruled).grid.beta2_half_life_batch == 0
    assert [beta2_at(beta2_ablation(ruled), b) for b in (1, 8)] == [0.95, 0.95]
    assert beta2_at(ruled, 1) == 0.9873  # 0.95 ** (1 / 4) = 0.987259
    gpu = changed(PRESETS["gpu"], batch_sweep={"beta2_ablation_batch_sizes": (32, 16)})
    assert dry_run_preset(gpu).batch_sweep.beta2_ablation_batch_sizes == (2, 1)


@pytest.mark.parametrize("name", ["gpu-small", "gpu"])
def test_a_dry_run_keeps_every_run_of_the_plan_at_cpu_size(name):
    from repro.plan import GpuSpeed, plan
    from repro.runtime.shapes import model_config, parameter_count

    preset, dry = PRESETS[name], get_preset(name, dry_run=True)
    speed = GpuSpeed(1e12, "test")
    runs = plan(dry, 300, speed)["runs"].tolist()
    kept = preset.pools.confirmation_seeds[:DRY_CONFIRMATION_POOLS]  # the path, not the power
    assert dry.pools.confirmation_seeds == kept and len(kept) == DRY_CONFIRMATION_POOLS
    ensembles = {"ensemble_pools": min(preset.repetition.ensemble_pools, len(kept))}
    confirming = changed(preset, pools={"confirmation_seeds": kept}, repetition=ensembles)
    full = plan(confirming, 8192, speed)["runs"].tolist()
    # 02-05 run for run; 06's count differs at gpu (its one-epoch fresh runs on the pool itself
    # meet 02's where the dry run's budgets start at 1: counted once), so only its presence
    assert runs[:4] == full[:4] and runs[4] > 0 and full[4] > 0
    sizes = [parameter_count(model_config(m, 300)) for m in dry.grid.models]
    ladder = [parameter_count(model_config(m, 300)) for m in preset.grid.models]
    assert sorted(range(len(sizes)), key=sizes.__getitem__) == sorted(
        range(len(ladder)), key=ladder.__getitem__
    )  # the same order by size
    assert (
        dry.name == f"{name}-dry-run"
        and dry.grid.seq_len == 16
        and dry.grid.run_fields == {"device": "cpu"}
    )
    assert dry.pools.recipe.dtype == ("uint32" if name == "gpu" else "auto")  # Llama 3: uint32 ids


def test_a_dry_run_takes_a_built_in_preset_and_keeps_the_notebooks_outputs(capsys):
    for args in (
        ["--preset", "own.yaml", "--dry-run"],
        ["--preset", "gpu", "--dry-run", "--store-outputs"],
    ):
        with pytest.raises(SystemExit):
            main(["reproduce", *args])
    errors = capsys.readouterr().err.splitlines()
    assert "--dry-run takes a built-in preset" in errors[0] and "--store-outputs" in errors[1]


def test_a_dry_run_is_a_flag_not_a_preset_name():
    """`--dry-run` (get_preset's dry_run) shrinks a built-in preset; its name with a -dry-run
    suffix is not a preset of its own."""
    assert get_preset("smoke", dry_run=True).name == "smoke-dry-run"
    with pytest.raises(ReproError, match="unknown preset 'smoke-dry-run'"):
        get_preset("smoke-dry-run")


def test_a_preset_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: x\nbase: smoke\n# \xff\n")
    with pytest.raises(ReproError, match="bad.yaml: not UTF-8 text; save the preset file as UTF-8"):
        get_preset(str(path))
