"""Paired comparisons of two evaluations over the same validation documents, and three-way
verdicts.

Every run evaluates the same validation documents (pools share them), and each evaluation stores
each document's summed loss (RUN/val_docs/step-N.npy, nats) and scored tokens
(RUN/val_docs/tokens.npy). The difference of two evaluations' mean losses (nats/token) gets a
percentile bootstrap interval that resamples documents, the same documents for both (paired).
"""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from repro.errors import ReproError

CLAIM_COLUMNS = ["claim", "paper", "measured here", "agrees?"]  # every notebook's claim table
LEVEL = 0.9  # two-sided interval level
RESAMPLES = 2000
MIN_DOCUMENTS = 10  # fewer scored documents give no interval (a bootstrap over 2 means nothing)


class Difference(NamedTuple):
    """A difference of mean losses (nats/token) a - b, its LEVEL interval over validation
    documents ((-inf, inf) when there are too few), the difference on each pool it averages over,
    and whether each arm is censored: its chosen epoch budget is the largest tried, or its lr or
    weight decay is not bracketed by runs on both sides, so that arm's loss might still fall."""

    value: float
    low: float
    high: float
    per_pool: tuple[float, ...] = ()
    censored: tuple[bool, bool] = (False, False)

    def negated(self) -> Difference:
        """The difference the other way round (b - a)."""
        per_pool = tuple(-d for d in self.per_pool)
        return Difference(-self.value, -self.high, -self.low, per_pool, self.censored[::-1])


def document_losses(run_dir: str | Path, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(summed loss per validation document, nats; scored tokens per document) of the evaluation
    at `step` of the run in `run_dir`."""
    folder = Path(run_dir) / "val_docs"
    if not (folder / f"step-{step}.npy").is_file():
        raise ReproError(
            f"{folder}/step-{step}.npy is missing: the run was trained before per-document losses "
            "were stored; train it again (remove its directory) to get intervals"
        )
    return np.load(folder / f"step-{step}.npy"), np.load(folder / "tokens.npy")


def paired_difference(
    a: np.ndarray, b: np.ndarray, tokens: np.ndarray, seed: int = 0
) -> Difference:
    """Mean loss of `a` minus that of `b` (nats/token; per-document summed losses over the same
    documents with `tokens` scored tokens each) and its LEVEL bootstrap interval over documents;
    (-inf, inf) with fewer than MIN_DOCUMENTS scored documents."""
    if not (a.shape == b.shape == tokens.shape):
        raise ReproError("paired losses must cover the same validation documents")
    scored = tokens > 0
    a, b, tokens = a[scored], b[scored], tokens[scored]
    difference = float((a.sum() - b.sum()) / tokens.sum())
    if len(tokens) < MIN_DOCUMENTS:
        return Difference(difference, -np.inf, np.inf)
    picks = np.random.default_rng(seed).integers(0, len(tokens), (RESAMPLES, len(tokens)))
    resampled = (a[picks].sum(1) - b[picks].sum(1)) / tokens[picks].sum(1)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return Difference(difference, float(low), float(high))


def normal_difference(a: np.ndarray, b: np.ndarray, tokens: np.ndarray, level: float) -> Difference:
    """Mean loss of `a` minus that of `b` (nats/token; per-document summed losses over the same
    documents, `tokens` scored tokens each) with a normal interval at `level` from the delta-method
    standard error of a ratio of sums over documents (a 2000-resample bootstrap cannot resolve the
    tails of Bonferroni levels); (-inf, inf) with fewer than MIN_DOCUMENTS scored documents."""
    if not (a.shape == b.shape == tokens.shape):
        raise ReproError("paired losses must cover the same validation documents")
    scored = tokens > 0
    gap, tokens = (a - b)[scored], tokens[scored]
    value = float(gap.sum() / tokens.sum())
    if len(tokens) < MIN_DOCUMENTS:
        return Difference(value, -np.inf, np.inf)
    se = float(np.sqrt(((gap - value * tokens) ** 2).sum()) / tokens.sum())
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return Difference(value, value - z * se, value + z * se)


def mean_interval(losses: np.ndarray, tokens: np.ndarray, seed: int = 0) -> Difference:
    """The mean loss (nats/token) of per-document summed `losses` with its LEVEL bootstrap
    interval over documents (a difference from zero loss)."""
    return paired_difference(losses, np.zeros_like(losses), tokens, seed)


def lower_verdict(differences: list[Difference]) -> str:
    """For a claim that each difference is negative (the first arm has the lower loss): "agrees"
    when every interval lies below 0 and every pool's difference is negative; "disagrees" when
    some interval lies above 0 with every pool's difference positive; else "undetermined". An arm
    whose loss might still fall (censored) cannot be the one found worse: it blocks "agrees" as
    the second arm and "disagrees" as the first."""
    if any(d.low > 0 and all(p > 0 for p in d.per_pool) and not d.censored[0] for d in differences):
        return "disagrees"
    if all(
        d.high < 0 and all(p < 0 for p in d.per_pool) and not d.censored[1] for d in differences
    ):
        return "agrees"
    return "undetermined"


def describe(name: str, difference: Difference) -> str:
    """ "repack - shuffle -0.012 [-0.020, -0.004]" (nats/token, LEVEL interval; "no interval"
    with too few documents), with the per-pool differences when there are several pools and which
    arm is censored (its loss might still fall: Difference)."""
    value, low, high, per_pool, censored = difference
    if np.isnan(value):
        return f"{name}: not measured"
    interval = "no interval" if np.isinf(low) else f"{low:+.3f}, {high:+.3f}"
    pools = f" (pools {', '.join(f'{p:+.3f}' for p in per_pool)})" if len(per_pool) > 1 else ""
    arms = {(True, False): "first arm", (False, True): "second arm", (True, True): "both arms"}
    if any(censored):
        pools += f" (censored: {arms[tuple(censored)]})"
    return f"{name} {value:+.3f} [{interval}]{pools}"
