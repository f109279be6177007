"""One training run: a model, a pool, a loader, AdamW and a schedule, single process or
torchrun/DDP.

Units: batch_size and micro_batch are sequences of seq_len tokens; epochs count passes over the
pool's training split; a step is one optimizer update; `tokens` in the metrics are training
tokens consumed (steps * batch_size * seq_len).

Run directory (docs/CONTRACT.md):
    RUN/config.json     the resolved RunConfig
    RUN/metrics.jsonl   one object per line: step, epoch, tokens, lr, train_loss,
                        wall_s [, val_loss]
    RUN/status.json     {"status": "running" | "done" | "diverged" | "failed", ...}
    RUN/checkpoint.pt   model, optimizer, RNG and progress at the last evaluation point

Starting a run whose directory holds a checkpoint resumes it; on CPU the continued run is
bit-identical to an uninterrupted one (the loader is a pure function of (seed, epoch, step)).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from tqdm.auto import tqdm

from repro.data.pool import Pool, load_pool
from repro.errors import ReproError
from repro.loaders import (
    LOADERS,
    EpochLoader,
    parse_batch_schedule,
    step_plan,
    validation_sequences,
)
from repro.model import SIZES, Transformer, model_config
from repro.noise_scale import MicroBatchNorms, NoiseScaleEMA
from repro.optim import GRAD_CLIP, Schedule, build_optimizer, lr_multiplier
from repro.stacked import StackedForward, stack_parameters

# sequences per validation forward pass, at least (no gradients, so larger than tiny micro-batches)
EVAL_BATCH = 16


def _field(default, doc: str):
    """A run field: its default and meaning with units (`repro train --help` lists them)."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class RunConfig:
    pool: str = _field("", "pool directory (repro data build)")
    model: str = _field("tiny", "model size (repro.model.SIZES)")
    seq_len: int = _field(128, "tokens per sequence")
    batch_size: int = _field(16, "sequences per optimizer step, over all processes")
    micro_batch: int = _field(
        0, "sequences per forward/backward in one process (0: its whole share of the batch)"
    )
    lr: float = _field(3e-3, "peak learning rate")
    weight_decay: float = _field(0.1, "AdamW decay of the hidden matrices")
    embedding_weight_decay: float = _field(0.0, "AdamW decay of token embedding and output head")
    tie_embeddings: bool = _field(False, "share the token embedding with the output head")
    loader: str = _field("repack", "epoch order: repeat | shuffle | repack")
    schedule: str = _field("cosine", "lr schedule: cosine | wsd | constant")
    warmup: float = _field(0.01, "warmup, fraction of all steps")
    warmup_steps: int = _field(0, "warmup in steps if > 0 (overrides warmup; WSD branches)")
    min_lr_ratio: float = _field(0.1, "final lr as a fraction of the peak")
    decay_fraction: float = _field(0.2, "wsd: the decay's fraction of all steps")
    decay_shape: str = _field("linear", "wsd: linear | 1-sqrt")
    epochs: int = _field(8, "passes over the pool's training split")
    eval_every: float = _field(1.0, "epochs between evaluations (at most 1)")
    log_every: int = _field(0, "steps between train-loss lines (0: only at evaluations)")
    seed: int = _field(0, "model initialisation and data order")
    device: str = _field("auto", "auto | cpu | cuda")
    compile: bool = _field(False, "torch.compile the model")
    threads: int = _field(0, "CPU threads per process (0: torch's default)")
    vocab_size: int = _field(0, "0: the pool's; otherwise must equal it")
    save_steps: str = _field("", "comma-separated steps whose checkpoints are kept (WSD trunk)")
    init_from: str = _field("", "checkpoints/step-N.pt of another run to continue (WSD branch)")
    batch_schedule: str = _field(
        "", "f:B,...: batch B (sequences) from fraction f of the epochs; lr * sqrt(B / batch_size)"
    )
    noise_scale: bool = _field(
        False, "log the gradient noise scale (needs >= 2 micro-batches or processes per step)"
    )

    def schedule_for(self, total_steps: int) -> Schedule:
        warmup = self.warmup_steps / total_steps if self.warmup_steps else self.warmup
        return Schedule(
            self.schedule,
            min(warmup, 1.0),
            self.min_lr_ratio,
            self.decay_fraction,
            self.decay_shape,
        )


