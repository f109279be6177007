"""One training run: a model, a pool, a loader, AdamW and a schedule, single process or
torchrun/DDP.

Units: batch_size and micro_batch are sequences of seq_len tokens; epochs count passes over the
pool's training split; a step is one optimizer update; `tokens` in the metrics are training
tokens consumed (steps * batch_size * seq_len).

Run directory (docs/CONTRACT.md):
    RUN/config.json     the resolved RunConfig
    RUN/metrics.jsonl   one object per line: step, epoch, tokens, lr, train_loss,
                        wall_s [, val_loss]
    RUN/status.json     {"status": "running" | "done" | "diverged" | "failed", ...}; while
                        running: step, total_steps, epoch, tokens [, val_loss] at the last
                        evaluation
    RUN/checkpoint.pt   model, optimizer, RNG and progress at the last evaluation point
    RUN/checkpoint.prev.pt  the one before, kept until the run ends

`out` is a missing or empty folder or a run's: any other folder (a user's files, a pool, a
checkout) is refused before any work (RUN_ENTRIES).

Starting a run whose directory holds a checkpoint resumes it; on CPU the continued run is
bit-identical to an uninterrupted one (the loader is a pure function of (seed, epoch, step)).
Checkpoints load with weights_only (tensors and plain values: a checkpoint cannot run code); an
unusable checkpoint.pt (truncated, of another model) falls back to checkpoint.prev.pt.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from tqdm.auto import tqdm

from repro.data.pool import Pool, load_pool, packed_sequences
from repro.errors import ReproError
from repro.runtime.config import (
    RunConfig,
    batch_sizes,
    check_fields,
    config_record,
    make_run_config,
    micro_batches,
    run_identity,
    stack_key,
)
from repro.runtime.files import (
    FINISHED,
    NoSpace,
    atomic_write,
    check_out,
    no_space,
    read_json,
    read_metrics,
    read_status,
    write_json,
)
from repro.runtime.loaders import (
    EpochLoader,
    EpochSteps,
    epoch_steps,
    validation_documents,
    validation_sequences,
)
from repro.runtime.model import Transformer
from repro.runtime.noise_scale import MicroBatchNorms, NoiseScaleEMA
from repro.runtime.optim import GRAD_CLIP, build_optimizer
from repro.runtime.schedules import Schedule, lr_multiplier
from repro.runtime.shapes import model_config
from repro.runtime.stacked import StackedForward, stack_parameters

# sequences per validation forward pass, at least (no gradients, so larger than tiny micro-batches)
EVAL_BATCH = 16
# a run's resume point and the one before it (in RUN/); what every checkpoint holds
LATEST, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"
CHECKPOINT_KEYS = set(
    "model optimizer torch_rng python_rng step wall_s best loss_sum loss_steps".split()
)
# what a run folder holds (RUN/config.json marks one; downstream.json: repro eval), and what
# interrupted writes and a sweep's claim leave (.lock; launch.json: repro.launch): `--out` is a
# missing folder, one of scratch only, or a run
RUN_FILES = ("config.json", "metrics.jsonl", "status.json", LATEST, PREVIOUS, "downstream.json")
RUN_ENTRIES = frozenset({*RUN_FILES, "checkpoints", "val_docs"})
RUN_SCRATCH = frozenset({".lock", "launch.json", *(f"{name}.tmp" for name in RUN_FILES)})


def check_config(config: RunConfig, pool: Pool, world_size: int = 1) -> EpochLoader:
    """Raise a one-line ReproError for a bad config; return the training loader."""
    check_fields(config, world_size)
    if config.init_from and not Path(config.init_from).is_file():
        raise ReproError(
            f"init_from checkpoint {config.init_from} does not exist; run the trunk first"
        )
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ReproError(
            f"device={config.device} but no CUDA device is visible; use device=cpu or auto"
        )
    if config.vocab_size and config.vocab_size != pool.vocab_size:
        raise ReproError(
            f"pool vocab {pool.vocab_size} does not match "
            f"the model's vocab_size {config.vocab_size}"
        )
    loader = EpochLoader(
        pool.train, pool.eos_id, config.seq_len, config.batch_size, config.loader, config.seed
    )
    largest = max(batch_sizes(config))
    if loader.sequences_per_epoch < largest:
        raise ReproError(
            f"the pool's training split packs into {loader.sequences_per_epoch} sequences "
            f"of {config.seq_len + 1} tokens, less than one batch of {largest}; "
            "lower seq_len or batch_size, or use a larger pool"
        )
    if packed_sequences(pool.val.n_tokens, pool.val.n_docs, config.seq_len) < world_size:
        raise ReproError(
            f"the validation split packs into fewer than {world_size} sequence(s) "
            f"of {config.seq_len + 1} tokens (one per process); "
            "lower seq_len or use a larger validation split"
        )
    return loader


# --- the run ----------------------------------------------------------------------------------


def _evaluation_steps(steps: EpochSteps, eval_every: float) -> list[int]:
    """Steps (counted from 1) after which validation runs: evenly spaced in epochs, always at each
    epoch end (EpochSteps.steps_at)."""
    per_epoch = max(1, round(1 / eval_every))
    points = {
        steps.steps_at(Fraction(epoch * per_epoch + i, per_epoch))
        for epoch in range(len(steps.batch_by_epoch))
        for i in range(1, per_epoch + 1)
    }
    return sorted(points - {0})


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    sequences: np.ndarray,
    micro_batch: int,
    device: torch.device,
    autocast,
    rank: int = 0,
    world_size: int = 1,
    documents: np.ndarray | None = None,
) -> tuple[float, np.ndarray | None]:
    """Mean validation loss (nats/token) over all sequences, and with `documents` (the document of
    each target token, validation_documents) the summed loss per document (nats, float64); ranks
    split the sequences."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    mine = sequences[rank::world_size]
    my_docs = documents[rank::world_size] if documents is not None else None
    per_doc = torch.zeros(
        int(documents.max()) + 1 if documents is not None else 0, dtype=torch.float64, device=device
    )
    for start in range(0, len(mine), micro_batch):
        batch = torch.from_numpy(mine[start : start + micro_batch]).to(device)
        with autocast:
            logits = model(batch[:, :-1])
        flat, targets = logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)
        loss = F.cross_entropy(flat, targets, reduction="sum")
        total += torch.stack(
            [loss.double(), torch.tensor(targets.numel(), dtype=torch.float64, device=device)]
        )
        if my_docs is not None:  # a second reduction, so that the mean keeps its bits
            ids = torch.from_numpy(my_docs[start : start + micro_batch].reshape(-1)).to(device)
            per_doc.index_add_(0, ids, F.cross_entropy(flat, targets, reduction="none").double())
    if world_size > 1:
        dist.all_reduce(total)
        if my_docs is not None:
            dist.all_reduce(per_doc)
    model.train()
    return (total[0] / total[1]).item(), (per_doc.cpu().numpy() if my_docs is not None else None)


