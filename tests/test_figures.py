"""Every figure of the series on hand-made data at a cpu-like scale (six batch sizes, two pools):
axes labelled, legends outside the data, PDFs byte-identical when saved twice; and the style
helpers."""

import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from repro.analysis import (
    cbs,
    figures_batch,
    figures_cbs,
    figures_frontier,
    figures_recipe,
    frontier,
    plots,
)
from repro.analysis.cbs import steps_to_target
from repro.analysis.intervals import t_interval
from repro.analysis.results import MemoryDocuments, Results
from repro.errors import ReproError
from repro.runtime.shapes import SIZES, by_size, model_config, parameter_count

BATCHES = (1, 2, 4, 8, 16, 32)


def _results(runs: pd.DataFrame, evals: pd.DataFrame) -> Results:
    """Hand-made runs and evaluations, without per-document losses."""
    return Results(runs, evals, MemoryDocuments({}))


def _curves(pools=("p0", "p1"), batches=BATCHES):
    """Runs whose val loss 1.5 + S(B) / step reaches 2.5 at step S(B) = 40 + 640 / B, evaluated
    every 8 steps for up to 8 epochs of 512 sequences."""
    runs, evals = [], []
    for pool in pools:
        for b in batches:
            rid, s_b = f"{pool}-{b}", 40 + 640 / b
            runs.append({"run_id": rid, "pool": pool, "model": "m", "batch_size": b})
            for step in range(8, int(8 * 512 / b) + 1, 8):
                val = 1.5 + s_b / step + (0.02 if pool == "p1" else 0.0)
                evals.append(
                    {
                        "run_id": rid,
                        "step": step,
                        "epoch": step * b / 512,
                        "tokens": step * b * 128,
                        "val_loss": val,
                        "train_loss": val - 0.3 * step * b / 4096,
                    }
                )
    return pd.DataFrame(runs), pd.DataFrame(evals)


def _endpoints(runs, evals):
    """Tuned-endpoint rows (as selection.tuned gives them) at each run's last evaluation, with
    per-document losses of 20 documents around its loss."""
    final = evals.sort_values("step").groupby("run_id").last().reset_index()
    ends = runs.merge(final, on="run_id").assign(epochs=8)
    tokens = np.full(20, 50)
    spread = 0.2 * np.random.default_rng(0).standard_normal(20)
    ends["doc_losses"] = [(v + spread - spread.mean()) * tokens for v in ends["val_loss"]]
    ends["doc_tokens"] = [tokens] * len(ends)
    return ends


def _frontier():
    runs, evals = _curves(pools=("p0",))
    step = frontier.unit_step_time(4)
    deadlines = frontier.deadline_grid(_results(runs, evals), [1, 2, 4, 8], step)
    table = frontier.frontier(_results(runs, evals), [1, 2, 4, 8], deadlines, step)
    return runs, evals, step, deadlines, table


def _pool_frontiers(runs, evals, step, deadlines) -> pd.DataFrame:
    """Each pool's frontier (frontier.pool_frontiers) of _curves' runs on pools p0 and p1: the
    replicates whose interval the 04 figures draw."""
    return frontier.pool_frontiers(_results(runs, evals), [1, 2, 4, 8], deadlines, step)


def _differences() -> pd.DataFrame:
    """analyses.batch_differences' columns by hand: two model sizes, one gap of 1.5 nats."""
    gaps = [0.12, 0.03, 0.0, 0.01, 0.2, 1.5]
    rows = [
        {"model": model, "batch_size": b, "difference": gap * scale}
        | {"low": gap * scale - 0.02, "high": gap * scale + 0.02, "replicates": 3}
        for model, scale in (("tiny", 1.0), ("cpu-s", 0.8))
        for b, gap in zip(BATCHES, gaps)
    ]
    rows[1] |= {"low": -np.inf, "high": np.inf}  # one replicate: no interval
    rows[2] |= {"difference": np.nan}  # not measured
    return pd.DataFrame(rows)


