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
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from repro.analysis import plots
from repro.analysis.analyses import across_replicates, endpoint_curve
from repro.analysis.intervals import LEVEL
from repro.runtime.shapes import by_size

FLOOR_MARGIN = 0.25  # fraction of the validation axis below its data where the floor is drawn
INTERVAL = f"{plots.percent(LEVEL)} interval"  # this module's error bars: of a replicate mean


def lowest_batch(means: pd.DataFrame, what: str) -> str:
    """A title's finding from one curve's rows (batch_size, mean, low, high; across_replicates):
    which batch gives the lowest `what`, how much higher (nats/token) the highest batch is, and
    whether their intervals are apart (else the order is not settled)."""
    best, worst = means.loc[means["mean"].idxmin()], means.loc[means["mean"].idxmax()]
    side = "intervals apart" if best["high"] < worst["low"] else "intervals overlap"
    return (
        f"batch {best['batch_size']:g} gives the lowest {what}; batch {worst['batch_size']:g} is "
        f"{worst['mean'] - best['mean']:+.2f} nats ({side})"
    )


@plots.styled
def best_loss_vs_batch(
    endpoints: pd.DataFrame, batch_sizes, floor: float | None = None
) -> plt.Figure:
    """Left: tuned validation loss per batch size, one curve per model size (mean over replicates,
    LEVEL interval over replicates and validation documents; models side by side at each batch),
    and the Bayes floor where known. Right: the final training loss of the same runs (mean, LEVEL
    t interval over replicates): a batch whose training loss is lower while its validation loss is
    higher over-fits. A floor more than FLOOR_MARGIN of the axis below the data is stated in the
    validation panel's title, not drawn. The titles state the largest model's findings."""
    fig, (val_ax, train_ax) = plt.subplots(1, 2, figsize=(11, 4.6))
    panels = (
        (val_ax, "val_loss", "validation loss, tuned (nats/token)", "-"),
        (train_ax, "train_loss", "training loss, end of run (nats/token)", "--"),
    )
    models = by_size(endpoints["model"].unique())
    findings = []
    for ax, value, ylabel, style in panels:
        means = across_replicates(endpoints, value=value)
        for i, model in enumerate(models):
            group = means[means["model"] == model]
            plots.errorbars(
                ax,
                plots.dodged(group["batch_size"], i, len(models)),
                group["mean"],
                group["low"],
                group["high"],
                LEVEL,
                capsize=3,
                marker="o",
                linestyle=style,
                color=plots.PALETTE[i],
                label=model,
            )
        findings.append(lowest_batch(group, value.split("_")[0] + " loss"))
        plots.batch_axis(ax, batch_sizes)
        ax.set_ylabel(ylabel)
    low, high = val_ax.get_ylim()
    floor_note = ""
    if floor is not None and floor >= low - FLOOR_MARGIN * (high - low):
        val_ax.axhline(floor, color="k", linestyle=":", label=f"Bayes floor ({floor:.3f})")
    elif floor is not None:  # far below: drawing it would squash the differences the claims test
        floor_note = f"\nBayes floor {floor:.3f} nats/token: below the axis"
    replicates = plots.replicates(endpoints.groupby(["model", "batch_size"]).size())
    val_ax.set_title(f"Validation: {replicates}, {INTERVAL}{floor_note}")
    train_ax.set_title(f"Training: {replicates}, {INTERVAL}")
    where = f"{models[-1]}: " if len(models) > 1 else ""
    fig.suptitle(f"{where}{findings[0]}\n{findings[1]}", fontsize="large")
    handles, labels = val_ax.get_legend_handles_labels()  # the models, and the floor if drawn
    plots.legend_outside(train_ax, title="model", handles=handles, labels=labels)
    fig.tight_layout()
    return fig