def train(config: RunConfig, out: str | Path, progress: bool = True) -> dict:
    """Train (or resume, or skip if done) the run in `out`; returns the final status dict."""
    return train_stacked([config], [out], progress)[0]


def train_stacked(
    configs: list[RunConfig], outs: list[str | Path], progress: bool = True
) -> list[dict]:
    """Train runs that differ only in STACKABLE fields at once, each into its own directory, each
    resumed or skipped as `train` would; returns each run's final status. One run (the usual case)
    may use DDP and torch.compile; a stack of several is a single eager process."""
    outs = [Path(o) for o in outs]
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    _check_stack(configs, outs, world_size)
    for out in outs:
        check_out(out, "run", RUN_ENTRIES, "config.json", RUN_SCRATCH)
    if configs[0].gpus > 1 and world_size == 1:
        raise ReproError(
            f"gpus={configs[0].gpus} trains in {configs[0].gpus} processes: run it through "
            f"repro sweep run, or torchrun --nproc-per-node {configs[0].gpus} -m repro.cli train"
        )
    pools = {c.pool: load_pool(c.pool) for c in configs}
    loaders = [check_config(c, pools[c.pool], world_size) for c in configs]
    finished = {i: _finished_status(c, o) for i, (c, o) in enumerate(zip(configs, outs))}
    todo = [i for i, status in finished.items() if status is None]
    if not todo:
        return [finished[i] for i in range(len(configs))]

    device = _device(configs[todo[0]], world_size)
    if rank == 0:
        for i in todo:
            outs[i].mkdir(parents=True, exist_ok=True)
            write_json(outs[i] / "config.json", config_record(configs[i]))
    try:
        members = [
            _open_member(configs[i], outs[i], pools[configs[i].pool], loaders[i], device, rank)
            for i in todo
        ]
        finals = _run(members, device, rank, world_size, progress)
    except Exception as exc:
        if rank == 0 and not isinstance(exc, NoSpace):  # out of space: resumes once freed
            for i in todo:
                if read_status(outs[i]).get("status") not in FINISHED:
                    write_json(
                        outs[i] / "status.json",
                        {"status": "failed", "error": f"{type(exc).__name__}: {exc}"},
                    )
        raise
    return [finished[i] or finals[outs[i]] for i in range(len(configs))]


