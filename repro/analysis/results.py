"""Sweep results as tidy pandas DataFrames, and tuned endpoints.

- `load_results(store)` -> (runs, evals): one row per run (its config, status and best point) and
  one row per evaluation point (step, epoch, tokens, lr_t (the scheduled lr), train_loss, val_loss,
  wall_s).
- `default_group_by(runs)`: the fields that vary across runs, other than the tuned ones (lr, weight
  decay, epoch budget) and bookkeeping; repro.analysis.selection tunes within such groups.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pandas as pd

from repro.errors import ReproError
from repro.runtime.config import RunConfig, config_record

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
DEFAULTS = config_record(RunConfig())  # a field a run's config.json predates has its default


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
        config = DEFAULTS | json.loads((run_dir / "config.json").read_text())
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
                **_downstream(run_dir),
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


def _downstream(run_dir: Path) -> dict:
    """RUN/downstream.json (repro eval) as columns "<task> acc", "<task> acc_stderr", "<task> n"."""
    path = run_dir / "downstream.json"
    if not path.is_file():
        return {}
    results = json.loads(path.read_text())
    return {
        f"{task} {key}": value for task, result in results.items() for key, value in result.items()
    }


def varying_fields(runs: pd.DataFrame) -> list[str]:
    """Config fields that take more than one value across the runs."""
    return [c for c in CONFIG_FIELDS if c in runs and runs[c].astype(str).nunique() > 1]


def default_group_by(runs: pd.DataFrame, tuned: tuple[str, ...] = TUNED) -> list[str]:
    return [c for c in varying_fields(runs) if c not in tuned and c not in BOOKKEEPING]
