"""Scales of the study (PRESETS; `repro preset list`): smoke (CI), cpu (a laptop), cpu-regime (the
paper's ratios on a laptop), gpu-small (one GPU), gpu (paper scale), and users' preset files.

A preset fixes the pools, model sizes, sequence length, batch sizes, the lr / weight-decay grids
(each preset's lr grid moves with a power of the batch: _lr_ladder), the epoch budgets and the
recipe ablations. The notebooks turn a preset into sweeps with the grid builders below; nothing
here trains.
"""

from __future__ import annotations

import glob
import math
import os
import re
import types
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml

from repro.data.build import PoolSpec, check_spec
from repro.errors import ReproError
from repro.paths import project_root
from repro.runtime.schedules import beta2_for_batch
from repro.units import parse_count


@dataclass(frozen=True)
class Preset:
    """One scale of the study. Units: tokens for pools and seq_len, sequences for batch sizes,
    epochs for the budget and eval_every. A preset YAML file overrides any field (load_preset)."""

    name: str  # runs go to runs/<name>/, figures to figures/<name>/
    pool: PoolSpec  # the main pool; seeds below draw independent pools with the same validation set
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
    # notebook 03: loaders at a small and a large batch; tying x embedding decay
    ablation_batch_sizes: tuple[int, int] = (4, 32)
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
    # than the batch sweep's (beta2_ablation); (): the two smallest batch sizes
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
        for name in ("pool_seeds", "models", "batch_sizes", "weight_decays", "epochs"):
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
            check_spec(self.pool)
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
        too_large = [t for t in self.scaling_pool_tokens if t >= self.pool.tokens]
        if too_large:
            raise ReproError(
                f"{where}: scaling pool of {too_large[0]} tokens is not smaller than the pool"
            )

    def _check_runs(self) -> None:
        """Every run the notebooks derive from this preset passes the trainer's field checks."""
        from repro.runtime.config import check_fields, make_run_config

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

    def regime(
        self, vocab_size: int, noise_scale: tuple[float, float] | None = None
    ) -> dict[str, tuple[float, float]]:
        """Where this preset sits against the paper's ratios (PAPER_REGIME), as (min, max) over
        its batch sizes and models: a batch's tokens as a fraction of the pool's training tokens,
        the pool's training tokens per model parameter (untied, at `vocab_size`), epochs, and a
        batch's tokens over the gradient noise scale, from `noise_scale`: the (lowest, highest)
        B_simple in tokens that notebook 05 measured over pools (NaN when not measured)."""
        from repro.runtime.shapes import param_count_table

        params = {row["name"]: row["params"] for row in param_count_table(vocab_size)}
        batch = [b * self.seq_len / self.pool.tokens for b in self.batch_sizes]
        per_param = [self.pool.tokens / params[m] for m in self.models]
        lowest, highest = noise_scale or (math.nan, math.nan)
        tokens = (min(self.batch_sizes) * self.seq_len, max(self.batch_sizes) * self.seq_len)
        return {
            "batch / pool (tokens)": (min(batch), max(batch)),
            "pool tokens per parameter": (min(per_param), max(per_param)),
            "epochs": (float(min(self.epochs)), float(max(self.epochs))),
            NOISE_RATIO: (tokens[0] / highest, tokens[1] / lowest),
        }

    def deviations(self) -> list[str]:
        """How this preset's study differs from Kim et al.'s (docs/REFERENCE_RECIPE.md). Shared
        with it: AdamW (0.9, 0.95), eps 1e-8, clipping at 1.0, cosine to 0 after 1% warmup,
        Levanter's decay mask, untied embeddings, rope theta 10,000."""
        notes = []
        others = [m for m in self.models if m not in ("150m", "300m", "600m", "1.4b", "1.5b")]
        if others:
            notes.append(f"models {', '.join(others)}: not in the reference ladder (150m-1.5b)")
        if self.seq_len != 4096:
            notes.append(f"seq_len {self.seq_len} (reference 4,096)")
        if not self.pool.source.startswith("hf:mlfoundations/dclm"):
            notes.append(
                f"pool: {self.pool.source}, {self.pool.tokens:,} tokens "
                "(reference: DCLM-Baseline, 200M tokens)"
            )
        budgets = ", ".join(map(str, self.epochs))
        if self.wsd_branches:
            notes.append(
                f"epoch budgets {budgets} as WSD cool-downs (the last 20% of each budget's steps, "
                f"linear to 0, warmup 1% of {max(self.epochs)} epochs) branched from one run "
                "(reference: a cosine run per budget, 1 to 64 epochs)"
            )
        else:
            notes.append(
                f"epoch budgets {budgets}, each its own run (reference grid: 1 to 64 epochs)"
            )
        if self.extra.get("device") != "cuda":
            notes.append("float32 on CPU (reference: bfloat16 compute)")
        if self.beta2_half_life_batch:
            notes.append(
                f"AdamW beta2 scaled with the batch to the token half-life of {self.base_beta2()} "
                f"at batch {self.beta2_half_life_batch} (reference: 0.95 at every batch)"
            )
        return notes

    def pool_dir(self, data_dir: str | Path, seed: int) -> Path:
        """data_dir/<name>-<source>-seed<seed>, the source's characters other than letters, digits,
        '.', '_' and '-' as '_'; a local source by its file name only, so the folder does not
        depend on where the checkout lives."""
        source = self.pool.source
        if not source.startswith("hf:") and os.path.isabs(source):
            source = Path(source).name
        return Path(data_dir) / f"{self.name}-{re.sub(r'[^A-Za-z0-9._-]', '_', source)}-seed{seed}"

    def pool_spec(self, seed: int, tokenizer: str | None) -> PoolSpec:
        """Pool `seed`: training documents drawn with `seed`, validation documents and tokenizer
        shared."""
        return replace(
            self.pool,
            seed=seed,
            val_seed=self.pool_seeds[0],
            tokenizer=tokenizer or self.pool.tokenizer,
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

    def beta2_at(self, batch_size: int) -> float:
        """The AdamW beta2 of this preset's runs at `batch_size` sequences per step."""
        return self.beta2_fields(batch_size).get("adam_beta2", self.base_beta2())

    def beta2_setting(self) -> str:
        """This preset's AdamW betas in words: the reference betas at every batch, or the
        half-life rule (beta2_half_life_batch)."""
        from repro.runtime.config import make_run_config

        beta1, beta2 = make_run_config(self.extra).adam_beta1, self.base_beta2()
        if not self.beta2_half_life_batch:
            return f"reference betas ({beta1}, {beta2}) at every batch"
        b = self.beta2_half_life_batch
        return f"half-life rule, beta2 {beta2} ** (B / {b}) at batch B, beta1 {beta1}"

    def beta2_ablation(self) -> Preset:
        """This preset with the other AdamW beta2 setting than its batch sweep's (notebook 02's
        ablation): the reference betas where beta2_half_life_batch is set, else beta2 scaled to
        the token half-life it has at schedule_batch (the preset's reference batch)."""
        other = 0 if self.beta2_half_life_batch else self.schedule_batch
        return replace(self, beta2_half_life_batch=other)

    def beta2_ablation_batches(self) -> tuple[int, ...]:
        """The batch sizes (sequences) of the beta2 ablation: beta2_ablation_batch_sizes, or the
        two smallest batch sizes."""
        if self.beta2_ablation_batch_sizes:
            return tuple(sorted(self.beta2_ablation_batch_sizes))
        return tuple(sorted(self.batch_sizes)[:2])

    def base_beta2(self) -> float:
        """The AdamW beta2 of this preset's runs (at beta2_half_life_batch, if set)."""
        from repro.runtime.config import make_run_config

        return make_run_config(self.extra).adam_beta2

    def _beta2_axes(self, batch_size: int) -> dict:
        """beta2_fields as one-value grid axes (a batch size's `when` rule)."""
        return {name: [value] for name, value in self.beta2_fields(batch_size).items()}

    def batch_sweep_grid(
        self,
        pools: list[str | Path],
        batch_sizes: list[int] | None = None,
        models: list[str] | None = None,
        axes: dict | None = None,
        **recipe,
    ) -> dict:
        """Every model x batch size x (batch-dependent) lr x weight decay x epoch budget, on every
        pool (default: all of the preset's models and batch sizes), over the extra `axes` (recipe
        arms, notebook 03): every arm is tuned over the same grid."""
        batch_sizes = list(batch_sizes or self.batch_sizes)
        models = list(models or self.models)
        rules = [
            {"if": {"batch_size": b}, "axes": {"lr": list(self.lrs[b])} | self._beta2_axes(b)}
            for b in batch_sizes
        ]
        if self.gpus_per_run:  # lr per batch size and GPUs per model
            rules = [
                {
                    "if": {"batch_size": b, "model": m},
                    "axes": {"lr": list(self.lrs[b]), "gpus": [self.gpus_per_run.get(m, 1)]}
                    | self._beta2_axes(b),
                }
                for b in batch_sizes
                for m in models
            ]
        branches = {"wsd_branches": True} if self.wsd_branches else {}
        return branches | {
            "fixed": self.run_fields(**(ORIGINAL_RECIPE | recipe)),
            "axes": {
                "pool": [str(p) for p in pools],
                "model": models,
                "batch_size": batch_sizes,
                "lr": list(self.lrs[batch_sizes[0]]),
                "weight_decay": list(self.weight_decays),
                "epochs": list(self.epochs),
            }
            | (axes or {}),
            "when": rules,
        }

    def usual_batch_source(self) -> str:
        """Where this preset's "usual" (one-pass) batch comes from."""
        if self.one_pass_batch_size:
            return f"{self.one_pass_batch_size} sequences, as set in the preset"
        return (
            "measured: the batch with the lowest tuned loss at an epoch budget of 1, "
            "on the other pools"
        )

    def scaling_batch_sizes(self, pool_tokens: int) -> tuple[int, ...]:
        """The batch sizes (sequences) the pool-size runs train on a pool of `pool_tokens` training
        tokens: those of which it holds at least one batch (sequences of seq_len + 1 tokens), so
        that every run takes a step each epoch."""
        return tuple(b for b in self.batch_sizes if b * (self.seq_len + 1) <= pool_tokens)

    def scaling_grids(self, pools: dict[int, list[str | Path]], **recipe) -> list[dict]:
        """The batch sweep on pools of several sizes (`pools`: training tokens -> the pools of
        that size), at the first model and the first weight decay only (lr and epoch budget still
        tuned): one grid per size, at its scaling_batch_sizes."""
        grids = []
        for tokens, paths in sorted(pools.items()):
            batches = list(self.scaling_batch_sizes(tokens))
            grid = self.batch_sweep_grid(paths, batches, models=self.models[:1], **recipe)
            grid["axes"]["weight_decay"] = [self.weight_decays[0]]
            grids.append(grid)
        return grids

    def noise_scale_grid(self, choices: list[dict]) -> list[dict]:
        """Runs that log the gradient noise scale: one per choice (complete run fields, such as
        cbs.noise_scale_choices' tuned runs), evaluated 4x per epoch, with the preset's noise
        micro-batch."""
        noise = {"noise_scale": True, "micro_batch": self.noise_micro_batch, "eval_every": 0.25}
        return [{"fixed": choice | noise, "axes": {}} for choice in choices]

    def schedule_grid(
        self, pools: list[str | Path], epochs: int, weight_decay: float, **recipe
    ) -> dict:
        """Every batch-size schedule with the lr grid of `schedule_batch` (the reference batch) on
        every pool, at one epoch budget and weight decay (the notebooks pass the best fixed
        batch's). With
        wsd_branches, the fixed batches at a shorter budget warm up over their trunk's first steps,
        so the schedules warm up over the same fraction of the largest budget."""
        from repro.runtime.config import RunConfig

        fields = self.run_fields(model=self.models[0], **recipe)
        if self.wsd_branches and epochs != max(self.epochs):
            warmup = fields.get("warmup", RunConfig.warmup)
            fields["warmup"] = warmup * max(self.epochs) / epochs
        return {
            "fixed": fields
            | {
                "model": self.models[0],
                "batch_size": self.schedule_batch,
                "weight_decay": weight_decay,
                "epochs": epochs,
            }
            | self.beta2_fields(self.schedule_batch),
            "axes": {
                "pool": [str(p) for p in pools],
                "batch_schedule": list(self.batch_schedules.values()),
                "lr": list(self.lrs[self.schedule_batch]),
            },
        }


ZHANG_LAW = (22.9, 0.47)
"""Zhang et al.'s fit of the critical batch to data size, B* = 22.9 D^0.47 (coefficient,
exponent); its units are not stated with it (zhang_critical_batch reads it both ways)."""


def zhang_critical_batch(pool_tokens: float) -> tuple[float, float]:
    """Zhang et al.'s critical batch B* = 22.9 D^0.47 (ZHANG_LAW) at a pool of `pool_tokens`, in
    tokens, under both readings of its units, lowest first: D in millions of tokens and B* in
    sequences of their 512-token context; D and B* in tokens."""
    coefficient, exponent = ZHANG_LAW
    millions = coefficient * (pool_tokens / 1e6) ** exponent * 512
    tokens = coefficient * pool_tokens**exponent
    return min(millions, tokens), max(millions, tokens)


PAPER_NOISE_SCALE = zhang_critical_batch(200e6)
"""The paper's gradient noise scale (lowest, highest; tokens), an estimate, not a measurement:
Kim et al. report none, so this is Zhang et al.'s critical batch B* = 22.9 D^0.47 at the paper's
D = 200M tokens under either reading of its units (zhang_critical_batch), taking the critical
batch for B_simple as McCandlish et al. predict (B_crit ~ B_simple)."""

NOISE_RATIO = "batch / noise scale (tokens)"
"""The ratio of a batch to the gradient noise scale B_simple (both in tokens): notebook 05
measures B_simple; the paper's is PAPER_NOISE_SCALE."""

NOISE_GAP_LIMIT = 0.05
"""nats/token: how far from the tuned loss notebook 05's noise-scale evaluations may lie for their
B_simple to count as the noise scale at that loss (cbs.noise_scale_regime's loss gap); beyond it
the regime report says how far above the tuned loss B_simple was measured."""

PAPER_REGIME = {
    "batch / pool (tokens)": (3.3e-4, 1e-2),
    "pool tokens per parameter": (0.13, 1.3),
    "epochs": (1.0, 32.0),
    NOISE_RATIO: (16 * 4096 / PAPER_NOISE_SCALE[1], 512 * 4096 / PAPER_NOISE_SCALE[0]),
}
"""The paper's ratios (Kim et al.'s setup: batches of 16-512 sequences of 4,096 tokens from a
200M-token pool, 150M-1.5B-parameter models, up to 32 epochs; batch / noise scale against the
estimate PAPER_NOISE_SCALE: the smallest batch over the larger estimate, the largest over the
smaller)."""


def describe_regime(regime: dict[str, tuple[float, float]], noise_gap: float = 0.0) -> str:
    """One line per ratio: this study's range, the paper's, and whether it lies inside, covers the
    paper's, overlaps it (and on which part) or lies outside, at two significant digits (the
    precision of the paper's figures). Batch / noise scale says that notebook 05 measured it (NaN:
    not measured yet), at how many nats/token above the tuned loss where its evaluations lie
    farther than NOISE_GAP_LIMIT from it (`noise_gap`: cbs.noise_scale_range's), and that the
    paper's is an estimate."""
    lines = []
    for name, (low, high) in regime.items():
        paper_low, paper_high = (float(f"{end:.2g}") for end in PAPER_REGIME[name])
        paper = "paper's estimate" if name == NOISE_RATIO else "paper"
        paper += f" {paper_low:.2g} to {paper_high:.2g}"
        if math.isnan(low):
            lines.append(f"  {name}: not measured yet, notebook 05 measures it ({paper})")
            continue
        low2, high2 = float(f"{low:.2g}"), float(f"{high:.2g}")
        shared = (max(low2, paper_low), min(high2, paper_high))
        if paper_low <= low2 and high2 <= paper_high:
            where = "inside"
        elif low2 <= paper_low and paper_high <= high2:
            where = "covers it"
        elif shared[0] < shared[1]:
            where = f"overlaps it from {shared[0]:.2g} to {shared[1]:.2g}"
        else:
            where = "outside"
        ours = f"{low:.2g}" if low == high else f"{low:.2g} to {high:.2g}"
        if name == NOISE_RATIO:
            ours += ", notebook 05's measurement"
            if noise_gap > NOISE_GAP_LIMIT:
                ours += f" {noise_gap:.2g} nats/token above the tuned loss, not at it"
        lines.append(f"  {name}: {ours} ({paper}: {where})")
    return "\n".join(lines)


BETA2_DIGITS = 3
"""Significant digits of 1 - beta2 that beta2_half_life_batch keeps (0.993608 -> 0.99361)."""

ORIGINAL_RECIPE = {"loader": "shuffle", "tie_embeddings": False, "embedding_weight_decay": 0.0}
"""Kim et al.'s recipe as tuned for one pass: sequences packed once and reshuffled, untied, no
embedding decay."""


SHORT_DOCUMENTS = "synthetic:max_sentences=20"
"""The CPU presets' source: synthetic documents of 3-20 sentences (about 90 tokens at vocab 512),
so a 16k-token validation set holds about 180 documents (about 130 effective by token weight):
enough that the documents are not an interval's bottleneck."""


def _lr_ladder(
    batch_sizes: tuple[int, ...],
    base_batch: int,
    base_lrs: tuple[float, ...],
    exponent: float = 0.5,
) -> dict[int, tuple[float, ...]]:
    """lr grids that move with (batch / base_batch) ** exponent: 0.5 is the Adam square-root rule;
    a smaller exponent where scouting found the tuned lr flatter in batch."""
    return {
        b: tuple(round(lr * (b / base_batch) ** exponent, 6) for lr in base_lrs)
        for b in batch_sizes
    }


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        pool=PoolSpec(source=SHORT_DOCUMENTS, tokens=8_000, val_tokens=2_000, vocab_size=300),
        pool_seeds=(0, 1),
        models=("tiny", "cpu-s"),
        seq_len=32,
        batch_sizes=(2, 8),
        lrs={2: (3e-3, 1e-2), 8: (3e-3, 1e-2)},
        weight_decays=(0.1,),
        epochs=(1, 2),
        eval_every=0.5,
        ablation_batch_sizes=(2, 8),
        beta2_ablation_batch_sizes=(2,),  # one batch keeps CI's notebook 02 short
        embedding_weight_decays=(0.0, 0.1),
        frontier_micro_batch=2,
        gpu_counts=(1, 2, 4),
        workers=2,
        stack=2,
        scaling_pool_tokens=(2_000, 4_000),
        noise_scale_batches=(8,),
        noise_micro_batch=2,
        batch_schedules={"ramp-up": "0:2,0.5:8", "ramp-down": "0:8,0.5:2"},
        schedule_batch=8,
    ),
    # for a 2-core machine (docs/RESULTS.md has its measured time). The model is `tiny`: the pool's
    # 16k tokens are 0.27 tokens per parameter, inside the paper's 0.13-1.3 (cpu-xs: 0.096), and it
    # trains 1.6x faster. Budgets end at 16 epochs and one growth round (the most that keeps a
    # from-scratch study near an hour) adds 32 where 16 won and a run beside each lr or weight
    # decay not bracketed; edges left after it are noted in the tables. AdamW's
    # beta2 is 0.95 at batch 32 (the reference recipe's, at the largest batch) and keeps its token
    # half-life below it (Marek et al. 2025; 0.9984 at batch 1): with 0.95 at 128-token steps,
    # batch 1 would average its second moment over about 1,700 tokens, a deficit of the setup
    # (issue 32); the ablation in notebook 02 runs batch 1 with the reference betas too.
    "cpu": Preset(
        name="cpu",
        pool=PoolSpec(source=SHORT_DOCUMENTS, tokens=16_000, val_tokens=16_000, vocab_size=512),
        pool_seeds=(0, 1, 2),
        models=("tiny",),
        seq_len=128,
        batch_sizes=(1, 2, 4, 8, 16, 32),
        lrs=_lr_ladder((1, 2, 4, 8, 16, 32), 8, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.3, 1.0, 3.0),
        epochs=(1, 2, 4, 8, 16),
        wsd_branches=True,
        eval_every=1.0,
        ablation_batch_sizes=(2, 16),
        beta2_half_life_batch=32,
        beta2_ablation_batch_sizes=(1,),
        embedding_weight_decays=(0.0, 1.0),
        workers=2,
        stack=8,
        max_stacked_batch=4,
        scaling_pool_tokens=(4_000, 8_000),
        noise_scale_batches=(8, 32),
        noise_micro_batch=2,
        batch_schedules={"ramp-up": "0:2,0.5:8,0.75:32", "ramp-down": "0:32,0.5:8,0.75:2"},
        schedule_batch=8,
        grid_growth=1,
        grow_epochs=True,
    ),
    # the paper's regime on a 2-core machine: its ratio of batch to gradient noise scale, tokens
    # per parameter and epochs, not its sizes.
    # | ratio                      | paper (Kim et al.)       | cpu-regime                     |
    # | batch / noise scale        | 0.36 .. 15 (estimate)    | 0.013 .. 2.9: top given up     |
    # | pool tokens per parameter  | 0.13 .. 1.3 (5 sizes)    | 0.18 (cpu-xs), 0.50 (tiny)     |
    # | epochs                     | 1 .. 32 (cosine per run) | 1 .. 8, grown to 16 (WSD)      |
    # | batch tokens / pool tokens | 3.3e-4 .. 1.0e-2         | 0.0043 .. 0.55: given up       |
    # | pools                      | 2 (DCLM samples)         | 3 (synthetic samples)          |
    # Its batches, 8-1024 sequences of 16 tokens, run from 44-75x below to 1.7-2.9x above the
    # B_simple that notebook 05 measured at the tuned loss (351-601 sequences, README, Regime);
    # the top batch is half the pool (1.7 steps an epoch), so neither batch / pool nor the top of
    # batch / noise scale can match here (4 B_simple is 0.75-1.3 pools). Cost sets the rest:
    # 30k-token pools, 8-epoch trunks grown once (to 16 where 8 wins), 03-05 at the smaller model
    # (README: its measured from-scratch time). The first lr grid moves with batch ** 0.25 (a
    # scouting sweep at batches 1-64 found sqrt(batch) too steep here).
    "cpu-regime": Preset(
        name="cpu-regime",
        pool=PoolSpec(source=SHORT_DOCUMENTS, tokens=30_000, val_tokens=16_000, vocab_size=512),
        pool_seeds=(0, 1, 2),
        models=("tiny", "cpu-xs"),  # 03-05 study the first (the paper's ablations: its smallest)
        seq_len=16,
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024),
        # below batch 32 the ladder's lr is too low (batch 32 chose the top of its grid and past
        # it): batches 8 and 16 start at batch 32's grid one step up
        lrs={b: (6.3e-4, 1.7e-3, 4.5e-3) for b in (8, 16)}
        | _lr_ladder((32, 64, 128, 256, 512, 1024), 1024, (6e-4, 1.5e-3, 4e-3), exponent=0.25),
        weight_decays=(0.1, 1.0),
        epochs=(1, 2, 4, 8),
        wsd_branches=True,
        eval_every=1.0,
        ablation_batch_sizes=(64, 512),
        beta2_half_life_batch=1024,
        beta2_ablation_batch_sizes=(8,),
        embedding_weight_decays=(0.0, 0.3),
        frontier_micro_batch=32,
        gpu_counts=(1, 2, 4, 8, 16, 32),
        workers=2,
        stack=4,
        max_stacked_batch=64,
        scaling_pool_tokens=(7_500, 15_000),
        noise_scale_batches=(64, 256),
        noise_micro_batch=8,
        batch_schedules={
            "ramp-up": "0:64,0.5:256,0.75:1024",
            "ramp-down": "0:1024,0.5:256,0.75:64",
        },
        schedule_batch=256,
        grid_growth=1,
        grow_epochs=True,
    ),
    # one GPU: `repro plan --preset gpu-small` prices it (README); 10M-token pools keep it inside
    # the paper's ratios, budgets are WSD cool-downs of one 8-epoch run
    "gpu-small": Preset(
        name="gpu-small",
        pool=PoolSpec(source="synthetic", tokens=10_000_000, val_tokens=1_000_000, vocab_size=8192),
        pool_seeds=(0, 1, 2),
        models=("150m",),
        seq_len=1024,
        batch_sizes=(4, 8, 16, 32, 64),
        lrs=_lr_ladder((4, 8, 16, 32, 64), 32, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.1, 0.8),
        epochs=(1, 2, 4, 8),
        wsd_branches=True,
        eval_every=0.5,
        ablation_batch_sizes=(8, 32),
        embedding_weight_decays=(0.0, 0.8),
        micro_batch=16,
        frontier_micro_batch=16,
        gpu_counts=(1, 2, 4, 8),
        workers=1,
        scaling_pool_tokens=(2_500_000, 5_000_000),
        noise_scale_batches=(32, 64),
        noise_micro_batch=16,
        batch_schedules={"ramp-up": "0:8,0.5:16,0.75:64", "ramp-down": "0:64,0.5:16,0.75:8"},
        schedule_batch=16,
        downstream_tasks=("arc_easy", "piqa", "sciq"),
        extra={"device": "cuda", "compile": True},
    ),
    "gpu": Preset(
        name="gpu",
        pool=PoolSpec(
            source="hf:mlfoundations/dclm-baseline-1.0",
            tokens=200_000_000,
            val_tokens=10_000_000,
            tokenizer="meta-llama/Meta-Llama-3-8B",
        ),
        pool_seeds=(0, 1, 2),
        models=("150m", "300m", "600m", "1.4b", "1.5b"),
        seq_len=4096,
        batch_sizes=(16, 32, 64, 128, 256, 512),
        lrs=_lr_ladder((16, 32, 64, 128, 256, 512), 64, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.1, 0.4, 0.8, 1.6, 3.2),
        epochs=(4, 8, 16, 32),
        eval_every=1.0,
        ablation_batch_sizes=(32, 128),
        embedding_weight_decays=(0.0, 0.1, 0.8),
        micro_batch=8,
        frontier_micro_batch=8,
        gpu_counts=(1, 2, 4, 8, 16, 32, 64),
        workers=8,
        one_pass_batch_size=64,
        scaling_pool_tokens=(50_000_000, 100_000_000),
        noise_scale_batches=(64, 256),
        noise_micro_batch=8,
        batch_schedules={"ramp-up": "0:32,0.5:64,0.75:256", "ramp-down": "0:256,0.5:64,0.75:32"},
        schedule_batch=64,
        gpus_per_run={"600m": 2, "1.4b": 4, "1.5b": 4},  # no run over a day (repro plan)
        downstream_tasks=("arc_easy", "piqa", "sciq"),  # Kim et al.'s multiple-choice tasks
        extra={"device": "cuda", "compile": True},
    ),
}