def _judged_crossovers() -> pd.DataFrame:
    """deadline_claims.judged_crossovers' columns by hand: every batch on the GPUs it fills at a
    micro-batch of 4; the smaller batch ahead (below 0) by 0.01 nats per doubling between them."""
    gpus = {b: max(1, b // 4) for b in BATCHES}
    rows = [
        {"deadline": t, "small_batch": b1, "small_gpus": gpus[b1], "large_batch": b2}
        | {"large_gpus": gpus[b2], "difference": -0.01 * np.log2(b2 / b1)}
        for t in (10.0, 100.0)
        for b2 in BATCHES
        for b1 in BATCHES
        if gpus[b1] < gpus[b2]
    ]
    judged = pd.DataFrame(rows)
    judged.loc[judged["large_batch"] == 32, "difference"] = np.nan  # no replicate measured these
    return judged.assign(low=judged["difference"] - 0.02, high=judged["difference"] + 0.02)


def _all_figures():
    runs, evals = _curves()
    ends = _endpoints(runs, evals)
    f_runs, f_evals, step, deadlines, table = _frontier()
    judged = _judged_crossovers()
    reach = steps_to_target(_results(f_runs, f_evals), [2.5, 2.7, 1.8], by=("pool", "batch_size"))
    fits = {("p0", 2.5): {"S_min": 40.0, "E_min": 640.0, "B_crit": 16.0}}
    scaling = pd.DataFrame(
        {
            "seed": [0, 0, 0, 1, 1, 1],
            "pool tokens": [8_000, 12_000, 24_000, 8_300, 12_500, 24_100],
            "B_crit": [4.6, 5.9, 16.0, 5.0, 6.3, 900.0],
            "B*": [2.1, 2.9, 7.4, 2.4, 3.0, 8.0],
        }
    )
    law = {"B_crit": t_interval([1.15, 1.2]), "B*": t_interval([1.13, 1.0])}
    fitted = pd.DataFrame(
        {"pool": ["p0", "p1", "p2"], "target": 2.5, "B_crit": [20.0, 25.0, 30.0]}
        | {"B_simple": [10.0, 12.0, 9.0], "B*": [4.0, 5.0, np.inf], "B_opt": np.nan}
    )
    curves = pd.concat(
        [
            f_evals[f_evals["run_id"] == rid].assign(policy=policy, pool=pool)
            for policy, rid in (("fixed batch 2", "p0-2"), ("ramp-up", "p0-8"))
            for pool in ("p0", "p1")
        ]
    )
    loaders = pd.concat([ends.assign(loader=name) for name in ("repeat", "shuffle", "repack")])
    ablation = pd.concat(
        [
            ends[ends["pool"] == "p0"].assign(tie_embeddings=t, embedding_weight_decay=w)
            for t in (False, True)
            for w in (0.0, 0.1, 1.0)
        ]
    )
    frontiers = _pool_frontiers(runs, evals, step, deadlines)
    # the ramp-up: the fixed batches' curves, priced alike, 0.2 nats lower on both pools (beyond
    # the 90% interval over the two pools, whose losses differ by 0.02)
    schedule_runs = runs.assign(batch_schedule="0:2,0.5:8")
    ramped = evals.assign(val_loss=evals["val_loss"] - 0.2)
    policy, _ = frontier.schedule_policies(
        frontiers,
        _results(schedule_runs, ramped),
        {"ramp-up": "0:2,0.5:8"},
        [1, 8],
        deadlines,
        step,
    )
    picks = ends[ends["pool"] == "p0"].iloc[[0, 3, 5]]
    noise = f_evals.assign(b_simple=f_evals["step"] / 10)
    return {
        "02_best_loss_vs_batch": figures_batch.best_loss_vs_batch(ends, BATCHES, 1.2),
        "02_accuracy": figures_batch.accuracy_vs_batch(
            ends.assign(**{"pool_continuation acc": 0.3, "pool_continuation acc_stderr": 0.02}),
            ["pool_continuation"],
            BATCHES,
        ),
        "02_curves": figures_batch.curves(evals, picks, "Tuned runs"),
        "02_beta2": figures_batch.beta2_vs_batch(
            {"sweep": ends, "ablation": ends[ends["batch_size"] <= 2]}, BATCHES
        ),
        "02_optimal_batch": figures_batch.optimal_batch_vs_size(
            pd.DataFrame(
                {
                    "params": [6e4, 4.3e5],
                    "batch": [4, 2],
                    "plausible_low": [2, 1],
                    "plausible_high": [8, 4],
                    "replicate_batches": [[4, 8], [2, 2]],
                }
            )
        ),
        "03_loaders": figures_recipe.loaders(loaders[loaders["batch_size"].isin([2, 16])]),
        "03_tying": figures_recipe.tying_embedding_decay(ablation, 2),
        "03_combined": figures_recipe.combined_vs_original(
            {"original": ends, "combined": ends}, BATCHES
        ),
        "04_loss_vs_deadline": figures_frontier.loss_vs_deadline(frontiers),
        "04_heatmap": figures_frontier.optimal_batch_heatmap(table, BATCHES),
        "04_fewer_gpus": figures_frontier.fewer_gpus_smaller_batch(judged, BATCHES),
        "02_differences": figures_batch.batch_differences(_differences(), BATCHES),
        "04_latency": figures_frontier.latency_projection(table, {"x2 (projection)": table}, 8),
        "04_schedules": figures_frontier.schedule_policies(frontiers, policy, [1, 8]),
        "05_noise": figures_cbs.noise_scale(_results(f_runs.assign(micro_batch=2, lr=1e-3), noise)),
        "05_steps": figures_cbs.steps_tokens_to_target(reach, fits, BATCHES),
        "05_cbs": figures_cbs.cbs_vs_pool_size(scaling, law, limit=320),
        "05_fitted": figures_cbs.fitted_batches(cbs.fit_intervals(fitted), fitted, 2.5),
        "05_schedules": figures_cbs.schedules(curves),
    }


@pytest.fixture(scope="module")
def all_figures():
    made = _all_figures()
    yield made
    for fig in made.values():
        matplotlib.pyplot.close(fig)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_every_figure_labels_its_axes_and_keeps_legends_off_the_data(all_figures):
    for name, fig in all_figures.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        plotted = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert plotted[0].get_ylabel(), name
        for ax in plotted:
            assert ax.get_xlabel(), name
            legends = [ax.get_legend(), *fig.legends]
            for legend in filter(None, legends):
                box = legend.get_window_extent(renderer)
                assert not _overlaps(box, ax.get_window_extent(renderer)), name


def test_every_figure_is_legible_as_saved(all_figures):
    """No text under 8 pt or showing a NaN, no axes without labels."""
    for name, fig in all_figures.items():
        assert plots.legibility_problems(fig) == [], name


def _labelled(**changes):
    fig, ax = matplotlib.pyplot.subplots()
    ax.plot([1, 2], [3, 4])
    ax.set_xlabel(changes.get("xlabel", "batch size (sequences)"))
    ax.set_ylabel(changes.get("ylabel", "val loss (nats/token)"))
    if "ticks" in changes:
        ax.tick_params(labelsize=changes["ticks"])
    if "xticks" in changes:
        ax.set_xticks([1, 2], changes["xticks"])
    return fig


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({}, None),
        ({"ticks": 6}, "at 6.0 pt"),
        ({"ylabel": ""}, "an axis without a label"),
        ({"xticks": ["1", "nan"]}, "shows a NaN"),
    ],
)
def test_legibility_finds_small_text_missing_labels_and_nans(changes, says, tmp_path):
    fig = plots.styled(_labelled)(**changes)
    problems = plots.legibility_problems(fig)
    if says is None:
        assert problems == [] and plots.save(fig, "test", "ok", tmp_path)
    else:
        assert problems and says in problems[0]
        with pytest.raises(ReproError, match=f"figure bad: .*{says}"):
            plots.save(fig, "test", "bad", tmp_path)
        assert not list(tmp_path.iterdir())  # nothing written
    matplotlib.pyplot.close(fig)


