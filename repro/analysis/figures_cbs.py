"""The figures of notebook 05 (the critical batch size): the gradient noise scale over training,
steps and tokens to a target loss with their fits, the fitted batch sizes, the critical batch size
against pool size, and batch-size schedules against the best fixed batch. One function per figure:
each takes the tables the notebook computed and returns a matplotlib Figure (the notebook saves it
with study.save). Style and shared helpers: repro.analysis.plots.

Units: losses in nats/token; batch sizes and B_simple in sequences; tokens are training tokens;
steps are optimizer steps.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from repro.analysis import plots
from repro.analysis.intervals import Difference
from repro.analysis.results import Results
from repro.design.regime import ZHANG_LAW


def _pool_name(pool: str) -> str:
    return Path(pool).name


@plots.styled
def noise_scale(noise: Results) -> plt.Figure:
    """B_simple (sequences) against training tokens for each noise-scale run of `noise`: one
    colour per batch, one marker per pool."""
    runs, evals = noise.runs, noise.evals
    colors = plots.batch_colors(runs["batch_size"])
    markers = plots.pool_markers(runs["pool"])
    fig, ax = plt.subplots()
    for _, run in runs.sort_values(["batch_size", "pool"]).iterrows():
        curve = evals[evals["run_id"] == run["run_id"]].sort_values("tokens")
        ax.plot(
            curve["tokens"],
            curve["b_simple"],
            color=colors[int(run["batch_size"])],
            label=f"batch {run['batch_size']}, {_pool_name(run['pool'])}",
            **plots.MEASURED | {"marker": markers[run["pool"]]},
        )
    ax.xaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("B_simple (sequences)")
    micro, lrs = runs["micro_batch"].iloc[0], ", ".join(f"{v:g}" for v in runs["lr"].unique())
    ax.set_title(f"Gradient noise scale (micro-batch {micro}, lr {lrs})", fontsize="medium")
    plots.legend_outside(ax, title="batch (sequences), pool")
    return fig


def _steps_panel(ax: plt.Axes, reach: pd.DataFrame, fits: dict, batch_sizes, colors) -> None:
    """S(B) per target (colour) and pool (marker; interpolated crossing steps); left-censored
    points (reached at the first evaluation) as open markers at that evaluation, an upper bound;
    each pool's McCandlish fit over its measured range; batches that reach a target on no pool as
    x markers on the top edge."""
    markers = plots.pool_markers(reach["pool"])
    for (target, pool), part in reach.groupby(["target", "pool"]):
        part = part.sort_values("batch_size")
        censored = part["left-censored"].astype(bool)
        style = {"color": colors[target], "marker": markers[pool]}
        ax.plot(
            part.loc[~censored, "batch_size"],
            part.loc[~censored, "crossing step"],
            linestyle="-",
            alpha=0.85,
            **style,
        )
        ax.plot(
            part.loc[censored, "batch_size"],
            part.loc[censored, "crossing step"],
            linestyle="none",
            fillstyle="none",
            **style,
        )
        if (pool, target) in fits:
            fit = fits[(pool, target)]
            b = np.geomspace(part["batch_size"].min(), part["batch_size"].max(), 50)
            ax.plot(b, fit["S_min"] + fit["E_min"] / b, color=colors[target], **plots.PROJECTED)
    for i, (target, part) in enumerate(reach.groupby("target")):
        _mark_unreached(ax, sorted(set(batch_sizes) - set(part["batch_size"])), i, colors[target])
    plots.batch_axis(ax, batch_sizes)
    if len(reach):
        plots.log_axis(ax, "y", reach["crossing step"].min(), reach["crossing step"].max())
    ax.set_ylabel("steps to target")
    ax.set_title("S(B); dashed: McCandlish fits; open: at 1st eval", fontsize="medium")


def _mark_unreached(ax: plt.Axes, missing: list[int], row: int, color) -> None:
    """x markers along the top edge (one row per target) at the batch sizes in `missing`."""
    y = 0.97 - 0.05 * row  # axes fraction
    where = ax.get_xaxis_transform()
    ax.plot(missing, [y] * len(missing), color=color, transform=where, **plots.NOT_REACHED)
    if missing:
        ax.annotate(
            "not reached",
            (missing[0], y),
            xycoords=where,
            xytext=(-7, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=plots.MIN_FONT_PT,
            color=color,
        )


@plots.styled
def steps_tokens_to_target(reach: pd.DataFrame, fits: dict, batch_sizes) -> plt.Figure:
    """Left: steps to each target loss per batch size and pool (crossing steps of
    cbs.steps_to_target), with each pool's McCandlish fit (cbs.fit_targets, keyed by (pool,
    target)) over its measured range. Right: tokens against steps at the crossing, one point per
    batch size and pool, connected in step order; the first pool's points labelled with the
    batch size. Fitted and interpolated values drawn to plots.DRAWN_DIGITS digits."""
    reach, fits = plots.settled(reach), {key: plots.settled(fit) for key, fit in fits.items()}
    targets = sorted(reach["target"].unique())
    colors = dict(zip(targets, plots.PALETTE))
    markers = plots.pool_markers(reach["pool"])
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(10, 3.8))
    _steps_panel(ax_s, reach, fits, batch_sizes, colors)
    for (target, pool), part in reach.groupby(["target", "pool"]):
        part = part.sort_values("crossing step")
        ax_e.plot(
            part["crossing step"],
            part["tokens"],
            color=colors[target],
            label=f"{target}, {_pool_name(pool)}",
            **plots.MEASURED | {"marker": markers[pool]},
        )
        if pool != min(markers):
            continue
        for _, p in part.iterrows():
            ax_e.annotate(
                str(p["batch_size"]),
                (p["crossing step"], p["tokens"]),
                fontsize=plots.MIN_FONT_PT,
                xytext=(3, 3),
                textcoords="offset points",
                color=colors[target],
            )
    if len(reach):
        plots.log_axis(ax_e, "x", reach["crossing step"].min(), reach["crossing step"].max())
        plots.log_axis(ax_e, "y", reach["tokens"].min(), reach["tokens"].max())
    ax_e.set_xlabel("steps to target")
    ax_e.set_ylabel("training tokens to target")
    ax_e.set_title("E(S); labels: batch size (sequences)", fontsize="medium")
    plots.legend_outside(ax_e, title="target val loss (nats/token), pool")
    return fig


FITTED_BATCHES = ("B_crit", "B_simple", "B*", "B_opt")
"""The fitted batch sizes (sequences) the 05 claims read, one row each in fitted_batches."""


def _pool_points(ax: plt.Axes, rows: pd.DataFrame, name: str, y: float, edge: float) -> None:
    """Each pool's `name` at height `y` (one marker per pool); an infinite value at `edge`, open."""
    markers = plots.pool_markers(rows["pool"])
    for _, row in rows.iterrows():
        infinite = row[name] == np.inf
        ax.plot(
            edge if infinite else row[name],
            y,
            linestyle="none",
            color=plots.PALETTE[0],
            marker=markers[row["pool"]],
            mfc="none" if infinite else None,
            label=_pool_name(row["pool"]),
        )


