"""Critical batch size: steps-to-target curves and their fits, the noise-scale trajectory,
batch-size schedules against the best fixed batch, and the claims of notebook 05 (the gradient
noise scale that the trainer logs is computed in repro.runtime.noise_scale).

Units: batch sizes are sequences (multiply by seq_len for tokens); S is optimizer steps; E is
training sequences consumed (S * B), reported as tokens where a column says so; losses are
nats/token.

- Steps-to-target: for a target loss, the fewest steps over a batch size's runs (lr, weight decay,
  epoch budget) at which the val loss reaches it, interpolated in log(step) between the last
  evaluation above it and the first at or below it (evaluations fall once per epoch on the CPU
  presets: without it every batch reaching a target in the same epoch gives S ~ 1/B exactly). A
  target reached at a run's first evaluation has no bracket: left-censored, left out of the fits.
- Fits: McCandlish's hyperbola (S / S_min - 1)(E / E_min - 1) = 1, i.e. S(B) = S_min + E_min / B,
  fitted in log S, gives B_crit = E_min / S_min. Zhang et al. 2025 fit the same form
  S(B) = a + b / B in S and call critical the batch whose steps exceed linear scaling from the
  smallest batch by 20%: B* = 1.2 B_ref + 0.2 b / a. Zhou et al. 2026 (WSD) model E(S) piecewise
  (inverse, quadratic, linear tail); we fit its two later pieces: a parabola through the points
  nearest the fewest tokens gives B_opt = E_min / S_opt, and the linear tail E = A1 S + A0 of the
  smallest batches gives B_min = A1 (below it the target is not reached). Each fit comes with
  residuals and a bootstrap interval over the (batch, steps) points.
- Claims (`cbs_claims`): "agrees", "disagrees" or "undetermined", each by a rule stated where the
  claim is built; loss differences come with paired intervals over validation documents
  (repro.analysis.intervals), fitted quantities with bootstrap intervals.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from repro.analysis import selection
from repro.analysis.intervals import CLAIM_COLUMNS, Difference, describe, lower_verdict
from repro.analysis.results import REPLICATE_FIELDS, Results
from repro.errors import ReproError
from repro.runtime.config import make_run_config
from repro.runtime.loaders import epoch_steps

# --- steps to a target loss ---------------------------------------------------------------------


def crossing_step(
    previous_step: np.ndarray,
    previous_loss: np.ndarray,
    step: np.ndarray,
    loss: np.ndarray,
    target: float,
) -> np.ndarray:
    """The step (optimizer steps) at which the val loss, linear in log(step) between an evaluation
    above `target` (previous_step, previous_loss; nats/token) and the next one at or below it
    (step, loss), equals `target`; it lies in (previous_step, step]. Log(step), not step: a loss
    curve falls roughly as a power of the step, L_inf + A step^-alpha, convex in step: it lies
    below its chords, so a line in step places the crossing late, by much of a bracket as wide as
    an epoch (steps n to 2n); in log(step) the curve is far less curved (a line as alpha -> 0),
    and a bracket is a ratio, as the fits (in log S) read it."""
    fraction = (previous_loss - target) / (previous_loss - loss)
    return previous_step * (step / previous_step) ** fraction


def _first_reaching(points: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per run of `points` (evaluations with "previous step", "previous loss"): the first
    evaluation with val_loss <= target, with its "crossing step" (crossing_step) and
    "left-censored" (reached at the run's first evaluation: no previous loss to interpolate from;
    its crossing step is then that evaluation's step, an upper bound)."""
    reached = points[points["val_loss"] <= target].sort_values("step", kind="mergesort")
    first = reached.drop_duplicates("run_id").reset_index(drop=True)  # first() skips NaNs
    first["left-censored"] = first["previous loss"].isna()
    first["crossing step"] = first["step"].astype(float)
    inside = first[~first["left-censored"]]
    first.loc[inside.index, "crossing step"] = crossing_step(
        inside["previous step"], inside["previous loss"], inside["step"], inside["val_loss"], target
    )
    return first


def steps_to_target(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    targets: list[float],
    by: tuple[str, ...] = ("batch_size",),
    seq_len: int | None = None,
) -> pd.DataFrame:
    """For every group of `by` (batch size, and e.g. pool) and target: the fewest steps over the
    group's runs (every lr, weight decay and epoch budget) in which a run's val loss falls to the
    target, interpolated between its evaluations (_first_reaching). Columns (steps in optimizer
    steps): *by, target; steps, the run's first evaluation at or below the target, and previous
    step, its evaluation before (0 if none): the target was crossed in (previous step, steps];
    crossing step, the interpolated crossing (float) that the fits use; left-censored, reached at
    the run's first evaluation, the crossing step then that evaluation's, an upper bound (a batch
    size's runs share one evaluation grid, so such a run is its group's fewest); run_id;
    sequences and tokens consumed at the crossing step. Unreached targets are left out."""
    points = evals.dropna(subset=["val_loss"]).merge(
        runs[["run_id", *[c for c in by if c not in evals]]], on="run_id"
    )
    points = points.sort_values(["run_id", "step"])
    previous = points.groupby("run_id")[["step", "val_loss"]].shift(1)
    points["previous step"] = previous["step"].fillna(0).astype(int)
    points["previous loss"] = previous["val_loss"]
    rows = []
    for target in targets:
        for key, group in _first_reaching(points, target).groupby(list(by)):
            key = key if isinstance(key, tuple) else (key,)
            best = group.loc[group["crossing step"].idxmin()]
            rows.append(dict(zip(by, key)) | _target_row(best, target, seq_len))
    columns = [*by, "target", "steps", "previous step", "crossing step", "left-censored"]
    return pd.DataFrame(rows, columns=[*columns, "run_id", "sequences", "tokens"])


