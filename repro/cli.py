"""The `repro` command line (docs/CONTRACT.md is the contract)."""

from __future__ import annotations

import argparse
import errno
import shlex
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path

from repro.bench import cli as bench_cli
from repro.errors import ReproError
from repro.runtime.files import NO_SPACE
from repro.runtime.run_dir import FINISHED, RunDir
from repro.units import parse_count, parse_integers


def _data_build(args: argparse.Namespace) -> None:
    from repro.data.build import PoolSpec, build_pool
    from repro.data.pool import load_pool, pool_summary

    spec = PoolSpec(
        source=args.source,
        tokens=parse_count(args.tokens),
        val_tokens=parse_count(args.val_tokens, "validation token count"),
        seed=args.seed,
        val_seed=args.val_seed,
        vocab_size=args.vocab_size,
        tokenizer=args.tokenizer,
        text_field=args.text_field,
        text_unit=args.text_unit,
        dtype=args.dtype,
        skip_bad_records=args.skip_bad_records,
        exact_tokens=args.exact_tokens,
    )
    started = time.perf_counter()
    out = build_pool(spec, args.out, force=args.force, progress=not args.quiet)
    print(pool_summary(load_pool(out)))
    print(f"\nbuilt in {time.perf_counter() - started:.1f} s")


def _data_info(args: argparse.Namespace) -> None:
    from repro.data.pool import load_pool, pool_summary

    print(pool_summary(load_pool(args.pool)))


def _data_verify(args: argparse.Namespace) -> None:
    from repro.data.pool import verify_pool

    print(verify_pool(args.pool, progress=not args.quiet))


def _train(args: argparse.Namespace) -> None:
    from repro.runtime.config import load_run_config
    from repro.runtime.train import train

    config = load_run_config(args.config, args.overrides, pool=args.pool)
    status = train(config, args.out, progress=not args.quiet)
    print(
        f"{args.out}: {status['status']}"
        + (
            f", best val loss {status['best_val_loss']:.4f} at epoch {status['best_epoch']:.2f}"
            if status.get("best_val_loss") is not None
            else ""
        )
    )
    if status["status"] not in FINISHED:
        sys.exit(1)


def _sweep_run(args: argparse.Namespace) -> None:
    from repro.store.sweep import run_sweep

    slurm = None
    if args.executor in ("slurm", "submitit-local"):  # a job per run, a task per GPU (run: gpus)
        slurm = {"node_gpus": args.gpus_per_node, "timeout_min": args.timeout_min} | (
            {"slurm_partition": args.partition} if args.partition else {}
        )
    started = time.perf_counter()
    result = run_sweep(
        args.grid,
        args.out,
        workers=args.workers,
        executor=args.executor,
        retry_failed=args.retry_failed,
        slurm=slurm,
        progress=not args.quiet,
        stack=args.stack,
        max_stacked_batch=args.max_stacked_batch,
    )
    print(
        f"{args.out}: "
        + (", ".join(f"{n} {k}" for k, n in sorted(result.outcomes.items())) or "nothing to run")
        + f" in {time.perf_counter() - started:.0f} s"
    )
    result.raise_if_failed(args.out)


def _sweep_status(args: argparse.Namespace) -> None:
    from repro.store.sweep import sweep_status

    counts = sweep_status(args.dir)
    print(
        f"{args.dir}: {sum(counts.values())} runs: "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    )


def _sweep_table(args: argparse.Namespace) -> None:
    from repro.analysis.results import check_consistent, default_group_by, open_results
    from repro.analysis.selection import describe_tuned, tuned
    from repro.store.sweep import failed_runs, sweep_status

    if (Path(args.dir) / "sweep.json").exists():
        sweep_status(args.dir)  # a damaged sweep.json is a one-line error, as in sweep status
    failed = failed_runs(args.dir)  # first: a damaged status.json is a one-line error
    results = open_results(args.dir)
    check_consistent(results)  # a damaged finished run is an error, never a different table
    runs, evals = results.runs, results.evals
    errors = (
        f"{len(failed)} run(s) failed; their errors: "
        + ", ".join(str(RunDir(Path(args.dir) / rid).status_file) for rid in failed[:3])
        + (" ..." if len(failed) > 3 else "")
    )
    if evals.empty:
        raise ReproError(
            f"{args.dir} has no evaluated runs"
            + (
                f"; {errors}"
                if failed
                else f" yet; run: repro sweep run GRID.yaml --out {args.dir}"
            )
        )
    group_by = args.group_by.split(",") if args.group_by else default_group_by(runs)
    table = tuned(results, group_by)
    text, warnings = describe_tuned(table, group_by)
    print(text)
    for line in warnings:
        print(line, file=sys.stderr)
    if failed:
        print(f"warning: not in the table: {errors}", file=sys.stderr)
    unfinished = int((~runs["status"].isin(["done", "diverged", "failed"])).sum())
    if unfinished:
        print(
            f"warning: provisional: {unfinished} run(s) still training or not started; the table "
            "tunes over the finished ones only",
            file=sys.stderr,
        )
    if args.parquet:
        table.to_parquet(args.parquet)


