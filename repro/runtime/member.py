"""One run of a stack as the trainer holds it (Member): its model, optimizer state, progress and
folder; how it opens (fresh, resumed from its checkpoint, or branched from a WSD trunk's), what it
saves at an evaluation (checkpoint, status, per-document losses) and how it finishes. The files
and their reading rules are repro.runtime.run_dir's; the loop that steps members is
repro.runtime.train's. Units: steps are optimizer updates counted from 1; epochs are passes over
the pool's training split.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from repro.data.pool import Pool, load_pool
from repro.errors import ReproError
from repro.runtime.config import RunConfig, micro_batches, run_identity
from repro.runtime.loaders import (
    EpochLoader,
    EpochSteps,
    epoch_steps,
    validation_documents,
    validation_sequences,
)
from repro.runtime.model import Transformer
from repro.runtime.noise_scale import NoiseScaleEMA
from repro.runtime.run_dir import FINISHED, RunDir, load_checkpoint, save_checkpoint
from repro.runtime.schedules import Schedule
from repro.runtime.shapes import model_config

# sequences per validation forward pass, at least (no gradients, so larger than tiny micro-batches)
EVAL_BATCH = 16
# what every checkpoint holds
CHECKPOINT_KEYS = set(
    "model optimizer torch_rng python_rng step wall_s best loss_sum loss_steps".split()
)


@dataclass
class Member:
    """One run of a (possibly one-member) stack: its model, optimizer and progress."""

    config: RunConfig
    out: Path
    model: Transformer
    checkpoint: dict | None  # loaded state to continue from; consumed once the optimizer exists
    loader: EpochLoader | None = None  # its training data (None: a benchmark feeds batches)
    timeline: Timeline | None = None
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

    @cached_property
    def parameters(self) -> list[torch.nn.Parameter]:
        """The model's parameters (a tied matrix once), listed once: the same objects for the
        whole run, also in a stack (repro.runtime.stacked moves their storage, not them)."""
        return list(self.model.parameters())

    @property
    def run(self) -> RunDir:
        """The run's folder (`out`)."""
        return RunDir(self.out)

    def wall_s(self) -> float:
        """Seconds this run has trained, resumed pieces included."""
        return time.perf_counter() - self.started

    def log(self, record: dict) -> None:
        """Append `record` to RUN/metrics.jsonl (a full disk: NoSpace, files.no_space)."""
        self.run.append_metrics(record)


@dataclass
class Timeline:
    """When things happen in a run (steps counted from 1) and what evaluation uses."""

    steps: EpochSteps
    schedule: Schedule
    eval_steps: set[int]
    window_steps: set[int]  # steps after which the running training loss restarts
    save_steps: set[int]  # steps whose checkpoints are kept (a WSD trunk)
    val_sequences: np.ndarray
    val_documents: np.ndarray  # the document of each target token of val_sequences
    val_docs: int  # documents in the validation split (the tail's may have no scored token)
    eval_batch: int  # sequences per validation forward, the same in every schedule phase


def build_timeline(config: RunConfig, pool: Pool, loader: EpochLoader, world_size: int) -> Timeline:
    """The run's Timeline on `world_size` processes: its steps per epoch, lr schedule, evaluation
    and kept steps, and the validation sequences every evaluation scores."""
    steps = epoch_steps(
        loader.sequences_per_epoch, config.epochs, config.batch_size, config.batch_schedule
    )
    return Timeline(
        steps=steps,
        schedule=config.schedule_for(steps.total_steps),
        eval_steps=set(evaluation_steps(config, steps, config.eval_spacing)),
        window_steps=set(evaluation_steps(config, steps, "even")),
        save_steps=set(config.save_steps),
        val_sequences=validation_sequences(pool.val, pool.eos_id, config.seq_len),
        val_documents=validation_documents(pool.val, config.seq_len),
        val_docs=pool.val.n_docs,
        eval_batch=max(micro_batches(config, config.batch_size, world_size)[0], EVAL_BATCH),
    )


def evaluation_epochs(
    epochs: int, eval_every: float, spacing: str, cool_down: float = 0.0
) -> list[Fraction]:
    """Epochs after which a run of `epochs` epochs evaluates: every `eval_every` epochs (even); or
    after epochs 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 3 * 2^k), the last, and every epoch of
    the last `cool_down` fraction of the epochs, where a WSD run's loss moves most (log)."""
    per_epoch = max(1, round(1 / eval_every))
    even = [Fraction(i, per_epoch) for i in range(1, epochs * per_epoch + 1)]
    if spacing == "even":
        return even
    marks = {n for k in range(epochs.bit_length()) for n in (2**k, 3 * 2**k) if n <= epochs}
    tail = {e for e in even if e > epochs * (1 - Fraction(str(cool_down)))}  # 0.2 as 1/5
    return sorted({Fraction(n) for n in marks | {epochs}} | tail)


def evaluation_steps(config: RunConfig, steps: EpochSteps, spacing: str) -> list[int]:
    """Steps (counted from 1) after which a run of `config` evaluates under `spacing`: the step
    that ends each of evaluation_epochs (EpochSteps.steps_at); its cool-down is the WSD decay."""
    epochs = evaluation_epochs(
        len(steps.batch_by_epoch), config.eval_every, spacing, config.decay_fraction
    )
    return sorted({steps.steps_at(e) for e in epochs} - {0})