@plots.styled
def batch_differences(table: pd.DataFrame, batch_sizes) -> plt.Figure:
    """Each batch size's tuned validation loss minus its model size's tuned optimum
    (analyses.batch_differences), paired over replicates and documents with LEVEL intervals, model
    sizes side by side (open: no interval, e.g. one replicate), on a symmetric-log axis
    (plots.difference_axis) so that small and large gaps both show; the title states, for the
    largest model, the batches not told apart from the optimum and the largest gap."""
    fig, ax = plt.subplots()
    shown = table[table["difference"].notna()]
    bounded = np.isfinite(shown["low"]) & np.isfinite(shown["high"])
    models = by_size(shown["model"].unique())
    for i, model in enumerate(models):
        mine, color = shown["model"] == model, plots.PALETTE[i]
        x, y = plots.dodged(shown["batch_size"], i, len(models)), shown["difference"]
        ax.plot(x[mine], y[mine], color=color, label=model, **plots.MEASURED)
        bars = mine & bounded
        low, high = shown["low"][bars], shown["high"][bars]
        plots.errorbars(ax, x[bars], y[bars], low, high, LEVEL, capsize=3, color=color, ls="none")
        ax.plot(x[mine & ~bounded], y[mine & ~bounded], "o", color=color, markerfacecolor="white")
    if not bounded.all():
        ax.plot([], [], "o", color="gray", markerfacecolor="white", label="no interval")
    ax.axhline(0, color="k", linewidth=0.8)
    ends = pd.concat([shown["difference"], shown["low"][bounded], shown["high"][bounded]])
    plots.difference_axis(ax, ends.min(), ends.max())
    plots.batch_axis(ax, batch_sizes)
    ax.set_ylabel("minus the tuned optimum (nats/token)")
    replicates = int(table["replicates"].max()) if len(table) else 0
    largest = shown[shown["model"] == models[-1]]
    ax.set_title(
        f"{_near_optimum(largest)}\n({replicates} replicates, {INTERVAL} over them and documents)"
    )
    plots.legend_outside(ax, title="model")
    return fig


def _near_optimum(rows: pd.DataFrame) -> str:
    """Which batches of one model's batch_differences rows an interval does not tell from its
    optimum (it holds 0 or is missing), and the largest gap."""
    near = rows[~(rows["low"] > 0)]["batch_size"].tolist()
    worst = rows.loc[rows["difference"].idxmax()]
    names = ", ".join(str(b) for b in near) or "none"
    return (
        f"Not told from the optimum: batch {names}; "
        f"batch {worst['batch_size']} is {worst['difference']:+.2f} nats"
    )


@plots.styled
def accuracy_vs_batch(endpoints: pd.DataFrame, tasks: list[str], batch_sizes) -> plt.Figure:
    """Left: the tuned validation loss per batch size (each replicate's, and their mean); then one
    panel per downstream task: the accuracy of the same tuned endpoints, one curve per model size
    (mean over replicates, 90% interval from the standard errors over examples), and chance where
    known. The title names the most accurate batch only where its interval clears every other's."""
    from repro.analysis.accuracy import CHANCE, Z90, accuracy_per_batch

    fig, axes = plt.subplots(1, 1 + len(tasks), figsize=(5 * (1 + len(tasks)), 4.4))
    models = by_size(endpoints["model"].unique())
    for m, model in enumerate(models):
        mine = endpoints[endpoints["model"] == model]
        axes[0].scatter(mine["batch_size"], mine["val_loss"], color=plots.PALETTE[m], alpha=0.3)
    found = []  # per task: the largest model's most accurate batch, where the data tell it
    for i, task in enumerate(tasks):
        scores = accuracy_per_batch(endpoints, task)
        found.append(f"{task}: {_most_accurate(scores[scores['model'] == models[-1]], Z90)}")
        for model in models:
            group = scores[scores["model"] == model]
            style = {"marker": "o", "color": plots.PALETTE[models.index(model)], "label": model}
            if i == 0:
                axes[0].plot(group["batch_size"], group["val_loss"], **style)
            half = Z90 * group["acc_se"]
            low, high = group["acc"] - half, group["acc"] + half
            plots.errorbars(
                axes[1 + i], group["batch_size"], group["acc"], low, high, 0.9, capsize=3, **style
            )
        if task in CHANCE:
            axes[1 + i].axhline(CHANCE[task], color="k", linestyle=":", label="chance")
        axes[1 + i].set_ylabel("accuracy (fraction)")
        axes[1 + i].set_title(f"{task} (90% interval)")
    axes[0].set_ylabel("validation loss, tuned (nats/token)")
    axes[0].set_title("Validation loss (dots: replicates; line: mean)")
    largest = endpoints[endpoints["model"] == models[-1]]
    lowest = largest.groupby("batch_size")["val_loss"].mean().idxmin()
    fig.suptitle(f"{models[-1]}: lowest val loss at batch {lowest}; " + "; ".join(found))
    for ax in axes:
        plots.batch_axis(ax, batch_sizes)
    plots.legend_outside(axes[-1], title="model")
    fig.tight_layout()  # room for each panel's tick labels and y label beside its neighbour
    return fig


