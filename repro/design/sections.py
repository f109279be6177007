"""The sections of a preset (repro.design.presets.Preset): the pools, the tuned grid, execution,
growth, and one per notebook. Each checks its own fields where it is defined; a preset file sets any
of them (repro.design.preset_files). Units: tokens for pools and seq_len, sequences for batch sizes,
epochs for budgets and eval_every.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.data.build import PoolSpec, check_spec
from repro.errors import ReproError
from repro.runtime.config import (
    BatchPhases,
    EvalSpacing,
    RunConfig,
    batch_schedule_text,
    parse_batch_schedule,
)
from repro.runtime.loaders import LOADERS
from repro.typed_fields import load_dataclass


def _at_least(section: str, minimum: int, **values: int | tuple[int, ...]) -> None:
    """A one-line error for the first of `values` (an int or a tuple of them) below `minimum`."""
    for name, value in values.items():
        low = min(value, default=minimum) if isinstance(value, tuple) else value
        if low < minimum:
            raise ReproError(f"{section}.{name} must be >= {minimum}, got {low}")


def _not_empty(section: str, **values: tuple) -> None:
    """A one-line error for the first of `values` that is empty."""
    for name, value in values.items():
        if not value:
            raise ReproError(f"{section}.{name} is empty; give at least one value")


@dataclass(frozen=True)
class Pools:
    """The pools: one recipe (its seed fields unset), one pool per seed; each seed draws its
    training documents, and every pool shares the validation documents of the first. The
    confirmation pools (`confirmation_seeds`; none: verdicts over the pools of `seeds`) each draw
    their own training and validation documents with their seed: each claim's arms, chosen on
    the pools of `seeds`, are retrained on them (repro.analysis.confirmation)."""

    recipe: PoolSpec
    seeds: tuple[int, ...]
    confirmation_seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _not_empty("pools", seeds=self.seeds)
        every = [*self.seeds, *self.confirmation_seeds]
        if len(set(every)) < len(every):
            raise ReproError(
                "pools.seeds and pools.confirmation_seeds repeat a seed; independent pools need "
                "distinct seeds"
            )
        try:
            check_spec(self.recipe)
        except ReproError as exc:
            raise ReproError(f"pools.recipe: {exc}") from None


def _run_fields(value, where: str) -> dict[str, bool | int | float | str]:
    """Grid.run_fields as a preset file writes them, each converted to its run field's type."""
    if not isinstance(value, dict):
        raise ReproError(f"{where}: expected a mapping of run fields, got {value!r}")
    listed = [k for k, v in value.items() if not isinstance(v, bool | int | float | str)]
    if listed:  # a list or mapping (maybe a YAML alias bomb) is never a run field's value
        raise ReproError(f"{where}: {listed[0]} must be one value, not a list or mapping")
    config = load_dataclass(RunConfig, value, where)
    return {name: getattr(config, name) for name in value}


