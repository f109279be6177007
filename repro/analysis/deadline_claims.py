"""Notebook 04's claims, held out on replicates: which batch wins under a deadline.

An *arm* is a set of batch sizes, each on a number of GPUs; under a deadline T its candidates are
every evaluation of its runs (every lr, weight decay and epoch budget, at every evaluation epoch)
whose priced time (repro.analysis.frontier.eval_costs) fits in T. As in repro.analysis.selection,
each replicate (pool, seed) reports, on one half of the validation documents, the candidate that
is best on the other half *of the other replicates* (the same configuration and evaluation),
so neither the documents nor its own run noise chose it. The arms' held-out losses then compare
through selection.contrast: intervals over replicates and documents, no verdict below
MIN_REPLICATES replicates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from repro.analysis.frontier import eval_costs
from repro.analysis.intervals import (
    LEVEL,
    Claim,
    Difference,
    claim_table,
    describe,
    lower_verdict,
)
from repro.analysis.results import TUNED, Results, default_group_by
from repro.analysis.selection import contrast
from repro.errors import ReproError
from repro.runtime.run_dir import selection_halves

StepTime = Callable[[int, int], float]


def deadline_points(results: Results) -> pd.DataFrame:
    """Every evaluation of the finished runs with its replicate, configuration (run fields other
    than the replicate's), its position among the run's evaluations, batch size, and mean loss
    (nats/token) on each half of the validation documents (`half 0`, `half 1`)."""
    runs = results.runs[results.runs["status"] == "done"]
    replicate = results.replicate_fields()
    config = [f for f in default_group_by(runs) if f not in replicate]
    config += [t for t in TUNED if t not in config]
    keyed = runs.assign(
        replicate=list(zip(*(runs[f] for f in replicate))),
        config=list(zip(*(runs[f] for f in config))),
    )
    points = results.evals.dropna(subset=["val_loss"]).merge(
        keyed[["run_id", "replicate", "config", "batch_size"]], on="run_id"
    )
    # the n-th evaluation of a configuration matches across pools (their epochs may differ in
    # the last digits where pools differ in steps per epoch)
    points["position"] = points.sort_values("step").groupby("run_id").cumcount()
    halves = [
        results.documents.halves(rid, int(step))
        for rid, step in zip(points["run_id"], points["step"])
    ]
    return points.assign(**{f"half {i}": [h[i] for h in halves] for i in (0, 1)})


def held_out_arm(
    points: pd.DataFrame,
    results: Results,
    gpus: dict[int, int],
    deadline: float,
    step_time: StepTime,
) -> pd.DataFrame:
    """Endpoint rows (one per replicate; as selection.tuned gives them) of the arm whose batch
    sizes run on `gpus` (batch -> GPUs) within `deadline` (units of `step_time`): each half of a
    replicate's documents carries the candidate best on the other half of the other replicates."""
    feasible = points[_costs(points, gpus, step_time) <= deadline]
    rows = []
    for replicate in sorted(points["replicate"].unique()):
        row = _held_out_row(feasible, results, replicate)
        if row is not None:
            rows.append(dict(zip(results.replicate_fields(), replicate)) | row)
    return pd.DataFrame(rows, columns=[*results.replicate_fields(), *ENDPOINT_COLUMNS])


def _costs(points: pd.DataFrame, gpus: dict[int, int], step_time: StepTime) -> pd.Series:
    """Priced time of each point whose batch is in `gpus` (on its GPUs); inf for the others."""
    cost = pd.Series(np.inf, index=points.index)
    for batch, g in gpus.items():
        part = points[points["batch_size"] == batch]
        if len(part):
            cost[part.index] = eval_costs(part, g, step_time)
    return cost


ENDPOINT_COLUMNS = [
    "val_loss",
    "doc_losses",
    "doc_tokens",
    "at_largest_budget",
    "at_cap",
    "bracketed",
    "held_out",
]


def _held_out_row(feasible: pd.DataFrame, results: Results, replicate: tuple) -> dict | None:
    """The held-out endpoint of one replicate among `feasible` points, or None without one."""
    reported, tokens = None, None
    for select in (0, 1):
        scores = feasible.pivot_table(f"half {select}", ["config", "position"], "replicate")
        if replicate not in scores or scores.shape[1] < 2:
            return None
        others = scores.drop(columns=[replicate]).mean(axis=1)
        valid = others[scores[replicate].notna() & others.notna()]
        if valid.empty:
            return None
        config, position = valid.idxmin()
        point = feasible[
            (feasible["replicate"] == replicate)
            & (feasible["config"] == config)
            & (feasible["position"] == position)
        ].iloc[0]
        losses, tokens = results.documents(point["run_id"], int(point["step"]))
        report = selection_halves(len(tokens))[1 - select]
        reported = np.zeros(len(tokens)) if reported is None else reported
        reported[report] = losses[report]
    value = float(reported.sum() / tokens.sum())
    return dict(
        zip(
            ENDPOINT_COLUMNS,
            [value, reported, tokens, False, False, True, "replicates, documents"],
        )
    )


def _split(batches: list[int]) -> tuple[list[int], list[int]]:
    """The smaller half of the batch sizes (below the median) and the rest."""
    median = float(np.median(batches))
    return [b for b in batches if b < median], [b for b in batches if b >= median]


def deadline_claim(
    points: pd.DataFrame, results: Results, gpus: int, deadlines, step_time: StepTime
) -> Claim:
    """ "Tight deadlines favour larger batches", on `gpus` GPUs: the smaller half of the batch
    sizes against the larger half (each a held-out arm), at the tightest deadline at which both
    arms have an evaluation on every replicate and at the loosest; the claim is the
    difference-in-differences (smaller - larger at the loosest) - (smaller - larger at the
    tightest): below 0 (the smaller batches gain as the deadline loosens) agrees, above 0
    disagrees."""
    claim = "tight deadlines favour larger batches"
    small, large = _split(sorted(int(b) for b in points["batch_size"].unique()))
    if not small:
        return Claim("tight-favours-large", claim, "yes", "a single batch size", "undetermined")
    replicates = points["replicate"].nunique()

    def arms(deadline: float) -> tuple[pd.DataFrame, pd.DataFrame]:
        return tuple(
            held_out_arm(points, results, dict.fromkeys(side, gpus), deadline, step_time)
            for side in (small, large)
        )

    reached = (t for t in sorted(deadlines) if all(len(a) == replicates for a in arms(t)))
    tight = next(reached, None)
    if tight is None:
        measured = "no deadline reaches both halves on every replicate"
        return Claim("tight-favours-large", claim, "yes", measured, "undetermined")
    loose = max(deadlines)
    (s_t, l_t), (s_l, l_l) = arms(tight), arms(loose)
    names = f"batches {small} - {large}"
    measured = (
        f"{gpus} GPUs, {names}: "
        + describe(f"T={tight:g}", contrast([(1.0, s_t), (-1.0, l_t)]))
        + "; "
        + describe(f"T={loose:g}", contrast([(1.0, s_l), (-1.0, l_l)]))
    )
    did = contrast([(1.0, s_l), (-1.0, l_l), (-1.0, s_t), (1.0, l_t)])
    measured += "; " + describe("difference-in-differences (loose - tight)", did)
    return Claim("tight-favours-large", claim, "yes", measured, lower_verdict([did]), did)


def _horizons(points: pd.DataFrame, gpus: dict[int, int], step_time: StepTime) -> dict[int, float]:
    """Per batch size, the time of its last evaluation on its GPUs, on the replicate where that
    comes first: before it, the batch is still training on every replicate."""
    cost = _costs(points, gpus, step_time)
    last = cost.groupby([points["batch_size"], points["replicate"]]).max()
    return {int(b): float(t) for b, t in last.groupby(level=0).min().items()}


def judged_crossovers(
    points: pd.DataFrame, results: Results, deadlines, step_time: StepTime, micro_batch: int
) -> pd.DataFrame:
    """Each smaller batch on fewer GPUs against each larger batch on more (every batch on the
    GPUs it fills, max(1, B / micro_batch)) at every deadline at which both are still training on
    every replicate: held-out arms, the difference smaller - larger (nats/token) with simultaneous
    intervals (Bonferroni over the n comparisons, each at 1 - (1 - LEVEL) / n) and their degrees
    of freedom."""
    batches = sorted(int(b) for b in points["batch_size"].unique())
    gpus = {b: max(1, b // micro_batch) for b in batches}
    horizon = _horizons(points, gpus, step_time)
    pairs = [
        (t, b1, b2)
        for t in sorted(deadlines)
        for i, b1 in enumerate(batches)
        for b2 in batches[i + 1 :]
        if gpus[b1] < gpus[b2] and t < min(horizon[b1], horizon[b2])
    ]
    arm = {}
    for t, b1, b2 in pairs:
        for b in (b1, b2):
            if (t, b) not in arm:
                arm[(t, b)] = held_out_arm(points, results, {b: gpus[b]}, t, step_time)
    level = 1 - (1 - LEVEL) / max(len(pairs), 1)
    rows = []
    for t, b1, b2 in pairs:
        diff = contrast([(1.0, arm[(t, b1)]), (-1.0, arm[(t, b2)])], level)
        rows.append(
            {"deadline": t, "small_batch": b1, "small_gpus": gpus[b1], "large_batch": b2}
            | {"large_gpus": gpus[b2], "difference": diff.value, "low": diff.low}
            | {"high": diff.high, "replicates": diff.per_replicate, "level": level, "df": diff.df}
        )
    columns = ["deadline", "small_batch", "small_gpus", "large_batch", "large_gpus"]
    return pd.DataFrame(
        rows, columns=[*columns, "difference", "low", "high", "replicates", "level", "df"]
    )


def crossover_claim(judged: pd.DataFrame) -> Claim:
    """ "A smaller batch on fewer GPUs can beat a larger batch on more GPUs" (judged_crossovers):
    agrees when some simultaneous interval lies below 0, disagrees when every one lies above 0,
    else (or with none, or fewer than MIN_REPLICATES replicates) undetermined."""
    claim = (
        "under a fixed deadline a smaller batch on fewer GPUs can beat a larger batch on more GPUs"
    )
    if judged.empty:
        measured = "no deadline at which both batches of a pair train"
        return Claim("fewer-gpus-smaller-batch", claim, "yes", measured, "undetermined")
    diffs = [
        Difference(
            r["difference"], r["low"], r["high"], r["replicates"], df=r["df"], level=r["level"]
        )
        for _, r in judged.iterrows()
    ]
    below = [lower_verdict([d]) == "agrees" for d in diffs]
    above = [lower_verdict([d]) == "disagrees" for d in diffs]
    verdict = "agrees" if any(below) else ("disagrees" if all(above) else "undetermined")
    best = judged.assign(i=range(len(judged))).sort_values(["high", "difference"]).iloc[0]
    name = (
        f"closest to the claim, T={best['deadline']:g}: batch {best['small_batch']} on "
        f"{best['small_gpus']} - batch {best['large_batch']} on {best['large_gpus']} GPUs"
    )
    measured = (
        f"{len(judged)} (deadline, pair) comparisons while both train: smaller batch lower in "
        f"{sum(below)}, higher in {sum(above)}; "
        + describe(name, diffs[int(best["i"])])
        + f" (simultaneous {LEVEL:.0%} intervals, Bonferroni: each at level {best['level']:.4g})"
    )
    closest = diffs[int(best["i"])]  # the verdict hinges on it: the lowest upper end
    return Claim("fewer-gpus-smaller-batch", claim, "yes", measured, verdict, closest)


def frontier_claims(
    results: Results, judged: pd.DataFrame, deadlines, step_time: StepTime, gpus: int
) -> pd.DataFrame:
    """Claims of the frontier section from the `results` of one model size on every pool
    (`judged`: judged_crossovers of its deadline_points); deadlines in units of `step_time`."""
    if "model" not in results.runs or results.runs["model"].nunique() != 1:
        raise ReproError("frontier claims need the runs of exactly one model size")
    points = deadline_points(results)
    latency = Claim(
        "latency-parallelism",
        "latency-oriented parallelism trades extra GPUs for shorter steps",
        "yes (a projection in the paper too)",
        "only projected (dashed curves above); no run here uses several GPUs per replica, so the "
        "data cannot decide",
        "undetermined",
    )
    claims = [
        deadline_claim(points, results, gpus, deadlines, step_time),
        crossover_claim(judged),
        latency,
    ]
    return claim_table(claims)
