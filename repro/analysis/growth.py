"""Grid growth: widen a sweep's lr and weight-decay grids where a group's choice is not bracketed.

A preset's lr and weight-decay grids are a first guess. After a sweep, each group (runs equal but
for lr, weight decay and epoch budget) is tuned as the notebooks tune it (selection.tuned; the run
with the lowest validation loss on all documents). Along lr and along weight decay, the choice
should have a run on each side at its other tuned values: the group's next value below and above,
or past the end of the group's grid one geometric step as wide as the grid's step there (a diverged
run counts as tried; weight decay 0 is a floor). Each missing neighbour becomes a run, with every
epoch budget of the grid (selection.untried_neighbours). So a choice that moved past the grid's
edge also gets the other axis's neighbours there, and the search is coordinate-wise. Repeated for a
preset's `growth.rounds`, it stops where every choice is bracketed; where the rounds run out,
the notebooks' edge notes say so. With the preset's `growth.epochs`, a choice at the largest epoch
budget its group tried also gets a run of twice that budget each round (with WSD branches, a
longer trunk of its own), so a best budget is bracketed too unless the rounds run out.

The choice that steers the growth is made on all validation documents of each replicate (pool,
seed); every point it adds is run on every replicate of the grid, so that the held-out choice
(selection.py, made on the other replicates) has the same candidates on each.
"""

from __future__ import annotations

import pandas as pd

from repro.analysis.results import (
    REPLICATE_FIELDS,
    TUNED,
    Results,
    default_group_by,
    plain_value,
)
from repro.analysis.selection import GROWN, tuned, untried_neighbours


def extension_grids(grid: dict, results: Results, epochs: bool = False) -> list[dict]:
    """One grid per point the module docstring adds: the best run of its group with one grown
    axis moved to an untried neighbour, over the grid's epoch budgets (so that WSD branches still
    apply); with `epochs`, also the best run at twice its budget where that budget is the largest
    its group tried (in a grid that tunes budgets: one with an epochs axis). `results`: the
    grid's results. Each point spans the grid's replicates (its pools and seeds)."""
    runs = results.runs
    finished_mask = runs["status"].isin(["done", "diverged"])
    finished = runs[finished_mask]
    group_by = sorted(set(default_group_by(finished)) | set(results.replicate_fields()))
    ends = tuned(results.subset(finished_mask), group_by) if not finished.empty else pd.DataFrame()
    if "run_id" not in ends:  # nothing finished, or every run diverged: nothing to grow around
        return []
    rules = grid.get("when", [])
    axes = (set(grid.get("axes", {})) | {k for rule in rules for k in rule["axes"]}) - {"epochs"}
    budgets = grid.get("axes", {}).get("epochs")
    replicates = {k: v for k, v in grid.get("axes", {}).items() if k in REPLICATE_FIELDS}
    axes -= set(replicates)
    out = []
    for _, end in ends.dropna(subset=["run_id"]).iterrows():
        group = finished[(finished[group_by] == end[group_by]).all(axis=1)]
        best = group.set_index("run_id").loc[end["run_id"]]
        fixed = dict(grid.get("fixed", {})) | {k: plain_value(best[k]) for k in axes}
        branches = {"wsd_branches": True} if grid.get("wsd_branches") else {}
        for name in GROWN:
            for value in untried_neighbours(group, best, name, TUNED):
                point_axes = replicates | ({"epochs": list(budgets)} if budgets else {})
                out.append({"fixed": fixed | {name: value}, "axes": point_axes} | branches)
        if epochs and budgets and best["epochs"] == group["epochs"].max():
            longer = fixed | {"epochs": 2 * int(best["epochs"])}
            out.append({"fixed": longer, "axes": replicates} | branches)
    return [point for i, point in enumerate(out) if point not in out[:i]]
