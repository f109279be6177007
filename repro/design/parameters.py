"""The notebooks' parameters (their cell tagged `parameters`: preset, workers, train, dry_run) and
the one check of their names and values, before a study opens (repro.study.notebook_study) or
`repro reproduce` runs a notebook."""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Mapping

from repro.errors import ReproError

PARAMETERS: dict[str, tuple[Callable[[object], bool], str]] = {
    "preset": (lambda v: isinstance(v, str), "a preset name or file (-p preset smoke)"),
    "workers": (
        lambda v: v is None or (type(v) is int and v >= 1),
        "a whole number of parallel runs, 1 or more (-p workers 4), or None for the preset's",
    ),
    "train": (lambda v: isinstance(v, bool), "True or False (-p train True)"),
    "dry_run": (lambda v: isinstance(v, bool), "True or False (-p dry_run True)"),
}
"""The notebooks' parameters (their cell tagged `parameters`): a value's test, what it takes."""

INJECTED_PREFIX = "# Parameters\n"
"""How the cell that papermill injects after the parameters cell begins."""


def check_parameters(values: Mapping[str, object], declared: Collection[str] = PARAMETERS) -> None:
    """Refuse a name that `declared` (a notebook's parameters) lacks, where papermill would only
    warn and run without it, and a value of the wrong type (PARAMETERS): a one-line ReproError.
    The paths that papermill's --inject-paths adds (PAPERMILL_*) pass."""
    for name, value in values.items():
        if name not in declared and not name.startswith("PAPERMILL_"):
            raise ReproError(
                f"unknown notebook parameter {name!r}; the notebook takes {', '.join(declared)}: "
                "check the name's spelling"
            )
        valid, takes = PARAMETERS.get(name, (lambda v: True, ""))
        if not valid(value):
            raise ReproError(f"notebook parameter {name} takes {takes}; got {value!r}")


def injected_names(sources: list[str]) -> list[str]:
    """The names that papermill's injected cell assigns, of the cells a kernel ran (`sources`);
    none where papermill injected nothing."""
    injected = [source for source in sources if source.startswith(INJECTED_PREFIX)]
    if not injected:
        return []
    assigned = [n for n in ast.parse(injected[-1]).body if isinstance(n, ast.Assign)]
    return [t.id for n in assigned for t in n.targets if isinstance(t, ast.Name)]
