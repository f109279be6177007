"""A dry run: a preset with every one of its runs kept but shrunk to CPU-seconds, so that a GPU
preset's whole plan and every notebook can be checked end to end on a laptop (`repro reproduce
--preset P --dry-run`)."""

from __future__ import annotations

import math
from dataclasses import replace

from repro.data.build import PoolSpec
from repro.design.presets import Preset
from repro.design.sections import CriticalBatch, Grid, Schedules
from repro.errors import ReproError
from repro.runtime.shapes import model_config, parameter_count

DRY_RUN = "-dry-run"  # the name (runs/, figures/) of a preset shrunk to a CPU (dry_run_preset)
CPU_SIZES = ("nano", "tiny", "cpu-xs", "cpu-s", "cpu-m", "cpu-l")  # smallest first
DRY_CONFIRMATION_POOLS = 2  # confirmation pools a dry run keeps: the path, not the power


def dry_run_preset(preset: Preset) -> Preset:
    """`preset` with every run kept (models, batch sizes, lr and weight-decay grids, epoch budgets,
    ablations, schedules, noise-scale and pool-size runs) but shrunk to CPU-seconds: models become
    the CPU sizes of the same rank by parameters, batches (grid.beta2_half_life_batch too) and epoch
    budgets their ranks (1, 2, ...; micro-batches of 1 where the preset has micro-batches),
    sequences 16 tokens, pools of exactly two largest batches (the smallest pool-size or fresh pool
    at least one, so it trains every batch size), the first DRY_CONFIRMATION_POOLS confirmation
    pools (and ensemble pools), an evaluation per epoch, a Llama-3-sized vocab's uint32 token
    storage kept, float32 on the CPU without torch.compile, one process per run."""
    grid, recipe = preset.grid, preset.pools.recipe
    if len(grid.models) > len(CPU_SIZES):
        raise ReproError(f"preset {preset.name}: a dry run maps at most {len(CPU_SIZES)} models")
    ramps = preset.schedules.ramps
    half_life = [grid.beta2_half_life_batch] if grid.beta2_half_life_batch else []
    scheduled = [b for phases in ramps.values() for _, b in phases]
    batch = _ranks([*grid.lrs, preset.schedules.batch, *scheduled, *half_life])
    largest = max(batch.values()) * 17  # tokens of one batch of 16-token sequences (+1 target)
    smallest = min(preset.critical_batch.pool_tokens, default=recipe.tokens) / recipe.tokens
    share = min(smallest, *preset.repetition.fresh_multiples, 1.0)  # of the pool's tokens
    tokens = max(2 * largest, math.ceil(largest / share))  # every pool holds a largest batch
    large_vocab = recipe.tokenizer is not None or recipe.vocab_size > 65_535
    dtype = "uint32" if large_vocab else "auto"
    dry_recipe = PoolSpec(
        "synthetic", tokens, 1_000, vocab_size=300, dtype=dtype, exact_tokens=True
    )
    return replace(
        preset,
        name=preset.name + DRY_RUN,
        pools=replace(
            preset.pools,
            recipe=dry_recipe,
            confirmation_seeds=preset.pools.confirmation_seeds[:DRY_CONFIRMATION_POOLS],
        ),
        grid=_dry_grid(grid, batch),
        execution=replace(
            preset.execution,
            workers=2,
            stack=8,
            micro_batch=min(preset.execution.micro_batch, 1),
            gpus_per_run={},
        ),
        batch_sweep=_ranked(
            preset.batch_sweep, batch, "one_pass_batch_size", "beta2_ablation_batch_sizes"
        ),
        ablations=_ranked(preset.ablations, batch, "batch_sizes", "tying_batch_size"),
        frontier=replace(preset.frontier, micro_batch=1),
        schedules=Schedules(
            {name: tuple((at, batch[b]) for at, b in phases) for name, phases in ramps.items()},
            batch[preset.schedules.batch],
        ),
        repetition=replace(
            preset.repetition,
            ensemble_pools=min(preset.repetition.ensemble_pools, DRY_CONFIRMATION_POOLS),
        ),
        critical_batch=CriticalBatch(
            tuple(tokens * t // recipe.tokens for t in preset.critical_batch.pool_tokens),
            tuple(batch[b] for b in preset.critical_batch.noise_scale_batches),
            noise_micro_batch=1,
        ),
    )


def _dry_grid(grid: Grid, batch: dict[int, int]) -> Grid:
    """dry_run_preset's grid: models, batches and epoch budgets by rank, 16-token sequences."""
    by_size = sorted(grid.models, key=lambda m: parameter_count(model_config(m, 512)))
    epochs = _ranks(list(grid.epochs))
    return Grid(
        models=tuple(CPU_SIZES[by_size.index(m)] for m in grid.models),
        seq_len=16,
        batch_sizes=tuple(batch[b] for b in grid.batch_sizes),
        lrs={batch[b]: lrs for b, lrs in grid.lrs.items()},
        weight_decays=grid.weight_decays,
        epochs=tuple(epochs[e] for e in grid.epochs),
        wsd_branches=grid.wsd_branches,
        eval_every=1.0,  # the fewest evaluations a run may have: they cost more than its steps
        eval_spacing="log",
        beta2_half_life_batch=batch.get(grid.beta2_half_life_batch, 0),
        run_fields={"device": "cpu"},
        downstream_tasks=("pool_continuation",) if grid.downstream_tasks else (),
    )


def _ranked(section, batch: dict[int, int], *names: str):
    """`section` with its batch-size fields `names` (a batch or a tuple of them; 0 stays 0)
    mapped by `batch`."""
    changes = {}
    for name in names:
        value = getattr(section, name)
        ranked = tuple(batch[b] for b in value) if isinstance(value, tuple) else batch.get(value, 0)
        changes[name] = ranked
    return replace(section, **changes)


def _ranks(values) -> dict[int, int]:
    """Each distinct value -> its rank, 1 for the smallest."""
    return {v: i + 1 for i, v in enumerate(sorted(set(values)))}
