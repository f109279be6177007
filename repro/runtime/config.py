"""The run config: every field of one training run with its default, meaning and unit, parsed
from YAML / key=value text once, validated where it is defined, and identified by a hash that does
not depend on where the checkout lives. The trainer (repro.runtime.train), the sweeps
(repro.store.sweep) and the results (repro.analysis.results) all read runs through this module.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, get_args

import yaml

from repro.data.pool import built_meta
from repro.errors import ReproError
from repro.runtime.loaders import LOADERS, BatchPhases, Loader
from repro.runtime.schedules import DecayShape, Schedule, ScheduleName
from repro.runtime.shapes import SIZES
from repro.typed_fields import load_dataclass

EvalSpacing = Literal["even", "log"]  # when evaluations happen (repro.runtime.member)
EVAL_SPACINGS = get_args(EvalSpacing)


def _parse_save_steps(value: str | Sequence, where: str) -> tuple[int, ...]:
    """ "10,20" (or [10, 20]) -> (10, 20), sorted, each step once."""
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(sorted({int(str(x)) for x in items if str(x).strip()}))
    except (TypeError, ValueError):
        raise ReproError(f"{where}={value!r} is not a comma-separated list of steps") from None


def parse_batch_schedule(value: str | Sequence, where: str = "batch_schedule") -> BatchPhases:
    """ "0:4,0.5:16" (or [[0, 4], [0.5, 16]]) -> ((0.0, 4), (0.5, 16)): from each fraction of the
    training epochs on, that batch size (sequences); a malformed one is a one-line error naming
    `where`."""
    wrong = ReproError(
        f"{where}={value!r} must look like 0:4,0.5:16 "
        "(fraction of epochs:batch size, starting at 0, fractions increasing below 1)"
    )
    try:
        if isinstance(value, str):
            items = [item.partition(":")[::2] for item in value.split(",")] if value else []
        else:
            items = list(value)
        phases = tuple((float(fraction), int(batch)) for fraction, batch in items)
    except (TypeError, ValueError):
        raise wrong from None
    fractions = [f for f, _ in phases]
    if phases and (
        fractions[0] != 0
        or any(b <= 0 for _, b in phases)
        or any(not 0 <= f < 1 for f in fractions)
        or fractions != sorted(set(fractions))
    ):
        raise wrong
    return phases


def batch_schedule_text(phases: BatchPhases) -> str:
    """Phases ((0.0, 4), (0.5, 16)) as a batch_schedule's text, "0:4,0.5:16"."""
    return ",".join(f"{_fraction_text(f)}:{b}" for f, b in phases)


def _fraction_text(fraction: float) -> str:
    return str(int(fraction)) if fraction.is_integer() else repr(fraction)


def _field(default, doc: str, parse=None, text=None):
    """A run field: its default and meaning with units (`repro train --help` lists them); a field
    written as text has its parser (value, where) and its formatter for config.json."""
    metadata = {"doc": doc} | ({"parse": parse, "text": text} if parse else {})
    return field(default=default, metadata=metadata)