def _target_row(best: pd.Series, target: float, seq_len: int | None) -> dict:
    """The steps_to_target row (past the `by` columns) of run `best` (a _first_reaching row)."""
    crossing, batch = float(best["crossing step"]), int(best["batch_size"])
    per_step = seq_len * batch if seq_len else float(best["tokens"]) / int(best["step"])  # tokens
    return {
        "target": target,
        "steps": int(best["step"]),
        "previous step": int(best["previous step"]),
        "crossing step": crossing,
        "left-censored": bool(best["left-censored"]),
        "run_id": best["run_id"],
        "sequences": crossing * batch,
        "tokens": crossing * per_step,
    }


def reachable_target(runs: pd.DataFrame, evals: pd.DataFrame, n_batches: int) -> float:
    """The lowest validation loss (rounded up to 1e-3) that at least `n_batches` batch sizes
    reach."""
    best = (
        evals.merge(runs[["run_id", "batch_size"]], on="run_id")
        .groupby("batch_size")["val_loss"]
        .min()
        .sort_values()
    )
    return float(np.ceil(best.iloc[min(n_batches, len(best)) - 1] * 1000) / 1000)


# --- fits ---------------------------------------------------------------------------------------


def fit_mccandlish(batch: np.ndarray, steps: np.ndarray) -> dict:
    """S(B) = S_min + E_min / B fitted in log S (equal relative errors); B_crit = E_min / S_min
    (sequences)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)

    def residuals(log_params):
        s_min, e_min = np.exp(log_params)
        return np.log(s_min + e_min / batch) - np.log(steps)

    start = np.log([max(steps.min() * 0.5, 1e-9), max(steps.max() * batch.min() * 0.5, 1e-9)])
    fit = least_squares(residuals, start)
    s_min, e_min = np.exp(fit.x)
    return {"S_min": s_min, "E_min": e_min, "B_crit": e_min / s_min, "residuals": residuals(fit.x)}


def fit_zhang(
    batch: np.ndarray, steps: np.ndarray, b_ref: float | None = None, excess: float = 0.2
) -> dict:
    """S(B) = a + b / B by least squares in S (a, b >= 0); B* is where steps exceed linear scaling
    from b_ref (default the smallest batch) by `excess`:
    B* = (1 + excess) b_ref + excess * b / a."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    b_ref = batch.min() if b_ref is None else b_ref
    fit = least_squares(
        lambda p: p[0] + p[1] / batch - steps,
        [steps.min() * 0.5, steps.max() * batch.min() * 0.5],
        bounds=([0, 0], [np.inf, np.inf]),
    )
    a, b = float(fit.x[0]), float(fit.x[1])
    b_star = (1 + excess) * b_ref + excess * b / a if a > 0 else math.inf
    return {"a": a, "b": b, "B_star": b_star, "b_ref": b_ref, "residuals": fit.fun}


def fit_wsd(batch: np.ndarray, steps: np.ndarray) -> dict:
    """Zhou et al.'s later pieces of E(S) (E = S * B): a parabola E = C (S - S_opt)^2 + E_min
    through the three points nearest the fewest tokens gives B_opt = E_min / S_opt; a line
    E = A1 S + A0 through the points of the largest S (the two smallest batches) gives B_min = A1.
    NaN where the points do not determine a piece: the fewest tokens at an edge, or a parabola that
    opens downward or whose vertex lies outside its three points (the residuals of three points on
    a parabola are zero by construction; the bootstrap gives the spread). Repeated points (of a
    resample) count once: they add nothing to an interpolation."""
    points = np.unique(np.column_stack([steps, batch]).astype(float), axis=0)  # by steps
    s, e = points[:, 0], points[:, 0] * points[:, 1]
    out = {"B_opt": np.nan, "S_opt": np.nan, "E_min": np.nan, "B_min": np.nan}
    i = int(np.argmin(e))
    if 0 < i < len(s) - 1 and len(np.unique(s[i - 1 : i + 2])) == 3:
        window = slice(i - 1, i + 2)
        s_scale, e_scale = s[i], e[i]  # fit in units of the minimum point: well conditioned
        c2, c1, c0 = np.polyfit(s[window] / s_scale, e[window] / e_scale, 2)
        if c2 > 0:
            s_opt = -c1 / (2 * c2)
            e_min = c0 - c1**2 / (4 * c2)
            if s[i - 1] / s_scale <= s_opt <= s[i + 1] / s_scale and e_min > 0:
                out |= {
                    "S_opt": s_opt * s_scale,
                    "E_min": e_min * e_scale,
                    "B_opt": e_min * e_scale / (s_opt * s_scale),
                }
    if len(s) >= 2 and s[-1] > s[-2]:
        out["B_min"] = (e[-1] - e[-2]) / (s[-1] - s[-2])
    return out