def _reproduce(args: argparse.Namespace) -> None:
    from repro.reproduce import reproduce

    only = args.only.split(",") if args.only else None
    if args.dry_run and args.store_outputs:
        raise ReproError("--store-outputs would put a dry run's outputs in notebooks/; drop one")
    times = reproduce(
        args.preset, only, args.workers, args.store_outputs, args.retry_failed, args.dry_run
    )
    print(f"\n{'stage':<28} {'wall s':>8}")
    for name, seconds in times:
        print(f"{name:<28} {seconds:8.1f}")
    print(f"{'total':<28} {sum(s for _, s in times):8.1f}")


def _eval(args: argparse.Namespace) -> None:
    try:
        from repro.store.downstream import evaluate_run
    except ImportError as exc:
        raise ReproError(f"repro eval needs lm-eval ({exc}); pip install -e '.[eval]'") from None

    tasks = [t for t in args.tasks.split(",") if t]
    results = evaluate_run(
        args.run, tasks, args.include, args.limit, bench_cli.default_device(), args.batch_size
    )
    for task, r in results.items():
        print(f"{task:<24} acc {r['acc']:.4f} +- {r['acc_stderr']:.4f} ({r['n']} examples)")
    print(f"written: {RunDir(args.run).downstream_file}")


def _results_export(args: argparse.Namespace) -> None:
    from repro.store.bundle import bundle_manifest, documents_read, export_bundle, volumes

    read = documents_read(args.read) if args.read else None
    export_bundle(args.store, args.out, read)
    for volume in volumes(args.out):
        runs = bundle_manifest(volume)["runs"]
        print(f"{volume}: {runs} runs, {volume.stat().st_size / 2**20:.1f} MiB")


def _results_import(args: argparse.Namespace) -> None:
    from repro.store.bundle import import_bundle, volumes

    counts = [import_bundle(volume, args.into) for volume in volumes(args.bundle)]
    added, present = (sum(column) for column in zip(*counts))
    print(f"{args.into}: {added} runs added, {present} already there")


def _plan(args: argparse.Namespace) -> None:
    from repro.design.preset_files import get_preset
    from repro.paths import project_root
    from repro.plan import plan_text

    print(plan_text(get_preset(args.preset), project_root(), parse_integers(args.gpus), args.vocab))


PRESET_HELP = "a built-in preset (repro preset list) or a preset FILE.yaml"


def _preset_list(args: argparse.Namespace) -> None:
    """One line per built-in preset: its pools, models, batch sizes and epoch budgets."""
    from repro.design.preset_files import PRESETS

    for name, p in PRESETS.items():
        pools, grid = p.pools, p.grid
        print(
            f"{name:<11} {len(pools.seeds)} pools x {pools.recipe.tokens:,} tokens "
            f"({pools.recipe.source}); "
            f"models {', '.join(grid.models)}; batches {', '.join(map(str, grid.batch_sizes))} x "
            f"{grid.seq_len} tokens; epochs {', '.join(map(str, grid.epochs))}"
        )


def _preset_show(args: argparse.Namespace) -> None:
    from repro.design.preset_files import get_preset, preset_yaml

    print(preset_yaml(get_preset(args.preset)), end="")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (unless it has none); epilogs printed as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        hidden = action.default in (None, argparse.SUPPRESS) or action.default is False
        if not hidden and "(default" not in text:
            text += " (default: %(default)s)"
        return text


