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

DEADLINE = "deadline (step units)"


@plots.styled
def loss_vs_deadline(table: pd.DataFrame) -> plt.Figure:
    """Best observed val loss per deadline, one step curve per GPU count (frontier.frontier)."""
    colors = plots.ordered_colors(table["gpus"])
    fig, ax = plt.subplots()
    for g, part in table.groupby("gpus"):
        ax.step(
            part["deadline"],
            part["best_val_loss"],
            where="post",
            color=colors[g],
            label=plots.gpu_label(g),
        )
    plots.log_axis(ax, "x", table["deadline"].min(), table["deadline"].max())
    ax.set_xlabel("deadline (step units: one micro-batch forward+backward on one GPU)")
    ax.set_ylabel(plots.LOSS)
    ax.set_title("Frontier from observed curves")
    plots.legend_outside(ax, title="data parallel")
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around log-spaced centres (geometric midpoints, ends mirrored)."""
    logs = np.log(values)
    mids = (logs[1:] + logs[:-1]) / 2
    first, last = 2 * logs[0] - mids[0], 2 * logs[-1] - mids[-1]
    return np.exp(np.concatenate([[first], mids, [last]]))


@plots.styled
def optimal_batch_heatmap(table: pd.DataFrame, batch_sizes) -> plt.Figure:
    """The optimal batch size per (GPUs, deadline) on a log deadline axis with round ticks; one
    colour per batch size (batch_colors); blank where nothing is reachable."""
    grid = table.pivot(index="gpus", columns="deadline", values="batch_size")
    index = {b: i for i, b in enumerate(batch_sizes)}
    codes = grid.apply(lambda col: col.map(index)).to_numpy(float)
    fig, ax = plt.subplots(figsize=(7, 3))
    deadlines = grid.columns.to_numpy(float)
    image = ax.pcolormesh(
        _edges(deadlines),
        np.arange(len(grid.index) + 1),
        codes,
        cmap=plots.batch_cmap(batch_sizes),
        vmin=-0.5,
        vmax=len(batch_sizes) - 0.5,
    )
    plots.log_axis(ax, "x", deadlines[0], deadlines[-1])
    ax.set_yticks(np.arange(len(grid.index)) + 0.5, [str(g) for g in grid.index])
    ax.grid(False)
    bar = fig.colorbar(image, ax=ax, ticks=range(len(batch_sizes)))
    bar.ax.set_yticklabels([str(b) for b in batch_sizes])
    bar.set_label("optimal batch size (sequences)")
    ax.set_xlabel(DEADLINE)
    ax.set_ylabel("GPUs")
    ax.set_title("Optimal batch size (blank: nothing reachable yet)")
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
            ax.errorbar(
                plots.dodged(part["deadline"], i, pairs.ngroups),
                part["difference"],
                yerr=plots.interval(part["difference"], part["low"], part["high"]),
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
    fig.suptitle(
        "Smaller batch on fewer GPUs minus larger batch on more, held out on every replicate\n"
        "below 0 the smaller batch wins (simultaneous 90% intervals, Bonferroni; an interval "
        "cut at a panel's edge reaches beyond it)",
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
    ax.set_title("Latency-oriented parallelism (dashed: projection)")
    plots.legend_outside(ax)
    return fig


@plots.styled
def schedule_policies(
    table: pd.DataFrame, frontiers: pd.DataFrame, gpu_counts: list[int]
) -> plt.Figure:
    """Best val loss per deadline of each batch-size schedule (frontier.schedule_policies) against
    the best fixed batch, one panel per GPU count."""
    fig, axes = plt.subplots(
        1, len(gpu_counts), figsize=(4.2 * len(gpu_counts), 3.6), sharey=True, squeeze=False
    )
    for ax, g in zip(axes[0], gpu_counts):
        fixed = table[table["gpus"] == g]
        ax.step(
            fixed["deadline"],
            fixed["best_val_loss"],
            where="post",
            color="k",
            label="best fixed batch",
        )
        mine = frontiers[frontiers["gpus"] == g]
        for color, (policy, part) in zip(plots.PALETTE[1:], mine.groupby("policy", sort=False)):
            ax.step(
                part["deadline"],
                part["best_val_loss"],
                where="post",
                color=color,
                label=f"schedule {policy}",
            )
        plots.log_axis(ax, "x", table["deadline"].min(), table["deadline"].max(), max_ticks=5)
        ax.set_xlabel(DEADLINE)
        ax.set_title(plots.gpu_label(g))
    axes[0][0].set_ylabel(plots.LOSS)
    plots.legend_outside(axes[0][-1], title="policy (batch from epoch fraction)")
    return fig