def _coerce(name: str, kind: type, value):
    if kind is bool and isinstance(value, str):
        if value.lower() in ("true", "1", "yes", "on"):
            return True
        if value.lower() in ("false", "0", "no", "off"):
            return False
        raise ReproError(f"{name}={value!r} is not a boolean; use true or false")
    if kind is int and isinstance(value, float):
        if not value.is_integer():
            raise ReproError(f"{name}={value!r} is not a whole number")
        return int(value)
    try:
        return kind(value) if not isinstance(value, kind) or kind is float else value
    except (TypeError, ValueError):
        raise ReproError(f"{name}={value!r} is not a valid {kind.__name__}") from None


def make_run_config(values: dict) -> RunConfig:
    """A RunConfig from a dict of field values (strings are converted to the field's type)."""
    types = {
        f.name: {"int": int, "float": float, "bool": bool, "str": str}[f.type]
        for f in fields(RunConfig)
    }
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise ReproError(f"unknown run field {unknown[0]!r}; valid fields: {', '.join(types)}")
    return RunConfig(**{k: _coerce(k, types[k], v) for k, v in values.items()})


def load_run_config(
    config_file: str | None, overrides: list[str], pool: str | None = None
) -> RunConfig:
    """RunConfig from an optional YAML file, then `key=value` overrides, then --pool."""
    values: dict = {}
    if config_file:
        try:
            values = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ReproError(
                f"cannot read config {config_file}: {str(exc).splitlines()[0]}"
            ) from None
        if not isinstance(values, dict):
            raise ReproError(
                f"config {config_file} must be a mapping of run fields (key: value lines)"
            )
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ReproError(f"override {item!r} is not key=value, e.g. lr=3e-3")
        values[key.strip()] = value.strip()
    if pool:
        values["pool"] = pool
    return make_run_config(values)


def run_identity(config: RunConfig) -> dict:
    """The fields that identify a run wherever the checkout lives: the pool by its content
    fingerprint (once built) and a WSD branch's start by <trunk run>/checkpoints/<file>, not by
    absolute paths."""
    fields = asdict(config)
    meta = Path(config.pool) / "meta.json" if config.pool else None
    if meta is not None and meta.is_file():
        fields["pool"] = "fingerprint:" + json.loads(meta.read_text())["fingerprint"]
    if config.init_from:
        fields["init_from"] = "/".join(Path(config.init_from).parts[-3:])
    return fields


# --- validation before any compute ------------------------------------------------------------


def check_fields(config: RunConfig, world_size: int = 1) -> list[tuple[float, int]]:
    """Raise a one-line ReproError for a config that is wrong whatever the pool and the machine
    (presets check their runs with it); returns the batch schedule's (fraction, batch) phases."""
    if config.model not in SIZES:
        raise ReproError(f"unknown model size {config.model!r}; choose one of: {', '.join(SIZES)}")
    if config.loader not in LOADERS:
        raise ReproError(f"unknown loader {config.loader!r}; choose one of: {', '.join(LOADERS)}")
    try:
        config.schedule_for(1)
    except ValueError as exc:
        raise ReproError(str(exc)) from None
    try:
        _save_steps(config)
    except ValueError:
        raise ReproError(
            f"save_steps={config.save_steps!r} is not a comma-separated list of steps"
        ) from None
    for name in ("lr", "epochs", "batch_size", "seq_len", "eval_every"):
        if getattr(config, name) <= 0:
            raise ReproError(f"{name} must be positive, got {getattr(config, name)}")
    if config.eval_every > 1:
        raise ReproError(
            f"eval_every={config.eval_every} epochs; "
            "evaluate at least once per epoch (eval_every <= 1)"
        )
    if config.weight_decay < 0 or config.embedding_weight_decay < 0:
        raise ReproError("weight decays must be >= 0")
    if config.micro_batch < 0 or config.seed < 0 or config.threads < 0 or config.warmup_steps < 0:
        raise ReproError("micro_batch, seed, threads and warmup_steps must be >= 0")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", config.device):
        raise ReproError(f"device={config.device!r}; use auto, cpu, cuda or cuda:N")
    if abs(1 / config.eval_every - round(1 / config.eval_every)) > 1e-9:
        raise ReproError(
            f"eval_every={config.eval_every} epochs must be 1/k for a whole number k "
            "(1, 0.5, 0.25, ...)"
        )
    try:
        phases = parse_batch_schedule(config.batch_schedule) if config.batch_schedule else []
    except ValueError:
        raise ReproError(
            f"batch_schedule={config.batch_schedule!r} must look like 0:4,0.5:16 "
            "(fraction of epochs:batch size, starting at 0, fractions increasing below 1)"
        ) from None
    for batch_size in {config.batch_size, *(b for _, b in phases)}:
        micro, n_micro = _micro_batches(config, batch_size, world_size)
        if micro == 0 or batch_size % (micro * world_size):
            raise ReproError(
                f"batch_size {batch_size} is not divisible by micro_batch {micro} "
                f"x world size {world_size}"
            )
        if config.noise_scale and n_micro * world_size < 2:
            raise ReproError(
                "noise_scale needs at least two micro-batches or processes per step; "
                f"set micro_batch below {batch_size // world_size}"
            )
    max_len = SIZES[config.model].max_seq_len
    if config.seq_len > max_len:
        raise ReproError(
            f"seq_len {config.seq_len} exceeds model {config.model}'s limit of {max_len} tokens"
        )
    return phases


