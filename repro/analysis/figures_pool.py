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
from repro.design.presets import pool_label


@plots.styled
def doc_lengths(pool: str | Path, seq_len: int) -> plt.Figure:
    """Histogram of document lengths (tokens) of a pool's splits, log-spaced bins; the title states
    the median training document and the share of training documents longer than `seq_len`."""
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
    train = data.train.doc_lengths()
    ax.set_title(
        f"{pool_label(pool)}: median document {np.median(train):g} tokens, "
        f"{np.mean(train > seq_len):.0%} longer than seq_len"
    )
    plots.legend_outside(ax)
    return fig


@plots.styled
def split_tokens(table: pd.DataFrame) -> plt.Figure:
    """Tokens per pool and split (pools.pool_table, pools named by pool_label), bars from zero; the
    title states the range of each split's tokens over the pools."""
    counts = table.pivot_table(index="pool", columns="split", values="tokens", sort=False)
    fig, ax = plt.subplots()
    counts.plot.bar(ax=ax, rot=0, color=plots.PALETTE[: counts.shape[1]])
    ax.yaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_ylabel("tokens")
    ax.set_xlabel("pool")
    ax.set_title("Pools hold " + " and ".join(_spread(counts[s], s) for s in counts))
    plots.legend_outside(ax, title="split")
    return fig


def _spread(tokens: pd.Series, split: str) -> str:
    """'16,050 val tokens' or '16,009-16,101 train tokens': the range of `tokens` over pools."""
    low, high = (plots.nice_number(v) for v in (tokens.min(), tokens.max()))
    return f"{low if low == high else f'{low}-{high}'} {split} tokens"
