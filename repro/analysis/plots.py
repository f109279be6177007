"""One figure style for the whole series (seaborn theme, palettes, axis helpers) and the helpers
that the figure modules (repro.analysis.figures_pool, _batch, _recipe, _frontier, _cbs) share:
error bars from intervals, a title's note on replicates, the tuned-loss label. Figures are saved
as PNG and PDF under figures/<preset>/.

Conventions: measured curves are solid with markers (MEASURED), fits and projections dashed without
markers (PROJECTED); a batch size keeps its colour in every figure (batch_colors); legends sit
outside the axes (legend_outside) so they never cover data.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import cycler
from matplotlib.colors import ListedColormap
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from repro.analysis import figure_checks
from repro.analysis.figure_checks import legibility_problems, percent
from repro.errors import ReproError
from repro.paths import project_root

PALETTE = sns.color_palette("colorblind", 10).as_hex()
"""Categorical colours (series that are not batch sizes or GPU counts)."""
MEASURED = {"marker": "o", "linestyle": "-"}
PROJECTED = {"marker": None, "linestyle": "--", "alpha": 0.8}  # never drawn like measurements
POOL_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # one per pool (pool_markers)
NOT_REACHED = {"marker": "x", "linestyle": "none", "markersize": 7, "clip_on": False}


def _style() -> dict:
    """rcParams of the series' style: seaborn's paper context and whitegrid style at font scale
    1.15, the palette, and the series' defaults (tight saving, light grid under the data)."""
    return {
        **sns.plotting_context("paper", font_scale=1.15),
        **sns.axes_style("whitegrid"),
        "axes.prop_cycle": cycler(color=sns.color_palette(PALETTE)),
        "font.family": ["sans-serif"],
        "figure.figsize": (6.0, 4.0),
        "figure.dpi": 110,
        "savefig.dpi": 160,
        "savefig.bbox": "tight",
        "axes.axisbelow": True,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "grid.alpha": 0.5,
        "legend.frameon": False,
        "lines.markersize": 4.5,
    }


STYLE = _style()
"""The rcParams every figure is drawn and saved under (`styled`, `save`); importing this module
changes no global matplotlib setting."""


def styled(make_figure: Callable[..., plt.Figure]) -> Callable[..., plt.Figure]:
    """A figure function drawn under STYLE, leaving matplotlib's global settings as they were."""

    @functools.wraps(make_figure)
    def draw(*args, **kwargs) -> plt.Figure:
        with plt.rc_context(STYLE):
            return make_figure(*args, **kwargs)

    return draw


def save(
    fig: plt.Figure, preset: str, name: str, figures_dir: str | Path | None = None
) -> list[Path]:
    """Write `fig` as figures/<preset>/<name>.png and .pdf; returns the paths. A figure with a
    legibility problem (legibility_problems) is a one-line error naming it, and nothing is
    written."""
    problems = legibility_problems(fig)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ReproError(f"figure {name}: {problems[0]}{more}; fix its plotting function")
    folder = Path(figures_dir) if figures_dir else project_root() / "figures" / preset
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.{ext}" for ext in ("png", "pdf")]
    with plt.rc_context(STYLE):
        for path in paths:  # no creation date in the PDF: regenerated figures are byte-identical
            fig.savefig(path, metadata={"CreationDate": None} if path.suffix == ".pdf" else None)
    return paths


# --- colours ------------------------------------------------------------------------------------


def ordered_colors(values: Iterable) -> dict:
    """One colour per value of an ordered quantity (batch size, GPU count): a sequential palette
    from dark to light (its palest end left out, so every colour reads on white)."""
    values = sorted(set(values))
    colors = sns.color_palette("viridis", len(values) + 1).as_hex()[: len(values)]
    return dict(zip(values, colors))


def batch_colors(batch_sizes: Iterable[int]) -> dict[int, str]:
    """The colour of each batch size, the same in every figure of a preset."""
    return {int(b): c for b, c in ordered_colors(batch_sizes).items()}


def batch_cmap(batch_sizes: Iterable[int]) -> ListedColormap:
    """A discrete colormap whose i-th colour is batch_colors' colour of the i-th batch size."""
    return ListedColormap(list(batch_colors(batch_sizes).values()))


def pool_markers(pools: Iterable) -> dict:
    """One marker per pool (replicate), in sorted order: a pool keeps its marker across a
    figure's colours (batch sizes, targets, policies)."""
    return {p: POOL_MARKERS[i % len(POOL_MARKERS)] for i, p in enumerate(sorted(set(pools)))}


# --- axes ---------------------------------------------------------------------------------------


def nice_number(value: float, _pos: int | None = None) -> str:
    """A plain tick label: 0.5, 20, 1,500, 250,000, 3M (no powers of ten)."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def nice_log_ticks(lo: float, hi: float, max_ticks: int = 8) -> list[float]:
    """Ticks for a log axis over [lo, hi] (lo > 0): 1-2-5 steps (coarser where those are more than
    `max_ticks`); evenly spaced round values where [lo, hi] spans less than a decade."""
    if hi / lo < 10:
        ticks = MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        return [float(t) for t in ticks if lo <= t <= hi]
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    for mantissas in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**e for e in decades for m in mantissas if lo <= m * 10.0**e <= hi]
        if len(ticks) <= max_ticks:
            return ticks
    return ticks


def log_axis(
    ax: plt.Axes,
    which: str = "x",
    lo: float | None = None,
    hi: float | None = None,
    max_ticks: int = 8,
) -> None:
    """A log axis with plain tick labels (nice_log_ticks, nice_number: no mixed 10^k / 2x10^k
    labels); `lo` / `hi` default to the current limits."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    limits = ax.get_xlim() if which == "x" else ax.get_ylim()
    ticks = nice_log_ticks(lo or limits[0], hi or limits[1], max_ticks)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(nice_number))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


