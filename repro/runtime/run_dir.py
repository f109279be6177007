"""One run's folder: the names of its files and the one rule for reading each of them.

    RUN/config.json        the run's fields (config.config_record), written before it trains
    RUN/status.json        {"status": "running" | "done" | "diverged" | "failed", ...}; while
                           running: step, total_steps, epoch, tokens [, val_loss] at the last
                           evaluation; once finished: its best point and wall time
    RUN/metrics.jsonl      one object per logged step and per evaluation: step, epoch, tokens, lr,
                           train_loss, wall_s [, val_loss]
    RUN/val_docs/          tokens.npy (scored tokens per validation document) and step-N.npy
                           (summed loss per document at the evaluation of step N, nats); in a run
                           from a results bundle (repro.store.bundle) that leaves some step-N.npy
                           out, halves.json: {N: mean loss on each half of the documents} for every
                           N
    RUN/val_docs/token-losses.npy
                           with run field token_losses: each scored validation token's loss
                           (nats, float32) at the final evaluation, in the order of the
                           validation sequences' targets (ensembles: repro.analysis.ensembles)
    RUN/checkpoint.pt      the resume point (checkpoint.prev.pt: the one before, while training)
    RUN/checkpoints/       step-N.pt, the steps a WSD trunk keeps for its branches
    RUN/downstream.json    repro eval's accuracies per task
    RUN/launch.json        the config that torchrun's processes read (repro.store.launch)
    RUN/.lock              held (flock) by the process that trains the run (repro.store.sweep's
                           claim, repro train's), which writes "PID HOST" into it

Every reader and writer goes through RunDir, so a missing or damaged file is the same one-line
error wherever it is read: it names the file and what to do (for a run's own results: remove the
run to retrain it, by the same sweep or repro train). Writes are atomic (repro.runtime.files);
checkpoints are torch's files, read and written here with torch imported only then (the analyses
read runs without torch).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repro.errors import ReproError
from repro.runtime.config import RunConfig, config_record, make_run_config
from repro.runtime.files import (
    atomic_write,
    check_out,
    fsync_tree,
    make_folder,
    process_alive,
    read_json,
    read_metrics,
    space_checked,
    write_json,
)

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


ANALYSED_FILE = re.compile(
    r"config\.json|status\.json|metrics\.jsonl|downstream\.json"
    r"|val_docs/(tokens|token-losses|step-\d+)\.npy|val_docs/halves\.json"
)
"""The files the analyses read, by name inside the run folder (what a results bundle holds)."""
LOSSES_FILE = re.compile(r"val_docs/(step-\d+\.npy|halves\.json)")
"""Those of them that hold per-document or half losses of one evaluation or more."""


def step_of(path: str | Path) -> int:
    """The optimizer step N of RUN/checkpoints/step-N.pt (a kept checkpoint, the init_from of a WSD
    branch) or RUN/val_docs/step-N.npy."""
    return int(Path(path).stem.removeprefix("step-"))


RUN_FILES = ("config.json", "metrics.jsonl", "status.json", LATEST, PREVIOUS, "downstream.json")
RUN_ENTRIES = frozenset({*RUN_FILES, "checkpoints", "val_docs"})
RUN_SCRATCH = frozenset(
    {".lock", *(f"{name}{tmp}" for name in (*RUN_FILES, "launch.json") for tmp in ("", ".tmp"))}
    - set(RUN_FILES)
)
"""What a run folder holds (config.json marks one), and what interrupted writes and a sweep's
claim leave (.lock; launch.json: repro.store.launch): a run's `--out` is a missing folder, one of
scratch only, or a run (check_out)."""

_HELD: set[Path] = set()
"""The lock files this process holds (RunDir.held), absolute: a hold nested in one of them (a
sweep's claim, then the trainer's own) holds it already."""


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
    def launch_file(self) -> Path:
        return self.path / "launch.json"

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
    def token_losses_file(self) -> Path:
        """RUN/val_docs/token-losses.npy: each validation token's loss at the final evaluation."""
        return self.docs_dir / "token-losses.npy"

    @property
    def retrain(self) -> str:
        """What to do about a run whose results are missing or damaged."""
        return f"remove {self.path} to retrain it (rerun its sweep, or repro train)"

    @contextmanager
    def held(self, wait: bool = False) -> Iterator[bool]:
        """Hold RUN/.lock (an exclusive flock: the claim of the one process that writes the run)
        within the block, "PID HOST" written into it; without `wait`, yields False and holds
        nothing while another process holds it. Within a hold of this process, holds already."""
        lock_path = self.lock_file.absolute()
        if lock_path in _HELD:
            yield True
            return
        make_folder(self.path)
        with space_checked(self.lock_file):
            lock = open(self.lock_file, "a+")  # not "w": the holder's record stays while it holds
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            with space_checked(self.lock_file):
                lock.truncate(0)
                lock.write(f"{os.getpid()} {socket.gethostname()}\n")
                lock.flush()
            _HELD.add(lock_path)
            try:
                yield True
            finally:
                _HELD.discard(lock_path)
                lock.truncate(0)  # released: the file names no holder

    def holder(self) -> tuple[int, str] | None:
        """(pid, host) that RUN/.lock records: of the process that holds it, or of one killed
        while holding it; None while none does (released, or never held)."""
        try:
            pid, host = self.lock_file.read_text().split()
            return int(pid), host
        except (OSError, UnicodeDecodeError, ValueError):
            return None

    def is_held(self) -> bool:
        """Whether RUN/.lock names a holder that may be alive: its pid runs on this host, or it
        ran on another (which this host cannot probe). Read only: taking the flock to probe it
        would make a sweep's claim fail meanwhile."""
        holder = self.holder()
        if holder is None:
            return False
        pid, host = holder
        return host != socket.gethostname() or process_alive(pid)

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

    def token_losses(self) -> np.ndarray:
        """Each scored validation token's loss at the final evaluation (nats, float32; run field
        token_losses); a missing or damaged file is a one-line error naming it."""
        path = self.token_losses_file
        if not path.is_file():
            raise ReproError(
                f"{path} is missing (a run without token_losses: true keeps none): {self.retrain}"
            )
        try:
            losses = np.load(path)
        except (ValueError, OSError, EOFError):
            raise ReproError(f"{path} is damaged (not a numeric array): {self.retrain}") from None
        if losses.ndim != 1 or not np.issubdtype(losses.dtype, np.floating):
            raise ReproError(f"{path} is damaged (not one float per token): {self.retrain}")
        return losses

    def document_steps(self) -> list[int]:
        """The evaluation steps whose per-document losses the run holds (val_docs/step-N.npy), or,
        in a run from a bundle, whose half losses it holds (val_docs/halves.json)."""
        held = {step_of(p) for p in self.docs_dir.glob("step-*.npy")}
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

    def check_results(self) -> None:
        """Read each file the analyses read (a finished run's, a bundle's) by its rule, so that a
        damaged one is a one-line error naming it now rather than when an analysis reads it:
        config, status (finished), metrics (no torn line), downstream, each evaluation's losses."""
        self.run_config()
        if not self.is_finished():
            raise ReproError(f"{self.status_file} records no finished run; {self.retrain}")
        read_metrics(self.metrics_file, self.retrain, torn_ok=False)
        self.downstream()
        for step in self.document_steps():
            self.half_losses(step)

    def analysed_files(self) -> list[Path]:
        """The files the analyses read (a results bundle's), those that exist, sorted."""
        files = [self.config_file, self.status_file, self.metrics_file, self.downstream_file]
        files += sorted(self.docs_dir.glob("*.npy")) + [self.halves_file]
        return [p for p in files if p.is_file()]

    def analysed_entries(self) -> dict[str, bytes]:
        """The bytes of analysed_files, by name inside the run (as ANALYSED_FILE names them)."""
        return {self.entry(p): p.read_bytes() for p in self.analysed_files()}

    def entry(self, path: Path) -> str:
        """The name of `path`, a file of this run, inside the run folder ("val_docs/step-8.npy")."""
        return path.relative_to(self.path).as_posix()

    # --- writing ---------------------------------------------------------------------------------

    def write_config(self, record: dict) -> None:
        write_json(self.config_file, record)

    def write_status(self, status: dict) -> None:
        write_json(self.status_file, status)

    def write_downstream(self, results: dict) -> None:
        write_json(self.downstream_file, results)

    def write_launch(self, record: dict) -> None:
        """launch.json: the config that torchrun's processes read (JSON is YAML)."""
        make_folder(self.path)
        write_json(self.launch_file, record)

    def forget_status(self) -> None:
        """Remove status.json (a failed run trains again: it resumes from its checkpoint)."""
        self.status_file.unlink(missing_ok=True)

    def start_metrics(self) -> None:
        """An empty metrics.jsonl: the run starts from step 0."""
        self.write_metrics([])

    def write_metrics(self, records: Iterable[dict]) -> None:
        """metrics.jsonl holding `records`, one JSON object a line."""
        with atomic_write(self.metrics_file) as f:
            f.write("".join(json.dumps(record) + "\n" for record in records))

    def append_metrics(self, record: dict) -> None:
        """One more line of metrics.jsonl (a full disk: files.NoSpace)."""
        with space_checked(self.metrics_file), self.metrics_file.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def keep_metrics(self, source: RunDir, step: int) -> None:
        """metrics.jsonl as the records of `source` (this run, or a WSD branch's trunk) up to
        `step`: a line torn by a kill is dropped, a damaged one is an error naming the file."""
        fix = f"remove {self.path} and rerun: the run then starts over"
        records = read_metrics(source.metrics_file, fix)
        self.write_metrics(r for r in records if r.get("step", math.inf) <= step)

    def write_document_losses(self, step: int, losses: np.ndarray, tokens: np.ndarray) -> None:
        """val_docs/step-N.npy (summed loss per validation document at `step`, nats) and, at the
        run's first evaluation, val_docs/tokens.npy (scored tokens per document)."""
        self.docs_dir.mkdir(exist_ok=True)
        if not self.document_tokens_file.exists():
            with atomic_write(self.document_tokens_file, "wb") as f:
                np.save(f, tokens)
        with atomic_write(self.document_losses_file(step), "wb") as f:
            np.save(f, losses)

    def write_token_losses(self, losses: np.ndarray) -> None:
        """val_docs/token-losses.npy: each scored validation token's loss (nats, float32)."""
        self.docs_dir.mkdir(exist_ok=True)
        with atomic_write(self.token_losses_file, "wb") as f:
            np.save(f, losses.astype(np.float32))

    def keep_document_losses(self, trunk: RunDir, step: int) -> None:
        """A WSD branch keeps its trunk's per-document losses up to the branch point, as it keeps
        their metric lines (a branch whose cool-down has no steps evaluates nothing itself)."""
        if not trunk.docs_dir.is_dir():
            return
        self.docs_dir.mkdir(exist_ok=True)
        for file in [trunk.document_tokens_file, *trunk.docs_dir.glob("step-*.npy")]:
            if file.name == "tokens.npy" or step_of(file) <= step:
                with atomic_write(self.docs_dir / file.name, "wb") as f:
                    f.write(file.read_bytes())

    def write_entries(self, entries: dict[str, bytes]) -> None:
        """Files of a run from a results bundle (names as ANALYSED_FILE, inside the run), flushed
        to disk: into a new folder, which the caller then renames into its store."""
        for name, data in entries.items():
            if not ANALYSED_FILE.fullmatch(name):
                raise ReproError(f"{name} is not a file of a run that the analyses read")
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_bytes(data)
        fsync_tree(self.path)

    def drop_previous_checkpoint(self) -> None:
        """Remove checkpoint.prev.pt (needed only to resume a run that is still training)."""
        self.previous_checkpoint.unlink(missing_ok=True)


def save_checkpoint(path: Path, state: dict, keep_previous: Path | None = None) -> None:
    """Write the checkpoint `state` (torch.save) to `path`, a run's checkpoint.pt or
    checkpoints/step-N.pt, atomically; the file it replaces moves to `keep_previous` if given."""
    import torch  # only the trainer writes checkpoints

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb", keep_previous) as f:
        torch.save(state, f)


def load_checkpoint(path: Path, map_location: Any) -> dict:
    """The checkpoint at `path` as tensors and plain values (weights_only: a checkpoint cannot run
    code); a one-line ReproError when it does not load."""
    import torch  # only the trainer reads checkpoints

    try:
        with warnings.catch_warnings():  # torch warns about pickles it then refuses
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # every failure means the same: this file is not usable
        raise ReproError(
            f"{path} is unusable: it does not load as tensors and plain values "
            f"({type(exc).__name__}: truncated, not a checkpoint, or holding objects that could "
            "run code)"
        ) from None
