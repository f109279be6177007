"""A notebook's opening: what this run of it found, from its claim tables, beside the paper's.

`Findings` shows a line under the notebook's first cells as soon as they run, and replaces it in
place with the findings table when the notebook reaches its claims (an IPython display_id:
JupyterLab, papermill and `repro reproduce` update the earlier output, so a saved notebook opens
with what its run found). The closing summary (intervals.claim_summary) says the same per claim in
sentences.
"""

from __future__ import annotations

import math

import pandas as pd
from IPython.display import DisplayHandle, Markdown, display

from repro.analysis.intervals import claim_count

PENDING = (
    "**What this run found** is filled in here from its claim tables when the notebook reaches "
    "them (its last cells)."
)


class Findings:
    """The findings table at a notebook's top: `report` fills it in."""

    def __init__(self, preset: str) -> None:
        self.preset = preset
        self._handle: DisplayHandle | None = display(Markdown(PENDING), display_id=True)

    def report(self, claims: list[pd.DataFrame]) -> None:
        """Fill in the table at the top from this run's claim tables (intervals.claim_table)."""
        text = findings_table(self.preset, claims)
        if self._handle is not None:
            self._handle.update(Markdown(text))


def findings_table(preset: str, claims: list[pd.DataFrame]) -> str:
    """Markdown: the verdict counts, then a row per claim: the claim, what the paper reports, and
    this run's verdict with its effect and interval (the claim table's first comparison; the full
    measurement is in the claims table further down)."""
    table = pd.concat(claims, ignore_index=True)
    rows = [
        f"**What this run found** (preset {preset}): {claim_count(table)}.",
        "",
        "| claim | the paper | this run |",
        "|---|---|---|",
    ]
    for _, claim in table.iterrows():
        rows.append(f"| {claim['claim']} | {claim['paper']} | {_measured(claim)} |")
    return "\n".join(rows)


def _measured(claim: pd.Series) -> str:
    """A claim row's verdict, with its effect and interval where it has numbers."""
    verdict = f"**{claim['agrees?']}**"
    effect, low, high, count = (_number(claim, name) for name in ("effect", "low", "high", "n"))
    if not math.isfinite(effect):
        return verdict
    interval = f" [{low:+.3f}, {high:+.3f}]" if math.isfinite(low) and math.isfinite(high) else ""
    replicates = f", n = {count:.0f}" if math.isfinite(count) else ""
    return f"{verdict}: effect {effect:+.3f}{interval}{replicates}"


def _number(claim: pd.Series, name: str) -> float:
    """A numeric column of a claim row as a float (NaN where it is missing or empty)."""
    value = pd.to_numeric(claim.get(name), errors="coerce")
    return float(value) if pd.notna(value) else math.nan
