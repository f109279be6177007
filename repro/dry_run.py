"""A dry run: a preset with every one of its runs kept but shrunk to CPU-seconds, so that a GPU
preset's whole plan and every notebook can be checked end to end on a laptop (`repro reproduce
--preset P --dry-run`)."""

from __future__ import annotations

import math
from dataclasses import replace

from repro.data.build import PoolSpec
from repro.errors import ReproError
from repro.presets import Preset
from repro.runtime.config import batch_schedule_text, parse_batch_schedule
from repro.runtime.shapes import model_config, parameter_count

DRY_RUN = "-dry-run"  # the name (runs/, figures/) of a preset shrunk to a CPU (dry_run_preset)
CPU_SIZES = ("nano", "tiny", "cpu-xs", "cpu-s", "cpu-m", "cpu-l")  # smallest first


def dry_run_preset(preset: Preset) -> Preset:
    """`preset` with every run kept (models, batch sizes, lr and weight-decay grids, epoch budgets,
    ablations, schedules, noise-scale and pool-size runs) but shrunk to CPU-seconds: models become
    the CPU sizes of the same rank by parameters, batches (beta2_half_life_batch too) and epoch
    budgets their ranks (1, 2, ...; micro-batches of 1 where the preset has micro-batches),
    sequences 16 tokens, pools of exactly two largest batches (the smallest pool-size pool at least
    one, so it trains every batch size), an evaluation per epoch, a Llama-3-sized vocab's uint32
    token storage kept, float32 on the CPU without torch.compile, one process per run."""
    if len(preset.models) > len(CPU_SIZES):
        raise ReproError(f"preset {preset.name}: a dry run maps at most {len(CPU_SIZES)} models")
    by_size = sorted(preset.models, key=lambda m: parameter_count(model_config(m, 512)))
    phases = [p for s in preset.batch_schedules.values() for p in parse_batch_schedule(s)]
    half_life = [preset.beta2_half_life_batch] if preset.beta2_half_life_batch else []
    batch = _ranks([*preset.lrs, preset.schedule_batch, *(b for _, b in phases), *half_life])
    epochs = _ranks(list(preset.epochs))
    largest = max(batch.values()) * 17  # tokens of one batch of 16-token sequences (+1 target)
    share = (
        min(preset.scaling_pool_tokens, default=preset.pool_spec.tokens) / preset.pool_spec.tokens
    )
    tokens = max(2 * largest, math.ceil(largest / share))  # every pool holds a largest batch
    large_vocab = preset.pool_spec.tokenizer is not None or preset.pool_spec.vocab_size > 65_535
    dtype = "uint32" if large_vocab else "auto"
    return replace(
        preset,
        name=preset.name + DRY_RUN,
        pool_spec=PoolSpec(
            "synthetic", tokens, 1_000, vocab_size=300, dtype=dtype, exact_tokens=True
        ),
        models=tuple(CPU_SIZES[by_size.index(m)] for m in preset.models),
        seq_len=16,
        eval_every=1.0,  # the fewest evaluations a run may have: they cost more than its steps
        batch_sizes=tuple(batch[b] for b in preset.batch_sizes),
        lrs={batch[b]: lrs for b, lrs in preset.lrs.items()},
        epochs=tuple(epochs[e] for e in preset.epochs),
        ablation_batch_sizes=tuple(batch[b] for b in preset.ablation_batch_sizes),
        tying_batch_size=batch.get(preset.tying_batch_size, 0),
        beta2_ablation_batch_sizes=tuple(batch[b] for b in preset.beta2_ablation_batch_sizes),
        micro_batch=min(preset.micro_batch, 1),
        frontier_micro_batch=1,
        noise_micro_batch=1,
        noise_scale_batches=tuple(batch[b] for b in preset.noise_scale_batches),
        scaling_pool_tokens=tuple(
            tokens * t // preset.pool_spec.tokens for t in preset.scaling_pool_tokens
        ),
        batch_schedules={
            name: batch_schedule_text([(at, batch[b]) for at, b in parse_batch_schedule(schedule)])
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