MIN_BATCHES = 4
"""Fewest distinct batch sizes that give a bootstrap interval: with three, every resample that
keeps three batch sizes is the points themselves (a zero-width interval)."""


def _percentiles(values: list[float], undetermined: int, level: float) -> tuple[float, float]:
    """The `level` percentile interval of `values`; (nan, nan) when there are none, or when more
    than (1 - level) / 2 of all resamples left the value undetermined (an end could lie there)."""
    if not values or undetermined > (1 - level) / 2 * (len(values) + undetermined):
        return (np.nan, np.nan)
    lo, hi = np.quantile(
        values, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf"
    )  # sample values: no inf - inf
    return float(lo), float(hi)


def bootstrap(
    fit,
    batch: np.ndarray,
    steps: np.ndarray,
    key: str,
    n: int = 500,
    seed: int = 0,
    level: float = 0.9,
) -> tuple[float, float]:
    """Percentile interval of fit(batch, steps)[key] over resamples of the points (with
    replacement) that keep at least three distinct batch sizes. An infinite value (B_crit of
    points that never level off) counts; (nan, nan), not determined, with fewer than MIN_BATCHES
    distinct batch sizes or where the fit leaves the value NaN in too many resamples
    (_percentiles)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    if len(np.unique(batch)) < MIN_BATCHES:
        return (np.nan, np.nan)
    rng = np.random.default_rng(seed)
    values, undetermined = [], 0
    for _ in range(n):
        pick = rng.integers(0, len(batch), len(batch))
        if len(np.unique(batch[pick])) < 3:
            continue
        value = fit(batch[pick], steps[pick])[key]
        if np.isnan(value):
            undetermined += 1
        else:
            values.append(value)
    return _percentiles(values, undetermined, level)


def describe_interval(interval: tuple[float, float], limit: float) -> str:
    """An interval as "lo-hi", with an end beyond `limit` (e.g. 10x the largest batch measured, or
    infinite where resampled points never level off) read as unbounded; "not determined" where the
    bootstrap gave none."""
    lo, hi = interval
    if math.isnan(lo):
        return "not determined"
    if lo > limit:
        return f"unbounded (above {limit:g})"
    return f"{lo:.1f}-{hi:.1f}" if hi <= limit else f"{lo:.1f}-unbounded (above {limit:g})"


def power_law(x: np.ndarray, y: np.ndarray) -> dict:
    """y = c * x^alpha by least squares in log-log; returns alpha, c and the log residuals."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    alpha, log_c = np.polyfit(lx, ly, 1)
    return {"alpha": alpha, "c": math.exp(log_c), "residuals": ly - (alpha * lx + log_c)}


# --- targets and the fits per target ------------------------------------------------------------


def reach_count(n_batch_sizes: int) -> int:
    """How many batch sizes must reach a target: two thirds of the grid, at least three."""
    return max(3, round(2 * n_batch_sizes / 3))


def target_losses(
    runs: pd.DataFrame, evals: pd.DataFrame, n_batches: int, n_targets: int = 3
) -> list[float]:
    """Target validation losses (nats/token, rounded to 1e-3): the lowest that `n_batches` batch
    sizes reach (reachable_target), then evenly spaced up to 60% of the way to the best first
    evaluation."""
    hardest = reachable_target(runs, evals, n_batches)
    first_loss = float(evals.groupby("run_id")["val_loss"].first().min())
    top = hardest + 0.6 * (first_loss - hardest)
    return [round(t, 3) for t in np.linspace(hardest, top, n_targets)]


def b_simple_near(trajectory: pd.DataFrame, target: float) -> tuple[float, float]:
    """McCandlish's prediction of the critical batch: the median over the noise-scale runs of
    B_simple (sequences) at each run's evaluation nearest `target` (val loss, nats/token), and the
    largest |val loss - target| of those evaluations; NaN without noise-scale estimates."""
    points = trajectory.dropna(subset=["b_simple", "val_loss"])
    if points.empty:
        return math.nan, math.nan
    gap = (points["val_loss"] - target).abs()
    nearest = gap.groupby(points["batch_size"]).idxmin()
    return float(points.loc[nearest, "b_simple"].median()), float(gap[nearest].max())


