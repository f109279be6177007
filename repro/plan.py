"""What a preset costs before anything runs (`repro plan`, printed first by `repro reproduce`).

Per notebook: the runs it adds (a run two notebooks share counts once, where it is first needed),
their training tokens, their FLOPs (training at `flops_per_token`, attention included, plus
evaluation forward passes at a third of that per token), and GPU-hours at an achieved FLOP/s that is
measured (the latest GPU benchmark, benchmarks/results/gpu-throughput.json) or assumed (and then
said to be). Runs share the GPUs, so the wall time on G GPUs is the GPU-hours over G but
never less than the longest run (a run on g GPUs: its GPU-hours over g). Nothing here builds a
pool or trains.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from repro.data.pool import built_meta
from repro.design.grids import (
    ORIGINAL_RECIPE,
    beta2_ablation_batches,
    ensemble_grid,
    noise_scale_grid,
)
from repro.design.presets import Preset
from repro.errors import ReproError
from repro.runtime.config import run_id
from repro.runtime.files import read_json, write_json
from repro.runtime.member import evaluation_epochs
from repro.runtime.shapes import flops_per_token, model_config, parameter_count
from repro.store.grid import expand
from repro.study import Study

ASSUMED_PEAK_FLOPS = 989e12  # H100 / H200 SXM, dense bf16 (NVIDIA's datasheets)
ASSUMED_MFU = 0.40
GPU_BENCHMARK = Path("benchmarks/results/gpu-throughput.json")  # benchmarks/gpu_check.sh
KNOWN_VOCABS = {"meta-llama/Meta-Llama-3-8B": 128_256}  # hub tokenizers' sizes, before a build


@dataclass(frozen=True)
class GpuSpeed:
    """Achieved training FLOP/s of one GPU and where the number comes from."""

    flops_per_s: float
    source: str


def gpu_speed(root: Path) -> GpuSpeed:
    """The best MFU of the latest GPU benchmark times its measured matmul peak, if one was run;
    else ASSUMED_MFU of ASSUMED_PEAK_FLOPS."""
    path = root / GPU_BENCHMARK
    if path.is_file():
        result = json.loads(path.read_text())
        best = max(result["runs"], key=lambda r: r["mfu"])
        return GpuSpeed(
            best["mfu"] * result["peak_matmul_flops_per_s"],
            f"measured: MFU {best['mfu']:.0%} ({best['model']}, micro-batch "
            f"{best['micro_batch']}) of a {result['peak_matmul_flops_per_s'] / 1e12:,.0f} TFLOP/s "
            f"matmul peak, {GPU_BENCHMARK}",
        )
    return GpuSpeed(
        ASSUMED_MFU * ASSUMED_PEAK_FLOPS,
        f"assumed: MFU {ASSUMED_MFU:.0%} of {ASSUMED_PEAK_FLOPS / 1e12:,.0f} TFLOP/s "
        "(H100/H200 dense bf16); no GPU benchmark yet (benchmarks/gpu_check.sh)",
    )


CPU_MAX_PARAMS = 10_000_000
"""A preset whose models all have at most this many parameters is priced on this machine's CPU too
(a short measured benchmark, cpu_speed)."""


@dataclass(frozen=True)
class CpuSpeed:
    """Seconds of one training pass (forward, backward and update of one micro-batch) on one CPU
    thread, as a sweep's worker runs it, per (model, seq_len in tokens, micro-batch in sequences);
    measured on this machine by cpu_speed."""

    pass_seconds: dict[tuple[str, int, int], float]
    workers: int

    def seconds(self, runs: pd.DataFrame) -> pd.Series:
        """Each run's worker-seconds: its passes (training and evaluation) at the measured rate."""
        keys = zip(runs["model"], runs["seq_len"], runs["micro_batch"])
        return runs["passes"] * [self.pass_seconds[key] for key in keys]


