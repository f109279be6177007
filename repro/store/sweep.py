"""Sweeps: grids of runs, a run store keyed by config hash, and executors (local processes, Slurm).

A grid (YAML or dict):

    fixed:   {pool: data/pools/stdlib-1m, model: cpu-s, epochs: 8}
    axes:    {batch_size: [4, 16, 64], lr: [1e-3, 3e-3, 1e-2], weight_decay: [0.0, 0.1]}
    when:    # optional conditional axes: the first rule whose `if` matches replaces those axes
      - {if: {batch_size: 64}, axes: {lr: [3e-3, 1e-2, 3e-2]}}
    wsd_branches: false   # see below

Every point is a RunConfig; its identity is a hash of the resolved config and it lives in
DIR/<hash>/ (config.json, metrics.jsonl, status.json as written by the trainer).

WSD branches (`wsd_branches: true`, with `schedule: wsd` and an `epochs` axis): runs that differ
only in `epochs` share one stable phase. The longest one is the trunk and keeps checkpoints at the
decay starts of the others; each shorter run continues from its checkpoint and trains only its
decay, giving exactly the run it replaces (tested) at a fraction of the cost.

Claims: a worker runs a config only while holding an exclusive `flock` on DIR/<hash>/.lock, and
re-reads the status after taking it. The lock dies with its process, so a claim whose process died
is taken over by the next executor, which resumes the run from its last checkpoint.
"""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TextIO

import yaml
from tqdm.auto import tqdm
from tqdm.std import tqdm as tqdm_text

from repro.data.pool import built_meta, packed_sequences
from repro.errors import ReproError
from repro.runtime.config import (
    RunConfig,
    batch_sizes,
    check_fields,
    config_record,
    make_run_config,
    run_id,
    stack_key,
)
from repro.runtime.files import WriteRefused, make_folder, read_json, space_checked, write_json
from repro.runtime.loaders import epoch_steps
from repro.runtime.run_dir import FINISHED, RunDir, step_of
from repro.runtime.schedules import decay_start_step
from repro.runtime.shapes import model_config, parameter_count
from repro.store.launch import job_resources, join_job_processes, train_with_torchrun


@dataclass(frozen=True)
class SweepResult:
    """What run_sweep did: counts of outcomes ("done", "failed", "skipped (done)", ...; a run that
    another sweep held was waited for, so its outcome is what followed) and the run ids of its
    grids in plan order (a run that several grids share, once)."""

    outcomes: dict[str, int]
    run_ids: list[str]
    failed: list[str]  # run ids that failed, now or in an earlier sweep (skipped as failed)
    pools: dict[str, str]  # run id -> its pool's path as the grid names it (maybe moved since)

    def raise_if_failed(self, store: str | Path) -> None:
        """A one-line ReproError naming the failed runs and where their errors are."""
        if self.failed:
            where = ", ".join(str(RunDir(Path(store) / rid).status_file) for rid in self.failed[:3])
            more = f" and {len(self.failed) - 3} more" if len(self.failed) > 3 else ""
            raise ReproError(
                f"{len(self.failed)} run(s) failed; the error is in {where}{more}; fix its cause, "
                "then rerun the command with --retry-failed (repro sweep run, repro reproduce) or "
                "delete those status.json files"
            )


@dataclass(frozen=True)
class PlannedRun:
    config: RunConfig
    run_id: str
    after: str | None = None  # run_id of the WSD trunk this branch continues from


