"""The gradient noise scale during training (McCandlish et al. 2018, appendix A.1): what the
trainer runs every step with `noise_scale=true`; torch only (its offline analysis is in
repro.analysis.noise, the fits in repro.analysis.cbs).

For gradient estimates over batches of b_small and b_big sequences,
E|G_b|^2 = |G|^2 + tr(Sigma) / b, so
    |G|^2     ~ (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)
are unbiased; each is smoothed by its own EMA and B_simple = tr(Sigma) / |G|^2 (sequences) is their
ratio. The trainer takes |G_small|^2 from each micro-batch (single process; the mean over
micro-batches) or from each rank's gradient before the all-reduce (DDP), and |G_big|^2 from the
global batch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


def two_batch_estimates(
    small_sq: float, big_sq: float, b_small: float, b_big: float
) -> tuple[float, float]:
    """Unbiased (|G|^2, tr(Sigma)) from squared gradient norms at batch sizes b_small < b_big
    (sequences)."""
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
    return grad_sq, trace


@dataclass
class NoiseScaleEMA:
    """Bias-corrected EMAs of the |G|^2 and tr(Sigma) estimates of one run; B_simple is their
    ratio."""

    decay: float = 0.95
    grad_sq: float = 0.0
    trace: float = 0.0
    weight: float = 0.0  # 1 - decay^steps: the EMA's bias correction

    def update(self, small_sq: float, big_sq: float, b_small: float, b_big: float) -> None:
        if not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            return
        grad_sq, trace = two_batch_estimates(small_sq, big_sq, b_small, b_big)
        self.grad_sq = self.decay * self.grad_sq + (1 - self.decay) * grad_sq
        self.trace = self.decay * self.trace + (1 - self.decay) * trace
        self.weight = self.decay * self.weight + (1 - self.decay)

    def values(self) -> dict:
        """grad_sq = |G|^2, trace_cov = tr(Sigma) (per sequence), b_simple = tr(Sigma) / |G|^2
        (sequences)."""
        if not self.weight:
            return {}
        grad_sq, trace = self.grad_sq / self.weight, self.trace / self.weight
        return {
            "grad_sq": grad_sq,
            "trace_cov": trace,
            "b_simple": trace / grad_sq if grad_sq > 0 else None,
        }

    def state(self) -> dict:
        return asdict(self)


class MicroBatchNorms:
    """Squared norms of each micro-batch's gradient, per config, while accumulating the gradients by
    hand: after each backward the fresh gradients are measured and moved into an accumulator, and
    `restore` puts the sum back. Tensors are parameters [...] (one config) or stacked leaves
    [K, ...]."""

    def __init__(self, stacked: bool):
        self.stacked = stacked
        self.accumulated: list[torch.Tensor] | None = None
        self.sq_sum: torch.Tensor | None = None
        self.count = 0

    def add(self, tensors: list[torch.Tensor], scale: float) -> None:
        """Measure the gradients now in `tensors` (a micro-batch's loss times 1 / scale) and take
        them."""
        grads = [t.grad for t in tensors]
        sq = sum(
            (g.float().pow(2).flatten(1).sum(1) if self.stacked else g.float().pow(2).sum()[None])
            for g in grads
        )
        self.sq_sum = sq * scale**2 if self.sq_sum is None else self.sq_sum + sq * scale**2
        if self.accumulated is None:
            self.accumulated = grads
        else:
            torch._foreach_add_(self.accumulated, grads)
        for t in tensors:
            t.grad = None
        self.count += 1

    def restore(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Give the accumulated gradients back; returns the mean squared micro-batch norm per
        config."""
        for t, g in zip(tensors, self.accumulated):
            t.grad = g
        mean = self.sq_sum / self.count
        self.accumulated, self.sq_sum, self.count = None, None, 0
        return mean
