"""Grid growth: a group whose lr or weight decay is chosen on an edge gets a point beyond it."""

from dataclasses import replace

import pytest

from repro.analysis.selection import tuned
from repro.growth import _beyond, extension_grids
from repro.presets import get_preset
from repro.study import Study


@pytest.mark.parametrize(
    ("tried", "chosen", "beyond"),
    [
        ([1e-3, 3e-3], 3e-3, 9e-3),  # top: one more step of the same width
        ([1e-3, 3e-3, 9e-3], 1e-3, 3.33e-4),  # bottom
        ([1e-3, 3e-3, 9e-3], 3e-3, None),  # interior
        ([0.0, 0.1], 0.0, None),  # weight decay 0 is a floor
        ([0.1], 0.1, None),  # one value: not a tuned axis here
    ],
)
def test_the_next_value_continues_the_grid_geometrically(tried, chosen, beyond):
    assert _beyond(tried, chosen) == beyond


GRID = {
    "fixed": {"model": "m", "batch_size": 4},
    "axes": {
        "pool": ["p0", "p1", "p2"],
        "lr": [1e-3, 3e-3],
        "weight_decay": [0.1, 1.0],
        "epochs": [4],
    },
}


def test_only_choices_on_an_edge_grow_and_a_diverged_run_counts_as_tried(hand_made):
    # p0: best lr 3e-3 (top) and weight decay 0.1 (bottom): one point beyond each
    for lr, wd, loss in ((1e-3, 0.1, 3.2), (3e-3, 0.1, 3.0), (1e-3, 1.0, 3.3), (3e-3, 1.0, 3.1)):
        hand_made.add(loss, pool="p0", lr=lr, weight_decay=wd)
    # p1: lr and weight decay interior around the choice (lr 3e-3, wd 0.3): nothing grows
    for lr, wd, loss in ((1e-3, 0.3, 3.2), (3e-3, 0.3, 3.0), (9e-3, 0.3, 3.1)):
        hand_made.add(loss, pool="p1", lr=lr, weight_decay=wd)
    for wd, loss in ((0.1, 3.05), (1.0, 3.05)):
        hand_made.add(loss, pool="p1", lr=3e-3, weight_decay=wd)
    # p2: the best lr is the top that finished, but the next one diverged: the edge is bounded
    hand_made.add(3.2, pool="p2", lr=1e-3)
    hand_made.add(3.0, pool="p2", lr=3e-3)
    hand_made.add(9.9, pool="p2", lr=9e-3, status="diverged")
    runs, evals = hand_made.frames()
    grids = extension_grids(GRID, runs, evals, hand_made.store)
    points = sorted(
        (g["fixed"]["pool"], g["fixed"]["lr"], g["fixed"]["weight_decay"]) for g in grids
    )
    assert points == [("p0", 3e-3, 0.01), ("p0", 9e-3, 0.1)]
    assert all(g["fixed"]["model"] == "m" and g["axes"] == {"epochs": [4]} for g in grids)
    ends = tuned(runs, evals, hand_made.store, ["pool"]).set_index("pool")
    assert ends.loc["p1", "edge"] == "" and ends.loc["p2", "edge"] == ""
    assert "lr=0.003 is on the edge" in ends.loc["p0", "edge"]


@pytest.fixture
def growing_study(tmp_path):
    smoke = get_preset("smoke")
    preset = replace(smoke, name="grow", pool_seeds=(0,), wsd_branches=True, grid_growth=2)
    return Study(preset, tmp_path, tmp_path / "pools", tmp_path / "runs", 1, progress=False)


def test_a_grown_sweep_trains_its_extensions_once_and_reuses_them(growing_study):
    """Real runs (WSD trunks and branches): the grid's two lrs, then points beyond the chosen
    edge until the choice is interior or the rounds run out; a second sweep trains nothing."""
    study = growing_study
    grid = study.preset.batch_sweep_grid(study.pools(), [8], ["tiny"])
    runs, _ = study.sweep(grid)
    lrs = sorted(runs["lr"].unique())
    assert len(lrs) in (3, 4) and set(grid["when"][0]["axes"]["lr"]) < set(lrs)
    assert (runs.groupby("lr")["epochs"].nunique() == 2).all()  # every budget at every point
    stamps = {rid: (study.store / rid / "status.json").stat().st_mtime for rid in runs["run_id"]}
    again, _ = study.sweep(grid)
    assert sorted(again["run_id"]) == sorted(stamps)
    assert all((study.store / r / "status.json").stat().st_mtime == t for r, t in stamps.items())
