"""Sweep results as tidy pandas DataFrames, and tuned endpoints.

- `load_results(store)` -> (runs, evals): one row per run (its config, status and best point) and
  one row per evaluation point (step, epoch, tokens, lr_t (the scheduled lr), train_loss, val_loss,
  wall_s).
- `open_results(store)` -> Results: the same frames with each evaluation's per-document losses,
  the one input of every analysis function.
- `default_group_by(runs)`: the fields that vary across runs, other than the tuned ones (lr, weight
  decay, epoch budget) and bookkeeping; repro.analysis.selection tunes within such groups.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from repro.data.pool import built_meta
from repro.errors import ReproError
from repro.runtime.config import RunConfig, make_run_config, run_id
from repro.runtime.run_dir import DEFAULT_RECORD, FINISHED, RunDir, half_losses

if TYPE_CHECKING:
    from repro.analysis.confirmation import Confirmation

TUNED = ("lr", "weight_decay", "epochs")
BOOKKEEPING = (
    "save_steps",
    "init_from",
    "log_every",
    "threads",
    "device",
    "compile",
    "eval_every",
    "micro_batch",
)
EVAL_COLUMNS = ["run_id", "step", "epoch", "tokens", "lr_t", "train_loss", "val_loss", "wall_s"]
CONFIG_FIELDS = [f.name for f in fields(RunConfig)]


def load_results(
    store: str | Path, run_ids: list[str] | None = None, pools: dict[str, str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and evaluation points of every run directory under `store` (or only of `run_ids`).
    `pools` (run id -> pool path as the grid names it now) replaces the path a run trained at, so
    a moved checkout or a store trained elsewhere still matches its grid's pools."""
    store = Path(store)
    if not store.is_dir():
        raise ReproError(f"{store} is not a directory of runs")
    run_rows, eval_rows = [], []
    dirs = [store / rid for rid in run_ids] if run_ids is not None else sorted(store.iterdir())
    for run in map(RunDir, dirs):
        rid = run.name
        status = run.status() or {"status": "pending"}
        if not run.has_config():
            if status["status"] in ("done", "diverged", "running"):  # trained without a config
                raise ReproError(f"run {rid} has no config.json; {run.retrain}")
            if run_ids is not None:  # asked for, but never started or failed before its config
                run_rows.append(DEFAULT_RECORD | {"run_id": rid, "status": status["status"]})
            continue
        config = run.config()
        _check_config(rid, config | ({"pool": pools[rid]} if pools and rid in pools else {}), run)
        run_rows.append(
            {
                "run_id": rid,
                **config,
                **({"pool": pools[rid]} if pools and rid in pools else {}),
                "status": status.get("status"),
                "best_val_loss": status.get("best_val_loss"),
                "best_epoch": status.get("best_epoch"),
                "best_step": status.get("best_step"),
                "steps_per_epoch": status.get("steps_per_epoch"),
                "final_step": status.get("step"),
                "wall_s": status.get("wall_s"),
                **_downstream(run),
            }
        )
        for record in run.metrics():
            if "val_loss" in record:  # lr_t: the scheduled lr at that step; lr: the run's peak
                record["lr_t"] = record.pop("lr")
                eval_rows.append({"run_id": rid, **record})
    runs = pd.DataFrame(run_rows)
    evals = pd.DataFrame(eval_rows) if eval_rows else pd.DataFrame(columns=EVAL_COLUMNS)
    return runs, evals


def _check_config(rid: str, config: dict, run: RunDir) -> None:
    """A run's config.json (`config`, as read from `run`) holds fields the trainer accepts, and,
    for a sweep's run whose pool is built here, hashes to the run's id (a config edited after
    training does not, nor one of a store trained under another config.NUMERICS)."""
    fix = run.retrain
    try:
        resolved = make_run_config(config)
    except ReproError as exc:
        raise ReproError(f"run {rid}: config.json: {exc}; {fix}") from None
    stored = re.fullmatch(r"[0-9a-f]{12}", rid)  # a sweep's run (repro train --out: any name)
    if stored and resolved.pool and built_meta(resolved.pool) and run_id(resolved) != rid:
        raise ReproError(
            f"run {rid}: config.json does not hash to its run id (edited after training, or "
            f"trained by a repro of other numerics, config.NUMERICS); {fix}"
        )


