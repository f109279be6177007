"""The checks that plots.save runs on every figure before writing it: what makes a figure hard to
read, or misread, as saved (legibility_problems). Small or NaN text, axes without labels, texts
that overlap, legend entries without a visible mark, interval levels stated unlike the ones drawn,
and means over replicates drawn without their intervals; the figure functions record the levels
and replicates they draw on each axes (`marks`: plots.errorbars, plots.band, plots.replicated)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axis import Axis, Tick
from matplotlib.collections import Collection, PolyCollection
from matplotlib.colors import to_rgba_array
from matplotlib.container import Container, ErrorbarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text


def percent(level: float) -> str:
    """A level as figures and tables write it: 0.9 -> '90%', 0.9667 -> '96.7%'."""
    return f"{100 * level:.3g}%"


MIN_FONT_PT = 8.0
"""The smallest text a saved figure may carry (points, at the size it is saved at)."""
OVERLAP_PT = 2.0
"""Two texts overlap when their (rotated) boxes share more than this many points both ways."""
INTERVAL_TEXT = re.compile(r"(\d+(?:\.\d+)?)% (?:t )?intervals?\b")
"""How a figure states the level of its intervals ("90% interval", "96.7% t intervals")."""
NOTHING = {None, "None", "none", "", " "}  # a line style or marker that draws nothing
Shown = tuple[Text, plt.Axes | None]  # a text drawn, and the axes it belongs to (None: the figure)


def legibility_problems(fig: plt.Figure) -> list[str]:
    """What makes `fig` hard to read, or misread, as saved: visible text under MIN_FONT_PT points
    or showing a NaN, an axes with data but without an x or y label, texts that overlap, legend
    entries without a visible mark, interval levels unlike the ones drawn, and means over
    replicates without their intervals (_interval_problems)."""
    fig.canvas.draw()  # tick labels exist only once drawn
    renderer = fig.canvas.get_renderer()
    shown = list(_shown_texts(fig))  # (text, the axes it belongs to)
    texts = [text for text, _ in shown]
    problems = [
        f"text {text.get_text()[:40]!r} at {text.get_fontsize():.1f} pt"
        for text in texts
        if text.get_fontsize() < MIN_FONT_PT
    ]
    problems += [
        f"text {text.get_text()[:40]!r} shows a NaN"
        for text in texts
        if re.search(r"\bnan\b", text.get_text(), re.IGNORECASE)
    ]
    problems += _unlabelled(fig) + _overlapping(shown, renderer)
    return problems + _legend_problems(fig, renderer) + _interval_problems(fig, texts)


def _where(ax: plt.Axes) -> str:
    return f"axes {ax.get_title() or ax.figure.axes.index(ax)!r}"


def _unlabelled(fig: plt.Figure) -> list[str]:
    """Axes with data but without an x or y label (a y label may sit on the axes it shares its y
    axis with, a colour bar's on its one axis)."""
    problems = []
    for ax in fig.axes:
        if not (ax.get_visible() and ax.has_data()):
            continue
        ylabels = [a.get_ylabel() for a in ax.get_shared_y_axes().get_siblings(ax)]
        labelled = [ax.get_xlabel(), " ".join(ylabels)]
        if ax.get_label() == "<colorbar>":  # its label on its one axis
            labelled = [" ".join(labelled)]
        if not all(label.strip() for label in labelled):
            problems.append(f"{_where(ax)}: an axis without a label")
    return problems


def _shown_texts(artist: Artist, owner: plt.Axes | None = None) -> Iterator[Shown]:
    """The visible, non-empty texts drawn under `artist` (tick labels only of the ticks drawn),
    each with the axes it belongs to (None: the figure's)."""
    owner = artist if isinstance(artist, plt.Axes) else owner
    if not artist.get_visible() or isinstance(artist, Tick):
        return
    if isinstance(artist, Text) and artist.get_text().strip():
        yield artist, owner
    children = artist.get_children()
    if isinstance(artist, Axis):  # the ticks inside the view, as Axis.draw picks them
        children += [label for tick in artist._update_ticks() for label in tick.get_children()]
    for child in children:
        yield from _shown_texts(child, owner)


def _corners(text: Text, renderer) -> np.ndarray:
    """The corners of `text`'s box as drawn (display pixels, rotated with the text), in the order
    of Bbox.corners: two edges leave the first corner."""
    box, angle = Text.get_window_extent(text, renderer), text.get_rotation()
    if angle % 90 == 0:
        return box.corners()
    text.set_rotation(0)
    flat = Text.get_window_extent(text, renderer)
    text.set_rotation(angle)
    c, s = np.cos(np.radians(angle)), np.sin(np.radians(angle))
    offsets = np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]]) * [flat.width / 2, flat.height / 2]
    return np.array([box.x0 + box.x1, box.y0 + box.y1]) / 2 + offsets @ [[c, s], [-s, c]]


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """How deeply two boxes (_corners) overlap (pixels): the least overlap of their projections
    on their edges' directions (separating axes); zero or less where they are apart."""
    units = [e / np.linalg.norm(e) for q in (a, b) for e in (q[1] - q[0], q[2] - q[0])]
    return min(min(max(a @ u), max(b @ u)) - max(min(a @ u), min(b @ u)) for u in units)