def _check_stack(configs: list[RunConfig], outs: list[Path], world_size: int) -> None:
    """A one-line ReproError for runs that cannot train together."""
    if not configs or len(configs) != len(outs):
        raise ReproError("train_stacked needs one output directory per config")
    for config in configs:
        if not config.pool:
            raise ReproError("no pool given; pass --pool DIR or pool=DIR")
    if len(configs) == 1:
        return
    keys = [json.loads(stack_key(c)) for c in configs]
    differ = sorted({k for key in keys for k in key if key.get(k) != keys[0].get(k)})
    if differ:
        raise ReproError(
            f"stacked runs differ in {', '.join(differ)}, which must agree (a run with a "
            "batch_schedule trains alone); run them apart"
        )
    if world_size > 1 or configs[0].compile:
        raise ReproError(
            "stacked runs train in one process without torch.compile; run them one by one"
        )


def _device(config: RunConfig, world_size: int) -> torch.device:
    """The run's device (under torchrun, this rank's GPU; the process group started) and CPU
    threads."""
    device = torch.device(
        "cuda"
        if config.device == "auto" and torch.cuda.is_available()
        else ("cpu" if config.device == "auto" else config.device)
    )
    if world_size > 1:
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)
    return device


def _saved_config(run: Path) -> RunConfig:
    """RUN/config.json as a RunConfig (fields added later take their defaults); a one-line
    ReproError naming the file when it is unusable."""
    path, fix = run / "config.json", f"remove {run} to retrain it"
    record = read_json(path, fix)
    try:
        return make_run_config(record)
    except ReproError as exc:
        raise ReproError(f"{path}: {exc}; {fix}") from None


def _finished_status(config: RunConfig, out: Path) -> dict | None:
    """The final status of a done or diverged run in `out`; None if it still has to train.
    Raises if `out` holds a different run."""
    if not (out / "config.json").exists():
        return None
    existing = run_identity(_saved_config(out))
    wanted = run_identity(config)
    if existing != wanted:
        diff = sorted(k for k in wanted if existing.get(k) != wanted[k])
        raise ReproError(
            f"{out} holds a different run (differs in {', '.join(diff)}); choose another --out"
        )
    status = read_status(out)
    return status if status.get("status") in FINISHED else None


@dataclass
class Member:
    """One run of a (possibly one-member) stack: its model, optimizer and progress."""

    config: RunConfig
    out: Path
    model: Transformer
    checkpoint: dict | None  # loaded state to continue from; consumed once the optimizer exists
    loader: EpochLoader | None = None  # its training data (None: a benchmark feeds batches)
    timeline: _Timeline | None = None
    optimizer: torch.optim.Optimizer | None = None
    step: int = 0
    wall_offset: float = 0.0
    loss_sum: float = 0.0  # training loss summed since the last evaluation
    loss_steps: int = 0
    best: dict = field(
        default_factory=lambda: {"best_val_loss": None, "best_step": None, "best_epoch": None}
    )
    noise: NoiseScaleEMA = field(default_factory=NoiseScaleEMA)
    started: float = 0.0  # perf_counter() at the run's start, less the wall time before a resume
    latest_good: bool = False  # RUN/checkpoint.pt is good: the next save keeps it as the previous

    def wall_s(self) -> float:
        """Seconds this run has trained, resumed pieces included."""
        return time.perf_counter() - self.started

    def log(self, record: dict) -> None:
        path = self.out / "metrics.jsonl"
        try:
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as exc:
            raise (no_space(path, exc) or exc) from exc


