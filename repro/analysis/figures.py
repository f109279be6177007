"""The series' figures, one function per figure: each takes the tables a notebook computed and
returns a matplotlib Figure (the notebook saves it with study.save). Style: repro.analysis.plots.

Units: losses in nats/token; batch sizes in sequences; deadlines in step units (one micro-batch
forward+backward on one GPU); tokens are training tokens.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, MaxNLocator

from repro.analysis import plots
from repro.analysis.analyses import across_replicates, endpoint_curve
from repro.analysis.intervals import Difference
from repro.analysis.results import Results
from repro.data.pool import load_pool
from repro.design.regime import ZHANG_LAW
from repro.runtime.shapes import by_size

LOSS = "tuned validation loss (nats/token)"
DEADLINE = "deadline (step units)"


def _interval(mean: pd.Series, lo: pd.Series, hi: pd.Series) -> np.ndarray:
    """Error-bar offsets [below, above] from a value and interval ends; a side that the value lies
    beyond (a percentile interval need not hold its point estimate) gets no bar."""
    return np.clip(np.vstack([mean - lo, hi - mean]), 0, None)


def _replicates(counts: pd.Series) -> str:
    """'mean over N replicates' or 'one replicate'."""
    n = int(counts.max())
    return f"mean over {n} replicates" if n > 1 else "one replicate"


# --- 01 -----------------------------------------------------------------------------------------


@plots.styled
def doc_lengths(pool: str | Path, seq_len: int) -> plt.Figure:
    """Histogram of document lengths (tokens) of a pool's splits, log-spaced bins."""
    data = load_pool(pool)
    fig, ax = plt.subplots()
    for color, split in zip(plots.PALETTE, ("train", "val")):
        lengths = data.split(split).doc_lengths()
        bins = np.geomspace(max(lengths.min(), 1), lengths.max() + 1, 30)
        ax.hist(lengths, bins=bins, alpha=0.6, color=color, label=f"{split} ({len(lengths)} docs)")
    ax.axvline(seq_len, color="k", linestyle=":", label=f"seq_len = {seq_len} tokens")
    plots.log_axis(ax, "x")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel("documents")
    ax.set_title(f"Document lengths ({Path(pool).name})")
    plots.legend_outside(ax)
    return fig


@plots.styled
def split_tokens(table: pd.DataFrame) -> plt.Figure:
    """Tokens per pool and split (analyses.pool_table), bars from zero."""
    counts = table.pivot_table(index="pool", columns="split", values="tokens")
    fig, ax = plt.subplots()
    counts.plot.bar(ax=ax, rot=0, color=plots.PALETTE[: counts.shape[1]])
    ax.yaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_ylabel("tokens")
    ax.set_xlabel("pool")
    ax.set_title("Tokens per split")
    plots.legend_outside(ax, title="split")
    return fig


# --- 02 -----------------------------------------------------------------------------------------


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
                yerr=_interval(group["mean"], group[lo], group[hi]),
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
        interval = _interval(y[bars], shown["low"][bars], shown["high"][bars])
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
        yerr=_interval(table["batch"], table["plausible_low"], table["plausible_high"]),
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
            yerr=_interval(agg["mean"], agg["low"], agg["high"]),
            **(plots.MEASURED | ({} if every else {"linestyle": "none"})),
        )
    plots.batch_axis(ax, batch_sizes)
    ax.set_ylabel(LOSS)
    ax.set_title(f"{title} ({_replicates(agg['count'])}, 90% interval)")
    plots.legend_outside(ax, title=legend)
    return fig


@plots.styled
def beta2_vs_batch(arms: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Tuned val loss per batch size under each AdamW beta2 setting ({label: batch_endpoints}):
    the batch sweep's at every batch, the ablation's at its batches (arms_vs_batch)."""
    return arms_vs_batch(arms, batch_sizes, "AdamW beta2 at the small-batch end", "AdamW betas")


# --- 03 -----------------------------------------------------------------------------------------


def _dots(ax: plt.Axes, endpoints: pd.DataFrame, x: str, hue: str, labels: dict) -> str:
    """Tuned val loss per (x, hue), mean over replicates with its 90% interval over replicates
    and validation documents, dodged; returns the note on what the bars are."""
    stats = across_replicates(endpoints, [x, hue]).set_index([x, hue])
    xs = sorted(endpoints[x].unique())
    hues = list(labels)
    for i, h in enumerate(hues):
        part = stats.xs(h, level=hue).reindex(xs)
        offset = (i - (len(hues) - 1) / 2) * 0.15
        ax.errorbar(
            np.arange(len(xs)) + offset,
            part["mean"],
            capsize=3,
            linestyle="none",
            yerr=_interval(part["mean"], part["low"], part["high"]),
            marker="o",
            markersize=6,
            color=plots.PALETTE[i],
            label=labels[h],
        )
    ax.set_xticks(range(len(xs)))
    ax.set_xlim(-0.5, len(xs) - 0.5)
    return f"{_replicates(stats['count'])}, 90% interval"


@plots.styled
def loaders(endpoints: pd.DataFrame) -> plt.Figure:
    """Best val loss per epoch ordering and batch size (dot plot: the y axis need not start at 0);
    `endpoints`: analyses.batch_endpoints(.., ["loader"])."""
    fig, ax = plt.subplots()
    labels = {"repeat": "REPEAT", "shuffle": "SHUFFLE", "repack": "REPACK"}
    note = _dots(ax, endpoints, "batch_size", "loader", labels)
    ax.set_xticklabels([f"{b}" for b in sorted(endpoints["batch_size"].unique())])
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel(LOSS)
    ax.set_title(f"Epoch orderings ({note})")
    plots.legend_outside(ax, title="epoch ordering")
    return fig


@plots.styled
def tying_embedding_decay(endpoints: pd.DataFrame, batch: int) -> plt.Figure:
    """Best val loss per embedding weight decay, tied vs untied (dot plot); `endpoints`:
    analyses.batch_endpoints(.., ["tie_embeddings", "embedding_weight_decay"])."""
    fig, ax = plt.subplots()
    labels = {False: "untied", True: "tied"}
    note = _dots(ax, endpoints, "embedding_weight_decay", "tie_embeddings", labels)
    ax.set_xticklabels([f"{w:g}" for w in sorted(endpoints["embedding_weight_decay"].unique())])
    ax.set_xlabel("embedding weight decay")
    ax.set_ylabel(LOSS)
    ax.set_title(f"Tying x embedding decay, batch {batch} ({note})")
    plots.legend_outside(ax, title="embeddings")
    return fig


@plots.styled
def combined_vs_original(recipes: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Best val loss per batch size for each recipe ({label: batch_endpoints}): arms_vs_batch."""
    return arms_vs_batch(recipes, batch_sizes, "Combined recipe vs original", "recipe")


# --- 04 -----------------------------------------------------------------------------------------


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
    ax.set_ylabel(LOSS)
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
                yerr=_interval(part["difference"], part["low"], part["high"]),
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
    ax.set_ylabel(LOSS)
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
    axes[0][0].set_ylabel(LOSS)
    plots.legend_outside(axes[0][-1], title="policy (batch from epoch fraction)")
    return fig


# --- 05 -----------------------------------------------------------------------------------------


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
    (cbs.schedules_vs_fixed): one colour per policy, one marker per pool."""
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
