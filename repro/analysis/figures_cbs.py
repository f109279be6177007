"""The figures of notebook 05 (the critical batch size): the gradient noise scale over training,
steps and tokens to a target loss with their fits, the fitted batch sizes, the critical batch size
against pool size, and batch-size schedules against the best fixed batch. One function per figure:
each takes the tables the notebook computed and returns a matplotlib Figure (the notebook saves it
with study.save). Style and shared helpers: repro.analysis.plots.

Units: losses in nats/token; batch sizes and B_simple in sequences; tokens are training tokens;
steps are optimizer steps.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from repro.analysis import plots
from repro.analysis.figure_checks import MIN_FONT_PT
from repro.analysis.intervals import LEVEL, Difference
from repro.analysis.noise import growth_intervals, noise_growth, noise_trajectory
from repro.analysis.results import Results
from repro.design.presets import pool_label
from repro.design.regime import ZHANG_LAW


def _key_legend(
    ax: plt.Axes, colors: dict, markers: dict, extra: tuple = (), title: str | None = None
) -> None:
    """A compact legend outside `ax`: a line per colour ({label: colour}), a grey mark per marker
    ({label: marker}, e.g. one per pool), then `extra` handles; instead of an entry per series."""
    handles = [Line2D([], [], color=c, label=label) for label, c in colors.items()]
    handles += [
        Line2D([], [], color="0.35", marker=m, linestyle="none", label=label)
        for label, m in markers.items()
    ]
    plots.legend_outside(ax, handles=[*handles, *extra], title=title)


def _change(d: pd.Series, what: str) -> str:
    """A growth factor (a pool_intervals row: geometric mean and 90% interval over pools) in
    words: "grows x7.3", "falls x0.5", or "x1.3, undetermined (interval spans 1)"."""
    if not np.isfinite(d["mean"]):
        return f"{what}: not measured"
    if np.isfinite(d["low"]) and d["low"] > 1:
        return f"{what} grows x{d['mean']:.2g}"
    if np.isfinite(d["high"]) and d["high"] < 1:
        return f"{what} falls x{d['mean']:.2g}"
    return f"{what} x{d['mean']:.2g}, undetermined"


@plots.styled
def noise_scale(noise: Results) -> plt.Figure:
    """B_simple (sequences) against training tokens for each noise-scale run of `noise`: one
    colour per batch, one marker per pool; the title's growth per batch is noise_growth's,
    undetermined where its interval over pools (growth_intervals) spans 1."""
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
            **plots.MEASURED | {"marker": markers[run["pool"]]},
        )
    ax.xaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("B_simple (sequences)")
    growth = growth_intervals(noise_growth(noise_trajectory(noise)))
    found = "; ".join(_change(row, f"batch {row['batch_size']}") for _, row in growth.iterrows())
    micro, lrs = runs["micro_batch"].iloc[0], ", ".join(f"{v:g}" for v in runs["lr"].unique())
    ax.set_title(
        f"B_simple as the loss falls: {found or 'not measured'}\n(geometric mean growth over "
        f"pools, undetermined where its interval spans 1; micro-batch {micro}, lr {lrs})",
        fontsize="medium",
    )
    _key_legend(
        ax,
        {f"batch {b}": c for b, c in colors.items()},
        {pool_label(p): m for p, m in markers.items()},
        title="batch (sequences); pool",
    )
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
    ax.set_title("S(B); open: reached at the 1st evaluation", fontsize="medium")


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
            fontsize=MIN_FONT_PT,
            color=color,
        )


def _steps_finding(reach: pd.DataFrame, fits: dict) -> str:
    """The finding of steps_tokens_to_target, from what it draws: the range over pools of the
    fitted B_crit at the middle target, and the batch sizes with the fewest tokens to it."""
    targets = sorted(reach["target"].unique())
    if not targets:
        return "no batch size reaches a target"
    target = targets[len(targets) // 2]
    crit = [fit["B_crit"] for (_, t), fit in fits.items() if t == target]
    mine = reach[reach["target"] == target]
    fewest = mine.loc[mine.groupby("pool")["tokens"].idxmin(), "batch_size"]
    where = "every pool" if fewest.nunique() == 1 else "per pool"
    crit_text = (
        f"fitted B_crit {min(crit):.3g} to {max(crit):.3g} sequences over pools"
        if crit
        else "no fit"
    )
    batches = ", ".join(str(int(b)) for b in sorted(fewest.unique()))
    return f"At loss {target}: {crit_text}; fewest tokens at batch {batches} ({where})"


@plots.styled
def steps_tokens_to_target(reach: pd.DataFrame, fits: dict, batch_sizes) -> plt.Figure:
    """Left: steps to each target loss per batch size and pool (crossing steps of
    cbs.steps_to_target), with each pool's McCandlish fit (cbs.fit_targets, keyed by (pool,
    target)) over its measured range. Right: tokens against steps at the crossing, one point per
    batch size and pool, connected in step order; the first pool's points labelled with the
    batch size. One legend: colour the target, marker the pool. Fitted and interpolated values
    drawn to plots.DRAWN_DIGITS digits."""
    reach, fits = plots.settled(reach), {key: plots.settled(fit) for key, fit in fits.items()}
    targets = sorted(reach["target"].unique())
    colors = dict(zip(targets, plots.PALETTE))
    markers = plots.pool_markers(reach["pool"])
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"wspace": 0.38})
    _steps_panel(ax_s, reach, fits, batch_sizes, colors)
    for (target, pool), part in reach.groupby(["target", "pool"]):
        part = part.sort_values("crossing step")
        ax_e.plot(
            part["crossing step"],
            part["tokens"],
            color=colors[target],
            **plots.MEASURED | {"marker": markers[pool]},
        )
        if pool != min(markers):
            continue
        for _, p in part.iterrows():
            ax_e.annotate(
                str(p["batch_size"]),
                (p["crossing step"], p["tokens"]),
                fontsize=MIN_FONT_PT,
                xytext=(4, 4),
                textcoords="offset points",
                color=colors[target],
                zorder=5,  # above every pool's markers
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
            )
    if len(reach):
        plots.log_axis(ax_e, "x", reach["crossing step"].min(), reach["crossing step"].max())
        plots.log_axis(ax_e, "y", reach["tokens"].min(), reach["tokens"].max())
    ax_e.set_xlabel("steps to target")
    ax_e.set_ylabel("training tokens to target")
    ax_e.set_title(f"E(S); numbers: batch size ({pool_label(min(markers, default=''))})")
    fit_line = Line2D([], [], color="0.35", label="McCandlish fit (left)", **plots.PROJECTED)
    _key_legend(
        ax_e,
        {f"{t}": c for t, c in colors.items()},
        {pool_label(p): m for p, m in markers.items()},
        (fit_line,),
        title="target val loss (nats/token);\npool",
    )
    fig.suptitle(_steps_finding(reach, fits), fontsize="medium", y=1.02)
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
            label=pool_label(row["pool"]),
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
            plots.errorbars(
                ax,
                pd.Series([m["mean"]]),
                [y + 0.2],
                pd.Series([m["low"]]),
                pd.Series([m["high"]]),
                LEVEL,
                axis="x",
                color="k",
                capsize=3,
                marker="|",
                label=f"geometric mean, {plots.interval_label(LEVEL, 'pools')}",
            )
    ax.set_yticks(range(len(FITTED_BATCHES)), FITTED_BATCHES)
    ax.set_ylim(-0.6, len(FITTED_BATCHES) - 0.4)
    ax.set_xlim(lo, edge * 1.2)
    plots.log_axis(ax, "x", lo, edge)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("fitted at the target")
    found = ", ".join(
        f"{n} {mine.loc[n, 'mean']:.3g} [{mine.loc[n, 'low']:.3g}, {mine.loc[n, 'high']:.3g}]"
        for n in FITTED_BATCHES
        if n in mine.index
    )
    ax.set_title(
        f"At loss {target}: {found or 'no interval over pools'}\n(sequences; open: infinite)",
        fontsize="medium",
    )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one entry per pool
    plots.legend_outside(ax, handles=list(unique.values()), labels=list(unique))
    return fig


def _law(name: str, alpha: Difference) -> str:
    """A fitted data-size exponent (a Difference over pool seeds) in words: "B* ~ D^0.33 [0.12,
    0.54], grows", "... may not grow" where the 90% interval reaches 0."""
    if np.isnan(alpha.value):
        return f"{name}: no exponent"
    if not np.isfinite(alpha.low):
        return f"{name} ~ D^{alpha.value:.2f} (no interval)"
    trend = "grows" if alpha.low > 0 else ("falls" if alpha.high < 0 else "may not grow")
    return f"{name} ~ D^{alpha.value:.2f} [{alpha.low:.2f}, {alpha.high:.2f}], {trend}"


