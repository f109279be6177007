"""`repro reproduce`: execute the notebook series with papermill for one preset.

Executed notebooks go to runs/<name>/notebooks/, figures to figures/<name>/ (written by the
notebooks); the notebooks in notebooks/ are only read, so edits made there survive. Finished sweep
runs are reused, so a second reproduction only re-executes the analysis. With `store_outputs` the
executed outputs are copied back into notebooks/*.ipynb (the committed copies show the cpu preset).

A notebook's figures and tables are staged (runs/<name>/staging-*) and moved into figures/<name>/
only when every cell ran, so a failure leaves that folder as it was. One reproduction of a preset at
a time (runs/<name>/reproduce.lock); each kernel talks over IPC
sockets in a private temporary folder, so reproductions of different presets run side by side.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from traitlets import Dict
from traitlets.config import Config

from repro.design.parameters import check_parameters
from repro.design.preset_files import get_preset
from repro.design.presets import check_installed
from repro.errors import ReproError
from repro.paths import project_root
from repro.plan import from_scratch_stages, plan_text, preset_fingerprint, record_times
from repro.runtime.files import process_alive
from repro.store.sweep import reset_failed
from repro.study import FIGURES_ENV, TERMINAL_PROGRESS_ENV, Study, open_study

WIDGET = "application/vnd.jupyter.widget-view+json"  # a live widget's output (tqdm's bars)


class EnvKernelManager(AsyncKernelManager):
    """An AsyncKernelManager (as nbclient's default, which stops its kernel on SIGINT and SIGTERM)
    that adds `extra_env` to its kernel's environment (configured through the section
    EnvKernelManager: traitlets takes no section named with a leading underscore)."""

    extra_env = Dict(config=True, help="variables added to the kernel's environment")

    async def start_kernel(self, **kw) -> None:
        await super().start_kernel(env=os.environ | self.extra_env, **kw)


def _kernel_config(sockets: Path, figures: Path) -> Config:
    """A kernel on this machine over IPC sockets (TCP kernels warn that they are unencrypted),
    its socket files (sockets/ipc-N) and connection file in `sockets`, a folder private to one
    notebook's execution (by default they would land in the working directory, shared by every
    reproduction of the checkout); its Study saves into `figures` (FIGURES_ENV) and shows its
    training progress on this terminal (TERMINAL_PROGRESS_ENV)."""
    return Config(
        EnvKernelManager={
            "transport": "ipc",
            "ip": str(sockets / "ipc"),
            "connection_file": str(sockets / "kernel.json"),
            "extra_env": {FIGURES_ENV: str(figures), TERMINAL_PROGRESS_ENV: "1"},
        }
    )


@contextmanager
def _hold(preset_dir: Path) -> Iterator[None]:
    """Hold preset_dir/reproduce.lock (an exclusive flock, which dies with its process, also on a
    crash) for one reproduction of the preset; another one is refused, naming the holder."""
    preset_dir.mkdir(parents=True, exist_ok=True)
    with open(preset_dir / "reproduce.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise ReproError(
                f"preset {preset_dir.name} is being reproduced by {holder} (lock {lock.name}); "
                "wait for it to finish or stop it, then run the command again"
            ) from None
        lock.truncate(0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        lock.write(f"repro reproduce pid {os.getpid()} on {socket.gethostname()} since {started}")
        lock.flush()
        yield


def notebooks(root: Path, only: list[str] | None = None) -> list[Path]:
    """The series' notebooks (NN_name.ipynb) in order; `only` picks numbers ("1" or "01")."""
    every = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not every:
        raise ReproError(
            f"no notebooks/NN_name.ipynb under {root}; run repro reproduce inside a checkout of "
            "the project (the folder with pyproject.toml and notebooks/)"
        )
    if not only:
        return every
    wanted = []
    for number in only:
        if not number.strip().isdigit():
            raise ReproError(f"--only takes notebook numbers such as 02,03; got {number!r}")
        wanted.append(f"{int(number):02d}")
    missing = sorted(set(wanted) - {nb.name[:2] for nb in every})
    if missing:
        raise ReproError(
            f"no notebook numbered {missing[0]} in {root / 'notebooks'}; choose from "
            f"{', '.join(nb.name[:2] for nb in every)}"
        )
    return [nb for nb in every if nb.name[:2] in wanted]


PREFETCH = "preset sweeps (prefetch)"  # the first stage of a whole reproduction