def load_grid(grid: str | Path | dict) -> dict:
    if isinstance(grid, dict):
        return grid
    try:
        spec = yaml.safe_load(Path(grid).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ReproError(f"cannot read grid {grid}: {str(exc).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise ReproError(f"grid {grid} must be a mapping with keys fixed, axes, when, wsd_branches")
    return spec


def _check_grid(grid: dict) -> None:
    unknown = set(grid) - {"fixed", "axes", "when", "wsd_branches"}
    if unknown:
        raise ReproError(
            f"unknown grid key {sorted(unknown)[0]!r}; a grid has fixed, axes, when, wsd_branches"
        )
    if not isinstance(grid.get("fixed", {}), dict) or not isinstance(grid.get("axes", {}), dict):
        raise ReproError("grid 'fixed' and 'axes' must be mappings of run fields")
    rules = grid.get("when", [])
    if not isinstance(rules, list) or not all(
        isinstance(r, dict)
        and isinstance(r.get("if", {}), dict)
        and isinstance(r.get("axes"), dict)
        for r in rules
    ):
        raise ReproError(
            "grid 'when' must be a list of {if: {field: value}, axes: {field: [values]}} rules"
        )


def expand(grid: dict) -> list[RunConfig]:
    """All points of a grid, in a deterministic order."""
    _check_grid(grid)
    fixed, axes, rules = grid.get("fixed", {}), grid.get("axes", {}), grid.get("when", [])
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ReproError(f"axis {name!r} must be a non-empty list of values")
    ruled = sorted({k for rule in rules for k in rule.get("axes", {})})
    free = [k for k in axes if k not in ruled]
    configs = []
    for combo in itertools.product(*(axes[k] for k in free)):
        point = dict(fixed) | dict(zip(free, combo))
        values = {k: axes.get(k, [point.get(k)]) for k in ruled}
        for rule in rules:
            if all(point.get(k) == v for k, v in rule.get("if", {}).items()):
                values |= rule["axes"]
                break
        for inner in itertools.product(*(values[k] for k in ruled)):
            configs.append(make_run_config(point | dict(zip(ruled, inner))))
    return configs


def plan_grid(grid: dict, store: Path) -> list[PlannedRun]:
    """The runs of a grid; with wsd_branches, shorter WSD runs become branches of the longest (a
    family: runs equal but for epochs), all with the warmup of the longest in steps (warmup_steps,
    or `warmup` of the longest run's steps)."""
    configs = expand(grid)
    for config in configs:  # the trainer's field checks, before anything is recorded
        check_fields(config)
    if not grid.get("wsd_branches"):
        return [PlannedRun(c, run_id(c)) for c in configs]
    families: dict[str, list[RunConfig]] = {}
    for c in configs:
        if c.schedule != "wsd":
            raise ReproError("wsd_branches needs schedule: wsd in every run")
        if c.batch_schedule:
            raise ReproError(
                "wsd_branches does not support batch_schedule "
                "(a branch's steps would not match its trunk's)"
            )
        families.setdefault(run_id(replace(c, epochs=0)), []).append(c)
    planned: list[PlannedRun] = []
    for family in families.values():
        family.sort(key=lambda c: c.epochs)
        sequences = _sequences_per_epoch(family[-1])
        if not family[-1].warmup_steps:  # the family's warmup: `warmup` of its longest run
            warmup = math.ceil(family[-1].warmup * _total_steps(family[-1], sequences))
            family = [replace(c, warmup_steps=warmup) for c in family]
        longest = family[-1]
        starts = {c.epochs: _decay_start(c, _total_steps(c, sequences)) for c in family[:-1]}
        trunk = replace(longest, save_steps=tuple(sorted(set(starts.values()))))
        trunk_id = run_id(trunk)
        planned.append(PlannedRun(trunk, trunk_id))
        for c in family[:-1]:
            branch = replace(
                c, init_from=str(RunDir(store / trunk_id).checkpoint(starts[c.epochs]))
            )
            planned.append(PlannedRun(branch, run_id(branch), after=trunk_id))
    return planned


def _sequences_per_epoch(config: RunConfig) -> int:
    from repro.data.pool import load_pool

    pool = load_pool(config.pool)
    return packed_sequences(pool.train.n_tokens, pool.train.n_docs, config.seq_len)


def _total_steps(config: RunConfig, sequences_per_epoch: int) -> int:
    steps = epoch_steps(sequences_per_epoch, config.epochs, config.batch_size).total_steps
    if not steps:
        raise ReproError(
            f"pool {config.pool} packs into {sequences_per_epoch} sequences of "
            f"{config.seq_len + 1} tokens, less than one batch of {config.batch_size} in "
            f"{config.epochs} epoch(s); use a larger pool or a smaller batch"
        )
    return steps


def _decay_start(config: RunConfig, total_steps: int) -> int:
    return decay_start_step(config.schedule_for(total_steps), total_steps)


# --- the store ----------------------------------------------------------------------------------


def execute_stack(
    store: str, job: list[tuple[str, dict]], retry_failed: bool = False, threads: int = 0
) -> dict[str, str]:
    """Claim and run a job: configs (run_id, config) that may train as one stack (train_stacked);
    a run that is finished or held by another process is left out. A run on several processes
    (gpus > 1, alone in its job) starts them with torchrun. Returns what happened to each, by run
    id."""
    from repro.runtime.train import train_stacked  # the runtime, loaded only where runs execute

    with ExitStack() as locks:
        claimed, outcomes = _claim(Path(store), job, retry_failed, locks)
        if claimed and claimed[0][1].gpus > 1:
            config, run_dir = claimed[0][1], Path(store) / claimed[0][0]
            outcomes |= _train_claimed(
                Path(store), claimed, lambda: [train_with_torchrun(config, run_dir, threads)]
            )
        elif claimed:
            if threads:
                import torch

                torch.set_num_threads(threads)
            configs, outs = [c for _, c in claimed], [Path(store) / rid for rid, _ in claimed]
            outcomes |= _train_claimed(
                Path(store), claimed, lambda: train_stacked(configs, outs, progress=False)
            )
    return {rid: outcomes[rid] for rid, _ in job}


def execute_distributed(
    store: str, job: list[tuple[str, dict]], retry_failed: bool = False
) -> dict[str, str]:
    """One task of a submitit job that trains one run on several processes (gpus > 1): every
    task joins the process group (repro.store.launch); rank 0 claims the run and tells the
    others."""
    import torch.distributed as dist

    from repro.runtime.train import train_stacked

    rank = join_job_processes(job[0][1].get("device", "auto"))
    try:
        with ExitStack() as locks:
            shared = list(_claim(Path(store), job, retry_failed, locks)) if rank == 0 else [0, 0]
            dist.broadcast_object_list(shared, src=0)
            claimed, outcomes = shared
            if claimed:
                configs, outs = [c for _, c in claimed], [Path(store) / rid for rid, _ in claimed]
                outcomes |= _train_claimed(
                    Path(store), claimed, lambda: train_stacked(configs, outs, progress=False)
                )
    finally:
        dist.destroy_process_group()
    return {rid: outcomes[rid] for rid, _ in job}


def _claim(
    store: Path, job: list[tuple[str, dict]], retry_failed: bool, locks: ExitStack
) -> tuple[list[tuple[str, RunConfig]], dict[str, str]]:
    """The runs of `job` this process may train, each under its exclusive lock (held until `locks`
    closes), and the outcomes of those it may not: busy, or skipped as finished or failed."""
    claimed, outcomes = [], {}
    for rid, config in job:
        run = RunDir(store / rid)
        if not locks.enter_context(run.held()):
            outcomes[rid] = "busy"
            continue
        status = run.state()
        if status in FINISHED or (status == "failed" and not retry_failed):
            outcomes[rid] = f"skipped ({status})"
            continue
        if status == "failed":
            run.forget_status()
        claimed.append((rid, make_run_config(config)))
    return claimed, outcomes


def _train_claimed(
    store: Path, claimed: list[tuple[str, RunConfig]], train: Callable[[], list[dict]]
) -> dict[str, str]:
    """Each claimed run's final status from `train`; if it raises, the unfinished runs are recorded
    as failed with the error (one failing run never stops the sweep)."""
    try:
        statuses = train()
        return {rid: status["status"] for (rid, _), status in zip(claimed, statuses)}
    except WriteRefused:  # no run failed: the sweep stops, and resumes once the disk is fixed
        raise
    except Exception as exc:
        outcomes = {}
        for rid, _ in claimed:
            run = RunDir(store / rid)
            if run.state() not in FINISHED:
                run.write_status(
                    {
                        "status": "failed",
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    }
                )
                outcomes[rid] = "failed"
            else:
                outcomes[rid] = run.state()
        return outcomes


def estimated_cost(config: RunConfig) -> float:
    """Relative cost of a run for ordering work and for the progress bar's ETA: sequences it trains
    on plus one per forward/backward pass (a micro-batch; at the cpu scale a pass's fixed overhead
    costs about one sequence); a WSD branch only its steps after its trunk's checkpoint. 0 for a
    pool not built yet."""
    train = (built_meta(config.pool) or {}).get("splits", {}).get("train")
    if not train:
        return 0.0
    run_steps = epoch_steps(
        packed_sequences(train["tokens"], train["docs"], config.seq_len),
        config.epochs,
        config.batch_size,
        config.batch_schedule,
    )
    passes = sum(
        phase.steps * math.ceil(phase.batch / (min(config.micro_batch, phase.batch) or phase.batch))
        for phase in run_steps.phases
    )
    cost = run_steps.sequences_done(run_steps.total_steps) + passes
    if not run_steps.total_steps:  # less than one batch: the trainer's checks say so
        return cost
    return cost * (1 - branch_start(config) / run_steps.total_steps)


def branch_start(config: RunConfig) -> int:
    """The step a WSD branch starts from (init_from is checkpoints/step-<N>.pt: steps 1..N are its
    trunk's); 0 for a run trained from scratch."""
    return step_of(config.init_from) if config.init_from else 0


def longest_first(jobs: list[list[PlannedRun]]) -> list[list[PlannedRun]]:
    """Jobs (stacks) by decreasing estimated cost, so the longest start first and the workers finish
    together."""
    return sorted(jobs, key=lambda job: -sum(estimated_cost(p.config) for p in job))


def stacks(
    planned: list[PlannedRun], size: int, max_batch: int = 0, workers: int = 1
) -> list[list[PlannedRun]]:
    """Runs grouped into stacks that may train together (stack_key: one model shape and batch; any
    pools of one vocabulary, seeds, loaders, epoch budgets, schedules and optimizer settings), of at
    most `size` runs and of what half this machine's memory holds per worker (member_bytes). The
    longest runs stack together, so that a stack stays full while it trains. Runs with a batch
    above `max_batch` sequences (if > 0), which fill the cores alone, stay single."""
    groups: dict[str, list[PlannedRun]] = {}
    for p in planned:
        largest = max(batch_sizes(p.config))
        stackable = size > 1 and not p.config.compile and p.config.gpus == 1
        stackable = stackable and (not max_batch or largest <= max_batch)
        groups.setdefault(stack_key(p.config) if stackable else p.run_id, []).append(p)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (2 * workers)
    jobs = []
    for group in groups.values():
        group = sorted(group, key=lambda p: -estimated_cost(p.config))
        fits = max(1, min(size, int(memory // member_bytes(group[0].config))))
        jobs += [group[i : i + fits] for i in range(0, len(group), fits)]
    return jobs


def member_bytes(config: RunConfig) -> int:
    """Memory of one run in a stack (bytes, float32): weights, gradients and AdamW's two moments
    (16 bytes a parameter), and the activations one micro-batch keeps for backward (about
    18 d_model floats a token a layer, and 3 vocab-wide ones a token for the logits)."""
    vocab = (built_meta(config.pool) or {}).get("vocab_size", config.vocab_size)
    model = model_config(config.model, vocab, config.tie_embeddings)
    micro = min(config.micro_batch, config.batch_size) or config.batch_size
    per_token = 18 * model.d_model * model.n_layers + 3 * vocab
    return 16 * parameter_count(model) + 4 * micro * config.seq_len * per_token


def _worker_initializer(sweep_pid: int, gpu_queue=None) -> None:
    """A local worker dies with the sweep process that started it (Linux: PR_SET_PDEATHSIG), so a
    killed sweep leaves no worker training on; its runs resume from their checkpoints. It ignores
    Ctrl-C (SIGINT reaches the terminal's whole process group): the sweep process stops it
    (_stop_workers). With GPUs, the worker takes its block of devices ("0,1")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.set_lock(threading.RLock())  # not its default semaphore, which a stopped worker leaks
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != sweep_pid:  # the sweep died before the line above
            os._exit(1)
    if gpu_queue is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_queue.get())


def run_sweep(
    grid: str | Path | dict | list[str | Path | dict],
    store: str | Path,
    workers: int = 1,
    executor: str = "local",
    retry_failed: bool = False,
    slurm: dict | None = None,
    progress: bool = True,
    stack: int = 1,
    max_stacked_batch: int = 0,
    bar: WorkBar | None = None,
) -> SweepResult:
    """Run every missing config of `grid` (or of a list of grids, as one sweep) into `store`;
    returns the outcome counts and the grids' run ids. A run that another sweep is training is
    waited for (its lock), then skipped as finished or, if that sweep died, trained here. Several
    grids may share one store: identical configs are then run once. With stack > 1, up to `stack`
    runs of one model shape and batch train at once in one process (repro.runtime.stacked,
    `stacks`); with max_stacked_batch > 0, only runs with batches up to that many sequences. The
    longest jobs start first (estimated_cost). `bar`: a WorkBar that this sweep's runs are added to
    (one bar over several sweeps, such as a grid's growth rounds); default: a bar of its own."""
    if workers < 1:
        raise ReproError(f"--workers must be at least 1, got {workers}")
    if stack < 1:
        raise ReproError(f"--stack must be at least 1, got {stack}")
    if executor == "local":
        workers = _local_workers(workers)
    store = Path(store)
    make_folder(store)
    specs = [load_grid(one) for one in (grid if isinstance(grid, list) else [grid])]
    plans = [plan_grid(spec, store) for spec in specs]  # every grid checked before any is recorded
    _check_pools([p for runs in plans for p in runs])
    for spec, runs in zip(specs, plans):
        _write_manifest(store, spec, runs)
    planned = list(
        {p.run_id: p for runs in plans for p in runs}.values()
    )  # a run in several grids once (same id, same config)
    by_run: dict[str, str] = {}
    run = _executor(executor, workers, slurm, store)
    trunks = [p for p in planned if p.after is None]
    branches = [p for p in planned if p.after is not None]
    with nullcontext(bar) if bar else WorkBar(progress) as bar:
        bar.add(planned)
        for phase in (trunks, branches):  # a branch starts from its trunk's checkpoint
            todo = [p for p in phase if RunDir(store / p.run_id).state() not in FINISHED]
            bar.done([p.run_id for p in phase if p not in todo])
            while todo:
                jobs = [
                    (str(store), [(p.run_id, config_record(p.config)) for p in part], retry_failed)
                    for part in longest_first(stacks(todo, stack, max_stacked_batch, workers))
                ]
                bar.submitted([store / rid for _, job, _ in jobs for rid, _ in job])
                for job_outcomes in run(jobs):
                    by_run |= job_outcomes
                    bar.done([rid for rid, o in job_outcomes.items() if o != "busy"])
                todo = [p for p in todo if by_run.get(p.run_id) == "busy"]
                _wait_for_holders(store, [p.run_id for p in todo], bar.bar)
    outcomes = dict(Counter(by_run.values()))
    failed = [rid for rid, o in by_run.items() if o in ("failed", "skipped (failed)")]
    pools = {p.run_id: p.config.pool for p in planned}
    return SweepResult(outcomes, [p.run_id for p in planned], failed, pools)


POLL_S = 2.0  # seconds between two reads of the runs in flight (WorkBar)
POLLED = 64  # the first unfinished runs of the submitted jobs that WorkBar reads: those in flight
LINE_EVERY_S = 30.0  # seconds between two lines of a bar written where redraws do not show


class LineStream:
    """A progress bar's stream where a carriage return does not redraw (a log file, a pipe that a
    notebook saves): the bar's latest state as one line at most every LINE_EVERY_S seconds, and
    its last state at `close`."""

    def __init__(self, target: TextIO):
        self.target, self._state, self._written, self._at = target, "", "", -math.inf

    def write(self, text: str) -> None:
        state = text.replace("\r", "\n").strip().rsplit("\n", 1)[-1]
        if state:
            self._state = state
        if time.monotonic() - self._at >= LINE_EVERY_S:
            self.close()

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        """Write the latest state, unless it is the last line written."""
        if self._state and self._state != self._written:
            self.target.write(self._state + "\n")
            self.target.flush()
            self._written, self._at = self._state, time.monotonic()


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


def _wait_for_holders(store: Path, run_ids: list[str], bar: tqdm) -> None:
    """Block until no other process holds the runs `run_ids` (another sweep training them, in
    this store); they are then finished, or claimable again if their holder died."""
    if run_ids:
        bar.write(f"waiting for {len(run_ids)} run(s) that another sweep is training")
    for rid in run_ids:
        with RunDir(store / rid).held(wait=True):
            pass


def _local_workers(workers: int) -> int:
    """`workers` at most this machine's CPU cores (a one-line warning when capped): a local worker
    is a process that needs a core of its own."""
    cores = os.cpu_count() or 1
    if workers > cores:
        print(
            f"repro: warning: --workers {workers} > {cores} CPU cores; using {cores}",
            file=sys.stderr,
        )
    return min(workers, cores)


def _check_pools(planned: list[PlannedRun]) -> None:
    """Every pool the runs train on is built (before anything is recorded or trained)."""
    pools = {p.config.pool for p in planned}
    if "" in pools:
        raise ReproError("a run of the grid names no pool; set pool: DIR under fixed or axes")
    missing = sorted(pool for pool in pools if built_meta(pool) is None)
    if missing:
        raise ReproError(
            f"pool {missing[0]} is not built"
            + (f" (nor {len(missing) - 1} other(s))" if len(missing) > 1 else "")
            + f"; build it first: repro data build --source SOURCE --out {missing[0]}"
        )


def _executor(kind: str, workers: int, slurm: dict | None, store: Path) -> Callable:
    """A function that runs a list of execute_stack argument tuples and yields their outcome
    lists."""
    if kind == "local":
        return lambda jobs: _run_local(jobs, workers)
    if kind in ("slurm", "submitit-local"):
        return lambda jobs: _run_submitit(jobs, kind, slurm or {}, store)
    raise ReproError(f"unknown executor {kind!r}; choose one of: local, slurm, submitit-local")


def _job_gpus(job: tuple) -> int:
    """Processes (GPUs) one job's run trains on: a run with gpus > 1 is alone in its job."""
    return max(int(record.get("gpus", 1)) for _, record in job[1])


def _run_local(jobs: list[tuple], workers: int):
    """Jobs on this machine, those of runs on most GPUs first: each group of jobs with one GPU
    count in turn (_run_local_group)."""
    for per_run in sorted(set(map(_job_gpus, jobs)), reverse=True):
        yield from _run_local_group(
            [job for job in jobs if _job_gpus(job) == per_run], workers, per_run
        )


def _run_local_group(jobs: list[tuple], workers: int, per_run: int):
    """Jobs whose runs train on `per_run` processes each: up to `workers` at once, each worker with
    its own block of `per_run` GPUs or, on a CPU, an equal share of the cores."""
    import torch

    gpus = torch.cuda.device_count()
    if gpus and per_run > gpus:
        raise ReproError(f"a run needs {per_run} GPUs (gpus={per_run}); this machine has {gpus}")
    n = min(workers, gpus // per_run) if gpus else workers
    threads = 0 if gpus else max(1, (os.cpu_count() or 1) // (n * per_run))
    if n == 1 or len(jobs) <= 1:
        for job in jobs:
            yield execute_stack(*job, threads=threads)
        return
    context = get_context("spawn")
    queue = context.Queue() if gpus else None
    for i in range(n if gpus else 0):
        queue.put(",".join(str(d) for d in range(i * per_run, (i + 1) * per_run)))
    init = {"initializer": _worker_initializer, "initargs": (os.getpid(), queue)}
    with ProcessPoolExecutor(n, mp_context=context, **init) as pool:
        futures = [pool.submit(execute_stack, *job, threads=threads) for job in jobs]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:  # Ctrl-C, SIGTERM (repro.cli), a broken worker: stop at once
            _stop_workers(pool)
            raise


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Drop the pool's queued jobs and terminate its workers (SIGTERM), instead of waiting for
    every submitted job; their runs resume from their checkpoints. (ProcessPoolExecutor stops
    running jobs only from Python 3.14 on: terminate_workers.)"""
    workers = list((pool._processes or {}).values())
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join()
    pool.shutdown(cancel_futures=True)


def _run_submitit(jobs: list[tuple], kind: str, slurm: dict, store: Path):
    """Jobs through submitit: one Slurm (or local) job each, with one task per GPU of its run
    (execute_distributed) or one task for a single-process job (execute_stack)."""
    import submitit

    folder = store / ".submitit"
    local = kind == "submitit-local"
    ex = submitit.LocalExecutor(folder=folder) if local else submitit.AutoExecutor(folder=folder)
    options = {k: v for k, v in slurm.items() if k != "node_gpus"}
    handles = []
    for gpus in sorted(set(map(_job_gpus, jobs))):
        group = [job for job in jobs if _job_gpus(job) == gpus]
        resources = job_resources(gpus, slurm.get("node_gpus", 8), local)
        ex.update_parameters(**({"timeout_min": 60} | options | resources))
        task = execute_distributed if gpus > 1 else execute_stack
        handles += ex.map_array(task, *zip(*group))
    for handle in handles:
        yield handle.results()[0]  # rank 0's outcomes (the others' are the same)


def _write_manifest(store: Path, spec: dict, planned: list[PlannedRun]) -> None:
    """Record the grid's runs in DIR/sweep.json, added to those of earlier grids run into the same
    store."""
    path = store / "sweep.json"
    with space_checked(store / ".manifest.lock"):
        lock = open(store / ".manifest.lock", "w")
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sweeps on one store must not drop each other's runs
        manifest = _read_manifest(store) if path.exists() else {"grids": [], "runs": []}
        known = {r["run_id"] for r in manifest["runs"]}
        if spec not in manifest["grids"]:
            manifest["grids"].append(spec)
        manifest["runs"] += [
            {"run_id": p.run_id, "after": p.after} for p in planned if p.run_id not in known
        ]
        write_json(path, json.loads(json.dumps(manifest, default=str)))  # Paths as strings


def _read_manifest(store: Path) -> dict:
    """DIR/sweep.json: the grids and runs recorded in a store; a one-line ReproError naming it
    when it is damaged."""
    path = store / "sweep.json"
    fix = f"remove it and run each grid again: repro sweep run GRID.yaml --out {store}"
    manifest = read_json(path, fix)
    runs = manifest.get("runs")
    if not isinstance(manifest.get("grids"), list) or not isinstance(runs, list):
        raise ReproError(f"{path} lacks its lists of grids and runs; {fix}")
    if not all(isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs):
        raise ReproError(f"{path} holds a run without a run_id; {fix}")
    return manifest


def reset_failed(store: str | Path) -> list[str]:
    """Let the failed runs of a store train again, as `--retry-failed` does: each failed run's
    status.json is removed under its run's lock (a run another process holds is left alone), so
    that the next sweep resumes or retrains it. Returns their run ids."""
    reset = []
    for rid in failed_runs(store):
        run = RunDir(Path(store) / rid)
        with run.held() as held:
            if held and run.state() == "failed":
                run.forget_status()
                reset.append(rid)
    return reset


def failed_runs(store: str | Path) -> list[str]:
    """Run ids in a store whose status.json says failed."""
    runs = [RunDir(p) for p in sorted(Path(store).iterdir()) if p.is_dir()]
    return [run.name for run in runs if run.state() == "failed"]


def sweep_status(store: str | Path) -> dict[str, int]:
    """Counts of run states in a store (from its manifest, so pending runs count too); a run whose
    status says running while no live process holds it (RunDir.is_held: its sweep was killed)
    counts as interrupted: the next sweep resumes it."""
    store = Path(store)
    manifest = store / "sweep.json"
    if not manifest.exists():
        raise ReproError(
            f"{store} is not a sweep directory (no sweep.json); "
            f"start one with: repro sweep run GRID.yaml --out {store}"
        )
    counts: dict[str, int] = {}
    for entry in _read_manifest(store)["runs"]:
        run = RunDir(store / entry["run_id"])
        state = run.state()
        if state == "running" and not run.is_held():
            state = "interrupted"
        counts[state] = counts.get(state, 0) + 1
    return counts
