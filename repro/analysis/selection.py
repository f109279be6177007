"""Tuned endpoints without a selection bonus, and paired comparisons between them.

A group's candidates are its finished runs (every lr, weight decay and epoch budget tried), each
judged at its final evaluation: a run's schedule ends at its own epoch budget (cosine to 0, or a WSD
cool-down branched from a longer run), so the budget is a tuned axis like lr, as in Kim et al.
A choice at the largest budget tried might still improve past it (censored), unless that budget is
the study's cap (Grid.cap, e.g. the paper's 32 epochs), within which its claims are stated.

No choice is judged on the data that chose it. A group has one replicate per pool (and seed); the
validation documents are split into two halves (even and odd index). A replicate's endpoint on one
half is the candidate that is best on the other half *of the other replicates* (mean over those
that finished it), so neither the documents nor the replicate's own run noise (its pool, its seed)
pick what it reports; the two reported halves together give the endpoint's per-document losses and
its loss (nats/token). With a single replicate the choice falls back to the replicate's own other
half (`held_out` says which). Endpoints of different arms compare document by document and
replicate by replicate (`compare`, `contrast`; repro.analysis.intervals).

The run chosen on all of a replicate's own documents is shown beside it (its tuned values, final
training loss, grid edges, and its best evaluation: within-run early stopping), never mixed with
the reported loss.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.analysis.confirmation import HELD_OUT as CONFIRMED
from repro.analysis.intervals import (
    LEVEL,
    NOT_MEASURED,
    Difference,
    replicate_difference,
    t_interval,
)
from repro.analysis.results import TUNED, Results
from repro.design.presets import pool_label
from repro.errors import ReproError
from repro.runtime.run_dir import selection_halves

Candidates = dict[tuple, tuple[str, np.ndarray]]
"""A replicate's finished runs: tuned values -> (run id, per-document summed losses, nats)."""


def _mean(losses: np.ndarray, tokens: np.ndarray, mask: np.ndarray) -> float:
    return float(losses[mask].sum() / max(tokens[mask].sum(), 1))


def _choose(mine: Candidates, others: list[Candidates], tokens: np.ndarray, mask) -> tuple:
    """The candidate of `mine` with the lowest mean loss on `mask` over the `others` that finished
    it (on `mine` itself when no other replicate shares a candidate)."""
    shared = [key for key in mine if any(key in other for other in others)]
    if not shared:
        return min(mine, key=lambda k: _mean(mine[k][1], tokens, mask))
    scores = {
        key: np.mean([_mean(o[key][1], tokens, mask) for o in others if key in o]) for key in shared
    }
    return min(shared, key=scores.get)


def cross_fit(
    mine: Candidates, others: list[Candidates], tokens: np.ndarray
) -> tuple[np.ndarray, list[str], bool]:
    """Per-document summed losses (nats) of a replicate's held-out choice among its candidates
    `mine`, the run chosen for each half, and whether other replicates chose (module docstring):
    documents of one half carry the losses of the candidate best on the other half."""
    halves = selection_halves(len(tokens))
    reported = np.zeros(len(tokens))
    chosen = []
    for select, report in (halves, halves[::-1]):
        key = _choose(mine, others, tokens, select)
        reported[report] = mine[key][1][report]
        chosen.append(mine[key][0])
    held_out = any(key in other for key in mine for other in others)
    return reported, chosen, held_out


GROWN = ("lr", "weight_decay")
"""Axes judged around the choice, and grown where the choice is not bracketed
(repro.analysis.growth)."""


def step_past(values: list[float], top: bool) -> float | None:
    """One geometric step past the top (or bottom) of sorted `values`, as wide as the grid's step
    there (3 significant digits); None from or to 0 (weight decay's floor): no width to step by."""
    edge, inner = (values[-1], values[-2]) if top else (values[0], values[1])
    if edge <= 0 or inner <= 0:
        return None
    return float(f"{edge * edge / inner:.3g}")