def _open_member(
    config: RunConfig,
    out: Path,
    pool: Pool,
    loader: EpochLoader,
    device: torch.device,
    rank: int,
    world_size: int = 1,
) -> Member:
    """Build the run's model (seeded) and load its checkpoint, or the trunk's for a WSD branch."""
    torch.manual_seed(config.seed)
    model = Transformer(model_config(config.model, pool.vocab_size, config.tie_embeddings)).to(
        device
    )
    timeline = _timeline(config, pool, loader, world_size)
    member = Member(config, out, model, None, loader, timeline)
    found = _own_checkpoint(out, model, device, rank)
    if found is None and config.init_from:
        found = _trunk_checkpoint(Path(config.init_from), model, device)
    if found is None:
        if rank == 0:
            (out / "metrics.jsonl").write_text("")
        return member
    path, ckpt = found
    model.load_state_dict(ckpt["model"])
    torch.set_rng_state(ckpt["torch_rng"].cpu())
    random.setstate(ckpt["python_rng"])
    member.checkpoint, member.step, member.wall_offset, member.best = (
        ckpt,
        ckpt["step"],
        ckpt["wall_s"],
        ckpt["best"],
    )
    member.loss_sum, member.loss_steps = ckpt["loss_sum"], ckpt["loss_steps"]
    member.noise = NoiseScaleEMA(**ckpt.get("noise", {}))
    member.latest_good = path == out / LATEST
    # keep the metric lines up to the checkpoint (of this run, or of the trunk for a branch)
    if rank == 0:
        source = out if path.parent == out else path.parent.parent
        _keep_metrics(source / "metrics.jsonl", out / "metrics.jsonl", member.step)
        if source != out:
            _keep_document_losses(source, out, member.step)
    return member


def _keep_metrics(source: Path, dest: Path, step: int) -> None:
    """Write the records of `source` up to `step` to `dest` (which may be `source`); a line torn
    by a kill is dropped, a damaged one is an error naming the file (files.read_metrics)."""
    fix = f"remove {dest.parent} and rerun: the run then starts over"
    records = [r for r in read_metrics(source, fix) if r.get("step", math.inf) <= step]
    with atomic_write(dest) as f:
        f.write("".join(json.dumps(record) + "\n" for record in records))


def _keep_document_losses(trunk: Path, out: Path, step: int) -> None:
    """A branch keeps its trunk's per-document losses up to the branch point, as it keeps their
    metric lines (a branch whose cool-down has no steps evaluates nothing itself)."""
    source = trunk / "val_docs"
    if not source.is_dir():
        return
    (out / "val_docs").mkdir(exist_ok=True)
    for file in source.glob("*.npy"):
        if file.name == "tokens.npy" or int(file.stem.removeprefix("step-")) <= step:
            with atomic_write(out / "val_docs" / file.name, "wb") as f:
                f.write(file.read_bytes())


def load_final_model(run: Path, device: torch.device) -> tuple[Transformer, RunConfig, str]:
    """The finished run's model at its last step (checkpoint.pt), in eval mode, with its config
    and pool directory; a one-line ReproError for a run that is not done."""
    status = read_status(run)
    if status.get("status") != "done":
        raise ReproError(
            f"{run} is not a finished run (status: {status.get('status', 'none')}); train it first"
        )
    config = _saved_config(run)
    vocab = load_pool(config.pool).vocab_size
    model = Transformer(model_config(config.model, vocab, config.tie_embeddings)).to(device)
    model.load_state_dict(_read_checkpoint(run / LATEST, model, device)["model"])
    return model.eval(), config, config.pool


def _read_checkpoint(path: Path, model: Transformer, device: torch.device) -> dict:
    """The checkpoint at `path`, checked to fit `model`. Only tensors and plain values load
    (weights_only: a checkpoint cannot run code); a one-line ReproError says what is wrong."""
    try:
        with warnings.catch_warnings():  # torch warns about pickles it then refuses
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # every failure means the same: this file is not usable
        raise ReproError(
            f"{path} is unusable: it does not load as tensors and plain values "
            f"({type(exc).__name__}: truncated, not a checkpoint, or holding objects that could "
            "run code)"
        ) from None
    weights = ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(weights, dict) or not CHECKPOINT_KEYS <= ckpt.keys():
        raise ReproError(f"{path} is unusable: it is not a checkpoint of this trainer")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in weights.items() if isinstance(v, torch.Tensor)}
    if found != expected:
        name = next(
            k for k in sorted(expected.keys() | found.keys()) if found.get(k) != expected.get(k)
        )
        raise ReproError(
            f"{path} is unusable: it is a checkpoint of another model "
            f"({name}: shape {found.get(name)}, this run's model: {expected.get(name)})"
        )
    return ckpt


def _own_checkpoint(
    out: Path, model: Transformer, device: torch.device, rank: int
) -> tuple[Path, dict] | None:
    """The run's checkpoint to resume from: checkpoint.pt, else the previous one (saying so). None
    if there is none; a one-line ReproError naming the files to remove if none is usable."""
    paths = [p for p in (out / LATEST, out / PREVIOUS) if p.exists()]
    problems = []
    for path in paths:
        try:
            ckpt = _read_checkpoint(path, model, device)
        except ReproError as exc:
            problems.append(str(exc))
            continue
        if problems and rank == 0:
            print(f"repro: {problems[0]}; resuming from {path}", file=sys.stderr)
        return path, ckpt
    if problems:
        remove = " and ".join(str(p) for p in paths)
        raise ReproError(f"{'; '.join(problems)}; remove {remove} to start this run over")
    return None