DRY_RUN = "-dry-run"  # the name (runs/, figures/) of a preset shrunk to a CPU (dry_run_preset)
CPU_SIZES = ("nano", "tiny", "cpu-xs", "cpu-s", "cpu-m", "cpu-l")  # smallest first


def dry_run_preset(preset: Preset) -> Preset:
    """`preset` with every run kept (models, batch sizes, lr and weight-decay grids, epoch budgets,
    ablations, schedules, noise-scale and pool-size runs) but shrunk to CPU-seconds: models become
    the CPU sizes of the same rank by parameters, batches (beta2_half_life_batch too) and epoch
    budgets their ranks (1, 2, ...; micro-batches of 1 where the preset has micro-batches),
    sequences 16 tokens, pools of exactly two largest batches (the smallest pool-size pool at least
    one, so it trains every batch size), a Llama-3-sized vocab's uint32 token storage kept, float32
    on the CPU without torch.compile, one process per run."""
    from repro.runtime.shapes import model_config, parameter_count

    if len(preset.models) > len(CPU_SIZES):
        raise ReproError(f"preset {preset.name}: a dry run maps at most {len(CPU_SIZES)} models")
    by_size = sorted(preset.models, key=lambda m: parameter_count(model_config(m, 512)))
    phases = [p for s in preset.batch_schedules.values() for p in _phases(s)]
    half_life = [preset.beta2_half_life_batch] if preset.beta2_half_life_batch else []
    batch = _ranks([*preset.lrs, preset.schedule_batch, *(b for _, b in phases), *half_life])
    epochs = _ranks(list(preset.epochs))
    largest = max(batch.values()) * 17  # tokens of one batch of 16-token sequences (+1 target)
    share = min(preset.scaling_pool_tokens, default=preset.pool.tokens) / preset.pool.tokens
    tokens = max(2 * largest, math.ceil(largest / share))  # every pool holds a largest batch
    large_vocab = preset.pool.tokenizer is not None or preset.pool.vocab_size > 65_535
    dtype = "uint32" if large_vocab else "auto"
    return replace(
        preset,
        name=preset.name + DRY_RUN,
        pool=PoolSpec("synthetic", tokens, 1_000, vocab_size=300, dtype=dtype, exact_tokens=True),
        models=tuple(CPU_SIZES[by_size.index(m)] for m in preset.models),
        seq_len=16,
        batch_sizes=tuple(batch[b] for b in preset.batch_sizes),
        lrs={batch[b]: lrs for b, lrs in preset.lrs.items()},
        epochs=tuple(epochs[e] for e in preset.epochs),
        ablation_batch_sizes=tuple(batch[b] for b in preset.ablation_batch_sizes),
        beta2_ablation_batch_sizes=tuple(batch[b] for b in preset.beta2_ablation_batch_sizes),
        micro_batch=min(preset.micro_batch, 1),
        frontier_micro_batch=1,
        noise_micro_batch=1,
        noise_scale_batches=tuple(batch[b] for b in preset.noise_scale_batches),
        scaling_pool_tokens=tuple(
            tokens * t // preset.pool.tokens for t in preset.scaling_pool_tokens
        ),
        batch_schedules={
            name: ",".join(f"{at}:{batch[b]}" for at, b in _phases(schedule))
            for name, schedule in preset.batch_schedules.items()
        },
        schedule_batch=batch[preset.schedule_batch],
        one_pass_batch_size=batch.get(preset.one_pass_batch_size, 0),
        beta2_half_life_batch=batch.get(preset.beta2_half_life_batch, 0),
        gpus_per_run={},
        downstream_tasks=("pool_continuation",) if preset.downstream_tasks else (),
        extra={"device": "cpu"},
        workers=2,
        stack=8,
    )


