"""The figures of notebook 03 (the recipe ablations): epoch orderings, tying x embedding weight
decay, and the combined recipe against the original. One function per figure: each takes the
tables the notebook computed and returns a matplotlib Figure (the notebook saves it with
study.save). Style and shared helpers: repro.analysis.plots.

Units: losses in nats/token; batch sizes in sequences.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.analysis import plots
from repro.analysis.analyses import across_replicates
from repro.analysis.figures_batch import arms_vs_batch
from repro.analysis.intervals import LEVEL


def _dots(ax: plt.Axes, endpoints: pd.DataFrame, x: dict, hue: dict) -> pd.DataFrame:
    """Tuned val loss per (x, hue) value, mean over replicates with its LEVEL interval over
    replicates and validation documents, the hues dodged at each categorical x; `x` and `hue`
    map a column of `endpoints` to {value: label} in the order drawn. Returns the means
    (across_replicates) for the title's finding."""
    (x_col, xs), (hue_col, hues) = next(iter(x.items())), next(iter(hue.items()))
    stats = across_replicates(endpoints, [x_col, hue_col])
    for i, h in enumerate(hues):
        part = stats[stats[hue_col] == h].set_index(x_col).reindex(list(xs))
        plots.errorbars(
            ax,
            np.arange(len(xs)) + (i - (len(hues) - 1) / 2) * 0.15,
            part["mean"],
            part["low"],
            part["high"],
            LEVEL,
            capsize=3,
            linestyle="none",
            marker="o",
            markersize=6,
            color=plots.PALETTE[i],
            label=hues[h],
        )
    ax.set_xticks(range(len(xs)), list(xs.values()))
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylabel(plots.LOSS)
    return stats.assign(name=[f"{xs[a]}, {hues[b]}" for a, b in zip(stats[x_col], stats[hue_col])])


def _finding(stats: pd.DataFrame) -> str:
    """Which arm of _dots' means is lowest, how much higher the highest is (nats/token), and
    whether their intervals are apart; then the replicates and the interval drawn."""
    best, worst = stats.loc[stats["mean"].idxmin()], stats.loc[stats["mean"].idxmax()]
    side = "intervals apart" if best["high"] < worst["low"] else "intervals overlap"
    return (
        f"{best['name']} lowest; {worst['name']} {worst['mean'] - best['mean']:+.2f} nats "
        f"({side})\n({plots.replicates(stats['count'])}, {plots.percent(LEVEL)} interval)"
    )


@plots.styled
def loaders(endpoints: pd.DataFrame) -> plt.Figure:
    """Best val loss per epoch ordering (in the claimed order, worst first) and batch size (dot
    plot: the y axis need not start at 0); `endpoints`: analyses.batch_endpoints(..,
    ["loader"])."""
    fig, ax = plt.subplots()
    orders = {"loader": {"repeat": "REPEAT", "shuffle": "SHUFFLE", "repack": "REPACK"}}
    batches = {"batch_size": {b: f"batch {b}" for b in sorted(endpoints["batch_size"].unique())}}
    stats = _dots(ax, endpoints, orders, batches)
    ax.set_xlabel("epoch ordering")
    ax.set_title(_finding(stats))
    plots.legend_outside(ax, title="batch (sequences)")
    return fig


@plots.styled
def tying_embedding_decay(endpoints: pd.DataFrame, batch: int) -> plt.Figure:
    """Best val loss per embedding weight decay, tied vs untied (dot plot); `endpoints`:
    analyses.batch_endpoints(.., ["tie_embeddings", "embedding_weight_decay"])."""
    fig, ax = plt.subplots()
    decays = sorted(endpoints["embedding_weight_decay"].unique())
    x = {"embedding_weight_decay": {w: f"decay {w:g}" for w in decays}}
    stats = _dots(ax, endpoints, x, {"tie_embeddings": {False: "untied", True: "tied"}})
    ax.set_xlabel("embedding weight decay")
    ax.set_title(f"Batch {batch}: {_finding(stats)}")
    plots.legend_outside(ax, title="embeddings")
    return fig


@plots.styled
def combined_vs_original(recipes: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Best val loss per batch size for each recipe ({label: batch_endpoints}): arms_vs_batch."""
    return arms_vs_batch(recipes, batch_sizes, "Combined recipe vs original", "recipe")