def _panel(ax, xlabel="batch size (sequences)", ylabel="val loss (nats/token)"):
    ax.plot([1, 2, 4], [3.0, 2.5, 2.7], "o-", label="model tiny")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def _tick_labels(bad: bool):
    """Long pool names as x tick labels: side by side they run together, rotated they do not;
    an empty and an invisible text at the same place count for nothing."""
    fig, ax = plt.subplots(figsize=(4, 3))
    _panel(ax)
    names = [f"cpu-synthetic_max_sentences_20-seed{i}" for i in range(3)]
    ax.set_xticks([1, 2, 4], names, **({} if bad else {"rotation": 30, "ha": "right"}))
    ax.text(2, 2.7, "")
    ax.text(2, 2.7, "hidden", visible=False)
    return fig


def _label_over_panel(bad: bool):
    """Two panels without room between them: the right one's y label and tick labels lie over
    the left one and its tick labels."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(7, 3))
    for ax in (left, right):
        _panel(ax)
    fig.subplots_adjust(wspace=0.02) if bad else fig.tight_layout()
    return fig


def _legend_mark(bad: bool):
    """A legend entry for a floor drawn as nothing, or as the dotted line it is."""
    fig, ax = plt.subplots()
    _panel(ax)
    style = {"linestyle": "none"} if bad else {"color": "k", "linestyle": ":"}
    ax.plot([], [], label="Bayes floor 1.2 (below the axis)", **style)
    plots.legend_outside(ax)
    return fig


def _floor_below_axis(bad: bool):
    """A Bayes floor below the y range and a fit beyond the x range, or both inside them."""
    fig, ax = plt.subplots()
    _panel(ax)
    ax.axhline(1.2, color="k", linestyle=":", label="Bayes floor")
    ax.plot([100, 200] if bad else [1, 4], [2.6, 2.8], "--", label="fit B ~ D^0.12")
    ax.set_xlim(0.5, 5)
    ax.set_ylim(2.2 if bad else 1.0, 3.2)
    plots.legend_outside(ax)
    return fig


def _levels(defect: str):
    """Error bars at one level and a title at another ('stated'), none ('silent'), or bars at no
    recorded level ('unrecorded'); 'none': drawn and stated at 90%."""
    fig, ax = plt.subplots()
    _panel(ax)
    x, y = np.array([1, 2, 4]), np.array([3.0, 2.5, 2.7])
    if defect == "unrecorded":
        ax.errorbar(x, y, yerr=0.1, linestyle="none")
    else:
        plots.errorbars(ax, x, y, y - 0.1, y + 0.1, 0.95 if defect == "stated" else 0.9)
    ax.set_title("" if defect == "silent" else f"Val loss ({plots.interval_label(0.9)})")
    return fig


def _replicated(defect: str):
    """Means over 3 replicates, declared ('declared') or in the title ('titled'), without an
    interval; 'none': declared with their band (a t interval), 'one': a single replicate."""
    fig, ax = plt.subplots()
    _panel(ax)
    plots.replicated(ax, 1 if defect == "one" else pd.Series([3, 3, 2]))
    if defect == "titled":
        ax.set_title(f"Val loss ({plots.replicates(pd.Series([3]))})")
    if defect == "none":
        plots.band(ax, [1, 2, 4], [2.9, 2.4, 2.6], [3.1, 2.6, 2.8], 0.9, alpha=0.3)
        ax.set_title(f"Val loss ({plots.replicates(pd.Series([3]))}, 90% t interval)")
    return fig


@pytest.mark.parametrize(
    ("draw", "bad", "says"),
    [
        (_tick_labels, True, "texts 'cpu-synthetic.*' and 'cpu-synthetic.*' overlap"),
        (_label_over_panel, True, r"text 'val loss \(nats/token\)' lies over axes 0"),
        (_legend_mark, True, "legend entry 'Bayes floor 1.2 .*' shows no mark"),
        (_floor_below_axis, True, "legend entry '(Bayes floor|fit B ~ D.*)' marks nothing inside"),
        (_levels, "stated", "states a 90% interval but draws 95%"),
        (_levels, "silent", "draws 90% intervals without stating their level"),
        (_levels, "unrecorded", "(states a 90% interval but draws none|at no recorded level)"),
        (_replicated, "declared", "a mean over 3 replicates without an interval"),
        (_replicated, "titled", "a mean over 3 replicates without an interval"),
    ],
)
def test_save_refuses_each_defect_and_passes_the_fixed_figure(draw, bad, says, tmp_path):
    """Overlapping texts, legend entries without a visible mark, interval levels unlike the ones
    drawn, replicated means without intervals: each refused by name, its fix saved."""
    fig = plots.styled(draw)(bad)
    problems = plots.legibility_problems(fig)
    assert problems and re.search(says, problems[0]), problems
    with pytest.raises(ReproError, match=f"figure bad: .*{says}"):
        plots.save(fig, "test", "bad", tmp_path)
    fixed = plots.styled(draw)(False if bad is True else "none")
    assert plots.legibility_problems(fixed) == []
    assert plots.save(fixed, "test", "fixed", tmp_path)
    plt.close(fig)
    plt.close(fixed)


def test_one_replicate_needs_no_interval():
    fig = plots.styled(_replicated)("one")
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_pdfs_are_byte_identical_when_saved_twice(all_figures, tmp_path):
    fig = all_figures["05_steps"]
    first = plots.save(fig, "test", "a", tmp_path / "one")[1].read_bytes()
    second = plots.save(fig, "test", "a", tmp_path / "two")[1].read_bytes()
    assert first == second


def test_steps_figure_draws_fits_over_the_data_only_and_marks_unreached_batches(all_figures):
    ax = all_figures["05_steps"].axes[0]
    reached = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(reached) == 1 and reached[0].get_xdata().max() <= 32
    unreached = [line for line in ax.lines if line.get_marker() == "x" and len(line.get_xdata())]
    assert unreached  # target 1.8 is beyond every curve's reach


def test_fewer_gpus_figure_has_one_panel_per_larger_batch(all_figures):
    fig = all_figures["04_fewer_gpus"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["vs batch 8 on 2 GPUs", "vs batch 16 on 4 GPUs", "vs batch 32 on 8 GPUs"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "batch 1 on 1 GPU" and len(labels) == len(set(labels))
    drawn = fig.axes[0].lines[0].get_ydata()  # batch 1 vs batch 8: smaller - larger, as judged
    assert np.allclose(drawn, -0.03) and "smaller - larger" in fig.axes[0].get_ylabel()


def test_nice_ticks_and_labels_are_plain_numbers():
    assert plots.nice_log_ticks(1, 32) == [1, 2, 5, 10, 20]
    assert plots.nice_log_ticks(6, 1536) == [10, 20, 50, 100, 200, 500, 1000]
    assert all(2.3 <= t <= 4.1 for t in plots.nice_log_ticks(2.3, 4.1))
    assert len(plots.nice_log_ticks(2.3, 4.1)) >= 2
    assert [plots.nice_number(v) for v in (0.5, 20, 1500, 250_000, 3e6)] == [
        "0.5",
        "20",
        "1,500",
        "250,000",
        "3M",
    ]


def test_batch_colours_are_distinct_and_stable():
    colors = plots.batch_colors(BATCHES)
    assert len(set(colors.values())) == len(BATCHES)
    assert plots.batch_colors(reversed(BATCHES)) == colors
    assert len(set(plots.PALETTE)) == 10


def test_cbs_figure_draws_each_seeds_points_and_values_beyond_the_limit_at_it(all_figures):
    """B_crit 900 of seed 1 is drawn at the limit (an open marker); each seed keeps its marker,
    named once in the key legend; the exponents over seeds are in the title."""
    ax = all_figures["05_cbs"].axes[0]
    assert ax.get_ylim()[1] >= 320
    b_crit = [
        line
        for line in ax.lines
        if line.get_color() == plots.PALETTE[0] and line.get_linestyle() == "-"
    ]
    assert [line.get_marker() for line in b_crit] == ["o", "s"]
    assert max(b_crit[1].get_ydata()) == 320
    beyond = [line for line in ax.lines if line.get_markerfacecolor() == "white"]
    beyond = [line for line in beyond if len(line.get_ydata())]
    assert [(line.get_marker(), list(line.get_ydata())) for line in beyond] == [("s", [320])]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:4] == ["B_crit", "B*", "seed 0", "seed 1"]
    assert labels[-1].startswith("above 320 sequences")
    assert figures_cbs._law("B_crit", t_interval([1.15, 1.2])) in ax.get_title()


def test_frontier_figures_draw_the_mean_over_pools_with_its_interval(all_figures):
    """loss_vs_deadline and schedule_policies draw each series as the mean of the two pools'
    frontiers (p1 0.02 nats above p0) with a band over pools, and say so; the schedule is named
    in words, and the ramp-up, 0.2 nats below the fixed batches on both pools, wins at every
    deadline."""
    runs, evals = _curves()
    _, _, step, deadlines, _ = _frontier()
    frontiers = _pool_frontiers(runs, evals, step, deadlines)
    assert frontiers["pool"].unique().tolist() == ["p0", "p1"]
    ax = all_figures["04_loss_vs_deadline"].axes[0]
    assert "mean over 2 pools, 90% interval over pools" in ax.get_title()
    one_gpu = frontiers[frontiers["gpus"] == 1].groupby("deadline")["best_val_loss"]
    expected = one_gpu.mean()[one_gpu.count() == 2]  # deadlines both pools reach
    drawn = {line.get_label(): line for line in ax.lines}
    assert list(drawn) == ["1 GPU", "2 GPUs", "4 GPUs", "8 GPUs"]
    assert drawn["1 GPU"].get_xdata().tolist() == expected.index.tolist()
    assert drawn["1 GPU"].get_ydata() == pytest.approx(expected.to_numpy())
    assert len(ax.collections) == 4  # a band per GPU count
    fig = all_figures["04_schedules"]
    assert "mean over 2 pools, 90% interval over pools" in fig.get_suptitle()
    for ax, gpus in zip(fig.axes, ("1 GPU", "8 GPUs")):
        fixed, ramp = ax.lines
        assert [fixed.get_label(), ramp.get_label()] == [
            "best fixed batch",
            "ramp-up:\nbatch 2 -> 8 at 50% of epochs",
        ]
        assert ramp.get_ydata() == pytest.approx(fixed.get_ydata() - 0.2)
        assert len(ax.collections) == 2
        n = len(fixed.get_xdata())
        assert ax.get_title() == f"{gpus}: schedule wins at {n}, loses at 0 of {n} deadlines"


def test_fitted_batches_show_every_pool_and_the_interval_over_pools(all_figures):
    """One marker per pool on each fitted quantity's row (p2's infinite B* open at the right
    edge); the interval bar only where every pool has a finite value (B_crit and B_simple, not B*
    nor B_opt)."""
    ax = all_figures["05_fitted"].axes[0]
    points = [line for line in ax.lines if line.get_label() in ("p0", "p1", "p2")]
    assert {line.get_marker() for line in points} == {"o", "s", "^"}
    infinite = [line for line in points if line.get_markerfacecolor() == "none"]
    rightmost = max(line.get_xdata()[0] for line in points)
    assert len(infinite) == 1 and infinite[0].get_xdata()[0] == rightmost  # p2's B*
    bars = [c for c in ax.containers if c.has_xerr]
    assert len(bars) == 2


def test_models_are_ordered_by_size_not_by_name():
    """SIZES lists the models from the smallest to the largest (at any vocab), which by_size
    keeps in both directions, other names (hand-made data) after them."""
    for vocab in (300, 128_256):
        params = [parameter_count(model_config(name, vocab)) for name in SIZES]
        assert params == sorted(params)
    models = ["tiny", "cpu-xs", "150m", "mine", "nano"]
    assert by_size(models) == ["nano", "tiny", "cpu-xs", "150m", "mine"]
    assert by_size(models, largest_first=True) == ["150m", "cpu-xs", "tiny", "nano", "mine"]


def test_importing_the_figures_changes_no_global_matplotlib_setting():
    """The style applies where a figure is drawn and saved (plots.styled, plots.save), not on
    import: a user's own plots in the same kernel keep their settings."""
    code = (
        "import matplotlib.pyplot as plt\n"
        "before = dict(plt.rcParams)\n"
        "import repro.analysis.figures_pool, repro.analysis.figures_batch\n"
        "import repro.analysis.figures_recipe, repro.analysis.figures_frontier\n"
        "import repro.analysis.figures_cbs, repro.study\n"
        "print(dict(plt.rcParams) == before)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_differences_figure_marks_a_batch_without_an_interval(all_figures):
    ax = all_figures["02_differences"].axes[0]
    assert "no interval" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert np.isfinite(ax.get_ylim()).all() and ax.get_yscale() == "symlog"


def test_settled_keeps_four_significant_digits_and_leaves_the_rest():
    frame = pd.DataFrame({"pool": ["a", "b"], "n": [3, 4], "B": [123.456789, np.inf]})
    settled = plots.settled(frame)
    assert settled["B"].tolist() == [123.5, np.inf] and settled["n"].tolist() == [3, 4]
    fit = plots.settled({"S_min": 0.000123456, "residuals": np.array([1.23456, np.nan])})
    assert fit["S_min"] == 0.0001235 and np.isnan(fit["residuals"][1])
    assert fit["residuals"][0] == 1.235 and frame["B"][0] == 123.456789  # the input is unchanged


def _fit_figures(scale: float) -> list:
    """The figures that draw fits, over fits multiplied by `scale` (a fit's last digits as another
    CPU rounds them)."""
    runs, evals, *_ = _frontier()
    reach = steps_to_target(_results(runs, evals), [2.5, 2.7], by=("pool", "batch_size"))
    fit = {"S_min": 40.1 * scale, "E_min": 640.3 * scale}
    fits = {("p0", 2.5): fit | {"B_crit": fit["E_min"] / fit["S_min"]}}
    scaling = pd.DataFrame(
        {"seed": [0, 0, 1, 1], "pool tokens": [8_000, 24_000, 8_300, 24_100]}
        | {"B_crit": np.array([4.61, 16.2, 5.03, 17.1]) * scale, "B*": [2.1, 7.4, 2.4, 8.0]}
    )
    fitted = pd.DataFrame(
        {"pool": ["p0", "p1", "p2"], "target": 2.5, "B_crit": np.array([8.31, 9.52, 7.73]) * scale}
        | {"B*": [5.1, 6.2, 4.3], "B_opt": np.nan, "B_min": np.nan, "B_simple": [7.0, 8.1, 6.9]}
    )
    law = {"B_crit": t_interval([1.15, 1.2])}
    return [
        figures_cbs.steps_tokens_to_target(reach, fits, BATCHES),
        figures_cbs.cbs_vs_pool_size(scaling, law, limit=320),
        figures_cbs.fitted_batches(cbs.fit_intervals(fitted), fitted, 2.5),
    ]


def test_figures_of_fits_are_the_same_file_when_fits_differ_in_their_ninth_digit(tmp_path):
    """An ill-conditioned fit's eighth or ninth digit differs between CPUs: its figure must not."""
    saved = {}
    for scale in (1.0, 1 + 3e-9):
        for i, fig in enumerate(_fit_figures(scale)):
            saved.setdefault(i, []).append(plots.save(fig, "test", f"f{i}", tmp_path / str(scale)))
            matplotlib.pyplot.close(fig)
    for pair in saved.values():
        (_, one), (_, other) = (tuple(p) for p in pair)
        assert one.read_bytes() == other.read_bytes()


@pytest.mark.parametrize(
    "accuracies, says",
    [
        ([0.40, 0.62, 0.41], "most accurate at batch 4"),  # 4's interval clears the others'
        ([0.40, 0.47, 0.41], "no batch more accurate than another"),  # 4's overlaps 16's
    ],
)
def test_the_accuracy_title_names_a_batch_only_where_its_interval_clears_the_others(
    accuracies, says
):
    """0.02 standard errors: 90% intervals of +-0.033."""
    scores = pd.DataFrame({"batch_size": [1, 4, 16], "acc": accuracies, "acc_se": 0.02})
    assert figures_batch._most_accurate(scores, 1.645).startswith(says)


def test_the_latency_title_compares_deadlines_to_one_loss():
    """Measured frontier ends at 2.5: the target is 2.55, reached at 30 measured, 10 projected."""
    measured = pd.DataFrame({"deadline": [3, 10, 30, 100], "best_val_loss": [5.0, 3.0, 2.55, 2.5]})
    projected = measured.assign(deadline=measured["deadline"] / 3)
    title = figures_frontier._latency_finding(measured, {"x4 GPUs per replica (e=0.7)": projected})
    assert title == (
        "Projected: x4 GPUs per replica reach 2.55 nats/token\n"
        "by deadline 10, data parallel by 30 step units"
    )