def _ranks(values) -> dict[int, int]:
    """Each distinct value -> its rank, 1 for the smallest."""
    return {v: i + 1 for i, v in enumerate(sorted(set(values)))}


def _phases(schedule: str) -> list[tuple[str, int]]:
    """ "0:32,0.5:64" -> [("0", 32), ("0.5", 64)]."""
    return [(at, int(b)) for at, b in (phase.split(":") for phase in schedule.split(","))]


def get_preset(name: str | Path | None = None, dry_run: bool = False) -> Preset:
    """A built-in preset by name, or a preset YAML file (a path ending in .yaml / .yml, relative
    to the working directory or the project root); default: $REPRO_PRESET, else cpu. With
    `dry_run`, the built-in preset shrunk to CPU size (dry_run_preset), named NAME-dry-run."""
    name = str(name or os.environ.get("REPRO_PRESET", "cpu"))
    if dry_run:
        if name not in PRESETS:
            raise ReproError(f"--dry-run takes a built-in preset ({', '.join(PRESETS)})")
        return dry_run_preset(PRESETS[name])
    if name.endswith((".yaml", ".yml")):
        candidates = [Path(name), project_root() / name]
        found = next((path for path in candidates if path.is_file()), None)
        if found is None:
            raise ReproError(
                f"preset file {name} not found (looked in the working directory and "
                f"{project_root()})"
            )
        return load_preset(found)
    if name not in PRESETS:
        raise ReproError(
            f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}, or a preset .yaml file"
        )
    return PRESETS[name]