def fitted_points(part: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(batch sizes in sequences, crossing steps) of the rows of `part` (steps_to_target) that the
    fits use: all but the left-censored, whose crossing is known only to lie in (0, steps]."""
    kept = part[~part["left-censored"].astype(bool)]
    return kept["batch_size"].to_numpy(float), kept["crossing step"].to_numpy(float)


def resolution_miss(fit: dict, part: pd.DataFrame) -> np.ndarray:
    """Per point of `part` (steps_to_target rows, left-censored ones included): how far (log
    steps) the McCandlish `fit` predicts outside the point's resolution bracket [previous step,
    steps]; 0 inside it."""
    B, S = part["batch_size"].to_numpy(float), part["steps"].to_numpy(float)
    predicted = fit["S_min"] + fit["E_min"] / B
    low = np.maximum(part["previous step"].to_numpy(float), 1e-300)  # 0: unbounded below
    return np.maximum(np.log(predicted / S), np.log(low / predicted)).clip(min=0)


def _interval_columns(name: str, B: np.ndarray, S: np.ndarray, fit, key: str) -> dict:
    """Point estimate and 90% bootstrap interval of fit(B, S)[key] as three columns."""
    if len(np.unique(B)) < 3:
        return {name: np.nan, f"{name} lo": np.nan, f"{name} hi": np.nan}
    lo, hi = bootstrap(fit, B, S, key)
    return {name: fit(B, S)[key], f"{name} lo": lo, f"{name} hi": hi}


def _fit_row(target: float, part: pd.DataFrame, trajectory: pd.DataFrame) -> tuple[dict, dict]:
    """The three fits of one target's (batch, crossing step) points (fitted_points) and B_simple
    near the target; (table row, McCandlish fit)."""
    B, S = fitted_points(part)
    mc = fit_mccandlish(B, S)
    b_simple, gap = b_simple_near(trajectory, target)
    fewest = B[B * S == (B * S).min()]  # fewest sequences (and tokens) at the crossing
    row = {
        "target": target,
        "batch sizes": len(B),
        "left-censored": int(part["left-censored"].sum()),
        "smallest batch": int(B.min()),
        "largest batch": int(B.max()),
        "B_simple": b_simple,
        "B_simple loss gap": gap,
        **_interval_columns("B_crit", B, S, fit_mccandlish, "B_crit"),
        "max |log residual|": float(np.abs(mc["residuals"]).max()),
        "max log miss": float(resolution_miss(mc, part).max()),
        **_interval_columns("B*", B, S, fit_zhang, "B_star"),
        "max |residual| (steps)": float(np.abs(fit_zhang(B, S)["residuals"]).max()),
        **_interval_columns("B_opt", B, S, fit_wsd, "B_opt"),
        **_interval_columns("B_min", B, S, fit_wsd, "B_min"),
        "fewest tokens at batch": ", ".join(str(int(b)) for b in fewest),
    }
    return row, mc


def fit_targets(
    reach: pd.DataFrame, trajectory: pd.DataFrame
) -> tuple[pd.DataFrame, dict[float, dict]]:
    """McCandlish (B_crit), Zhang (B*) and Zhou (B_opt, B_min) fits per target of `reach`
    (steps_to_target), each fitted to the crossing steps that are not left-censored
    (fitted_points; targets with fewer than three such batch sizes are skipped), with its 90%
    bootstrap interval ("lo", "hi"; sequences), beside B_simple near the target (b_simple_near of
    the noise-scale `trajectory`). "batch sizes": the points fitted; "left-censored": the points
    left out; "max log miss": the hyperbola's largest resolution_miss over all points (a
    left-censored one misses where the fit predicts more steps than its first evaluation).
    Returns (one row per target, {target: McCandlish fit})."""
    rows, mccandlish = [], {}
    for target, part in reach.groupby("target"):
        if len(fitted_points(part)[0]) < 3:
            continue
        row, mccandlish[target] = _fit_row(target, part, trajectory)
        rows.append(row)
    return pd.DataFrame(rows), mccandlish


# --- the gradient noise scale -------------------------------------------------------------------


def noise_trajectory(runs: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """B_simple (sequences) per evaluation of the noise-scale runs: batch_size, epoch, tokens,
    val_loss, b_simple, in batch then token order."""
    columns = ["batch_size", "epoch", "tokens", "val_loss", "b_simple"]
    merged = evals.merge(runs[["run_id", "batch_size"]], on="run_id")
    return merged[columns].sort_values(["batch_size", "tokens"])


def noise_growth(trajectory: pd.DataFrame) -> pd.DataFrame:
    """Per noise-scale batch, over its evaluations up to the best val loss (where the loss falls):
    the median B_simple (sequences) of the first and of the last third, their ratio (NaN with
    fewer than two evaluations or a non-positive median), and the val loss (nats/token) at both
    ends."""
    rows = []
    for batch, run in trajectory.dropna(subset=["b_simple", "val_loss"]).groupby("batch_size"):
        run = run.sort_values("tokens")
        falling = run.iloc[: int(np.argmin(run["val_loss"].to_numpy())) + 1]
        k = max(1, len(falling) // 3)
        first = float(falling["b_simple"].iloc[:k].median())
        last = float(falling["b_simple"].iloc[-k:].median())
        ok = len(falling) >= 2 and first > 0 and last > 0
        rows.append(
            {
                "batch_size": batch,
                "evaluations": len(falling),
                "B_simple first": first,
                "B_simple last": last,
                "ratio": last / first if ok else np.nan,
                "val loss first": float(falling["val_loss"].iloc[0]),
                "val loss last": float(falling["val_loss"].iloc[-1]),
            }
        )
    return pd.DataFrame(rows)


# --- critical batch size vs pool size -----------------------------------------------------------


def pool_size_scaling(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    pool_tokens: dict[str, int],
    n_batches: int,
    seq_len: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """B_crit and B* (sequences, with 90% bootstrap intervals) per pool of `pool_tokens` (pool
    path -> training tokens), each at the lowest loss `n_batches` batch sizes reach on that pool
    (the largest of them: "largest batch"), fitted to the crossing steps (fitted_points).
    Returns (one row per pool, the steps_to_target rows of every pool with its `pool tokens`)."""
    rows, points = [], []
    for pool, tokens in pool_tokens.items():
        mine = runs[runs["pool"] == str(pool)]
        mine_evals = evals[evals["run_id"].isin(mine["run_id"])]
        target = reachable_target(mine, mine_evals, n_batches)
        part = steps_to_target(mine, mine_evals, [target], seq_len=seq_len)
        points.append(part.assign(**{"pool tokens": tokens}))
        B, S = fitted_points(part)
        rows.append(
            {"pool tokens": tokens, "target": target, "batch sizes": len(B)}
            | {"largest batch": B.max(initial=0)}
            | _interval_columns("B_crit", B, S, fit_mccandlish, "B_crit")
            | _interval_columns("B*", B, S, fit_zhang, "B_star")
        )
    return pd.DataFrame(rows), pd.concat(points, ignore_index=True)


def _alpha_interval(
    points: pd.DataFrame, fit, key: str, n: int = 500, seed: int = 0, level: float = 0.9
) -> tuple[float, float]:
    """Percentile interval of the exponent of fit(B, S)[key] ~ D^alpha over joint resamples of
    every pool's fitted_points, as in `bootstrap` (at least MIN_BATCHES batch sizes per pool;
    resamples keeping fewer than three on a pool are skipped); a resample whose key is not finite
    and positive on every pool leaves alpha undetermined (_percentiles)."""
    pools = [(tokens / 1e6, *fitted_points(part)) for tokens, part in points.groupby("pool tokens")]
    if any(len(np.unique(B)) < MIN_BATCHES for _, B, _ in pools):
        return (np.nan, np.nan)
    rng = np.random.default_rng(seed)
    D = np.array([d for d, _, _ in pools])
    alphas, undetermined = [], 0
    for _ in range(n):
        picks = [rng.integers(0, len(B), len(B)) for _, B, _ in pools]
        if any(len(np.unique(B[p])) < 3 for (_, B, _), p in zip(pools, picks)):
            continue
        values = np.array([fit(B[p], S[p])[key] for (_, B, S), p in zip(pools, picks)])
        if np.all(np.isfinite(values) & (values > 0)):
            alphas.append(power_law(D, values)["alpha"])
        else:
            undetermined += 1
    return _percentiles(alphas, undetermined, level)


def scaling_laws(scaling: pd.DataFrame, points: pd.DataFrame) -> dict[str, dict]:
    """Power laws B = c D^alpha (D in millions of training tokens) for B_crit and B*, with the
    exponent's 90% bootstrap interval ("alpha lo", "alpha hi"; _alpha_interval over `points` of
    pool_size_scaling); empty where any pool has no finite fit."""
    if not np.isfinite(scaling[["B_crit", "B*"]].to_numpy(float)).all():
        return {}
    D = scaling["pool tokens"] / 1e6
    laws = {}
    for name, fit, key in (("B_crit", fit_mccandlish, "B_crit"), ("B*", fit_zhang, "B_star")):
        lo, hi = _alpha_interval(points, fit, key)
        laws[name] = power_law(D, scaling[name]) | {"alpha lo": lo, "alpha hi": hi}
    return laws


# --- batch-size schedules vs the best fixed batch -----------------------------------------------


def _every_phase_within(schedule: str, epochs: int) -> bool:
    """Whether every phase of `schedule` ("0:2,0.5:8") starts within `epochs` (phases start at
    whole epochs, loaders.epoch_steps)."""
    phases = make_run_config({"batch_schedule": schedule}).batch_schedule
    batches = epoch_steps(1, epochs, 0, phases).batch_by_epoch
    return all(batch in batches for _, batch in phases)


def schedule_slice(fixed: Results, schedules: list[str]) -> tuple[int, float]:
    """The epoch budget and weight decay at which the `schedules` meet the `fixed` batches (one
    model): those of the best fixed batch on the first pool (batch, lr, weight decay and budget
    chosen on all its validation documents, as grid growth chooses), so that its lr is bracketed
    there; or the smallest longer budget in which every schedule reaches its last phase."""
    done_mask = fixed.runs["status"] == "done"
    done = fixed.runs[done_mask]
    if done.empty:
        raise ReproError("no finished fixed-batch run to meet the batch schedules: run 02 first")
    first = done_mask & (fixed.runs["pool"] == done["pool"].iloc[0])
    ends = selection.tuned(fixed.subset(first), ["pool"], (*selection.TUNED, "batch_size"))
    best = done.set_index("run_id").loc[ends["run_id"].iloc[0]]
    budgets = [
        int(e)
        for e in sorted(done["epochs"].unique())
        if e >= best["epochs"] and all(_every_phase_within(s, int(e)) for s in schedules)
    ]
    if not budgets:
        raise ReproError(
            f"no epoch budget up to {done['epochs'].max():g} gives every phase of the batch "
            f"schedules {schedules} an epoch: add a longer budget or shorten the schedules"
        )
    return budgets[0], float(best["weight_decay"])


class ScheduleComparison(NamedTuple):
    """Tuned endpoints per policy (`table`), the chosen runs' evaluation curves (`curves`), and
    the best schedule minus the best fixed batch (`difference`, nats/token, with its paired
    interval) described by `label`."""

    table: pd.DataFrame
    curves: dict[str, pd.DataFrame]
    difference: Difference
    label: str


def _policy_rows(ends: pd.DataFrame, names: list[str]) -> list[dict]:
    """Display rows of tuned endpoints (rows of selection.tuned), named by `names`."""
    return [
        {
            "policy": name,
            "pool": Path(end["pool"]).name,
            "val loss (cross-fitted)": end["val_loss"],
            "lr": end.get("lr"),
            "runs": end["n_runs"],
        }
        for name, (_, end) in zip(names, ends.iterrows())
    ]


def _matched_fixed(fixed: Results, schedule_runs: pd.DataFrame) -> tuple[Results, int]:
    """The fixed-batch runs on the schedules' pools at their epoch budget and weight decay, and
    that budget (epochs)."""
    runs = fixed.runs
    budget = schedule_runs[["epochs", "weight_decay"]].drop_duplicates()
    if len(budget) != 1:
        raise ReproError("schedule runs must share one epoch budget and weight decay")
    epochs, decay = int(budget["epochs"].iloc[0]), float(budget["weight_decay"].iloc[0])
    matched = fixed.subset(
        (runs["epochs"] == epochs)
        & (runs["weight_decay"] == decay)
        & runs["pool"].isin(schedule_runs["pool"])
    )
    if matched.runs.empty:
        raise ReproError(f"no fixed-batch run at the schedules' {epochs} epochs, decay {decay:g}")
    return matched, epochs


def schedules_vs_fixed(
    fixed: Results, scheduled: Results, schedules: dict[str, str]
) -> ScheduleComparison:
    """Batch-size schedules (`scheduled`; `schedules`: name -> batch_schedule) against the
    `fixed`-batch runs of the same pools, epoch budget and weight decay, all as held-out tuned
    endpoints (selection.tuned): one row per replicate and fixed batch and per schedule, then the
    two arms that are compared: the best fixed batch (batch size tuned with lr) and the best
    schedule (schedule tuned with lr)."""
    fixed, epochs = _matched_fixed(fixed, scheduled.runs)
    names = {s: n for n, s in schedules.items()}
    in_names = scheduled.runs["batch_schedule"].isin(names)
    ramps = scheduled.subset(in_names)
    numbers = ramps.runs["batch_schedule"].map(list(names).index)
    ramps = Results(ramps.runs.assign(schedule_no=numbers), ramps.evals, ramps.documents)
    replicate = list(REPLICATE_FIELDS)
    per_batch = selection.tuned(fixed, [*replicate, "batch_size"])
    per_schedule = selection.tuned(ramps, [*replicate, "batch_schedule"])
    best_fixed = selection.tuned(fixed, replicate, ("batch_size", *selection.TUNED))
    best_ramp = selection.tuned(ramps, replicate, ("schedule_no", *selection.TUNED))
    evals, schedule_evals = fixed.evals, ramps.evals
    batch = ", ".join(str(int(b)) for b in best_fixed["batch_size"].drop_duplicates())
    ramp = ", ".join(
        list(names.values())[int(n)] for n in best_ramp["schedule_no"].drop_duplicates()
    )
    arms = [f"best fixed batch (chose {batch})", f"best schedule (chose {ramp})"]
    ramp_labels = [f"{names[s]} ({s})" for s in per_schedule["batch_schedule"]]
    labels = [f"fixed batch {int(b)}" for b in per_batch["batch_size"]] + ramp_labels
    arm_labels = [arms[0]] * len(best_fixed) + [arms[1]] * len(best_ramp)
    table = pd.DataFrame(
        _policy_rows(pd.concat([per_batch, per_schedule]), labels)
        + _policy_rows(pd.concat([best_fixed, best_ramp]), arm_labels)
    )
    curves = {arms[0]: evals[evals["run_id"] == best_fixed["run_id"].iloc[0]]}
    for label, rid in zip(ramp_labels, per_schedule["run_id"]):
        curves.setdefault(label, schedule_evals[schedule_evals["run_id"] == rid])
    label = f"best schedule ({ramp}) - best fixed batch ({batch}), {epochs} epochs"
    return ScheduleComparison(table, curves, selection.compare(best_ramp, best_fixed), label)


# --- claims -------------------------------------------------------------------------------------

NOISE_GROWTH = 1.5
"""The noise-scale claim agrees when B_simple rises at least this much (last third over first
third of the evaluations up to the best val loss, noise_growth) in every run."""
RESIDUAL_TOLERANCE = 0.3
"""Largest log distance (a factor 1.35 in steps) between the hyperbola fit and a point's resolution
bracket (resolution_miss) that still counts as fitting."""
ZHANG_ALPHA = 0.47
"""Zhang et al.'s exponent of B* ~ D^alpha."""
ZHANG_BAND = (0.25, 0.75)
"""An exponent interval inside this band agrees with Zhang et al.'s 0.47 (a wider one cannot tell
it from no growth or from linear growth)."""
B_SIMPLE_FACTOR = 3.0
"""McCandlish et al.'s B_simple predicts B_crit within this factor of B_crit's interval; further
off contradicts the prediction."""
NO_FIT = "fewer than 3 batch sizes reach any target (no fit)"


