"""The canvas every report figure is drawn on (`vcli.plots.render`, `vcli.plots.pairs`):
matplotlib (imported here only, and only when a report is made), the rcParams, the figure and
study records, shared drawing helpers, and the SVG a figure becomes.

Figures are `matplotlib.figure.Figure` objects made without pyplot (no global figure state,
no GUI backend: the SVG and Agg canvases are chosen by the output format), drawn under one
set of rcParams (`RC`). Text is drawn as paths (`svg.fonttype='path'`), so an SVG looks the
same in any browser without a font being installed or downloaded.

An SVG for the HTML report is made embeddable by `svg_element`: the XML prolog, DOCTYPE and
the RDF metadata (which names web URIs) are dropped, every id inside is prefixed with the
figure's own id (several inline SVGs share one id space, and matplotlib numbers its ids the
same way in every figure), the root gets `id="fig-<key>"`, and each trial's point, line or
bar gets a `<title>` tooltip naming the trial, its metrics and its parameters.

Points, lines and bars of many trials are one collection each (one artist per trial would
make a study of hundreds of trials take many seconds to draw); the SVG backend writes a
collection's members in order, so the n-th element of its group gets the n-th tooltip.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import Any, Sequence

from vcli.errors import MissingExtraError
from vcli.plots import data as d
from vcli.spec import Goal, MetricSpec, ParameterSpec, StudySpec, Trial

RC = {
    "svg.fonttype": "path",
    "svg.hashsalt": "vcli",  # stable ids: the same study gives the same SVG
    "font.size": 9,
    "axes.titlesize": 10,
    "figure.titlesize": 11,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
BEST = "#d62728"
POINT = "#1f77b4"


@dataclass
class Drawn:
    """A drawn figure: its report key and title, the matplotlib figure, and the tooltips of
    the artists given a gid: one text for a whole artist (`tip`), or one per member of a
    collection, in order (`tips`)."""

    key: str
    title: str
    figure: Any
    whole: dict[str, str] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)

    def tip(self, text: str) -> str:
        """A fresh gid for an artist whose SVG group should carry `text` as its tooltip."""
        gid = f"tip{len(self.whole) + len(self.members)}"
        self.whole[gid] = text
        return gid

    def tips(self, texts: Sequence[str]) -> str:
        """A fresh gid for a collection whose n-th member gets `texts[n]` as its tooltip."""
        gid = f"tip{len(self.whole) + len(self.members)}"
        self.members[gid] = list(texts)
        return gid


@dataclass(frozen=True)
class Study:
    """What every figure reads: the spec, every parameter (conditional ones included), the
    trials in trial order, each metric's finished trials, and the time running trials end at."""

    spec: StudySpec
    params: Sequence[ParameterSpec]
    trials: Sequence[Trial]
    done: dict[str, list[d.Finished]]
    now: datetime

    @property
    def metrics(self) -> Sequence[MetricSpec]:
        return self.spec.metrics

    @property
    def multi(self) -> bool:
        return len(self.spec.metrics) > 1

    def key(self, base: str, metric: MetricSpec) -> str:
        """A per-objective figure's key: `base`, or `base-<metric id>` with several metrics."""
        return f"{base}-{metric.metric_id}" if self.multi else base

    def describe(self, trial: Trial) -> str:
        return d.describe(trial, self.params, self.metrics)


def matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingExtraError("Drawing plots", "plot", "matplotlib") from None
    import warnings

    # A parameter value in a script the font lacks (日本語) is drawn as boxes; matplotlib's
    # warning about it, twice per figure with a source path, flooded plot's and the dashboard's stderr.
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
    # Names and values are text, never TeX: `$\foo$` as a category crashed the report (a
    # 130-line ParseException traceback) and `a$b$c` was drawn as abc with an italic b.
    matplotlib.rcParams["text.parse_math"] = False
    return matplotlib


#: Above this many marks in one plot (points, bars, vertices of lines), `svg_element` draws the
#: plot's points, lines and bars as an image inside the SVG (axes, ticks and text stay vector),
#: as optuna-dashboard and TensorBoard cap what they draw: a 10,000-trial study's figures were
#: megabytes of SVG each, seconds for a browser to lay out. Their marks carry no tooltip then.
MAX_VECTOR_MARKS = 2500
#: The resolution of those images (the figure's vector parts do not depend on it).
RASTER_DPI = 144
#: The most marks one plot draws at all: past it a plot draws a sample of its trials that
#: keeps the best ones and the extremes of every axis (`vcli.plots.thin`).
MAX_MARKS = 4000


def _marks(artist: Any) -> int:
    """How many marks `artist` draws (see `MAX_VECTOR_MARKS`)."""
    if hasattr(artist, "get_segments"):  # a LineCollection: every trial's curve
        return sum(len(seg) for seg in artist.get_segments())
    if hasattr(artist, "get_xdata"):  # a Line2D
        return len(artist.get_xdata())
    if hasattr(artist, "get_offsets"):  # points (offsets) or bars (paths)
        return max(len(artist.get_offsets()), len(artist.get_paths()))
    return 0


