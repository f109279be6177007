"""Critical batch size: steps-to-target curves and their fits, for the notebooks (the gradient
noise scale that the trainer logs is computed in repro.runtime.noise_scale).

Units: batch sizes are sequences (multiply by seq_len for tokens); S is optimizer steps; E is
training sequences consumed (S * B), reported as tokens where a column says so.

- Steps-to-target: for a target loss, the fewest steps over tuned runs (lr, weight decay) at which
  an evaluation first reaches it, per batch size.
- Fits: McCandlish's hyperbola (S / S_min - 1)(E / E_min - 1) = 1, i.e. S(B) = S_min + E_min / B,
  fitted in log S, gives B_crit = E_min / S_min. Zhang et al. 2025 fit the same form
  S(B) = a + b / B in S and call critical the batch whose steps exceed linear scaling from the
  smallest batch by 20%: B* = 1.2 B_ref + 0.2 b / a. Zhou et al. 2026 (WSD) model E(S) piecewise
  (inverse, quadratic, linear tail); we fit its two later pieces: a parabola through the points
  nearest the fewest tokens gives B_opt = E_min / S_opt, and the linear tail E = A1 S + A0 of the
  smallest batches gives B_min = A1 (below it the target is not reached). Each fit comes with
  residuals and a bootstrap interval over the (batch, steps) points.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

# --- steps to a target loss ---------------------------------------------------------------------


def steps_to_target(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    targets: list[float],
    by: tuple[str, ...] = ("batch_size",),
    seq_len: int | None = None,
) -> pd.DataFrame:
    """For every group of `by` (batch size, and e.g. pool) and target: the fewest steps over the
    group's runs (tuned hyperparameters) at which a run's evaluation first reaches
    val_loss <= target. Columns: *by, target, steps, sequences (steps * batch), tokens, run_id.
    Unreached targets are left out."""
    points = evals.dropna(subset=["val_loss"]).merge(
        runs[["run_id", *[c for c in by if c not in evals]]], on="run_id"
    )
    rows = []
    for target in targets:
        reached = points[points["val_loss"] <= target].sort_values("step", kind="mergesort")
        first = reached.groupby("run_id", as_index=False).first()
        for key, group in first.groupby(list(by)):
            best = group.loc[group["step"].idxmin()]
            key = key if isinstance(key, tuple) else (key,)
            row = dict(zip(by, key)) | {
                "target": target,
                "steps": int(best["step"]),
                "run_id": best["run_id"],
            }
            row["sequences"] = row["steps"] * int(row["batch_size"])
            row["tokens"] = row["sequences"] * seq_len if seq_len else float(best["tokens"])
            rows.append(row)
    return pd.DataFrame(rows, columns=[*by, "target", "steps", "run_id", "sequences", "tokens"])


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
    a parabola are zero by construction; the bootstrap gives the spread)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    order = np.argsort(steps)
    s, e = steps[order], (steps * batch)[order]
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


def bootstrap(
    fit,
    batch: np.ndarray,
    steps: np.ndarray,
    key: str,
    n: int = 500,
    seed: int = 0,
    level: float = 0.9,
) -> tuple[float, float]:
    """Percentile interval of fit(batch, steps)[key] over resamples of the points (with replacement;
    resamples with fewer than three distinct batch sizes, or where the fit does not determine the
    value (NaN), are skipped; an infinite value, e.g. B_crit of points that never level off,
    counts)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n):
        pick = rng.integers(0, len(batch), len(batch))
        if len(np.unique(batch[pick])) < 3:
            continue
        value = fit(batch[pick], steps[pick])[key]
        if not np.isnan(value):
            values.append(value)
    if not values:
        return (np.nan, np.nan)
    lo, hi = np.quantile(
        values, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf"
    )  # sample values: no inf - inf
    return float(lo), float(hi)


def describe_interval(interval: tuple[float, float], limit: float) -> str:
    """An interval as "lo-hi", with an end beyond `limit` (e.g. 10x the largest batch measured, or
    infinite where resampled points never level off) read as unbounded; "not determined" where no
    resample gave a value."""
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


# --- the notebook's analyses: targets, fits per target, pool-size scaling, schedules -------------


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


def _fit_row(target: float, part: pd.DataFrame, limit: float) -> tuple[dict, dict]:
    """The three fits of one target's (batch, steps) points; (table row, McCandlish fit)."""
    B, S = part["batch_size"].to_numpy(float), part["steps"].to_numpy(float)
    mc, zh, wsd = fit_mccandlish(B, S), fit_zhang(B, S), fit_wsd(B, S)

    def interval(fit, key: str) -> str:
        return describe_interval(bootstrap(fit, B, S, key), limit)

    fewest = part.loc[part["tokens"] == part["tokens"].min(), "batch_size"]
    row = {
        "target": target,
        "batch sizes": len(part),
        "B_crit (McCandlish)": mc["B_crit"],
        "B_crit 90% CI": interval(fit_mccandlish, "B_crit"),
        "max |log residual|": float(np.abs(mc["residuals"]).max()),
        "B* (Zhang)": zh["B_star"],
        "B* 90% CI": interval(fit_zhang, "B_star"),
        "max |residual| (steps)": float(np.abs(zh["residuals"]).max()),
        "B_opt (Zhou)": wsd["B_opt"],
        "B_opt 90% CI": interval(fit_wsd, "B_opt"),
        "B_min (Zhou)": wsd["B_min"],
        # tokens to target tie at evaluation resolution: every batch at the minimum
        "fewest tokens at batch": ", ".join(str(b) for b in fewest),
    }
    return row, mc


