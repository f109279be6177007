"""A sweep's progress bar (WorkBar): filled by the estimated cost of the finished runs
(repro.store.grid.estimated_cost) and by the trained part of the runs in flight; a notebook
widget, a bar redrawn in place on a terminal, or, where redraws do not show (a log file, a pipe
that a notebook saves), a line now and then (LineStream).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TextIO

from tqdm.auto import tqdm
from tqdm.std import tqdm as tqdm_text

from repro.errors import ReproError
from repro.runtime.progress import LineStream
from repro.runtime.run_dir import RunDir
from repro.store.grid import PlannedRun, branch_start, estimated_cost

POLL_S = 2.0  # seconds between two reads of the runs in flight (WorkBar)
POLLED = 64  # the first unfinished runs of the submitted jobs that WorkBar reads: those in flight


class WorkBar:
    """A sweep's progress bar: filled by each finished run's estimated_cost and, between finishes,
    by the trained part of the runs in flight (their status.json, read every POLL_S seconds), so
    its ETA comes from the work done from the first evaluations on, with the runs done beside it.
    Runs added later (`add`: a growth round's) lengthen it; the ETA covers the work known so far.
    With `file` (a text stream) it prints plain text there instead of a notebook widget: a bar
    redrawn in place on a terminal, else a line now and then (LineStream)."""

    def __init__(self, progress: bool, file: TextIO | None = None):
        self.work: dict[str, float] = {}
        self.starts: dict[str, int] = {}  # a branch's first step (branch_start)
        self.finished: set[str] = set()
        self.queue: list[Path] = []  # the runs of the jobs submitted, in the order they start
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._poller: threading.Thread | None = None
        self.lines = LineStream(file) if file and not file.isatty() else None
        self.bar = (tqdm_text if file else tqdm)(
            total=0,
            desc="runs",
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]",
            postfix="0/0",
            disable=not progress,
            file=self.lines or file,
            mininterval=1.0 if file else 0.1,
        )

    def add(self, planned: list[PlannedRun]) -> None:
        """Count the runs of `planned` not counted yet (a run in several sweeps once)."""
        new = {p.run_id: estimated_cost(p.config) for p in planned if p.run_id not in self.work}
        if new and not sum(new.values()):  # pools not built: count runs
            new = dict.fromkeys(new, 1.0)
        with self._lock:
            self.work |= new
            self.starts |= {p.run_id: branch_start(p.config) for p in planned}
            self.bar.total = sum(self.work.values())
            self._show()

    def done(self, run_ids: list[str]) -> None:
        with self._lock:
            self.finished |= set(run_ids)
            self._fill(0.0)

    def submitted(self, runs: list[Path]) -> None:
        """The run folders of the jobs just submitted, in the order they start; polled from now
        on for the runs in flight."""
        with self._lock:
            self.queue = list(runs)
        if self._poller is None and not self.bar.disable:
            self._poller = threading.Thread(target=self._poll, daemon=True)
            self._poller.start()

    def _poll(self) -> None:
        while not self._stopped.wait(POLL_S):
            with self._lock:
                unfinished = [run for run in self.queue if run.name not in self.finished]
                flying = unfinished[:POLLED]
            shares = {run.name: self._trained(run) for run in flying}
            with self._lock:  # a run that finished meanwhile counts once, in full
                trained = sum(
                    self.work.get(name, 0.0) * share
                    for name, share in shares.items()
                    if name not in self.finished
                )
                self._fill(trained)

    def _trained(self, run: Path) -> float:
        """The share of a run in flight that its status.json says is trained (0 if unreadable)."""
        start = self.starts.get(run.name, 0)
        try:
            status = RunDir(run).status()
            step, total = int(status.get("step", 0)), int(status.get("total_steps", 0))
        except (ReproError, OSError, TypeError, ValueError):
            return 0.0
        if status.get("status") != "running" or total <= start:
            return 0.0
        return min(1.0, max(0.0, (step - start) / (total - start)))

    def _fill(self, in_flight: float) -> None:
        """The bar at the finished runs' work plus `in_flight` (never back)."""
        filled = sum(self.work[rid] for rid in self.finished) + in_flight
        self.bar.update(max(0.0, filled - self.bar.n))
        self._show()

    def _show(self) -> None:
        self.bar.set_postfix_str(f"{len(self.finished)}/{len(self.work)}", refresh=False)
        self.bar.refresh()

    def __enter__(self) -> WorkBar:
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        if self._poller is not None:
            self._poller.join()
        self.bar.close()
        if self.lines is not None:
            self.lines.close()