def _most_accurate(scores: pd.DataFrame, z: float) -> str:
    """The phrase "most accurate at batch B" where B's interval (z standard errors) lies above
    every other batch's, else that the intervals overlap."""
    low, high = scores["acc"] - z * scores["acc_se"], scores["acc"] + z * scores["acc_se"]
    top = scores["acc"].idxmax()
    if len(scores) > 1 and low[top] > high.drop(index=top).max():
        return f"most accurate at batch {scores.loc[top, 'batch_size']}"
    return "no batch more accurate than another (90% intervals overlap)"


@plots.styled
def optimal_batch_vs_size(table: pd.DataFrame) -> plt.Figure:
    """The tuned optimal batch per model size (analyses.optimal_batches), one row per size (its
    parameters): the optimum of the replicate-mean loss (dot), each replicate's own optimum
    (crosses), and the range of batches whose LEVEL interval overlaps the optimum's (bar); the
    title states the optimum and that range of the largest model. A model size per row reads with
    one size as with several."""
    table = table.sort_values("params").reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(6.5, 1.6 + 0.5 * len(table)))
    y = np.arange(len(table))
    ax.hlines(
        y,
        table["plausible_low"],
        table["plausible_high"],
        color=plots.PALETTE[0],
        lw=6,
        alpha=0.35,
        label="batches the data cannot tell from the optimum",
    )
    ax.plot(
        table["batch"],
        y,
        "o",
        color=plots.PALETTE[0],
        markersize=8,
        label="optimum of the replicate mean",
    )
    for i, row in table.iterrows():
        own = pd.Series(row["replicate_batches"]).value_counts()
        ax.scatter(
            own.index,
            [i] * len(own),
            s=40 * own,
            marker="x",
            color=plots.PALETTE[1],
            zorder=3,
            label="optimum on each replicate (size: count)" if i == 0 else None,
        )
    batches = sorted(
        {*table["plausible_low"], *table["plausible_high"], *table["batch"]}
        | {b for own in table["replicate_batches"] for b in own}
    )
    plots.batch_axis(ax, batches, "optimal batch size (sequences)")
    ax.set_xlim(batches[0] / 1.5, batches[-1] * 1.5)
    ax.set_yticks(y, [f"{plots.nice_number(p)}" for p in table["params"]])
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.set_ylabel("model (parameters)")
    largest = table.iloc[-1]
    low, high = largest["plausible_low"], largest["plausible_high"]
    span = f"batches {low}-{high} not told apart" if low < high else "no other batch as good"
    ax.set_title(f"Optimal batch {largest['batch']} ({span})")
    ax.legend(
        loc="upper left", bbox_to_anchor=(0, -0.45 if len(table) < 3 else -0.25), borderaxespad=0
    )
    return fig


