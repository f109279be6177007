"""Tuned endpoints without a selection bonus, and paired comparisons between them.

A group's candidates are its finished runs (every lr, weight decay and epoch budget tried), each
judged at its final evaluation: a run's schedule ends at its own epoch budget (cosine to 0, or a WSD
cool-down branched from a longer run), so the budget is a tuned axis like lr, as in Kim et al. The
validation documents are split into two halves (even and odd index). The run that is best on one
half is reported on the other half, so no choice is judged on the documents that chose it; the two
reported halves together give the endpoint's per-document losses and its loss (nats/token).
Endpoints of different arms compare document by document (`compare`), on each pool and averaged over
pools (the pools share their validation documents).

The best evaluation inside the chosen run (within-run early stopping) is reported beside it,
never mixed with the budgets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.analysis.intervals import Difference, document_losses, paired_difference
from repro.analysis.results import TUNED
from repro.errors import ReproError


def selection_halves(n_documents: int) -> list[np.ndarray]:
    """The two halves of the validation documents (boolean masks: even, odd index)."""
    even = np.arange(n_documents) % 2 == 0
    return [even, ~even]


def _mean(losses: np.ndarray, tokens: np.ndarray, mask: np.ndarray) -> float:
    return float(losses[mask].sum() / max(tokens[mask].sum(), 1))


def cross_fit(
    candidates: dict[str, np.ndarray], tokens: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Per-document summed losses (nats) of the cross-fitted choice among `candidates` (run id ->
    per-document losses on the same documents) and the run chosen on each half: documents of one
    half carry the losses of the run that is best on the other half."""
    halves = selection_halves(len(tokens))
    reported = np.zeros(len(tokens))
    chosen = []
    for select, report in (halves, halves[::-1]):
        rid = min(candidates, key=lambda r: _mean(candidates[r], tokens, select))
        reported[report] = candidates[rid][report]
        chosen.append(rid)
    return reported, chosen


GROWN = ("lr", "weight_decay")
"""Axes judged around the choice, and grown where the choice is not bracketed (repro.growth)."""


def step_past(values: list[float], top: bool) -> float | None:
    """One geometric step past the top (or bottom) of sorted `values`, as wide as the grid's step
    there (3 significant digits); None from or to 0 (weight decay's floor): no width to step by."""
    edge, inner = (values[-1], values[-2]) if top else (values[0], values[1])
    if edge <= 0 or inner <= 0:
        return None
    return float(f"{edge * edge / inner:.3g}")


def untried_neighbours(
    group: pd.DataFrame, best: pd.Series, name: str, tuned: tuple[str, ...]
) -> list[float]:
    """The values beside the choice along `name` (lr or weight decay) that were not tried at the
    best run's other values (its epoch budget aside; a diverged run counts as tried): the nearest
    value below and above among all that runs like the best (in every other tuned value but lr,
    weight decay and budget, such as a batch size tuned with them) tried on this axis, or past an
    end of those, step_past. Empty when the choice is bracketed."""
    same = [t for t in tuned if t not in (*GROWN, "epochs")]
    cell = group[(group[same] == best[same]).all(axis=1)]
    values = sorted(cell[name].unique())
    if len(values) < 2:
        return []
    chosen = best[name]
    below = [v for v in values if v < chosen]
    above = [v for v in values if v > chosen]
    beside = [
        below[-1] if below else step_past(values, top=False),
        above[0] if above else step_past(values, top=True),
    ]
    other = [t for t in GROWN if t != name and t in tuned]
    tried = set(cell.loc[(cell[other] == best[other]).all(axis=1), name])
    return [float(v) for v in beside if v is not None and v not in tried]


def _edges(group: pd.DataFrame, best: pd.Series, tuned: tuple[str, ...]) -> list[str]:
    """Where the grid must be widened: lr or weight decay not bracketed around the choice (growth
    adds the runs named), or at the top of a grid that has no step to grow by; any other tuned
    value at the top of what the group finished, or at its bottom (weight decay 0 is a floor)."""
    notes = []
    done = group[group["status"] == "done"]
    for name in tuned:
        tried = sorted((group if name in GROWN else done)[name].unique())
        grid = ", ".join(f"{float(t):g}" for t in tried)
        missing = untried_neighbours(group, best, name, tuned) if name in GROWN else []
        if missing:
            runs = ", ".join(f"{v:g}" for v in missing)
            notes.append(f"{name}={best[name]:g} is not bracketed: no run at {runs} beside it")
            continue
        at_top, at_bottom = best[name] == tried[-1], best[name] == tried[0]
        floor = name == "weight_decay" and tried[0] == 0
        if len(tried) > 1 and (at_top or (at_bottom and not floor)):
            if name not in GROWN or (at_top and step_past(tried, top=True) is None):
                notes.append(f"{name}={best[name]:g} is on the edge of [{grid}]")
    return notes