def untried_neighbours(
    group: pd.DataFrame, best: pd.Series, name: str, axes: tuple[str, ...]
) -> list[float]:
    """The values beside the choice along `name` (lr or weight decay) that were not tried at the
    best run's other values (its epoch budget aside; a diverged run counts as tried): the nearest
    value below and above among all that runs like the best (in every other tuned value but lr,
    weight decay and budget, such as a batch size tuned with them) tried on this axis, or past an
    end of those, step_past. Empty when the choice is bracketed."""
    same = [t for t in axes if t not in (*GROWN, "epochs")]
    cell = group[_matching(group, best, same)]
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
    other = [t for t in GROWN if t != name and t in axes]
    tried = set(cell.loc[_matching(cell, best, other), name])
    return [float(v) for v in beside if v is not None and v not in tried]


def _matching(frame: pd.DataFrame, best: pd.Series, fields: list[str]) -> np.ndarray:
    """Rows of `frame` equal to `best` in every one of `fields` (all rows for none)."""
    match = np.ones(len(frame), bool)
    for field in fields:
        match &= frame[field].to_numpy() == best[field]
    return match


def _edges(
    group: pd.DataFrame, best: pd.Series, axes: tuple[str, ...], cap: float | None
) -> list[str]:
    """Where the grid must be widened: lr or weight decay not bracketed around the choice (growth
    adds the runs named), or at the top of a grid that has no step to grow by; any other tuned
    value at the top of what the group finished (an epoch budget at the study's `cap` aside: the
    grid ends there), or at its bottom (weight decay 0 is a floor)."""
    notes = []
    done = group[group["status"] == "done"]
    for name in axes:
        if name == "epochs" and best[name] == cap:
            continue
        tried = sorted((group if name in GROWN else done)[name].unique())
        grid = ", ".join(f"{float(t):g}" for t in tried)
        missing = untried_neighbours(group, best, name, axes) if name in GROWN else []
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


def _candidates(group: pd.DataFrame, results: Results, axes: tuple[str, ...]) -> Candidates:
    """The finished runs of one replicate's group at their final evaluations."""
    done = group[group["status"] == "done"]
    clash = done[done.duplicated(list(axes), keep=False)]
    if len(clash):
        raise ReproError(
            f"runs {', '.join(clash['run_id'][:2])} of one group share every tuned value "
            f"({', '.join(axes)}): group by the run field that tells them apart"
        )
    steps = results.final_steps
    return {
        tuple(run[name] for name in axes): (rid, results.documents(rid, steps[rid])[0])
        for run in done[["run_id", *axes]].to_dict("records")
        if (rid := run["run_id"]) in steps
    }


def _endpoint(
    group: pd.DataFrame,
    results: Results,
    axes: tuple[str, ...],
    mine: Candidates,
    others: list[Candidates],
    cap: float | None,
) -> dict:
    """The tuned endpoint of one replicate's group of runs (its candidates `mine`, the other
    replicates' `others`, the study's epoch `cap`): see the module docstring."""
    done = group[group["status"] == "done"]
    row = {"n_runs": len(group), "n_diverged": int((group["status"] == "diverged").sum())}
    if not mine:
        return row | {"val_loss": np.nan, "edge": "no run finished"}
    tokens = _tokens(results, next(iter(mine.values()))[0])
    reported, chosen, held_out = cross_fit(mine, others, tokens)
    everything = np.ones(len(tokens), bool)
    rid = min(mine.values(), key=lambda c: _mean(c[1], tokens, everything))[0]
    best = done.set_index("run_id").loc[rid]
    curve = results.curve(rid)
    early = curve.loc[curve["val_loss"].idxmin()]
    edges = _edges(group[group["status"].isin(["done", "diverged"])], best, axes, cap)
    budget = best["epochs"] if "epochs" in axes else None
    return row | {
        "val_loss": _mean(reported, tokens, everything),
        "train_loss": _final_train_loss(results, chosen),
        **{name: best[name] for name in axes},
        "run_id": rid,
        "chosen_on_halves": chosen,
        "held_out": "replicates, documents" if held_out else "documents",
        "at_largest_budget": bool(budget == done["epochs"].max() and done["epochs"].nunique() > 1),
        "at_cap": bool(budget is not None and budget == cap),
        "bracketed": not any(note.startswith(f"{name}=") for name in GROWN for note in edges),
        "early_stop_epoch": float(early["epoch"]),
        "early_stop_val_loss": float(early["val_loss"]),
        "edge": "; ".join(edges),
        "doc_losses": reported,
        "doc_tokens": tokens,
    }