def load_preset(path: str | Path) -> Preset:
    """A preset YAML file: `base` (a built-in preset, default smoke) with any of its fields
    overridden; `pool` overrides fields of the pool (source, text_field, text_unit, tokens,
    val_tokens, vocab_size, tokenizer, ...); `name` defaults to the file's stem. A local source
    path is read relative to the file."""
    path = Path(path).resolve()
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not UTF-8 text; save the preset file as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ReproError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ReproError(f"{path}: a preset file is a mapping of fields, e.g. 'base: smoke'")
    base_name = data.pop("base", "smoke")
    if not isinstance(base_name, str) or base_name not in PRESETS:
        raise ReproError(f"{path}: unknown base {base_name!r}; choose one of: {', '.join(PRESETS)}")
    name = data.pop("name", path.stem)
    if not isinstance(name, str):
        raise ReproError(f"{path}: name must be a string (a folder name), got {name!r}")
    if name.removesuffix(DRY_RUN) in PRESETS:  # a built-in's or its dry run's runs/ and figures/
        raise ReproError(f"{path}: name {name!r} is a built-in preset's; choose another name")
    base = PRESETS[base_name]
    pool_changes = data.pop("pool", None) or {}
    if not isinstance(pool_changes, dict):
        raise ReproError(f"{path}: pool must be a mapping of pool fields, e.g. 'source: my.txt'")
    if {"seed", "val_seed"} & set(pool_changes):
        raise ReproError(f"{path}: pool seeds come from pool_seeds (e.g. pool_seeds: [0, 1])")
    pool = replace(base.pool, **_typed(PoolSpec, pool_changes, f"{path}: pool"))
    local = path.parent / pool.source
    if "source" in pool_changes and (local.exists() or glob.glob(str(local))):
        pool = replace(pool, source=str(local))  # a local file or glob, relative to this file
    return replace(base, name=name, pool=pool, **_typed(Preset, data, str(path)))


