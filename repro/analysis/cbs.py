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
- Claims (`cbs_claims`): "agrees", "disagrees" or "undetermined", each by a rule stated where the
  claim is built; loss differences come with held-out paired intervals over pools and validation
  documents (repro.analysis.selection), and their numbers in the claim table (the fits' rows
  leave them empty: intervals.Claim.numbers). The study's epoch cap changes nothing here: the
  noise-scale runs copy a tuned run (its choice, not its censoring), and the schedules meet the
  fixed batches at one slice (no budget tuned).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from repro.analysis import selection
from repro.analysis.intervals import (
    LEVEL,
    MIN_REPLICATES,
    NOT_MEASURED,
    Claim,
    Difference,
    claim_table,
    describe,
    lower_verdict,
    t_interval,
)
from repro.analysis.results import CONFIG_FIELDS, REPLICATE_FIELDS, Results, plain_value
from repro.errors import ReproError
from repro.runtime.config import batch_schedule_text
from repro.runtime.loaders import BatchPhases, epoch_batches

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
    row, with no fit (NaN). Returns (one row per pool and target, {(pool, target): McCandlish
    fit})."""
    rows, mccandlish = [], {}
    for (pool, target), part in reach.groupby(["pool", "target"]):
        noise = trajectory[trajectory["pool"] == pool]
        b_simple, gap = b_simple_near(noise, target)
        row = {"pool": pool, "target": target, "batch sizes": len(fitted_points(part)[0])}
        row |= {"left-censored": int(part["left-censored"].sum())}
        row |= {"B_simple": b_simple, "B_simple loss gap": gap}
        if row["batch sizes"] >= 3:
            fitted, mccandlish[(pool, target)] = _fit_row(part, b_simple)
            row |= fitted
        rows.append(row)
    return pd.DataFrame(rows), mccandlish


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
scale (batch sizes and ratios: geometric) or not (the log miss; B_min, which may be negative)."""


def fit_intervals(fits: pd.DataFrame) -> pd.DataFrame:
    """pool_intervals of the FITTED quantities of `fits` (fit_targets) per target: the mean over
    pools, its 90% interval over pools and the per-pool values."""
    columns = [q for q in FITTED if q in fits]
    return pool_intervals(fits, ["target"], {q: FITTED[q] for q in columns})


# --- the gradient noise scale -------------------------------------------------------------------


NOISE_RUN_FIELDS = ("init_from", "save_steps", "noise_scale", "micro_batch", "eval_every")
"""Run fields a noise-scale run sets for itself rather than copying from its tuned run: it trains
from scratch (a WSD branch keeps its warmup_steps, so the schedule is the branch's), keeps no
checkpoints, and logs the noise scale from micro-batches at its own evaluation interval."""


def noise_scale_choices(sweep: Results, batch_sizes: Iterable[int]) -> list[dict]:
    """Where notebook 05 measures the noise scale: per pool of `sweep` (one model's batch sweep)
    and each of `batch_sizes` (sequences) it has, the run fields of the batch's tuned run (lr,
    weight decay and epoch budget chosen on all of the pool's documents, as the growth chooses:
    selection.tuned), less NOISE_RUN_FIELDS, so that a noise-scale run with those fields reaches
    the loss of the tuned endpoint. A batch with no finished run on a pool has no choice there."""
    if sweep.runs.empty:
        return []
    done = sweep.subset(sweep.runs["status"] == "done")
    done = done.subset(done.runs["batch_size"].isin(list(batch_sizes)))
    if done.runs.empty:
        return []
    group_by = ["pool", "model", "batch_size", *(["seed"] if "seed" in done.runs else [])]
    ends = selection.tuned(done, group_by).dropna(subset=["run_id"])
    runs = done.runs.set_index("run_id")
    copied = [f for f in CONFIG_FIELDS if f in runs and f not in NOISE_RUN_FIELDS]
    return [
        {f: plain_value(runs.loc[rid, f]) for f in copied}
        for rid in ends.sort_values(group_by)["run_id"]
    ]


def noise_runs(noise: Results) -> pd.DataFrame:
    """One row per noise-scale run of `noise`: pool (folder name), batch size (sequences), its
    tuned lr, weight decay and epoch budget, its last val loss (nats/token) and how many of its
    evaluations have a B_simple estimate."""
    evals = noise.evals.sort_values("step")
    last = evals.groupby("run_id")["val_loss"].last()
    estimates = evals.groupby("run_id")["b_simple"].count()
    runs = noise.runs.sort_values(["pool", "batch_size"])
    return pd.DataFrame(
        {
            "pool": [Path(p).name for p in runs["pool"]],
            "batch size": runs["batch_size"].to_numpy(),
            "lr": runs["lr"].to_numpy(),
            "weight decay": runs["weight_decay"].to_numpy(),
            "epochs": runs["epochs"].to_numpy(),
            "last val loss": last.reindex(runs["run_id"]).round(4).to_numpy(),
            "B_simple estimates": estimates.reindex(runs["run_id"])
            .fillna(0)
            .astype(int)
            .to_numpy(),
        }
    )