def _span(lo: float, hi: float) -> str:
    """An interval that may include negative values: "-0.12 to 0.53", or "not determined"."""
    return "not determined" if np.isnan(lo) else f"{lo:.3g} to {hi:.3g}"


def _noise_verdict(ratio: pd.Series) -> tuple[str, str]:
    """Agrees when B_simple rises by NOISE_GROWTH or more in every noise-scale run while the loss
    falls; disagrees when it does not rise at all (ratio <= 1) in every run; else undetermined,
    with the reason."""
    if ratio.empty or ratio.isna().any():
        return "undetermined", " (too few evaluations with a positive B_simple)"
    if (ratio >= NOISE_GROWTH).all():
        return "agrees", ""
    if (ratio <= 1).all():
        return "disagrees", ""
    return "undetermined", f" (a rise of less than x{NOISE_GROWTH:g} in some run)"


def _noise_scale_claim(trajectory: pd.DataFrame, model: str) -> list[str]:
    growth = noise_growth(trajectory)
    verdict, why = _noise_verdict(growth.get("ratio", pd.Series(dtype=float)))
    runs = "; ".join(
        f"batch {int(g['batch_size'])}: B_simple {g['B_simple first']:.3g} -> "
        f"{g['B_simple last']:.3g} (x{g['ratio']:.2f}) as val loss {g['val loss first']:.3f} -> "
        f"{g['val loss last']:.3f}"
        for _, g in growth.iterrows()
    )
    return [
        "the gradient noise scale grows as the loss falls (McCandlish et al.)",
        "yes",
        f"model {model}: {runs or 'no noise-scale evaluations'} (medians of the first and last "
        f"third of the evaluations up to the best val loss){why}",
        verdict,
    ]


