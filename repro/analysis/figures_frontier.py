"""The figures of notebook 04 (the GPU-time frontier): loss per deadline, the optimal batch per
GPU count and deadline, smaller batches on fewer GPUs against larger ones on more, latency
projections and batch-size schedule policies. One function per figure: each takes the tables the
notebook computed and returns a matplotlib Figure (the notebook saves it with study.save). Style
and shared helpers: repro.analysis.plots.

Units: losses in nats/token; batch sizes in sequences; deadlines in step units (one micro-batch
forward+backward on one GPU).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.analysis import plots
from repro.analysis.figure_checks import MIN_FONT_PT
from repro.analysis.frontier import over_pools
from repro.analysis.intervals import LEVEL

DEADLINE = "deadline (step units:\nmicro-batch forward+backward passes on one GPU)"
GPU_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # one per GPU count, beside its colour


def _mean_steps(ax: plt.Axes, means: pd.DataFrame, color, marker: str | None, label: str) -> None:
    """A step curve of `means` (over_pools rows of one series) with its band over pools."""
    ax.step(means["deadline"], means["mean"], where="post", color=color, marker=marker, label=label)
    plots.band(
        ax,
        means["deadline"],
        means["low"],
        means["high"],
        LEVEL,
        step="post",
        color=color,
        alpha=0.18,
        linewidth=0,
    )
    plots.replicated(ax, means["pools"])


NEAR_BEST = 1.05  # loss_vs_deadline's finding: within 5% of the loss every GPU count reaches


def _sooner(means: pd.DataFrame) -> str:
    """loss_vs_deadline's finding: a loss every GPU count reaches (NEAR_BEST times the highest of
    their best means), the deadline by which the fewest and the most GPUs reach it, and whether
    the fewest GPUs' interval there lies above the most GPUs' (decided) or not (undetermined)."""
    goal = NEAR_BEST * means.groupby("gpus")["mean"].min().max()
    first = means[means["mean"] <= goal].groupby("gpus")["deadline"].min()
    few, most = first.index.min(), first.index.max()
    at = means[(means["deadline"] == first[most])].set_index("gpus")
    decided = few not in at.index or at.loc[few, "low"] > at.loc[most, "high"]
    hedge = "" if decided else " (undetermined: the intervals overlap there)"
    return (
        f"{plots.gpu_label(most)} reach loss {goal:.3f} by deadline {first[most]:g}, "
        f"{plots.gpu_label(few)} by {first[few]:g}{hedge}"
    )


@plots.styled
def loss_vs_deadline(frontiers: pd.DataFrame) -> plt.Figure:
    """Best observed val loss per deadline, the mean over pools of each pool's frontier
    (frontier.pool_frontiers) with its 90% interval over pools (frontier.over_pools; a deadline
    only where every pool reaches it), one step curve and band per GPU count (a colour and a
    marker each)."""
    means = over_pools(frontiers, ["gpus"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (g, part) in enumerate(means.groupby("gpus")):
        color, marker = plots.PALETTE[i % len(plots.PALETTE)], GPU_MARKERS[i % len(GPU_MARKERS)]
        _mean_steps(ax, part, color, marker, plots.gpu_label(g))
    plots.log_axis(ax, "x", frontiers["deadline"].min(), frontiers["deadline"].max())
    ax.set_xlabel(DEADLINE)
    ax.set_ylabel(plots.LOSS)
    pools = frontiers["pool"].nunique()
    ax.set_title(
        f"{_sooner(means) if len(means) else 'nothing reachable'}\n(best observed loss, mean "
        f"over {pools} pools, {plots.interval_label(LEVEL, 'pools')})",
        fontsize="medium",
    )
    plots.legend_outside(ax, title="data parallel")
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around log-spaced centres (geometric midpoints, ends mirrored)."""
    logs = np.log(values)
    mids = (logs[1:] + logs[:-1]) / 2
    first, last = 2 * logs[0] - mids[0], 2 * logs[-1] - mids[-1]
    return np.exp(np.concatenate([[first], mids, [last]]))


def _optimum_finding(grid: pd.DataFrame) -> str:
    """optimal_batch_heatmap's finding: on the fewest and the most GPUs, the optimal batch at the
    tightest deadline that reaches anything and at the loosest."""
    parts = []
    for g in sorted({grid.index.min(), grid.index.max()}):
        row = grid.loc[g].dropna()
        if len(row):
            parts.append(
                f"{plots.gpu_label(g)}: batch {int(row.iloc[0])} at the tightest deadline, "
                f"{int(row.iloc[-1])} at the loosest"
            )
    return "; ".join(parts) or "nothing reachable"


