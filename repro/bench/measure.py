"""Benchmarks (not tests): loader cost at paper scale, training throughput and MFU per model size,
stacked against sequential sweeps, step time per micro-batch, and the cost of loading sweep results.

Results are printed as a table and written as JSON to benchmarks/results/ (or --out).
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from repro.data.pool import Split, load_pool
from repro.runtime.config import make_run_config
from repro.runtime.loaders import EpochLoader
from repro.runtime.member import Member
from repro.runtime.model import Transformer
from repro.runtime.run_dir import RunDir
from repro.runtime.shapes import flops_per_token, model_config
from repro.runtime.step import attach_optimizers, build_engine, training_step


def repack(
    pool_path: str | None, tokens: int = 200_000_000, seq_len: int = 4096, batch_size: int = 64
) -> dict:
    """REPACK of a `tokens`-token pool with the document lengths of `pool_path` (resampled; token
    values random, which does not change the cost): per-epoch preparation (document and sequence
    permutations, start positions), one batch's gather, and the gather of the whole epoch
    (seconds)."""
    rng = np.random.default_rng(0)
    lengths = (
        np.diff(load_pool(pool_path).train.doc_offsets)
        if pool_path
        else rng.integers(16, 2400, size=1000)
    )
    doc_lengths = rng.choice(lengths, size=int(tokens / lengths.mean()))
    offsets = np.concatenate([[0], np.cumsum(doc_lengths)]).astype(np.int64)
    split = Split(rng.integers(1, 2048, size=int(offsets[-1]), dtype=np.uint16), offsets)
    loader = EpochLoader(split, 0, seq_len, batch_size, "repack", seed=0)
    t0 = time.perf_counter()
    loader.epoch_sequence_ids(1)
    prepare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loader.batch(1, 0)
    batch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for step in range(loader.steps_per_epoch):
        loader.batch(1, step)
    return {
        "tokens": split.n_tokens,
        "docs": split.n_docs,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "steps_per_epoch": loader.steps_per_epoch,
        "prepare_epoch_s": prepare_s,
        "gather_one_batch_s": batch_s,
        "gather_full_epoch_s": time.perf_counter() - t0,
    }


def peak_matmul_flops(device: str = "cpu", n: int = 2048, repeats: int = 5) -> float:
    """Measured matmul FLOP/s of this device: an n x n x n product (float32 on CPU, bf16 on
    CUDA)."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    a, b = (
        torch.randn(n, n, device=device, dtype=dtype),
        torch.randn(n, n, device=device, dtype=dtype),
    )
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync()
    return 2 * n**3 * repeats / (time.perf_counter() - t0)


def _peak_memory_bytes(device: str) -> int:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    import resource

    return (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )  # the process's peak resident set (Linux: KiB)