def _final_train_loss(results: Results, run_ids: list[str]) -> float:
    """Mean final training loss (nats/token) of `run_ids` (the held-out choices of both halves)."""
    return float(np.mean([results.final_train_losses[rid] for rid in run_ids]))


def _tokens(results: Results, run_id: str) -> np.ndarray:
    """Scored tokens per validation document (the same for every evaluation of every run)."""
    return results.documents(run_id, results.final_steps[run_id])[1]


def _groups(frame: pd.DataFrame, by: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key tuple, rows) per group of `by` (one group of everything when `by` is empty)."""
    if not by:
        return [((), frame)]
    return [(k if isinstance(k, tuple) else (k,), g) for k, g in frame.groupby(by, sort=True)]


EMPTY_COLUMNS = [
    "val_loss",
    "train_loss",
    "run_id",
    "at_largest_budget",
    "at_cap",
    "bracketed",
    "edge",
]
"""Columns of `tuned` that an arm without a finished run still has (with its tuned fields)."""


def tuned(
    results: Results,
    group_by: list[str],
    tuned_fields: tuple[str, ...] = TUNED,
    cap: float | None = None,
) -> pd.DataFrame:
    """One row per group (`group_by`, which should include the replicate fields: pool, seed): the
    held-out loss `val_loss` (nats/token) with its per-document losses (`doc_losses`,
    `doc_tokens`) and how it was held out (`held_out`), the run chosen on all of the replicate's
    documents (`run_id` and its `tuned_fields` values), the mean final training loss of the runs
    chosen for the two halves (`train_loss`, held out like `val_loss`), whether its epoch budget is
    the largest tried (`at_largest_budget`: the best budget may lie beyond) and whether it is the
    study's `cap` (epochs, Grid.cap; `at_cap`: none lies beyond within the study; None: no cap
    known), grid-edge notes (`edge`), whether its lr and weight decay have runs on both sides
    (`bracketed`), and the within-run best evaluation of that run (`early_stop_epoch`,
    `early_stop_val_loss`; chosen on all documents, so not comparable with `val_loss`)."""
    runs = results.runs
    missing = [g for g in [*group_by, *tuned_fields] if g not in runs]
    if missing:
        raise ReproError(f"cannot group or tune by {missing[0]!r}: no such run field")
    columns = [*group_by, *EMPTY_COLUMNS, *tuned_fields]
    if runs.empty:  # an arm with no run: no endpoint, and comparisons with it not measured
        return pd.DataFrame(columns=columns)
    replicate = [f for f in results.replicate_fields() if f in group_by]
    cell_by = [g for g in group_by if g not in replicate]
    rows = []
    for cell_key, cell in _groups(runs, cell_by):
        replicates = _groups(cell, replicate)
        candidates = [_candidates(group, results, tuned_fields) for _, group in replicates]
        pools = [dict(zip(replicate, key)).get("pool") for key, _ in replicates]
        for i, (key, group) in enumerate(replicates):
            # held out by pool: a sibling seed on the same pool shares its pool's luck
            others = [
                c
                for j, c in enumerate(candidates)
                if j != i and (pools[i] is None or pools[j] != pools[i])
            ]
            fields = dict(zip(cell_by, cell_key)) | dict(zip(replicate, key))
            row = _endpoint(group, results, tuned_fields, candidates[i], others, cap)
            rows.append(fields | row)
    frame = pd.DataFrame(rows)  # every run diverged: no endpoint's columns, so add them
    frame = frame.reindex(columns=[*frame, *(c for c in columns if c not in frame)])
    return frame.sort_values(group_by, kind="mergesort", ignore_index=True)


def held_out_choices(results: Results, tuned_fields: tuple[str, ...]) -> dict[str, dict]:
    """Per pool: the `tuned_fields` values of the finished run (at its final evaluation) with the
    lowest mean loss (nats/token) over every validation document of the *other* pools that
    finished it, as `tuned` holds a replicate's choice out (on the pool's own documents when no
    other pool shares a candidate); {pool: {field: value}}. A pool's seeds share its choice (the
    first seed's candidates are searched)."""
    replicate = results.replicate_fields()
    groups = _groups(results.runs, replicate)
    candidates = [
        (dict(zip(replicate, key))["pool"], _candidates(group, results, tuned_fields))
        for key, group in groups
    ]
    first = next((c for _, c in candidates if c), None)
    if first is None:
        return {}
    tokens = _tokens(results, next(iter(first.values()))[0])
    everything = np.ones(len(tokens), bool)
    choices = {}
    for pool, mine in candidates:
        if mine and pool not in choices:
            others = [c for other, c in candidates if other != pool]
            choices[pool] = dict(zip(tuned_fields, _choose(mine, others, tokens, everything)))
    return choices


