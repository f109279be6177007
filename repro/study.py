"""The notebooks' entry point: a preset plus where its pools, runs and figures live.

    study = open_study("cpu")          # or $REPRO_PRESET
    pools = study.pools()              # built once, reused afterwards
    results = study.sweep(grid)        # runs what is missing (and grows the grid where a tuned
                                       # choice is on its edge), returns this grid's Results

All sweeps of a preset share one run store (runs/<preset>/store), so a configuration that two
notebooks need is trained once.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from repro.analysis import frontier, noise, plots
from repro.analysis.confirmation import Confirmation, pooled_choice, recipe, with_past_cap
from repro.analysis.ensembles import ensemble_batches
from repro.analysis.growth import extension_grids
from repro.analysis.intervals import MIN_REPLICATES, effective_documents, shown_claims
from repro.analysis.results import (
    TUNED,
    Results,
    StoreDocuments,
    check_finished,
    open_results,
)
from repro.data.build import build_pool
from repro.data.pool import built_meta, load_pool
from repro.design.grids import (
    ORIGINAL_RECIPE,
    batch_sweep_grid,
    beta2_ablation,
    beta2_ablation_batches,
    ensemble_grid,
    fresh_grids,
    noise_scale_grid,
    scaling_grids,
    schedule_grid,
    usual_batch_source,
)
from repro.design.parameters import PARAMETERS, check_parameters, injected_names
from repro.design.preset_files import get_preset
from repro.design.presets import Preset, check_installed
from repro.design.regime import describe_regime, deviations, preset_regime
from repro.errors import ReproError
from repro.paths import project_root
from repro.runtime.progress import in_kernel
from repro.runtime.run_dir import RunDir
from repro.store.bundle import DOCUMENTS_READ, import_bundle, volumes
from repro.store.grid import plan_grid
from repro.store.progress import WorkBar
from repro.store.sweep import SweepResult, run_sweep

FIGURES_ENV = "REPRO_FIGURES_DIR"
"""Where a study saves its figures and tables instead of figures/<preset>/ (`repro reproduce` stages
a notebook's there and moves them in only when the notebook succeeds)."""

TERMINAL_PROGRESS_ENV = "REPRO_TERMINAL_PROGRESS"
"""Set (to 1) in a kernel's environment: its sweeps' progress bars print to the terminal that
started it (the kernel's inherited stderr) rather than into the notebook (`repro reproduce`)."""


@dataclass
class Study:
    preset: Preset
    root: Path
    data_dir: Path
    results_dir: Path
    workers: int
    progress: bool = True
    figures_dir: Path | None = None  # default: root/figures/<preset>
    train: bool = True  # False: read the runs, from the store or the shipped bundle; train none

    @property
    def store(self) -> Path:
        return self.results_dir / "store"

    @property
    def shipped(self) -> Path:
        """The preset's results bundle, its first volume (repro.store.bundle; committed)."""
        return self.root / "results" / f"{self.preset.name}.tar.xz"

    @cached_property
    def documents(self) -> StoreDocuments:
        """The per-document losses of the store's runs, one reader for every sweep of the study
        (what it read is recorded beside its figures: save)."""
        return StoreDocuments(self.store)

    @property
    def figures(self) -> Path:
        """Where save and save_table write."""
        return self.figures_dir or self.root / "figures" / self.preset.name

    def summary(self) -> str:
        """One paragraph on what this study trains (the notebooks print it first)."""
        P = self.preset
        meta = built_meta(P.pool_dir(self.data_dir, P.pools.seeds[0]))
        vocab = (
            meta["vocab_size"]
            if meta
            else (None if P.pools.recipe.tokenizer else P.pools.recipe.vocab_size)
        )
        noise = self._noise_scale()
        measured, gap = (noise[:2], noise[2]) if noise else (None, 0.0)
        regime = (
            f"\nregime (vocab {vocab:,}):\n"
            + describe_regime(preset_regime(P, vocab, measured), gap)
            if vocab
            else "\nregime: build the pools to know the tokenizer's vocab"
        )
        differences = "\n".join(f"  {note}" for note in deviations(P))
        budget_runs = "WSD cool-downs of one run" if P.grid.wsd_branches else "each its own run"
        few = f" (a verdict needs {MIN_REPLICATES})" if len(P.pools.seeds) < MIN_REPLICATES else ""
        replicates = f"\nreplicates: {len(P.pools.seeds)} pools{few}" + (
            self._validation_summary() if meta else ""
        )
        return (
            f"preset {P.name}: source {P.pools.recipe.source}, "
            f"{P.pools.recipe.tokens:,} training tokens per pool, "
            f"models {list(P.grid.models)}, seq_len {P.grid.seq_len}, "
            f"batch sizes {list(P.grid.batch_sizes)}, "
            f"epoch budgets {list(P.grid.epochs)} ({budget_runs})"
            + f"\nusual (one-pass) batch: {usual_batch_source(P)}"
            + regime
            + replicates
            + "\nrecipe as Kim et al. (docs/REFERENCE_RECIPE.md), except:\n"
            + differences
        )

    def _noise_scale(self) -> tuple[float, float, float] | None:
        """The lowest and highest B_simple (tokens) over pools that notebook 05 saved
        (noise.NOISE_SCALE_TABLE) in this study's figures folder, else in figures/<preset>/ (a
        reproduction saves into a fresh folder), and how far above the tuned loss (nats/token)
        it was measured; None before it is measured."""
        for folder in (self.figures, self.root / "figures" / self.preset.name):
            path = folder / f"{noise.NOISE_SCALE_TABLE}.csv"
            if path.is_file():
                table = pd.read_csv(path)
                measured = noise.noise_scale_range(table)
                return (*measured, noise.noise_scale_gap(table)) if measured else None
        return None

    def _validation_summary(self) -> str:
        """The validation documents every verdict averages over, and their effective number under
        token weights (intervals.effective_documents): what bounds an interval's precision."""
        lengths = load_pool(self.preset.pool_dir(self.data_dir, self.preset.pools.seeds[0]))
        lengths = lengths.val.doc_lengths()
        n_eff = effective_documents(lengths)
        return f"; {len(lengths)} validation documents, {n_eff:.1f} effective by token weight"

    def pools(self) -> list[Path]:
        """Build (or reuse) the preset's pools: the first trains the tokenizer, the others share it
        and its validation documents."""
        paths = []
        for seed in self.preset.pools.seeds:
            tokenizer = str(paths[0] / "tokenizer.json") if paths else None
            paths.append(
                build_pool(
                    self.preset.seeded_pool_spec(seed, tokenizer),
                    self.preset.pool_dir(self.data_dir, seed),
                    progress=self.progress,
                )
            )
        return paths

    def confirmation_pools(self) -> list[Path]:
        """Build (or reuse) the confirmation pools (pools.confirmation_seeds), each with its own
        validation documents, sharing the first pool's tokenizer."""
        tokenizer = str(self.pools()[0] / "tokenizer.json")
        return [
            build_pool(
                self.preset.confirmation_pool_spec(seed, tokenizer),
                self.preset.confirmation_pool_dir(self.data_dir, seed),
                progress=self.progress,
            )
            for seed in self.preset.pools.confirmation_seeds
        ]

    def confirmed(self, analysis: Callable[..., pd.DataFrame], *results: Results) -> pd.DataFrame:
        """`analysis` of `results` (a claim table) with each arm it compares chosen on these
        results' pools and retrained on the confirmation pools (repro.analysis.confirmation): it
        runs once to learn the arms' configurations, which then train (or are read) as one sweep,
        and again on their runs; `past_cap` holds the verdict with each arm at the epoch cap
        trained past the cap instead (confirmation.past_cap_epochs), where some arm of a row's
        difference is at the cap. Without confirmation pools, `analysis(*results)`."""
        if not self.preset.pools.confirmation_seeds:
            return analysis(*results)
        pools = tuple(str(p) for p in self.confirmation_pools())
        asking = Confirmation(pools, cap=self.preset.grid.cap)
        analysis(*(replace(r, confirmation=asking) for r in results))
        grids = asking.grids()
        self.trained(grids, "confirmation runs")
        confirmed = replace(asking, results=self._results(grids), wanted=[])
        claims = analysis(*(replace(r, confirmation=confirmed) for r in results))
        past = replace(confirmed, past_cap=True)
        beyond = analysis(*(replace(r, confirmation=past) for r in results))
        return with_past_cap(claims, beyond)

    def sized_pools(self) -> dict[int, list[Path]]:
        """Per pool seed: pools cut to critical_batch.pool_tokens (smallest first), then the seed's
        main pool (05's pool-size sweeps)."""
        sizes = sorted(self.preset.critical_batch.pool_tokens)
        cut = [self._pools_of(tokens) for tokens in sizes] + [self.pools()]
        return {seed: [pools[i] for pools in cut] for i, seed in enumerate(self.preset.pools.seeds)}

    def fresh_pools(self) -> dict[float, list[Path]]:
        """repetition.fresh_multiples -> one pool per pool seed with that multiple of the pool's
        training tokens (06's fresh-data curve)."""
        return {m: self._pools_of(t) for m, t in self.preset.fresh_pool_tokens().items()}

    def _pools_of(self, tokens: int) -> list[Path]:
        """Per pool seed, its pool of `tokens` training tokens, sharing its tokenizer and the
        validation documents (the pool itself at its size)."""
        P, mains = self.preset, self.pools()
        return [
            build_pool(
                replace(P.seeded_pool_spec(seed, str(main / "tokenizer.json")), tokens=tokens),
                P.sized_pool_dir(self.data_dir, seed, tokens),
                progress=self.progress,
            )
            if tokens != P.pools.recipe.tokens
            else main
            for seed, main in zip(P.pools.seeds, mains)
        ]

    def fresh_grids(self) -> list[dict]:
        """06's fresh-data runs (grids.fresh_grids), original recipe."""
        return fresh_grids(self.preset, self.fresh_pools(), **ORIGINAL_RECIPE)

    def ensemble_grids(self, sweep: Results) -> dict[str, dict]:
        """06's ensemble members per role (ensembles.ensemble_batches of `sweep`, 02's, at the
        first model): each batch's pooled_choice on the selection pools, trained on the first
        ensemble_pools confirmation pools with ensemble_members seeds (grids.ensemble_grid)."""
        P = self.preset
        first = sweep.subset(sweep.runs["model"] == P.grid.models[0])
        pools = self.confirmation_pools()[: P.repetition.ensemble_pools]
        grids = {}
        for role, batch in ensemble_batches(first).items():
            chosen = pooled_choice(first.subset(first.runs["batch_size"] == batch), TUNED)
            grids[role] = ensemble_grid(recipe(chosen), pools, P.repetition.ensemble_members)
        return grids

    def token_losses(self, run_id: str) -> np.ndarray:
        """Run `run_id`'s final loss on each validation token (nats; RunDir.token_losses)."""
        return RunDir(self.store / run_id).token_losses()

    def batch_sweep_grid(self) -> dict:
        """02's sweep: every batch size x lr x weight decay on every pool, the one-pass recipe."""
        return batch_sweep_grid(self.preset, self.pools(), **ORIGINAL_RECIPE)

    def beta2_ablation_grid(self) -> dict:
        """02's AdamW beta2 ablation: the preset's beta2 ablation batches with the other beta2
        setting than the batch sweep's (grids.beta2_ablation), every lr x weight decay x epoch
        budget, on every pool, at the first model, Kim et al.'s one-pass recipe. The sweep's own
        setting at those batches is the sweep's runs."""
        P = self.preset
        batches = list(beta2_ablation_batches(P))
        other = beta2_ablation(P)
        return batch_sweep_grid(other, self.pools(), batches, P.grid.models[:1], **ORIGINAL_RECIPE)

    def loader_grid(self) -> dict:
        """03's epoch orderings at the ablation batch sizes, on every pool, at the first model;
        every arm tuned over 02's grid (lr, weight decay, epoch budget)."""
        P = self.preset
        axes = {"loader": ["repeat", "shuffle", "repack"]}
        return batch_sweep_grid(P, self.pools(), P.ablations.batch_sizes, P.grid.models[:1], axes)

    def embedding_grid(self, batch_size: int) -> dict:
        """03's tying x embedding weight decay at `batch_size`, with the preset's
        ablations.tying_loader, on every pool, at the first model."""
        P = self.preset
        axes = {
            "tie_embeddings": [False, True],
            "embedding_weight_decay": list(P.ablations.embedding_weight_decays),
        }
        loader = {"loader": P.ablations.tying_loader}
        return batch_sweep_grid(P, self.pools(), [batch_size], P.grid.models[:1], axes, **loader)

    def combined_grid(self) -> dict:
        """03's combined recipe (REPACK, tied, every positive embedding decay as a tuned axis) at
        the ablation batch sizes, on every pool, at the first model."""
        P = self.preset
        positive = [w for w in P.ablations.embedding_weight_decays if w > 0]
        recipe = {"loader": "repack", "tie_embeddings": True}
        axes = {"embedding_weight_decay": positive}
        return batch_sweep_grid(
            P, self.pools(), P.ablations.batch_sizes, P.grid.models[:1], axes, **recipe
        )

    def schedule_grid(self, slices: dict[str, tuple[int, float]]) -> list[dict]:
        """04's and 05's batch-size schedules, original recipe, one grid per pool at its own epoch
        budget and weight decay (`slices`: pool path -> (epochs, weight decay);
        batch_schedules.schedule_slices: the best fixed batch's, chosen on the other pools)."""
        return [
            schedule_grid(self.preset, [pool], epochs, weight_decay, **ORIGINAL_RECIPE)
            for pool, (epochs, weight_decay) in slices.items()
        ]

    def noise_scale_grid(self, sweep: Results) -> list[dict]:
        """05's runs that log the gradient noise scale: on every pool, each noise-scale batch at
        its tuned lr, weight decay and epoch budget in `sweep` (02's batch sweep at the first
        model: noise.noise_scale_choices), so that B_simple is measured at the loss the tuned
        endpoints reach."""
        P = self.preset
        first = sweep.subset(sweep.runs["model"] == P.grid.models[0])
        return noise_scale_grid(
            P, noise.noise_scale_choices(first, P.critical_batch.noise_scale_batches)
        )

    def scaling_grids(self) -> list[dict]:
        """05's batch sweeps on the pools of several sizes of every pool seed (sized_pools), one
        per size (grids.scaling_grids), original recipe."""
        P = self.preset
        by_tokens: dict[int, list[Path]] = {}
        for sized in self.sized_pools().values():
            for tokens, pool in zip(
                [*sorted(P.critical_batch.pool_tokens), P.pools.recipe.tokens], sized
            ):
                by_tokens.setdefault(tokens, []).append(pool)
        return scaling_grids(P, by_tokens, **ORIGINAL_RECIPE)

    def notebook_grids(self) -> dict[str, list[dict]]:
        """The grids of each notebook that follow from the preset alone, by notebook number (the
        scaling grids where the preset has their pools). Those that depend on results are missing
        here: 03's tying grid where it trains at 02's optimal batch (ablations.tying_batch_size 0),
        the schedules (at the best fixed batch's budget) and 05's noise-scale runs (at each batch's
        tuned point); repro.plan adds stand-ins to price them."""
        P = self.preset
        tying = (
            [self.embedding_grid(P.ablations.tying_batch_size)]
            if P.ablations.tying_batch_size
            else []
        )
        return {
            "02": [self.batch_sweep_grid(), self.beta2_ablation_grid()],
            "03": [self.loader_grid(), *tying, self.combined_grid()],
            "05": self.scaling_grids() if P.critical_batch.pool_tokens else [],
            "06": self.fresh_grids() if P.repetition.fresh_multiples else [],
        }

    def preset_grids(self) -> list[dict]:
        """Every grid of notebook_grids, in notebook order: what prefetch trains first."""
        return [grid for grids in self.notebook_grids().values() for grid in grids]

    def prefetch(self) -> None:
        """Run every preset grid and its growth, each round as one sweep, longest jobs first, so
        that no worker idles between the notebooks' sweeps (`repro reproduce` does this first);
        the notebooks then find these runs done."""
        self._grow(self.preset_grids())

    def sweep(self, grid: dict | list[dict]) -> Results:
        """Run what is missing of `grid` (or of several grids one analysis reads together, such as
        one per pool) and of its growth (the preset's growth.rounds rounds), then return the Results
        of exactly those runs, every one finished and consistent (a damaged run is a one-line error
        naming it: results.check_finished)."""
        grids = [grid] if isinstance(grid, dict) else grid
        results = self._results([part for grown in self._grow(grids) for part in grown])
        check_finished(results)
        return results

    def sweeps(self, grids: list[dict]) -> list[Results]:
        """Several grids that separate analyses read, trained as one sweep per round (no worker
        idles between them); each grid's Results, in order."""
        results = [self._results(grown) for grown in self._grow(grids)]
        for each in results:
            check_finished(each)
        return results

    def trained(self, grids: list[dict], what: str = "runs") -> list[Results]:
        """Runs whose configuration is already chosen (confirmation runs, ensemble members): the
        grids trained as one sweep, not grown; each grid's Results (check_finished)."""
        with self._work_bar() as bar:
            bar.bar.set_description(what, refresh=False)
            self._run(grids, bar)
        results = [self._results([grid]) for grid in grids]
        for each in results:
            check_finished(each)
        return results

    def _grow(self, grids: list[dict]) -> list[list[dict]]:
        """Each grid with its extension grids (repro.analysis.growth), up to growth.rounds
        rounds; each round's new runs train as one sweep, every round in one progress bar."""
        parts = [[grid] for grid in grids]
        with self._work_bar() as bar:
            self._run(grids, bar)
            for round_number in range(1, self.preset.growth.rounds + 1):
                new = []
                for grown in parts:
                    grids = extension_grids(
                        grown[0], self._results(grown), self.preset.growth.epochs
                    )
                    added = [g for g in grids if g not in grown]
                    grown += added
                    new += added
                if not new:
                    break
                bar.bar.set_description(f"runs (growth round {round_number})", refresh=False)
                self._run(new, bar)
        return parts

    def _work_bar(self) -> WorkBar:
        """A sweep's progress bar: a widget in a notebook's kernel, else plain text on stderr (a
        line now and then in a log file: WorkBar), as in kernels that `repro reproduce` runs."""
        kernel = in_kernel() and not os.environ.get(TERMINAL_PROGRESS_ENV)
        terminal = None if kernel else sys.__stderr__
        return WorkBar(self.progress and self.train, file=terminal)

    def _results(self, grids: list[dict]) -> Results:
        """Results of exactly the runs of `grids` (pools named as the grids name them)."""
        planned = {p.run_id: p for grid in grids for p in plan_grid(grid, self.store)}
        pools = {rid: p.config.pool for rid, p in planned.items()}
        return open_results(self.store, list(planned), pools, self.documents)

    def _run(self, grids: dict | list[dict], bar: WorkBar | None = None) -> SweepResult | None:
        """run_sweep into this study's store with its workers and the preset's stacking; a failed
        run stops the study (its results would be missing from every table). Without `train`:
        the runs must be finished in the store, or in the shipped bundle (imported into it)."""
        if not self.train:
            self._read_runs(grids if isinstance(grids, list) else [grids])
            return None
        result = run_sweep(
            grids,
            self.store,
            workers=self.workers,
            progress=self.progress,
            stack=self.preset.execution.stack,
            max_stacked_batch=self.preset.execution.max_stacked_batch,
            bar=bar,
        )
        result.raise_if_failed(self.store)
        return result

    def _read_runs(self, grids: list[dict]) -> None:
        """Import the shipped bundle if the store lacks a run of `grids`; a run still missing is a
        one-line error saying how to train it."""
        planned = [p.run_id for grid in grids for p in plan_grid(grid, self.store)]
        missing = [rid for rid in planned if not RunDir(self.store / rid).is_finished()]
        if missing and self.shipped.is_file():
            for volume in volumes(self.shipped):
                import_bundle(volume, self.store)
            missing = [rid for rid in missing if not RunDir(self.store / rid).is_finished()]
        if missing:
            shipped = f" nor in {self.shipped}" if self.shipped.is_file() else ""
            raise ReproError(
                f"{len(missing)} of {len(planned)} runs are not in {self.store}{shipped}: train "
                f"them with repro reproduce --preset {self.preset.name}, or set train = True in "
                "the notebook's parameters cell"
            )

    def downstream(self, endpoints: pd.DataFrame) -> pd.DataFrame:
        """`endpoints` with each tuned run's accuracy on the preset's downstream tasks (repro eval,
        once per run, RUN/downstream.json reused): "<task> acc", "<task> acc_stderr", "<task> n"."""
        from repro.store.downstream import (
            POOL_TASK,
            evaluate_run,
            write_continuation_task,
        )

        tasks, include = list(self.preset.grid.downstream_tasks), None
        if POOL_TASK in tasks:
            seq = self.preset.grid.seq_len
            include = write_continuation_task(
                self.pools()[0], self.results_dir / "tasks", 100, seq * 3 // 4, seq // 4
            )
        rows = []
        for run_id in endpoints["run_id"]:
            if not isinstance(run_id, str):  # every run of the group diverged: no accuracy
                rows.append({})
                continue
            done = RunDir(self.store / run_id).downstream()
            if not set(tasks) <= set(done):
                done = evaluate_run(self.store / run_id, tasks, include)
            rows.append({f"{t} {k}": v for t in tasks for k, v in done[t].items()})
        return pd.concat([endpoints.reset_index(drop=True), pd.DataFrame(rows)], axis=1)

    def measured_step_time(self, max_micro_batch: int) -> frontier.MeasuredStepTime:
        """Seconds per training step of the preset's first model at micro-batches 1 to
        `max_micro_batch` (sequences), measured now on this machine (CUDA where visible, else the
        CPU: repro.bench.measure.step_time), as notebook 04's step-time model."""
        import torch

        from repro.bench import measure as bench

        device = "cuda" if torch.cuda.is_available() else "cpu"
        vocab = load_pool(self.pools()[0]).vocab_size
        P = self.preset
        measured = bench.step_time(P.grid.models[0], vocab, P.grid.seq_len, max_micro_batch, device)
        return frontier.MeasuredStepTime(
            measured["seconds_by_micro_batch"], measured["gradient_bytes"]
        )

    def save(self, fig: plt.Figure, name: str) -> None:
        """Write a figure as figures/<preset>/<name>.png and .pdf (self.figures), and the record
        of what the study read (_record_documents); then show it (in a notebook, under the cell
        that made it: every figure saved is shown) and close it, so that it is drawn once."""
        plots.save(fig, self.preset.name, name, self.figures)
        self._record_documents(name)
        display(fig)
        plt.close(fig)

    def save_table(self, table: pd.DataFrame, name: str, shown: pd.DataFrame | None = None) -> Path:
        """Write a table as figures/<preset>/<name>.md (a Markdown table, for the README, of
        `shown`: by default the table) and .csv (self.figures), and the record of what the study
        read (_record_documents)."""
        folder = self.figures
        folder.mkdir(parents=True, exist_ok=True)
        self._record_documents(name)
        table.to_csv(folder / f"{name}.csv", index=False)
        shown = table if shown is None else shown
        cells = [
            [str(v).replace("|", "\\|") for v in row]
            for row in [shown.columns, *shown.itertuples(index=False)]
        ]
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        lines.insert(1, "|" + "---|" * len(shown.columns))
        (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
        return folder / f"{name}.md"

    def save_claims(self, claims: pd.DataFrame, name: str) -> Path:
        """save_table for a claim table (intervals.claim_table): the .csv with every numeric
        column, the .md with the text and the power (intervals.shown_claims)."""
        return self.save_table(claims, name, shown_claims(claims))

    def _record_documents(self, name: str) -> None:
        """figures/<preset>/<N>_documents_read.json, N the notebook's number (`name` up to its
        first "_"): {run id: [steps]} whose per-document losses the study has read so far (one
        run a line), what a results bundle must hold for these figures (repro results export
        --read)."""
        steps: dict[str, list[int]] = {}
        for run_id, step in sorted(self.documents.read):
            steps.setdefault(run_id, []).append(step)
        lines = [f"{json.dumps(run_id)}: {json.dumps(read)}" for run_id, read in steps.items()]
        self.figures.mkdir(parents=True, exist_ok=True)
        record = self.figures / f"{name.split('_', 1)[0]}{DOCUMENTS_READ}"
        record.write_text("{\n" + ",\n".join(lines) + ("\n" if lines else "") + "}\n")


def open_study(
    preset: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    train: bool = True,
    dry_run: bool = False,
) -> Study:
    """A study of `preset` (a built-in name or a preset YAML file; default $REPRO_PRESET, else cpu):
    pools under <project>/data/pools, runs under runs/<name>/, figures under figures/<name>/ (or
    $REPRO_FIGURES_DIR). Without `train`, it reads runs (the store's, else the shipped bundle's,
    results/<name>.tar.xz) and trains none. With `dry_run`, the built-in preset shrunk to CPU size
    (dry_run.dry_run_preset), under runs/<name>-dry-run/."""
    chosen = get_preset(preset, dry_run)
    check_installed(chosen)  # before any work, as `repro reproduce` does
    root = project_root()
    return Study(
        preset=chosen,
        root=root,
        data_dir=root / "data" / "pools",
        results_dir=root / "runs" / chosen.name,
        workers=workers or chosen.execution.workers,
        progress=progress,
        figures_dir=Path(os.environ[FIGURES_ENV]) if os.environ.get(FIGURES_ENV) else None,
        train=train,
    )


def _one_line(shell, etype: type, value: BaseException, tb, tb_offset=None) -> list[str]:
    """IPython's handler of a ReproError: its line, without the traceback (as the CLI prints it)."""
    line = f"{etype.__name__}: {value}"
    shell._showtraceback(etype, value, [line])  # the kernel's hook that publishes an error
    return [line]


def notebook_study(namespace: Mapping[str, object]) -> Study:
    """A notebook's study (open_study), from its parameters in `namespace` (the kernel's globals):
    the names papermill injected and every value checked first (check_parameters), before any pool
    is built or run trained; from here on this kernel shows a ReproError as its one line. Prints
    the study's summary."""
    from IPython import get_ipython

    shell = get_ipython()
    values = {name: namespace[name] for name in PARAMETERS if name in namespace}
    injected = []
    if shell is not None:
        shell.set_custom_exc((ReproError,), _one_line)
        injected = injected_names(shell.history_manager.input_hist_raw)
    check_parameters(values | {name: namespace.get(name) for name in injected})
    study = open_study(**values)
    print(study.summary())
    return study