@dataclass(frozen=True)
class Grid:
    """The tuned batch sweep (notebook 02) that every other notebook builds on: model sizes x batch
    sizes x lr (a grid per batch) x weight decay x epoch budget. A budget is tuned like lr: each is
    its own run whose schedule ends there (cosine to 0), or with wsd_branches a WSD cool-down (the
    last 20% of its steps) branched from one run of the largest budget (grid.plan_grid)."""

    models: tuple[str, ...]  # sizes of repro.runtime.shapes.SIZES
    seq_len: int  # tokens
    batch_sizes: tuple[int, ...]
    lrs: dict[int, tuple[float, ...]]  # batch size -> its lr grid
    weight_decays: tuple[float, ...]
    epochs: tuple[int, ...]
    # the largest budget the study allows, where its claims stop (the paper's: 32); an arm whose
    # best budget is the cap is "at cap", not censored (repro.analysis.selection); 0: max(epochs)
    epoch_cap: int = 0
    wsd_branches: bool = False
    eval_every: float = 0.5  # epochs (the within-run curve; the tuned point is each run's end)
    # the batch sweep's evaluations (02, 03, 05 and the runs retrained from their choices): even,
    # every eval_every epochs; log, after epochs 1, 2, 3, 4, 6, 8, 12, ... and each epoch of the
    # cool-down (RunConfig.eval_spacing)
    eval_spacing: EvalSpacing = "even"
    # AdamW beta2 scaled with the batch: a run of batch B gets beta2 ** (B / this batch), the same
    # token half-life of its second-moment average (Marek et al. 2025), rounded to BETA2_DIGITS
    # significant digits of 1 - beta2; 0: the same betas at every batch
    beta2_half_life_batch: int = 0
    run_fields: dict[str, bool | int | float | str] = field(  # every run's, e.g. device, compile
        default_factory=dict, metadata={"parse": _run_fields}
    )
    downstream_tasks: tuple[str, ...] = ()  # lm-eval tasks at the tuned endpoints (repro eval)

    def __post_init__(self) -> None:
        names = ("models", "batch_sizes", "weight_decays", "epochs")
        _not_empty("grid", **{name: getattr(self, name) for name in names})
        _at_least("grid", 1, batch_sizes=self.batch_sizes, epochs=self.epochs)
        _at_least(
            "grid", 0, epoch_cap=self.epoch_cap, beta2_half_life_batch=self.beta2_half_life_batch
        )
        if self.epoch_cap and self.epoch_cap < max(self.epochs):
            raise ReproError(
                f"grid.epoch_cap {self.epoch_cap} is below the largest of grid.epochs "
                f"({max(self.epochs)}); the cap must allow every budget tried (0: that largest)"
            )
        missing = sorted(set(self.batch_sizes) - set(self.lrs))
        if missing:
            raise ReproError(f"grid: no lr grid for batch size {missing[0]}; add it under lrs")
        empty = sorted(b for b, lrs in self.lrs.items() if not lrs)
        if empty:
            raise ReproError(f"grid.lrs[{empty[0]}] is empty; give at least one lr")

    @property
    def cap(self) -> int:
        """The largest epoch budget the study allows (epochs): epoch_cap, else max(epochs)."""
        return self.epoch_cap or max(self.epochs)


@dataclass(frozen=True)
class Execution:
    """How runs are executed (not what they compute, but micro_batch also changes the sums'
    order): runs in parallel, runs of one shape and batch trained at once (repro.runtime.stacked,
    batches up to max_stacked_batch; 0: all), micro-batches (sequences; 0: the whole batch), and
    the processes (GPUs, DDP) each model's runs train on."""

    workers: int = 2
    stack: int = 1
    max_stacked_batch: int = 0
    micro_batch: int = 0
    gpus_per_run: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _at_least("execution", 1, workers=self.workers, stack=self.stack)
        _at_least("execution", 1, gpus_per_run=tuple(self.gpus_per_run.values()))


@dataclass(frozen=True)
class Growth:
    """Rounds of grid growth after each tuned sweep (repro.analysis.growth): a group whose lr or
    weight decay is not bracketed around its choice gets the missing neighbours; with `epochs`, a
    group whose best budget is its largest also gets twice that budget. 0 rounds: the grids stay
    fixed."""

    rounds: int = 0
    epochs: bool = False

    def __post_init__(self) -> None:
        _at_least("growth", 0, rounds=self.rounds)
        if self.epochs and not self.rounds:
            raise ReproError(
                "growth.epochs needs rounds of growth (set growth.rounds: 1, or growth.epochs: "
                "false)"
            )


@dataclass(frozen=True)
class BatchSweep:
    """Notebook 02 beyond the grid: "the usual batch" of a one-pass recipe (sequences; Kim et al.:
    64 at paper scale; 0: measured, the best batch at a budget of 1 epoch), and the batches that
    also run with the other beta2 setting (grids.beta2_ablation; (): the two smallest)."""

    one_pass_batch_size: int = 0
    beta2_ablation_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.beta2_ablation_batch_sizes)) < len(self.beta2_ablation_batch_sizes):
            raise ReproError("batch_sweep.beta2_ablation_batch_sizes repeats a batch size")