def _trunk_checkpoint(path: Path, model: Transformer, device: torch.device) -> tuple[Path, dict]:
    """The init_from checkpoint; a one-line ReproError if it is unusable."""
    try:
        return path, _read_checkpoint(path, model, device)
    except ReproError as exc:
        raise ReproError(
            f"init_from: {exc}; point init_from at a good checkpoint, or train its run again"
        ) from None


def _local_norm_hook(
    state, bucket
):  # no annotations: DDP checks them against real types, not strings
    """DDP comm hook (state: dict, bucket: dist.GradBucket -> Future): add the squared norm of this
    rank's gradients, then all-reduce them as usual."""
    state["sq"] += bucket.buffer().float().pow(2).sum()
    return allreduce_hook(None, bucket)


def _save_checkpoint(
    path: Path, member: Member, step: int, wall_s: float, keep_previous: Path | None = None
) -> None:
    """Everything needed to continue exactly: weights, AdamW state, RNG, progress, the open loss
    window; written atomically, the file it replaces moved to `keep_previous` if given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = {
        k: v.clone()
        if v.untyped_storage().nbytes() > v.nbytes
        else v  # a stacked slice: save only the slice
        for k, v in member.model.state_dict().items()
    }
    checkpoint = {
        "model": weights,
        "optimizer": member.optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "step": step,
        "wall_s": wall_s,
        "best": member.best,
        "loss_sum": member.loss_sum,
        "loss_steps": member.loss_steps,
        "noise": member.noise.state(),
    }
    with atomic_write(path, "wb", keep_previous) as f:
        torch.save(checkpoint, f)


def _save_progress(member: Member, record: dict, total_steps: int) -> None:
    """At an evaluation (rank 0): the resume checkpoint (the last good one kept as the previous),
    then status.json with the progress."""
    out = member.out
    keep = out / PREVIOUS if member.latest_good else None
    _save_checkpoint(out / LATEST, member, record["step"], record["wall_s"], keep)
    member.latest_good = True
    write_json(out / "status.json", _running_status(record, total_steps))


def _running_status(progress: dict, total_steps: int) -> dict:
    """status.json while training: step, total_steps, epoch, tokens [, val_loss] of `progress`
    (a metrics line, or the starting point)."""
    shown = {k: progress[k] for k in ("epoch", "tokens", "val_loss") if k in progress}
    return {"status": "running", "step": progress["step"], "total_steps": total_steps} | shown


@dataclass
class Engine:
    """How the members' forward and backward run: one model (under DDP and / or torch.compile) or a
    stack of K models (repro.runtime.stacked); `noise_hook` collects each rank's gradient norm
    under DDP."""

    forward: Callable[[torch.Tensor], torch.Tensor]  # tokens [K, B, T] -> logits [K, B, T, vocab]
    train_model: torch.nn.Module | None  # the single model as trained (DDP's no_sync lives here)
    stack: StackedForward | None
    noise_hook: dict | None
    autocast: AbstractContextManager
    device: torch.device
    rank: int = 0  # this process under torchrun
    world_size: int = 1

    def gradient_holders(self, members: list[Member]) -> list[torch.Tensor]:
        """The tensors backward writes gradients to: the stack's [K, ...] leaves, or the one
        model's parameters."""
        if self.stack is not None:
            return list(self.stack.leaves.values())
        return list(members[0].model.parameters())


def build_engine(
    members: list[Member], device: torch.device, rank: int = 0, world_size: int = 1
) -> Engine:
    """Set up training for one model (single process, DDP, compiled) or a stack of models."""
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    )
    if len(members) > 1:
        stack = StackedForward(
            [m.model for m in members], stack_parameters([m.model for m in members])
        )
        return Engine(stack, None, stack, None, autocast, device, rank, world_size)
    config, train_model, noise_hook = members[0].config, members[0].model, None
    if world_size > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None
        )
        if config.noise_scale:  # each rank's gradient norm before the all-reduce
            noise_hook = {"sq": torch.zeros((), device=device)}
            train_model.register_comm_hook(noise_hook, _local_norm_hook)
    if config.compile:
        train_model = torch.compile(train_model)

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        return train_model(tokens[0])[None]

    return Engine(forward, train_model, None, noise_hook, autocast, device, rank, world_size)