class DocumentLosses(Protocol):
    """Each evaluation's per-document losses: called with (run id, step), (summed loss per
    validation document, nats; scored tokens per document); `halves(run id, step)`: the mean loss
    (nats/token) on each half of the documents (run_dir.half_losses)."""

    def __call__(self, run_id: str, step: int) -> tuple[np.ndarray, np.ndarray]: ...

    def halves(self, run_id: str, step: int) -> list[float]: ...


REPLICATE_FIELDS = ("pool", "seed")
"""Run fields whose values are independent replicates of one experiment (pools, seeds)."""


@dataclass(frozen=True)
class Results:
    """What the analyses read: one row per run (`runs`: its config, status and best point), one
    per evaluation (`evals`: run_id, step, epoch, tokens, lr_t, train_loss, val_loss, wall_s), and
    each evaluation's per-document losses (`documents`); `store`: the folder of the runs, where
    they have one (errors name a run's folder); `confirmation`: where each arm chosen on these
    runs is retrained on fresh pools (repro.analysis.confirmation; None: verdicts over these
    runs' replicates)."""

    runs: pd.DataFrame
    evals: pd.DataFrame
    documents: DocumentLosses
    store: Path | None = None
    confirmation: Confirmation | None = None

    def subset(self, mask: pd.Series) -> Results:
        """The runs where `mask` holds, with their evaluations (and the same confirmation)."""
        runs = self.runs[mask]
        evals = self.evals[self.evals["run_id"].isin(runs["run_id"])]
        return replace(self, runs=runs, evals=evals)

    @functools.cached_property
    def final_steps(self) -> dict[str, int]:
        """Each run's last evaluated step (found once for all runs, not by a scan per run)."""
        return {rid: int(step) for rid, step in self.evals.groupby("run_id")["step"].max().items()}

    @functools.cached_property
    def final_train_losses(self) -> dict[str, float]:
        """Each run's training loss (nats/token) at its last evaluation that has one."""
        by_step = self.evals.sort_values("step", kind="mergesort")
        return by_step.groupby("run_id")["train_loss"].last().to_dict()

    def curve(self, run_id: str) -> pd.DataFrame:
        """The evaluations of run `run_id`."""
        return self.evals[self.evals["run_id"] == run_id]

    def where(self, run_id: str) -> str:
        """How errors name a run: its folder where the runs have one, else its id."""
        return str(self.store / run_id) if self.store else run_id

    def replicate_fields(self) -> list[str]:
        """The replicate fields (REPLICATE_FIELDS) these runs have."""
        return [f for f in REPLICATE_FIELDS if f in self.runs]


class StoreDocuments:
    """The DocumentLosses of the runs under `store` (RunDir.document_losses, RunDir.half_losses),
    each file read once; a missing or damaged file is a one-line error naming it. `read`: the
    (run id, step) whose per-document losses were read, what a results bundle of the analyses
    must hold (repro.store.bundle)."""

    def __init__(self, store: str | Path) -> None:
        self.store = Path(store)
        self.read: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._halves: dict[tuple[str, int], list[float]] = {}

    def __call__(self, run_id: str, step: int) -> tuple[np.ndarray, np.ndarray]:
        key = (run_id, int(step))
        if key not in self.read:
            self.read[key] = RunDir(self.store / run_id).document_losses(step)
        return self.read[key]

    def halves(self, run_id: str, step: int) -> list[float]:
        key = (run_id, int(step))
        if key not in self._halves:
            self._halves[key] = RunDir(self.store / run_id).half_losses(step)
        return self._halves[key]


VAL_LOSS_TOLERANCE = 1e-5  # nats/token: per-document losses against the logged val_loss


