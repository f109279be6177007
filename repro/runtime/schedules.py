"""Hyperparameter schedules: the multiplier of the base lr at each optimizer step, and AdamW's beta2
across batch sizes (no torch, so run configs, presets, plans, analyses and the command line use
them without importing it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

ScheduleName = Literal["cosine", "wsd", "constant"]
DecayShape = Literal["linear", "1-sqrt"]


@dataclass(frozen=True)
class Schedule:
    """Learning-rate multiplier shape over a run; fractions are of total optimizer steps."""

    name: ScheduleName = "cosine"
    warmup_fraction: float = 0.01  # linear warmup over ceil(warmup_fraction * total_steps) steps
    min_lr_ratio: float = 0.0  # final multiplier of cosine and wsd (0: to zero, as Kim et al.)
    decay_fraction: float = 0.2  # wsd: the last ceil(decay_fraction * total_steps) steps decay
    decay_shape: DecayShape = "linear"  # wsd decay

    def __post_init__(self) -> None:
        if self.name not in get_args(ScheduleName):
            raise ValueError(
                f"unknown schedule {self.name!r}; "
                f"choose one of: {', '.join(get_args(ScheduleName))}"
            )
        if self.decay_shape not in get_args(DecayShape):
            raise ValueError(
                f"unknown decay shape {self.decay_shape!r}; "
                f"choose one of: {', '.join(get_args(DecayShape))}"
            )
        for field in ("warmup_fraction", "min_lr_ratio", "decay_fraction"):
            value = getattr(self, field)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{field} must be in [0, 1], got {value}")


def _num_steps(fraction: float, total_steps: int) -> int:
    """ceil(fraction * total_steps), immune to float noise such as
    0.07 * 100 = 7.000000000000001."""
    return math.ceil(round(fraction * total_steps, 9))


def decay_start_step(schedule: Schedule, total_steps: int) -> int:
    """First step of the WSD decay phase."""
    return max(
        _num_steps(schedule.warmup_fraction, total_steps),
        total_steps - _num_steps(schedule.decay_fraction, total_steps),
    )


def lr_multiplier(schedule: Schedule, step: int, total_steps: int) -> float:
    """Multiplier of the base learning rate at optimizer step `step` in [0, total_steps).

    Warmup rises linearly from 1/warmup_steps at step 0 to 1 at its last step. After it,
    cosine goes from 1 to min_lr_ratio at the last step; wsd holds 1, then over its decay
    steps goes from 1 to min_lr_ratio at the last step (linear, or 1 - sqrt of progress);
    constant holds 1.
    """
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside [0, {total_steps})")
    warmup_steps = _num_steps(schedule.warmup_fraction, total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule.name == "constant":
        return 1.0
    last = total_steps - 1
    if schedule.name == "cosine":
        progress = (step - warmup_steps) / (last - warmup_steps) if last > warmup_steps else 1.0
        return schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * 0.5 * (
            1 + math.cos(math.pi * progress)
        )
    decay_start = decay_start_step(schedule, total_steps)
    if step < decay_start:
        return 1.0
    progress = (step - decay_start) / (last - decay_start) if last > decay_start else 1.0
    if schedule.decay_shape == "1-sqrt":
        progress = math.sqrt(progress)
    return 1 - (1 - schedule.min_lr_ratio) * progress


def beta2_for_batch(beta2: float, reference_batch_tokens: int, batch_tokens: int) -> float:
    """The AdamW beta2 at a batch of `batch_tokens` tokens per optimizer step whose second-moment
    average has the same half-life in tokens as `beta2` at `reference_batch_tokens` per step
    (Marek et al. 2025, arXiv 2507.07101): beta2 ** (batch_tokens / reference_batch_tokens). The
    half-life is ln 0.5 / ln beta2 steps, so steps x tokens per step stays constant."""
    return beta2 ** (batch_tokens / reference_batch_tokens)


def beta2_half_life_tokens(beta2: float, batch_tokens: int) -> float:
    """The half-life of AdamW's second-moment average in tokens: ln 0.5 / ln beta2 steps of
    `batch_tokens` tokens each, for beta2 in [0, 1) (0 at beta2 0: no average)."""
    return math.log(0.5) / math.log(beta2) * batch_tokens if beta2 > 0 else 0.0
