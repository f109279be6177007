"""Choose on a few pools, confirm on many: each arm's configuration retrained on fresh pools.

The selection pools (Preset.pools.seeds) choose each arm's configuration: the candidate (lr, weight
decay, epoch budget and whatever else the arm tunes, such as its batch size) with the lowest mean
final validation loss over those pools (`pooled_choice`). That configuration is then trained once
on every confirmation pool (Pools.confirmation_seeds): pools drawn with seeds no selection pool
used, each with its own validation documents, so that neither the choice's pools nor its documents
score it. Every arm of a claim runs on the same confirmation pools with the same seed (data order
and initialisation), so differences pair by pool; a difference's interval is then a t interval over
the confirmation pools alone (selection.contrast), whose spread holds the training draw, the
initialisation and the validation documents. The selection endpoints still say whether an arm was
censored (its choice on a grid edge, or at the largest budget below the study's cap) or at the cap.

An analysis runs twice (Study.confirmed): first with a Confirmation that only records the
configurations its arms choose (`wanted`), then, once those runs are trained, with their Results.
A choice at the study's epoch cap is also trained to PAST_CAP times the cap (48 epochs past a cap
of 32), and the analysis runs a third time with those runs in its place (`past_cap`): whether a
verdict stated within the cap still holds past it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from repro.analysis.results import CONFIG_FIELDS, REPLICATE_FIELDS, Results
from repro.errors import ReproError
from repro.runtime.config import make_run_config, run_id

HELD_OUT = "confirmation pools"
"""The `held_out` of a confirmed endpoint (selection.tuned's are about replicates and documents)."""

PAST_CAP = 1.5
"""How far past the epoch cap a choice at the cap is also trained (a multiple of the cap)."""


def past_cap_epochs(cap: int) -> int:
    """The budget (epochs) that a choice at the epoch cap `cap` is also trained to."""
    return math.ceil(PAST_CAP * cap)


NOT_RECIPE = ("pool", "init_from", "save_steps")
"""Run fields a confirmation run does not take from the chosen run: its pool, and a WSD branch's
start (the confirmation run trains its whole schedule: warmup_steps keep the branch's warmup)."""


@dataclass
class Confirmation:
    """The confirmation pools (paths, as grids name them) and the Results of the runs trained on
    them (None while an analysis only records what it wants: `wanted`, run fields without a pool,
    one entry per chosen configuration)."""

    pools: tuple[str, ...]
    results: Results | None = None
    wanted: list[dict] = field(default_factory=list)
    cap: int = 0  # the study's epoch cap (Grid.cap): a choice at it is also trained past it
    past_cap: bool = False  # endpoints of a choice at the cap from its runs of PAST_CAP x the cap

    def grids(self) -> list[dict]:
        """One sweep grid per wanted configuration: it on every confirmation pool."""
        return [{"fixed": fields, "axes": {"pool": list(self.pools)}} for fields in self.wanted]

    def endpoints(self, chosen: pd.Series, selection: pd.DataFrame) -> pd.DataFrame:
        """The confirmed endpoints of configuration `chosen` (pooled_choice) whose selection
        endpoints are `selection` (rows of selection.tuned): one row per confirmation pool, as
        selection.tuned has them; while recording (no results), `selection` itself."""
        fields = recipe(chosen)
        at_cap = fields["epochs"] == self.cap
        longer = fields | {"epochs": past_cap_epochs(self.cap)} if at_cap else None
        if self.results is None:
            for wanted in (fields, longer):
                if wanted is not None and wanted not in self.wanted:
                    self.wanted.append(wanted)
            return selection
        if self.past_cap and longer is not None:
            fields = longer
        flags = {
            "at_largest_budget": bool(selection["at_largest_budget"].fillna(False).any()),
            "at_cap": bool(selection["at_cap"].fillna(False).any()),
            "bracketed": bool(selection["bracketed"].fillna(True).all()),
        }
        rows = [self._endpoint(fields, pool) | flags for pool in self.pools]
        tuned = {k: fields.get(k, chosen[k]) for k in selection.columns if k in chosen}
        tuned = {k: v for k, v in tuned.items() if k not in rows[0]}
        return pd.DataFrame([tuned | row for row in rows])

    def _endpoint(self, fields: dict, pool: str) -> dict:
        """The final evaluation of `fields` trained on `pool`; a missing or unfinished run is a
        one-line error naming it."""
        rid = run_id(make_run_config(fields | {"pool": pool}))
        runs, evals = self.results.runs, self.results.evals
        row = runs[runs["run_id"] == rid]
        if row.empty or row["status"].iloc[0] != "done":
            where = self.results.where(rid)
            raise ReproError(
                f"confirmation run {where} is not finished; train it (train = True, or repro "
                "reproduce) or import the bundle that holds it"
            )
        final = evals[evals["run_id"] == rid].sort_values("step").iloc[-1]
        return {
            "pool": pool,
            "seed": row["seed"].iloc[0],
            "run_id": rid,
            "val_loss": float(final["val_loss"]),
            "train_loss": float(final["train_loss"]),
            "held_out": HELD_OUT,
            "edge": "",
        }


def recipe(run: pd.Series) -> dict:
    """The run fields of a chosen run (a row of Results.runs) that its confirmation runs share:
    all but NOT_RECIPE, as the trainer reads them back (so that equal choices compare equal)."""
    names = [n for n in CONFIG_FIELDS if n not in NOT_RECIPE and n in run]
    config = make_run_config({n: _plain(run[n]) for n in names})
    return {n: getattr(config, n) for n in names}


def _plain(value: object) -> object:
    """A pandas cell as a plain Python value."""
    return value.item() if isinstance(value, np.generic) else value


def pooled_choice(results: Results, tuned_fields: tuple[str, ...]) -> pd.Series | None:
    """The run (a row of results.runs, on the first replicate that has it) of the candidate with
    the lowest mean final validation loss (nats/token, all documents) over the replicates (pools,
    seeds): among the candidates every replicate finished, else among those most of them did.
    None where no run finished."""
    runs = results.runs[results.runs["status"] == "done"]
    if runs.empty:
        return None
    finals = results.evals.sort_values("step").groupby("run_id")["val_loss"].last()
    replicate = [f for f in REPLICATE_FIELDS if f in runs]
    scored = runs.assign(final=runs["run_id"].map(finals)).dropna(subset=["final"])
    by = list(tuned_fields)
    counts = scored.drop_duplicates([*by, *replicate]).groupby(by, dropna=False).size()
    means = scored.groupby(by, dropna=False)["final"].mean()
    table = pd.DataFrame({"mean": means, "count": counts})
    best = table[table["count"] == table["count"].max()]["mean"].idxmin()
    best = best if isinstance(best, tuple) else (best,)
    match = np.ones(len(scored), bool)
    for name, value in zip(tuned_fields, best):
        match &= (scored[name] == value).to_numpy()
    return scored[match].sort_values(replicate).iloc[0]


def with_past_cap(claims: pd.DataFrame, beyond: pd.DataFrame) -> pd.DataFrame:
    """`claims` (intervals.claim_table) with `past_cap`: the verdict of `beyond`, the same analysis
    with each arm chosen at the epoch cap trained past it (past_cap_epochs), where a row's
    difference has an arm at the cap (its `at_cap`); else empty."""
    return claims.assign(past_cap=beyond["agrees?"].where(claims["at_cap"], ""))
