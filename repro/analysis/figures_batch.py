"""The figures of notebook 02 (the batch-size sweep): tuned loss, differences from the optimum
and downstream accuracy per batch size, the optimal batch per model size, loss curves of tuned
runs, and arms side by side per batch (arms_vs_batch, which notebook 03's figures reuse). One
function per figure: each takes the tables the notebook computed and returns a matplotlib Figure
(the notebook saves it with study.save). Style and shared helpers: repro.analysis.plots.

Units: losses in nats/token; batch sizes in sequences.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from repro.analysis import plots
from repro.analysis.analyses import across_replicates, endpoint_curve
from repro.runtime.shapes import by_size

FLOOR_MARGIN = 0.25  # fraction of the validation axis below its data where the floor is drawn


@plots.styled
def best_loss_vs_batch(
    endpoints: pd.DataFrame, batch_sizes, floor: float | None = None
) -> plt.Figure:
    """Left: tuned validation loss per batch size, one curve per model size (mean over replicates,
    90% interval over replicates and validation documents; models side by side at each batch), and
    the Bayes floor where known. Right:
    the final training loss of the same runs (mean, min-max over replicates): a batch whose
    training loss is lower while its validation loss is higher over-fits. A floor more than
    FLOOR_MARGIN of the axis below the data is named in the legend, not drawn."""
    fig, (val_ax, train_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (
        (val_ax, "val_loss", "validation loss, tuned (nats/token)", ("low", "high"), "-"),
        (train_ax, "train_loss", "training loss, end of the tuned run", ("min", "max"), "--"),
    )
    models = by_size(endpoints["model"].unique())
    for ax, value, ylabel, (lo, hi), style in panels:
        means = across_replicates(endpoints, value=value)
        for i, model in enumerate(models):
            group = means[means["model"] == model]
            ax.errorbar(
                plots.dodged(group["batch_size"], i, len(models)),
                group["mean"],
                yerr=plots.interval(group["mean"], group[lo], group[hi]),
                capsize=3,
                marker="o",
                linestyle=style,
                color=plots.PALETTE[models.index(model)],
                label=model,
            )
        plots.batch_axis(ax, batch_sizes)
        ax.set_ylabel(ylabel)
    low, high = val_ax.get_ylim()
    if floor is not None and floor >= low - FLOOR_MARGIN * (high - low):
        val_ax.axhline(floor, color="k", linestyle=":", label=f"Bayes floor ({floor:.3f})")
    elif floor is not None:  # far below: drawing it would squash the differences the claims test
        val_ax.plot([], [], " ", label=f"Bayes floor {floor:.3f}, below the axis")
    replicates = int(endpoints.groupby(["model", "batch_size"]).size().max())
    val_ax.set_title(f"Validation (mean over {replicates} replicates, 90% interval)")
    train_ax.set_title("Training (mean, min-max over replicates)")
    handles, labels = val_ax.get_legend_handles_labels()  # the models, and the floor if drawn
    plots.legend_outside(train_ax, title="model", handles=handles, labels=labels)
    return fig


@plots.styled
def batch_differences(table: pd.DataFrame, batch_sizes) -> plt.Figure:
    """Each batch size's tuned validation loss minus its model size's tuned optimum
    (analyses.batch_differences), paired over replicates and documents with 90% intervals, model
    sizes side by side (open: no interval, e.g. one replicate): the differences the claims test,
    on a symmetric-log axis (plots.difference_axis) so that small and large gaps both show."""
    fig, ax = plt.subplots()
    shown = table[table["difference"].notna()]
    bounded = np.isfinite(shown["low"]) & np.isfinite(shown["high"])
    models = by_size(shown["model"].unique())
    for i, model in enumerate(models):
        mine, color = shown["model"] == model, plots.PALETTE[i]
        x, y = plots.dodged(shown["batch_size"], i, len(models)), shown["difference"]
        ax.plot(x[mine], y[mine], color=color, label=model, **plots.MEASURED)
        bars = mine & bounded
        interval = plots.interval(y[bars], shown["low"][bars], shown["high"][bars])
        ax.errorbar(x[bars], y[bars], yerr=interval, capsize=3, color=color, linestyle="none")
        ax.plot(x[mine & ~bounded], y[mine & ~bounded], "o", color=color, markerfacecolor="white")
    if not bounded.all():
        ax.plot([], [], "o", color="gray", markerfacecolor="white", label="no interval")
    ax.axhline(0, color="k", linewidth=0.8)
    ends = pd.concat([shown["difference"], shown["low"][bounded], shown["high"][bounded]])
    plots.difference_axis(ax, ends.min(), ends.max())
    plots.batch_axis(ax, batch_sizes)
    ax.set_ylabel("minus the tuned optimum (nats/token)")
    replicates = int(table["replicates"].max()) if len(table) else 0
    ax.set_title(f"Validation loss against each size's optimum ({replicates} replicates, 90%)")
    plots.legend_outside(ax, title="model")
    return fig


@plots.styled
def accuracy_vs_batch(endpoints: pd.DataFrame, tasks: list[str], batch_sizes) -> plt.Figure:
    """Left: the tuned validation loss per batch size; then one panel per downstream task: the
    accuracy of the same tuned endpoints, one curve per model size (mean over replicates, 90%
    interval from the standard errors over examples), and chance where known."""
    from repro.analysis.accuracy import CHANCE, Z90, accuracy_per_batch

    fig, axes = plt.subplots(1, 1 + len(tasks), figsize=(5 * (1 + len(tasks)), 4.2))
    models = by_size(endpoints["model"].unique())
    for i, task in enumerate(tasks):
        scores = accuracy_per_batch(endpoints, task)
        for model in models:
            group = scores[scores["model"] == model]
            style = {"marker": "o", "color": plots.PALETTE[models.index(model)], "label": model}
            if i == 0:
                axes[0].plot(group["batch_size"], group["val_loss"], **style)
            axes[1 + i].errorbar(
                group["batch_size"], group["acc"], yerr=Z90 * group["acc_se"], capsize=3, **style
            )
        if task in CHANCE:
            axes[1 + i].axhline(CHANCE[task], color="k", linestyle=":", label="chance")
        axes[1 + i].set_ylabel(f"{task} accuracy (fraction)")
        axes[1 + i].set_title(f"{task} (90% interval)")
    axes[0].set_ylabel("validation loss, tuned (nats/token)")
    axes[0].set_title("Validation loss (mean over replicates)")
    for ax in axes:
        plots.batch_axis(ax, batch_sizes)
    plots.legend_outside(axes[-1], title="model")
    return fig


@plots.styled
def optimal_batch_vs_size(table: pd.DataFrame) -> plt.Figure:
    """The tuned optimal batch per model size (analyses.optimal_batches): the optimum of the
    replicate-mean loss (line), each replicate's own optimum (crosses), and the range of batches
    whose 90% interval overlaps the optimum's (bar)."""
    fig, ax = plt.subplots()
    ax.errorbar(
        table["params"],
        table["batch"],
        yerr=plots.interval(table["batch"], table["plausible_low"], table["plausible_high"]),
        capsize=4,
        marker="o",
        color=plots.PALETTE[0],
        label="optimum of the replicate mean (bar: batches whose 90% interval overlaps it)",
    )
    for i, (_, row) in enumerate(table.iterrows()):
        own = row["replicate_batches"]
        ax.scatter(
            [row["params"]] * len(own),
            own,
            marker="x",
            color=plots.PALETTE[1],
            zorder=3,  # over the replicate-mean marker where they coincide
            label="optimum on each replicate" if i == 0 else None,
        )
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("parameters (untied)")
    ax.set_ylabel("optimal batch size (sequences)")
    ax.set_title("Optimal batch vs model size")
    plots.legend_outside(ax)
    return fig