@dataclass
class RunConfig:
    pool: str = _field("", "pool directory (repro data build)")
    model: str = _field("tiny", "model size (repro.runtime.shapes.SIZES)")
    seq_len: int = _field(128, "tokens per sequence")
    batch_size: int = _field(16, "sequences per optimizer step, over all processes")
    micro_batch: int = _field(
        0, "sequences per forward/backward in one process (0: its whole share of the batch)"
    )
    lr: float = _field(3e-3, "peak learning rate")
    weight_decay: float = _field(0.1, "AdamW decay of the linear layers (untied head included)")
    embedding_weight_decay: float = _field(
        0.0, "AdamW decay of the token embedding (and of the head when tied)"
    )
    adam_beta1: float = _field(0.9, "AdamW first-moment decay per optimizer step")
    adam_beta2: float = _field(
        0.95, "AdamW second-moment decay per optimizer step (half-life ln 0.5 / ln beta2 steps)"
    )
    tie_embeddings: bool = _field(False, "share the token embedding with the output head")
    loader: Loader = _field("repack", "epoch order: repeat | shuffle | repack")
    schedule: ScheduleName = _field("cosine", "lr schedule: cosine | wsd | constant")
    warmup: float = _field(0.01, "warmup, fraction of all steps")
    warmup_steps: int = _field(0, "warmup in steps if > 0 (overrides warmup; WSD branches)")
    min_lr_ratio: float = _field(0.0, "final lr as a fraction of the peak (0: to zero)")
    decay_fraction: float = _field(0.2, "wsd: the decay's fraction of all steps")
    decay_shape: DecayShape = _field("linear", "wsd: linear | 1-sqrt")
    epochs: int = _field(8, "passes over the pool's training split")
    eval_every: float = _field(1.0, "epochs between evaluations (at most 1)")
    eval_spacing: EvalSpacing = _field(
        "even",
        "even: every eval_every epochs; log: after epochs 1, 2, 3, 4, 6, 8, 12, 16, ..., the last "
        "and each of the last decay_fraction (the training loss: the mean over the last epoch)",
    )
    log_every: int = _field(0, "steps between train-loss lines (0: only at evaluations)")
    seed: int = _field(0, "model initialisation and data order")
    device: str = _field("auto", "auto | cpu | cuda")
    compile: bool = _field(False, "torch.compile the model")
    threads: int = _field(0, "CPU threads per process (0: torch's default)")
    gpus: int = _field(
        1, "processes the run trains on with DDP, a GPU each (gloo on a CPU); sweeps launch them"
    )
    vocab_size: int = _field(0, "0: the pool's; otherwise must equal it")
    save_steps: tuple[int, ...] = _field(
        (),
        "steps whose checkpoints are kept (WSD trunk): 10,20",
        _parse_save_steps,
        lambda steps: ",".join(str(s) for s in steps),
    )
    init_from: str = _field("", "checkpoints/step-N.pt of another run to continue (WSD branch)")
    batch_schedule: BatchPhases = _field(
        (),
        "f:B,...: batch B (sequences) from fraction f of the epochs; lr * sqrt(B / batch_size)",
        parse_batch_schedule,
        batch_schedule_text,
    )
    noise_scale: bool = _field(
        False, "log the gradient noise scale (needs >= 2 micro-batches or processes per step)"
    )
    token_losses: bool = _field(
        False, "keep each validation token's loss at the final evaluation (ensembles)"
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


def make_run_config(values: dict) -> RunConfig:
    """A RunConfig from a dict of field values, as YAML, config.json or key=value text give them
    (repro.typed_fields, in its text mode: "8" and "true" convert; a choice such as `loader`
    stays a string, checked by check_fields)."""
    return load_dataclass(RunConfig, values, text=True)


def config_record(config: RunConfig) -> dict:
    """The config as config.json holds it: every field, tuples in their text form (0:4,0.5:16),
    so make_run_config reads it back unchanged."""
    record = {f.name: getattr(config, f.name) for f in fields(RunConfig)}  # every field immutable
    for f in fields(RunConfig):
        if "text" in f.metadata:
            record[f.name] = f.metadata["text"](record[f.name])
    return record


@functools.cache
def _default_record() -> dict:
    """config_record(RunConfig()), computed once (run_id compares every run with it)."""
    return config_record(RunConfig())


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


NUMERICS = 3
"""Raised whenever the same run fields start to train differently (a default, the decay groups,
the model, the data order): part of every run's identity, so that a run store never mixes runs of
different numerics. 1: until 2026-11; 2: cosine to 0, Levanter's decay mask, rope theta 10,000;
3: the epochs read as one stream of sequences (loaders.EpochSteps: no partial batch dropped at an
epoch's end)."""


def run_identity(config: RunConfig) -> dict:
    """The fields that identify a run wherever the checkout lives: the pool by its content
    fingerprint (once built) and a WSD branch's start by <trunk run>/checkpoints/<file>, not by
    absolute paths; plus the NUMERICS version."""
    fields = config_record(config) | {"numerics": NUMERICS}
    meta = built_meta(config.pool) if config.pool else None
    if meta is not None:
        fields["pool"] = "fingerprint:" + meta["fingerprint"]
    if config.init_from:
        fields["init_from"] = "/".join(Path(config.init_from).parts[-3:])
    return fields


def run_id(config: RunConfig) -> str:
    """Stable 12-hex-digit identity of a resolved config: a hash of the fields that differ from
    their defaults (so adding a new field with a default that keeps old behaviour keeps existing
    ids) and of the NUMERICS version, with the pool and a branch's checkpoint identified
    independently of absolute paths (run_identity)."""
    defaults = _default_record()  # has no "numerics": the version always counts
    changed = {k: v for k, v in run_identity(config).items() if v != defaults.get(k)}
    return hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:12]


STACKABLE = (
    "pool",
    "loader",
    "seed",
    "epochs",
    "schedule",
    "warmup",
    "warmup_steps",
    "min_lr_ratio",
    "decay_fraction",
    "decay_shape",
    "eval_every",
    "eval_spacing",
    "log_every",
    "save_steps",
    "init_from",
    "lr",
    "weight_decay",
    "embedding_weight_decay",
    "adam_beta1",
    "adam_beta2",
)
"""Run fields that may differ between the members of a stack (train_stacked): each member keeps
its own data, schedule, optimizer and evaluations; the rest (the model's shape, the batch and its
micro-batches, the device) must agree, and so must the pools' vocabulary size."""


