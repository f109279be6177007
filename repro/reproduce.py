"""`repro reproduce`: execute the notebook series with papermill for one preset.

Executed notebooks go to runs/<name>/notebooks/, figures to figures/<name>/ (written by the
notebooks); the notebooks in notebooks/ are only read, so edits made there survive. Finished sweep
runs are reused, so a second reproduction only re-executes the analysis. With `store_outputs` the
executed outputs are copied back into notebooks/*.ipynb (the committed copies show the cpu preset).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager

from repro.errors import ReproError
from repro.paths import project_root
from repro.plan import plan_text
from repro.presets import get_preset
from repro.study import open_study
from repro.sweep import reset_failed

WIDGET = "application/vnd.jupyter.widget-view+json"  # a live widget's output (tqdm's bars)


class _IPCKernelManager(KernelManager):
    """A kernel on this machine over IPC sockets (TCP kernels warn that they are unencrypted)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(transport="ipc", **kwargs)


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


def reproduce(
    preset: str,
    only: list[str] | None = None,
    workers: int | None = None,
    store_outputs: bool = False,
    retry_failed: bool = False,
) -> list[tuple[str, float]]:
    """Run the notebooks in order; returns (stage, wall seconds). For the whole series (no `only`),
    the runs that follow from the preset alone train first as one sweep (Study.prefetch: the longest
    jobs first, no idle workers between notebooks). With `retry_failed`, the failed runs of the
    preset's store train again (sweep.reset_failed). Raises ReproError naming the failing cell."""
    import papermill

    chosen = get_preset(preset)  # fail fast on a bad name or preset file
    if preset.endswith((".yaml", ".yml")):  # the kernels may run elsewhere: pass the file itself
        preset = str(Path(preset).resolve() if Path(preset).is_file() else project_root() / preset)
    root = project_root()
    selected = notebooks(root, only)
    try:
        print(plan_text(chosen, root), flush=True)
    except ReproError as exc:  # a hub tokenizer's vocab: known once the pools are built
        print(f"plan: {exc}", flush=True)
    out_dir = root / "runs" / chosen.name / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    parameters = {"preset": preset} | ({"workers": workers} if workers else {})
    study = open_study(preset, workers=workers)
    if retry_failed:
        print(f"retrying {len(reset_failed(study.store))} failed run(s)", flush=True)
    times = []
    if not only:  # the whole series: first every run the preset fixes, as one sweep
        started = time.perf_counter()
        study.prefetch()
        times.append(("preset sweeps (prefetch)", time.perf_counter() - started))
        print(f"{times[-1][0]:<28} {times[-1][1]:8.1f} s", flush=True)
    for nb in selected:
        started = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(nb),
                str(out_dir / nb.name),
                parameters=parameters,
                cwd=str(root),
                kernel_name="python3",
                kernel_manager_class=_IPCKernelManager,
                progress_bar=False,
            )
        except papermill.PapermillExecutionError as exc:
            raise ReproError(
                f"{nb.name} failed in cell {exc.cell_index} (execution count {exc.exec_count}): "
                f"{exc.ename}: {exc.evalue}; see {out_dir / nb.name}"
            ) from None
        times.append((nb.name, time.perf_counter() - started))
        print(f"{nb.name:<28} {times[-1][1]:8.1f} s", flush=True)
    if store_outputs:
        for nb in selected:
            copy_outputs(out_dir / nb.name, nb)
    return times


def copy_outputs(executed: Path, notebook: Path) -> None:
    """Put the outputs of `executed` (a papermill copy of `notebook`) into `notebook`, whose cells
    and metadata stay as they are; refused when its cells changed since the execution. Widgets
    (progress bars) are left out: without their saved state a viewer shows them at 0%."""
    ran = nbformat.read(executed, as_version=4)
    ran.cells = [c for c in ran.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    source = nbformat.read(notebook, as_version=4)
    if [c.source for c in ran.cells] != [c.source for c in source.cells]:
        raise ReproError(f"{notebook} changed after {executed} was executed; run it again")
    for cell, ran_cell in zip(source.cells, ran.cells):
        if cell.cell_type == "code":  # progress-bar widgets carry no result: not kept
            cell.outputs = [o for o in ran_cell.outputs if WIDGET not in o.get("data", {})]
            cell.execution_count = ran_cell.execution_count
    partial = notebook.with_name(f".{notebook.name}.tmp-{os.getpid()}")
    nbformat.write(source, partial)
    os.replace(partial, notebook)
