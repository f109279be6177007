"""The grids the notebooks train, built from a preset: the batch sweep (02-05, with 03's recipe
arms), its beta2 ablation (02), the pool-size sweeps (05), the noise-scale runs (05) and the
batch-size schedules (04, 05). A grid is a sweep's spec (repro.store.grid.plan_grid): fixed run
fields, axes, and `when` rules; nothing here trains."""

from __future__ import annotations

from pathlib import Path

from repro.design.presets import Preset, changed
from repro.runtime.config import RunConfig, make_run_config

ORIGINAL_RECIPE = {"loader": "shuffle", "tie_embeddings": False, "embedding_weight_decay": 0.0}
"""Kim et al.'s recipe as tuned for one pass: sequences packed once and reshuffled, untied, no
embedding decay."""


def beta2_at(preset: Preset, batch_size: int) -> float:
    """The AdamW beta2 of `preset`'s runs at `batch_size` sequences per step."""
    return preset.beta2_fields(batch_size).get("adam_beta2", preset.base_beta2())


def beta2_setting(preset: Preset) -> str:
    """`preset`'s AdamW betas in words: the reference betas at every batch, or the
    half-life rule (grid.beta2_half_life_batch)."""
    beta1, beta2 = make_run_config(preset.grid.run_fields).adam_beta1, preset.base_beta2()
    if not preset.grid.beta2_half_life_batch:
        return f"reference betas ({beta1}, {beta2}) at every batch"
    b = preset.grid.beta2_half_life_batch
    return f"half-life rule, beta2 {beta2} ** (B / {b}) at batch B, beta1 {beta1}"


def beta2_ablation(preset: Preset) -> Preset:
    """`preset` with the other AdamW beta2 setting than its batch sweep's (notebook 02's
    ablation): the reference betas where grid.beta2_half_life_batch is set, else beta2 scaled to
    the token half-life it has at schedules.batch (the preset's reference batch)."""
    other = 0 if preset.grid.beta2_half_life_batch else preset.schedules.batch
    return changed(preset, grid={"beta2_half_life_batch": other})


def beta2_ablation_batches(preset: Preset) -> tuple[int, ...]:
    """The batch sizes (sequences) of the beta2 ablation: batch_sweep.beta2_ablation_batch_sizes,
    or the two smallest batch sizes."""
    if preset.batch_sweep.beta2_ablation_batch_sizes:
        return tuple(sorted(preset.batch_sweep.beta2_ablation_batch_sizes))
    return tuple(sorted(preset.grid.batch_sizes)[:2])


def _beta2_axes(preset: Preset, batch_size: int) -> dict:
    """beta2_fields as one-value grid axes (a batch size's `when` rule)."""
    return {name: [value] for name, value in preset.beta2_fields(batch_size).items()}


def batch_sweep_grid(
    preset: Preset,
    pools: list[str | Path],
    batch_sizes: list[int] | None = None,
    models: list[str] | None = None,
    axes: dict | None = None,
    **recipe,
) -> dict:
    """Every model x batch size x (batch-dependent) lr x weight decay x epoch budget, on every
    pool (default: all of the preset's models and batch sizes), over the extra `axes` (recipe
    arms, notebook 03): every arm is tuned over the same grid."""
    batch_sizes = list(batch_sizes or preset.grid.batch_sizes)
    models = list(models or preset.grid.models)
    rules = [
        {"if": {"batch_size": b}, "axes": {"lr": list(preset.grid.lrs[b])} | _beta2_axes(preset, b)}
        for b in batch_sizes
    ]
    if preset.execution.gpus_per_run:  # lr per batch size and GPUs per model
        rules = [
            {
                "if": {"batch_size": b, "model": m},
                "axes": {
                    "lr": list(preset.grid.lrs[b]),
                    "gpus": [preset.execution.gpus_per_run.get(m, 1)],
                }
                | _beta2_axes(preset, b),
            }
            for b in batch_sizes
            for m in models
        ]
    branches = {"wsd_branches": True} if preset.grid.wsd_branches else {}
    return branches | {
        "fixed": preset.run_fields(
            **(ORIGINAL_RECIPE | {"eval_spacing": preset.grid.eval_spacing} | recipe)
        ),
        "axes": {
            "pool": [str(p) for p in pools],
            "model": models,
            "batch_size": batch_sizes,
            "lr": list(preset.grid.lrs[batch_sizes[0]]),
            "weight_decay": list(preset.grid.weight_decays),
            "epochs": list(preset.grid.epochs),
        }
        | (axes or {}),
        "when": rules,
    }