def check_config(config: RunConfig, pool: Pool, world_size: int = 1) -> EpochLoader:
    """Raise a one-line ReproError for a bad config; return the training loader."""
    phases = check_fields(config, world_size)
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
    largest = max([config.batch_size, *(b for _, b in phases)])
    if loader.sequences_per_epoch < largest:
        raise ReproError(
            f"the pool's training split packs into {loader.sequences_per_epoch} sequences "
            f"of {config.seq_len + 1} tokens, less than one batch of {largest}; "
            "lower seq_len or batch_size, or use a larger pool"
        )
    if (pool.val.n_tokens + pool.val.n_docs) // (config.seq_len + 1) < world_size:
        raise ReproError(
            f"the validation split packs into fewer than {world_size} sequence(s) "
            f"of {config.seq_len + 1} tokens (one per process); "
            "lower seq_len or use a larger validation split"
        )
    return loader


# --- the run ----------------------------------------------------------------------------------


def _parsed_step(line: str) -> float:
    """Step of a metrics line; a line torn by a kill counts as after every checkpoint."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError):
        return math.inf


def _save_steps(config: RunConfig) -> set[int]:
    return {int(x) for x in config.save_steps.split(",") if x.strip()}


def _micro_batches(config: RunConfig, batch_size: int, world_size: int) -> tuple[int, int]:
    """(sequences per micro-batch, micro-batches per step) of one process for a global batch."""
    per_rank = batch_size // world_size
    micro = min(config.micro_batch, per_rank) if config.micro_batch else per_rank
    return micro, (per_rank // micro if micro else 0)


def _evaluation_steps(steps_by_epoch: tuple[int, ...], eval_every: float) -> list[int]:
    """Steps (counted from 1) after which validation runs: evenly spaced, always at each epoch
    end."""
    per_epoch = max(1, round(1 / eval_every))
    starts = np.concatenate([[0], np.cumsum(steps_by_epoch)])
    points = {
        int(starts[e]) + max(1, round(i * n / per_epoch))
        for e, n in enumerate(steps_by_epoch)
        for i in range(1, per_epoch + 1)
    }
    return sorted(points)


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    sequences: np.ndarray,
    micro_batch: int,
    device: torch.device,
    autocast,
    rank: int = 0,
    world_size: int = 1,
) -> float:
    """Mean validation loss (nats/token) over all sequences; ranks split the sequences."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    mine = sequences[rank::world_size]
    for start in range(0, len(mine), micro_batch):
        batch = torch.from_numpy(mine[start : start + micro_batch]).to(device)
        with autocast:
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
        )
        total += torch.stack(
            [loss.double(), torch.tensor(batch[:, 1:].numel(), dtype=torch.float64, device=device)]
        )
    if world_size > 1:
        dist.all_reduce(total)
    model.train()
    return (total[0] / total[1]).item()


STACKABLE = ("lr", "weight_decay", "embedding_weight_decay")
"""Run fields that may differ between the members of a stack (train_stacked); all others must
agree."""