def _overlapping(shown: list[Shown], renderer) -> list[str]:
    """Texts (_shown_texts) that overlap each other or a panel not their own by more than
    OVERLAP_PT: tick labels running together, a y label over the neighbouring panel."""
    if not shown:
        return []
    texts, owners = zip(*shown)
    tolerance = OVERLAP_PT * texts[0].figure.dpi / 72
    boxes = [_corners(text, renderer) for text in texts]
    problems = [
        f"texts {texts[i].get_text()[:30]!r} and {texts[j].get_text()[:30]!r} overlap"
        for i, j in zip(*np.triu_indices(len(texts), 1))
        if _overlap(boxes[i], boxes[j]) > tolerance
    ]
    panels = [ax for ax in texts[0].figure.axes if ax.get_visible()]
    for text, owner, box in zip(texts, owners, boxes):
        for ax in panels:
            if owner not in (None, ax) and _overlap(box, ax.bbox.corners()) > tolerance:
                problems.append(f"text {text.get_text()[:30]!r} lies over {_where(ax)}")
    return problems


def _opaque(color) -> bool:
    """Whether a colour (or any of an array of them) is not wholly transparent."""
    return bool(to_rgba_array(color)[:, 3].any())


def _draws_nothing(handle: Artist | None) -> bool:
    """Whether a legend's handle shows no mark: invisible, transparent, or a line without a line
    style or marker, a patch or collection without face or edge."""
    if handle is None or not handle.get_visible() or handle.get_alpha() == 0:
        return True
    if isinstance(handle, Line2D):
        line = handle.get_linestyle() not in NOTHING and handle.get_linewidth() > 0
        marker = handle.get_marker() not in NOTHING and handle.get_markersize() > 0
        faces = _opaque(handle.get_markerfacecolor()) or _opaque(handle.get_markeredgecolor())
        return not ((line and _opaque(handle.get_color())) or (marker and faces))
    if isinstance(handle, Patch | Collection):
        edge = _opaque(handle.get_edgecolor()) and np.any(np.asarray(handle.get_linewidth()) > 0)
        return not (_opaque(handle.get_facecolor()) or edge)
    return False


def _in_view(ax: plt.Axes, artist, renderer) -> bool:
    """Whether some of `artist` (a line, collection, patch or container) lies inside `ax`'s view;
    a line without data (a legend's proxy) counts as inside."""
    box = ax.bbox.padded(1)
    for part in artist.get_children() if isinstance(artist, Container) else [artist]:
        if isinstance(part, Line2D):
            path = part.get_transform().transform_path(part.get_path())
            points = path.vertices[np.isfinite(path.vertices).all(axis=1)]
            if not len(points) or box.count_contains(points) or path.intersects_bbox(box, False):
                return True
        elif part.get_visible() and part.get_window_extent(renderer).overlaps(box):
            return True
    return False


def _legend_problems(fig: plt.Figure, renderer) -> list[str]:
    """Legend entries that mark nothing: a handle that draws nothing, or a label whose artists
    (the axes' labelled lines, bars, bands, error bars) all lie outside their axes' view."""
    artists = {}
    for ax in fig.axes:
        for artist, label in zip(*ax.get_legend_handles_labels()):
            artists.setdefault(label, []).append((ax, artist))
    problems = []
    for legend in [ax.get_legend() for ax in fig.axes] + fig.legends:
        if legend is None or not legend.get_visible():
            continue
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            label = text.get_text()
            if _draws_nothing(handle):
                problems.append(f"legend entry {label[:40]!r} shows no mark")
            elif label in artists and not any(_in_view(*a, renderer) for a in artists[label]):
                problems.append(f"legend entry {label[:40]!r} marks nothing inside the axes")
    return problems


def marks(ax: plt.Axes) -> dict:
    """What the figure function declared about `ax`: its intervals' levels, its replicates."""
    return ax.__dict__.setdefault("_repro_marks", {"levels": set(), "replicates": 1})


def _has_intervals(ax: plt.Axes) -> bool:
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    return any(c.has_xerr or c.has_yerr for c in bars) or bool(bands)


def _interval_problems(fig: plt.Figure, texts: list[Text]) -> list[str]:
    """Interval levels stated but not drawn or drawn but not stated; error bars or bands at no
    recorded level; means over replicates without an interval (see the section's comment)."""
    drawn = {percent(level) for ax in fig.axes for level in marks(ax)["levels"]}
    found = [m for text in texts for m in INTERVAL_TEXT.findall(text.get_text())]
    stated = {percent(float(m) / 100) for m in found}
    problems = [
        f"states a {s} interval but draws {', '.join(sorted(drawn)) or 'none at a recorded level'}"
        for s in sorted(stated - drawn)
    ]
    problems += [
        f"draws {d} intervals without stating their level (plots.interval_label)"
        for d in sorted(drawn - stated)
    ]
    if not drawn and any(_has_intervals(ax) for ax in fig.axes):
        problems.append("draws error bars or bands at no recorded level (plots.errorbars, band)")
    for ax in fig.axes:
        said = re.search(r"mean over (\d+) ", ax.get_title())
        n = max(marks(ax)["replicates"], int(said.group(1)) if said else 1)
        if n > 1 and not _has_intervals(ax):
            problems.append(f"{_where(ax)}: a mean over {n} replicates without an interval")
    return problems
