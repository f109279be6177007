"""Grids: a sweep's spec, its points (expand) and its planned runs (plan_grid), with each run's
estimated cost (what a sweep orders its jobs by and its progress bar counts). Sweeps train them
into a run store: repro.store.sweep.

A grid (YAML or dict):

    fixed:   {pool: data/pools/stdlib-1m, model: cpu-s, epochs: 8}
    axes:    {batch_size: [4, 16, 64], lr: [1e-3, 3e-3, 1e-2], weight_decay: [0.0, 0.1]}
    when:    # optional conditional axes: the first rule whose `if` matches replaces those axes
      - {if: {batch_size: 64}, axes: {lr: [3e-3, 1e-2, 3e-2]}}
    wsd_branches: false   # see below

Every point is a RunConfig; its identity is a hash of the resolved config (run_id).

WSD branches (`wsd_branches: true`, with `schedule: wsd` and an `epochs` axis): runs that differ
only in `epochs` share one stable phase. The longest one is the trunk and keeps checkpoints at the
decay starts of the others; each shorter run continues from its checkpoint and trains only its
decay, giving exactly the run it replaces (tested) at a fraction of the cost.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from repro.data.pool import built_meta, packed_sequences
from repro.errors import ReproError
from repro.runtime.config import RunConfig, check_fields, make_run_config, run_id
from repro.runtime.loaders import epoch_steps
from repro.runtime.run_dir import RunDir, step_of
from repro.runtime.schedules import decay_start_step


@dataclass(frozen=True)
class PlannedRun:
    config: RunConfig
    run_id: str
    after: str | None = None  # run_id of the WSD trunk this branch continues from


def load_grid(grid: str | Path | dict) -> dict:
    if isinstance(grid, dict):
        return grid
    try:
        spec = yaml.safe_load(Path(grid).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ReproError(f"cannot read grid {grid}: {str(exc).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise ReproError(f"grid {grid} must be a mapping with keys fixed, axes, when, wsd_branches")
    return spec


def _check_grid(grid: dict) -> None:
    unknown = set(grid) - {"fixed", "axes", "when", "wsd_branches"}
    if unknown:
        raise ReproError(
            f"unknown grid key {sorted(unknown)[0]!r}; a grid has fixed, axes, when, wsd_branches"
        )
    if not isinstance(grid.get("fixed", {}), dict) or not isinstance(grid.get("axes", {}), dict):
        raise ReproError("grid 'fixed' and 'axes' must be mappings of run fields")
    rules = grid.get("when", [])
    if not isinstance(rules, list) or not all(
        isinstance(r, dict)
        and isinstance(r.get("if", {}), dict)
        and isinstance(r.get("axes"), dict)
        for r in rules
    ):
        raise ReproError(
            "grid 'when' must be a list of {if: {field: value}, axes: {field: [values]}} rules"
        )


def expand(grid: dict) -> list[RunConfig]:
    """All points of a grid, in a deterministic order."""
    _check_grid(grid)
    fixed, axes, rules = grid.get("fixed", {}), grid.get("axes", {}), grid.get("when", [])
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ReproError(f"axis {name!r} must be a non-empty list of values")
    ruled = sorted({k for rule in rules for k in rule.get("axes", {})})
    free = [k for k in axes if k not in ruled]
    configs = []
    for combo in itertools.product(*(axes[k] for k in free)):
        point = dict(fixed) | dict(zip(free, combo))
        values = {k: axes.get(k, [point.get(k)]) for k in ruled}
        for rule in rules:
            if all(point.get(k) == v for k, v in rule.get("if", {}).items()):
                values |= rule["axes"]
                break
        for inner in itertools.product(*(values[k] for k in ruled)):
            configs.append(make_run_config(point | dict(zip(ruled, inner))))
    return configs


def plan_grid(grid: dict, store: Path) -> list[PlannedRun]:
    """The runs of a grid; with wsd_branches, shorter WSD runs become branches of the longest (a
    family: runs equal but for epochs), all with the warmup of the longest in steps (warmup_steps,
    or `warmup` of the longest run's steps)."""
    configs = expand(grid)
    for config in configs:  # the trainer's field checks, before anything is recorded
        check_fields(config)
    if not grid.get("wsd_branches"):
        return [PlannedRun(c, run_id(c)) for c in configs]
    families: dict[str, list[RunConfig]] = {}
    for c in configs:
        if c.schedule != "wsd":
            raise ReproError("wsd_branches needs schedule: wsd in every run")
        if c.batch_schedule:
            raise ReproError(
                "wsd_branches does not support batch_schedule "
                "(a branch's steps would not match its trunk's)"
            )
        families.setdefault(run_id(replace(c, epochs=0)), []).append(c)
    planned: list[PlannedRun] = []
    for family in families.values():
        family.sort(key=lambda c: c.epochs)
        sequences = _sequences_per_epoch(family[-1])
        if not family[-1].warmup_steps:  # the family's warmup: `warmup` of its longest run
            warmup = math.ceil(family[-1].warmup * _total_steps(family[-1], sequences))
            family = [replace(c, warmup_steps=warmup) for c in family]
        longest = family[-1]
        starts = {c.epochs: _decay_start(c, _total_steps(c, sequences)) for c in family[:-1]}
        trunk = replace(longest, save_steps=tuple(sorted(set(starts.values()))))
        trunk_id = run_id(trunk)
        planned.append(PlannedRun(trunk, trunk_id))
        for c in family[:-1]:
            branch = replace(
                c, init_from=str(RunDir(store / trunk_id).checkpoint(starts[c.epochs]))
            )
            planned.append(PlannedRun(branch, run_id(branch), after=trunk_id))
    return planned


def _sequences_per_epoch(config: RunConfig) -> int:
    from repro.data.pool import load_pool

    pool = load_pool(config.pool)
    return packed_sequences(pool.train.n_tokens, pool.train.n_docs, config.seq_len)


def _total_steps(config: RunConfig, sequences_per_epoch: int) -> int:
    steps = epoch_steps(sequences_per_epoch, config.epochs, config.batch_size).total_steps
    if not steps:
        raise ReproError(
            f"pool {config.pool} packs into {sequences_per_epoch} sequences of "
            f"{config.seq_len + 1} tokens, less than one batch of {config.batch_size} in "
            f"{config.epochs} epoch(s); use a larger pool or a smaller batch"
        )
    return steps


def _decay_start(config: RunConfig, total_steps: int) -> int:
    return decay_start_step(config.schedule_for(total_steps), total_steps)


def estimated_cost(config: RunConfig) -> float:
    """Relative cost of a run for ordering work and for the progress bar's ETA: sequences it trains
    on plus one per forward/backward pass (a micro-batch; at the cpu scale a pass's fixed overhead
    costs about one sequence); a WSD branch only its steps after its trunk's checkpoint. 0 for a
    pool not built yet."""
    train = (built_meta(config.pool) or {}).get("splits", {}).get("train")
    if not train:
        return 0.0
    run_steps = epoch_steps(
        packed_sequences(train["tokens"], train["docs"], config.seq_len),
        config.epochs,
        config.batch_size,
        config.batch_schedule,
    )
    passes = sum(
        phase.steps * math.ceil(phase.batch / (min(config.micro_batch, phase.batch) or phase.batch))
        for phase in run_steps.phases
    )
    cost = run_steps.sequences_done(run_steps.total_steps) + passes
    if not run_steps.total_steps:  # less than one batch: the trainer's checks say so
        return cost
    return cost * (1 - branch_start(config) / run_steps.total_steps)


def branch_start(config: RunConfig) -> int:
    """The step a WSD branch starts from (init_from is checkpoints/step-<N>.pt: steps 1..N are its
    trunk's); 0 for a run trained from scratch."""
    return step_of(config.init_from) if config.init_from else 0
