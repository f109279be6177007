"""The claims of notebook 05 (critical batch size; `cbs_claims`): "agrees", "disagrees" or
"undetermined", each by a rule stated where the claim is built, and read off intervals over pools
(or pool seeds) of the fits (repro.analysis.cbs), of the noise scale's growth
(repro.analysis.noise) and of the batch-size schedules against the best fixed batch
(repro.analysis.batch_schedules). Loss differences come with held-out paired intervals over pools
and validation documents (repro.analysis.selection), and their numbers in the claim table (the
fits' rows leave them empty: intervals.Claim.numbers). The study's epoch cap changes nothing here:
the noise-scale runs copy a tuned run (its choice, not its censoring), and the schedules meet the
fixed batches at one slice (no budget tuned).

Units: batch sizes are sequences; losses are nats/token; "log steps" are natural logs of optimizer
steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.analysis.batch_schedules import ScheduleComparison
from repro.analysis.cbs import FAILED, FITTED, fit_intervals, interval_of
from repro.analysis.intervals import (
    MIN_REPLICATES,
    NOT_MEASURED,
    Claim,
    Difference,
    claim_table,
    describe,
    lower_verdict,
)
from repro.analysis.noise import growth_intervals
from repro.design.presets import pool_label

NOISE_GROWTH = 1.5
"""The noise-scale claim agrees when the 90% interval over pools of B_simple's growth (last third
over first third of the evaluations up to the best val loss, noise_growth) lies at or above this
factor for every noise-scale batch."""
RESIDUAL_TOLERANCE = 0.3
"""Largest log distance (a factor 1.35 in steps) between the hyperbola fit and a point's resolution
bracket (resolution_miss) that still counts as fitting: the interval over pools of each pool's
largest miss must lie at or below it to agree, and above it to disagree."""
ZHANG_ALPHA = 0.47
"""Zhang et al.'s exponent of B* ~ D^alpha."""
ZHANG_BAND = (0.25, 0.75)
"""An exponent interval inside this band agrees with Zhang et al.'s 0.47 (a wider one cannot tell
it from no growth or from linear growth)."""
B_SIMPLE_FACTOR = 3.0
"""McCandlish et al.'s B_simple predicts B_crit within this factor: the interval over pools of
B_simple / B_crit must lie within [1 / factor, factor] to agree, and outside it to disagree."""
NO_FIT = "fewer than 3 batch sizes reach the target on any pool (no fit)"
RATIO = ".3g"  # how batch sizes, ratios and growth factors are printed (intervals.describe)


def _undecided(d: Difference, name: str, replicate: str = "pool") -> str:
    """Why an interval over pools (or pool seeds: `replicate`) cannot decide ("" when it can): too
    few of them, or one without a finite value."""
    if d.decisive:
        return ""
    if not d.per_replicate:
        return f"; {name} not measured"
    if not np.isfinite(d.per_replicate).all():
        return f"; {name} not finite on every {replicate}"
    return f"; {name} on fewer than {MIN_REPLICATES} {replicate}s"


def _fit_failed(rows: pd.DataFrame, name: str) -> str:
    """Where a pool's fit of `name` (or of the quantity its first word names: "B_simple" of
    "B_simple / B_crit") left its physical range (the FAILED column, cbs.physical_range): "fit
    failed: B_min < 0 on pool 0, pool 1"; "" where none did."""
    failed = {}
    for pool, texts in zip(rows["pool"], rows.get(FAILED, pd.Series("", rows.index)).fillna("")):
        for text in filter(None, texts.split("; ")):
            if text.split()[0] == name.split()[0]:
                failed.setdefault(text, []).append(pool_label(pool))
    return "; ".join(f"fit failed: {t} on {', '.join(p)}" for t, p in failed.items())


def _quantity(
    rows: pd.DataFrame, name: str, d: Difference, fmt: str = RATIO, fitted: str | None = None
) -> str:
    """describe(name, d), or, where a pool's fit of `fitted` (default `name`) left its physical
    range, that it failed (never a number outside the range)."""
    failed = _fit_failed(rows, fitted or name)
    return f"{name}: {failed}" if failed else describe(name, d, fmt)