def progress_at(config: RunConfig, step: int, steps: EpochSteps) -> dict:
    """Where a run is after `step` steps: step, epoch (fractional) and training tokens."""
    return {
        "step": step,
        "epoch": steps.epochs_done(step),
        "tokens": steps.sequences_done(step) * config.seq_len,
    }


def _running_status(progress: dict, total_steps: int) -> dict:
    """status.json while training: step, total_steps, epoch, tokens [, val_loss] of `progress`
    (a metrics line, or the starting point)."""
    shown = {k: progress[k] for k in ("epoch", "tokens", "val_loss") if k in progress}
    return {"status": "running", "step": progress["step"], "total_steps": total_steps} | shown


def finished_status(config: RunConfig, out: Path) -> dict | None:
    """The final status of a done or diverged run in `out`; None if it still has to train.
    Raises if `out` holds a different run."""
    run = RunDir(out)
    if not run.config_file.exists():
        return None
    existing = run_identity(run.run_config())
    wanted = run_identity(config)
    if existing != wanted:
        diff = sorted(k for k in wanted if existing.get(k) != wanted[k])
        raise ReproError(
            f"{out} holds a different run (differs in {', '.join(diff)}); choose another --out"
        )
    status = run.status()
    return status if status.get("status") in FINISHED else None


def open_member(
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
    timeline = build_timeline(config, pool, loader, world_size)
    member = Member(config, out, model, None, loader, timeline)
    run = RunDir(out)
    found = _own_checkpoint(run, model, device, rank)
    if found is None and config.init_from:
        found = _trunk_checkpoint(Path(config.init_from), model, device)
    if found is None:
        if rank == 0:
            run.start_metrics()
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
    member.latest_good = path == run.latest_checkpoint
    # keep the metric lines up to the checkpoint (of this run, or of the trunk for a branch)
    if rank == 0:
        source = run if path.parent == out else RunDir(path.parent.parent)
        run.keep_metrics(source, member.step)
        if source != run:
            run.keep_document_losses(source, member.step)
    return member


def load_final_model(run: Path, device: torch.device) -> tuple[Transformer, RunConfig, Pool]:
    """The finished run's model at its last step (checkpoint.pt), in eval mode, with its config
    and pool; a one-line ReproError for a run that is not done."""
    folder = RunDir(run)
    status = folder.status()
    if status.get("status") != "done":
        raise ReproError(
            f"{run} is not a finished run (status: {status.get('status', 'none')}); train it first"
        )
    config = folder.run_config()
    pool = load_pool(config.pool)
    model = Transformer(model_config(config.model, pool.vocab_size, config.tie_embeddings))
    model = model.to(device)
    checkpoint = _read_checkpoint(folder.latest_checkpoint, model, device)
    model.load_state_dict(checkpoint["model"])
    return model.eval(), config, pool


def _read_checkpoint(path: Path, model: Transformer, device: torch.device) -> dict:
    """The checkpoint at `path` (run_dir.load_checkpoint), checked to fit `model`; a one-line
    ReproError says what is wrong."""
    ckpt = load_checkpoint(path, device)
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
    run: RunDir, model: Transformer, device: torch.device, rank: int
) -> tuple[Path, dict] | None:
    """The run's checkpoint to resume from: checkpoint.pt, else the previous one (saying so). None
    if there is none; a one-line ReproError naming the files to remove if none is usable."""
    paths = [p for p in (run.latest_checkpoint, run.previous_checkpoint) if p.exists()]
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


def save_member(
    path: Path, member: Member, step: int, wall_s: float, keep_previous: Path | None = None
) -> None:
    """Everything needed to continue exactly: weights, AdamW state, RNG, progress, the open loss
    window; written atomically, the file it replaces moved to `keep_previous` if given."""
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
    save_checkpoint(path, checkpoint, keep_previous)


def save_progress(member: Member, record: dict, total_steps: int) -> None:
    """At an evaluation (rank 0): the resume checkpoint (the last good one kept as the previous),
    then status.json with the progress."""
    run = member.run
    keep = run.previous_checkpoint if member.latest_good else None
    save_member(run.latest_checkpoint, member, record["step"], record["wall_s"], keep)
    member.latest_good = True
    run.write_status(_running_status(record, total_steps))


def save_document_losses(run: RunDir, step: int, per_doc: np.ndarray, timeline: Timeline) -> None:
    """RUN/val_docs/step-N.npy: each validation document's summed loss (nats, float64) at
    evaluation step N; RUN/val_docs/tokens.npy: each document's scored tokens (the same at every
    evaluation). Comparisons of runs pair their documents (repro.analysis.intervals)."""
    n = timeline.val_docs
    tokens = np.bincount(timeline.val_documents.reshape(-1), minlength=n)
    run.write_document_losses(step, np.pad(per_doc, (0, n - len(per_doc))), tokens)


def final_status(member: Member, status: str, n_members: int, rank: int) -> dict:
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
        member.run.drop_previous_checkpoint()
        member.run.write_status(final)
    return final


def mark_running(members: list[Member], rank: int) -> None:
    """status.json says running (rank 0); each member's wall clock starts (resumed time kept)."""
    for member in members:
        steps = member.timeline.steps
        if rank == 0:
            where = progress_at(member.config, member.step, steps)
            running = _running_status(where, steps.total_steps)
            member.run.write_status(running)
        member.started = time.perf_counter() - member.wall_offset
