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

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from repro.data.pool import built_meta
from repro.errors import ReproError
from repro.presets import Preset
from repro.runtime.config import run_id
from repro.runtime.shapes import flops_per_token, model_config
from repro.study import Study
from repro.sweep import expand

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


class _Unbuilt(Study):
    """The study's grids over pool folders that are named, not built."""

    def pools(self) -> list[Path]:
        return [self.preset.pool_dir(self.data_dir, seed) for seed in self.preset.pool_seeds]

    def sized_pools(self) -> dict[int, list[Path]]:
        P = self.preset
        return {
            seed: [P.sized_pool_dir(self.data_dir, seed, t) for t in sorted(P.scaling_pool_tokens)]
            + [main]
            for seed, main in zip(P.pool_seeds, self.pools())
        }


def notebook_grids(preset: Preset) -> dict[str, list[dict]]:
    """The grids each notebook sweeps, in the order the notebooks run. 03's tying grid trains at
    02's optimal batch, unknown before 02; its cost does not depend on the batch, so it is planned
    at the first ablation batch. The schedules train at the best fixed batch's epoch budget,
    also unknown: they are planned at the largest (an upper bound)."""
    study = _Unbuilt(preset, Path("."), Path("data/pools"), Path("runs") / preset.name, 1)
    return {
        "02": [study.batch_sweep_grid(), study.beta2_ablation_grid()],
        "03": [
            study.loader_grid(),
            study.embedding_grid(preset.ablation_batch_sizes[0]),
            study.combined_grid(),
        ],
        "04": (
            study.schedule_grid(
                {str(p): (max(preset.epochs), preset.weight_decays[0]) for p in study.pools()}
            )
            if preset.batch_schedules
            else []
        ),
        "05": [
            *([study.noise_scale_grid()] if preset.noise_scale_batches else []),
            *(study.scaling_grids() if preset.scaling_pool_tokens else []),
        ],
    }


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
        evals = math.floor(trained / c.eval_every) + 1
        rows.append(
            {
                "run_id": run_id(c),
                "model": c.model,
                "tokens": tokens,
                "flops": per_token * (tokens + evals * val_tokens / 3),
                "gpus": c.gpus,
            }
        )
    return rows


def plan(preset: Preset, vocab: int, speed: GpuSpeed) -> pd.DataFrame:
    """Per notebook (then "all"): runs, training tokens, FLOPs, GPU-hours and the longest run's
    hours, at `speed`."""
    study = _Unbuilt(preset, Path("."), Path("data/pools"), Path("runs") / preset.name, 1)
    pool_tokens = {str(p): preset.pool.tokens for p in study.pools()}
    for seed in preset.pool_seeds:
        for tokens in preset.scaling_pool_tokens:
            pool_tokens[str(preset.sized_pool_dir(study.data_dir, seed, tokens))] = tokens
    seen: set[str] = set()
    table = []
    for notebook, grids in notebook_grids(preset).items():
        rows = [
            row
            for grid in grids
            for row in run_rows(grid, pool_tokens, preset.pool.val_tokens, vocab)
        ]
        new = pd.DataFrame([r for r in rows if not (r["run_id"] in seen or seen.add(r["run_id"]))])
        table.append(_totals(notebook, new, speed))
    everything = pd.DataFrame(table)
    total = everything.drop(columns="notebook").sum().to_dict()
    total["runs"] = int(total["runs"])
    total["longest run h"] = everything["longest run h"].max()
    total["GPUs per run"] = int(everything["GPUs per run"].max())
    return pd.concat([everything, pd.DataFrame([{"notebook": "all", **total}])], ignore_index=True)


def _totals(notebook: str, runs: pd.DataFrame, speed: GpuSpeed) -> dict:
    if not len(runs):
        runs = pd.DataFrame([{"tokens": 0.0, "flops": 0.0, "gpus": 1}]).iloc[:0]
    hours = runs["flops"] / speed.flops_per_s / 3600
    return {
        "notebook": notebook,
        "runs": len(runs),
        "tokens": float(runs["tokens"].sum()),
        "FLOPs": float(runs["flops"].sum()),
        "GPU-h": float(hours.sum()),
        "longest run h": float((hours / runs["gpus"]).max()) if len(runs) else 0.0,
        "GPUs per run": int(runs["gpus"].max()) if len(runs) else 1,
    }


def wall_hours(gpu_hours: float, longest: float, gpus: int) -> float:
    """Wall time of runs spread over `gpus` GPUs: no less than the longest run."""
    return max(gpu_hours / gpus, longest)


def pool_vocab(preset: Preset, built: dict | None) -> int:
    """The vocab the plan prices the output head at: the built pool's, the preset's, or a known
    hub tokenizer's."""
    if built:
        return int(built["vocab_size"])
    if not preset.pool.tokenizer:
        return preset.pool.vocab_size
    if preset.pool.tokenizer in KNOWN_VOCABS:
        return KNOWN_VOCABS[preset.pool.tokenizer]
    raise ReproError(
        f"preset {preset.name}: the vocab of tokenizer {preset.pool.tokenizer} is known once the "
        "pool is built; build it (repro data build) or pass --vocab"
    )


def describe_plan(table: pd.DataFrame, speed: GpuSpeed, gpus: tuple[int, ...]) -> str:
    """The plan as a fixed-width table (hours), with where the GPU speed comes from."""
    head = f"{'notebook':<8} {'runs':>6} {'tokens':>8} {'FLOPs':>8} {'GPU-h':>8} {'longest':>8}"
    lines = [head + "".join(f" {f'wall {g} GPU':>10}" for g in gpus)]
    for row in table.itertuples(index=False):
        notebook, runs, tokens, flops, gpu_hours, longest, per_run = row
        walls = "".join(
            f" {_hours(wall_hours(gpu_hours, longest, g)) if g >= per_run else '-':>10}"
            for g in gpus
        )
        lines.append(
            f"{notebook:<8} {runs:>6,} {tokens:>8.2g} {flops:>8.2g} {_hours(gpu_hours):>8} "
            f"{_hours(longest):>8}" + walls
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
    built = built_meta(preset.pool_dir(root / "data" / "pools", preset.pool_seeds[0]))
    vocab = vocab or pool_vocab(preset, built)
    speed = gpu_speed(root)
    table = plan(preset, vocab, speed)
    epochs = ", and at twice a best epoch budget that is the largest tried"
    growth = (
        f"\ngrid growth: up to {preset.grid_growth} rounds add runs beside each lr or weight "
        f"decay not bracketed around its group's choice{epochs if preset.grow_epochs else ''} "
        "(repro.growth); not priced above"
        if preset.grid_growth
        else ""
    )
    text = describe_plan(table, speed, gpus) + growth
    return f"plan of preset {preset.name} (vocab {vocab:,}):\n" + text