def _per_seed(ax: plt.Axes, scaling: pd.DataFrame, name: str, color, limit: float) -> None:
    """Each pool seed's `name` (sequences) against pool size: one marker per seed, thin lines;
    values above `limit` drawn at it, open."""
    markers = plots.pool_markers(scaling["seed"])
    for seed, part in scaling.groupby("seed"):
        part = part.sort_values("pool tokens")
        style = {"color": color, "marker": markers[seed]}
        ax.plot(
            part["pool tokens"], part[name].clip(upper=limit), linewidth=0.8, alpha=0.6, **style
        )
        above = part[part[name] > limit]
        ax.plot(above["pool tokens"], [limit] * len(above), linestyle="none", mfc="white", **style)


@plots.styled
def cbs_vs_pool_size(scaling: pd.DataFrame, laws: dict, limit: float) -> plt.Figure:
    """B_crit and B* (sequences) against pool size, each pool seed's fits on its own pools
    (_per_seed: the seeds' pools differ in size, so the interval is on the exponent, in the
    title: mean and 90% interval over seeds, cbs.scaling_laws), and Zhang et al.'s law
    (regime.ZHANG_LAW, D in millions of tokens: compare slopes only). Fits drawn to
    plots.DRAWN_DIGITS digits."""
    scaling = plots.settled(scaling)
    fig, ax = plt.subplots()
    names = ("B_crit", "B*")
    for i, name in enumerate(names):
        _per_seed(ax, scaling, name, plots.PALETTE[i], limit)
    if not np.isfinite(scaling[list(names)].to_numpy(float)).any():
        no_fit = "no fit: fewer than 3 batch sizes reach any pool's target"
        ax.text(0.02, 0.95, no_fit, transform=ax.transAxes, va="top", fontsize="small")
    D = np.geomspace(scaling["pool tokens"].min(), scaling["pool tokens"].max(), 20) / 1e6
    coefficient, exponent = ZHANG_LAW
    zhang = f"Zhang et al.: {coefficient} D^{exponent}\n(their scale; compare slopes)"
    (line,) = ax.plot(
        D * 1e6, coefficient * D**exponent, color=plots.PALETTE[2], label=zhang, **plots.PROJECTED
    )
    extra = [line]
    if (scaling[list(names)] > limit).to_numpy().any():
        extra.append(
            Line2D(
                [],
                [],
                color="0.35",
                marker="o",
                mfc="white",
                linestyle="none",
                label=f"above {limit:g} sequences\n(10x the largest batch), drawn at it",
            )
        )
    plots.log_axis(ax, "x", scaling["pool tokens"].min() * 0.9, scaling["pool tokens"].max() * 1.1)
    low, high = ax.get_ylim()
    plots.log_axis(ax, "y", max(low, 1e-3), high)
    ax.set_xlabel("pool size D (training tokens)")
    ax.set_ylabel("critical batch size (sequences)")
    found = "; ".join(_law(n, laws[n]) for n in reversed(names) if n in laws)
    ax.set_title(
        f"{found or 'no exponent'}\n(exponent: mean over pool seeds [interval of 05_claims]; "
        "Zhang et al.: 0.47)",
        fontsize="medium",
    )
    _key_legend(
        ax,
        {n: plots.PALETTE[i] for i, n in enumerate(names)},
        {f"seed {s}": m for s, m in plots.pool_markers(scaling["seed"]).items()},
        tuple(extra),
        title="fitted per pool; pool seed",
    )
    return fig