def _hyperbola_verdict(fit: pd.Series) -> tuple[str, str]:
    """Disagrees when the fit misses a point's resolution bracket by more than RESIDUAL_TOLERANCE
    (log steps), or B_simple lies more than B_SIMPLE_FACTOR outside B_crit's interval; agrees when
    B_crit's interval lies inside the measured batches and B_simple within that factor of it; else
    undetermined, with the reason."""
    lo, hi = fit["B_crit lo"], fit["B_crit hi"]
    smallest, largest = fit["smallest batch"], fit["largest batch"]
    b_simple = fit["B_simple"]
    if fit["max log miss"] > RESIDUAL_TOLERANCE:
        return "disagrees", f"; steps miss the hyperbola by more than e^{RESIDUAL_TOLERANCE}"
    located = smallest <= lo and hi <= largest
    near = lo / B_SIMPLE_FACTOR <= b_simple <= hi * B_SIMPLE_FACTOR
    if located and not np.isnan(b_simple) and not near:
        return (
            "disagrees",
            f"; B_simple is more than x{B_SIMPLE_FACTOR:g} outside B_crit's interval",
        )
    if located and near:
        return "agrees", ""
    if located:
        return "undetermined", "; B_simple not measured"
    if np.isnan(lo):
        return "undetermined", f"; no interval for B_crit (fewer than {MIN_BATCHES} batch sizes)"
    if hi > largest:
        return "undetermined", "; B_crit may lie above the largest batch (steps never level off)"
    return "undetermined", "; B_crit may lie below the smallest batch (steps already level)"