def reproduce(
    preset: str,
    only: list[str] | None = None,
    workers: int | None = None,
    store_outputs: bool = False,
    retry_failed: bool = False,
    dry_run: bool = False,
) -> list[tuple[str, float]]:
    """Run the notebooks in order; returns (stage, wall seconds). For the whole series (no `only`),
    the runs that follow from the preset alone train first as one sweep (Study.prefetch: the longest
    jobs first, no idle workers between notebooks). With `retry_failed`, the failed runs of the
    preset's store train again (sweep.reset_failed); with `dry_run`, the built-in preset shrunk
    to CPU size (dry_run.dry_run_preset) and every notebook with it. Raises ReproError naming the
    failing cell, or the holder of the preset when another reproduction of it runs; a bad
    parameter or notebook is refused before any work (series_parameters)."""
    chosen = get_preset(preset, dry_run)  # fail fast on a bad name or preset file
    check_installed(chosen)
    if preset.endswith((".yaml", ".yml")):  # the kernels may run elsewhere: pass the file itself
        preset = str(Path(preset).resolve() if Path(preset).is_file() else project_root() / preset)
    root = project_root()
    parameters = series_parameters(notebooks(root, only), preset, workers, dry_run)
    selected = list(parameters)
    with _hold(root / "runs" / chosen.name):
        try:
            print(plan_text(chosen, root), flush=True)
        except ReproError as exc:  # a hub tokenizer's vocab: known once the pools are built
            print(f"plan: {exc}", flush=True)
        study = open_study(preset, workers=workers, dry_run=dry_run)
        remove_leftovers(study.results_dir)
        if retry_failed:
            print(f"retrying {len(reset_failed(study.store))} failed run(s)", flush=True)
        times = []
        from_scratch = not only and not (study.store.is_dir() and any(study.store.iterdir()))
        stages = len(selected) + (not only)
        fingerprint = preset_fingerprint(study.preset)
        expected = from_scratch_stages(study.figures, fingerprint) if from_scratch else {}
        if set(expected) != {PREFETCH, *(nb.name for nb in selected)}:
            expected = {}  # recorded for other notebooks: no estimate
        if not only:  # the whole series: first every run the preset fixes, as one sweep
            print(_stage_line(1, stages, PREFETCH, times, expected), flush=True)
            started = time.perf_counter()
            study.prefetch()
            times.append((PREFETCH, time.perf_counter() - started))
            print(f"{times[-1][0]:<28} {times[-1][1]:8.1f} s", flush=True)
        out_dir = study.results_dir / "notebooks"
        out_dir.mkdir(parents=True, exist_ok=True)
        for stage, nb in enumerate(selected, start=stages - len(selected) + 1):
            print(_stage_line(stage, stages, nb.name, times, expected), flush=True)
            started = time.perf_counter()
            _execute(nb, out_dir / nb.name, parameters[nb], study)
            times.append((nb.name, time.perf_counter() - started))
            print(f"{nb.name:<28} {times[-1][1]:8.1f} s", flush=True)
        if store_outputs:
            for nb in selected:
                copy_outputs(out_dir / nb.name, nb)
        if not only:
            figures = study.figures if from_scratch else None
            record_times(study.results_dir, times, fingerprint, figures)
    return times


def _stage_line(
    stage: int, stages: int, name: str, times: list[tuple[str, float]], expected: dict[str, float]
) -> str:
    """ "[2/6] 01_data_pool" and, with `expected` (every stage's wall seconds in the last
    reproduction from scratch), the time the whole reproduction has left: the stages still to
    run as recorded, scaled by this run's pace over the stages done (recorded pace at first)."""
    line = f"[{stage}/{stages}] {name.removesuffix('.ipynb')}"
    if not expected:
        return line
    done = dict(times)
    recorded = sum(expected[stage_name] for stage_name in done)
    left = sum(s for stage_name, s in expected.items() if stage_name not in done)
    left *= sum(done.values()) / recorded if recorded else 1.0
    finish = time.strftime("%H:%M", time.localtime(time.time() + left))
    duration = f"{left / 3600:.1f} h" if left >= 5400 else f"{left / 60:.0f} min"
    return f"{line}  (all stages: about {duration} left, done about {finish})"


KERNEL_PREFIX = "repro-kernel-"
"""Kernel socket folders: $TMPDIR/repro-kernel-<pid of the reproduction>-<random>."""


def remove_leftovers(results_dir: Path) -> None:
    """Remove what a killed reproduction (kill -9) left: the staging folders in `results_dir` (the
    caller holds the preset's lock, so none is in use) and this user's kernel socket folders whose
    reproduction no longer runs."""
    for staging in results_dir.glob("staging-*"):
        shutil.rmtree(staging, ignore_errors=True)
    for sockets in Path(tempfile.gettempdir()).glob(f"{KERNEL_PREFIX}*-*"):
        pid = sockets.name.removeprefix(KERNEL_PREFIX).split("-")[0]
        if pid.isdigit() and sockets.stat().st_uid == os.getuid() and not process_alive(int(pid)):
            shutil.rmtree(sockets, ignore_errors=True)


