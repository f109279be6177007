"""Critical batch size: steps-to-target curves, their fits, intervals over pools, and the critical
batch size against pool size (notebook 05). The gradient noise scale is repro.analysis.noise (the
trainer computes it: repro.runtime.noise_scale), batch-size schedules against the best fixed batch
repro.analysis.batch_schedules, and notebook 05's claims repro.analysis.cbs_claims.

Units: batch sizes are sequences (multiply by seq_len for tokens); S is optimizer steps; E is
training sequences consumed (S * B), reported as tokens where a column says so; losses are
nats/token.

- Steps-to-target: for a target loss, the fewest steps over a batch size's runs (lr, weight decay,
  epoch budget) at which the val loss reaches it, interpolated in log(step) between the last
  evaluation above it and the first at or below it (evaluations fall once per epoch on the CPU
  presets: without it every batch reaching a target in the same epoch gives S ~ 1/B exactly). A
  target reached at a run's first evaluation has no bracket: left-censored, left out of the fits.
- Fits, one per pool: McCandlish's hyperbola (S / S_min - 1)(E / E_min - 1) = 1, i.e.
  S(B) = S_min + E_min / B, fitted in log S, gives B_crit = E_min / S_min. Zhang et al. 2025 fit
  the same form S(B) = a + b / B in S and call critical the batch whose steps exceed linear
  scaling from the smallest batch by 20%: B* = 1.2 B_ref + 0.2 b / a. Zhou et al. 2026 (WSD) model
  E(S) piecewise (inverse, quadratic, linear tail); we fit its two later pieces: a parabola through
  the points nearest the fewest tokens gives B_opt = E_min / S_opt, and the linear tail
  E = A1 S + A0 of the smallest batches gives B_min = A1 (below it the target is not reached).
- Replicates: the pool is the replicate. Every fitted quantity is computed on each pool alone (from
  all of its runs) and its interval is over pools (pool_interval: a t interval of the mean, of the
  mean log for positive quantities), so the spread between pools, which holds each fit's own
  noise, sets its width; fewer than MIN_REPLICATES pools give no verdict. B*'s data-size
  exponent is fitted per pool seed (its pools of several sizes) and its interval is over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from repro.analysis.intervals import LEVEL, NOT_MEASURED, Difference, t_interval
from repro.analysis.results import Results

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
    results: Results,
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
    evals = results.evals
    points = evals.dropna(subset=["val_loss"]).merge(
        results.runs[["run_id", *[c for c in by if c not in evals]]], on="run_id"
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


def reachable_target(results: Results, n_batches: int) -> float:
    """The lowest validation loss (rounded up to 1e-3) that at least `n_batches` batch sizes
    reach."""
    best = (
        results.evals.merge(results.runs[["run_id", "batch_size"]], on="run_id")
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
    a parabola are zero by construction: the spread between pools is the check). Repeated points
    count once: they add nothing to an interpolation."""
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