@plots.styled
def optimal_batch_heatmap(table: pd.DataFrame, batch_sizes) -> plt.Figure:
    """The optimal batch size (sequences) per (GPUs, deadline) of one pool's frontier (in-sample)
    on a log deadline axis with round ticks: one colour per batch size (batch_colors), each cell
    numbered with its batch and outlined in white; blank where nothing is reachable."""
    grid = table.pivot(index="gpus", columns="deadline", values="batch_size")
    index = {b: i for i, b in enumerate(batch_sizes)}
    codes = grid.apply(lambda col: col.map(index)).to_numpy(float)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * len(grid.index)))
    deadlines = grid.columns.to_numpy(float)
    edges = _edges(deadlines)
    image = ax.pcolormesh(
        edges,
        np.arange(len(grid.index) + 1),
        codes,
        cmap=plots.batch_cmap(batch_sizes),
        vmin=-0.5,
        vmax=len(batch_sizes) - 0.5,
        edgecolors="white",
        linewidth=0.6,
    )
    centres = np.sqrt(edges[1:] * edges[:-1])
    for (row, column), code in np.ndenumerate(codes):
        if np.isfinite(code):
            ax.text(
                centres[column],
                row + 0.5,
                str(batch_sizes[int(code)]),
                ha="center",
                va="center",
                fontsize=MIN_FONT_PT,
                color="white" if code < len(batch_sizes) / 2 else "black",
            )
    plots.log_axis(ax, "x", deadlines[0], deadlines[-1])
    ax.set_yticks(np.arange(len(grid.index)) + 0.5, [str(g) for g in grid.index])
    ax.grid(False)
    bar = fig.colorbar(image, ax=ax, ticks=range(len(batch_sizes)))
    bar.ax.set_yticklabels([str(b) for b in batch_sizes])
    bar.set_label("optimal batch size\n(sequences)")
    ax.set_xlabel(DEADLINE)
    ax.set_ylabel("GPUs")
    ax.set_title(
        f"{_optimum_finding(grid)}\n(optimal batch, one pool, in-sample; blank: nothing "
        "reachable yet)",
        fontsize="medium",
    )
    return fig


CROSSOVER_ZOOM = 3  # fewer_gpus_smaller_batch's y axis: this many times the largest difference


@plots.styled
def fewer_gpus_smaller_batch(judged: pd.DataFrame, batch_sizes) -> plt.Figure:
    """What the crossover claim tests (deadline_claims.judged_crossovers): per deadline, the loss of
    a smaller batch on fewer GPUs minus that of a larger batch on more (nats/token; below 0 the
    smaller batch wins), held out on every replicate, with simultaneous 90% intervals; one panel
    per larger batch on the GPUs it fills (three a row), one colour per smaller batch; each panel's
    y axis spans CROSSOVER_ZOOM times its largest difference, so that Bonferroni intervals hundreds
    of nats wide do not flatten the differences."""
    larger = sorted(set(zip(judged["large_batch"], judged["large_gpus"])))
    columns = min(3, max(1, len(larger)))
    rows = max(1, -(-len(larger) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4.4 * columns, 3.8 * rows), squeeze=False)
    colors = plots.batch_colors(batch_sizes)
    for ax, (b2, g2) in zip(axes.flat, larger):
        mine = judged[(judged["large_batch"] == b2) & (judged["large_gpus"] == g2)]
        pairs = mine.groupby(["small_batch", "small_gpus"])
        for i, ((b1, g1), part) in enumerate(pairs):
            plots.errorbars(
                ax,
                plots.dodged(part["deadline"], i, pairs.ngroups),
                part["difference"],
                part["low"],
                part["high"],
                LEVEL,  # simultaneous, over every comparison (Bonferroni)
                capsize=2,
                color=colors[b1],
                label=f"batch {b1} on {plots.gpu_label(g1)}",
                **plots.MEASURED,
            )
        ax.axhline(0, color="k", linewidth=0.8)
        biggest = mine["difference"].abs().max()  # NaN when no replicate measured a pair
        reach = max(CROSSOVER_ZOOM * biggest, 0.05) if np.isfinite(biggest) else 0.05
        ax.set_ylim(-reach, reach)  # the differences' scale; wider intervals run off the panel
        plots.log_axis(ax, "x", mine["deadline"].min(), mine["deadline"].max(), max_ticks=5)
        ax.set_xlabel(DEADLINE)
        ax.set_ylabel("smaller - larger batch (nats/token)")
        ax.set_title(f"vs batch {b2} on {plots.gpu_label(g2)}")
    for ax in axes.flat[len(larger) :]:
        ax.remove()  # no panel without a comparison
    if not larger:
        fig.text(0.5, 0.5, "no deadline at which both batches of a pair train", ha="center")
    wins, losses = int((judged["high"] < 0).sum()), int((judged["low"] > 0).sum())
    fig.suptitle(
        f"Smaller batch on fewer GPUs wins {wins}, loses {losses} of {len(judged)} comparisons "
        "(the rest undetermined)\nsmaller minus larger batch, held out on every replicate; "
        f"simultaneous {plots.percent(LEVEL)} intervals (Bonferroni; one cut at a panel's edge "
        "reaches beyond it)",
        fontsize="medium",
    )
    handles = {h.get_label(): h for ax in fig.axes for h in ax.get_legend_handles_labels()[0]}
    order = sorted(handles, key=lambda label: int(label.split()[1]))
    if order:
        fig.legend(
            [handles[k] for k in order],
            order,
            loc="center left",
            bbox_to_anchor=(1, 0.5),
            title="smaller batch",
        )
    fig.tight_layout()
    return fig