def _run_fields_help() -> str:
    """Every run field of `repro train` with its default and meaning."""
    from repro.runtime.config import RunConfig, config_record

    defaults = config_record(RunConfig())  # tuple fields in their text form
    lines = ["run fields (key=value; default; meaning):"]
    for f in fields(RunConfig):
        lines.append(f"  {f.name + '=' + repr(defaults[f.name]):<28} {f.metadata['doc']}")
    return "\n".join(lines)


def _add_command(commands, name: str, help: str, **kwargs) -> argparse.ArgumentParser:
    """A subcommand `name` whose help shows each option's default (see _HelpFormatter)."""
    return commands.add_parser(name, formatter_class=_HelpFormatter, help=help, **kwargs)


def _add_group(commands, name: str, help: str, dest: str):
    """A command `name` with subcommands of its own (their name goes to `dest`)."""
    return _add_command(commands, name, help).add_subparsers(dest=dest, required=True)


def _add_data_commands(commands) -> None:
    """`repro data build`, `repro data info` and `repro data verify`."""
    data = _add_group(commands, "data", "build and inspect pools", "data_command")
    _add_data_build(data)
    info = _add_command(data, "info", "counts of a built pool")
    info.add_argument("pool", help="pool directory")
    info.set_defaults(func=_data_info)
    verify = _add_command(
        data,
        "verify",
        "read every byte of a pool against the checksums and fingerprint in its meta.json "
        "(exit status 2 on a mismatch)",
    )
    verify.add_argument("pool", help="pool directory")
    verify.add_argument("--quiet", action="store_true", help="no progress bars")
    verify.set_defaults(func=_data_verify)


def _add_data_build(data) -> None:
    """`repro data build`: where documents come from, token targets (tokens), seeds, tokenizer."""
    build = _add_command(
        data, "build", "build a pool of unique training documents plus validation documents"
    )
    build.add_argument(
        "--source",
        required=True,
        help=(
            "stdlib | synthetic[:FIELD=VALUE,...] (grammar fields, e.g. max_sentences=20) | "
            "hf:NAME[:CONFIG] | path or glob of .txt/.jsonl/.parquet"
        ),
    )
    build.add_argument("--tokens", required=True, help="training tokens, e.g. 500k, 1M, 2.5M, 1B")
    build.add_argument("--val-tokens", default="100k", help="validation tokens")
    build.add_argument("--seed", type=int, default=0, help="draws the training documents")
    build.add_argument(
        "--val-seed",
        type=int,
        default=None,
        help="draws the validation documents (default: --seed); fix it to share them across pools",
    )
    build.add_argument(
        "--vocab-size", type=int, default=2048, help="vocab of the trained byte-level BPE"
    )
    build.add_argument(
        "--tokenizer",
        default=None,
        help=(
            "use this tokenizer instead of training one: a tokenizer.json file or pool folder (a "
            "path: it exists, ends with .json, starts with / . or ~, has more than one /, or its "
            "part before / is an existing folder) or else a hub name, NAME or ORG/NAME"
        ),
    )
    build.add_argument(
        "--text-field", default="text", help="field holding the text in .jsonl/.parquet/hub records"
    )
    build.add_argument(
        "--text-unit",
        default="file",
        choices=["file", "paragraph", "line"],
        help=".txt files: one document per file, blank-line paragraph or line",
    )
    build.add_argument("--dtype", default="auto", help="auto | uint16 | uint32")
    _add_data_build_output(build)
    build.set_defaults(func=_data_build)