def _b_simple(fit: pd.Series) -> str:
    """B_simple near the fit's target, as McCandlish's prediction of B_crit."""
    if np.isnan(fit["B_simple"]):
        return "B_simple not measured"
    return (
        f"B_simple {fit['B_simple']:.3g} (noise-scale runs, at evaluations up to "
        f"{fit['B_simple loss gap']:.3f} nats from the target)"
    )


def _censored(fit: pd.Series) -> str:
    """The batch sizes left out of the fit as left-censored, if any."""
    n = fit["left-censored"]
    return f" ({n} more reached it at their first evaluation: not fitted)" if n else ""


def _hyperbola_claim(fit: pd.Series | None, model: str) -> list[str]:
    claim = "steps fall ~1/B below B_crit and level off above it (S = S_min + E_min/B)"
    paper = "yes, with B_crit near B_simple (McCandlish et al.)"
    if fit is None:
        return [claim, paper, f"model {model}: {NO_FIT}", "undetermined"]
    verdict, why = _hyperbola_verdict(fit)
    interval = describe_interval((fit["B_crit lo"], fit["B_crit hi"]), 10 * fit["largest batch"])
    measured = (
        f"model {model}, target {fit['target']}: B_crit {fit['B_crit']:.3g} (90% CI {interval}) "
        f"over batches {fit['smallest batch']}-{fit['largest batch']}{_censored(fit)}; "
        f"{_b_simple(fit)}; "
        f"max |log residual| {fit['max |log residual|']:.2f} ({fit['max log miss']:.2f} beyond "
        f"evaluation resolution){why}"
    )
    return [claim, paper, measured, verdict]


