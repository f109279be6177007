"""A scale of the study: the Preset type, its sections (repro.design.sections: the pools, the
tuned grid, execution, growth, and one per notebook) and what spans them. The built-in presets
(smoke for CI, cpu for a laptop, cpu-regime for the paper's ratios on a laptop, gpu-small for one
GPU, gpu for paper scale) are YAML files in repro/design/builtin_presets/, read like users' preset
files (repro.design.preset_files); the grids the notebooks train are built from a preset by
repro.design.grids, its regime report by repro.design.regime. Nothing here trains.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from repro.data.build import PoolSpec
from repro.design.sections import (
    Ablations,
    BatchSweep,
    CriticalBatch,
    Execution,
    Frontier,
    Grid,
    Growth,
    Pools,
    Repetition,
    Schedules,
)
from repro.errors import ReproError
from repro.runtime.config import check_fields, make_run_config
from repro.runtime.schedules import beta2_for_batch
from repro.typed_fields import load_dataclass


@dataclass(frozen=True)
class Preset:
    """One scale of the study (module docstring); a preset YAML file sets any field of any section
    (preset_files.load_preset)."""

    name: str  # runs go to runs/<name>/, figures to figures/<name>/
    pools: Pools
    grid: Grid
    execution: Execution = Execution()
    growth: Growth = Growth()
    batch_sweep: BatchSweep = BatchSweep()
    ablations: Ablations = Ablations()
    frontier: Frontier = Frontier()
    schedules: Schedules = Schedules()
    critical_batch: CriticalBatch = CriticalBatch()
    repetition: Repetition = Repetition()

    def __post_init__(self) -> None:
        """One-line errors for a preset that could not run, before anything is built or trained."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise ReproError(
                f"preset {self.name}: name must be letters, digits, '.', '_' or '-' (a folder)"
            )
        try:
            self._check_batches()
            self._check_runs()
        except ReproError as exc:
            raise ReproError(f"preset {self.name}: {exc}") from None

    def _check_batches(self) -> None:
        """The sections' batch sizes and models are the grid's."""
        grid, batches = self.grid, set(self.grid.batch_sizes)
        named = {
            "ablations.batch_sizes": self.ablations.batch_sizes,
            "ablations.tying_batch_size": (self.ablations.tying_batch_size or min(batches),),
            "batch_sweep.beta2_ablation_batch_sizes": self.batch_sweep.beta2_ablation_batch_sizes,
            "critical_batch.noise_scale_batches": self.critical_batch.noise_scale_batches,
        }
        for name, values in named.items():
            outside = sorted(set(values) - batches)
            if outside:
                raise ReproError(f"{name}: batch size {outside[0]} is not one of grid.batch_sizes")
        if self.schedules.ramps and self.schedules.batch not in grid.lrs:
            raise ReproError(f"grid: no lr grid for schedules.batch {self.schedules.batch}")
        if not self.batch_sweep.one_pass_batch_size and 1 not in grid.epochs:
            raise ReproError(
                "batch_sweep.one_pass_batch_size 0 measures the usual batch at a budget of 1 "
                "epoch; add 1 to grid.epochs or give one_pass_batch_size"
            )
        if set(self.execution.gpus_per_run) - set(grid.models):
            raise ReproError("execution.gpus_per_run names a model that is not in grid.models")
        too_large = [t for t in self.critical_batch.pool_tokens if t >= self.pools.recipe.tokens]
        if too_large:
            raise ReproError(f"critical_batch: pool of {too_large[0]} tokens is not smaller")
        if self.repetition.ensemble_pools > len(self.pools.confirmation_seeds):
            raise ReproError(
                f"repetition.ensemble_pools ({self.repetition.ensemble_pools}) is more than the "
                f"{len(self.pools.confirmation_seeds)} pools.confirmation_seeds"
            )
        smallest = min(self.critical_batch.pool_tokens, default=0)
        if smallest and len(self.scaling_batch_sizes(smallest)) < 2:
            raise ReproError(
                f"critical_batch: the smallest pool ({smallest} tokens) holds a batch of fewer "
                f"than 2 of the batch sizes (sequences of {grid.seq_len + 1} tokens); make it "
                "larger"
            )

    def _check_runs(self) -> None:
        """Every kind of run the notebooks derive from this preset passes the trainer's checks."""
        grid, first = self.grid, self.grid.models[0]
        runs = [
            self.run_fields(model=m, batch_size=b, lr=lr, weight_decay=wd) | self.beta2_fields(b)
            for m in grid.models
            for b in grid.batch_sizes
            for lr in grid.lrs[b]
            for wd in grid.weight_decays
        ]
        runs += [
            runs[0] | {"embedding_weight_decay": w, "tie_embeddings": tie}
            for w in self.ablations.embedding_weight_decays
            for tie in (False, True)
        ]
        runs += [runs[0] | {"epochs": epochs} for epochs in grid.epochs]
        runs += [
            self.run_fields(model=first, batch_size=b, lr=grid.lrs[b][0])
            | self.beta2_fields(b)
            | {"noise_scale": True, "micro_batch": self.critical_batch.noise_micro_batch}
            for b in self.critical_batch.noise_scale_batches
        ]
        batch = self.schedules.batch
        runs += [
            self.run_fields(model=first, batch_size=batch, lr=grid.lrs[batch][0])
            | self.beta2_fields(batch)
            | {"batch_schedule": phases}
            for phases in self.schedules.ramps.values()
        ]
        for run in runs:
            check_fields(make_run_config(run))

    def pool_dir(self, data_dir: str | Path, seed: int) -> Path:
        """data_dir/<name>-<source>-seed<seed>, the source's characters other than letters, digits,
        '.', '_' and '-' as '_'; a local source by its file name only, so the folder does not
        depend on where the checkout lives."""
        source = self.pools.recipe.source
        if not source.startswith("hf:") and os.path.isabs(source):
            source = Path(source).name
        return Path(data_dir) / f"{self.name}-{re.sub(r'[^A-Za-z0-9._-]', '_', source)}-seed{seed}"

    def seeded_pool_spec(self, seed: int, tokenizer: str | None) -> PoolSpec:
        """Pool `seed`: training documents drawn with `seed`, validation documents and tokenizer
        shared."""
        recipe = self.pools.recipe
        shared = tokenizer or recipe.tokenizer
        return replace(recipe, seed=seed, val_seed=self.pools.seeds[0], tokenizer=shared)

    def confirmation_pool_dir(self, data_dir: str | Path, seed: int) -> Path:
        """Confirmation pool `seed` (pools.confirmation_seeds): its own validation documents."""
        return Path(str(self.pool_dir(data_dir, seed)) + "-confirmation")

    def confirmation_pool_spec(self, seed: int, tokenizer: str | None) -> PoolSpec:
        """Confirmation pool `seed`: training and validation documents drawn with `seed`, the
        tokenizer shared."""
        return replace(self.seeded_pool_spec(seed, tokenizer), val_seed=seed)

    def sized_pool_dir(self, data_dir: str | Path, seed: int, tokens: int) -> Path:
        """Pool `seed` cut to `tokens` training tokens (notebook 05's CBS vs data size)."""
        return Path(str(self.pool_dir(data_dir, seed)) + f"-{tokens}tok")

    def fresh_pool_tokens(self) -> dict[float, int]:
        """repetition.fresh_multiples -> the training tokens of those fresh pools."""
        return {m: round(m * self.pools.recipe.tokens) for m in self.repetition.fresh_multiples}

    def run_fields(self, **changes) -> dict:
        """The fields every run of this preset shares, with `changes`; a run of a model in
        execution.gpus_per_run gets its GPUs."""
        gpus = self.execution.gpus_per_run.get(changes.get("model", ""), 1)
        base = {
            "seq_len": self.grid.seq_len,
            "epochs": max(self.grid.epochs),
            "eval_every": self.grid.eval_every,
            "micro_batch": self.execution.micro_batch,
        }
        if self.grid.wsd_branches:
            base["schedule"] = "wsd"
        return base | ({"gpus": gpus} if gpus > 1 else {}) | self.grid.run_fields | changes

    def beta2_fields(self, batch_size: int) -> dict:
        """{"adam_beta2": beta2} for a run of `batch_size` sequences per step under
        grid.beta2_half_life_batch, rounded to BETA2_DIGITS significant digits of 1 - beta2 (at
        the reference batch too: 0.95 stays 0.95); {} with fixed betas, or with a beta2 outside
        [0, 1) (which the runs' checks report)."""
        half_life_batch, beta2 = self.grid.beta2_half_life_batch, self.base_beta2()
        if not half_life_batch or not 0 <= beta2 < 1:
            return {}
        seq = self.grid.seq_len
        scaled = beta2_for_batch(beta2, half_life_batch * seq, batch_size * seq)
        digits = BETA2_DIGITS - 1 - math.floor(math.log10(1 - scaled))
        return {"adam_beta2": round(scaled, digits)}

    def base_beta2(self) -> float:
        """The AdamW beta2 of this preset's runs (at grid.beta2_half_life_batch, if set)."""
        return make_run_config(self.grid.run_fields).adam_beta2

    def scaling_batch_sizes(self, pool_tokens: int) -> tuple[int, ...]:
        """The batch sizes (sequences) the pool-size runs train on a pool of `pool_tokens` training
        tokens: those of which it holds at least one batch (sequences of seq_len + 1 tokens), so
        that every run takes a step each epoch."""
        seq = self.grid.seq_len
        return tuple(b for b in self.grid.batch_sizes if b * (seq + 1) <= pool_tokens)


