"""The figures of notebook 06 (the value of a repeated token): the tuned loss per epoch budget with
the fitted data-constrained law, R_D* per batch size and recipe arm, and the ensemble curves. One
function per figure, taking the tables the notebook computed (repro.analysis.repetition,
repro.analysis.ensembles) and returning a matplotlib Figure. Style and helpers:
repro.analysis.plots.

Units: losses in nats/token; epochs are passes over the pool (U tokens); R_D* in repetitions
(epochs after the first); batch sizes in sequences.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from repro.analysis import plots
from repro.analysis.intervals import LEVEL, t_interval
from repro.analysis.repetition import MUENNIGHOFF_R_STAR, R_GRID, FreshFit, effective_data

INTERVAL = plots.interval_label(LEVEL)  # this module's error bars: over replicates (pools)


def _mean_interval(values: pd.Series) -> tuple[float, float, float]:
    """(mean, low, high) of the LEVEL t interval over replicates (low = high = mean for one)."""
    d = t_interval(values.tolist())
    return (d.value, d.low, d.high) if np.isfinite(d.low) else (d.value, d.value, d.value)


@plots.styled
def loss_vs_epochs(curves: pd.DataFrame, fits: pd.DataFrame, finding: str) -> plt.Figure:
    """The tuned loss at each epoch budget (tuned over the budgets up to it; mean over replicates,
    90% t interval over them) per batch size, the data-constrained law fitted to it (solid: the
    mean over replicates of each one's fit) and what fresh data would give, the same law at
    D' = D (dotted). `curves`: rows of pool, batch_size, epochs, val_loss (budget_points); `fits`:
    repetition.r_star_table by batch_size. The legend names the batches by colour and the three
    kinds of mark once each."""
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    batches = sorted(curves["batch_size"].unique())
    colors = plots.batch_colors(batches)
    grid = np.geomspace(1, curves["epochs"].max(), 100)
    for b in batches:
        mine = curves[curves["batch_size"] == b]
        stats = mine.groupby("epochs")["val_loss"].apply(_mean_interval)
        mean, low, high = (stats.map(lambda s, i=i: s[i]) for i in range(3))
        plots.errorbars(
            ax, stats.index, mean, low, high, LEVEL, color=colors[b], fmt="o", capsize=3
        )
        rows = plots.settled(fits[fits["batch_size"] == b])
        if rows.empty:
            continue
        laws = [FreshFit(r.E, r.B, r.beta, r.fresh_rms) for r in rows.itertuples()]
        repeated = [law.loss(effective_data(grid, r)) for law, r in zip(laws, rows["r_star"])]
        ax.plot(grid, np.mean(repeated, 0), color=colors[b])
        ax.plot(grid, np.mean([law.loss(grid) for law in laws], 0), color=colors[b], ls=":")
    handles = [Patch(color=colors[b], label=f"batch {b}") for b in batches]
    handles += [
        Line2D([], [], color="0.3", marker="o", ls="none", label=f"measured ({INTERVAL})"),
        Line2D([], [], color="0.3", label="fitted law, D' of repeated tokens"),
        Line2D([], [], color="0.3", ls=":", label="the law with fresh tokens, D' = D"),
    ]
    plots.log_axis(ax, "x", grid[0], grid[-1])
    ax.set_xlabel("epoch budget (passes over the pool)")
    ax.set_ylabel(plots.LOSS)
    ax.set_title(finding)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


@plots.styled
def r_star_vs_group(summary: pd.DataFrame, group: str, label: str, finding: str) -> plt.Figure:
    """R_D* per value of `group` (geometric mean over replicates, 90% interval of log10 R_D*
    over replicates; repetition.r_star_summary), on a log axis, with Muennighoff et al.'s 15.4.
    Hollow markers: some replicate at a bound of the R_D* grid; an interval's end beyond the grid
    (R_GRID, where R_D* is fitted) is drawn at the grid's end."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    summary = plots.settled(summary)
    x = np.arange(len(summary))
    low, high = (summary[end].clip(R_GRID[0], R_GRID[-1]) for end in ("low", "high"))
    plots.errorbars(
        ax,
        x,
        summary["R_D*"],
        low,
        high,
        LEVEL,
        marker="o",
        linestyle="none",
        capsize=4,
        color=plots.PALETTE[0],
        label=f"R_D* here ({INTERVAL})",
    )
    bounded = summary["at a bound"] > 0
    if bounded.any():
        ax.plot(
            x[bounded],
            summary.loc[bounded, "R_D*"],
            marker="o",
            markersize=11,
            markerfacecolor="none",
            linestyle="none",
            color=plots.PALETTE[3],
            label="a replicate at the grid's bound",
        )
    reference = f"Muennighoff et al.: {MUENNIGHOFF_R_STAR}"
    ax.axhline(MUENNIGHOFF_R_STAR, color="0.4", linestyle="--", label=reference)
    values = [*low, *high, MUENNIGHOFF_R_STAR]
    plots.log_axis(ax, "y", min(values) / 1.5, max(values) * 1.5)
    ax.set_xticks(x, [str(v) for v in summary[group]], rotation=25, ha="right")
    ax.set_xlabel(label)
    ax.set_ylabel("R_D* (repetitions)")
    ax.set_title(finding)
    plots.legend_outside(ax)
    fig.tight_layout()
    return fig


@plots.styled
def ensemble_curves(summary: pd.DataFrame, finding: str) -> plt.Figure:
    """The ensemble's validation loss against its members K (the mean over every K-member subset;
    mean over pools, 90% t interval over them; ensembles.ensemble_summary), one line per role."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    roles = list(dict.fromkeys(summary["role"]))
    for i, role in enumerate(roles):
        mine = summary[summary["role"] == role]
        batch = int(mine["batch_size"].iloc[0])
        plots.errorbars(
            ax,
            mine["K"] + 0.08 * (i - (len(roles) - 1) / 2),
            mine["loss"],
            mine["low"],
            mine["high"],
            LEVEL,
            marker=plots.POOL_MARKERS[i],
            capsize=3,
            color=plots.PALETTE[i],
            label=f"{role} ({batch})",
        )
    ax.set_xticks(sorted(summary["K"].unique()))
    ax.set_xlabel("ensemble members K (seeds of one tuned configuration)")
    ax.set_ylabel("ensemble val loss (nats/token)")
    ax.set_title(f"{finding}\n(mean over pools, {INTERVAL})")
    plots.legend_outside(ax, title="batch (sequences)")
    fig.tight_layout()
    return fig