@plots.styled
def fitted_batches(intervals: pd.DataFrame, fits: pd.DataFrame, target: float) -> plt.Figure:
    """The fitted batch sizes (sequences) at `target` (cbs.fit_intervals rows and cbs.fit_targets
    rows): each pool's value (one marker per pool; an infinite one, steps that never level off,
    open at the right edge) and the geometric mean over pools with its 90% interval over pools
    (black bar; none where a pool's value is not finite); drawn to plots.DRAWN_DIGITS digits."""
    intervals, fits = plots.settled(intervals), plots.settled(fits)
    rows = fits[fits["target"] == target].reindex(columns=["pool", *FITTED_BATCHES])
    mine = intervals[(intervals["target"] == target) & np.isfinite(intervals["low"])]
    mine = mine.set_index("quantity").reindex(FITTED_BATCHES).dropna(subset=["mean"])
    values = np.concatenate([rows[list(FITTED_BATCHES)].to_numpy(float).ravel(), mine["high"]])
    values = values[np.isfinite(values) & (values > 0)]
    lo, edge = (values.min() / 1.5, values.max() * 1.5) if len(values) else (1.0, 10.0)
    fig, ax = plt.subplots()
    for y, name in enumerate(FITTED_BATCHES):
        _pool_points(ax, rows, name, y, edge)
        if name in mine.index:
            m = mine.loc[name]
            ax.errorbar(
                [m["mean"]],
                [y + 0.2],
                xerr=[[m["mean"] - m["low"]], [m["high"] - m["mean"]]],
                color="k",
                capsize=3,
                marker="|",
                label="mean, 90% interval over pools",
            )
    ax.set_yticks(range(len(FITTED_BATCHES)), FITTED_BATCHES)
    ax.set_ylim(-0.6, len(FITTED_BATCHES) - 0.4)
    ax.set_xlim(lo, edge * 1.2)
    plots.log_axis(ax, "x", lo, edge)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("fitted at the target")
    ax.set_title(f"Fitted batch sizes at target {target} (open: infinite)", fontsize="medium")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one entry per pool
    plots.legend_outside(ax, handles=list(unique.values()), labels=list(unique))
    return fig


