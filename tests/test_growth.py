"""Grid growth: where lr or weight decay is not bracketed around a group's choice, the missing
neighbours become runs."""

import io
import sys
from types import SimpleNamespace

import pytest

from repro.analysis.growth import extension_grids
from repro.analysis.selection import step_past, tuned
from repro.design.grids import batch_sweep_grid
from repro.design.preset_files import get_preset
from repro.design.presets import changed
from repro.study import TERMINAL_PROGRESS_ENV, Study


@pytest.mark.parametrize(
    ("values", "top", "past"),
    [
        ([1e-3, 3e-3], True, 9e-3),  # one more step of the same width
        ([1e-3, 3e-3, 9e-3], False, 3.33e-4),  # 3 significant digits
        ([0.0, 0.1], False, None),  # weight decay 0 is a floor
        ([0.0, 0.1], True, None),  # no width to step by from 0
    ],
)
def test_a_grid_continues_geometrically_past_its_ends(values, top, past):
    assert step_past(values, top) == past


GRID = {
    "fixed": {"model": "m", "batch_size": 4},
    "axes": {"pool": ["p0"], "lr": [1e-3, 3e-3], "weight_decay": [0.1, 1.0], "epochs": [4]},
}


def _points(hand_made) -> list[tuple]:
    grids = extension_grids(GRID, hand_made.results())
    axes = {"pool": ["p0"], "epochs": [4]}  # every replicate of the grid, every budget
    assert all(g["fixed"]["model"] == "m" and g["axes"] == axes for g in grids)
    return sorted((g["fixed"]["lr"], g["fixed"]["weight_decay"]) for g in grids)


def _square(hand_made, losses: dict[tuple[float, float], float]) -> None:
    for (lr, wd), loss in losses.items():
        hand_made.add(loss, lr=lr, weight_decay=wd)


def test_a_choice_at_the_top_lr_and_bottom_weight_decay_grows_past_both(hand_made):
    _square(hand_made, {(1e-3, 0.1): 3.2, (3e-3, 0.1): 3.0, (1e-3, 1.0): 3.3, (3e-3, 1.0): 3.1})
    assert _points(hand_made) == [(3e-3, 0.01), (9e-3, 0.1)]


def test_a_choice_at_the_bottom_lr_and_top_weight_decay_grows_past_both(hand_made):
    _square(hand_made, {(1e-3, 0.1): 3.2, (3e-3, 0.1): 3.3, (1e-3, 1.0): 3.0, (3e-3, 1.0): 3.1})
    assert _points(hand_made) == [(3.33e-4, 1.0), (1e-3, 10.0)]


def test_a_bracketed_choice_grows_nothing(hand_made):
    square = {(lr, wd): 3.2 for lr in (1e-3, 3e-3, 9e-3) for wd in (0.1, 0.3, 1.0)}
    _square(hand_made, square | {(3e-3, 0.3): 3.0})
    assert _points(hand_made) == []


def test_a_choice_that_moved_past_the_grid_gets_the_other_axis_beside_it(hand_made):
    """lr 9e-3 was tried at weight decay 0.3 only (a growth point) and won: weight decay is not
    bracketed there, though the group tried 0.1 and 1.0 at other lrs."""
    square = {(lr, wd): 3.2 for lr in (1e-3, 3e-3) for wd in (0.1, 0.3, 1.0)}
    _square(hand_made, square | {(3e-3, 0.3): 3.1, (9e-3, 0.3): 3.0, (2.7e-2, 0.3): 3.3})
    assert _points(hand_made) == [(9e-3, 0.1), (9e-3, 1.0)]


@pytest.mark.parametrize("best_budget,grown", [(4, [8]), (2, [])])
def test_a_best_budget_at_the_largest_tried_grows_to_twice_it(hand_made, best_budget, grown):
    """With `epochs` (the preset's growth.epochs), a bracketed lr and weight decay at the largest
    budget tried get one run of twice that budget; an interior best budget gets none."""
    square = {(lr, wd): 3.2 for lr in (1e-3, 3e-3, 9e-3) for wd in (0.1, 0.3, 1.0)}
    _square(hand_made, square | {(3e-3, 0.3): 3.1})
    hand_made.add(3.0 if best_budget == 2 else 3.3, lr=3e-3, weight_decay=0.3, epochs=2)
    results = hand_made.results()
    assert extension_grids(GRID, results) == []
    grids = extension_grids(GRID, results, epochs=True)
    point = GRID["fixed"] | {"lr": 3e-3, "weight_decay": 0.3}
    assert grids == [{"fixed": point | {"epochs": e}, "axes": {"pool": ["p0"]}} for e in grown]
    axes = {k: v for k, v in GRID["axes"].items() if k != "epochs"}
    one_budget = {"fixed": GRID["fixed"] | {"epochs": 4}, "axes": axes}  # budgets not tuned
    assert extension_grids(one_budget, results, epochs=True) == []


