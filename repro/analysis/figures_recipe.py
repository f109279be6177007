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
            yerr=plots.interval(part["mean"], part["low"], part["high"]),
            marker="o",
            markersize=6,
            color=plots.PALETTE[i],
            label=labels[h],
        )
    ax.set_xticks(range(len(xs)))
    ax.set_xlim(-0.5, len(xs) - 0.5)
    return f"{plots.replicates(stats['count'])}, 90% interval"


@plots.styled
def loaders(endpoints: pd.DataFrame) -> plt.Figure:
    """Best val loss per epoch ordering and batch size (dot plot: the y axis need not start at 0);
    `endpoints`: analyses.batch_endpoints(.., ["loader"])."""
    fig, ax = plt.subplots()
    labels = {"repeat": "REPEAT", "shuffle": "SHUFFLE", "repack": "REPACK"}
    note = _dots(ax, endpoints, "batch_size", "loader", labels)
    ax.set_xticklabels([f"{b}" for b in sorted(endpoints["batch_size"].unique())])
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel(plots.LOSS)
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
    ax.set_ylabel(plots.LOSS)
    ax.set_title(f"Tying x embedding decay, batch {batch} ({note})")
    plots.legend_outside(ax, title="embeddings")
    return fig


@plots.styled
def combined_vs_original(recipes: dict[str, pd.DataFrame], batch_sizes) -> plt.Figure:
    """Best val loss per batch size for each recipe ({label: batch_endpoints}): arms_vs_batch."""
    return arms_vs_batch(recipes, batch_sizes, "Combined recipe vs original", "recipe")