@plots.styled
def curves(evals: pd.DataFrame, picks: pd.DataFrame, title: str) -> plt.Figure:
    """Validation (solid) and training (dashed; mean over the steps since the previous evaluation)
    loss per epoch of the tuned runs in `picks` (endpoints rows), one colour per batch size."""
    colors = plots.batch_colors(picks["batch_size"])
    fig, ax = plt.subplots()
    for _, end in picks.iterrows():
        curve, color = endpoint_curve(evals, end), colors[int(end["batch_size"])]
        ax.plot(
            curve["epoch"],
            curve["val_loss"],
            color=color,
            label=f"batch {end['batch_size']}, validation",
            **plots.MEASURED,
        )
        ax.plot(
            curve["epoch"],
            curve["train_loss"],
            color=color,
            linestyle="--",
            label=f"batch {end['batch_size']}, training (mean since previous eval.)",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    plots.legend_outside(ax)
    return fig


@plots.styled
def arms_vs_batch(
    arms: dict[str, pd.DataFrame], batch_sizes, title: str, legend: str
) -> plt.Figure:
    """Best val loss per batch size (sequences) for each arm ({label: batch_endpoints}), mean and
    90% interval over replicates and validation documents, the arms side by side at each batch; an
    arm measured at only some of `batch_sizes` as points."""
    fig, ax = plt.subplots()
    for i, (color, (label, endpoints)) in enumerate(zip(plots.PALETTE, arms.items())):
        agg = across_replicates(endpoints, by=["batch_size"])
        every = set(agg["batch_size"]) == set(batch_sizes)
        ax.errorbar(
            plots.dodged(agg["batch_size"], i, len(arms)),
            agg["mean"],
            capsize=3,
            color=color,
            label=label,
            yerr=plots.interval(agg["mean"], agg["low"], agg["high"]),
            **(plots.MEASURED | ({} if every else {"linestyle": "none"})),
        )
    plots.batch_axis(ax, batch_sizes)
    ax.set_ylabel(plots.LOSS)
    ax.set_title(f"{title} ({plots.replicates(agg['count'])}, 90% interval)")
    plots.legend_outside(ax, title=legend)
    return fig


@plots.styled
def beta2_vs_batch(arms: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Tuned val loss per batch size under each AdamW beta2 setting ({label: batch_endpoints}):
    the batch sweep's at every batch, the ablation's at its batches (arms_vs_batch)."""
    return arms_vs_batch(arms, batch_sizes, "AdamW beta2 at the small-batch end", "AdamW betas")