def attach_optimizers(members: list[Member]) -> None:
    """Each member's AdamW, with the state of the checkpoint it resumes from (consumed here); the
    betas stay the run's own (a WSD branch may continue a trunk of other betas)."""
    for member in members:
        c = member.config
        betas = (c.adam_beta1, c.adam_beta2)
        member.optimizer = build_optimizer(
            member.model, c.lr, c.weight_decay, c.embedding_weight_decay, betas
        )
        if member.checkpoint is not None:
            member.optimizer.load_state_dict(member.checkpoint["optimizer"])
            member.checkpoint = None
            for group in member.optimizer.param_groups:  # loading restored the saved betas
                group["betas"] = betas


@dataclass
class _Timeline:
    """When things happen in a run (steps counted from 1) and what evaluation uses."""

    steps: EpochSteps
    schedule: Schedule
    eval_steps: set[int]
    save_steps: set[int]  # steps whose checkpoints are kept (a WSD trunk)
    val_sequences: np.ndarray
    val_documents: np.ndarray  # the document of each target token of val_sequences
    val_docs: int  # documents in the validation split (the tail's may have no scored token)
    eval_batch: int  # sequences per validation forward, the same in every schedule phase


def _timeline(config: RunConfig, pool: Pool, loader: EpochLoader, world_size: int) -> _Timeline:
    steps = epoch_steps(
        loader.sequences_per_epoch, config.epochs, config.batch_size, config.batch_schedule
    )
    return _Timeline(
        steps=steps,
        schedule=config.schedule_for(steps.total_steps),
        eval_steps=set(_evaluation_steps(steps, config.eval_every)),
        save_steps=set(config.save_steps),
        val_sequences=validation_sequences(pool.val, pool.eos_id, config.seq_len),
        val_documents=validation_documents(pool.val, config.seq_len),
        val_docs=pool.val.n_docs,
        eval_batch=max(micro_batches(config, config.batch_size, world_size)[0], EVAL_BATCH),
    )