BETA2_DIGITS = 3
"""Significant digits of 1 - beta2 that grid.beta2_half_life_batch keeps (0.993608 -> 0.99361)."""


def changed(preset: Preset, **sections: dict) -> Preset:
    """`preset` with fields of its sections changed, as a preset file changes its base
    (`changed(preset, growth={"rounds": 2})`; repro.typed_fields)."""
    return load_dataclass(Preset, sections, "", preset)


POOL_NAME = re.compile(
    r"-seed(?P<seed>\d+)(?:-(?P<tokens>\d+)tok|(?P<confirmation>-confirmation))?$"
)
"""The end of a pool folder's name as Preset.pool_dir, sized_pool_dir and confirmation_pool_dir
write it."""


def pool_label(pool: str | Path) -> str:
    """A pool as tables and figures name it: "pool 0", "pool 0 (4,000 tokens)", "confirmation pool
    100" from the folder names the Preset gives; any other folder by its name."""
    name = Path(pool).name
    match = POOL_NAME.search(name)
    if match is None:
        return name
    if match["confirmation"]:
        return f"confirmation pool {match['seed']}"
    sized = f" ({int(match['tokens']):,} tokens)" if match["tokens"] else ""
    return f"pool {match['seed']}{sized}"


def check_installed(preset: Preset) -> None:
    """Raise a one-line ReproError, before any work, where the preset needs a package that is not
    installed: lm-eval for grid.downstream_tasks (repro.store.downstream)."""
    if preset.grid.downstream_tasks and importlib.util.find_spec("lm_eval") is None:
        raise ReproError(
            f"preset {preset.name} scores lm-eval tasks (grid.downstream_tasks: "
            f"{', '.join(preset.grid.downstream_tasks)}) but lm-eval is not installed; "
            'pip install -e ".[eval]", or set grid.downstream_tasks: [] in a preset file'
        )