def stack_key(config: RunConfig) -> str:
    """Runs with equal keys can train as one stack: the same model shape and batch (a run with a
    batch_schedule, whose batch changes with its epochs, trains alone)."""
    identity = run_identity(config)
    if config.batch_schedule:
        return json.dumps(identity, sort_keys=True)
    key = {k: v for k, v in identity.items() if k not in STACKABLE}
    meta = built_meta(config.pool) if config.pool else None
    key["vocab"] = meta["vocab_size"] if meta else None
    return json.dumps(key, sort_keys=True)


# --- validation before any compute ------------------------------------------------------------


def check_fields(config: RunConfig, world_size: int = 1) -> None:
    """Raise a one-line ReproError for a config that is wrong whatever the pool and the machine
    (presets check their runs with it)."""
    if config.model not in SIZES:
        raise ReproError(f"unknown model size {config.model!r}; choose one of: {', '.join(SIZES)}")
    if config.loader not in LOADERS:
        raise ReproError(f"unknown loader {config.loader!r}; choose one of: {', '.join(LOADERS)}")
    try:
        config.schedule_for(1)
    except ValueError as exc:
        raise ReproError(str(exc)) from None
    for name in ("lr", "epochs", "batch_size", "seq_len", "eval_every"):
        if getattr(config, name) <= 0:
            raise ReproError(f"{name} must be positive, got {getattr(config, name)}")
    if config.eval_every > 1:
        raise ReproError(
            f"eval_every={config.eval_every} epochs; "
            "evaluate at least once per epoch (eval_every <= 1)"
        )
    if config.eval_spacing not in EVAL_SPACINGS:
        raise ReproError(
            f"eval_spacing={config.eval_spacing!r}; choose one of: {', '.join(EVAL_SPACINGS)}"
        )
    if config.eval_spacing == "log" and config.eval_every != 1:
        raise ReproError(
            f"eval_spacing=log evaluates after whole epochs, but eval_every={config.eval_every}; "
            "set eval_every 1 or eval_spacing even"
        )
    if config.weight_decay < 0 or config.embedding_weight_decay < 0:
        raise ReproError("weight decays must be >= 0")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(config, name) < 1:
            raise ReproError(
                f"{name}={getattr(config, name)} is outside [0, 1); "
                f"give a decay per step such as {getattr(RunConfig, name)}"
            )
    if config.micro_batch < 0 or config.seed < 0 or config.threads < 0 or config.warmup_steps < 0:
        raise ReproError("micro_batch, seed, threads and warmup_steps must be >= 0")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", config.device):
        raise ReproError(f"device={config.device!r}; use auto, cpu, cuda or cuda:N")
    if abs(1 / config.eval_every - round(1 / config.eval_every)) > 1e-9:
        raise ReproError(
            f"eval_every={config.eval_every} epochs must be 1/k for a whole number k "
            "(1, 0.5, 0.25, ...)"
        )
    if config.gpus < 1:
        raise ReproError(f"gpus must be at least 1, got {config.gpus}")
    if world_size > 1 and config.gpus not in (1, world_size):
        raise ReproError(
            f"gpus={config.gpus} but {world_size} processes were started; start {config.gpus}"
        )
    _check_batches(config, max(world_size, config.gpus))
    max_len = SIZES[config.model].max_seq_len
    if config.seq_len > max_len:
        raise ReproError(
            f"seq_len {config.seq_len} exceeds model {config.model}'s limit of {max_len} tokens"
        )


def _check_batches(config: RunConfig, world_size: int) -> None:
    """Every batch a run uses splits into micro-batches over the processes (two or more of them
    with noise_scale)."""
    for batch_size in batch_sizes(config):
        micro, n_micro = micro_batches(config, batch_size, world_size)
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


def batch_sizes(config: RunConfig) -> set[int]:
    """Every batch size (sequences per step) the run uses: batch_size and its schedule's."""
    return {config.batch_size, *(batch for _, batch in config.batch_schedule)}


def micro_batches(config: RunConfig, batch_size: int, world_size: int) -> tuple[int, int]:
    """(sequences per micro-batch, micro-batches per step) of one process for a global batch."""
    per_rank = batch_size // world_size
    micro = min(config.micro_batch, per_rank) if config.micro_batch else per_rank
    return micro, (per_rank // micro if micro else 0)