def _forward_backward(
    engine: Engine,
    active: list[Member],
    batch: torch.Tensor,
    micro: int,
    n_micro: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Accumulate the gradients of `batch` ([members, B, T + 1]: each member's share of its global
    batch on this rank) over its micro-batches; returns
    the step's training loss per member and, with noise_scale, the mean squared gradient norm of
    the small batches (micro-batches, or ranks under DDP) per member."""
    world_size = engine.world_size
    step_loss = torch.zeros(len(active), device=batch.device)
    noise_scale = active[0].config.noise_scale
    micro_norms = (
        MicroBatchNorms(stacked=engine.stack is not None)
        if noise_scale and world_size == 1
        else None
    )
    for m in range(n_micro):
        chunk = batch[:, m * micro : (m + 1) * micro]
        sync = world_size == 1 or m == n_micro - 1
        with nullcontext() if sync else engine.train_model.no_sync(), engine.autocast:
            logits = engine.forward(chunk[..., :-1])  # [members, B, T, vocab]
            loss = _member_losses(logits, chunk[..., 1:]) / n_micro
        loss.sum().backward()
        step_loss += loss.detach()
        if micro_norms is not None:
            micro_norms.add(engine.gradient_holders(active), n_micro)
    small_sq = None
    if micro_norms is not None:
        small_sq = micro_norms.restore(engine.gradient_holders(active))
    elif engine.noise_hook is not None:
        small_sq = engine.noise_hook["sq"].clone()[None]
        dist.all_reduce(small_sq, op=dist.ReduceOp.AVG)
        engine.noise_hook["sq"].zero_()
    if engine.stack is not None:
        engine.stack.scatter_gradients()
    if world_size > 1:
        dist.all_reduce(step_loss, op=dist.ReduceOp.AVG)
    return step_loss, small_sq


def training_step(
    engine: Engine,
    active: list[Member],
    batch: torch.Tensor,
    micro: int,
    n_micro: int,
    batch_size: int,
) -> torch.Tensor:
    """One optimizer step of the active members on `batch` ([members, B, T + 1]: each member's
    share on this rank of its global batch of `batch_size` sequences, in `n_micro` micro-batches of
    `micro`): forward and backward, the noise-scale EMA, clipping and AdamW. Returns the step's
    training loss per member."""
    losses, small_sq = _forward_backward(engine, active, batch, micro, n_micro)
    b_small = batch_size // engine.world_size if engine.noise_hook is not None else micro
    _optimizer_steps(active, small_sq, b_small, batch_size)
    return losses


def _member_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per member: logits [K, B, T, vocab], targets [K, B, T] -> [K]. Each
    member's loss is reduced on its own, exactly as a run alone reduces it, so that a run's bits do
    not depend on the stack it trains in."""
    k = logits.shape[0]
    # unbind, not indexing: its backward stacks the K gradients (indexing would zero-fill a
    # [K, B, T, vocab] gradient per member)
    flat = logits.float().reshape(k, -1, logits.shape[-1]).unbind(0)
    targets = targets.reshape(k, -1).unbind(0)
    return torch.stack([F.cross_entropy(f, t) for f, t in zip(flat, targets)])


def _optimizer_steps(
    active: list[Member], small_sq: torch.Tensor | None, b_small: int, batch_size: int
) -> None:
    """Clip, feed the noise-scale EMA (small batch `b_small`, big batch `batch_size` sequences),
    step and clear each member's optimizer."""
    for k, member in enumerate(active):
        norm = torch.nn.utils.clip_grad_norm_(member.model.parameters(), GRAD_CLIP)
        if small_sq is not None:
            member.noise.update(small_sq[k].item(), norm.item() ** 2, b_small, batch_size)
        member.optimizer.step()
        member.optimizer.zero_grad(set_to_none=True)


def _progress(config: RunConfig, step: int, steps: EpochSteps) -> dict:
    """Where a run is after `step` steps: step, epoch (fractional) and training tokens."""
    return {
        "step": step,
        "epoch": steps.epochs_done(step),
        "tokens": steps.sequences_done(step) * config.seq_len,
    }


def _step_record(member: Member, lr: float, batch_size: int, loss: float) -> dict:
    """The metrics line of `member` after its step (before any evaluation); updates its running
    training loss (the mean since the last evaluation)."""
    config = member.config
    record = _progress(config, member.step, member.timeline.steps) | {"lr": lr}
    if config.batch_schedule:
        record["step_batch"] = batch_size
    if config.noise_scale:
        record |= member.noise.values()
    if not math.isfinite(loss):
        return record | {"train_loss": None, "wall_s": member.wall_s(), "diverged": True}
    member.loss_sum += loss
    member.loss_steps += 1
    return record | {"train_loss": member.loss_sum / member.loss_steps}


def _evaluate_member(member: Member, record: dict, engine: Engine) -> bool:
    """Validation loss into `record` and the member's best; returns whether it diverged."""
    e, model, step, timeline = engine, member.model, member.step, member.timeline
    val = timeline.val_sequences, timeline.eval_batch
    val_loss, per_doc = evaluate(
        model, *val, e.device, e.autocast, e.rank, e.world_size, timeline.val_documents
    )
    if e.rank == 0:
        _save_document_losses(member.out, step, per_doc, timeline)
    record |= {"wall_s": member.wall_s(), "val_loss": val_loss}
    if not math.isfinite(val_loss):
        record["val_loss"] = None
        return True
    if member.best["best_val_loss"] is None or val_loss < member.best["best_val_loss"]:
        epoch = timeline.steps.epochs_done(step)
        member.best = {"best_val_loss": val_loss, "best_step": step, "best_epoch": epoch}
    return False


def _save_document_losses(out: Path, step: int, per_doc: np.ndarray, timeline: _Timeline) -> None:
    """RUN/val_docs/step-N.npy: each validation document's summed loss (nats, float64) at
    evaluation step N; RUN/val_docs/tokens.npy: each document's scored tokens (the same at every
    evaluation). Comparisons of runs pair their documents (repro.analysis.intervals)."""
    folder, n = out / "val_docs", timeline.val_docs
    folder.mkdir(exist_ok=True)
    if not (folder / "tokens.npy").exists():
        with atomic_write(folder / "tokens.npy", "wb") as f:
            np.save(f, np.bincount(timeline.val_documents.reshape(-1), minlength=n))
    with atomic_write(folder / f"step-{step}.npy", "wb") as f:
        np.save(f, np.pad(per_doc, (0, n - len(per_doc))))


def _after_step(member: Member, record: dict, engine: Engine) -> bool:
    """Evaluate, log and checkpoint `member` as its timeline says; returns whether it diverged."""
    step, timeline = member.step, member.timeline
    diverged = record.get("diverged", False)
    if step in timeline.eval_steps and not diverged:
        diverged = _evaluate_member(member, record, engine)
    log_every, rank = member.config.log_every, engine.rank
    if rank == 0 and (diverged or "val_loss" in record or (log_every and step % log_every == 0)):
        member.log(record | {"wall_s": record.get("wall_s", member.wall_s())})
    if diverged:
        return True
    evaluated = "val_loss" in record
    if evaluated:
        member.loss_sum, member.loss_steps = 0.0, 0
    # a kept step first: a kill before checkpoint.pt moves on retrains to it, so it is written
    if step in timeline.save_steps and rank == 0:
        path = member.out / "checkpoints" / f"step-{step}.pt"
        _save_checkpoint(path, member, step, member.wall_s())
    if evaluated:
        if rank == 0:
            _save_progress(member, record, timeline.steps.total_steps)
        if engine.world_size > 1:
            dist.barrier()
    return False


def _final_status(member: Member, status: str, n_members: int, rank: int) -> dict:
    """The member's status.json (written by rank 0), also returned."""
    steps = member.timeline.steps
    final = {
        "status": status,
        "step": member.step,
        "total_steps": steps.total_steps,
        "steps_per_epoch": steps.sequences_per_epoch / steps.batch_by_epoch[0],
        "wall_s": member.wall_s(),
        "stacked": n_members,
        **member.best,
    }
    if rank == 0:
        (member.out / PREVIOUS).unlink(missing_ok=True)  # needed only to resume
        write_json(member.out / "status.json", final)
    return final


def _mark_running(members: list[Member], rank: int) -> None:
    """status.json says running (rank 0); each member's wall clock starts (resumed time kept)."""
    for member in members:
        steps = member.timeline.steps
        if rank == 0:
            where = _progress(member.config, member.step, steps)
            running = _running_status(where, steps.total_steps)
            write_json(member.out / "status.json", running)
        member.started = time.perf_counter() - member.wall_offset


def _next_batch(
    active: list[Member], rank: int, world_size: int, device: torch.device
) -> tuple[torch.Tensor, int]:
    """Each active member's next batch on this rank ([members, B, T + 1]) and the global batch size
    (sequences; equal in a stack); sets each member's lr for the step."""
    rows = []
    for member in active:
        steps, total = member.timeline.steps, member.timeline.steps.total_steps
        position, batch_size = steps.locate(member.step)
        multiplier = lr_multiplier(member.timeline.schedule, member.step, total)
        multiplier *= math.sqrt(batch_size / member.config.batch_size)
        for group in member.optimizer.param_groups:
            group["lr"] = member.config.lr * multiplier
        per_rank = batch_size // world_size
        sequences = member.loader.stream(position, batch_size)
        rows.append(sequences[rank * per_rank : (rank + 1) * per_rank])
    return torch.from_numpy(np.stack(rows)).to(device), batch_size


def _run(
    members: list[Member], device: torch.device, rank: int, world_size: int, progress: bool
) -> dict[Path, dict]:
    """Train the members (one model shape and batch; each with its own data, schedule and length,
    each from its own step) to their ends; returns each member's final status by run directory (on
    every rank). A member that ends or diverges leaves the stack; the others go on."""
    engine = build_engine(members, device, rank, world_size)
    attach_optimizers(members)
    _mark_running(members, rank)
    finals: dict[Path, dict] = {}
    active = list(members)

    def leave(member: Member, status: str) -> None:
        finals[member.out] = _final_status(member, status, len(members), rank)
        active.remove(member)
        if engine.stack is not None:
            engine.stack.drop(member.model)

    for member in [m for m in members if m.step >= m.timeline.steps.total_steps]:
        leave(member, "done")
    name = members[0].out.name + (f" +{len(members) - 1}" if len(members) > 1 else "")
    bar = tqdm(
        total=sum(m.timeline.steps.total_steps for m in members),
        initial=sum(m.step for m in members),
        desc=name,
        unit="step",
        disable=not (progress and rank == 0),
        leave=False,
    )
    while active:
        batch, batch_size = _next_batch(active, rank, world_size, device)
        micro, n_micro = micro_batches(active[0].config, batch_size, world_size)
        losses = training_step(engine, active, batch, micro, n_micro, batch_size)
        bar.update(len(active))
        for member, loss in zip(list(active), losses.tolist()):
            member.step += 1
            lr = member.optimizer.param_groups[0]["lr"]
            if _after_step(member, _step_record(member, lr, batch_size, loss), engine):
                leave(member, "diverged")
            elif member.step == member.timeline.steps.total_steps:
                leave(member, "done")
        if len(members) == 1:
            bar.set_postfix(val=f"{members[0].best['best_val_loss'] or float('nan'):.3f}")
    bar.close()
    return finals
