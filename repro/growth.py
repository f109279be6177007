"""Grid growth: widen a sweep's lr and weight-decay grids where a group's choice sits on an edge.

A preset's lr and weight-decay grids are a first guess. After a sweep, each group (runs equal but
for lr, weight decay and epoch budget) is tuned as the notebooks tune it (selection.tuned; the run
with the lowest validation loss on all documents). Where its lr or weight decay is the largest or
smallest value tried around that choice (selection.tried_around; a diverged run counts as tried),
the group gets one more point beyond it, a geometric step as wide as the grid's step at that end,
with every epoch budget of the grid. Repeated for a preset's `grid_growth` rounds, this is a
coordinate-wise search that stops where every choice is interior; where the rounds run out, the
notebooks' edge notes still say so.

The choice that steers the growth is made on all validation documents; the reported losses stay
cross-fitted (selection.py) over whatever the group tried.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.analysis.results import TUNED, default_group_by
from repro.analysis.selection import tried_around, tuned

GROWN = ("lr", "weight_decay")


def _beyond(tried: list[float], chosen: float) -> float | None:
    """The next value past `chosen` when it is the top or bottom of `tried` (a geometric step as
    wide as the last one there, 3 significant digits), else None; a step to or from 0 (a weight
    decay floor) has no width."""
    if len(tried) < 2 or chosen not in (tried[0], tried[-1]):
        return None
    edge, inner = (tried[-1], tried[-2]) if chosen == tried[-1] else (tried[0], tried[1])
    if edge <= 0 or inner <= 0:
        return None
    return float(f"{edge * edge / inner:.3g}")


def _plain(value):
    """A pandas cell as a plain Python value (run fields go through make_run_config)."""
    return value.item() if hasattr(value, "item") else value


def extension_grids(
    grid: dict, runs: pd.DataFrame, evals: pd.DataFrame, store: str | Path
) -> list[dict]:
    """One grid per point beyond an edge (module docstring): the best run of its group with one
    grown axis moved, over the grid's epoch budgets (so that WSD branches still apply). `runs`,
    `evals`: the grid's results (load_results)."""
    finished = runs[runs["status"].isin(["done", "diverged"])]
    if finished.empty:
        return []
    group_by = default_group_by(finished)
    rules = grid.get("when", [])
    axes = (set(grid.get("axes", {})) | {k for rule in rules for k in rule["axes"]}) - {"epochs"}
    budgets = grid.get("axes", {}).get("epochs")
    out = []
    for _, end in tuned(finished, evals, store, group_by).dropna(subset=["run_id"]).iterrows():
        group = finished[(finished[group_by] == end[group_by]).all(axis=1)]
        best = group.set_index("run_id").loc[end["run_id"]]
        for name in GROWN:
            value = _beyond(tried_around(group, best, name, TUNED), best[name])
            if value is None:
                continue
            fixed = dict(grid.get("fixed", {})) | {k: _plain(best[k]) for k in axes}
            point = {"fixed": fixed | {name: value}}
            point |= {"axes": {"epochs": list(budgets)}} if budgets else {}
            out.append(point | ({"wsd_branches": True} if grid.get("wsd_branches") else {}))
    return out