@plots.styled
def schedules(curves: pd.DataFrame) -> plt.Figure:
    """Validation loss against training tokens of the run each policy's tuning chose on each pool
    (batch_schedules.schedules_vs_fixed): one colour per policy, one marker per pool; the title
    names the policy with the lowest last loss, mean over pools (in-sample: the held-out
    comparison is 05's claim)."""
    markers = plots.pool_markers(curves["pool"])
    colors = dict(zip(curves["policy"].unique(), plots.PALETTE))
    fig, ax = plt.subplots()
    for (policy, pool), curve in curves.groupby(["policy", "pool"], sort=False):
        ax.plot(
            curve["tokens"],
            curve["val_loss"],
            color=colors[policy],
            **plots.MEASURED | {"marker": markers[pool]},
        )
    ax.xaxis.set_major_formatter(FuncFormatter(plots.nice_number))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/token)")
    last = curves.groupby(["policy", "pool"], sort=False)["val_loss"].last()
    means = last.groupby(level="policy", sort=False).mean().sort_values()
    found = ", ".join(f"{policy.split(' (')[0]} {loss:.3f}" for policy, loss in means.items())
    ax.set_title(
        f"Last val loss, mean over pools: {found}\n(in-sample; held-out difference: 05_claims)",
        fontsize="medium",
    )
    wrapped = {policy.replace(" (", "\n(", 1): c for policy, c in colors.items()}
    _key_legend(ax, wrapped, markers, title="policy; pool")
    return fig
