"""Batch-size schedules against the best fixed batch (notebook 05, and notebook 04's schedule
runs): the slice (epoch budget, weight decay) at which each pool's schedules meet the fixed
batches, chosen on the other pools, and the comparison of the two arms as held-out tuned endpoints
(repro.analysis.selection). The study's epoch cap changes nothing here: the schedules meet the
fixed batches at one slice (no budget tuned).

Units: batch sizes are sequences; losses are nats/token; tokens are training tokens.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from repro.analysis import selection
from repro.analysis.intervals import Difference
from repro.analysis.results import REPLICATE_FIELDS, Results
from repro.design.presets import pool_label
from repro.errors import ReproError
from repro.runtime.config import batch_schedule_text, parse_batch_schedule
from repro.runtime.loaders import BatchPhases, epoch_batches


def schedule_words(schedule: str) -> str:
    """A batch_schedule in words: "0:2,0.5:8,0.75:32" -> "batch 2 -> 8 at 50% -> 32 at 75% of
    epochs" (batch sizes in sequences)."""
    (_, first), *later = parse_batch_schedule(schedule)
    steps = "".join(f" -> {batch} at {fraction:.0%}" for fraction, batch in later)
    return f"batch {first}{steps}" + (" of epochs" if later else "")


def _every_phase_within(phases: BatchPhases, epochs: int) -> bool:
    """Whether every phase of a batch schedule ((0.0, 2), (0.5, 8)) starts within `epochs`
    (phases start at whole epochs, loaders.epoch_batches)."""
    batches = epoch_batches(epochs, 0, phases)
    return all(batch in batches for _, batch in phases)


def schedule_slices(fixed: Results, schedules: list[BatchPhases]) -> dict[str, tuple[int, float]]:
    """Per pool, the epoch budget and weight decay at which the `schedules` meet the `fixed`
    batches (one model): those of the best fixed batch (batch, lr, weight decay and budget) chosen
    on the *other* pools (selection.held_out_choices; on the pool itself when it is the only one),
    or the smallest longer budget in which every schedule reaches its last phase."""
    done = fixed.subset(fixed.runs["status"] == "done")
    if done.runs.empty:
        raise ReproError("no finished fixed-batch run to meet the batch schedules: run 02 first")
    budgets = sorted(int(e) for e in done.runs["epochs"].unique())
    slices = {}
    for pool, best in selection.held_out_choices(done, ("batch_size", *selection.TUNED)).items():
        longer = [e for e in budgets if e >= best["epochs"]]
        fits = [e for e in longer if all(_every_phase_within(s, e) for s in schedules)]
        if not fits:
            raise ReproError(
                f"no epoch budget up to {budgets[-1]} gives every phase of the batch schedules "
                f"{[batch_schedule_text(s) for s in schedules]} an epoch: add a longer budget or "
                "shorten the schedules"
            )
        slices[pool] = (fits[0], float(best["weight_decay"]))
    return slices


class ScheduleComparison(NamedTuple):
    """Tuned endpoints per policy and pool (`table`), the chosen runs' evaluation curves
    (`curves`: policy, pool, tokens, val_loss), and the best schedule minus the best fixed batch
    (`difference`, nats/token, with its held-out paired interval over pools and documents)
    described by `label`."""

    table: pd.DataFrame
    curves: pd.DataFrame
    difference: Difference
    label: str


def _policy_rows(ends: pd.DataFrame, names: list[str]) -> list[dict]:
    """Display rows of tuned endpoints (rows of selection.tuned), named by `names`."""
    return [
        {
            "policy": name,
            "pool": pool_label(end["pool"]),
            "val loss (cross-fitted)": end["val_loss"],
            "lr": end.get("lr"),
            "runs": end["n_runs"],
        }
        for name, (_, end) in zip(names, ends.iterrows())
    ]


def _matched_fixed(fixed: Results, schedule_runs: pd.DataFrame) -> tuple[Results, str]:
    """The fixed-batch runs on each of the schedules' pools at that pool's epoch budget and weight
    decay, and those slices described ("pool 0: 8 epochs, weight decay 1; ...")."""
    runs, match, notes = fixed.runs, np.zeros(len(fixed.runs), bool), []
    for pool, mine in schedule_runs.groupby("pool"):
        slice_ = mine[["epochs", "weight_decay"]].drop_duplicates()
        if len(slice_) != 1:
            raise ReproError("schedule runs on one pool must share one epoch budget and decay")
        epochs, decay = int(slice_["epochs"].iloc[0]), float(slice_["weight_decay"].iloc[0])
        here = (runs["pool"] == pool) & (runs["epochs"] == epochs) & (runs["weight_decay"] == decay)
        if not here.any():
            raise ReproError(
                f"no fixed-batch run on {pool_label(pool)} at its schedules' {epochs} epochs, "
                f"decay {decay:g}"
            )
        match |= here.to_numpy()
        notes.append(f"{pool_label(pool)}: {epochs} epochs, weight decay {decay:g}")
    return fixed.subset(pd.Series(match, index=runs.index)), "; ".join(notes)