def rasterize_heavy(figure: Any) -> bool:
    """Mark the points, lines and bars of every plot of `figure` holding more than
    `MAX_VECTOR_MARKS` marks to be drawn as an image, its legend placed in a fixed corner
    rather than the emptiest one; True if any was."""
    heavy = False
    for ax in figure.axes:
        artists = [*ax.collections, *ax.lines]
        if sum(_marks(a) for a in artists) > MAX_VECTOR_MARKS:
            for artist in artists:
                artist.set_rasterized(True)
            legend = ax.get_legend()
            if legend is not None and legend._loc == 0:  # "best" tests every position against every mark:
                legend.set_loc("upper right")  # 18 of a 10,000-trial study's 47 s of drawing
            heavy = True
    return heavy


def svg_element(fig: Drawn) -> str:
    """The figure as a standalone `<svg id="fig-<key>">` element (module docstring)."""
    buf = io.StringIO()
    with matplotlib().rc_context(RC):
        dpi = RASTER_DPI if rasterize_heavy(fig.figure) else "figure"
        fig.figure.savefig(buf, format="svg", metadata={"Date": None}, dpi=dpi)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    for gid, tip in fig.whole.items():
        text = text.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{escape(tip)}</title>', 1)
    for gid, tips in fig.members.items():
        text = _title_members(text, gid, tips)
    root = "fig-" + re.sub(r"[^A-Za-z0-9_.-]", "_", fig.key)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{root}-{m[1]}"', text)
    text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{root}-{m[1]}"' if m[1] in ids else m[0], text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{root}-{m[1]})" if m[1] in ids else m[0], text)
    return text.replace("<svg ", f'<svg id="{root}" class="vcli-figure-svg" aria-label="{escape(fig.title)}" ', 1).strip()


def _title_members(text: str, gid: str, tips: Sequence[str]) -> str:
    """`text` with a `<title>` in each drawn element (`<use>` or `<path>`, outside `<defs>`)
    of the group `gid`, in order; unchanged when their count is not len(tips)."""
    start = text.find(f'<g id="{gid}">')
    if start < 0:
        return text
    depth, end = 0, start
    for m in re.compile(r"<g\b|</g>").finditer(text, start):
        depth += 1 if m[0] == "<g" else -1
        if depth == 0:
            end = m.end()
            break
    group = text[start:end]
    defs_end = group.rfind("</defs>")  # a collection's shared marker comes first, in <defs>
    body_at = defs_end + len("</defs>") if defs_end >= 0 else 0
    elements = list(re.finditer(r"<(use|path)\b([^>]*?)/>", group[body_at:]))
    if len(elements) != len(tips):
        return text
    out, pos = [group[:body_at]], 0
    for m, tip in zip(elements, tips):
        out.append(group[body_at + pos:body_at + m.start()])
        out.append(f"<{m[1]}{m[2]}><title>{escape(tip)}</title></{m[1]}>")
        pos = m.end()
    out.append(group[body_at + pos:])
    return text[:start] + "".join(out) + text[end:]


def save(fig: Drawn, path: str, fmt: str) -> None:
    """Write the figure to `path` as `fmt` ("svg" or "png")."""
    if fmt == "svg":
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg_element(fig) + "\n")
        return
    with matplotlib().rc_context(RC):
        fig.figure.savefig(path, format=fmt, dpi=150)


def new_figure(key: str, title: str, width: float, height: float) -> Drawn:
    """A new figure; a newline in `title` breaks the drawn title (the report's is one line)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    fig.suptitle(title)
    return Drawn(key, title.replace("\n", " "), fig)


def goal_label(m: MetricSpec) -> str:
    return f"{m.metric_id} ({'maximize' if m.goal == Goal.MAXIMIZE else 'minimize'})"


def metric_names(metrics: Sequence[MetricSpec]) -> str:
    ids = [m.metric_id for m in metrics]
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]


def trial_x(trials: Sequence[Trial]) -> dict[str, float]:
    """Each trial's place on a 'trial' axis: its number when ids are numbers, else its order."""
    if all(t.id.isdigit() for t in trials):
        return {t.id: float(t.id) for t in trials}
    return {t.id: float(i + 1) for i, t in enumerate(trials)}


def integer_x(ax, locator: type) -> None:
    """Whole-number ticks on x (trials, steps), even with one point: matplotlib's automatic
    limits around a single x span less than one unit and would get fractional ticks."""
    lo, hi = ax.get_xlim()
    if hi - lo < 2:
        mid = round((lo + hi) / 2)
        ax.set_xlim(mid - 1, mid + 1)
    ax.xaxis.set_major_locator(locator(integer=True))


def value_norm(values: Sequence[float]) -> Any:
    from matplotlib.colors import Normalize

    lo, hi = min(values), max(values)
    return Normalize(lo, hi if hi > lo else lo + 1)




def axis_label(ax: Any, x: float, y: float, text: str) -> None:
    """A value written beside a parallel-coordinates axis, readable over the lines."""
    ax.text(x + 0.05, y, text, fontsize=7, va="center", zorder=5,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})


# --------------------------------------------------------------------------- slices
