"""Sweep results as tidy pandas DataFrames, and tuned endpoints.

- `load_results(store)` -> (runs, evals): one row per run (its config, status and best point) and
  one row per evaluation point (step, epoch, tokens, lr_t (the scheduled lr), train_loss, val_loss,
  wall_s).
- `tuned_endpoints(runs, evals, group_by)`: per group (e.g. model x batch size) the best validation
  loss over the tuned fields (lr, weight decay, epoch budget) and over every evaluation point inside
  a run (the "stopping point"), with the chosen values and a warning whenever a chosen value sits on
  the edge of what the group tried (the grid must be widened there).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import fields
from pathlib import Path

import pandas as pd

from repro.errors import ReproError
from repro.runtime.config import RunConfig

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
    for run_dir in (p for p in dirs if (p / "config.json").is_file()):
        rid = run_dir.name
        config = json.loads((run_dir / "config.json").read_text())
        status_path = run_dir / "status.json"
        status = (
            json.loads(status_path.read_text()) if status_path.exists() else {"status": "pending"}
        )
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
                "wall_s": status.get("wall_s"),
            }
        )
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists():
            with metrics.open() as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:  # a line being written by a live run
                        continue
                    if "val_loss" in record:
                        record["lr_t"] = record.pop(
                            "lr"
                        )  # the scheduled lr at that step; `lr` is the run's peak lr
                        eval_rows.append({"run_id": rid, **record})
    runs = pd.DataFrame(run_rows)
    evals = pd.DataFrame(eval_rows) if eval_rows else pd.DataFrame(columns=EVAL_COLUMNS)
    return runs, evals


def varying_fields(runs: pd.DataFrame) -> list[str]:
    """Config fields that take more than one value across the runs."""
    return [c for c in CONFIG_FIELDS if c in runs and runs[c].astype(str).nunique() > 1]


def default_group_by(runs: pd.DataFrame, tuned: tuple[str, ...] = TUNED) -> list[str]:
    return [c for c in varying_fields(runs) if c not in tuned and c not in BOOKKEEPING]


def tuned_endpoints(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    group_by: list[str] | None = None,
    tuned: tuple[str, ...] = TUNED,
    warn: bool = True,
) -> pd.DataFrame:
    """One row per group: best val loss over tuned fields and stopping points, chosen values, edge
    flags."""
    if group_by is None:
        group_by = default_group_by(runs, tuned)
    missing = [g for g in group_by if g not in runs]
    if missing:
        raise ReproError(
            f"cannot group by {missing[0]!r}; "
            f"run fields are: {', '.join(c for c in CONFIG_FIELDS if c in runs)}"
        )
    points = evals.dropna(subset=["val_loss"]).merge(runs.drop(columns=["wall_s"]), on="run_id")
    rows = []
    for key, group in (
        points.groupby(group_by, sort=True, dropna=False) if group_by else [((), points)]
    ):
        key = key if isinstance(key, tuple) else (key,)
        best = group.loc[group["val_loss"].idxmin()]
        run_final = group[group["run_id"] == best["run_id"]]["step"].max()
        row = dict(zip(group_by, key)) | {
            "best_val_loss": best["val_loss"],
            "train_loss_at_best": best["train_loss"],
            "stop_epoch": best["epoch"],
            "stop_step": int(best["step"]),
            "stop_tokens": int(best["tokens"]),
            "run_id": best["run_id"],
            "n_runs": group["run_id"].nunique(),
            "n_diverged": int(
                (runs[runs["run_id"].isin(group["run_id"].unique())]["status"] == "diverged").sum()
            ),
        }
        edges = []
        for name in tuned:
            row[name] = best[name]
            tried = sorted(group[name].unique())
            if len(tried) > 1 and (
                best[name] == tried[-1]
                or (best[name] == tried[0] and not (name == "weight_decay" and tried[0] == 0))
            ):
                grid = ", ".join(f"{float(t):g}" for t in tried)
                edges.append(f"{name}={best[name]:g} is on the edge of [{grid}]")
        if best["step"] == run_final and best["epochs"] == group["epochs"].max():
            edges.append("the best stopping point is the end of the longest run")
        row["edge"] = "; ".join(edges)
        if edges and warn:
            label = ", ".join(f"{k}={v}" for k, v in zip(group_by, key)) or "all runs"
            warnings.warn(f"group {label}: {'; '.join(edges)}; widen the grid there", stacklevel=2)
        rows.append(row)
    return pd.DataFrame(rows)