@plots.styled
def latency_projection(
    table: pd.DataFrame, projections: dict[str, pd.DataFrame], gpus: int
) -> plt.Figure:
    """The measured frontier on `gpus` GPUs (solid) and projected ones ({label: frontier},
    dashed)."""
    fig, ax = plt.subplots()
    measured = table[table["gpus"] == gpus]
    ax.step(
        measured["deadline"],
        measured["best_val_loss"],
        where="post",
        color=plots.PALETTE[0],
        label=f"{plots.gpu_label(gpus)}, data parallel (measured curves)",
    )
    for color, (label, projected) in zip(plots.PALETTE[1:], projections.items()):
        ax.step(
            projected["deadline"],
            projected["best_val_loss"],
            where="post",
            color=color,
            label=label,
            **plots.PROJECTED,
        )
    plots.log_axis(ax, "x", table["deadline"].min(), table["deadline"].max())
    ax.set_xlabel(DEADLINE)
    ax.set_ylabel(plots.LOSS)
    ax.set_title(_latency_finding(measured, projections))
    plots.legend_outside(ax)
    return fig


def _latency_finding(measured: pd.DataFrame, projections: dict[str, pd.DataFrame]) -> str:
    """How much sooner the last projection reaches the loss that the measured frontier ends
    within 0.05 nats/token of (the first deadline at or below it on each)."""
    target = measured["best_val_loss"].min() + 0.05
    label, projected = list(projections.items())[-1]

    def first(table: pd.DataFrame) -> float:
        return table.loc[table["best_val_loss"] <= target, "deadline"].min()

    return (
        f"Projected: {label.split(' (')[0]} reach {target:.2f} nats/token\nby deadline "
        f"{first(projected):,.0f}, data parallel by {first(measured):,.0f} step units"
    )


def _schedule_finding(fixed: pd.DataFrame, policies: pd.DataFrame) -> str:
    """At how many deadlines some schedule's interval over pools lies below the best fixed
    batch's (a schedule wins), and at how many every schedule's lies above it (they lose); the
    rest are undetermined."""
    both = policies.merge(fixed, on="deadline", suffixes=("", " fixed"))
    wins = both[both["high"] < both["low fixed"]]["deadline"].nunique()
    above = both["low"] > both["high fixed"]
    losses = above.groupby(both["deadline"]).all().sum()
    n = fixed["deadline"].nunique()
    return f"schedule wins at {wins}, loses at {losses} of {n} deadlines"


@plots.styled
def schedule_policies(
    fixed_frontiers: pd.DataFrame, frontiers: pd.DataFrame, gpu_counts: list[int]
) -> plt.Figure:
    """Best val loss per deadline of each batch-size schedule (frontier.schedule_policies)
    against the best fixed batch (frontier.pool_frontiers), mean over pools with 90% intervals
    over pools (frontier.over_pools), one panel per GPU count; each panel's title counts the
    deadlines at which the intervals decide (_schedule_finding)."""
    fig, axes = plt.subplots(
        1, len(gpu_counts), figsize=(5.4 * len(gpu_counts), 4.0), sharey=True, squeeze=False
    )
    fixed_means = over_pools(fixed_frontiers, ["gpus"])
    policy_means = over_pools(frontiers, ["gpus", "policy"])
    for ax, g in zip(axes[0], gpu_counts):
        fixed = fixed_means[fixed_means["gpus"] == g]
        _mean_steps(ax, fixed, "k", None, "best fixed batch")
        mine = policy_means[policy_means["gpus"] == g]
        for color, (policy, part) in zip(plots.PALETTE[1:], mine.groupby("policy", sort=False)):
            _mean_steps(ax, part, color, None, policy.replace(": ", ":\n", 1))
        plots.log_axis(
            ax,
            "x",
            fixed_frontiers["deadline"].min(),
            fixed_frontiers["deadline"].max(),
            max_ticks=5,
        )
        ax.set_xlabel(DEADLINE)
        ax.set_title(f"{plots.gpu_label(g)}: {_schedule_finding(fixed, mine)}", fontsize="medium")
    axes[0][0].set_ylabel(plots.LOSS)
    pools = fixed_frontiers["pool"].nunique()
    fig.suptitle(
        f"Batch-size schedules vs the best fixed batch (mean over {pools} pools, "
        f"{plots.interval_label(LEVEL, 'pools')})",
        fontsize="medium",
        y=1.03,
    )
    plots.legend_outside(axes[0][-1], title="policy")
    return fig
