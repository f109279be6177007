"""A scale of the study: the Preset type. The built-in presets (smoke for CI, cpu for a laptop,
cpu-regime for the paper's ratios on a laptop, gpu-small for one GPU, gpu for paper scale) are YAML
files in repro/builtin_presets/, read like users' preset files (repro.preset_files); the grids the
notebooks train are built from a preset by repro.grids, its regime report by repro.regime.

A preset fixes the pools, model sizes, sequence length, batch sizes, the lr / weight-decay grids,
the epoch budgets and the recipe ablations; nothing here trains.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from repro.data.build import PoolSpec, check_spec
from repro.errors import ReproError
from repro.runtime.config import check_fields, make_run_config
from repro.runtime.loaders import LOADERS
from repro.runtime.schedules import beta2_for_batch


@dataclass(frozen=True)
class Preset:
    """One scale of the study. Units: tokens for pools and seq_len, sequences for batch sizes,
    epochs for the budget and eval_every. A preset YAML file sets any field
    (preset_files.load_preset)."""

    name: str  # runs go to runs/<name>/, figures to figures/<name>/
    pool_spec: PoolSpec  # the pools' recipe: each of pool_seeds draws one, same validation set
    pool_seeds: tuple[int, ...]
    models: tuple[str, ...]  # sizes of repro.runtime.shapes.SIZES
    seq_len: int  # tokens
    batch_sizes: tuple[int, ...]  # sequences per optimizer step
    lrs: dict[int, tuple[float, ...]]  # lr grid per batch size
    weight_decays: tuple[float, ...]
    # epoch budgets, a tuned axis like lr: each budget is its own run whose schedule ends there
    # (cosine to 0), or with wsd_branches a WSD cool-down (the last 20% of its steps, linear to 0)
    # branched from one run of the largest budget: the cheap equivalent (sweep.plan_grid)
    epochs: tuple[int, ...]
    wsd_branches: bool = False
    eval_every: float = 0.5  # epochs (the within-run curve; the tuned point is each run's end)
    # notebook 03: the epoch orderings and the combined recipe at these batch sizes (sequences)
    ablation_batch_sizes: tuple[int, ...] = (4, 32)
    # 03's tying x embedding decay grid: at this batch (sequences; 0: the batch notebook 02 found
    # best), with this loader ("repack": its untied-no-decay and tied-with-decay cells are then
    # the same runs as the REPACK and combined arms at that batch, trained once)
    tying_batch_size: int = 0
    tying_loader: str = "shuffle"
    embedding_weight_decays: tuple[float, ...] = (0.0, 0.1)
    micro_batch: int = 0  # sequences; 0: whole batch
    frontier_micro_batch: int = 4  # notebook 04: sequences one GPU processes per step unit
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)  # notebook 04
    workers: int = 2  # runs in parallel
    # sweeps train up to this many runs of one model shape and batch at once
    # (repro.runtime.stacked), but only runs with batches up to max_stacked_batch
    # (sequences; 0: all)
    stack: int = 1
    max_stacked_batch: int = 0
    # "the usual batch": the batch a one-pass recipe uses at this scale (Kim et al.: 64 at paper
    # scale); 0: measured, as the batch with the lowest tuned loss at an epoch budget of 1
    one_pass_batch_size: int = 0
    extra: dict = field(default_factory=dict)  # run fields added to every run (device, compile)
    # notebook 05 (critical batch size): smaller pools (training tokens) for CBS vs data size, one
    # set per pool seed; the batch sizes whose runs log the gradient noise scale (on every pool,
    # each at its tuned lr, weight decay and epoch budget) and their micro-batch (the estimator's
    # small batch, sequences)
    scaling_pool_tokens: tuple[int, ...] = ()
    noise_scale_batches: tuple[int, ...] = ()
    noise_micro_batch: int = 2
    # notebooks 04, 05: name -> batch_schedule, run with the lr grid of schedule_batch
    # (lr * sqrt(B / schedule_batch) as B changes)
    batch_schedules: dict[str, str] = field(default_factory=dict)
    schedule_batch: int = 8
    # model -> processes (GPUs) each of its runs trains on with DDP (run field gpus; default 1)
    gpus_per_run: dict[str, int] = field(default_factory=dict)
    # lm-eval tasks scored at the tuned endpoints of notebooks 02 and 03 (repro eval);
    # pool_continuation: a local task from pool 0's validation documents (repro.downstream)
    downstream_tasks: tuple[str, ...] = ()
    # rounds of grid growth after each tuned sweep (repro.growth): a group whose lr or weight
    # decay is not bracketed around its choice gets the missing neighbours each round; 0: fixed
    grid_growth: int = 0
    # with grid_growth, a group whose best epoch budget is the largest it tried also gets a run
    # of twice that budget each round (a longer trunk with wsd_branches)
    grow_epochs: bool = False
    # beta2 scaled with the batch: the batch (sequences) at which the preset's beta2 (extra's
    # adam_beta2, else the run default) holds; a run of batch B gets beta2 ** (B / this batch),
    # the same token half-life of its second-moment average (Marek et al. 2025), rounded to
    # BETA2_DIGITS significant digits of 1 - beta2 (a batch schedule: schedule_batch's beta2);
    # 0: the same betas at every batch
    beta2_half_life_batch: int = 0
    # notebook 02: batches (sequences, of batch_sizes) that also run with the other beta2 setting
    # than the batch sweep's (grids.beta2_ablation); (): the two smallest batch sizes
    beta2_ablation_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        """One-line errors for a preset that could not run, before anything is built or trained."""
        where = f"preset {self.name}"
        listed = [k for k, v in self.extra.items() if not isinstance(v, bool | int | float | str)]
        if listed:  # a list or mapping (maybe a YAML alias bomb) is never a run field's value
            raise ReproError(
                f"{where}: extra: {listed[0]} must be one value, not a list or mapping"
            )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise ReproError(f"{where}: name must be letters, digits, '.', '_' or '-' (a folder)")
        for name in (
            "pool_seeds",
            "models",
            "batch_sizes",
            "weight_decays",
            "epochs",
            "ablation_batch_sizes",
        ):
            if not getattr(self, name):
                raise ReproError(f"{where}: {name} is empty; give at least one value")
        counts = {
            "batch_sizes": self.batch_sizes,
            "epochs": self.epochs,
            "noise_scale_batches": self.noise_scale_batches,
            "ablation_batch_sizes": self.ablation_batch_sizes,
        }
        for name, values in counts.items():
            if min(values, default=1) < 1:
                raise ReproError(f"{where}: {name} must be >= 1, got {min(values)}")
        if not self.one_pass_batch_size and 1 not in self.epochs:
            raise ReproError(
                f"{where}: one_pass_batch_size 0 measures the usual batch at a budget of 1 epoch; "
                "add 1 to epochs or give one_pass_batch_size"
            )
        if len(set(self.pool_seeds)) < len(self.pool_seeds):
            raise ReproError(f"{where}: pool_seeds repeat a seed; independent pools need distinct")
        needs_lrs = set(self.batch_sizes)
        needs_lrs |= {self.schedule_batch} if self.batch_schedules else set()
        missing = sorted(needs_lrs - set(self.lrs))
        if missing:
            raise ReproError(f"{where}: no lr grid for batch size {missing[0]}; add it under lrs")
        decays = self.embedding_weight_decays
        if 0.0 not in decays or not any(w > 0 for w in decays):
            raise ReproError(f"{where}: embedding_weight_decays needs 0.0 and a positive value")
        outside = sorted(set(self.ablation_batch_sizes) - set(self.batch_sizes))
        if outside:
            raise ReproError(f"{where}: ablation batch size {outside[0]} is not one of batch_sizes")
        if self.tying_batch_size and self.tying_batch_size not in self.batch_sizes:
            raise ReproError(
                f"{where}: tying_batch_size {self.tying_batch_size} is not one of batch_sizes "
                "(0: the batch notebook 02 finds best)"
            )
        if self.tying_loader not in LOADERS:
            raise ReproError(
                f"{where}: unknown tying_loader {self.tying_loader!r}; choose one of: "
                + ", ".join(LOADERS)
            )
        outside = sorted(set(self.noise_scale_batches) - set(self.batch_sizes))
        if outside:
            raise ReproError(
                f"{where}: noise-scale batch size {outside[0]} is not one of batch_sizes (its "
                "runs take the batch's tuned lr, weight decay and epoch budget)"
            )
        unknown = sorted(set(self.gpus_per_run) - set(self.models))
        if unknown or min(self.gpus_per_run.values(), default=1) < 1:
            raise ReproError(f"{where}: gpus_per_run needs models of this preset and values >= 1")
        if min(self.gpu_counts, default=1) < 1 or self.frontier_micro_batch < 1 or self.workers < 1:
            raise ReproError(f"{where}: gpu_counts, frontier_micro_batch and workers must be >= 1")
        if self.grid_growth < 0:
            raise ReproError(f"{where}: grid_growth must be >= 0 (rounds; 0 keeps the grids fixed)")
        if self.grow_epochs and not self.grid_growth:
            raise ReproError(f"{where}: grow_epochs needs grid_growth rounds (set grid_growth: 1)")
        if self.beta2_half_life_batch < 0:
            raise ReproError(
                f"{where}: beta2_half_life_batch must be >= 0 (sequences; 0 keeps beta2 fixed)"
            )
        ablated = self.beta2_ablation_batch_sizes
        outside = sorted(set(ablated) - set(self.batch_sizes))
        if outside:
            raise ReproError(
                f"{where}: beta2 ablation batch size {outside[0]} is not one of batch_sizes"
            )
        if len(set(ablated)) < len(ablated):
            raise ReproError(f"{where}: beta2_ablation_batch_sizes repeats a batch size")
        try:
            check_spec(self.pool_spec)
            self._check_runs()
        except ReproError as exc:
            raise ReproError(f"{where}: {exc}") from None
        if min(self.scaling_pool_tokens, default=1) < 1:
            raise ReproError(f"{where}: scaling_pool_tokens must be positive")
        smallest = min(self.scaling_pool_tokens, default=0)
        if smallest and len(self.scaling_batch_sizes(smallest)) < 2:
            raise ReproError(
                f"{where}: the smallest scaling pool ({smallest} tokens) holds a batch of fewer "
                f"than 2 of the batch sizes (sequences of {self.seq_len + 1} tokens); make it "
                "larger"
            )
        too_large = [t for t in self.scaling_pool_tokens if t >= self.pool_spec.tokens]
        if too_large:
            raise ReproError(
                f"{where}: scaling pool of {too_large[0]} tokens is not smaller than the pool"
            )

    def _check_runs(self) -> None:
        """Every run the notebooks derive from this preset passes the trainer's field checks."""
        recipes = [
            {"embedding_weight_decay": w, "tie_embeddings": tie}
            for w in self.embedding_weight_decays
            for tie in (False, True)
        ]
        runs = [
            self.run_fields(model=m, batch_size=b, lr=lr, weight_decay=wd)
            | self.beta2_fields(b)
            | recipe
            for m in self.models
            for b in self.batch_sizes
            for lr in self.lrs[b]
            for wd in self.weight_decays
            for recipe in recipes[:1]
        ]
        runs += [runs[0] | recipe for recipe in recipes]
        runs += [runs[0] | {"epochs": epochs} for epochs in self.epochs]
        runs += [
            self.run_fields(model=self.models[0], batch_size=b, lr=self.lrs[b][0])
            | self.beta2_fields(b)
            | {"noise_scale": True, "micro_batch": self.noise_micro_batch}
            for b in self.noise_scale_batches
        ]
        runs += [
            self.run_fields(model=self.models[0], batch_size=self.schedule_batch)
            | self.beta2_fields(self.schedule_batch)
            | {"lr": self.lrs[self.schedule_batch][0], "batch_schedule": schedule}
            for schedule in self.batch_schedules.values()
        ]
        for run in runs:
            check_fields(make_run_config(run))

    def pool_dir(self, data_dir: str | Path, seed: int) -> Path:
        """data_dir/<name>-<source>-seed<seed>, the source's characters other than letters, digits,
        '.', '_' and '-' as '_'; a local source by its file name only, so the folder does not
        depend on where the checkout lives."""
        source = self.pool_spec.source
        if not source.startswith("hf:") and os.path.isabs(source):
            source = Path(source).name
        return Path(data_dir) / f"{self.name}-{re.sub(r'[^A-Za-z0-9._-]', '_', source)}-seed{seed}"

    def seeded_pool_spec(self, seed: int, tokenizer: str | None) -> PoolSpec:
        """Pool `seed`: training documents drawn with `seed`, validation documents and tokenizer
        shared."""
        return replace(
            self.pool_spec,
            seed=seed,
            val_seed=self.pool_seeds[0],
            tokenizer=tokenizer or self.pool_spec.tokenizer,
        )

    def sized_pool_dir(self, data_dir: str | Path, seed: int, tokens: int) -> Path:
        """Pool `seed` cut to `tokens` training tokens (notebook 05's CBS vs data size)."""
        return Path(str(self.pool_dir(data_dir, seed)) + f"-{tokens}tok")

    def run_fields(self, **changes) -> dict:
        """The fields every run of this preset shares, with `changes`; a run of a model in
        gpus_per_run gets its GPUs."""
        gpus = self.gpus_per_run.get(changes.get("model", ""), 1)
        base = {
            "seq_len": self.seq_len,
            "epochs": max(self.epochs),
            "eval_every": self.eval_every,
            "micro_batch": self.micro_batch,
        }
        if self.wsd_branches:
            base["schedule"] = "wsd"
        return base | ({"gpus": gpus} if gpus > 1 else {}) | self.extra | changes

    def beta2_fields(self, batch_size: int) -> dict:
        """{"adam_beta2": beta2} for a run of `batch_size` sequences per step under
        beta2_half_life_batch, rounded to BETA2_DIGITS significant digits of 1 - beta2 (at the
        reference batch too: 0.95 stays 0.95); {} with fixed betas, or with a beta2 outside [0, 1)
        (which the runs' checks report)."""
        if not self.beta2_half_life_batch:
            return {}
        beta2 = self.base_beta2()
        if not 0 <= beta2 < 1:
            return {}
        tokens = (self.beta2_half_life_batch * self.seq_len, batch_size * self.seq_len)
        scaled = beta2_for_batch(beta2, *tokens)
        digits = BETA2_DIGITS - 1 - math.floor(math.log10(1 - scaled))
        return {"adam_beta2": round(scaled, digits)}

    def base_beta2(self) -> float:
        """The AdamW beta2 of this preset's runs (at beta2_half_life_batch, if set)."""
        return make_run_config(self.extra).adam_beta2

    def scaling_batch_sizes(self, pool_tokens: int) -> tuple[int, ...]:
        """The batch sizes (sequences) the pool-size runs train on a pool of `pool_tokens` training
        tokens: those of which it holds at least one batch (sequences of seq_len + 1 tokens), so
        that every run takes a step each epoch."""
        return tuple(b for b in self.batch_sizes if b * (self.seq_len + 1) <= pool_tokens)


BETA2_DIGITS = 3
"""Significant digits of 1 - beta2 that beta2_half_life_batch keeps (0.993608 -> 0.99361)."""