def _endpoint(
    group: pd.DataFrame, evals: pd.DataFrame, store: Path, tuned: tuple[str, ...]
) -> dict:
    """The tuned endpoint of one group of runs (one pool): see the module docstring."""
    done = group[group["status"] == "done"]
    row = {"n_runs": len(group), "n_diverged": int((group["status"] == "diverged").sum())}
    if done.empty:
        return row | {"val_loss": np.nan, "edge": "no run finished"}
    finals = evals[evals["run_id"].isin(done["run_id"])].sort_values("step")
    finals = finals.groupby("run_id").last()
    losses = {
        rid: document_losses(store / rid, int(finals.loc[rid, "step"])) for rid in finals.index
    }
    tokens = next(iter(losses.values()))[1]
    reported, chosen = cross_fit({rid: pair[0] for rid, pair in losses.items()}, tokens)
    everything = np.ones(len(tokens), bool)
    rid = min(losses, key=lambda r: _mean(losses[r][0], tokens, everything))
    best = done.set_index("run_id").loc[rid]
    curve = evals[evals["run_id"] == rid]
    early = curve.loc[curve["val_loss"].idxmin()]
    edges = _edges(group[group["status"].isin(["done", "diverged"])], best, tuned)
    censored = "epochs" in tuned and best["epochs"] == done["epochs"].max()
    return row | {
        "val_loss": _mean(reported, tokens, everything),
        "train_loss": float(finals.loc[rid, "train_loss"]),
        **{name: best[name] for name in tuned},
        "run_id": rid,
        "chosen_on_halves": chosen,
        "censored": bool(censored and done["epochs"].nunique() > 1),
        "bracketed": not any(note.startswith(f"{name}=") for name in GROWN for note in edges),
        "early_stop_epoch": float(early["epoch"]),
        "early_stop_val_loss": float(early["val_loss"]),
        "edge": "; ".join(edges),
        "doc_losses": reported,
        "doc_tokens": tokens,
    }


def tuned(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    store: str | Path,
    group_by: list[str],
    tuned: tuple[str, ...] = TUNED,
) -> pd.DataFrame:
    """One row per group (`group_by`, which should include the pool): the cross-fitted loss
    `val_loss` (nats/token) with its per-document losses (`doc_losses`, `doc_tokens`), the run
    chosen on all documents (`run_id`, its `tuned` values and final `train_loss`), whether its
    epoch budget is the largest tried (`censored`: the best budget may lie beyond), grid-edge
    notes (`edge`), whether its lr and weight decay have runs on both sides (`bracketed`), and
    the within-run best evaluation of that run (`early_stop_epoch`, `early_stop_val_loss`; chosen
    on all documents, so not comparable with `val_loss`)."""
    missing = [g for g in [*group_by, *tuned] if g not in runs]
    if missing:
        raise ReproError(f"cannot group or tune by {missing[0]!r}: no such run field")
    groups = runs.groupby(group_by, sort=True) if group_by else [((), runs)]
    rows = [
        dict(zip(group_by, key if isinstance(key, tuple) else (key,)))
        | _endpoint(group, evals, Path(store), tuned)
        for key, group in groups
    ]
    return pd.DataFrame(rows)


def compare(a: pd.DataFrame, b: pd.DataFrame, seed: int = 0) -> Difference:
    """Endpoints `a` minus endpoints `b` (rows of `tuned`, one per pool, matched by pool): the
    difference of the pool-averaged losses (nats/token) with its paired interval over validation
    documents, the difference on each pool, and whether either arm is censored on some pool: its
    best budget is the largest tried, or its lr or weight decay is not bracketed (`bracketed`), so
    its loss might still fall."""
    a, b = a.set_index("pool"), b.set_index("pool")
    pools = sorted(set(a.index) & set(b.index))
    if not pools or a.loc[pools, "val_loss"].isna().any() or b.loc[pools, "val_loss"].isna().any():
        return Difference(np.nan, -np.inf, np.inf, ())
    stack_a = np.stack(list(a.loc[pools, "doc_losses"]))
    stack_b = np.stack(list(b.loc[pools, "doc_losses"]))
    tokens = a.loc[pools[0], "doc_tokens"]
    pooled = paired_difference(stack_a.mean(0), stack_b.mean(0), tokens, seed)
    per_pool = tuple(float((x.sum() - y.sum()) / tokens.sum()) for x, y in zip(stack_a, stack_b))
    censored = tuple(
        bool((arm.loc[pools, "censored"] | ~arm.loc[pools, "bracketed"].astype(bool)).any())
        for arm in (a, b)
    )
    return pooled._replace(per_pool=per_pool, censored=censored)