def replicate_key(endpoints: pd.DataFrame) -> list[str]:
    """The replicate fields (pool, seed) that endpoint rows carry; the pool is the replicate that
    intervals count, its seeds are averaged (contrast)."""
    return [f for f in ("pool", "seed") if f in endpoints]


def contrast(terms: list[tuple[float, pd.DataFrame]], level: float = LEVEL) -> Difference:
    """The weighted sum of endpoint losses, sum of w * loss over `terms` (weight, endpoints: rows
    of `tuned`, one per replicate, matched by replicate), nats/token, with its `level` interval
    over replicates and documents (repro.analysis.intervals), or for confirmed endpoints
    (repro.analysis.confirmation: each pool has its own documents) a t interval over the
    confirmation pools. Only replicates every term measured count; none gives NOT_MEASURED.
    Censored and at_cap: (some arm of positive weight, some of negative weight) is so on a counted
    replicate (censored: its loss might still fall, _censored; at_cap: its best budget is the
    study's cap)."""
    confirmed = {_confirmed(ends) for _, ends in terms}
    if len(confirmed) > 1:
        raise ReproError("a contrast mixes confirmed endpoints with selection endpoints")
    key = replicate_key(terms[0][1])
    rows = [_by_replicate(ends, key) for _, ends in terms]
    common = sorted(set.intersection(*(set(r) for r in rows)))
    if not common:
        return NOT_MEASURED
    pools = [dict(zip(key, k)).get("pool", k) for k in common]
    weighted = [(w, [r[k] for k in common]) for (w, _), r in zip(terms, rows)]
    if confirmed == {True}:
        diff = _pool_difference(weighted, pools, level)
    else:
        diff = _document_difference(weighted, pools, level)
    weights = [w for w, _ in terms]
    censored = _sides([any(_censored(r[k]) for k in common) for r in rows], weights)
    at_cap = _sides([any(r[k]["at_cap"] for k in common) for r in rows], weights)
    return diff._replace(censored=censored, at_cap=at_cap)


def _confirmed(endpoints: pd.DataFrame) -> bool:
    """Whether `endpoints` are confirmed ones (repro.analysis.confirmation), one per pool."""
    held_out = endpoints.get("held_out", pd.Series(dtype=object))
    return bool(len(held_out)) and bool((held_out == CONFIRMED).all())


Weighted = list[tuple[float, list[dict]]]
"""Each term's weight and its endpoint rows, one per counted replicate in the same order."""


def _pool_difference(weighted: Weighted, pools: list, level: float) -> Difference:
    """sum of w * val_loss per pool (seeds averaged), with its t interval over the pools."""
    values = sum(w * np.array([row["val_loss"] for row in arm]) for w, arm in weighted)
    return t_interval(_mean_per_pool(values[:, None], pools)[:, 0].tolist(), level)