@plots.styled
def curves(evals: pd.DataFrame, picks: pd.DataFrame, title: str) -> plt.Figure:
    """Validation (solid) and training (dashed; mean over the steps since the previous evaluation)
    loss per epoch of the tuned runs in `picks` (endpoints rows), one colour per batch size; the
    title states which batch ends lowest in each loss, then `title`."""
    colors = plots.batch_colors(picks["batch_size"])
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ends = {}
    for _, end in picks.iterrows():
        curve, batch = endpoint_curve(evals, end), int(end["batch_size"])
        ax.plot(curve["epoch"], curve["val_loss"], color=colors[batch], **plots.MEASURED)
        ax.plot(curve["epoch"], curve["train_loss"], color=colors[batch], linestyle="--")
        ends[batch] = curve[["val_loss", "train_loss"]].iloc[-1]
    last = pd.DataFrame(ends).T
    handles = [Patch(color=colors[b], label=f"batch {b}") for b in colors]
    handles += [
        Line2D([], [], color="0.3", label="validation", **plots.MEASURED),
        Line2D(
            [],
            [],
            color="0.3",
            linestyle="--",
            label="training (mean over the last eval_every epochs)",
        ),
    ]
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (nats/token)")
    finding = "; ".join(
        f"batch {last[loss].idxmin()} ends lowest in {loss.split('_')[0]} ({last[loss].min():.2f})"
        for loss in ("val_loss", "train_loss")
    )
    ax.set_title(f"{finding}\n{title}")
    plots.legend_outside(ax, handles=handles)
    return fig


@plots.styled
def arms_vs_batch(
    arms: dict[str, pd.DataFrame], batch_sizes, title: str, legend: str
) -> plt.Figure:
    """Best val loss per batch size (sequences) for each arm ({label: batch_endpoints}), mean and
    LEVEL interval over replicates and validation documents, the arms side by side at each batch; an
    arm measured at only some of `batch_sizes` as points; the title states which arm and batch
    give the lowest loss, after `title`."""
    fig, ax = plt.subplots()
    means = []
    for i, (color, (label, endpoints)) in enumerate(zip(plots.PALETTE, arms.items())):
        agg = across_replicates(endpoints, by=["batch_size"])
        means.append(agg.assign(arm=label))
        every = set(agg["batch_size"]) == set(batch_sizes)
        plots.errorbars(
            ax,
            plots.dodged(agg["batch_size"], i, len(arms)),
            agg["mean"],
            agg["low"],
            agg["high"],
            LEVEL,
            capsize=3,
            color=color,
            label=label,
            **(plots.MEASURED | ({} if every else {"linestyle": "none"})),
        )
    plots.batch_axis(ax, batch_sizes)
    ax.set_ylabel(plots.LOSS)
    finding = _lowest_arm(pd.concat(means), legend)
    ax.set_title(f"{title}\n{finding}\n({plots.replicates(agg['count'])}, {INTERVAL})")
    plots.legend_outside(ax, title=legend)
    return fig


@plots.styled
def beta2_vs_batch(arms: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Tuned val loss per batch size under each AdamW beta2 setting ({label: batch_endpoints}):
    the batch sweep's at every batch, the ablation's at its batches (arms_vs_batch)."""
    return arms_vs_batch(arms, batch_sizes, "AdamW beta2 at the small-batch end", "AdamW betas")


def _lowest_arm(means: pd.DataFrame, noun: str) -> str:
    """Which arm and batch of across_replicates rows (with an `arm` column) give the lowest loss,
    and whether its interval is apart from the other arms' at that batch."""
    means = means.reset_index(drop=True)
    best = means.loc[means["mean"].idxmin()]
    rivals = means[(means["batch_size"] == best["batch_size"]) & (means["arm"] != best["arm"])]
    apart = bool((rivals["low"] > best["high"]).all())
    side = "intervals apart from" if apart else "overlapping"
    return f"lowest at batch {best['batch_size']:g}: {best['arm']} ({side} the other {noun})"