def throughput(
    size: str,
    vocab_size: int,
    seq_len: int,
    micro_batch: int,
    steps: int = 10,
    warmup: int = 3,
    device: str = "cpu",
    peak_flops: float | None = None,
    stack: int = 1,
    compile: bool = False,
    bf16: bool = False,
) -> dict:
    """Training tokens/s of one model size through the trainer's own step
    (repro.runtime.step.training_step: forward, backward, clipping and AdamW; float32 on CPU,
    bf16 autocast on CUDA, and on CPU too with `bf16`). With stack = K, K configs of the size train
    at once (repro.runtime.stacked) and tokens/s counts all K. With `peak_flops` (FLOP/s, measured
    in the same run), also model FLOPs utilisation: flops_per_token * tokens/s / peak_flops.
    first_step_s is the first step's seconds (with `compile`, mostly compilation)."""
    fields = {"model": size, "seq_len": seq_len, "batch_size": micro_batch, "compile": compile}
    members = _bench_members(fields | {"device": device}, vocab_size, stack)
    engine = build_engine(members, torch.device(device))
    if bf16:
        engine.autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    attach_optimizers(members)  # after stacking: over the views
    # each member its own batch, as in a sweep's stacks
    batch = torch.randint(0, vocab_size, (stack, micro_batch, seq_len + 1), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for i in range(warmup + steps):
        if i in (0, warmup):
            sync()
            t0 = time.perf_counter()
        training_step(engine, members, batch, micro_batch, 1, micro_batch)
        if i == 0:
            sync()
            first_step_s = time.perf_counter() - t0
    sync()
    elapsed = time.perf_counter() - t0
    tokens_per_s = stack * steps * micro_batch * seq_len / elapsed
    model_flops = flops_per_token(members[0].model.config, seq_len) * tokens_per_s
    return {
        "model": size,
        "params": members[0].model.num_params(),
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "stack": stack,
        "device": device,
        "compile": compile,
        "bf16": bf16,
        "threads": torch.get_num_threads(),
        "first_step_s": first_step_s,
        "step_s": elapsed / steps,
        "tokens_per_s": tokens_per_s,
        "model_flops_per_s": model_flops,
        "mfu": model_flops / peak_flops if peak_flops else None,
        "peak_memory_bytes": _peak_memory_bytes(device),
    }


def _bench_members(fields: dict, vocab_size: int, stack: int) -> list[Member]:
    """`stack` runs of the RunConfig `fields` at lrs 1e-3, 2e-3, ... (seeds 0, 1, ...), each its
    model on fields["device"], fed batches by the benchmark (no folder, no loader)."""
    members = []
    for k in range(stack):
        torch.manual_seed(k)
        config = make_run_config(fields | {"lr": 1e-3 * (k + 1)})
        model = Transformer(model_config(config.model, vocab_size)).to(config.device)
        members.append(Member(config, Path("."), model, checkpoint=None))
    return members


def stacked_vs_sequential(
    size: str,
    vocab_size: int,
    seq_len: int,
    batch_sizes: list[int],
    stacks: list[int],
    threads: list[int],
    rounds: int = 3,
) -> list[dict]:
    """Training tokens/s of runs one after another (a single run's tokens/s) against K runs trained
    as one stack, each on its own batch as in a sweep, for each K in `stacks`, batch size and
    thread count. Sequential and stacks are measured alternately, `rounds` times, and the medians
    kept; MFU against the matmul peak measured at the same thread count in the same run."""
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        peak = peak_matmul_flops()
        for batch_size in batch_sizes:
            measured: dict[int, list[dict]] = {k: [] for k in [1, *stacks]}
            for _ in range(rounds):
                for k in measured:
                    measured[k].append(
                        throughput(
                            size, vocab_size, seq_len, batch_size, 6, 2, peak_flops=peak, stack=k
                        )
                    )
            median = {
                k: sorted(runs, key=lambda r: r["tokens_per_s"])[rounds // 2]
                for k, runs in measured.items()
            }
            rows += [
                {
                    "model": size,
                    "seq_len": seq_len,
                    "batch_size": batch_size,
                    "stack": k,
                    "threads": n_threads,
                    "peak_matmul_flops_per_s": peak,
                    "sequential_tokens_per_s": median[1]["tokens_per_s"],
                    "sequential_mfu": median[1]["mfu"],
                    "stacked_tokens_per_s": median[k]["tokens_per_s"],
                    "stacked_mfu": median[k]["mfu"],
                    "speedup": median[k]["tokens_per_s"] / median[1]["tokens_per_s"],
                }
                for k in stacks
            ]
    return rows


def side_by_side(
    size: str, vocab_size: int, seq_len: int, micro_batches: list[int], option: str, rounds: int = 3
) -> list[dict]:
    """Tokens/s without and with `option` ("bf16": CPU bf16 autocast; "compile": torch.compile)
    per micro-batch on this CPU, alternated `rounds` times; medians and their ratio, and the first
    step's seconds with the option in the first round (compilation, in this process)."""
    rows = []
    for micro_batch in micro_batches:
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for _ in range(rounds):
            for on in (False, True):
                runs[on].append(
                    throughput(size, vocab_size, seq_len, micro_batch, 6, 2, **{option: on})
                )
        off, on = (sorted(runs[k], key=lambda r: r["tokens_per_s"])[rounds // 2] for k in runs)
        rows.append(
            {
                "model": size,
                "option": option,
                "micro_batch": micro_batch,
                "threads": torch.get_num_threads(),
                "tokens_per_s_without": off["tokens_per_s"],
                "tokens_per_s_with": on["tokens_per_s"],
                "ratio": on["tokens_per_s"] / off["tokens_per_s"],
                "first_step_s_with": runs[True][0]["first_step_s"],
            }
        )
    return rows


def bf16_loss_gap(pool_path: str, size: str, batch_size: int, epochs: int, seed: int) -> dict:
    """Validation loss (nats/token, evaluated in float32) after the same `epochs` of training
    (cosine to 0, lr 3e-3, REPACK) in float32 and under CPU bf16 autocast, and after float32
    training with the next seed (the seed-to-seed spread to compare the gap with)."""
    from repro.runtime.loaders import validation_sequences
    from repro.runtime.schedules import Schedule, lr_multiplier
    from repro.runtime.train import evaluate

    pool = load_pool(pool_path)
    val = validation_sequences(pool.val, pool.eos_id, 128)
    losses = {}
    arms = (("fp32", False, seed), ("bf16", True, seed), ("fp32+1", False, seed + 1))
    for name, bf16, run_seed in arms:
        torch.manual_seed(run_seed)
        model = Transformer(model_config(size, pool.vocab_size))
        config = make_run_config({"model": size, "batch_size": batch_size, "lr": 3e-3})
        member = Member(config, Path("."), model, checkpoint=None)
        engine = build_engine([member], torch.device("cpu"))
        if bf16:
            engine.autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        attach_optimizers([member])
        loader = EpochLoader(pool.train, pool.eos_id, 128, batch_size, "repack", run_seed)
        total = loader.steps_per_epoch * epochs
        for step in range(total):
            for group in member.optimizer.param_groups:
                group["lr"] = 3e-3 * lr_multiplier(Schedule("cosine", 0.01), step, total)
            epoch, index = divmod(step, loader.steps_per_epoch)
            batch = torch.from_numpy(loader.batch(epoch, index))[None]
            training_step(engine, [member], batch, batch_size, 1, batch_size)
        losses[name] = evaluate(model, val, 16, torch.device("cpu"), nullcontext())[0]
    return {
        "model": size,
        "batch_size": batch_size,
        "epochs": epochs,
        "seed": seed,
        "val_loss": losses,
        "bf16_minus_fp32": losses["bf16"] - losses["fp32"],
        "next_seed_minus_fp32": losses["fp32+1"] - losses["fp32"],
    }


def noise_scale_overhead(
    pool: str,
    model: str,
    seq_len: int,
    batch_size: int,
    micro_batch: int,
    epochs: int = 4,
    rounds: int = 5,
) -> dict:
    """Wall seconds of the same training run (repro.runtime.train, one evaluation per epoch)
    without and with noise_scale=true, alternated `rounds` times; medians and their ratio."""
    import tempfile

    from repro.runtime.train import train

    fields = {
        "pool": pool,
        "model": model,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "micro_batch": micro_batch,
        "epochs": epochs,
        "eval_every": 1.0,
    }
    seconds: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for noise in (False, True):
                status = train(
                    make_run_config(fields | {"noise_scale": noise}),
                    Path(tmp) / f"{noise}-{i}",
                    progress=False,
                )
                seconds[noise].append(status["wall_s"])
    off, on = float(np.median(seconds[False])), float(np.median(seconds[True]))
    return fields | {
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "seconds_without": off,
        "seconds_with": on,
        "overhead": on / off - 1,
    }


def step_time(
    size: str, vocab_size: int, seq_len: int, max_micro_batch: int, device: str = "cpu"
) -> dict:
    """Seconds per training step for micro-batches 1..max_micro_batch (the measured step-time model
    of repro.analysis.frontier.MeasuredStepTime); gradient bytes assume float32 gradients."""
    rows = [
        throughput(size, vocab_size, seq_len, m, steps=5, warmup=2, device=device)
        for m in range(1, max_micro_batch + 1)
    ]
    return {
        "model": size,
        "device": device,
        "seq_len": seq_len,
        "seconds_by_micro_batch": {r["micro_batch"]: r["step_s"] for r in rows},
        "gradient_bytes": 4 * rows[0]["params"],
    }


def load_results_speed(n_runs: int = 10_000, evals_per_run: int = 16) -> dict:
    """Seconds to load the metrics of `n_runs` run directories (written to a temporary store)."""
    import tempfile

    from repro.analysis.results import load_results

    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_runs):
            run = RunDir(Path(tmp) / f"{i:012x}")
            run.path.mkdir()
            run.write_config({"pool": "p", "lr": 1e-3 * (1 + i % 7), "batch_size": 2 ** (i % 8)})
            run.write_status({"status": "done", "best_val_loss": 3.0})
            metrics = {"lr": 1e-3, "train_loss": 3.0, "wall_s": 1.0, "val_loss": 3.1}
            run.write_metrics(
                {"step": 10 * k, "epoch": k, "tokens": 1000 * k} | metrics
                for k in range(1, evals_per_run + 1)
            )
        t0 = time.perf_counter()
        runs, evals = load_results(tmp)
        elapsed = time.perf_counter() - t0
    return {"runs": len(runs), "evaluation_points": len(evals), "load_s": elapsed}


def save(results: dict | list, name: str, out_dir: str | Path = "benchmarks/results") -> Path:
    out = Path(out_dir) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return out