def _data_scaling_claim(scaling: pd.DataFrame, law: dict, model: str) -> list[str]:
    """Agrees when the 90% interval of B*'s exponent lies inside ZHANG_BAND (around 0.47);
    disagrees when it excludes 0.47; undetermined when it is wider than the band, without a fit,
    or when B* lies beyond the largest batch that reaches a pool's target (an extrapolation)."""
    claim = "B* (20% over linear scaling) grows with data size as D^0.47 (Zhang et al.)"
    paper = f"alpha = {ZHANG_ALPHA}"
    pools = ", ".join(f"{t:,}" for t in scaling["pool tokens"])
    if not law:
        measured = (
            f"model {model}: no finite B* on every pool of {pools} tokens (fewer than 3 batch "
            "sizes reach a pool's target, or steps never level off)"
        )
        return [claim, paper, measured, "undetermined"]
    alpha, lo, hi = (law["B*"][k] for k in ("alpha", "alpha lo", "alpha hi"))
    beyond = scaling.loc[scaling["B*"] > scaling["largest batch"], "pool tokens"]
    if len(beyond):
        pools_beyond = ", ".join(f"{t:,}" for t in beyond)
        verdict = "undetermined"
        why = (
            " (B* lies beyond the largest batch reaching the target on the "
            f"{pools_beyond}-token pools: an extrapolation)"
        )
    elif np.isnan(lo):
        few = f"a pool with fewer than {MIN_BATCHES} batch sizes"
        verdict, why = "undetermined", f" (no interval: {few}, or B* infinite in resamples)"
    elif not lo <= ZHANG_ALPHA <= hi:
        verdict, why = "disagrees", ""
    elif ZHANG_BAND[0] <= lo and hi <= ZHANG_BAND[1]:
        verdict, why = "agrees", ""
    else:
        band = f"{ZHANG_BAND[0]:g} to {ZHANG_BAND[1]:g}"
        verdict, why = "undetermined", f" (interval not inside {band}: exponent not pinned down)"
    measured = (
        f"model {model}: alpha {alpha:.2f} (90% CI {_span(lo, hi)}; B_crit: "
        f"{law['B_crit']['alpha']:.2f}) over {len(scaling)} pools of {pools} tokens{why}"
    )
    return [claim, paper, measured, verdict]


def _wsd_verdict(fit: pd.Series, lr_schedule: str) -> tuple[str, str]:
    """Undetermined unless the runs are WSD. Then agrees when B_opt's interval lies inside the
    measured batches and B_min's lies above 0; disagrees when B_min's lies below 0 (tokens to
    target still fall as the batch shrinks to the smallest measured); else undetermined."""
    if lr_schedule != "wsd":
        return "undetermined", f" ({lr_schedule} runs here, Zhou et al. fit WSD)"
    inside = fit["smallest batch"] <= fit["B_opt lo"] and fit["B_opt hi"] <= fit["largest batch"]
    if inside and fit["B_min lo"] > 0:
        return "agrees", ""
    if fit["B_min hi"] < 0:
        return "disagrees", " (tokens to target still fall down to the smallest batch)"
    return "undetermined", " (B_opt or B_min not located in the measured batches)"


def _wsd_claim(fit: pd.Series | None, lr_schedule: str, model: str) -> list[str]:
    claim = "a minimum batch B_min and a token-optimal batch B_opt exist (Zhou et al.)"
    paper = "yes (WSD schedule)"
    if fit is None:
        return [claim, paper, f"model {model}: {NO_FIT}", "undetermined"]
    verdict, why = _wsd_verdict(fit, lr_schedule)
    limit = 10 * fit["largest batch"]
    measured = (
        f"model {model}, target {fit['target']}: B_opt {fit['B_opt']:.3g} (90% CI "
        f"{describe_interval((fit['B_opt lo'], fit['B_opt hi']), limit)}), B_min "
        f"{fit['B_min']:.3g} (90% CI {_span(fit['B_min lo'], fit['B_min hi'])}); fewest "
        f"tokens at batch {fit['fewest tokens at batch']}{why}"
    )
    return [claim, paper, measured, verdict]


def _schedule_claim(schedules: ScheduleComparison, model: str) -> list[str]:
    """lower_verdict of the best schedule minus the best fixed batch (paired interval)."""
    return [
        "a batch-size schedule beats the best fixed batch (Zhou et al.: ramp-up)",
        "yes",
        f"model {model}: {describe(schedules.label, schedules.difference)} nats/token (90% "
        "interval over replicates and validation documents; both arms held out; the budget "
        "and weight decay they meet at are the best fixed batch's on the first pool, chosen "
        "in-sample)",
        lower_verdict([schedules.difference]),
    ]


def cbs_claims(
    trajectory: pd.DataFrame,
    fits: pd.DataFrame,
    scaling: pd.DataFrame,
    law: dict,
    schedules: ScheduleComparison,
    lr_schedule: str,
    model: str,
) -> pd.DataFrame:
    """Claims of the critical-batch section, all measured on one model size (`model`):
    `trajectory`: noise_trajectory; `fits`: fit_targets (the middle target is judged); `scaling` /
    `law`: pool_size_scaling / scaling_laws; `schedules`: schedules_vs_fixed; `lr_schedule`: the
    lr schedule of the batch sweep ("cosine", "wsd"). Each helper's docstring states its rule."""
    middle = fits.iloc[len(fits) // 2] if len(fits) else None
    rows = [
        _noise_scale_claim(trajectory, model),
        _hyperbola_claim(middle, model),
        _data_scaling_claim(scaling, law, model),
        _wsd_claim(middle, lr_schedule, model),
        _schedule_claim(schedules, model),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
