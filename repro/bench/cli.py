"""The `repro bench WHAT` command: each benchmark's handler, its options and the JSON it writes.
The benchmarks themselves live in repro.bench.measure and repro.bench.peers; benchmarks/README.md
says what each one measures."""

from __future__ import annotations

import argparse

from repro.errors import ReproError
from repro.units import parse_count, parse_integers


def default_device() -> str:
    """The device benchmarks and evaluations run on: "cuda" when a GPU is visible, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _first_model(args: argparse.Namespace) -> str:
    """The model size a single-model benchmark uses: the first of --models."""
    return args.models.split(",")[0]


def _bench_repack(args: argparse.Namespace) -> dict:
    """REPACK cost of a --tokens pool (sequences of --seq-len tokens, batches of --batch-size)."""
    from repro.bench import measure as bench

    result = bench.repack(
        args.pool, parse_count(args.tokens), args.seq_len or 4096, args.batch_size or 64
    )
    for key, value in result.items():
        print(f"{key:<22} {value:,.4f}" if isinstance(value, float) else f"{key:<22} {value:,}")
    return result


def _bench_step_time(args: argparse.Namespace) -> dict:
    """Seconds per training step (ms printed) for micro-batches 1..--batch-size."""
    from repro.bench import measure as bench

    device = default_device()
    rows = bench.step_time(
        _first_model(args),
        args.vocab_size,
        args.seq_len or 128,
        args.batch_size or 8,
        device,
    )
    print(f"{rows['model']} on {device}, seq_len {rows['seq_len']}")
    print(f"{'micro-batch':>11} {'step ms':>9} {'tokens/s':>10}")
    for m, seconds in rows["seconds_by_micro_batch"].items():
        print(f"{m:>11} {seconds * 1e3:>9.1f} {m * rows['seq_len'] / seconds:>10,.0f}")
    return rows


def _bench_stacked(args: argparse.Namespace) -> list:
    """Tokens/s and MFU of sequential runs vs stacks of K runs, per thread count x batch x K."""
    from repro.bench import measure as bench

    rows = bench.stacked_vs_sequential(
        _first_model(args),
        args.vocab_size,
        args.seq_len or 128,
        parse_integers(args.batch_sizes),
        parse_integers(args.stacks),
        parse_integers(args.thread_counts),
    )
    print(
        f"{rows[0]['model']}, seq_len {rows[0]['seq_len']}: "
        "sequential runs vs one stack of K, each run on its own batch (medians of 3)"
    )
    print(
        f"{'threads':>7} {'batch':>5} {'K':>3} {'peak GFLOP/s':>12} {'seq tok/s':>10} "
        f"{'seq MFU':>8} {'stack tok/s':>11} {'stack MFU':>9} {'speed-up':>8}"
    )
    for r in rows:
        print(
            f"{r['threads']:>7} {r['batch_size']:>5} {r['stack']:>3} "
            f"{r['peak_matmul_flops_per_s'] / 1e9:>12.1f} "
            f"{r['sequential_tokens_per_s']:>10,.0f} {r['sequential_mfu']:>8.1%} "
            f"{r['stacked_tokens_per_s']:>11,.0f} {r['stacked_mfu']:>9.1%} "
            f"{r['speedup']:>7.2f}x"
        )
    return rows


def _bench_option(args: argparse.Namespace, option: str) -> list:
    """Tokens/s without and with bf16 autocast or torch.compile per micro-batch, on this CPU."""
    from repro.bench import measure as bench

    rows = bench.side_by_side(
        _first_model(args),
        args.vocab_size,
        args.seq_len or 128,
        parse_integers(args.micro_batches or "1,8,32"),
        option,
    )
    print(
        f"{rows[0]['model']}, {rows[0]['threads']} thread(s): "
        f"without vs with {option} (medians of 3)"
    )
    print(
        f"{'micro-batch':>11} {'without tok/s':>13} {'with tok/s':>10} {'ratio':>6} "
        f"{'1st step s':>10}"
    )
    for r in rows:
        print(
            f"{r['micro_batch']:>11} {r['tokens_per_s_without']:>13,.0f} "
            f"{r['tokens_per_s_with']:>10,.0f} {r['ratio']:>5.2f}x {r['first_step_s_with']:>10.2f}"
        )
    return rows


def _bench_bf16(args: argparse.Namespace) -> dict:
    """CPU bf16 autocast: speed per micro-batch and, with --pool, the loss gap at equal steps."""
    from repro.bench import measure as bench

    result = {"speed": _bench_option(args, "bf16")}
    if args.pool:
        gap = bench.bf16_loss_gap(args.pool, _first_model(args), args.batch_size or 8, 8, 0)
        print(
            f"val loss after {gap['epochs']} epochs at batch {gap['batch_size']}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in gap["val_loss"].items())
            + f"; bf16 - fp32 {gap['bf16_minus_fp32']:+.4f}, "
            f"next seed - fp32 {gap['next_seed_minus_fp32']:+.4f}"
        )
        result["loss_gap"] = gap
    return result


def _bench_peers(args: argparse.Namespace) -> dict:
    """repro's step vs transformers' LlamaForCausalLM per size x micro-batch; with --pool, K runs
    as K `repro train` processes vs one stack."""
    from repro.bench import peers as bench_peers

    device = default_device()
    rows = bench_peers.peer_step_times(
        args.models.split(","),
        parse_integers(args.micro_batches or "1,16"),
        args.seq_len or 128,
        args.vocab_size,
        device,
        steps=6,
        warmup=2,
        rounds=3,
    )
    print(f"{device}, {rows[0]['threads']} thread(s): repro vs transformers (medians of 3)")
    print(
        f"{'model':>7} {'params':>11} {'micro-batch':>11} {'repro tok/s':>11} "
        f"{'HF tok/s':>10} ratio"
    )
    for r in rows:
        print(
            f"{r['size']:>7} {r['params']:>11,} {r['micro_batch']:>11} "
            f"{r['repro_tokens_per_s']:>11,.0f} {r['hf_tokens_per_s']:>10,.0f} {r['ratio']:.2f}x"
        )
    result = {"step": rows}
    if args.pool:
        k = parse_integers(args.stacks)[0]
        sweep = bench_peers.sweep_processes_vs_stack(
            args.pool, _first_model(args), k, args.batch_size or 1, args.seq_len or 128, 1, 1
        )
        print(
            f"{k} runs of {sweep['model']} (batch {sweep['batch_size']}, 1 epoch, 1 thread): "
            f"{k} processes {sweep['processes_s']:.1f} s, one stack {sweep['stack_s']:.1f} s "
            f"({sweep['ratio']:.2f}x; one process's start-up {sweep['startup_s']:.1f} s); "
            f"largest loss difference {sweep['max_abs_loss_diff']:g}"
        )
        result["sweep"] = sweep
    return result


def _bench_noise_scale(args: argparse.Namespace) -> dict:
    """Step-time overhead (fraction) of measuring the gradient noise scale while training."""
    from repro.bench import measure as bench

    if not args.pool:
        raise ReproError("repro bench noise-scale needs --pool POOL (a built pool to train on)")
    rows = bench.noise_scale_overhead(
        args.pool,
        _first_model(args),
        args.seq_len or 128,
        args.batch_size or 32,
        args.micro_batch or 4,
    )
    print(
        f"{rows['model']}, batch {rows['batch_size']} "
        f"in micro-batches of {rows['micro_batch']}, {rows['threads']} threads: "
        f"{rows['seconds_without']:.2f} s without, "
        f"{rows['seconds_with']:.2f} s with noise_scale "
        f"(overhead {rows['overhead']:+.1%}, medians of {rows['rounds']})"
    )
    return rows


def _bench_load_results(args: argparse.Namespace) -> dict:
    """Seconds to load the metrics of a large synthetic run store."""
    from repro.bench import measure as bench

    rows = bench.load_results_speed()
    print(
        ", ".join(
            f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in rows.items()
        )
    )
    return rows


def _bench_throughput(args: argparse.Namespace) -> dict:
    """Training tokens/s and MFU per model x micro-batch, against the measured matmul peak."""
    import torch

    from repro.bench import measure as bench

    device = default_device()
    peak = bench.peak_matmul_flops(device)
    micro_batches = (
        parse_integers(args.micro_batches) if args.micro_batches else [args.batch_size or 16]
    )
    rows = [
        bench.throughput(
            m,
            args.vocab_size,
            args.seq_len or 128,
            mb,
            device=device,
            peak_flops=peak,
            compile=args.compile,
        )
        for m in args.models.split(",")
        for mb in micro_batches
    ]
    kind = "bf16" if device == "cuda" else f"float32, {torch.get_num_threads()} threads"
    print(
        f"measured matmul peak: {peak / 1e9:,.1f} GFLOP/s ({kind})"
        f"{', torch.compile' if args.compile else ''}"
    )
    _print_throughput(rows)
    return {"peak_matmul_flops_per_s": peak, "device": device, "runs": rows}


def _print_throughput(rows: list[dict]) -> None:
    """One line per throughput run: parameters, shape, step ms, tokens/s, MFU, peak MiB."""
    print(
        f"{'model':<8} {'params':>13} {'seq':>5} {'batch':>6} {'step ms':>9} "
        f"{'tokens/s':>10} {'MFU':>6} {'peak MiB':>9}"
    )
    for r in rows:
        print(
            f"{r['model']:<8} {r['params']:>13,} {r['seq_len']:>5} {r['micro_batch']:>6} "
            f"{r['step_s'] * 1e3:>9.1f} {r['tokens_per_s']:>10,.0f} {r['mfu']:>6.1%} "
            f"{r['peak_memory_bytes'] / 2**20:>9,.0f}"
        )


BENCHMARKS = {
    "repack": _bench_repack,
    "throughput": _bench_throughput,
    "stacked": _bench_stacked,
    "bf16": _bench_bf16,
    "peers": _bench_peers,
    "compile": lambda args: _bench_option(args, "compile"),
    "noise-scale": _bench_noise_scale,
    "step-time": _bench_step_time,
    "load-results": _bench_load_results,
}


def run_bench(args: argparse.Namespace) -> None:
    """Run one benchmark (`repro bench WHAT`), print its table and save it as JSON."""
    import torch

    from repro.bench import measure as bench
    from repro.runtime.shapes import SIZES

    unknown = [m for m in args.models.split(",") if m not in SIZES]
    if unknown:
        raise ReproError(f"unknown model size {unknown[0]!r}; choose from: {', '.join(SIZES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = BENCHMARKS[args.what](args)
    name = args.name or (
        f"step-time-{rows['model']}-{rows['device']}" if args.what == "step-time" else args.what
    )
    print(f"written to {bench.save(rows, name, args.out)}")


HELP = (
    "benchmarks: repack cost, training throughput and MFU, stacks, bf16 and compile on a CPU, step "
    "time per micro-batch, loading sweep results"
)


def add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    """`repro bench WHAT`'s arguments: the benchmark, its own inputs, the model shape, where
    results go."""
    bench.add_argument("what", help="the benchmark", choices=list(BENCHMARKS))
    _add_bench_inputs(bench)
    _add_bench_shape(bench)
    bench.add_argument(
        "--name", default=None, help="file name of the JSON result (default: the benchmark's name)"
    )
    bench.add_argument("--out", default="benchmarks/results", help="directory for the JSON results")
    bench.set_defaults(func=run_bench)


def _add_bench_inputs(bench: argparse.ArgumentParser) -> None:
    """Options of single benchmarks: noise-scale, stacked and repack."""
    bench.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="noise-scale: sequences per micro-batch (default 4)",
    )
    bench.add_argument(
        "--stacks",
        default="6,16,32",
        help="stacked: runs trained at once (K), comma-separated; peers: the sweep's K (the first)",
    )
    bench.add_argument("--batch-sizes", default="1,2,4", help="stacked: sequences per step")
    bench.add_argument(
        "--thread-counts", default="1,2", help="stacked: CPU thread counts to compare"
    )
    bench.add_argument(
        "--pool",
        default=None,
        help=(
            "repack: take document lengths from this pool; bf16: measure the loss gap on it; "
            "peers: time a sweep on it"
        ),
    )
    bench.add_argument("--tokens", default="200M", help="repack: pool size in tokens")


def _add_bench_shape(bench: argparse.ArgumentParser) -> None:
    """Model sizes, vocab, sequence length (tokens), batch (sequences), threads and compilation."""
    bench.add_argument(
        "--models", default="tiny,cpu-s,cpu-m,cpu-l", help="throughput: comma-separated model sizes"
    )
    bench.add_argument(
        "--vocab-size", type=int, default=2048, help="vocab of the benchmarked model"
    )
    bench.add_argument(
        "--seq-len",
        type=int,
        default=0,
        help="tokens (default: 4096 for repack, 128 for throughput)",
    )
    bench.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help=(
            "sequences (default: 64 for repack, 16 for throughput; "
            "step-time: the largest micro-batch, 8)"
        ),
    )
    bench.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    bench.add_argument(
        "--micro-batches",
        default=None,
        help=(
            "throughput: comma-separated micro-batches (default: --batch-size); "
            "bf16, compile: the same (default: 1,8,32); peers: default 1,16"
        ),
    )
    bench.add_argument("--compile", action="store_true", help="throughput: torch.compile the model")