def _add_data_build_output(build: argparse.ArgumentParser) -> None:
    """`repro data build`: bad records, the exact budget, and where the pool goes."""
    build.add_argument(
        "--skip-bad-records",
        action="store_true",
        help=".jsonl/.json/.parquet/hub records without a string text: skip and count them "
        "(default: an error naming the file and record)",
    )
    build.add_argument(
        "--exact-tokens",
        action="store_true",
        help="cut the last training document so the training split holds exactly --tokens "
        "(default: whole documents, up to one document over)",
    )
    build.add_argument("--out", required=True, help="pool directory, e.g. data/pools/stdlib-1m")
    build.add_argument(
        "--force",
        action="store_true",
        help="replace a different or damaged pool at --out (never a file or another folder)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_train_command(commands) -> None:
    """`repro train`: one run; its epilog lists every run field."""
    train = _add_command(commands, "train", "one training run", epilog=_run_fields_help())
    train.add_argument("--pool", default=None, help="pool directory")
    train.add_argument("--out", required=True, help="run directory")
    train.add_argument("--config", default=None, help="YAML file of run fields")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument(
        "overrides", nargs="*", help="key=value run fields, e.g. model=cpu-s epochs=8 loader=repack"
    )
    train.set_defaults(func=_train)


def _add_sweep_commands(commands) -> None:
    """`repro sweep run`, `repro sweep status` and `repro sweep table`."""
    sweep = _add_group(commands, "sweep", "grids of runs", "sweep_command")
    _add_sweep_run(sweep)
    status = _add_command(sweep, "status", "counts of done / running / failed / pending runs")
    status.add_argument("dir", help="sweep directory (repro sweep run --out)")
    status.set_defaults(func=_sweep_status)
    table = _add_command(
        sweep, "table", "tuned endpoints, one row per group (chosen on half the val docs)"
    )
    table.add_argument("dir", help="sweep directory (repro sweep run --out)")
    table.add_argument(
        "--group-by",
        default=None,
        help="comma-separated fields (default: the varying untuned fields)",
    )
    table.add_argument("--parquet", default=None, help="also write the table to this parquet file")
    table.set_defaults(func=_sweep_table)


def _add_sweep_run(sweep) -> None:
    """`repro sweep run`: workers, executor (local or Slurm) and stacking of configs."""
    run = _add_command(sweep, "run", "run what is missing of a grid")
    run.add_argument("grid", help="grid YAML file")
    run.add_argument("--out", required=True, help="sweep directory (one subdirectory per run)")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="parallel runs (CPU threads are split among them; one per GPU)",
    )
    run.add_argument(
        "--executor",
        default="local",
        choices=["local", "slurm", "submitit-local"],
        help="where runs execute: local processes, Slurm jobs (submitit), or submitit's local mode",
    )
    run.add_argument("--retry-failed", action="store_true", help="run failed configs again")
    run.add_argument(
        "--stack",
        type=int,
        default=1,
        help="train up to this many runs of one model shape and batch at once (a stack)",
    )
    run.add_argument(
        "--max-stacked-batch",
        type=int,
        default=0,
        help="stack only runs with batches up to this many sequences (0: all)",
    )
    run.add_argument("--partition", default=None, help="slurm partition")
    run.add_argument("--timeout-min", type=int, default=240, help="slurm: minutes per job")
    run.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        help="slurm: GPUs of one node; a run of more (gpus=) spans whole nodes",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_sweep_run)