def stack_key(config: RunConfig) -> str:
    """Runs with equal keys can train as one stack: same pool, shape, data order and schedule."""
    return json.dumps(
        {k: v for k, v in run_identity(config).items() if k not in STACKABLE}, sort_keys=True
    )


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
    if not configs or len(configs) != len(outs):
        raise ReproError("train_stacked needs one output directory per config")
    for config in configs:
        if not config.pool:
            raise ReproError("no pool given; pass --pool DIR or pool=DIR")
    if len(configs) > 1:
        if len({stack_key(c) for c in configs}) > 1:
            raise ReproError(f"stacked runs may differ only in {', '.join(STACKABLE)}")
        if world_size > 1 or configs[0].compile:
            raise ReproError(
                "stacked runs train in one process without torch.compile; run them one by one"
            )
    pool = load_pool(configs[0].pool)
    loader = check_config(configs[0], pool, world_size)
    for config in configs[1:]:
        check_config(config, pool, world_size)
    finished = {i: _finished_status(c, o) for i, (c, o) in enumerate(zip(configs, outs))}
    todo = [i for i, status in finished.items() if status is None]
    if not todo:
        return [finished[i] for i in range(len(configs))]

    config = configs[todo[0]]
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
    if rank == 0:
        for i in todo:
            outs[i].mkdir(parents=True, exist_ok=True)
            _write_json(outs[i] / "config.json", asdict(configs[i]))
    try:
        members = [_open_member(configs[i], outs[i], pool, device, rank) for i in todo]
        by_step: dict[int, list[_Member]] = {}
        # members resumed from different checkpoints train as separate stacks
        for member in members:
            by_step.setdefault(member.step, []).append(member)
        finals: dict[Path, dict] = {}
        for group in by_step.values():
            finals |= _run(group, pool, loader, device, rank, world_size, progress)
    except Exception as exc:
        if rank == 0:
            for i in todo:
                if not _is_finished(outs[i]):
                    _write_json(
                        outs[i] / "status.json",
                        {"status": "failed", "error": f"{type(exc).__name__}: {exc}"},
                    )
        raise
    return [finished[i] or finals[outs[i]] for i in range(len(configs))]


def _is_finished(out: Path) -> bool:
    try:
        return json.loads((out / "status.json").read_text())["status"] in ("done", "diverged")
    except (OSError, ValueError, KeyError):
        return False


def _finished_status(config: RunConfig, out: Path) -> dict | None:
    """The final status of a done or diverged run in `out`; None if it still has to train.
    Raises if `out` holds a different run."""
    config_path, status_path = out / "config.json", out / "status.json"
    if not config_path.exists():
        return None
    existing = run_identity(
        make_run_config(json.loads(config_path.read_text()))
    )  # fields added later take defaults
    wanted = run_identity(config)
    if existing != wanted:
        diff = sorted(k for k in wanted if existing.get(k) != wanted[k])
        raise ReproError(
            f"{out} holds a different run (differs in {', '.join(diff)}); choose another --out"
        )
    if status_path.exists():
        status = json.loads(status_path.read_text())
        if status["status"] in ("done", "diverged"):
            return status
    return None