DIFFERENCE_LINEAR = 0.05  # nats/token: difference_axis is linear within this of 0
DIFFERENCE_TICKS = (-1, -0.3, -0.1, -0.03, 0, 0.03, 0.1, 0.3, 1, 3, 10)  # nats/token


def difference_axis(ax: plt.Axes, low: float, high: float) -> None:
    """A y axis of loss differences (nats/token) from `low` to `high` and 0: symmetric-log, linear
    within DIFFERENCE_LINEAR of 0, with plain tick labels."""
    ax.set_yscale("symlog", linthresh=DIFFERENCE_LINEAR)
    bottom, top = min(low, 0.0) * 1.3 - 0.005, max(high, DIFFERENCE_LINEAR) * 1.3
    ax.set_ylim(bottom, top)
    ax.yaxis.set_major_locator(FixedLocator([t for t in DIFFERENCE_TICKS if bottom <= t <= top]))
    ax.yaxis.set_major_formatter(FuncFormatter(nice_number))
    ax.yaxis.set_minor_locator(NullLocator())


DRAWN_DIGITS = 4
"""Significant digits of a fitted quantity that a figure draws. A fit is determined only to its
optimizer's tolerance, and an ill-conditioned one (steps that barely level off) turns the last
bits that CPUs round apart into its eighth digit, so a figure's file would differ from machine to
machine; four digits lie below a pixel."""


def settled(data):
    """`data` with every float to DRAWN_DIGITS significant digits (nan and inf kept): a DataFrame
    (its float columns), a dict of numbers or arrays, an array, or a number."""
    if isinstance(data, pd.DataFrame):
        floats = data.select_dtypes("float").columns
        return data.assign(**{column: settled(data[column].to_numpy()) for column in floats})
    if isinstance(data, dict):
        return {key: settled(value) for key, value in data.items()}
    if isinstance(data, np.ndarray) and data.dtype.kind == "f":
        rounded = [float(f"{x:.{DRAWN_DIGITS}g}") for x in data.ravel()]
        return np.array(rounded).reshape(data.shape)
    if isinstance(data, float | np.floating):
        return float(f"{data:.{DRAWN_DIGITS}g}")
    return data


LOSS = "tuned validation loss (nats/token)"
"""The y label of a figure of tuned validation losses (notebooks 02-04)."""


def interval(mean: pd.Series, lo: pd.Series, hi: pd.Series) -> np.ndarray:
    """Error-bar offsets [below, above] from a value and interval ends; a side that the value lies
    beyond (a percentile interval need not hold its point estimate) gets no bar."""
    return np.clip(np.vstack([mean - lo, hi - mean]), 0, None)


def replicates(counts: pd.Series) -> str:
    """'mean over N replicates' or 'one replicate' (N: the largest of `counts`, the replicates
    behind each point), for a figure's title."""
    n = int(counts.max())
    return f"mean over {n} replicates" if n > 1 else "one replicate"


# --- intervals: drawn, stated and checked (save: figure_checks) -----------------------------------
#
# A figure draws its intervals with `errorbars` or `band`, which record their level on the axes,
# and states that level with `interval_label` (figure_checks.INTERVAL_TEXT). `save` refuses
# a figure that states a level it drew no interval at, draws intervals whose level it does not
# state, or draws error bars or bands without a recorded level. An axes that plots means over
# more than one replicate (declared with `replicated`, or a title with `replicates`' "mean over
# N") must draw an interval (error bars or a fill_between band).


def interval_label(level: float, over: str = "replicates") -> str:
    """How a figure states its intervals: '90% interval over replicates'."""
    return f"{percent(level)} interval over {over}"


def errorbars(ax: plt.Axes, x, y, low, high, level: float, axis: str = "y", **kwargs):
    """ax.errorbar of `y` at `x` with a `level` interval [low, high] of y (of x with axis="x";
    a side the value lies beyond gets no bar), its level recorded for save's check."""
    figure_checks.marks(ax)["levels"].add(level)
    bars = interval(y if axis == "y" else x, low, high)
    return ax.errorbar(x, y, **{f"{axis}err": bars}, **kwargs)


def band(ax: plt.Axes, x, low, high, level: float, **kwargs):
    """ax.fill_between of a `level` interval [low, high] at `x`, its level recorded."""
    figure_checks.marks(ax)["levels"].add(level)
    return ax.fill_between(x, low, high, **kwargs)


def replicated(ax: plt.Axes, counts: pd.Series | int) -> None:
    """Declare that `ax` plots means over `counts` replicates (the largest count): with more than
    one, save refuses the figure unless `ax` draws an interval."""
    figure_checks.marks(ax)["replicates"] = max(
        figure_checks.marks(ax)["replicates"], int(np.max(counts))
    )


DODGE = 0.1
"""Octaves between neighbouring series drawn at the same batch sizes on a log axis (dodged)."""


def dodged(x: pd.Series, index: int, count: int) -> pd.Series:
    """`x` (on a log axis) shifted for series `index` of `count`, so that their error bars at one
    x (a batch size, a deadline) sit side by side; the middle series stays in place."""
    return x * 2.0 ** (DODGE * (index - (count - 1) / 2))


def batch_axis(ax: plt.Axes, batch_sizes, label: str = "batch size (sequences)") -> None:
    """Log2 x axis labelled with the batch sizes themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batch_sizes))
    ax.set_xticklabels([str(b) for b in batch_sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


def legend_outside(ax: plt.Axes, title: str | None = None, **kwargs) -> None:
    """The axes' legend to its right, outside the data area."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, title=title, **kwargs)


def gpu_label(gpus: int) -> str:
    return f"{gpus} GPU" + ("s" if gpus > 1 else "")