def _curves(evals: pd.DataFrame, ends: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The evaluation curves (tokens, val_loss) of the runs `ends` chose, per policy and pool."""
    parts = [
        evals.loc[evals["run_id"] == end["run_id"], ["tokens", "val_loss"]].assign(
            policy=name, pool=pool_label(end["pool"])
        )
        for name, (_, end) in zip(names, ends.iterrows())
    ]
    return pd.concat(parts, ignore_index=True)[["policy", "pool", "tokens", "val_loss"]]


def _numbered(scheduled: Results, schedules: list[str]) -> Results:
    """The runs of `schedules` (batch_schedule strings) with each one's index as `schedule_no`:
    a tuned value (the schedule string itself is the group of per-schedule endpoints)."""
    ramps = scheduled.subset(scheduled.runs["batch_schedule"].isin(schedules))
    numbers = ramps.runs["batch_schedule"].map(schedules.index)
    return replace(ramps, runs=ramps.runs.assign(schedule_no=numbers))


def _display(
    fixed: Results, ramps: Results, ends: list[pd.DataFrame], names: dict[str, str], arms: list
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table and curves of schedules_vs_fixed: `ends` are the endpoints per fixed batch, per
    schedule, of the best fixed batch and of the best schedule; `arms` names the last two."""
    per_batch, per_schedule, best_fixed, best_ramp = ends
    ramp_labels = [f"{names[s]} ({schedule_words(s)})" for s in per_schedule["batch_schedule"]]
    labels = [f"fixed batch {int(b)}" for b in per_batch["batch_size"]] + ramp_labels
    arm_labels = [arms[0]] * len(best_fixed) + [arms[1]] * len(best_ramp)
    table = pd.DataFrame(
        _policy_rows(pd.concat([per_batch, per_schedule]), labels)
        + _policy_rows(pd.concat([best_fixed, best_ramp]), arm_labels)
    )
    curves = pd.concat(
        [
            _curves(fixed.evals, best_fixed, [arms[0]] * len(best_fixed)),
            _curves(ramps.evals, per_schedule, ramp_labels),
        ],
        ignore_index=True,
    )
    return table, curves


def schedules_vs_fixed(
    fixed: Results, scheduled: Results, schedules: dict[str, str]
) -> ScheduleComparison:
    """Batch-size schedules (`scheduled`; `schedules`: name -> batch_schedule) against the
    `fixed`-batch runs of each pool at that pool's epoch budget and weight decay (its slice,
    schedule_slices), all as held-out tuned endpoints (selection.tuned over lr, with the batch size
    or the schedule as a tuned value where an arm spans several; the slice is not tuned, so a
    pool's choice is made on the other pools at their own slices): one row per pool and fixed
    batch and per schedule, then the two arms compared: the best fixed batch and the best
    schedule."""
    fixed, slices = _matched_fixed(fixed, scheduled.runs)
    names = {s: n for n, s in schedules.items()}
    ramps = _numbered(scheduled, list(names))
    replicate = list(REPLICATE_FIELDS)
    ends = [
        selection.tuned(fixed, [*replicate, "batch_size"], ("lr",)),
        selection.tuned(ramps, [*replicate, "batch_schedule"], ("lr",)),
        selection.tuned(fixed, replicate, ("batch_size", "lr")),
        selection.tuned(ramps, replicate, ("schedule_no", "lr")),
    ]
    batch = ", ".join(str(int(b)) for b in ends[2]["batch_size"].drop_duplicates())
    ramp = ", ".join(list(names.values())[int(n)] for n in ends[3]["schedule_no"].unique())
    arms = [f"best fixed batch (chose {batch})", f"best schedule (chose {ramp})"]
    table, curves = _display(fixed, ramps, ends, names, arms)
    label = f"best schedule ({ramp}) - best fixed batch ({batch}) at each pool's slice ({slices})"
    return ScheduleComparison(table, curves, selection.compare(ends[3], ends[2]), label)