def test_a_diverged_run_bounds_the_grid_and_all_diverged_grows_nothing(hand_made):
    hand_made.add(3.2, lr=1e-3)
    hand_made.add(3.0, lr=3e-3)
    hand_made.add(9.9, lr=9e-3, status="diverged")
    results = hand_made.results()
    assert extension_grids(GRID, results) == []
    assert tuned(results, ["pool"]).loc[0, "edge"] == ""
    for lr in (1e-3, 3e-3):
        hand_made.add(9.9, lr=lr, status="diverged")
    assert extension_grids(GRID, hand_made.results()) == []


def test_the_edge_note_names_the_missing_neighbour_and_a_grid_without_a_step(hand_made):
    _square(hand_made, {(1e-3, 0.0): 3.2, (1e-3, 0.1): 3.0, (3e-3, 0.0): 3.3, (3e-3, 0.1): 3.1})
    edge = tuned(hand_made.results(), ["pool"]).loc[0, "edge"]
    assert "lr=0.001 is not bracketed: no run at 0.000333 beside it" in edge
    assert "weight_decay=0.1 is on the edge of [0, 0.1]" in edge  # no step from 0 to grow by


@pytest.fixture
def growing_study(tmp_path):
    smoke = get_preset("smoke")
    preset = changed(
        smoke,
        name="grow",
        pools={"seeds": (0,)},
        grid={"wsd_branches": True},
        growth={"rounds": 2},
    )
    return Study(preset, tmp_path, tmp_path / "pools", tmp_path / "runs", 1, progress=False)


@pytest.mark.slow
def test_grown_grids_train_their_extensions_once_and_reuse_them(growing_study, monkeypatch):
    """Real runs: two grids grown together (Study.sweeps, as prefetch does), each past its chosen
    lr edge until the choice is bracketed or the rounds run out; the extensions are WSD trunks
    with branches, and sweeping a grid again trains nothing. Every round fills one progress bar,
    printed as text to the terminal where a reproduction's kernel asks for it."""
    study = growing_study
    pools = study.pools()
    grid = batch_sweep_grid(study.preset, pools, [8], ["tiny"])
    repeat = batch_sweep_grid(study.preset, pools, [8], ["tiny"], {"loader": ["repeat"]})
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", terminal)
    monkeypatch.setenv(TERMINAL_PROGRESS_ENV, "1")
    study.progress = True
    runs, repeated = (results.runs for results in study.sweeps([grid, repeat]))
    study.progress = False
    trained = len(set(runs["run_id"]) | set(repeated["run_id"]))
    lines = terminal.getvalue().splitlines()  # not a terminal: a line now and then, no \r
    assert "\r" not in terminal.getvalue() and all(line.startswith("runs") for line in lines)
    assert "growth round 1" in lines[-1] and f" {trained}/{trained} " in lines[-1]
    lrs = sorted(runs["lr"].unique())
    assert len(lrs) in (3, 4) and set(grid["when"][0]["axes"]["lr"]) < set(lrs)
    assert (runs.groupby("lr")["epochs"].nunique() == 2).all()  # every budget at every point
    assert runs.loc[runs["epochs"] == 1, "init_from"].str.contains("checkpoints").all()
    stamps = {rid: (study.store / rid / "status.json").stat().st_mtime for rid in runs["run_id"]}
    again = study.sweep(grid).runs
    assert sorted(again["run_id"]) == sorted(stamps)
    assert all((study.store / r / "status.json").stat().st_mtime == t for r, t in stamps.items())
    assert len(repeated) >= 6 and set(repeated["loader"]) == {"repeat"}  # its own growth
    assert sorted(study.sweep(repeat).runs["run_id"]) == sorted(repeated["run_id"])


def test_a_sweeps_bar_writes_lines_to_a_log_and_a_widget_only_in_a_notebooks_kernel(monkeypatch):
    """Outside a notebook's kernel (repro reproduce's prefetch, a script) the bar is text on
    stderr, a line now and then where stderr is a log file; in a kernel, tqdm's widget, unless
    the kernel is one that repro reproduce runs (TERMINAL_PROGRESS_ENV)."""
    log = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", log)
    monkeypatch.delenv(TERMINAL_PROGRESS_ENV, raising=False)
    monkeypatch.setattr("repro.study.in_kernel", lambda: False)
    settings = SimpleNamespace(progress=True, train=True)
    assert Study._work_bar(settings).lines is not None  # a log file: LineStream
    monkeypatch.setattr("repro.study.in_kernel", lambda: True)
    assert Study._work_bar(settings).bar.fp is not log  # a notebook: the widget
    monkeypatch.setenv(TERMINAL_PROGRESS_ENV, "1")
    assert Study._work_bar(settings).lines is not None
