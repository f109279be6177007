"""The figures of notebook 01 (the data pool): document lengths and tokens per split. One
function per figure: each takes what the notebook computed and returns a matplotlib Figure (the
notebook saves it with study.save). Style and shared helpers: repro.analysis.plots.

Units: document lengths and tokens are tokens of the pool's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, MaxNLocator

from repro.analysis import plots
from repro.data.pool import load_pool


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
    """Tokens per pool and split (pools.pool_table), bars from zero."""
    counts = table.pivot_table(index="pool", columns="split", values="tokens")
    fig, ax = plt.subplots()
    counts.plot.bar(ax=ax, rot=0, color=plots.PALETTE[: counts.shape[1]])
    ax.yaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_ylabel("tokens")
    ax.set_xlabel("pool")
    ax.set_title("Tokens per split")
    plots.legend_outside(ax, title="split")
    return fig