def usual_batch_source(preset: Preset) -> str:
    """Where this preset's "usual" (one-pass) batch comes from."""
    if preset.batch_sweep.one_pass_batch_size:
        return f"{preset.batch_sweep.one_pass_batch_size} sequences, as set in the preset"
    return (
        "measured: the batch with the lowest tuned loss at an epoch budget of 1, on the other pools"
    )


def scaling_grids(preset: Preset, pools: dict[int, list[str | Path]], **recipe) -> list[dict]:
    """The batch sweep on pools of several sizes (`pools`: training tokens -> the pools of
    that size), at the first model and the first weight decay only (lr and epoch budget still
    tuned): one grid per size, at its scaling_batch_sizes."""
    grids = []
    for tokens, paths in sorted(pools.items()):
        batches = list(preset.scaling_batch_sizes(tokens))
        grid = batch_sweep_grid(preset, paths, batches, models=preset.grid.models[:1], **recipe)
        grid["axes"]["weight_decay"] = [preset.grid.weight_decays[0]]
        grids.append(grid)
    return grids


def noise_scale_grid(preset: Preset, choices: list[dict]) -> list[dict]:
    """Runs that log the gradient noise scale: one per choice (complete run fields, such as
    noise.noise_scale_choices' tuned runs), evaluated 4x per epoch, with the preset's noise
    micro-batch."""
    noise = {
        "noise_scale": True,
        "micro_batch": preset.critical_batch.noise_micro_batch,
        "eval_every": 0.25,
        "eval_spacing": "even",
    }
    return [{"fixed": choice | noise, "axes": {}} for choice in choices]


def schedule_grid(
    preset: Preset, pools: list[str | Path], epochs: int, weight_decay: float, **recipe
) -> dict:
    """Every batch-size schedule with the lr grid of `schedules.batch` (the reference batch) on
    every pool, at one epoch budget and weight decay (the notebooks pass the best fixed
    batch's). With
    wsd_branches, the fixed batches at a shorter budget warm up over their trunk's first steps,
    so the schedules warm up over the same fraction of the largest budget."""
    fields = preset.run_fields(model=preset.grid.models[0], **recipe)
    if preset.grid.wsd_branches and epochs != max(preset.grid.epochs):
        warmup = fields.get("warmup", RunConfig.warmup)
        fields["warmup"] = warmup * max(preset.grid.epochs) / epochs
    return {
        "fixed": fields
        | {
            "model": preset.grid.models[0],
            "batch_size": preset.schedules.batch,
            "weight_decay": weight_decay,
            "epochs": epochs,
        }
        | preset.beta2_fields(preset.schedules.batch),
        "axes": {
            "pool": [str(p) for p in pools],
            "batch_schedule": list(preset.schedules.texts().values()),
            "lr": list(preset.grid.lrs[preset.schedules.batch]),
        },
    }


def fresh_grids(preset: Preset, pools: dict[float, list[str | Path]], **recipe) -> list[dict]:
    """Notebook 06's fresh-data runs: one epoch on each pool of `pools` (fresh multiple of the
    pool -> those pools, one per pool seed), every batch that the pool holds, the lr grid, the first
    model and weight decay. With wsd_branches, a fresh run of m >= 1 pools warms up over the tokens
    that the trunks of the repeated runs warm up over, and a smaller one over the fraction of its
    epoch that the trunks' one-epoch branch does, so that the fresh and the repeated curves meet
    at one epoch of the pool."""
    cap = max(preset.grid.epochs)
    warmup = preset.run_fields().get("warmup", RunConfig.warmup)
    grids = []
    for multiple, paths in sorted(pools.items()):
        tokens = preset.fresh_pool_tokens()[multiple]
        batches = list(preset.scaling_batch_sizes(tokens))
        grid = batch_sweep_grid(preset, paths, batches, models=preset.grid.models[:1], **recipe)
        grid.pop("wsd_branches", None)
        grid["axes"] |= {"weight_decay": [preset.grid.weight_decays[0]], "epochs": [1]}
        if preset.grid.wsd_branches:
            grid["fixed"]["warmup"] = warmup * cap / max(multiple, 1.0)
        grids.append(grid)
    return grids


def ensemble_grid(fields: dict, pools: list[str | Path], members: int) -> dict:
    """Notebook 06's ensemble members: the run `fields` (a tuned configuration,
    confirmation.recipe) with `members` seeds from its own, on every pool of `pools`, each keeping
    its validation tokens' losses (run field token_losses)."""
    seeds = [fields.get("seed", RunConfig.seed) + k for k in range(members)]
    return {
        "fixed": fields | {"token_losses": True},
        "axes": {"pool": [str(p) for p in pools], "seed": seeds},
    }