def cpu_speed(keys: set[tuple[str, int, int]], vocab: int, workers: int) -> CpuSpeed:
    """Measure the seconds of a training pass through the trainer's own step on one thread
    (repro.bench.measure.throughput: 1 warm-up step, 3 timed) at the smallest, the middle and the
    largest micro-batch of each (model, seq_len) of `keys`, and interpolate between them on log-log
    axes (a pass's fixed overhead makes its time grow slower than its micro-batch). A pass with
    gradient accumulation skips the update, so this prices it a little high."""
    seconds = {}
    for model, seq_len in sorted({(m, n) for m, n, _ in keys}):
        micros = sorted(b for m, n, b in keys if (m, n) == (model, seq_len))
        measured = sorted({micros[0], micros[len(micros) // 2], micros[-1]})
        times = [_pass_seconds(model, vocab, seq_len, b) for b in measured]
        logs = np.interp(np.log(micros), np.log(measured), np.log(times))
        seconds |= {(model, seq_len, b): float(np.exp(t)) for b, t in zip(micros, logs)}
    return CpuSpeed(seconds, workers)


@functools.cache
def _pass_seconds(model: str, vocab: int, seq_len: int, micro_batch: int) -> float:
    """One measurement per process of each shape (cpu_speed)."""
    import torch

    from repro.bench.measure import throughput

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return throughput(model, vocab, seq_len, micro_batch, steps=3, warmup=1)["step_s"]
    finally:
        torch.set_num_threads(threads)


MEASURED_TIMES = "reproduce-times.json"
"""runs/<preset>/reproduce-times.json: the stages and wall seconds of the last whole reproduction
of the preset on this checkout (record_times), which `repro plan` shows beside its estimate."""


FROM_SCRATCH = "from-scratch-times.json"
"""figures/<preset>/from-scratch-times.json: the stage times of the last whole reproduction that
trained every run (its store empty at the start), the machine's CPU count and the preset's
fingerprint, committed with the figures it made, so that `repro plan` and `repro reproduce` say what
the study costs from scratch before anything trains."""


def preset_fingerprint(preset: Preset) -> str:
    """12 hex digits of the SHA-256 of every field of `preset`: a times record made under other
    fields (another grid, other workers) is not this preset's."""
    fields = json.dumps(asdict(preset), sort_keys=True, default=str)
    return hashlib.sha256(fields.encode()).hexdigest()[:12]


def record_times(
    results_dir: Path,
    times: list[tuple[str, float]],
    fingerprint: str,
    from_scratch_dir: Path | None = None,
) -> None:
    """Keep a whole reproduction's stage times (wall seconds) and its preset's fingerprint in
    results_dir/MEASURED_TIMES and, for one that trained every run, in
    from_scratch_dir/FROM_SCRATCH too."""
    record = {"finished": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count()}
    record |= {"preset": fingerprint}
    record |= {"stages": dict(times), "total_s": sum(dict(times).values())}
    for folder, name in ((results_dir, MEASURED_TIMES), (from_scratch_dir, FROM_SCRATCH)):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            write_json(folder / name, record)


def from_scratch_stages(figures_dir: Path, fingerprint: str) -> dict[str, float]:
    """Stage -> wall seconds of the last reproduction from scratch (figures_dir/FROM_SCRATCH) of
    the preset with this fingerprint; empty where none was recorded."""
    record = _times_record(figures_dir / FROM_SCRATCH)
    return record["stages"] if record and record.get("preset") == fingerprint else {}


def _measured_lines(results_dir: Path, figures_dir: Path, fingerprint: str) -> str:
    """The wall time of the last whole reproduction here and of the last one from scratch, where
    they were recorded, marked where the preset has changed since."""
    text = ""
    for path, what in (
        (figures_dir / FROM_SCRATCH, "from scratch: the last reproduction that trained every run"),
        (results_dir / MEASURED_TIMES, "measured here: the last whole reproduction"),
    ):
        record = _times_record(path)
        if record:
            cpus = f", {record['cpus']} CPUs" if record.get("cpus") else ""
            changed = record.get("preset", fingerprint) != fingerprint  # unrecorded: unknown
            text += (
                f"\n{what} ({record['finished']}{cpus}) took {_hours(record['total_s'] / 3600)} "
                f"of wall time, growth and notebooks included"
                f"{', with other preset fields than now' if changed else ''} ({path})"
            )
    return text


def _times_record(path: Path) -> dict | None:
    """A record that record_times wrote, or None where there is none; one without its fields is
    a one-line error."""
    if not path.is_file():
        return None
    rewrite = "delete it; the next whole reproduction writes it again"
    record = read_json(path, rewrite)
    complete = isinstance(record, dict) and {"finished", "stages", "total_s"} <= set(record)
    if not complete or not isinstance(record["stages"], dict):
        raise ReproError(
            f"{path} is not a record of stage times (finished, stages, total_s): {rewrite}"
        )
    return record


class _Unbuilt(Study):
    """The study's grids over pool folders that are named, not built."""

    def pools(self) -> list[Path]:
        return [self.preset.pool_dir(self.data_dir, seed) for seed in self.preset.pools.seeds]

    def _pools_of(self, tokens: int) -> list[Path]:
        P = self.preset
        if tokens == P.pools.recipe.tokens:
            return self.pools()
        return [P.sized_pool_dir(self.data_dir, seed, tokens) for seed in P.pools.seeds]


def notebook_grids(preset: Preset) -> dict[str, list[dict]]:
    """The grids each notebook sweeps, in the order the notebooks run: Study.notebook_grids and
    stand-ins for those that depend on results. 03's tying grid, where it trains at 02's optimal
    batch (ablations.tying_batch_size 0), is planned at the first ablation batch (its cost hardly
    depends on the batch). The schedules train at the best fixed batch's epoch budget, and 05's
    noise-scale runs at each batch's tuned one: both planned at the largest (an upper bound)."""
    study = _Unbuilt(preset, Path("."), Path("data/pools"), Path("runs") / preset.name, 1)
    grids = study.notebook_grids()
    if not preset.ablations.tying_batch_size:
        grids["03"].insert(1, study.embedding_grid(preset.ablations.batch_sizes[0]))
    if preset.schedules.ramps:
        slices = {
            str(p): (max(preset.grid.epochs), preset.grid.weight_decays[0]) for p in study.pools()
        }
        grids["04"] = study.schedule_grid(slices)
    grids["05"][:0] = noise_scale_grid(preset, _noise_stand_ins(preset, study.pools()))
    for notebook, stand_ins in _confirmation_stand_ins(preset).items():
        grids[notebook] += stand_ins
    grids["06"] += _ensemble_stand_ins(preset)
    return {notebook: grids.get(notebook, []) for notebook in ("02", "03", "04", "05", "06")}


def _ensemble_stand_ins(preset: Preset) -> list[dict]:
    """06's ensemble members as planned before 02 has chosen their configurations: at the
    smallest, the largest and the middle batch (the best batch's stand-in), each at its middle
    lr, the first weight decay and the study's epoch cap (an upper bound)."""
    P = preset
    if not P.repetition.ensemble_pools:
        return []
    seeds = P.pools.confirmation_seeds[: P.repetition.ensemble_pools]
    pools = [P.confirmation_pool_dir(Path("data/pools"), seed) for seed in seeds]
    batches = sorted(P.grid.batch_sizes)
    grids = []
    for batch in dict.fromkeys([batches[0], batches[-1], batches[len(batches) // 2]]):
        lrs = P.grid.lrs[batch]
        fields = P.run_fields(model=P.grid.models[0], batch_size=batch, **ORIGINAL_RECIPE)
        fields |= {"lr": lrs[len(lrs) // 2], "weight_decay": P.grid.weight_decays[0]}
        fields |= {"epochs": P.grid.cap} | P.beta2_fields(batch)
        grids.append(ensemble_grid(fields, pools, P.repetition.ensemble_members))
    return grids


def _confirmation_stand_ins(preset: Preset) -> dict[str, list[dict]]:
    """The confirmation runs (pools.confirmation_seeds) as planned before the arms are chosen:
    one run per arm and confirmation pool at the arm's batch, its middle lr, the first weight
    decay and the study's epoch cap (an upper bound; a chosen budget is at most the cap). Arms:
    02, one per model and batch size and per beta2-ablated batch; 03, one per loader and ablation
    batch, per tying x embedding decay cell and per combined-recipe batch."""
    P, data_dir = preset, Path("data/pools")
    pools = [str(P.confirmation_pool_dir(data_dir, seed)) for seed in P.pools.confirmation_seeds]
    if not pools:
        return {}

    def arm(model: str, batch: int, **recipe) -> dict:
        lrs = P.grid.lrs[batch]
        fields = P.run_fields(model=model, batch_size=batch, **(ORIGINAL_RECIPE | recipe))
        fixed = fields | {"lr": lrs[len(lrs) // 2], "weight_decay": P.grid.weight_decays[0]}
        return {
            "fixed": fixed | {"epochs": P.grid.cap} | P.beta2_fields(batch),
            "axes": {"pool": pools},
        }

    first, ablated, tying = P.grid.models[0], P.ablations.batch_sizes, P.ablations.tying_batch_size
    sweep = [arm(m, b) for m in P.grid.models for b in P.grid.batch_sizes]
    sweep += [arm(first, b) for b in beta2_ablation_batches(P)]
    recipes = [arm(first, b, loader=k) for b in ablated for k in ("repeat", "shuffle", "repack")]
    recipes += [
        arm(first, tying or ablated[0], tie_embeddings=tie, embedding_weight_decay=decay)
        for tie in (False, True)
        for decay in (0.0, max(P.ablations.embedding_weight_decays))
    ]
    recipes += [arm(first, b, loader="repack", tie_embeddings=True) for b in ablated]
    return {"02": sweep, "03": recipes}


def _noise_stand_ins(preset: Preset, pools: list[Path]) -> list[dict]:
    """05's noise-scale runs as planned before 02 has tuned them: each noise-scale batch on every
    pool at its middle lr, the first weight decay and the largest epoch budget."""
    return [
        preset.run_fields(model=preset.grid.models[0], batch_size=b, **ORIGINAL_RECIPE)
        | {"pool": str(pool), "lr": preset.grid.lrs[b][len(preset.grid.lrs[b]) // 2]}
        | {"weight_decay": preset.grid.weight_decays[0]}
        | preset.beta2_fields(b)
        for pool in pools
        for b in preset.critical_batch.noise_scale_batches
    ]


def run_rows(grid: dict, pool_tokens: dict[str, int], val_tokens: int, vocab: int) -> list[dict]:
    """One row per run of `grid`: tokens trained and FLOPs spent. A WSD branch (wsd_branches)
    trains only its cool-down, the last `decay_fraction` of its budget; its trunk trains the
    longest budget."""
    configs = expand(grid)
    longest: dict[str, int] = {}
    if grid.get("wsd_branches"):
        for c in configs:
            family = run_id(replace(c, epochs=0))
            longest[family] = max(longest.get(family, 0), c.epochs)
    rows = []
    for c in configs:
        family = run_id(replace(c, epochs=0))
        trained = c.epochs
        if longest and c.epochs < longest[family]:
            trained = c.decay_fraction * c.epochs
        per_token = flops_per_token(model_config(c.model, vocab, c.tie_embeddings), c.seq_len)
        tokens = trained * pool_tokens[c.pool]
        schedule = evaluation_epochs(c.epochs, c.eval_every, c.eval_spacing, c.decay_fraction)
        evals = 1 + sum(e > c.epochs - trained for e in schedule)  # a branch's: after its start
        micro = min(c.micro_batch or c.batch_size, c.batch_size)
        passes = math.ceil(tokens / c.seq_len / c.batch_size) * math.ceil(c.batch_size / micro)
        rows.append(
            {
                "run_id": run_id(c),
                "model": c.model,
                "seq_len": c.seq_len,
                "micro_batch": micro,
                "tokens": tokens,
                "flops": per_token * (tokens + evals * val_tokens / 3),
                "passes": passes + evals * math.ceil(val_tokens / c.seq_len / micro) / 3,
                "gpus": c.gpus,
            }
        )
    return rows


def plan(preset: Preset, vocab: int, speed: GpuSpeed, cpu: bool = False) -> pd.DataFrame:
    """Per notebook (then "all"): runs, training tokens, FLOPs, GPU-hours and the longest run's
    hours, at `speed`; with `cpu`, also CPU worker-hours measured here (cpu_speed)."""
    study = _Unbuilt(preset, Path("."), Path("data/pools"), Path("runs") / preset.name, 1)
    pool_tokens = {str(p): preset.pools.recipe.tokens for p in study.pools()}
    for seed in preset.pools.confirmation_seeds:
        pool_tokens[str(preset.confirmation_pool_dir(study.data_dir, seed))] = (
            preset.pools.recipe.tokens
        )
    for seed in preset.pools.seeds:
        sized = [*preset.critical_batch.pool_tokens, *preset.fresh_pool_tokens().values()]
        for tokens in sized:
            pool_tokens[str(preset.sized_pool_dir(study.data_dir, seed, tokens))] = tokens
    seen: set[str] = set()
    runs = {}
    for notebook, grids in notebook_grids(preset).items():
        rows = [
            row
            for grid in grids
            for row in run_rows(grid, pool_tokens, preset.pools.recipe.val_tokens, vocab)
        ]
        runs[notebook] = pd.DataFrame(
            [r for r in rows if not (r["run_id"] in seen or seen.add(r["run_id"]))]
        )
    keys = {k for new in runs.values() if len(new) for k in _pass_keys(new)}
    on_cpu = cpu_speed(keys, vocab, preset.execution.workers) if cpu else None
    everything = pd.DataFrame([_totals(nb, new, speed, on_cpu) for nb, new in runs.items()])
    total = everything.drop(columns="notebook").sum().to_dict()
    total["runs"] = int(total["runs"])
    total["longest run h"] = everything["longest run h"].max()
    total["GPUs per run"] = int(everything["GPUs per run"].max())
    total["longest CPU run h"] = everything["longest CPU run h"].max()
    return pd.concat([everything, pd.DataFrame([{"notebook": "all", **total}])], ignore_index=True)


def _pass_keys(runs: pd.DataFrame) -> set[tuple[str, int, int]]:
    return set(zip(runs["model"], runs["seq_len"], runs["micro_batch"]))


def _totals(notebook: str, runs: pd.DataFrame, speed: GpuSpeed, cpu: CpuSpeed | None) -> dict:
    if not len(runs):
        runs = pd.DataFrame(columns=["tokens", "flops", "gpus", "passes"], dtype=float)
    hours = runs["flops"] / speed.flops_per_s / 3600
    cpu_hours = cpu.seconds(runs) / 3600 if cpu and len(runs) else pd.Series([0.0])
    return {
        "notebook": notebook,
        "runs": len(runs),
        "tokens": float(runs["tokens"].sum()),
        "FLOPs": float(runs["flops"].sum()),
        "GPU-h": float(hours.sum()),
        "longest run h": float((hours / runs["gpus"]).max()) if len(runs) else 0.0,
        "GPUs per run": int(runs["gpus"].max()) if len(runs) else 1,
        "CPU-h": float(cpu_hours.sum()) if cpu else math.nan,
        "longest CPU run h": float(cpu_hours.max()) if cpu else math.nan,
    }


def wall_hours(gpu_hours: float, longest: float, gpus: int) -> float:
    """Wall time of runs spread over `gpus` GPUs: no less than the longest run."""
    return max(gpu_hours / gpus, longest)


def pool_vocab(preset: Preset, built: dict | None) -> int:
    """The vocab the plan prices the output head at: the built pool's, the preset's, or a known
    hub tokenizer's."""
    if built:
        return int(built["vocab_size"])
    if not preset.pools.recipe.tokenizer:
        return preset.pools.recipe.vocab_size
    if preset.pools.recipe.tokenizer in KNOWN_VOCABS:
        return KNOWN_VOCABS[preset.pools.recipe.tokenizer]
    raise ReproError(
        f"preset {preset.name}: the vocab of tokenizer {preset.pools.recipe.tokenizer} is known "
        "once the pool is built; build it (repro data build) or pass --vocab"
    )


def describe_plan(
    table: pd.DataFrame, speed: GpuSpeed, gpus: tuple[int, ...], cpu_workers: int = 0
) -> str:
    """The plan as a fixed-width table (hours), with where the GPU speed comes from; with
    `cpu_workers`, also the CPU worker-hours and the wall time on that many workers."""
    head = f"{'notebook':<8} {'runs':>6} {'tokens':>8} {'FLOPs':>8} {'GPU-h':>8} {'longest':>8}"
    head += "".join(f" {f'wall {g} GPU':>10}" for g in gpus)
    lines = [head + (f" {'CPU-h':>8} {f'wall {cpu_workers} CPU':>10}" if cpu_workers else "")]
    for row in table.itertuples(index=False):
        walls = "".join(
            f" {_hours(wall_hours(row[4], row[5], g)) if g >= row[6] else '-':>10}" for g in gpus
        )
        cpu = (
            f" {_hours(row[7]):>8} {_hours(wall_hours(row[7], row[8], cpu_workers)):>10}"
            if cpu_workers
            else ""
        )
        lines.append(
            f"{row[0]:<8} {row[1]:>6,} {row[2]:>8.2g} {row[3]:>8.2g} {_hours(row[4]):>8} "
            f"{_hours(row[5]):>8}" + walls + cpu
        )
    lines.append(
        f"hours at {speed.flops_per_s / 1e12:,.0f} TFLOP/s per GPU; small batches of small models "
        "run slower"
    )
    lines.append(
        "longest: one run on its GPUs (run field gpus), scaling perfectly; wall: a lower bound "
        "(runs packed perfectly); -: fewer GPUs than a run needs"
    )
    lines.append(f"GPU speed {speed.source}")
    if cpu_workers:
        lines.append(
            "CPU-h: worker-hours at training-pass times measured here on one thread (a sweep "
            f"worker's), stacking not counted; wall on the preset's {cpu_workers} workers"
        )
    return "\n".join(lines)


def _hours(hours: float) -> str:
    if hours < 0.01:
        return "<0.01 h"
    return f"{hours:,.2f} h" if hours < 10 else f"{hours:,.0f} h"


def plan_text(
    preset: Preset, root: Path, gpus: tuple[int, ...] = (1, 8), vocab: int | None = None
) -> str:
    """The plan of `preset` as printed by `repro plan` and at the start of `repro reproduce`, on
    `gpus` GPU counts, at `vocab` (default: the built pool's)."""
    if min(gpus) < 1:
        raise ReproError(f"--gpus takes GPU counts of at least 1, got {min(gpus)}")
    if vocab is not None and vocab < 1:
        raise ReproError(f"--vocab takes a vocab size of at least 1, got {vocab}")
    built = built_meta(preset.pool_dir(root / "data" / "pools", preset.pools.seeds[0]))
    vocab = vocab or pool_vocab(preset, built)
    speed = gpu_speed(root)
    on_cpu = (
        max(parameter_count(model_config(m, vocab)) for m in preset.grid.models) <= CPU_MAX_PARAMS
    )
    table = plan(preset, vocab, speed, cpu=on_cpu)
    epochs = ", and at twice a best epoch budget that is the largest tried"
    growth = (
        f"\ngrid growth: up to {preset.growth.rounds} rounds add runs beside each lr or weight "
        f"decay not bracketed around its group's choice{epochs if preset.growth.epochs else ''} "
        "(repro.analysis.growth); not priced above"
        if preset.growth.rounds
        else ""
    )
    text = describe_plan(table, speed, gpus, preset.execution.workers if on_cpu else 0) + growth
    text += _measured_lines(
        root / "runs" / preset.name, root / "figures" / preset.name, preset_fingerprint(preset)
    )
    return f"plan of preset {preset.name} (vocab {vocab:,}):\n" + text