def _noise_verdict(growth: dict[int, Difference]) -> tuple[str, str]:
    """Agrees when, for every noise-scale batch, the interval over pools of B_simple's growth lies
    at or above NOISE_GROWTH while the loss falls; disagrees when for some batch it lies at or
    below 1 (no rise); else undetermined, with the reason."""
    reasons = "".join(_undecided(d, f"batch {b}'s growth") for b, d in growth.items())
    if not growth or reasons:
        return "undetermined", reasons or "; no noise-scale evaluations"
    if any(d.high <= 1 for d in growth.values()):
        return "disagrees", ""
    if all(d.low >= NOISE_GROWTH for d in growth.values()):
        return "agrees", ""
    return "undetermined", f"; an interval reaches below x{NOISE_GROWTH:g}"


def _noise_scale_claim(growth: pd.DataFrame, model: str) -> Claim:
    intervals = growth_intervals(growth)
    batches = [int(b) for b in intervals["batch_size"]]
    per_batch = {b: interval_of(intervals, "ratio", batch_size=b) for b in batches}
    verdict, why = _noise_verdict(per_batch)
    runs = "; ".join(
        _quantity(growth[growth["batch_size"] == b], f"batch {b}", d, fitted="B_simple")
        for b, d in per_batch.items()
    )
    return Claim(
        "noise-scale-grows",
        "the gradient noise scale grows as the loss falls (McCandlish et al.)",
        "yes",
        f"model {model}: B_simple's growth, the median of the last over the first third of each "
        f"pool's evaluations up to its best val loss (geometric mean and 90% interval over "
        f"pools): {runs or 'not measured'}{why}",
        verdict,
    )


