"""One run's folder: the names of its files and the one rule for reading each of them.

    RUN/config.json        the run's fields (config.config_record), written before it trains
    RUN/status.json        {"status": "running" | "done" | "diverged" | "failed", ...}; while
                           running: step, total_steps, epoch, tokens [, val_loss] at the last
                           evaluation; once finished: its best point and wall time
    RUN/metrics.jsonl      one object per logged step and per evaluation: step, epoch, tokens, lr,
                           train_loss, wall_s [, val_loss]
    RUN/val_docs/          tokens.npy (scored tokens per validation document) and step-N.npy
                           (summed loss per document at the evaluation of step N, nats); in a run
                           from a results bundle (repro.bundle) that leaves some step-N.npy out,
                           halves.json: {N: mean loss on each half of the documents} for every N
    RUN/checkpoint.pt      the resume point (checkpoint.prev.pt: the one before, while training)
    RUN/checkpoints/       step-N.pt, the steps a WSD trunk keeps for its branches
    RUN/downstream.json    repro eval's accuracies per task
    RUN/.lock              held by the process that trains the run (repro.sweep)

Every reader goes through RunDir, so a missing or damaged file is the same one-line error wherever
it is read: it names the file and what to do (for a run's own results: remove the run to retrain
it, by the same sweep or repro train). Writes are atomic (repro.runtime.files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.errors import ReproError
from repro.runtime.config import RunConfig, config_record, make_run_config
from repro.runtime.files import check_out, read_json, read_metrics, write_json

FINISHED = ("done", "diverged")
"""The statuses of a run that will not train again (a diverged run is a result too)."""

DEFAULT_RECORD = config_record(RunConfig())
"""Every run field at its default: a field that a run's config.json predates has its default
(with config.NUMERICS and run ids over non-default fields, what keeps old runs valid)."""

LATEST, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"
"""RUN/checkpoint.pt: the resume point; RUN/checkpoint.prev.pt: the one before it, kept while the
run trains in case the latest is torn."""


def selection_halves(n_documents: int) -> list[np.ndarray]:
    """The two halves of the validation documents (boolean masks: even, odd index) on which the
    analyses choose and report apart (repro.analysis.selection)."""
    even = np.arange(n_documents) % 2 == 0
    return [even, ~even]


def half_losses(losses: np.ndarray, tokens: np.ndarray) -> list[float]:
    """Mean loss (nats/token) on each of the selection_halves, from per-document summed losses
    (nats) and scored tokens."""
    return [float(h @ losses / max(h @ tokens, 1)) for h in selection_halves(len(tokens))]


RUN_FILES = ("config.json", "metrics.jsonl", "status.json", LATEST, PREVIOUS, "downstream.json")
RUN_ENTRIES = frozenset({*RUN_FILES, "checkpoints", "val_docs"})
RUN_SCRATCH = frozenset({".lock", "launch.json", *(f"{name}.tmp" for name in RUN_FILES)})
"""What a run folder holds (config.json marks one), and what interrupted writes and a sweep's
claim leave (.lock; launch.json: repro.launch): a run's `--out` is a missing folder, one of
scratch only, or a run (check_out)."""


@dataclass(frozen=True)
class RunDir:
    """The folder of one run (`path`), its files named as the module docstring lists them."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        """The run's id where it lies in a store (its folder's name)."""
        return self.path.name

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def downstream_file(self) -> Path:
        return self.path / "downstream.json"

    @property
    def docs_dir(self) -> Path:
        return self.path / "val_docs"

    @property
    def halves_file(self) -> Path:
        """RUN/val_docs/halves.json: half_losses at every evaluation, in a run from a bundle."""
        return self.docs_dir / "halves.json"

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    @property
    def latest_checkpoint(self) -> Path:
        return self.path / LATEST

    @property
    def previous_checkpoint(self) -> Path:
        return self.path / PREVIOUS

    def checkpoint(self, step: int) -> Path:
        """RUN/checkpoints/step-N.pt of optimizer step `step`."""
        return self.path / "checkpoints" / f"step-{int(step)}.pt"

    def document_losses_file(self, step: int) -> Path:
        """RUN/val_docs/step-N.npy: summed loss per validation document at step `step` (nats)."""
        return self.docs_dir / f"step-{int(step)}.npy"

    @property
    def document_tokens_file(self) -> Path:
        """RUN/val_docs/tokens.npy: scored tokens per validation document."""
        return self.docs_dir / "tokens.npy"

    @property
    def retrain(self) -> str:
        """What to do about a run whose results are missing or damaged."""
        return f"remove {self.path} to retrain it (rerun its sweep, or repro train)"

    def check_out(self) -> None:
        """Refuse, before any work, a folder that writing a run into would damage
        (files.check_out): only a missing folder, one of scratch only, or a run."""
        check_out(self.path, "run", RUN_ENTRIES, "config.json", RUN_SCRATCH)

    # --- reading ---------------------------------------------------------------------------------

    def has_config(self) -> bool:
        return self.config_file.is_file()

    def config(self) -> dict:
        """Every run field: those in config.json, the rest (fields it predates) at their defaults
        (DEFAULT_RECORD); a one-line error for a damaged file."""
        return DEFAULT_RECORD | read_json(self.config_file, self.retrain)

    def run_config(self) -> RunConfig:
        """config.json as a RunConfig (fields added later take their defaults); a one-line
        ReproError naming the file when it is unusable."""
        try:
            return make_run_config(self.config())
        except ReproError as exc:
            if str(exc).startswith(str(self.config_file)):
                raise
            raise ReproError(f"{self.config_file}: {exc}; {self.retrain}") from None

    def status(self) -> dict:
        """status.json, {} while there is none; a damaged one (not a JSON object, or a status that
        is not a string) is a one-line error saying to remove it (the run then resumes from its
        checkpoint, or starts over)."""
        if not self.status_file.exists():
            return {}
        fix = "remove it: the run then resumes from its checkpoint or starts over"
        status = read_json(self.status_file, fix)
        if not isinstance(status.get("status", ""), str):
            raise ReproError(f"{self.status_file} holds a status that is not a word; {fix}")
        return status

    def state(self) -> str:
        """done | diverged | failed | running (started, maybe interrupted) | pending."""
        if not self.status_file.exists():
            return "pending"
        return self.status().get("status", "running")

    def is_finished(self) -> bool:
        """Whether status.json records a finished run (FINISHED)."""
        return self.status().get("status") in FINISHED

    def metrics(self) -> list[dict]:
        """The records of metrics.jsonl (repro.runtime.files.read_metrics), [] before the first."""
        return read_metrics(self.metrics_file, self.retrain)

    def document_losses(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(summed loss per validation document at `step`, nats; scored tokens per document); a
        missing, damaged or mismatched file is a one-line error naming it."""
        losses, tokens = self.document_losses_file(step), self.document_tokens_file
        if not losses.is_file():
            why = "deleted, or the run predates per-document losses"
            if self.halves_file.is_file():
                why = "its results bundle holds them only at the evaluations the analyses read"
            raise ReproError(f"{losses} is missing ({why}): {self.retrain}")

        def damaged(why: str) -> ReproError:
            return ReproError(f"{self.docs_dir} is damaged ({why}): {self.retrain}")

        try:
            pair = np.load(losses), np.load(tokens)
        except ValueError:  # numpy's advice (an unsafe pickle load) is not ours to pass on
            raise damaged("not a numeric array") from None
        except (OSError, EOFError) as error:
            raise damaged(str(error) or type(error).__name__) from None
        if not all(np.issubdtype(a.dtype, np.number) for a in pair):
            raise damaged("not a numeric array")
        if pair[0].shape != pair[1].shape or pair[0].ndim != 1:
            raise ReproError(f"{losses} does not match {tokens}: {self.retrain}")
        return pair

    def document_steps(self) -> list[int]:
        """The evaluation steps whose per-document losses the run holds (val_docs/step-N.npy), or,
        in a run from a bundle, whose half losses it holds (val_docs/halves.json)."""
        held = {int(p.stem.removeprefix("step-")) for p in self.docs_dir.glob("step-*.npy")}
        if self.halves_file.is_file():
            held |= {int(step) for step in read_json(self.halves_file, self.retrain)}
        return sorted(held)

    def half_losses(self, step: int) -> list[float]:
        """Mean loss (nats/token) on each half of the validation documents at `step`
        (half_losses): from val_docs/step-N.npy, else from val_docs/halves.json; a one-line error
        naming the file where neither has it."""
        if self.document_losses_file(step).is_file() or not self.halves_file.is_file():
            return half_losses(*self.document_losses(step))
        pair = read_json(self.halves_file, self.retrain).get(str(int(step)))
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is float for v in pair)):
            raise ReproError(
                f"{self.halves_file} holds no pair of losses at step {step}: {self.retrain}"
            )
        return pair

    def downstream(self) -> dict:
        """downstream.json (repro eval): {task: {"acc", "acc_stderr", "n"}}, {} before the first
        evaluation; a damaged one (not a JSON object of objects) is a one-line error naming it."""
        if not self.downstream_file.exists():
            return {}
        fix = f"remove it and evaluate the run again (repro eval {self.path})"
        results = read_json(self.downstream_file, fix)
        if not all(isinstance(result, dict) for result in results.values()):
            raise ReproError(
                f"{self.downstream_file} holds a task whose result is not an object; {fix}"
            )
        return results

    def analysed_files(self) -> list[Path]:
        """The files the analyses read (a results bundle's), those that exist, sorted."""
        files = [self.config_file, self.status_file, self.metrics_file, self.downstream_file]
        files += sorted(self.docs_dir.glob("*.npy")) + [self.halves_file]
        return [p for p in files if p.is_file()]

    # --- writing ---------------------------------------------------------------------------------

    def write_config(self, record: dict) -> None:
        write_json(self.config_file, record)

    def write_status(self, status: dict) -> None:
        write_json(self.status_file, status)

    def write_downstream(self, results: dict) -> None:
        write_json(self.downstream_file, results)

    def forget_status(self) -> None:
        """Remove status.json (a failed run trains again: it resumes from its checkpoint)."""
        self.status_file.unlink(missing_ok=True)