@dataclass
class _Member:
    """One run of a (possibly one-member) stack: its model, optimizer and progress."""

    config: RunConfig
    out: Path
    model: Transformer
    checkpoint: dict | None  # loaded state to continue from; consumed once the optimizer exists
    optimizer: torch.optim.Optimizer | None = None
    step: int = 0
    wall_offset: float = 0.0
    loss_sum: float = 0.0  # training loss summed since the last evaluation
    loss_steps: int = 0
    best: dict = field(
        default_factory=lambda: {"best_val_loss": None, "best_step": None, "best_epoch": None}
    )
    noise: NoiseScaleEMA = field(default_factory=NoiseScaleEMA)

    def log(self, record: dict) -> None:
        with (self.out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")


def _open_member(
    config: RunConfig, out: Path, pool: Pool, device: torch.device, rank: int
) -> _Member:
    """Build the run's model (seeded) and load its checkpoint, or the trunk's for a WSD branch."""
    torch.manual_seed(config.seed)
    model = Transformer(model_config(config.model, pool.vocab_size, config.tie_embeddings)).to(
        device
    )
    metrics_path, ckpt_path = out / "metrics.jsonl", out / "checkpoint.pt"
    start_from = (
        ckpt_path if ckpt_path.exists() else (Path(config.init_from) if config.init_from else None)
    )
    member = _Member(config, out, model, None)
    if start_from is None:
        if rank == 0:
            metrics_path.write_text("")
        return member
    ckpt = torch.load(start_from, map_location=device, weights_only=False)
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
    # keep the metric lines up to the checkpoint (of this run, or of the trunk for a branch)
    if rank == 0:
        source = (
            metrics_path if start_from == ckpt_path else start_from.parent.parent / "metrics.jsonl"
        )
        lines = [
            line for line in source.read_text().splitlines() if _parsed_step(line) <= member.step
        ]
        tmp = metrics_path.with_name("metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, metrics_path)
    return member


def _local_norm_hook(
    state, bucket
):  # no annotations: DDP checks them against real types, not strings
    """DDP comm hook (state: dict, bucket: dist.GradBucket -> Future): add the squared norm of this
    rank's gradients, then all-reduce them as usual."""
    state["sq"] += bucket.buffer().float().pow(2).sum()
    return allreduce_hook(None, bucket)


def _save_checkpoint(path: Path, member: _Member, step: int, wall_s: float) -> None:
    """Everything needed to continue exactly: weights, AdamW state, RNG, progress, the open loss
    window."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    weights = {
        k: v.clone()
        if v.untyped_storage().nbytes() > v.nbytes
        else v  # a stacked slice: save only the slice
        for k, v in member.model.state_dict().items()
    }
    torch.save(
        {
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
        },
        tmp,
    )
    os.replace(tmp, path)


def _run(
    members: list[_Member],
    pool: Pool,
    loader: EpochLoader,
    device: torch.device,
    rank: int,
    world_size: int,
    progress: bool,
) -> dict[Path, dict]:
    """Train the members (same shape, data order and schedule; all at the same step) to the end;
    returns each member's final status by run directory (on every rank)."""
    config = members[0].config
    noise_hook = None
    if len(members) == 1:
        model = members[0].model
        train_model = model
        if world_size > 1:
            train_model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
            if config.noise_scale:  # each rank's gradient norm before the all-reduce
                noise_hook = {"sq": torch.zeros((), device=device)}
                train_model.register_comm_hook(noise_hook, _local_norm_hook)
        if config.compile:
            train_model = torch.compile(train_model)
        forward, stack = (lambda tokens: train_model(tokens)[None]), None
    else:
        stack = StackedForward(
            [m.model for m in members], stack_parameters([m.model for m in members])
        )
        forward, train_model = stack, None

    def gradient_holders() -> list[torch.Tensor]:
        """The tensors backward writes gradients to: the stack's [K, ...] leaves, or the one model's
        parameters."""
        return (
            list(stack.leaves.values())
            if stack is not None
            else list(members[0].model.parameters())
        )

    for member in members:
        member.optimizer = build_optimizer(
            member.model,
            member.config.lr,
            member.config.weight_decay,
            member.config.embedding_weight_decay,
        )
        if member.checkpoint is not None:
            member.optimizer.load_state_dict(member.checkpoint["optimizer"])
            member.checkpoint = None
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    )

    plan = step_plan(
        loader.sequences_per_epoch, config.epochs, config.batch_size, config.batch_schedule
    )
    steps_per_epoch = plan.steps_by_epoch[0]
    total_steps = plan.total_steps
    schedule = config.schedule_for(total_steps)
    save_steps = _save_steps(config)
    eval_steps = set(_evaluation_steps(plan.steps_by_epoch, config.eval_every))
    val_sequences = validation_sequences(pool.val, pool.eos_id, config.seq_len)
    eval_batch = max(
        _micro_batches(config, config.batch_size, world_size)[0], EVAL_BATCH
    )  # the same in every schedule phase
    step = members[0].step

    if rank == 0:
        for member in members:
            _write_json(
                member.out / "status.json",
                {"status": "running", "step": step, "total_steps": total_steps},
            )

    finals: dict[Path, dict] = {}

    def finish(member: _Member, status: str) -> None:
        finals[member.out] = {
            "status": status,
            "step": step,
            "total_steps": total_steps,
            "steps_per_epoch": steps_per_epoch,
            "wall_s": time.perf_counter() - started[member.out],
            "stacked": len(members),
            **member.best,
        }
        if rank == 0:
            _write_json(member.out / "status.json", finals[member.out])

    started = {m.out: time.perf_counter() - m.wall_offset for m in members}
    active = list(members)
    name = members[0].out.name + (f" +{len(members) - 1}" if len(members) > 1 else "")
    bar = tqdm(
        total=total_steps,
        initial=step,
        desc=name,
        unit="step",
        disable=not progress or rank != 0,
        leave=False,
    )
    while step < total_steps and active:
        epoch, step_in_epoch, batch_size = plan.locate(step)
        per_rank = batch_size // world_size
        micro, n_micro = _micro_batches(config, batch_size, world_size)
        multiplier = lr_multiplier(schedule, step, total_steps) * math.sqrt(
            batch_size / config.batch_size
        )
        for member in active:
            for group in member.optimizer.param_groups:
                group["lr"] = member.config.lr * multiplier
        rows = loader.sequences(epoch, step_in_epoch * batch_size, batch_size)[
            rank * per_rank : (rank + 1) * per_rank
        ]
        batch = torch.from_numpy(rows).to(device)
        step_loss = torch.zeros(len(active), device=device)
        micro_norms = (
            MicroBatchNorms(stacked=stack is not None)
            if config.noise_scale and world_size == 1
            else None
        )
        for m in range(n_micro):
            chunk = batch[m * micro : (m + 1) * micro]
            sync = world_size == 1 or m == n_micro - 1
            with nullcontext() if sync else train_model.no_sync(), autocast:
                logits = forward(chunk[:, :-1])  # [members, B, T, vocab]
                targets = chunk[:, 1:].reshape(-1).repeat(len(active))
                if len(active) == 1:
                    loss = (
                        F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets)[None]
                        / n_micro
                    )
                else:  # one mean per config
                    token_loss = F.cross_entropy(
                        logits.float().reshape(-1, logits.shape[-1]), targets, reduction="none"
                    )
                    loss = token_loss.view(len(active), -1).mean(1) / n_micro
            loss.sum().backward()
            step_loss += loss.detach()
            if micro_norms is not None:
                micro_norms.add(gradient_holders(), n_micro)
        # mean squared gradient norm of the small batches (micro-batches, or ranks under DDP)
        small_sq = None
        if micro_norms is not None:
            small_sq = micro_norms.restore(gradient_holders())
        elif noise_hook is not None:
            small_sq = noise_hook["sq"].clone()[None]
            dist.all_reduce(small_sq, op=dist.ReduceOp.AVG)
            noise_hook["sq"].zero_()
        if stack is not None:
            stack.scatter_gradients()
        if world_size > 1:
            dist.all_reduce(step_loss, op=dist.ReduceOp.AVG)
        for k, member in enumerate(active):
            norm = torch.nn.utils.clip_grad_norm_(member.model.parameters(), GRAD_CLIP)
            if small_sq is not None:
                member.noise.update(
                    small_sq[k].item(),
                    norm.item() ** 2,
                    per_rank if noise_hook is not None else micro,
                    batch_size,
                )
            member.optimizer.step()
            member.optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update()
        for member, step_loss_value in zip(list(active), step_loss.tolist()):
            lr = member.config.lr * multiplier
            record = {
                "step": step,
                "epoch": plan.epochs_done(step),
                "tokens": plan.sequences_done(step) * config.seq_len,
                "lr": lr,
            }
            if config.batch_schedule:
                record["step_batch"] = batch_size
            if config.noise_scale:
                record |= member.noise.values()
            diverged = not math.isfinite(step_loss_value)
            if diverged:
                record |= {
                    "train_loss": None,
                    "wall_s": time.perf_counter() - started[member.out],
                    "diverged": True,
                }
            else:
                member.loss_sum += step_loss_value
                member.loss_steps += 1
                record["train_loss"] = (
                    member.loss_sum / member.loss_steps
                )  # mean since the last evaluation
            if step in eval_steps and not diverged:
                val_loss = evaluate(
                    member.model, val_sequences, eval_batch, device, autocast, rank, world_size
                )
                record |= {
                    "wall_s": time.perf_counter() - started[member.out],
                    "val_loss": val_loss,
                }
                if not math.isfinite(val_loss):
                    record["val_loss"] = None
                    diverged = True
                elif (
                    member.best["best_val_loss"] is None or val_loss < member.best["best_val_loss"]
                ):
                    member.best = {
                        "best_val_loss": val_loss,
                        "best_step": step,
                        "best_epoch": plan.epochs_done(step),
                    }
            if rank == 0 and (
                diverged
                or "val_loss" in record
                or (config.log_every and step % config.log_every == 0)
            ):
                member.log(
                    record
                    | {"wall_s": record.get("wall_s", time.perf_counter() - started[member.out])}
                )
            if diverged:
                finish(member, "diverged")
                active.remove(member)
                if stack is not None:
                    stack.drop(members.index(member))
                continue
            if "val_loss" in record:
                member.loss_sum, member.loss_steps = 0.0, 0
                if rank == 0:
                    _save_checkpoint(member.out / "checkpoint.pt", member, step, record["wall_s"])
                if world_size > 1:
                    dist.barrier()
            if step in save_steps and rank == 0:
                _save_checkpoint(
                    member.out / "checkpoints" / f"step-{step}.pt",
                    member,
                    step,
                    time.perf_counter() - started[member.out],
                )
        if len(members) == 1:
            bar.set_postfix(val=f"{members[0].best['best_val_loss'] or float('nan'):.3f}")
    bar.close()
    for member in active:
        finish(member, "done")
    return finals
