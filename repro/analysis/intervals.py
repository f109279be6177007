"""Differences of mean validation loss over replicates and documents, and three-way verdicts.

Every run evaluates the same validation documents (pools share them), and each evaluation stores
each document's summed loss (nats) and scored tokens (repro.analysis.results.Results.documents). A
comparison has one row per *replicate* (an independent pool, or seed) and one column per document:
the summed-loss gap between the two arms. Its interval is a t interval for the replicate-mean gap
(nats/token) whose variance has both sources of noise of a crossed replicates x documents design:

    var = (MS_replicates + MS_documents - MS_interaction) / (R N)

(mean squares of the token-weighted, linearised gaps; never below either main term alone), with
Welch-Satterthwaite degrees of freedom, so that 2-3 replicates give the wide interval they should.
Documents count by their Kish effective number under token weights. A verdict is definite only with
at least MIN_REPLICATES replicates. Each difference states its power: the smallest effect its spread
decides at POWER (`Difference.mde`), and roughly how many replicates the observed one would need.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from repro.analysis.confirmation import PAST_CAP
from repro.errors import ReproError

CLAIM_TEXT = ["claim", "paper", "measured here", "agrees?"]
CLAIM_NUMBERS = ["effect", "low", "high", "level", "n", "mde", "pools_needed"]  # Claim.numbers
CLAIM_PAST = ["at_cap", "past_cap"]  # some arm of the hinge at the epoch cap; the verdict past it
CLAIM_COLUMNS = [*CLAIM_TEXT, *CLAIM_NUMBERS, *CLAIM_PAST]  # every notebook's claim table
LEVEL = 0.9  # two-sided interval level
POWER = 0.8  # the power at which Difference.mde is decided
MIN_DOCUMENTS = 10  # fewer scored documents give no interval
MIN_REPLICATES = 3  # fewer replicates give no definite verdict


class Difference(NamedTuple):
    """A difference of mean losses (nats/token) a - b averaged over replicates, its `level`
    interval ((-inf, inf) when there is none) with its t degrees of freedom `df` (NaN: not known),
    the difference on each replicate, and for each arm whether it is censored (its chosen epoch
    budget is the largest tried but below the study's cap, or its lr or weight decay is not
    bracketed by runs on both sides: that arm's loss might still fall) and whether its chosen
    budget is the cap (`at_cap`: the verdict holds within the budgets the study allows)."""

    value: float
    low: float
    high: float
    per_replicate: tuple[float, ...] = ()
    censored: tuple[bool, bool] = (False, False)
    at_cap: tuple[bool, bool] = (False, False)
    df: float = np.nan
    level: float = LEVEL

    def negated(self) -> Difference:
        """The difference the other way round (b - a)."""
        return self._replace(
            value=-self.value,
            low=-self.high,
            high=-self.low,
            per_replicate=tuple(-d for d in self.per_replicate),
            censored=self.censored[::-1],
            at_cap=self.at_cap[::-1],
        )

    @property
    def decisive(self) -> bool:
        """Measured, with an interval, on at least MIN_REPLICATES replicates."""
        return (
            len(self.per_replicate) >= MIN_REPLICATES and np.isfinite([self.low, self.high]).all()
        )

    @property
    def standard_error(self) -> float:
        """The interval's half-width over its t quantile (nats/token); NaN without an interval or
        degrees of freedom."""
        if not (np.isfinite([self.low, self.high]).all() and self.df > 0):
            return np.nan
        return (self.high - self.low) / 2 / float(stats.t.ppf(0.5 + self.level / 2, self.df))

    @property
    def mde(self) -> float:
        """The smallest effect (nats/token) that an interval of this spread excludes 0 from with
        POWER: (t_{(1 + level) / 2} + t_POWER) x standard error, both at df."""
        return _power_quantiles(self.df, self.level) * self.standard_error

    def replicates_needed(self, threshold: float = 0.0) -> float:
        """Roughly how many replicates would tell an effect as large as the observed one from
        `threshold` (nats/token) with POWER, each replicate as noisy as these: the standard error
        shrinks as 1 / sqrt(n) and df grows as n - 1 does. NaN where this interval already
        excludes `threshold`, or without a spread (fewer than 2 replicates) or an effect."""
        n, effect, se = len(self.per_replicate), abs(self.value - threshold), self.standard_error
        if n < 2 or not effect > 0 or not np.isfinite(se) or not self.low <= threshold <= self.high:
            return np.nan

        def enough(m: int) -> bool:
            quantiles = _power_quantiles(self.df * (m - 1) / (n - 1), self.level)
            return effect >= quantiles * se * np.sqrt(n / m)

        fewer, more = n, 2 * n  # not enough at n: the interval covers `threshold`
        while not enough(more):
            fewer, more = more, 2 * more
        while more - fewer > 1:
            middle = (fewer + more) // 2
            fewer, more = (fewer, middle) if enough(middle) else (middle, more)
        return float(more)


def _power_quantiles(df: float, level: float) -> float:
    """t_{(1 + level) / 2} + t_POWER at `df` degrees of freedom (NaN without them)."""
    if not df > 0:
        return np.nan
    return float(stats.t.ppf(0.5 + level / 2, df) + stats.t.ppf(POWER, df))


NOT_MEASURED = Difference(np.nan, -np.inf, np.inf)


def effective_documents(tokens: np.ndarray) -> float:
    """Kish's effective number of documents under token weights: (sum t)^2 / sum t^2."""
    tokens = np.asarray(tokens, float)
    return float(tokens.sum() ** 2 / max((tokens**2).sum(), 1e-300))


def _mean_squares(linear: np.ndarray) -> tuple[float, float, float]:
    """Mean squares (replicates, documents, interaction) of an R x N table."""
    R, N = linear.shape
    grand, rows, cols = linear.mean(), linear.mean(1), linear.mean(0)
    ms_r = N * ((rows - grand) ** 2).sum() / max(R - 1, 1)
    ms_d = R * ((cols - grand) ** 2).sum() / (N - 1)
    residual = linear - rows[:, None] - cols[None, :] + grand
    ms_e = (residual**2).sum() / max((R - 1) * (N - 1), 1)
    return float(ms_r), float(ms_d), float(ms_e)


def _variance(linear: np.ndarray, n_eff: float, held_out: bool) -> tuple[float, float]:
    """(variance of the grand mean of `linear` (R x N), its Satterthwaite degrees of freedom);
    documents carry n_eff - 1 degrees of freedom. `held_out`: each replicate's value was chosen
    on the other replicates, which makes the values covary: the replicate term is inflated by
    Nadeau and Bengio's factor for R folds trained on R - 1, (1/R + 1/(R-1)) / (1/R)."""
    R, N = linear.shape
    ms_r, ms_d, ms_e = _mean_squares(linear)
    if held_out and R > 1:
        ms_r *= 1 + R / (R - 1)
    df_r, df_d, df_e = R - 1, max(n_eff - 1, 1), max((R - 1) * (n_eff - 1), 1)
    if R == 1:
        terms = [(ms_d, df_d)]
    else:
        combined = [(ms_r, df_r), (ms_d, df_d), (-ms_e, df_e)]
        options = [combined, [(ms_r, df_r)], [(ms_d, df_d)]]
        terms = max(options, key=lambda t: sum(m for m, _ in t))
    total = sum(m for m, _ in terms)
    if total <= 0:
        return 0.0, float(df_r if R > 1 else df_d)
    df = total**2 / sum(m**2 / d for m, d in terms)
    return total / (R * N), float(df)


def replicate_difference(
    gaps: np.ndarray, tokens: np.ndarray, level: float = LEVEL, held_out: bool = False
) -> Difference:
    """The replicate-mean gap (nats/token) of per-document summed-loss `gaps` (R replicates x N
    documents, each document scoring `tokens`) with its `level` t interval over replicates and
    documents (module docstring; `held_out`: the replicates' values were chosen on each other,
    _variance); (-inf, inf) with fewer than MIN_DOCUMENTS scored documents."""
    gaps, tokens = np.atleast_2d(np.asarray(gaps, float)), np.asarray(tokens, float)
    if gaps.shape[1] != len(tokens):
        raise ReproError("gaps and tokens must cover the same validation documents")
    scored = tokens > 0
    gaps, tokens = gaps[:, scored], tokens[scored]
    per_replicate = gaps.sum(1) / tokens.sum()
    value = float(per_replicate.mean())
    replicates = tuple(float(d) for d in per_replicate)
    if len(tokens) < MIN_DOCUMENTS or not np.isfinite(value):
        return Difference(value, -np.inf, np.inf, replicates, level=level)
    # linearised per-document contributions of each replicate's ratio, centred on its own ratio,
    # plus that ratio: row means are the replicates' differences, columns the documents' noise
    n = len(tokens)
    linear = per_replicate[:, None] + n * (gaps - per_replicate[:, None] * tokens) / tokens.sum()
    variance, df = _variance(linear, effective_documents(tokens), held_out)
    half = float(stats.t.ppf(0.5 + level / 2, df) * np.sqrt(variance))
    return Difference(value, value - half, value + half, replicates, df=df, level=level)


def paired_difference(
    a: np.ndarray, b: np.ndarray, tokens: np.ndarray, level: float = LEVEL
) -> Difference:
    """Mean loss of `a` minus that of `b` (nats/token): per-document summed losses over the same
    documents, one row per replicate (or one evaluation each), with replicate_difference's
    interval."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    if a.shape != b.shape or a.shape[1] != len(tokens):
        raise ReproError("paired losses must cover the same validation documents")
    return replicate_difference(a - b, tokens, level)


def mean_interval(losses: np.ndarray, tokens: np.ndarray) -> Difference:
    """The mean loss (nats/token) of per-document summed `losses` (one row per replicate) with its
    LEVEL interval over replicates and documents (a difference from zero loss)."""
    return replicate_difference(losses, tokens)


def t_interval(values: list[float], level: float = LEVEL, held_out: bool = False) -> Difference:
    """The mean of per-replicate `values` (e.g. final training losses, which have no documents)
    with its `level` t interval over replicates; (-inf, inf) with fewer than two. `held_out`:
    each value was chosen on the other replicates, which makes them covary: the variance is
    inflated by Nadeau and Bengio's factor, as _variance does."""
    values = np.asarray(values, float)
    replicates = tuple(float(v) for v in values)
    if len(values) == 0:
        return NOT_MEASURED
    n = len(values)
    mean, df = float(values.mean()), n - 1
    if n < 2:
        return Difference(mean, -np.inf, np.inf, replicates, level=level)
    inflation = np.sqrt(1 + n / (n - 1)) if held_out else 1.0
    half = float(stats.t.ppf(0.5 + level / 2, df) * inflation * values.std(ddof=1) / np.sqrt(n))
    return Difference(mean, mean - half, mean + half, replicates, df=float(df), level=level)


class Claim(NamedTuple):
    """One row of a notebook's claim table. `key` names the claim for code and tests (stable,
    unlike its prose), such as "u-shape/cpu-xs"; `verdict` is agrees, disagrees or undetermined;
    `difference` is the loss difference the verdict hinges on (hinge; None for a claim without
    one: a count, a fit), which the verdict tells from `threshold` (nats/token)."""

    key: str
    claim: str
    paper: str
    measured: str
    verdict: str
    difference: Difference | None = None
    threshold: float = 0.0

    def at(self, where: str) -> Claim:
        """The claim made at one model size (or other setting `where`): "/<where>" after its key,
        " (<where>)" after its prose."""
        return self._replace(key=f"{self.key}/{where}", claim=f"{self.claim} ({where})")

    @property
    def headline(self) -> str:
        """The claim and what this run found, for a figure's title: "<claim>: <verdict>", then
        the difference and its interval where the claim has one."""
        d = self.difference
        if d is None or not np.isfinite(d.value):
            return f"{self.claim}: {self.verdict}"
        bounds = f" [{d.low:+.3f}, {d.high:+.3f}]" if np.isfinite([d.low, d.high]).all() else ""
        return f"{self.claim}: {self.verdict}, {d.value:+.3f}{bounds}"

    @property
    def at_cap(self) -> bool:
        """Whether an arm of its difference chose the study's epoch cap (Difference.at_cap)."""
        return self.difference is not None and any(self.difference.at_cap)

    def numbers(self) -> dict[str, float]:
        """The CLAIM_NUMBERS of its difference (NaN without one): the effect, its interval and
        level, n (the replicate values it is over), its mde and, where the claim is undetermined,
        roughly how many pools (replicates) the observed effect would need
        (Difference.replicates_needed from `threshold`)."""
        d = self.difference
        if d is None:
            return dict.fromkeys(CLAIM_NUMBERS, np.nan)
        open_ = self.verdict == "undetermined"
        needed = d.replicates_needed(self.threshold) if open_ else np.nan
        return {"effect": d.value, "low": d.low, "high": d.high, "level": d.level} | {
            "n": len(d.per_replicate),
            "mde": d.mde,
            "pools_needed": needed,
        }


def claim_table(claims: list[Claim]) -> pd.DataFrame:
    """Claims as a table of CLAIM_COLUMNS indexed by key (saved tables leave the index out): the
    text, then the numbers (Claim.numbers; n as integers, empty where there is none), whether an
    arm is at the epoch cap (Claim.at_cap) and the verdict past the cap (filled in by
    Study.confirmed where the preset confirms; else empty)."""
    keys = [c.key for c in claims]
    if len(set(keys)) < len(keys):
        raise ValueError(f"claim keys repeat: {sorted(k for k in keys if keys.count(k) > 1)}")
    rows = [
        [c.claim, c.paper, c.measured, c.verdict, *c.numbers().values(), c.at_cap, ""]
        for c in claims
    ]
    table = pd.DataFrame(rows, columns=CLAIM_COLUMNS, index=pd.Index(keys, name="key"))
    return table.astype({"n": "Int64"})


def shown_claims(claims: pd.DataFrame) -> pd.DataFrame:
    """A claim table as its Markdown shows it: the text (the effect and interval are in "measured
    here"), then n, mde (3 decimals), pools needed and the verdict past the cap where some claim
    has them."""
    shown = claims[CLAIM_TEXT].copy()
    numbers = {
        "n": claims["n"].map(lambda v: "" if pd.isna(v) else f"{v}"),
        "mde": claims["mde"].map(lambda v: "" if pd.isna(v) else f"{v:.3f}"),
        "pools needed": claims["pools_needed"].map(lambda v: "" if pd.isna(v) else f"{v:,.0f}"),
    }
    numbers[f"past the cap ({PAST_CAP}x)"] = claims["past_cap"].fillna("")
    return shown.assign(**{name: col for name, col in numbers.items() if (col != "").any()})


def claim_count(claims: pd.DataFrame) -> str:
    """ "12 claims tested, 3 decided: 2 agree, 1 disagrees, 9 undetermined" of a claim table."""
    counts = claims["agrees?"].value_counts()
    agree, disagree = counts.get("agrees", 0), counts.get("disagrees", 0)
    return (
        f"{len(claims)} {'claim' if len(claims) == 1 else 'claims'} tested, "
        f"{agree + disagree} decided: {agree} {'agrees' if agree == 1 else 'agree'}, "
        f"{disagree} {'disagrees' if disagree == 1 else 'disagree'}, "
        f"{counts.get('undetermined', 0)} undetermined"
    )


VERDICT_WORDS = {
    "agrees": "the data agree",
    "disagrees": "the data disagree",
    "undetermined": "not decided",
}


def claim_summary(preset: str, claims: list[pd.DataFrame]) -> str:
    """A notebook's closing summary in Markdown, generated from its claim tables: the verdict
    counts, then one sentence per claim (its verdict, the claim, what was measured)."""
    table = pd.concat(claims)
    lines = [f"**What preset {preset} showed.** {claim_count(table)}.", ""]
    for _, claim in table.iterrows():
        verdict = VERDICT_WORDS[claim["agrees?"]].capitalize()
        lines.append(f"- {verdict}: {claim['claim']}. Measured: {claim['measured here']}.")
    return "\n".join(lines)


def lower_verdict(differences: list[Difference]) -> str:
    """For a claim that each difference is negative (the first arm has the lower loss): "agrees"
    when every interval lies below 0; "disagrees" when some interval lies above 0; "undetermined"
    otherwise, with no difference, or when any is not decisive (fewer than MIN_REPLICATES
    replicates or no interval). An arm whose loss might still fall (censored) cannot be the one
    found worse: it blocks "agrees" as the second arm and "disagrees" as the first."""
    if not differences or not all(d.decisive for d in differences):
        return "undetermined"
    if any(d.low > 0 and not d.censored[0] for d in differences):
        return "disagrees"
    if all(d.high < 0 and not d.censored[1] for d in differences):
        return "agrees"
    return "undetermined"


def hinge(differences: list[Difference]) -> Difference | None:
    """The difference that lower_verdict's verdict over `differences` hinges on: one that is not
    decisive; else, of those that contradict the claim (above 0, first arm not censored), the
    clearest (largest |value| / width); else the least clear. None for none (a Claim without a
    difference)."""
    if not differences:
        return None
    if not all(d.decisive for d in differences):
        return next(d for d in differences if not d.decisive)
    against = [d for d in differences if d.low > 0 and not d.censored[0]]
    return max(against, key=_clearness) if against else min(differences, key=_clearness)


def _clearness(d: Difference) -> float:
    """How clearly an interval tells its value from 0: |value| / its width."""
    return abs(d.value) / max(d.high - d.low, 1e-300)


ARMS = {(True, False): "first arm", (False, True): "second arm", (True, True): "both arms"}


def describe(name: str, difference: Difference, fmt: str = "+.3f") -> str:
    """ "repack - shuffle -0.012 [-0.020, -0.004] (replicates -0.010, -0.015, -0.011)" (nats/token,
    LEVEL interval; "no interval" where there is none), which arm is censored (its loss might
    still fall) and which is at the study's epoch cap (the verdict holds within it: Difference).
    `fmt` formats the numbers (".3g" for batch sizes and ratios); a value that some replicate
    leaves undetermined reads "not determined"."""
    value, low, high, per_replicate = difference[:4]
    if np.isnan(value) and not per_replicate:
        return f"{name}: not measured"
    shown = "not determined" if np.isnan(value) else f"{value:{fmt}}"
    interval = "no interval" if np.isinf(low) else f"{low:{fmt}}, {high:{fmt}}"
    values = ", ".join(f"{p:{fmt}}" for p in per_replicate)
    replicates = f" (replicates {values})" if len(per_replicate) > 1 else ""
    if len(per_replicate) < MIN_REPLICATES:
        replicates += f" ({len(per_replicate)} of {MIN_REPLICATES} replicates: no verdict)"
    for note, arms in (("censored", difference.censored), ("at cap", difference.at_cap)):
        if any(arms):
            replicates += f" ({note}: {ARMS[tuple(arms)]})"
    return f"{name} {shown} [{interval}]{replicates}"