def preset_yaml(preset: Preset) -> str:
    """A preset as YAML (every field but the pool's seeds; lists for tuples), as `repro preset
    show` prints it."""

    def plain(value):
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    values = asdict(preset)
    for seed in ("seed", "val_seed"):  # set per pool from pool_seeds
        del values["pool"][seed]
    return yaml.safe_dump(plain(values), sort_keys=False, default_flow_style=None)


def _typed(cls: type, values: dict, where: str) -> dict:
    """`values` checked against the fields of dataclass `cls` and converted to their types
    (lists to tuples); an unknown field or a wrong type is a one-line error naming it."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls) if f.name not in ("name", "pool")]
    converted = {}
    for key, value in values.items():
        if key not in names:
            raise ReproError(f"{where}: unknown field {key!r}; fields: {', '.join(names)}")
        converted[key] = _convert(value, hints[key], f"{where}: {key}")
    return converted


def _convert(value, hint, where: str):
    """`value` (as YAML read it) as type `hint`: int, float, str, bool, X | None, tuple[X, ...]
    (a single value for a one-element tuple), tuple[X, Y], dict[K, V] or dict."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        return _convert(value, next(a for a in args if a is not type(None)), where)
    if origin is tuple:
        if args[-1] is Ellipsis and isinstance(value, int | float | str | bool):
            value = [value]  # one value of a list field, e.g. `epochs: 8`
        if not isinstance(value, list | tuple):
            raise ReproError(f"{where}: expected a list, got {value!r}")
        items = args[:1] * len(value) if args[-1] is Ellipsis else args
        if len(items) != len(value):
            raise ReproError(f"{where}: expected {len(items)} values, got {len(value)}")
        return tuple(_convert(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, items)))
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ReproError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args or (None, None)
        return {
            (_convert(k, key_type, where) if key_type else k): (
                _convert(v, value_type, f"{where}[{k}]") if value_type else v
            )
            for k, v in value.items()
        }
    return _scalar(value, hint, where)


def _scalar(value, hint: type, where: str):
    """int, float, bool or str, strictly: no bool as a number, no non-finite floats; a count may
    be written 500k / 2.5M, a float as a string YAML leaves unparsed (1e-3)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and number:
        return value
    if hint is int and isinstance(value, str) and re.fullmatch(r"[\d.]+\s*[kKmMbB]", value):
        return parse_count(value, where)
    if hint is float and (number or isinstance(value, str)):
        try:
            converted = float(value)
        except ValueError:
            converted = math.nan
        if math.isfinite(converted):
            return converted
    if hint is str and (number or isinstance(value, str)):
        return str(value)
    raise ReproError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