def _judged(fits: pd.DataFrame) -> tuple[float, pd.DataFrame, pd.DataFrame] | None:
    """The judged (middle) target of `fits` (fit_targets), its rows and its FITTED intervals over
    pools; None where no pool has a fit there."""
    if fits.empty or "B_crit" not in fits:
        return None
    targets = sorted(fits["target"].unique())
    target = targets[len(targets) // 2]
    rows = fits[fits["target"] == target]
    if rows["B_crit"].isna().all():
        return None
    return target, rows, fit_intervals(rows)


def _batches(rows: pd.DataFrame) -> tuple[float, float]:
    """The batch sizes (sequences) every pool's fit measured: (largest smallest, smallest
    largest)."""
    return float(rows["smallest batch"].max()), float(rows["largest batch"].min())


def _hyperbola_verdict(rows: pd.DataFrame, q: dict[str, Difference]) -> tuple[str, str]:
    """With intervals over pools: disagrees when the misses beyond each point's resolution bracket
    lie above RESIDUAL_TOLERANCE (log steps), or, with B_crit located, B_simple / B_crit lies
    outside [1 / B_SIMPLE_FACTOR, B_SIMPLE_FACTOR]; agrees when B_crit lies inside the batches
    every pool measured, the misses at or below the tolerance and the ratio inside that range;
    else undetermined, with the reason."""
    crit, miss, ratio = q["B_crit"], q["max log miss"], q["B_simple / B_crit"]
    smallest, largest = _batches(rows)
    if miss.decisive and miss.low > RESIDUAL_TOLERANCE:
        return "disagrees", f"; steps miss the hyperbola by more than e^{RESIDUAL_TOLERANCE}"
    open_ = _undecided(crit, "B_crit") + _undecided(miss, "the miss")
    if open_:
        return "undetermined", open_
    if crit.high > largest:
        return "undetermined", "; B_crit may lie above the largest batch (steps never level off)"
    if crit.low < smallest:
        return "undetermined", "; B_crit may lie below the smallest batch (steps already level)"
    if _undecided(ratio, "B_simple / B_crit"):
        return "undetermined", _undecided(ratio, "B_simple / B_crit")
    near = (1 / B_SIMPLE_FACTOR, B_SIMPLE_FACTOR)
    if ratio.high < near[0] or ratio.low > near[1]:
        return "disagrees", f"; B_simple is more than x{B_SIMPLE_FACTOR:g} away from B_crit"
    if near[0] <= ratio.low and ratio.high <= near[1] and miss.high <= RESIDUAL_TOLERANCE:
        return "agrees", ""
    return "undetermined", "; an interval of B_simple / B_crit or of the miss spans a limit"


def _hyperbola_claim(fits: pd.DataFrame, model: str) -> Claim:
    claim = "steps fall ~1/B below B_crit and level off above it (S = S_min + E_min/B)"
    paper = "yes, with B_crit near B_simple (McCandlish et al.)"
    judged = _judged(fits)
    if judged is None:
        return Claim("hyperbola", claim, paper, f"model {model}: {NO_FIT}", "undetermined")
    target, rows, intervals = judged
    q = {name: interval_of(intervals, name) for name in FITTED}
    verdict, why = _hyperbola_verdict(rows, q)
    smallest, largest = _batches(rows)
    censored = int(rows["left-censored"].sum())
    left_out = (
        f" ({censored} points reached it at a first evaluation: not fitted)" if censored else ""
    )
    measured = "; ".join(
        [
            f"model {model}, target {target}: {_quantity(rows, 'B_crit', q['B_crit'])} over "
            f"batches {smallest:g}-{largest:g}{left_out}",
            _quantity(rows, "B_simple", q["B_simple"]),
            _quantity(rows, "B_simple / B_crit", q["B_simple / B_crit"]),
            describe("max log miss beyond evaluation resolution", q["max log miss"], ".2f"),
        ]
    )
    measured += f" (90% intervals over pools){why}"
    return Claim("hyperbola", claim, paper, measured, verdict)


def _data_scaling_verdict(scaling: pd.DataFrame, alpha: Difference) -> tuple[str, str]:
    """Undetermined when B* lies beyond the largest batch reaching a pool's target (an
    extrapolation) or the exponent has no decisive interval over pool seeds; else disagrees when
    the interval excludes ZHANG_ALPHA, agrees when it lies inside ZHANG_BAND, undetermined when it
    is wider than the band."""
    beyond = scaling[scaling["B*"] > scaling["largest batch"]]
    if len(beyond):
        pools = ", ".join(f"seed {s}: {t:,}" for s, t in zip(beyond["seed"], beyond["pool tokens"]))
        return "undetermined", (
            f" (B* lies beyond the largest batch reaching the target on the pools of {pools} "
            "tokens: an extrapolation)"
        )
    if not alpha.decisive:
        return "undetermined", f" ({_undecided(alpha, 'the exponent', 'pool seed')[2:]})"
    if not alpha.low <= ZHANG_ALPHA <= alpha.high:
        return "disagrees", ""
    if ZHANG_BAND[0] <= alpha.low and alpha.high <= ZHANG_BAND[1]:
        return "agrees", ""
    band = f"{ZHANG_BAND[0]:g} to {ZHANG_BAND[1]:g}"
    return "undetermined", f" (interval not inside {band}: exponent not pinned down)"


def _data_scaling_claim(scaling: pd.DataFrame, laws: dict[str, Difference], model: str) -> Claim:
    claim = "B* (20% over linear scaling) grows with data size as D^0.47 (Zhang et al.)"
    paper = f"alpha = {ZHANG_ALPHA}"
    if scaling.empty:
        measured = f"model {model}: no pools of several sizes"
        return Claim("data-scaling", claim, paper, measured, "undetermined")
    alpha = laws.get("B*", NOT_MEASURED)
    verdict, why = _data_scaling_verdict(scaling, alpha)
    tokens, per_seed = scaling["pool tokens"], scaling.groupby("seed").size().max()
    measured = (
        f"model {model}: {describe('alpha', alpha, '.2f')}, fitted per pool seed over its "
        f"{per_seed} pools of {tokens.min():,} to {tokens.max():,} tokens (90% t interval over "
        f"{scaling['seed'].nunique()} seeds; B_crit: "
        f"{describe('alpha', laws.get('B_crit', NOT_MEASURED), '.2f')}){why}"
    )
    return Claim("data-scaling", claim, paper, measured, verdict)


def _wsd_verdict(
    rows: pd.DataFrame, b_opt: Difference, b_min: Difference, lr_schedule: str
) -> tuple[str, str]:
    """Undetermined unless the runs are WSD. Then, with intervals over pools: agrees when B_opt's
    lies inside the batches every pool measured and B_min's above 0; undetermined when a pool's
    B_min fit failed (a negative B_min: cbs.physical_range) or without decisive intervals."""
    if lr_schedule != "wsd":
        return "undetermined", f" ({lr_schedule} runs here, Zhou et al. fit WSD)"
    smallest, largest = _batches(rows)
    if _fit_failed(rows, "B_min"):
        return "undetermined", " (tokens to target still fall down to the smallest batch)"
    if not b_min.decisive:
        return "undetermined", f" ({_undecided(b_min, 'B_min')[2:]})"
    located = b_opt.decisive and smallest <= b_opt.low and b_opt.high <= largest
    if located and b_min.low > 0:
        return "agrees", ""
    return "undetermined", " (B_opt or B_min not located in the measured batches)"


def _wsd_claim(fits: pd.DataFrame, lr_schedule: str, model: str) -> Claim:
    claim = "a minimum batch B_min and a token-optimal batch B_opt exist (Zhou et al.)"
    paper = "yes (WSD schedule)"
    judged = _judged(fits)
    if judged is None:
        return Claim("wsd-batches", claim, paper, f"model {model}: {NO_FIT}", "undetermined")
    target, rows, intervals = judged
    b_opt, b_min = interval_of(intervals, "B_opt"), interval_of(intervals, "B_min")
    verdict, why = _wsd_verdict(rows, b_opt, b_min, lr_schedule)
    fewest = "; ".join(rows["fewest tokens at batch"].dropna())
    measured = (
        f"model {model}, target {target}: {_quantity(rows, 'B_opt', b_opt)}, "
        f"{_quantity(rows, 'B_min', b_min)} (90% intervals over pools); fewest tokens at "
        f"batch {fewest} (per pool){why}"
    )
    return Claim("wsd-batches", claim, paper, measured, verdict)


def _schedule_claim(schedules: ScheduleComparison, model: str) -> Claim:
    """lower_verdict of the best schedule minus the best fixed batch (held-out paired interval)."""
    return Claim(
        "schedule-beats-fixed",
        "a batch-size schedule beats the best fixed batch (Zhou et al.: ramp-up)",
        "yes",
        f"model {model}: {describe(schedules.label, schedules.difference)} nats/token (90% "
        "interval over pools and validation documents; both arms held out, and each pool's "
        "slice chosen on the other pools)",
        lower_verdict([schedules.difference]),
        schedules.difference,
    )


def cbs_claims(
    growth: pd.DataFrame,
    fits: pd.DataFrame,
    scaling: pd.DataFrame,
    laws: dict[str, Difference],
    schedules: ScheduleComparison,
    lr_schedule: str,
    model: str,
) -> pd.DataFrame:
    """Claims of the critical-batch section, all measured on one model size (`model`), each read
    off intervals over pools: `growth`: noise_growth; `fits`: fit_targets (the middle target is
    judged); `scaling` / `laws`: pool_size_scaling / scaling_laws; `schedules`:
    schedules_vs_fixed; `lr_schedule`: the lr schedule of the batch sweep ("cosine", "wsd"). Each
    helper's docstring states its rule."""
    claims = [
        _noise_scale_claim(growth, model),
        _hyperbola_claim(fits, model),
        _data_scaling_claim(scaling, laws, model),
        _wsd_claim(fits, lr_schedule, model),
        _schedule_claim(schedules, model),
    ]
    return claim_table(claims)