def power_law(x: np.ndarray, y: np.ndarray) -> dict:
    """y = c * x^alpha by least squares in log-log; returns alpha, c and the log residuals."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    alpha, log_c = np.polyfit(lx, ly, 1)
    return {"alpha": alpha, "c": math.exp(log_c), "residuals": ly - (alpha * lx + log_c)}


# --- intervals over pools -----------------------------------------------------------------------


def pool_interval(values: Iterable[float], log: bool = False, level: float = LEVEL) -> Difference:
    """The mean of per-pool `values` with its `level` t interval over pools (intervals.t_interval:
    pools are independent replicates, and the spread between their fits holds each fit's own
    noise); with `log`, of their logs, exponentiated back: the geometric mean of a positive
    quantity (a batch size, a ratio) with a ratio-scale interval. Where a pool's value is not
    finite (or not positive, with `log`) there is no interval ((-inf, inf)) and the mean is NaN, or
    inf where a value is infinite; the per-pool values are kept either way."""
    values = np.asarray(list(values), float)
    if not len(values):
        return NOT_MEASURED
    pools = tuple(float(v) for v in values)
    if not (np.isfinite(values) & ((values > 0) if log else True)).all():
        with np.errstate(all="ignore"):
            mean = np.exp(np.log(values).mean()) if log else values.mean()
        return Difference(float(mean), -np.inf, np.inf, pools)
    if not log:
        return t_interval(values, level)
    logs = t_interval(np.log(values), level)
    ends = (math.exp(logs.low), math.exp(logs.high)) if np.isfinite(logs.low) else (-np.inf, np.inf)
    return Difference(math.exp(logs.value), *ends, pools)


def pool_intervals(table: pd.DataFrame, by: list[str], quantities: dict[str, bool]) -> pd.DataFrame:
    """Per group of `by` and per column of `quantities` (name -> on a log scale, pool_interval):
    the mean over the group's rows (one per pool) with its 90% interval over pools and the
    per-pool values in pool order. Columns: *by, quantity, mean, low, high, per pool."""
    rows = []
    for key, part in table.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        part = part.sort_values("pool")
        for name, log in quantities.items():
            d = pool_interval(part[name], log)
            rows.append(
                dict(zip(by, key))
                | {"quantity": name, "mean": d.value, "low": d.low, "high": d.high}
                | {"per pool": d.per_replicate}
            )
    return pd.DataFrame(rows, columns=[*by, "quantity", "mean", "low", "high", "per pool"])


def interval_of(intervals: pd.DataFrame, quantity: str, **key) -> Difference:
    """The Difference (mean, interval, per-pool values) of one row of pool_intervals."""
    match = intervals["quantity"] == quantity
    for name, value in key.items():
        match &= intervals[name] == value
    if not match.any():
        return NOT_MEASURED
    row = intervals[match].iloc[0]
    return Difference(row["mean"], row["low"], row["high"], tuple(row["per pool"]))


# --- targets and the fits per pool and target ---------------------------------------------------


def reach_count(n_batch_sizes: int) -> int:
    """How many batch sizes must reach a target: two thirds of the grid, at least three."""
    return max(3, round(2 * n_batch_sizes / 3))


def target_losses(results: Results, n_batches: int, n_targets: int = 3) -> list[float]:
    """Target validation losses (nats/token, rounded to 1e-3), the same on every pool (they share
    the validation documents): the lowest that `n_batches` batch sizes reach on every pool (the
    highest of the pools' reachable_target), then evenly spaced up to 60% of the way to the best
    first evaluation."""
    runs = results.runs
    hardest = max(
        reachable_target(results.subset(runs["pool"] == pool), n_batches)
        for pool in runs["pool"].unique()
    )
    first_loss = float(results.evals.groupby("run_id")["val_loss"].first().min())
    top = hardest + 0.6 * (first_loss - hardest)
    return [round(t, 3) for t in np.linspace(hardest, top, n_targets)]


NEAR_TARGET = 0.05
"""How much farther (nats/token) than the nearest noise-scale run's evaluation another run's may
lie from a target and still count in b_simple_near: runs that stop short of the target (a larger
batch) do not move the estimate."""


def b_simple_near(trajectory: pd.DataFrame, target: float) -> tuple[float, float]:
    """McCandlish's prediction of the critical batch at `target` (val loss, nats/token): per
    noise-scale run, its evaluation nearest the target; then the median B_simple (sequences) over
    the runs whose nearest evaluation lies within NEAR_TARGET of the closest run's, and the largest
    |val loss - target| among those ("loss gap"); NaN without noise-scale estimates."""
    points = trajectory.dropna(subset=["b_simple", "val_loss"])
    if points.empty:
        return math.nan, math.nan
    gap = (points["val_loss"] - target).abs()
    nearest = gap[gap.groupby(points["batch_size"]).idxmin()]
    kept = nearest.index[nearest <= nearest.min() + NEAR_TARGET]
    return float(points.loc[kept, "b_simple"].median()), float(gap[kept].max())


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


PHYSICAL = ("B_crit", "B_simple", "B*", "B_opt", "B_min")
"""Fitted batch sizes (sequences) and noise scales, which only a positive value can be: a fit that
gives 0 or less has failed (a negative B_min, say: tokens to target still falling at the smallest
batch), and physical_range reports it as failed, never as a number."""
FAILED = "fit failed"
"""The column of fit_targets, noise_growth and noise_scale_regime naming the quantities whose fit
left their physical range ("B_min < 0"; "" where none did)."""


def physical_range(row: dict) -> dict:
    """`row` with every PHYSICAL quantity that is finite but not positive set to NaN (as no fit)
    and named in its FAILED column ("B_min < 0; B_crit = 0"), after those it named already."""
    bad = [n for n in PHYSICAL if n in row and np.isfinite(row[n]) and row[n] <= 0]
    failed = [row.get(FAILED, "")] + [f"{n} {'<' if row[n] < 0 else '='} 0" for n in bad]
    return row | {name: math.nan for name in bad} | {FAILED: "; ".join(filter(None, failed))}


def _fit_row(part: pd.DataFrame, b_simple: float) -> tuple[dict, dict]:
    """The three fits of one pool's and target's (batch, crossing step) points (fitted_points),
    beside `b_simple` near the target; (table columns, McCandlish fit)."""
    B, S = fitted_points(part)
    mc = fit_mccandlish(B, S)
    zhang, wsd = fit_zhang(B, S), fit_wsd(B, S)
    fewest = B[B * S == (B * S).min()]  # fewest sequences (and tokens) at the crossing
    row = {
        "smallest batch": int(B.min()),
        "largest batch": int(B.max()),
        "B_crit": mc["B_crit"],
        "max |log residual|": float(np.abs(mc["residuals"]).max()),
        "max log miss": float(resolution_miss(mc, part).max()),
        "B_simple / B_crit": b_simple / mc["B_crit"],
        "B*": zhang["B_star"],
        "max |residual| (steps)": float(np.abs(zhang["residuals"]).max()),
        "B_opt": wsd["B_opt"],
        "B_min": wsd["B_min"],
        "fewest tokens at batch": ", ".join(str(int(b)) for b in fewest),
    }
    return row, mc


def fit_targets(
    reach: pd.DataFrame, trajectory: pd.DataFrame
) -> tuple[pd.DataFrame, dict[tuple[str, float], dict]]:
    """Per pool and target of `reach` (steps_to_target by pool and batch size): McCandlish
    (B_crit), Zhang (B*) and Zhou (B_opt, B_min) fits (sequences) to the crossing steps that are
    not left-censored (fitted_points), and B_simple near the target on the pool's noise-scale runs
    (b_simple_near of `trajectory`, noise_trajectory) with its ratio to B_crit. "batch sizes": the
    points fitted; "left-censored": the points left out; "max log miss": the hyperbola's largest
    resolution_miss over all points (a left-censored one misses where the fit predicts more steps
    than its first evaluation). A pool with fewer than three fitted points at a target keeps its
    row, with no fit (NaN); a fit outside its physical range is NaN and named in FAILED
    (physical_range). Returns (one row per pool and target, {(pool, target): McCandlish fit})."""
    rows, mccandlish = [], {}
    for (pool, target), part in reach.groupby(["pool", "target"]):
        noise = trajectory[trajectory["pool"] == pool]
        b_simple, gap = b_simple_near(noise, target)
        row = {"pool": pool, "target": target, "batch sizes": len(fitted_points(part)[0])}
        row |= {"left-censored": int(part["left-censored"].sum())}
        row = physical_range(row | {"B_simple": b_simple, "B_simple loss gap": gap})
        if row["batch sizes"] >= 3:
            fitted, mccandlish[(pool, target)] = _fit_row(part, row["B_simple"])
            row = physical_range(row | fitted)
        rows.append(row)
    table = pd.DataFrame(rows)
    return table[[c for c in table if c != FAILED] + [FAILED]], mccandlish


FITTED = {
    "B_crit": True,
    "B_simple": True,
    "B_simple / B_crit": True,
    "max log miss": False,
    "B*": True,
    "B_opt": True,
    "B_min": False,
}
"""The fitted quantities that claims read, and whether their interval over pools is on a log
scale (batch sizes and ratios: geometric) or not (the log miss; B_min, judged against 0)."""


def fit_intervals(fits: pd.DataFrame) -> pd.DataFrame:
    """pool_intervals of the FITTED quantities of `fits` (fit_targets) per target: the mean over
    pools, its 90% interval over pools and the per-pool values."""
    columns = [q for q in FITTED if q in fits]
    return pool_intervals(fits, ["target"], {q: FITTED[q] for q in columns})


# --- critical batch size vs pool size -----------------------------------------------------------


def pool_size_scaling(
    results: Results,
    sized: dict[int, dict[str, int]],
    n_batches: int,
    seq_len: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """B_crit and B* (sequences) per pool seed and pool size: `sized` maps each pool seed to its
    pools (path -> training tokens), each fitted at the lowest loss `n_batches` batch sizes reach
    on that pool (the largest of them: "largest batch") to its crossing steps (fitted_points; NaN
    with fewer than three). Returns (one row per seed and pool, the steps_to_target rows of every
    pool with its seed and pool tokens)."""
    rows, points = [], []
    for seed, pools in sized.items():
        for pool, tokens in pools.items():
            mine = results.subset(results.runs["pool"] == str(pool))
            target = reachable_target(mine, n_batches)
            part = steps_to_target(mine, [target], seq_len=seq_len)
            points.append(part.assign(seed=seed, **{"pool tokens": tokens}))
            B, S = fitted_points(part)
            fits = len(np.unique(B)) >= 3
            rows.append(
                {"seed": seed, "pool tokens": tokens, "target": target, "batch sizes": len(B)}
                | {"largest batch": B.max(initial=0)}
                | {"B_crit": fit_mccandlish(B, S)["B_crit"] if fits else np.nan}
                | {"B*": fit_zhang(B, S)["B_star"] if fits else np.nan}
            )
    return pd.DataFrame(rows), pd.concat(points, ignore_index=True)


def scaling_laws(scaling: pd.DataFrame) -> dict[str, Difference]:
    """The exponent alpha of B = c D^alpha (D in millions of training tokens) for B_crit and B*,
    fitted on each pool seed's pools (power_law; NaN where a pool's value is not finite and
    positive), as the mean over seeds with its 90% t interval over seeds (pool_interval)."""
    laws = {}
    for name in ("B_crit", "B*"):
        alphas = []
        for _, mine in scaling.groupby("seed"):
            values = mine[name].to_numpy(float)
            ok = len(values) >= 2 and bool(np.all(np.isfinite(values) & (values > 0)))
            alphas.append(power_law(mine["pool tokens"] / 1e6, values)["alpha"] if ok else np.nan)
        laws[name] = pool_interval(alphas)
    return laws
