"""Scales of the study: smoke (CI), cpu (a laptop), gpu-small (one GPU), gpu (paper scale).

A preset fixes the pools, model sizes, sequence length, batch sizes, the lr / weight-decay grids
(lr grids move with sqrt(batch size)), the epoch budget and the recipe ablations. The notebooks turn
a preset into sweeps with the grid builders below; nothing here trains.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from repro.data.pool import PoolSpec
from repro.errors import ReproError


@dataclass(frozen=True)
class Preset:
    name: str
    pool: PoolSpec  # the main pool; seeds below draw independent pools with the same validation set
    pool_seeds: tuple[int, ...]
    models: tuple[str, ...]
    seq_len: int  # tokens
    batch_sizes: tuple[int, ...]  # sequences per optimizer step
    lrs: dict[int, tuple[float, ...]]  # lr grid per batch size
    weight_decays: tuple[float, ...]
    epochs: int  # epoch budget of every run; the stopping point is chosen among its evaluations
    eval_every: float = 0.5  # epochs
    ablation_batch_sizes: tuple[int, int] = (
        4,
        32,
    )  # notebook 03: loaders at a small and a large batch
    embedding_weight_decays: tuple[float, ...] = (0.0, 0.1)  # notebook 03: tying x embedding decay
    micro_batch: int = 0  # sequences; 0: whole batch
    frontier_micro_batch: int = 4  # notebook 04: sequences one GPU processes per step unit
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)  # notebook 04
    workers: int = 2
    # sweeps train up to this many lr / weight-decay configs of one shape at once (repro.stacked)
    stack: int = 1
    # ... but only runs with batches up to this (sequences; 0: all); `repro bench stacked` decides
    max_stacked_batch: int = 0
    one_pass_batch_size: int = (
        16  # the batch a one-pass recipe uses at this scale (Kim et al.: 64 at paper scale)
    )
    extra: dict = field(
        default_factory=dict
    )  # fixed run fields added to every run (device, compile, ...)
    # notebook 05 (critical batch size)
    scaling_pool_tokens: tuple[
        int, ...
    ] = ()  # smaller pools (training tokens) for CBS vs data size; the main pool joins them
    noise_scale_batches: tuple[int, ...] = ()  # batch sizes whose runs log the gradient noise scale
    noise_micro_batch: int = (
        2  # sequences per micro-batch in those runs (the estimator's small batch)
    )
    batch_schedules: dict = field(default_factory=dict)  # name -> batch_schedule (notebooks 04, 05)
    schedule_batch: int = (
        8  # the batch whose lr grid the schedules use (lr * sqrt(B / schedule_batch) as B changes)
    )

    def pool_dir(self, data_dir: str | Path, seed: int) -> Path:
        return (
            Path(data_dir)
            / f"{self.name}-{self.pool.source.replace(':', '_').replace('/', '_')}-seed{seed}"
        )

    def pool_spec(self, seed: int, tokenizer: str | None) -> PoolSpec:
        """Pool `seed`: training documents drawn with `seed`, validation documents and tokenizer
        shared."""
        return replace(
            self.pool,
            seed=seed,
            val_seed=self.pool_seeds[0],
            tokenizer=tokenizer or self.pool.tokenizer,
        )

    def sized_pool_dir(self, data_dir: str | Path, tokens: int) -> Path:
        return Path(str(self.pool_dir(data_dir, self.pool_seeds[0])) + f"-{tokens}tok")

    def run_fields(self, **changes) -> dict:
        base = {
            "seq_len": self.seq_len,
            "epochs": self.epochs,
            "eval_every": self.eval_every,
            "micro_batch": self.micro_batch,
        }
        return base | self.extra | changes

    def batch_sweep_grid(self, pools: list[str | Path], **recipe) -> dict:
        """Every model x batch size x (batch-dependent) lr x weight decay, on every pool."""
        rules = [
            {"if": {"batch_size": b}, "axes": {"lr": list(lrs)}} for b, lrs in self.lrs.items()
        ]
        return {
            "fixed": self.run_fields(**recipe),
            "axes": {
                "pool": [str(p) for p in pools],
                "model": list(self.models),
                "batch_size": list(self.batch_sizes),
                "lr": list(self.lrs[self.batch_sizes[0]]),
                "weight_decay": list(self.weight_decays),
            },
            "when": rules,
        }

    def scaling_grid(self, pools: list[str | Path], **recipe) -> dict:
        """The batch sweep on pools of several sizes, at the first weight decay only (lr still
        tuned)."""
        grid = self.batch_sweep_grid(pools, **recipe)
        grid["axes"]["weight_decay"] = [self.weight_decays[0]]
        return grid

    def noise_scale_grid(self, pool: str | Path, **recipe) -> dict:
        """Runs that log the gradient noise scale: each noise-scale batch at its middle lr,
        evaluated 4x per epoch."""
        rules = [
            {"if": {"batch_size": b}, "axes": {"lr": [self.lrs[b][len(self.lrs[b]) // 2]]}}
            for b in self.noise_scale_batches
        ]
        return {
            "fixed": self.run_fields(**recipe)
            | {
                "pool": str(pool),
                "model": self.models[0],
                "noise_scale": True,
                "micro_batch": self.noise_micro_batch,
                "eval_every": 0.25,
                "weight_decay": self.weight_decays[0],
            },
            "axes": {"batch_size": list(self.noise_scale_batches), "lr": [0.0]},
            "when": rules,
        }

    def schedule_grid(self, pool: str | Path, **recipe) -> dict:
        """Every batch-size schedule with the lr grid of `schedule_batch` (the reference batch)."""
        return {
            "fixed": self.run_fields(**recipe)
            | {
                "pool": str(pool),
                "model": self.models[0],
                "batch_size": self.schedule_batch,
                "weight_decay": self.weight_decays[0],
            },
            "axes": {
                "batch_schedule": list(self.batch_schedules.values()),
                "lr": list(self.lrs[self.schedule_batch]),
            },
        }


ORIGINAL_RECIPE = {"loader": "shuffle", "tie_embeddings": False, "embedding_weight_decay": 0.0}
"""Kim et al.'s recipe as tuned for one pass: sequences packed once and reshuffled, untied, no
embedding decay."""


def _lr_ladder(
    batch_sizes: tuple[int, ...], base_batch: int, base_lrs: tuple[float, ...]
) -> dict[int, tuple[float, ...]]:
    """lr grids that move with sqrt(batch / base_batch) (the Adam square-root rule), so they widen
    with batch."""
    return {
        b: tuple(round(lr * (b / base_batch) ** 0.5, 6) for lr in base_lrs) for b in batch_sizes
    }


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        pool=PoolSpec(source="synthetic", tokens=8_000, val_tokens=2_000, vocab_size=300),
        pool_seeds=(0, 1),
        models=("tiny",),
        seq_len=32,
        batch_sizes=(2, 8),
        lrs={2: (3e-3, 1e-2), 8: (3e-3, 1e-2)},
        weight_decays=(0.1,),
        epochs=2,
        eval_every=0.5,
        ablation_batch_sizes=(2, 8),
        embedding_weight_decays=(0.0, 0.1),
        frontier_micro_batch=2,
        gpu_counts=(1, 2, 4),
        workers=2,
        stack=2,
        one_pass_batch_size=8,
        scaling_pool_tokens=(2_000, 4_000),
        noise_scale_batches=(8,),
        noise_micro_batch=2,
        batch_schedules={"ramp-up": "0:2,0.5:8", "ramp-down": "0:8,0.5:2"},
        schedule_batch=8,
    ),
    # sized for a 2-core machine: the whole series (pools, 137 runs, notebooks 01-05) in under 20
    # minutes (README)
    "cpu": Preset(
        name="cpu",
        pool=PoolSpec(source="synthetic", tokens=24_000, val_tokens=8_000, vocab_size=512),
        pool_seeds=(0, 1),
        models=("cpu-s",),
        seq_len=128,
        batch_sizes=(1, 2, 4, 8, 16, 32),
        lrs=_lr_ladder((1, 2, 4, 8, 16, 32), 8, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.1, 1.0),
        epochs=8,
        eval_every=1.0,
        ablation_batch_sizes=(2, 16),
        embedding_weight_decays=(0.0, 0.1, 1.0),
        workers=2,
        stack=6,
        max_stacked_batch=2,
        scaling_pool_tokens=(6_000, 12_000),
        noise_scale_batches=(8, 32),
        noise_micro_batch=2,
        batch_schedules={"ramp-up": "0:2,0.5:8,0.75:32", "ramp-down": "0:32,0.5:8,0.75:2"},
        schedule_batch=8,
    ),
    "gpu-small": Preset(
        name="gpu-small",
        pool=PoolSpec(source="synthetic", tokens=20_000_000, val_tokens=1_000_000, vocab_size=8192),
        pool_seeds=(0, 1),
        models=("150m",),
        seq_len=1024,
        batch_sizes=(8, 16, 32, 64, 128),
        lrs=_lr_ladder((8, 16, 32, 64, 128), 32, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.1, 0.8),
        epochs=8,
        eval_every=0.5,
        ablation_batch_sizes=(16, 64),
        embedding_weight_decays=(0.0, 0.1, 0.8),
        micro_batch=16,
        frontier_micro_batch=16,
        gpu_counts=(1, 2, 4, 8),
        workers=1,
        one_pass_batch_size=64,
        scaling_pool_tokens=(5_000_000, 10_000_000),
        noise_scale_batches=(32, 128),
        noise_micro_batch=16,
        batch_schedules={"ramp-up": "0:16,0.5:32,0.75:128", "ramp-down": "0:128,0.5:32,0.75:16"},
        schedule_batch=32,
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
        pool_seeds=(0, 1),
        models=("150m", "300m", "600m", "1.4b", "1.5b"),
        seq_len=4096,
        batch_sizes=(16, 32, 64, 128, 256, 512),
        lrs=_lr_ladder((16, 32, 64, 128, 256, 512), 64, (1e-3, 3e-3, 1e-2)),
        weight_decays=(0.1, 0.4, 0.8, 1.6, 3.2),
        epochs=32,
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
        extra={"device": "cuda", "compile": True},
    ),
}


def get_preset(name: str | None = None) -> Preset:
    """A preset by name; default: $REPRO_PRESET, else cpu."""
    name = name or os.environ.get("REPRO_PRESET", "cpu")
    if name not in PRESETS:
        raise ReproError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]


def project_root(start: str | Path | None = None) -> Path:
    """The repository root (the folder with pyproject.toml) above `start` (default: the cwd)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "repro").is_dir():
            return folder
    return here