def _exponent(alpha: Difference) -> str:
    """A fitted exponent (a Difference over pool seeds) with its 90% interval where known:
    " ~ D^0.52 [0.31, 0.70]"."""
    if np.isnan(alpha.value):
        return ""
    interval = "" if np.isinf(alpha.low) else f" [{alpha.low:.2f}, {alpha.high:.2f}]"
    return f" ~ D^{alpha.value:.2f}{interval}"


def _per_seed(ax: plt.Axes, scaling: pd.DataFrame, name: str, color, limit: float) -> None:
    """Each pool seed's `name` (sequences) against pool size: one marker per seed, thin lines;
    values above `limit` drawn at it as ^."""
    markers = plots.pool_markers(scaling["seed"])
    for seed, part in scaling.groupby("seed"):
        part = part.sort_values("pool tokens")
        style = {"color": color, "marker": markers[seed]}
        ax.plot(
            part["pool tokens"],
            part[name].clip(upper=limit),
            linewidth=0.8,
            alpha=0.6,
            label=f"{name}, seed {seed}",
            **style,
        )
        above = part[part[name] > limit]
        ax.plot(above["pool tokens"], [limit] * len(above), linestyle="none", mfc="white", **style)


@plots.styled
def cbs_vs_pool_size(scaling: pd.DataFrame, laws: dict, limit: float) -> plt.Figure:
    """B_crit and B* (sequences) against pool size, each pool seed's fits on its own pools
    (_per_seed: the seeds' pools differ in size, so the interval is on the exponent, in the
    legend: mean and 90% interval over seeds, cbs.scaling_laws), and Zhang et al.'s law
    (regime.ZHANG_LAW, D in millions of tokens: compare slopes only). Fits drawn to
    plots.DRAWN_DIGITS digits."""
    scaling = plots.settled(scaling)
    fig, ax = plt.subplots()
    for i, name in enumerate(("B_crit", "B*")):
        _per_seed(ax, scaling, name, plots.PALETTE[i], limit)
        exponent = _exponent(laws[name]) if name in laws else ""
        ax.plot([], [], color=plots.PALETTE[i], label=f"{name}{exponent} (over seeds)")
    if not np.isfinite(scaling[["B_crit", "B*"]].to_numpy(float)).any():
        no_fit = "no fit: fewer than 3 batch sizes reach any pool's target"
        ax.text(0.02, 0.95, no_fit, transform=ax.transAxes, va="top", fontsize="small")
    D = np.geomspace(scaling["pool tokens"].min(), scaling["pool tokens"].max(), 20) / 1e6
    coefficient, exponent = ZHANG_LAW
    zhang = f"Zhang et al.: {coefficient} D^{exponent} (their scale; compare slopes)"
    ax.plot(
        D * 1e6, coefficient * D**exponent, color=plots.PALETTE[2], label=zhang, **plots.PROJECTED
    )
    plots.log_axis(ax, "x", scaling["pool tokens"].min() * 0.9, scaling["pool tokens"].max() * 1.1)
    low, high = ax.get_ylim()
    plots.log_axis(ax, "y", max(low, 1e-3), high)
    ax.set_xlabel("pool size D (training tokens)")
    ax.set_ylabel("critical batch size (sequences)")
    ax.set_title(f"Critical batch size vs data size (open: above {limit:g})", fontsize="medium")
    plots.legend_outside(ax)
    return fig


@plots.styled
def schedules(curves: pd.DataFrame) -> plt.Figure:
    """Validation loss against training tokens of the run each policy's tuning chose on each pool
    (batch_schedules.schedules_vs_fixed): one colour per policy, one marker per pool."""
    markers = plots.pool_markers(curves["pool"])
    colors = dict(zip(curves["policy"].unique(), plots.PALETTE))
    fig, ax = plt.subplots()
    for (policy, pool), curve in curves.groupby(["policy", "pool"], sort=False):
        ax.plot(
            curve["tokens"],
            curve["val_loss"],
            color=colors[policy],
            label=f"{policy}, {pool}",
            **plots.MEASURED | {"marker": markers[pool]},
        )
    ax.xaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Schedules vs the best fixed batch (tuned runs)")
    plots.legend_outside(ax, title="policy, pool")
    return fig