def fit_targets(reach: pd.DataFrame, limit: float) -> tuple[pd.DataFrame, dict[float, dict]]:
    """McCandlish, Zhang and Zhou (WSD) fits per target of `reach` (steps_to_target; targets with
    fewer than three batch sizes are skipped), with 90% bootstrap intervals; interval ends beyond
    `limit` (sequences) read "unbounded". Returns (one row per target, {target: McCandlish fit})."""
    rows, mccandlish = [], {}
    for target, part in reach.groupby("target"):
        if len(part) < 3:
            continue
        row, mccandlish[target] = _fit_row(target, part, limit)
        rows.append(row)
    return pd.DataFrame(rows), mccandlish


def noise_trajectory(runs: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """B_simple (sequences) per evaluation of the noise-scale runs: batch_size, epoch, tokens,
    val_loss, b_simple, in batch then token order."""
    columns = ["batch_size", "epoch", "tokens", "val_loss", "b_simple"]
    merged = evals.merge(runs[["run_id", "batch_size"]], on="run_id")
    return merged[columns].sort_values(["batch_size", "tokens"])


def _interval_columns(name: str, B: np.ndarray, S: np.ndarray, fit, key: str) -> dict:
    """Point estimate and 90% bootstrap interval of fit(B, S)[key] as three columns."""
    if len(np.unique(B)) < 3:
        return {name: np.nan, f"{name} lo": np.nan, f"{name} hi": np.nan}
    lo, hi = bootstrap(fit, B, S, key)
    return {name: fit(B, S)[key], f"{name} lo": lo, f"{name} hi": hi}


def pool_size_scaling(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    pool_tokens: dict[str, int],
    n_batches: int,
    seq_len: int,
) -> pd.DataFrame:
    """B_crit and B* (sequences, with 90% bootstrap intervals) per pool of `pool_tokens` (pool
    path -> training tokens), each at the lowest loss `n_batches` batch sizes reach on that pool."""
    rows = []
    for pool, tokens in pool_tokens.items():
        mine = runs[runs["pool"] == str(pool)]
        mine_evals = evals[evals["run_id"].isin(mine["run_id"])]
        target = reachable_target(mine, mine_evals, n_batches)
        part = steps_to_target(mine, mine_evals, [target], seq_len=seq_len)
        B, S = part["batch_size"].to_numpy(float), part["steps"].to_numpy(float)
        row = {"pool tokens": tokens, "target": target, "batch sizes": len(part)}
        if len(part) >= 3:
            row |= _interval_columns("B_crit", B, S, fit_mccandlish, "B_crit")
            row |= _interval_columns("B*", B, S, fit_zhang, "B_star")
        else:
            row |= {"B_crit": np.nan, "B*": np.nan}
        rows.append(row)
    return pd.DataFrame(rows)


def scaling_laws(scaling: pd.DataFrame) -> dict[str, dict]:
    """Power laws B = c D^alpha (D in millions of training tokens) for B_crit and B*; empty where
    any pool has no fit."""
    if not scaling[["B_crit", "B*"]].notna().all().all():
        return {}
    D = scaling["pool tokens"] / 1e6
    return {name: power_law(D, scaling[name]) for name in ("B_crit", "B*")}


def schedules_vs_fixed(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    schedule_runs: pd.DataFrame,
    schedule_evals: pd.DataFrame,
    schedules: dict[str, str],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The best run (lowest best val loss, over lr) of the fixed-batch sweep and of each batch-size
    schedule: (table with policy, best val loss, lr, best epoch; row 0 the fixed batch,
    {policy: its evaluation curve})."""
    fixed = runs.loc[runs["best_val_loss"].idxmin()]
    best = [(f"fixed batch {int(fixed['batch_size'])}", fixed, evals)]
    for name, schedule in schedules.items():
        mine = schedule_runs[schedule_runs["batch_schedule"] == schedule]
        best.append(
            (f"{name} ({schedule})", mine.loc[mine["best_val_loss"].idxmin()], schedule_evals)
        )
    table = pd.DataFrame(
        [
            {
                "policy": label,
                "best val loss": run["best_val_loss"],
                "lr": run["lr"],
                "best epoch": run["best_epoch"],
            }
            for label, run, _ in best
        ]
    )
    curves = {label: source[source["run_id"] == run["run_id"]] for label, run, source in best}
    return table, curves