def check_finished(results: Results) -> None:
    """Refuse results the analyses cannot trust, before any endpoint is computed: every run must
    have finished (done or diverged: a run still training, held by another sweep, failed or never
    started is an error naming it, never a silently smaller table), and a finished one must be
    consistent: its last evaluation at the step its status.json records, its per-document losses
    there loading and averaging to that evaluation's val_loss."""
    open_ = results.runs[~results.runs["status"].isin(FINISHED)]
    if len(open_):
        rid, status = open_["run_id"].iloc[0], open_["status"].iloc[0]
        raise ReproError(
            f"run {results.where(rid)} is {status} ({len(open_)} of {len(results.runs)} runs not "
            "finished): wait for the sweep that holds it, or rerun this one (repro reproduce "
            "resumes it)"
        )
    check_consistent(results)


def check_consistent(results: Results) -> None:
    """check_finished's rules for the runs that are done (`repro sweep table` reads unfinished
    runs too, as a provisional table): each consistent, or a one-line error naming it."""
    if results.runs.empty:
        return
    finals = results.evals.sort_values("step").groupby("run_id").last()
    for run in results.runs[results.runs["status"] == "done"].itertuples():
        _check_run(results, run.run_id, run.final_step, finals)


def _check_run(results: Results, rid: str, step, finals: pd.DataFrame) -> None:
    """One done run against check_finished's rules."""
    fix = "remove that folder and rerun the sweep to retrain it"
    where = results.where(rid)
    if rid not in finals.index or finals.loc[rid, "step"] != step:
        last = finals.loc[rid, "step"] if rid in finals.index else "none"
        raise ReproError(
            f"run {where}: its last evaluation in metrics.jsonl (step {last}) is not at the step "
            f"status.json records ({step}): metrics.jsonl is torn or incomplete; {fix}"
        )
    losses, tokens = results.documents(rid, int(step))
    val_loss = float(finals.loc[rid, "val_loss"])
    if abs(losses.sum() / max(tokens.sum(), 1) - val_loss) > VAL_LOSS_TOLERANCE:
        raise ReproError(
            f"run {where}: its per-document losses at step {step} average to "
            f"{losses.sum() / max(tokens.sum(), 1):.6f}, not the logged val_loss {val_loss:.6f}: "
            f"val_docs is damaged; {fix}"
        )


@dataclass(frozen=True, eq=False)
class MemoryDocuments:
    """The DocumentLosses of simulated or hand-made studies: `table` maps (run id, step) to
    (losses, tokens)."""

    table: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]

    def __call__(self, run_id: str, step: int) -> tuple[np.ndarray, np.ndarray]:
        return self.table[(run_id, int(step))]

    def halves(self, run_id: str, step: int) -> list[float]:
        return half_losses(*self(run_id, step))


def open_results(
    store: str | Path,
    run_ids: list[str] | None = None,
    pools: dict[str, str] | None = None,
    documents: StoreDocuments | None = None,
) -> Results:
    """load_results with the store's per-document losses (read by `documents`, a reader of that
    store shared with other Results, or a new one): what the analyses take."""
    runs, evals = load_results(store, run_ids, pools)
    return Results(runs, evals, documents or StoreDocuments(store), Path(store))


def _downstream(run: RunDir) -> dict:
    """RUN/downstream.json (repro eval) as columns "<task> acc", "<task> acc_stderr", "<task> n"."""
    results = run.downstream()
    return {
        f"{task} {key}": value for task, result in results.items() for key, value in result.items()
    }


def plain_value(value):
    """A pandas cell as a plain Python value (run fields go through make_run_config)."""
    return value.item() if hasattr(value, "item") else value


def varying_fields(runs: pd.DataFrame) -> list[str]:
    """Config fields that take more than one value across the runs."""
    return [c for c in CONFIG_FIELDS if c in runs and runs[c].astype(str).nunique() > 1]


def default_group_by(runs: pd.DataFrame, axes: tuple[str, ...] = TUNED) -> list[str]:
    """The fields that vary across `runs`, other than the tuned `axes` and bookkeeping."""
    return [c for c in varying_fields(runs) if c not in axes and c not in BOOKKEEPING]
