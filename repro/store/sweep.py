"""Sweeps: a run store keyed by config hash, and executors (local processes, Slurm) that train
the runs of grids into it (a grid's format and its planned runs: repro.store.grid; the progress
bar: repro.store.progress).

Every point of a grid is a RunConfig; its identity is a hash of the resolved config and it lives in
DIR/<hash>/ (config.json, metrics.jsonl, status.json as written by the trainer).

Claims: a worker runs a config only while holding an exclusive `flock` on DIR/<hash>/.lock, and
re-reads the status after taking it. The lock dies with its process, so a claim whose process died
is taken over by the next executor, which resumes the run from its last checkpoint.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from tqdm.auto import tqdm

from repro.data.pool import built_meta
from repro.errors import ReproError
from repro.runtime.config import RunConfig, batch_sizes, config_record, make_run_config, stack_key
from repro.runtime.files import WriteRefused, make_folder, read_json, space_checked, write_json
from repro.runtime.run_dir import FINISHED, RunDir
from repro.runtime.shapes import model_config, parameter_count
from repro.store.grid import PlannedRun, estimated_cost, load_grid, plan_grid
from repro.store.launch import job_resources, join_job_processes, train_with_torchrun
from repro.store.progress import WorkBar


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