def noise_trajectory(noise: Results) -> pd.DataFrame:
    """B_simple (sequences) per evaluation of the noise-scale runs (`noise`): pool, batch_size,
    epoch, tokens, val_loss, b_simple, in pool, batch, then token order."""
    columns = ["pool", "batch_size", "epoch", "tokens", "val_loss", "b_simple"]
    merged = noise.evals.merge(noise.runs[["run_id", "pool", "batch_size"]], on="run_id")
    return merged[columns].sort_values(["pool", "batch_size", "tokens"], ignore_index=True)


def noise_growth(trajectory: pd.DataFrame) -> pd.DataFrame:
    """Per pool and noise-scale batch, over its evaluations up to the best val loss (where the loss
    falls): the median B_simple (sequences) of the first and of the last third, their ratio (NaN
    with fewer than two evaluations or a non-positive median), and the val loss (nats/token) at
    both ends."""
    rows = []
    points = trajectory.dropna(subset=["b_simple", "val_loss"])
    for (pool, batch), run in points.groupby(["pool", "batch_size"]):
        run = run.sort_values("tokens")
        falling = run.iloc[: int(np.argmin(run["val_loss"].to_numpy())) + 1]
        k = max(1, len(falling) // 3)
        first = float(falling["b_simple"].iloc[:k].median())
        last = float(falling["b_simple"].iloc[-k:].median())
        ok = len(falling) >= 2 and first > 0 and last > 0
        rows.append(
            {
                "pool": pool,
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


def growth_intervals(growth: pd.DataFrame) -> pd.DataFrame:
    """Per noise-scale batch: the geometric mean over pools of B_simple's growth (noise_growth's
    ratio) with its 90% interval over pools (pool_intervals)."""
    if growth.empty:
        growth = pd.DataFrame(columns=["pool", "batch_size", "ratio"])
    return pool_intervals(growth, ["batch_size"], {"ratio": True})


NOISE_SCALE_TABLE = "05_noise_scale_regime"
"""The name of notebook 05's table of the preset's noise scale (noise_scale_regime), saved as
figures/<preset>/<name>.csv and read by Study.summary."""


def noise_scale_regime(
    trajectory: pd.DataFrame, endpoints: pd.DataFrame, batch_sizes: Iterable[int], seq_len: int
) -> pd.DataFrame:
    """The preset's gradient noise scale per pool: B_simple at the loss its tuned endpoint reaches.
    That loss ("target", nats/token) is the best tuned val loss of `endpoints` (one model's
    held-out endpoints per pool and batch size, analyses.batch_endpoints): the lowest mean over
    pools among its batch sizes, the same on every pool (they share the validation documents).
    Per pool of `trajectory` (noise_trajectory), b_simple_near the target: the median over the
    pool's noise-scale runs of B_simple at each run's evaluation nearest the target (nearest, not
    interpolated: the logged EMA estimate itself), with the largest |val loss - target| of those
    evaluations ("loss gap"). B_simple in sequences and in tokens (sequences x `seq_len`), and
    the smallest and largest of `batch_sizes` (sequences) over it."""
    target = float(endpoints.groupby("batch_size")["val_loss"].mean().min())
    smallest, largest = min(batch_sizes), max(batch_sizes)
    rows = []
    for pool, noise in trajectory.groupby("pool"):
        b_simple, gap = b_simple_near(noise, target)
        rows.append(
            {
                "pool": Path(pool).name,
                "target": target,
                "loss gap": gap,
                "B_simple (sequences)": b_simple,
                "B_simple (tokens)": b_simple * seq_len,
                "smallest batch / B_simple": smallest / b_simple,
                "largest batch / B_simple": largest / b_simple,
            }
        )
    return pd.DataFrame(rows)


def noise_scale_range(table: pd.DataFrame) -> tuple[float, float] | None:
    """The lowest and highest B_simple (tokens) over the pools of `table` (noise_scale_regime, or
    its saved CSV), None where no pool has a positive one."""
    tokens = table["B_simple (tokens)"].astype(float)
    tokens = tokens[np.isfinite(tokens) & (tokens > 0)]
    return (float(tokens.min()), float(tokens.max())) if len(tokens) else None


def noise_scale_gap(table: pd.DataFrame) -> float:
    """The largest loss gap (nats/token) over the pools of `table` (noise_scale_regime, or its
    saved CSV) that have a positive B_simple: how far from the tuned loss the B_simple of
    noise_scale_range was measured; NaN where no pool has one."""
    tokens = table["B_simple (tokens)"].astype(float)
    measured = np.isfinite(tokens) & (tokens > 0)
    return float(table.loc[measured, "loss gap"].max()) if measured.any() else math.nan


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


# --- batch-size schedules vs the best fixed batch -----------------------------------------------


def _every_phase_within(phases: BatchPhases, epochs: int) -> bool:
    """Whether every phase of a batch schedule ((0.0, 2), (0.5, 8)) starts within `epochs`
    (phases start at whole epochs, loaders.epoch_batches)."""
    batches = epoch_batches(epochs, 0, phases)
    return all(batch in batches for _, batch in phases)


def schedule_slices(fixed: Results, schedules: list[BatchPhases]) -> dict[str, tuple[int, float]]:
    """Per pool, the epoch budget and weight decay at which the `schedules` meet the `fixed`
    batches (one model): those of the best fixed batch (batch, lr, weight decay and budget) chosen
    on the *other* pools (selection.held_out_choices; on the pool itself when it is the only one),
    or the smallest longer budget in which every schedule reaches its last phase."""
    done = fixed.subset(fixed.runs["status"] == "done")
    if done.runs.empty:
        raise ReproError("no finished fixed-batch run to meet the batch schedules: run 02 first")
    budgets = sorted(int(e) for e in done.runs["epochs"].unique())
    slices = {}
    for pool, best in selection.held_out_choices(done, ("batch_size", *selection.TUNED)).items():
        longer = [e for e in budgets if e >= best["epochs"]]
        fits = [e for e in longer if all(_every_phase_within(s, e) for s in schedules)]
        if not fits:
            raise ReproError(
                f"no epoch budget up to {budgets[-1]} gives every phase of the batch schedules "
                f"{[batch_schedule_text(s) for s in schedules]} an epoch: add a longer budget or "
                "shorten the schedules"
            )
        slices[pool] = (fits[0], float(best["weight_decay"]))
    return slices


class ScheduleComparison(NamedTuple):
    """Tuned endpoints per policy and pool (`table`), the chosen runs' evaluation curves
    (`curves`: policy, pool, tokens, val_loss), and the best schedule minus the best fixed batch
    (`difference`, nats/token, with its held-out paired interval over pools and documents)
    described by `label`."""

    table: pd.DataFrame
    curves: pd.DataFrame
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


def _matched_fixed(fixed: Results, schedule_runs: pd.DataFrame) -> tuple[Results, str]:
    """The fixed-batch runs on each of the schedules' pools at that pool's epoch budget and weight
    decay, and those slices described ("seed0: 8 epochs, weight decay 1; ...")."""
    runs, match, notes = fixed.runs, np.zeros(len(fixed.runs), bool), []
    for pool, mine in schedule_runs.groupby("pool"):
        slice_ = mine[["epochs", "weight_decay"]].drop_duplicates()
        if len(slice_) != 1:
            raise ReproError("schedule runs on one pool must share one epoch budget and decay")
        epochs, decay = int(slice_["epochs"].iloc[0]), float(slice_["weight_decay"].iloc[0])
        here = (runs["pool"] == pool) & (runs["epochs"] == epochs) & (runs["weight_decay"] == decay)
        if not here.any():
            raise ReproError(
                f"no fixed-batch run on {Path(pool).name} at its schedules' {epochs} epochs, "
                f"decay {decay:g}"
            )
        match |= here.to_numpy()
        notes.append(f"{Path(pool).name}: {epochs} epochs, weight decay {decay:g}")
    return fixed.subset(pd.Series(match, index=runs.index)), "; ".join(notes)


def _curves(evals: pd.DataFrame, ends: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The evaluation curves (tokens, val_loss) of the runs `ends` chose, per policy and pool."""
    parts = [
        evals.loc[evals["run_id"] == end["run_id"], ["tokens", "val_loss"]].assign(
            policy=name, pool=Path(end["pool"]).name
        )
        for name, (_, end) in zip(names, ends.iterrows())
    ]
    return pd.concat(parts, ignore_index=True)[["policy", "pool", "tokens", "val_loss"]]


def _numbered(scheduled: Results, schedules: list[str]) -> Results:
    """The runs of `schedules` (batch_schedule strings) with each one's index as `schedule_no`:
    a tuned value (the schedule string itself is the group of per-schedule endpoints)."""
    ramps = scheduled.subset(scheduled.runs["batch_schedule"].isin(schedules))
    numbers = ramps.runs["batch_schedule"].map(schedules.index)
    return replace(ramps, runs=ramps.runs.assign(schedule_no=numbers))


def _display(
    fixed: Results, ramps: Results, ends: list[pd.DataFrame], names: dict[str, str], arms: list
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table and curves of schedules_vs_fixed: `ends` are the endpoints per fixed batch, per
    schedule, of the best fixed batch and of the best schedule; `arms` names the last two."""
    per_batch, per_schedule, best_fixed, best_ramp = ends
    ramp_labels = [f"{names[s]} ({s})" for s in per_schedule["batch_schedule"]]
    labels = [f"fixed batch {int(b)}" for b in per_batch["batch_size"]] + ramp_labels
    arm_labels = [arms[0]] * len(best_fixed) + [arms[1]] * len(best_ramp)
    table = pd.DataFrame(
        _policy_rows(pd.concat([per_batch, per_schedule]), labels)
        + _policy_rows(pd.concat([best_fixed, best_ramp]), arm_labels)
    )
    curves = pd.concat(
        [
            _curves(fixed.evals, best_fixed, [arms[0]] * len(best_fixed)),
            _curves(ramps.evals, per_schedule, ramp_labels),
        ],
        ignore_index=True,
    )
    return table, curves


def schedules_vs_fixed(
    fixed: Results, scheduled: Results, schedules: dict[str, str]
) -> ScheduleComparison:
    """Batch-size schedules (`scheduled`; `schedules`: name -> batch_schedule) against the
    `fixed`-batch runs of each pool at that pool's epoch budget and weight decay (its slice,
    schedule_slices), all as held-out tuned endpoints (selection.tuned over lr, with the batch size
    or the schedule as a tuned value where an arm spans several; the slice is not tuned, so a
    pool's choice is made on the other pools at their own slices): one row per pool and fixed
    batch and per schedule, then the two arms compared: the best fixed batch and the best
    schedule."""
    fixed, slices = _matched_fixed(fixed, scheduled.runs)
    names = {s: n for n, s in schedules.items()}
    ramps = _numbered(scheduled, list(names))
    replicate = list(REPLICATE_FIELDS)
    ends = [
        selection.tuned(fixed, [*replicate, "batch_size"], ("lr",)),
        selection.tuned(ramps, [*replicate, "batch_schedule"], ("lr",)),
        selection.tuned(fixed, replicate, ("batch_size", "lr")),
        selection.tuned(ramps, replicate, ("schedule_no", "lr")),
    ]
    batch = ", ".join(str(int(b)) for b in ends[2]["batch_size"].drop_duplicates())
    ramp = ", ".join(list(names.values())[int(n)] for n in ends[3]["schedule_no"].unique())
    arms = [f"best fixed batch (chose {batch})", f"best schedule (chose {ramp})"]
    table, curves = _display(fixed, ramps, ends, names, arms)
    label = f"best schedule ({ramp}) - best fixed batch ({batch}) at each pool's slice ({slices})"
    return ScheduleComparison(table, curves, selection.compare(ends[3], ends[2]), label)


# --- claims -------------------------------------------------------------------------------------

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
    runs = "; ".join(describe(f"batch {b}", d, RATIO) for b, d in per_batch.items())
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
            f"model {model}, target {target}: {describe('B_crit', q['B_crit'], RATIO)} over "
            f"batches {smallest:g}-{largest:g}{left_out}",
            describe("B_simple", q["B_simple"], RATIO),
            describe("B_simple / B_crit", q["B_simple / B_crit"], RATIO),
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
    lies inside the batches every pool measured and B_min's above 0; disagrees when B_min's lies
    below 0 (tokens to target still fall as the batch shrinks to the smallest measured); else
    undetermined."""
    if lr_schedule != "wsd":
        return "undetermined", f" ({lr_schedule} runs here, Zhou et al. fit WSD)"
    smallest, largest = _batches(rows)
    if not b_min.decisive:
        return "undetermined", f" ({_undecided(b_min, 'B_min')[2:]})"
    if b_min.high < 0:
        return "disagrees", " (tokens to target still fall down to the smallest batch)"
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
        f"model {model}, target {target}: {describe('B_opt', b_opt, RATIO)}, "
        f"{describe('B_min', b_min, RATIO)} (90% intervals over pools); fewest tokens at "
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
