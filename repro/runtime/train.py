"""One training run: a model, a pool, a loader, AdamW and a schedule, single process or
torchrun/DDP.

Units: batch_size and micro_batch are sequences of seq_len tokens; epochs count passes over the
pool's training split; a step is one optimizer update; `tokens` in the metrics are training
tokens consumed (steps * batch_size * seq_len).

The run's folder `out` (repro.runtime.run_dir: its files and the rules for reading them; the
contract in docs/CONTRACT.md) is a missing or empty folder or a run's: any other folder (a
user's files, a pool, a checkout) is refused before any work.

Starting a run whose directory holds a checkpoint resumes it; on CPU the continued run is
bit-identical to an uninterrupted one (the loader is a pure function of (seed, epoch, step)).
Checkpoints load with weights_only (tensors and plain values: a checkpoint cannot run code); an
unusable checkpoint.pt (truncated, of another model) falls back to checkpoint.prev.pt.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from repro.data.pool import Pool, load_pool, packed_sequences
from repro.errors import ReproError
from repro.runtime.config import (
    RunConfig,
    batch_sizes,
    check_fields,
    config_record,
    micro_batches,
    stack_key,
)
from repro.runtime.files import WriteRefused, make_folder
from repro.runtime.loaders import EpochLoader
from repro.runtime.member import (
    Member,
    final_status,
    finished_status,
    mark_running,
    open_member,
    progress_at,
    save_document_losses,
    save_member,
    save_progress,
)
from repro.runtime.progress import progress_bar
from repro.runtime.run_dir import RunDir
from repro.runtime.schedules import lr_multiplier
from repro.runtime.step import Engine, attach_optimizers, build_engine, training_step


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
    per_token: torch.Tensor | None = None,
) -> tuple[float, np.ndarray | None]:
    """Mean validation loss (nats/token) over all sequences, and with `documents` (the document of
    each target token, validation_documents) the summed loss per document (nats, float64); ranks
    split the sequences. `per_token` (sequences x targets, zeros; run field token_losses) receives
    each target token's loss, every rank's rows filled on every rank."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    mine = sequences[rank::world_size]
    my_docs = documents[rank::world_size] if documents is not None else None
    per_doc = torch.zeros(
        int(documents.max()) + 1 if documents is not None else 0, dtype=torch.float64, device=device
    )
    my_rows = torch.arange(len(sequences), device=device)[rank::world_size]
    for start in range(0, len(mine), micro_batch):
        batch = torch.from_numpy(mine[start : start + micro_batch]).to(device)
        with autocast:
            logits = model(batch[:, :-1])
        flat, targets = logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)
        # F.cross_entropy is nll_loss(log_softmax): one log_softmax serves both reductions
        log_probs = F.log_softmax(flat, dim=-1)
        loss = F.nll_loss(log_probs, targets, reduction="sum")
        total += torch.stack(
            [loss.double(), torch.tensor(targets.numel(), dtype=torch.float64, device=device)]
        )
        if my_docs is not None:  # a second reduction, so that the mean keeps its bits
            ids = torch.from_numpy(my_docs[start : start + micro_batch].reshape(-1)).to(device)
            per_doc.index_add_(0, ids, F.nll_loss(log_probs, targets, reduction="none").double())
        if per_token is not None:
            losses = F.nll_loss(log_probs, targets, reduction="none").float()
            per_token[my_rows[start : start + micro_batch]] = losses.view(len(batch), -1)
        del logits, flat, log_probs  # vocab-wide: freed before the next forward
    if world_size > 1:
        dist.all_reduce(total)
        if my_docs is not None:
            dist.all_reduce(per_doc)
        if per_token is not None:  # zeros where another rank scored: the sum is every row
            dist.all_reduce(per_token)
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
        RunDir(out).check_out()
    if configs[0].gpus > 1 and world_size == 1:
        raise ReproError(
            f"gpus={configs[0].gpus} trains in {configs[0].gpus} processes: run it through "
            f"repro sweep run, or torchrun --nproc-per-node {configs[0].gpus} -m repro.cli train"
        )
    pools = {c.pool: load_pool(c.pool) for c in configs}
    loaders = [check_config(c, pools[c.pool], world_size) for c in configs]
    with _hold_runs(outs, world_size):
        finished = {i: finished_status(c, o) for i, (c, o) in enumerate(zip(configs, outs))}
        todo = [i for i, status in finished.items() if status is None]
        if not todo:
            return [finished[i] for i in range(len(configs))]

        device = _device(configs[todo[0]], world_size)
        if rank == 0:
            for i in todo:
                make_folder(outs[i])
                RunDir(outs[i]).write_config(config_record(configs[i]))
        try:
            members = [
                open_member(configs[i], outs[i], pools[configs[i].pool], loaders[i], device, rank)
                for i in todo
            ]
            finals = _run(members, device, rank, world_size, progress)
        except Exception as exc:
            if rank == 0 and not isinstance(exc, WriteRefused):  # resumes once the disk is fixed
                for i in todo:
                    if not RunDir(outs[i]).is_finished():
                        RunDir(outs[i]).write_status(
                            {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
                        )
            raise
        return [finished[i] or finals[outs[i]] for i in range(len(configs))]


def _hold_runs(outs: list[Path], world_size: int) -> ExitStack:
    """The runs' locks (RunDir.held, which creates each folder), held until the returned stack
    closes: one writer per run. A run another process holds is a one-line error, nothing written.
    Under torchrun (`world_size` > 1) the process that started it holds them (repro.store.sweep)."""
    with ExitStack() as locks:
        for out in outs if world_size == 1 else []:
            run = RunDir(out)
            if not locks.enter_context(run.held()):
                pid, host = run.holder() or ("?", "?")
                raise ReproError(
                    f"{out} is being trained by another process (pid {pid} on {host}, holding "
                    f"{run.lock_file}): one process writes a run; wait for it, or choose another "
                    "--out"
                )
        return locks.pop_all()


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


def _step_record(member: Member, lr: float, batch_size: int, loss: float) -> dict:
    """The metrics line of `member` after its step (before any evaluation); updates its running
    training loss (the mean since the last evaluation)."""
    config = member.config
    record = progress_at(config, member.step, member.timeline.steps) | {"lr": lr}
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
    final = member.config.token_losses and step == timeline.steps.total_steps
    sequences = timeline.val_sequences
    per_token = (
        torch.zeros(sequences.shape[0], sequences.shape[1] - 1, device=e.device) if final else None
    )
    val_loss, per_doc = evaluate(
        model, *val, e.device, e.autocast, e.rank, e.world_size, timeline.val_documents, per_token
    )
    if e.rank == 0:
        save_document_losses(member.run, step, per_doc, timeline)
        if per_token is not None:
            member.run.write_token_losses(per_token.cpu().numpy().reshape(-1))
    record |= {"wall_s": member.wall_s(), "val_loss": val_loss}
    if not math.isfinite(val_loss):
        record["val_loss"] = None
        return True
    if member.best["best_val_loss"] is None or val_loss < member.best["best_val_loss"]:
        epoch = timeline.steps.epochs_done(step)
        member.best = {"best_val_loss": val_loss, "best_step": step, "best_epoch": epoch}
    return False


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
    if step in timeline.window_steps:  # every evaluation step is one (evaluation_steps)
        member.loss_sum, member.loss_steps = 0.0, 0
    # a kept step first: a kill before checkpoint.pt moves on retrains to it, so it is written
    if step in timeline.save_steps and rank == 0:
        save_member(member.run.checkpoint(step), member, step, member.wall_s())
    if evaluated:
        if rank == 0:
            save_progress(member, record, timeline.steps.total_steps)
        if engine.world_size > 1:
            dist.barrier()
    return False


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
    mark_running(members, rank)
    finals: dict[Path, dict] = {}
    active = list(members)

    def leave(member: Member, status: str) -> None:
        finals[member.out] = final_status(member, status, len(members), rank)
        active.remove(member)
        if engine.stacked is not None:
            engine.stacked.drop(member.model)

    for member in [m for m in members if m.step >= m.timeline.steps.total_steps]:
        leave(member, "done")
    name = members[0].out.name + (f" +{len(members) - 1}" if len(members) > 1 else "")
    bar = progress_bar(
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