NEEDED = {
    "preset": ("it would not run the preset asked for", 'preset = "cpu"'),
    "dry_run": ("it would run the full preset", "dry_run = False"),
}
"""The parameters a notebook must declare when a reproduction passes them: what it would do
without, and the line that declares it."""


def series_parameters(
    selected: list[Path], preset: str, workers: int | None, dry_run: bool
) -> dict[Path, dict]:
    """The papermill parameters of each notebook, checked before any work (check_parameters):
    of the preset, train, workers and dry_run, those the notebook declares (a user's notebook
    without `train` or `workers` runs as it is); a notebook that lacks one of NEEDED is a
    ReproError saying what to add."""
    import papermill

    parameters: dict = {"preset": preset, "train": True}
    if workers is not None:
        parameters["workers"] = workers
    if dry_run:
        parameters["dry_run"] = True
    check_parameters(parameters)
    passed = {}
    for nb in selected:
        declared = set(papermill.inspect_notebook(str(nb)))
        missing = sorted(NEEDED.keys() & (parameters.keys() - declared))
        if missing:
            effect, line = NEEDED[missing[0]]
            raise ReproError(
                f"{nb} has no {missing[0]} parameter, so {effect}: add `{line}` to its parameters "
                "cell"
            )
        passed[nb] = {k: v for k, v in parameters.items() if k in declared}
    return passed


def _execute(nb: Path, executed: Path, parameters: dict, study: Study) -> None:
    """Execute `nb` into `executed` with papermill and `parameters` (series_parameters), in the
    project root, its kernel on private sockets; its figures and tables go to a staging folder,
    moved into study.figures only when every cell ran (one rename per file) and removed otherwise.
    A ReproError names the failing cell."""
    import papermill

    with (
        tempfile.TemporaryDirectory(prefix=f"{KERNEL_PREFIX}{os.getpid()}-") as sockets,
        tempfile.TemporaryDirectory(prefix="staging-", dir=study.results_dir) as staging,
    ):
        try:
            papermill.execute_notebook(
                str(nb),
                str(executed),
                parameters=parameters,
                cwd=str(study.root),
                kernel_name="python3",
                kernel_manager_class=EnvKernelManager,
                config=_kernel_config(Path(sockets), Path(staging)),
                shutdown_kernel="immediate",  # on Ctrl-C or SIGTERM too, so stopping is quick
                progress_bar=False,
            )
        except papermill.PapermillExecutionError as exc:
            raise ReproError(
                f"{nb.name} failed in cell {exc.cell_index} (execution count {exc.exec_count}): "
                f"{exc.ename}: {exc.evalue}; see {executed}; figures/{study.preset.name}/ keeps "
                "its earlier files"
            ) from None
        for path in sorted(Path(staging).iterdir()):
            study.figures.mkdir(parents=True, exist_ok=True)
            os.replace(path, study.figures / path.name)


def terminal_text(text: str) -> str:
    """`text` as a terminal shows it: each line only what follows its last carriage return (a
    progress bar's final state, not every redraw)."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def copy_outputs(executed: Path, notebook: Path) -> None:
    """Put the outputs of `executed` (a papermill copy of `notebook`) into `notebook`, whose cells
    and metadata stay as they are; refused when its cells changed since the execution. Widgets
    (progress bars) are left out: without their saved state a viewer shows them at 0%; a text
    bar's carriage-return redraws keep their last state (terminal_text)."""
    ran = nbformat.read(executed, as_version=4)
    ran.cells = [c for c in ran.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    source = nbformat.read(notebook, as_version=4)
    if [c.source for c in ran.cells] != [c.source for c in source.cells]:
        raise ReproError(f"{notebook} changed after {executed} was executed; run it again")
    for cell, ran_cell in zip(source.cells, ran.cells):
        if cell.cell_type == "code":  # progress-bar widgets carry no result: not kept
            cell.outputs = [o for o in ran_cell.outputs if WIDGET not in o.get("data", {})]
            for output in cell.outputs:
                if output.output_type == "stream":
                    output.text = terminal_text(output.text)
            cell.execution_count = ran_cell.execution_count
    partial = notebook.with_name(f".{notebook.name}.tmp-{os.getpid()}")
    nbformat.write(source, partial)
    os.replace(partial, notebook)
