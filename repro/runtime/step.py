"""One optimizer step of a stack of runs (or of one run under DDP, maybe compiled): the Engine
that runs the forward pass, the micro-batch accumulation with the gradient noise-scale norms,
clipping and AdamW. Units: batches and micro-batches in sequences of seq_len tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from repro.runtime.member import Member
from repro.runtime.noise_scale import MicroBatchNorms
from repro.runtime.optim import GRAD_CLIP, build_optimizer
from repro.runtime.stacked import StackedForward, stack_parameters


@dataclass
class Engine:
    """How the members' forward and backward run: one model (under DDP and / or torch.compile) or a
    stack of K models (repro.runtime.stacked); `noise_hook` collects each rank's gradient norm
    under DDP."""

    forward: Callable[[torch.Tensor], torch.Tensor]  # tokens [K, B, T] -> logits [K, B, T, vocab]
    train_model: torch.nn.Module | None  # the single model as trained (DDP's no_sync lives here)
    stacked: StackedForward | None  # the K models of a stack of runs; None for one run
    noise_hook: dict | None
    autocast: AbstractContextManager
    device: torch.device
    rank: int = 0  # this process under torchrun
    world_size: int = 1

    def gradient_holders(self, members: list[Member]) -> list[torch.Tensor]:
        """The tensors backward writes gradients to: the stack's [K, ...] leaves, or the one
        model's parameters."""
        if self.stacked is not None:
            return list(self.stacked.leaves.values())
        return members[0].parameters


def build_engine(
    members: list[Member], device: torch.device, rank: int = 0, world_size: int = 1
) -> Engine:
    """Set up training for one model (single process, DDP, compiled) or a stack of models."""
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    )
    if len(members) > 1:
        stacked = StackedForward(
            [m.model for m in members], stack_parameters([m.model for m in members])
        )
        return Engine(stacked, None, stacked, None, autocast, device, rank, world_size)
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


def _local_norm_hook(
    state, bucket
):  # no annotations: DDP checks them against real types, not strings
    """DDP comm hook (state: dict, bucket: dist.GradBucket -> Future): add the squared norm of this
    rank's gradients, then all-reduce them as usual."""
    state["sq"] += bucket.buffer().float().pow(2).sum()
    return allreduce_hook(None, bucket)


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
        MicroBatchNorms(stacked=engine.stacked is not None)
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
    if engine.stacked is not None:
        engine.stacked.scatter_gradients()
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
        norm = torch.nn.utils.clip_grad_norm_(member.parameters, GRAD_CLIP)
        if small_sq is not None:
            member.noise.update(small_sq[k].item(), norm.item() ** 2, b_small, batch_size)
        member.optimizer.step()
        member.optimizer.zero_grad(set_to_none=True)
