"""`repro reproduce`: execute the notebook series with papermill for one preset.

Executed notebooks go to runs/<preset>/notebooks/, figures to figures/<preset>/ (written by the
notebooks). Finished sweep runs are reused, so a second reproduction only re-executes the analysis.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from repro.errors import ReproError
from repro.presets import get_preset, project_root
from repro.study import open_study


def notebooks(root: Path, only: list[str] | None = None) -> list[Path]:
    found = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [nb for nb in found if nb.name[:2] in only]
        missing = sorted(set(only) - {nb.name[:2] for nb in found})
        if missing:
            every = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
            raise ReproError(
                f"no notebook numbered {missing[0]} in {root / 'notebooks'}; choose from "
                f"{', '.join(nb.name[:2] for nb in every)}"
            )
    return found


def reproduce(
    preset: str, only: list[str] | None = None, workers: int | None = None
) -> list[tuple[str, float]]:
    """Run the notebooks in order; returns (stage, wall seconds). For the whole series (no `only`),
    the runs that follow from the preset alone train first as one sweep (Study.prefetch: the longest
    jobs first, no idle workers between notebooks). Raises ReproError naming the failing cell."""
    import papermill

    get_preset(preset)  # fail fast on a bad name
    root = project_root()
    out_dir = root / "runs" / preset / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ["REPRO_PRESET"] = preset
    parameters = {"preset": preset} | ({"workers": workers} if workers else {})
    chosen = notebooks(root, only)
    times = []
    if not only:  # the whole series: first every run the preset fixes, as one sweep
        started = time.perf_counter()
        open_study(preset, workers=workers).prefetch()
        times.append(("preset sweeps (prefetch)", time.perf_counter() - started))
        print(f"{times[-1][0]:<28} {times[-1][1]:8.1f} s", flush=True)
    for nb in chosen:
        started = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(nb),
                str(out_dir / nb.name),
                parameters=parameters,
                cwd=str(root),
                kernel_name="python3",
                progress_bar=False,
            )
        except papermill.PapermillExecutionError as exc:
            raise ReproError(
                f"{nb.name} failed in cell {exc.cell_index} (execution count {exc.exec_count}): "
                f"{exc.ename}: {exc.evalue}; see {out_dir / nb.name}"
            ) from None
        times.append((nb.name, time.perf_counter() - started))
        print(f"{nb.name:<28} {times[-1][1]:8.1f} s", flush=True)
    return times
