"""One figure style for the whole series; figures are saved as PNG and PDF under
figures/<preset>/."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from repro.presets import project_root

PALETTE = ["#1b6ca8", "#e07b39", "#3a9e5f", "#c23b4e", "#7d5ba6", "#8c6d46", "#d477b4", "#6f6f6f"]
MEASURED = {"marker": "o", "linestyle": "-"}
PROJECTED = {
    "marker": None,
    "linestyle": "--",
    "alpha": 0.7,
}  # projections are never drawn like measurements


def set_style() -> None:
    plt.rcParams.update(
        {
            "figure.figsize": (6.0, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 160,
            "savefig.bbox": "tight",
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
            "legend.frameon": False,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "lines.markersize": 4,
        }
    )


def save(
    fig: plt.Figure, preset: str, name: str, figures_dir: str | Path | None = None
) -> list[Path]:
    """Write `fig` as figures/<preset>/<name>.png and .pdf; returns the paths."""
    folder = Path(figures_dir) if figures_dir else project_root() / "figures" / preset
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:  # no creation date in the PDF, so regenerated figures are byte-identical
        fig.savefig(path, metadata={"CreationDate": None} if path.suffix == ".pdf" else None)
    return paths


def batch_axis(ax: plt.Axes, batch_sizes) -> None:
    """Log2 x axis labelled with the batch sizes themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batch_sizes))
    ax.set_xticklabels([str(b) for b in batch_sizes])
    ax.set_xlabel("batch size (sequences)")


set_style()