def _document_difference(weighted: Weighted, pools: list, level: float) -> Difference:
    """sum of w * per-document losses per pool (seeds averaged), with replicate_difference's
    interval over pools and documents (Nadeau-Bengio's correction where choices were held out)."""
    gaps = sum(w * np.stack([row["doc_losses"] for row in arm]) for w, arm in weighted)
    held_out = any(row.get("held_out") == "replicates, documents" for _, a in weighted for row in a)
    tokens = weighted[0][1][0]["doc_tokens"]
    return replicate_difference(_mean_per_pool(gaps, pools), tokens, level, held_out)


def _censored(endpoint: dict) -> bool:
    """Whether an endpoint's loss might still fall: its best budget is the largest tried but not
    the study's cap, or its lr or weight decay is not bracketed."""
    budget_open = endpoint["at_largest_budget"] and not endpoint["at_cap"]
    return bool(budget_open or not endpoint["bracketed"])


def _sides(flags: list[bool], weights: list[float]) -> tuple[bool, bool]:
    """(some term of positive weight is flagged, some of negative weight is)."""
    return tuple(any(f for f, w in zip(flags, weights) if sign * w > 0) for sign in (1, -1))


def _mean_per_pool(gaps: np.ndarray, pools: list) -> np.ndarray:
    """Rows of `gaps` averaged within each pool: seeds on one pool are not independent
    replicates (they share its documents' draw), so the pool is the replicate."""
    order = list(dict.fromkeys(pools))
    return np.stack([gaps[[p == pool for p in pools]].mean(0) for pool in order])


def _by_replicate(endpoints: pd.DataFrame, key: list[str]) -> dict[tuple, dict]:
    """Measured endpoint rows by their replicate key."""
    measured = endpoints.dropna(subset=["val_loss"]).to_dict("records")
    return {tuple(row[k] for k in key): row for row in measured}


def compare(a: pd.DataFrame, b: pd.DataFrame, level: float = LEVEL) -> Difference:
    """Endpoints `a` minus endpoints `b` (contrast): per replicate and averaged over them."""
    return contrast([(1.0, a), (-1.0, b)], level)


SHORT_NAMES = {
    "batch_size": "batch",
    "adam_beta2": "beta2",
    "warmup_steps": "warmup",
    "n_runs": "runs",
    "n_diverged": "diverged",
    "weight_decay": "wd",
    "early_stop_epoch": "stop_epoch",
    "early_stop_val_loss": "stop_val",
}
"""Column headings of `describe_tuned` for the long field names."""


def describe_tuned(
    table: pd.DataFrame, group_by: list[str], width: int = 120, examples: int = 3
) -> tuple[str, list[str]]:
    """A `tuned` table as text of at most `width` columns (pandas wraps a wider one into blocks;
    short headings, pool folders by name), and warning lines: how many groups have a choice on
    the grid's edge, then the first `examples` of them (the table's 'edge' column has them all)."""
    hidden = ("run_id", "edge", "chosen_on_halves", "held_out", "doc_losses", "doc_tokens")
    shown = table[[c for c in table.columns if c not in hidden]].copy()
    if "pool" in shown:
        shown["pool"] = shown["pool"].map(pool_label)
    shown = shown.rename(columns=SHORT_NAMES)
    text = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}", line_width=width)
    edges = shown[table["edge"] != ""]
    if edges.empty:
        return text, []
    warnings = [
        f"warning: {len(edges)} of {len(table)} groups have a choice on their grid's edge (widen "
        "it there), e.g.:"
    ]
    for index, row in edges.head(examples).iterrows():
        label = ", ".join(f"{SHORT_NAMES.get(k, k)}={row[SHORT_NAMES.get(k, k)]}" for k in group_by)
        line = f"  {label or 'all runs'}: {table.loc[index, 'edge']}"
        warnings.append(line if len(line) <= width else line[: width - 3] + "...")
    return text, warnings