@dataclass(frozen=True)
class Ablations:
    """Notebook 03: the epoch orderings and the combined recipe at `batch_sizes`; the tying x
    embedding decay grid at `tying_batch_size` (0: the batch 02 finds best) with `tying_loader`
    (on repack, its untied-no-decay and tied-with-decay cells are the REPACK and combined arms'
    runs, trained once)."""

    batch_sizes: tuple[int, ...] = (4, 32)
    tying_batch_size: int = 0
    tying_loader: str = "shuffle"
    embedding_weight_decays: tuple[float, ...] = (0.0, 0.1)

    def __post_init__(self) -> None:
        _not_empty("ablations", batch_sizes=self.batch_sizes)
        if self.tying_loader not in LOADERS:
            raise ReproError(
                f"ablations: unknown tying_loader {self.tying_loader!r}; choose one of: "
                + ", ".join(LOADERS)
            )
        decays = self.embedding_weight_decays
        if 0.0 not in decays or not any(w > 0 for w in decays):
            raise ReproError("ablations.embedding_weight_decays needs 0.0 and a positive value")


@dataclass(frozen=True)
class Frontier:
    """Notebook 04: the sequences one GPU processes per step unit, and the GPU counts."""

    micro_batch: int = 4
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)

    def __post_init__(self) -> None:
        _at_least("frontier", 1, micro_batch=self.micro_batch, gpu_counts=self.gpu_counts)


def _ramps(value, where: str) -> dict[str, BatchPhases]:
    """Schedules.ramps as a preset file writes them: name -> text (0:2,0.5:8) or pairs."""
    if not isinstance(value, dict):
        raise ReproError(f"{where}: expected a mapping of name: schedule, got {value!r}")
    return {str(k): parse_batch_schedule(v, f"{where}[{k}]") for k, v in value.items()}


@dataclass(frozen=True)
class Schedules:
    """Notebooks 04 and 05: batch-size schedules (name -> phases, written 0:2,0.5:8: from each
    fraction of the epochs, that batch), run with the lr grid of `batch` (lr * sqrt(B / batch) as
    the batch B changes)."""

    ramps: dict[str, BatchPhases] = field(default_factory=dict, metadata={"parse": _ramps})
    batch: int = 8

    def texts(self) -> dict[str, str]:
        """name -> the schedule as its runs' batch_schedule field reads (0:2,0.5:8)."""
        return {name: batch_schedule_text(phases) for name, phases in self.ramps.items()}


@dataclass(frozen=True)
class CriticalBatch:
    """Notebook 05: smaller pools (training tokens, one set per pool seed) for CBS vs data size;
    the batches whose runs log the gradient noise scale (each at its tuned point, on every pool)
    and their micro-batch (the estimator's small batch, sequences)."""

    pool_tokens: tuple[int, ...] = ()
    noise_scale_batches: tuple[int, ...] = ()
    noise_micro_batch: int = 2

    def __post_init__(self) -> None:
        _at_least("critical_batch", 1, pool_tokens=self.pool_tokens)
        _at_least("critical_batch", 1, noise_scale_batches=self.noise_scale_batches)


@dataclass(frozen=True)
class Repetition:
    """Notebook 06, the value of a repeated token. The fresh-data curve: one-epoch runs on pools of
    `fresh_multiples` x pools.recipe.tokens training tokens (one per pool seed; 1 is the pool
    itself), at the first model and weight decay, lr tuned, every batch that a pool holds. The
    ensembles: `ensemble_members` seeds (initialisation and data order) of each tuned
    configuration at the smallest, the largest and the best batch, on the first `ensemble_pools`
    confirmation pools (0: no ensembles)."""

    fresh_multiples: tuple[float, ...] = ()
    ensemble_members: int = 0
    ensemble_pools: int = 0

    def __post_init__(self) -> None:
        multiples = self.fresh_multiples
        if multiples and (len(set(multiples)) < 3 or min(multiples) <= 0):
            raise ReproError(
                "repetition.fresh_multiples needs 3 or more distinct positive multiples of the "
                f"pool (the fresh-data law has 3 parameters), got {list(multiples)}"
            )
        _at_least("repetition", 0, ensemble_pools=self.ensemble_pools)
        if self.ensemble_pools and self.ensemble_members < 2:
            raise ReproError("repetition.ensemble_members must be >= 2 where ensemble_pools is set")