def _at_least_one(text: str) -> int:
    """argparse type of a count of parallel runs: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number, 1 or more; got {text!r}")
    return value


def _add_reproduce_command(commands) -> None:
    """`repro reproduce`: the notebook series of one preset."""
    reproduce = _add_command(commands, "reproduce", "run the notebook series with papermill")
    reproduce.add_argument("--preset", required=True, help=PRESET_HELP)
    reproduce.add_argument(
        "--only", default=None, help="comma-separated notebook numbers, e.g. 02,03"
    )
    reproduce.add_argument(
        "--workers", type=_at_least_one, default=None, help="parallel runs (default: the preset's)"
    )
    reproduce.add_argument(
        "--store-outputs",
        action="store_true",
        help="copy the executed outputs back into notebooks/*.ipynb (the committed copies)",
    )
    reproduce.add_argument(
        "--retry-failed",
        action="store_true",
        help="train the preset's failed runs again (default: a failed run stops the reproduction)",
    )
    reproduce.add_argument(
        "--dry-run",
        action="store_true",
        help="every run of the preset shrunk to CPU-seconds "
        "(repro.design.dry_run.dry_run_preset), into runs/<preset>-dry-run/: checks every code "
        "path and notebook before a GPU run",
    )
    reproduce.set_defaults(func=_reproduce)
    evaluate = _add_command(
        commands, "eval", "downstream accuracy of a finished run (lm-evaluation-harness)"
    )
    evaluate.add_argument("run", help="a finished run directory")
    evaluate.add_argument(
        "--tasks", default="arc_easy,piqa,sciq", help="lm-eval tasks, comma-separated"
    )
    evaluate.add_argument(
        "--include", default=None, help="a folder of lm-eval task YAML files (local tasks)"
    )
    evaluate.add_argument("--limit", type=int, default=None, help="examples per task (all)")
    evaluate.add_argument("--batch-size", type=int, default=16, help="sequences per forward")
    evaluate.set_defaults(func=_eval)
    plan = _add_command(
        commands, "plan", "what a preset costs: runs, tokens, FLOPs, GPU-hours per notebook"
    )
    plan.add_argument("--preset", required=True, help=PRESET_HELP)
    plan.add_argument("--gpus", default="1,8", help="GPU counts to show the wall time on")
    plan.add_argument(
        "--vocab", type=int, default=None, help="vocab size (default: the built pool's)"
    )
    plan.set_defaults(func=_plan)


def _add_results_commands(commands) -> None:
    """`repro results export` and `repro results import` (repro.store.bundle)."""
    results = _add_group(commands, "results", "share a store's finished runs", "results_command")
    export = _add_command(
        results, "export", "write a store's finished runs (no checkpoints) to a .tar.xz bundle"
    )
    export.add_argument("store", help="a run store (runs/<preset>/store, repro sweep run --out)")
    export.add_argument("--out", required=True, help="the bundle to write, e.g. cpu.tar.xz")
    export.add_argument(
        "--read",
        metavar="FIGURES",
        help="keep per-document losses only at each run's last evaluation and at those the "
        "notebooks that wrote FIGURES read (figures/<preset>: its *_documents_read.json), e.g. "
        "the shipped results/<preset>.tar.xz; default: at every evaluation",
    )
    export.set_defaults(func=_results_export)
    load = _add_command(
        results, "import", "unpack a bundle into a store (never replaces what the store holds)"
    )
    load.add_argument(
        "bundle", help="a bundle that repro results export wrote (its first volume: all are read)"
    )
    load.add_argument("--into", required=True, help="the run store (created if missing)")
    load.set_defaults(func=_results_import)


def _add_preset_commands(commands) -> None:
    """`repro preset list` and `repro preset show`."""
    preset = _add_group(commands, "preset", "inspect presets", "preset_command")
    listing = _add_command(preset, "list", "the built-in presets, one line each")
    listing.set_defaults(func=_preset_list)
    show = _add_command(preset, "show", "every field of a preset, as YAML")
    show.add_argument("preset", help=PRESET_HELP)
    show.set_defaults(func=_preset_show)


def build_parser() -> argparse.ArgumentParser:
    """The `repro` parser: one subcommand per part of the study (docs/CONTRACT.md)."""
    parser = argparse.ArgumentParser(
        prog="repro",
        description="Multi-epoch pretraining on a finite document pool (arXiv 2610.15965).",
        formatter_class=_HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_data_commands(commands)
    _add_train_command(commands)
    _add_sweep_commands(commands)
    _add_reproduce_command(commands)
    _add_results_commands(commands)
    _add_preset_commands(commands)
    bench_cli.add_bench_arguments(_add_command(commands, "bench", bench_cli.HELP))
    return parser


def _interrupt(signum: int, frame) -> None:
    """SIGTERM stops a command as Ctrl-C does (KeyboardInterrupt), so that it cleans up."""
    raise KeyboardInterrupt


def _os_problem(exc: OSError) -> str:
    """One line for an OSError of space or permission that no caller turned into a ReproError."""
    where = exc.filename or "a file"
    if exc.errno in NO_SPACE:
        return f"{where}: {NO_SPACE[exc.errno]}; free space, then run the same command again"
    return (
        f"{where}: permission denied; give this user access to it (chmod, chown) or choose "
        "another path"
    )


def _resume_note(words: list[str]) -> str:
    """What an interrupted command kept and how to go on: a pool build keeps nothing half-written;
    training keeps finished runs and resumes stopped ones from their checkpoints."""
    command = shlex.join(["repro", *words])
    if words[:2] == ["data", "build"]:
        return f"no pool was half-written; run the same command again to build it: {command}"
    return (
        "finished runs are kept and stopped ones resume from their checkpoints: run the same "
        f"command again to go on: {command}"
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        args.func(args)
    except ReproError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        if exc.errno not in {*NO_SPACE, errno.EACCES, errno.EPERM}:
            raise
        print(f"repro: error: {_os_problem(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        words = sys.argv[1:] if argv is None else argv
        print(f"repro: stopped; {_resume_note(words)}", file=sys.stderr)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
