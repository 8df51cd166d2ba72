"""The study report's figures, drawn with matplotlib (imported here only, and only when a
report is made).

Figures are `matplotlib.figure.Figure` objects made without pyplot (no global figure state,
no GUI backend: the SVG and Agg canvases are chosen by the output format), drawn under one
set of rcParams (`RC`). Text is drawn as paths (`svg.fonttype='path'`), so an SVG looks the
same in any browser without a font being installed or downloaded.

An SVG for the HTML report is made embeddable by `svg_element`: the XML prolog, DOCTYPE and
the RDF metadata (which names web URIs) are dropped, every id inside is prefixed with the
figure's own id (several inline SVGs share one id space, and matplotlib numbers its ids the
same way in every figure), the root gets `id="fig-<key>"`, and each trial's point or line
gets a `<title>` tooltip naming the trial, its metrics and its parameters.

Points and lines of many trials are one collection each (one artist per trial would make a
study of hundreds of trials take many seconds to draw); the SVG backend writes a
collection's members in order, so the n-th element of its group gets the n-th tooltip.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any, Sequence

from vcli.errors import UsageError
from vcli.plots import data as d
from vcli.plots.importance import METHOD, importances
from vcli.spec import Goal, MetricSpec, ParameterSpec, StudySpec, Trial
from vcli.tuning import pareto

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
NO_FINISHED = "This study has no finished trials yet."


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


def matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("Plots need matplotlib: pip install 'vcli[plot]'.") from None
    return matplotlib


def draw(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> tuple[list[Drawn], list[str]]:
    """Every figure the study has data for, in report order, and one sentence for each figure
    left out (or for a study with nothing finished yet)."""
    mpl = matplotlib()
    metric = spec.metrics[0]
    done = d.finished(metric, trials)
    figures: list[Drawn] = []
    notes: list[str] = []
    with mpl.rc_context(RC):
        if done:
            figures.append(_history(spec, params, trials))
            if params:
                figures.append(_parallel(metric, params, done, spec.metrics))
            figures.extend(_slice(metric, p, params, done, spec.metrics) for p in params)
        else:
            notes.append(NO_FINISHED)
        if any(_curve(t, metric.metric_id) for t in trials):
            figures.append(_intermediate(metric, trials))
        if done:
            ranked = importances(params, done)
            if isinstance(ranked, str):
                notes.append(ranked)
            else:
                figures.append(_importance(metric, ranked))
        if len(spec.metrics) >= 2:
            front = _pareto(spec.metrics, params, trials)
            if front is None:
                notes.append("The Pareto front needs finished trials with a value of every metric.")
            else:
                figures.append(front)
    return figures, notes


def svg_element(fig: Drawn) -> str:
    """The figure as a standalone `<svg id="fig-<key>">` element (module docstring)."""
    buf = io.StringIO()
    with matplotlib().rc_context(RC):
        fig.figure.savefig(buf, format="svg", metadata={"Date": None})
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


# --------------------------------------------------------------------------- the figures


def _figure(key: str, title: str, width: float, height: float) -> Drawn:
    """A new figure; a newline in `title` breaks the drawn title (the report's is one line)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    fig.suptitle(title)
    return Drawn(key, title.replace("\n", " "), fig)


def _goal(m: MetricSpec) -> str:
    return f"{m.metric_id} ({'maximize' if m.goal == Goal.MAXIMIZE else 'minimize'})"


def _x_of(trials: Sequence[Trial]) -> dict[str, float]:
    """Each trial's place on a 'trial' axis: its number when ids are numbers, else its order."""
    if all(t.id.isdigit() for t in trials):
        return {t.id: float(t.id) for t in trials}
    return {t.id: float(i + 1) for i, t in enumerate(trials)}


def _integer_x(ax, locator: type) -> None:
    """Whole-number ticks on x (trials, steps), even with one point: matplotlib's automatic
    limits around a single x span less than one unit and would get fractional ticks."""
    lo, hi = ax.get_xlim()
    if hi - lo < 2:
        mid = round((lo + hi) / 2)
        ax.set_xlim(mid - 1, mid + 1)
    ax.xaxis.set_major_locator(locator(integer=True))


def _history(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> Drawn:
    from matplotlib.ticker import MaxNLocator

    metrics = spec.metrics
    out = _figure("history", f"Optimisation history: {metrics[0].metric_id} by trial, with the best so far",
                  7, 1.0 + 2.4 * len(metrics))
    axes = out.figure.subplots(len(metrics), 1, squeeze=False, sharex=True)[:, 0]
    x_of = _x_of(trials)
    for ax, m in zip(axes, metrics):
        done = d.finished(m, trials)
        xs = [x_of[f.trial.id] for f in done]
        if done:
            ax.scatter(xs, [f.value for f in done], s=20, color=POINT, zorder=3, label="trial",
                       gid=out.tips([d.describe(f.trial, params, metrics) for f in done]))
            ax.plot(xs, d.best_so_far([f.value for f in done], m.goal), drawstyle="steps-post", color=BEST,
                    lw=1.5, label="best so far")
            ax.legend(loc="best", fontsize=8)
        ax.set_ylabel(_goal(m))
        _integer_x(ax, MaxNLocator)
    axes[-1].set_xlabel("trial")
    return out


def _parallel(metric: MetricSpec, params: Sequence[ParameterSpec], done: Sequence[d.Finished],
              metrics: Sequence[MetricSpec]) -> Drawn:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    n = len(params) + 1
    out = _figure("parallel", f"Parallel coordinates: every parameter and {metric.metric_id}", max(6.0, 1.4 * n + 2), 4.2)
    ax = out.figure.subplots()
    values = [f.value for f in done]
    lo, hi = min(values), max(values)
    norm, cmap = Normalize(lo, hi if hi > lo else lo + 1), colormaps["viridis"]
    ranked = sorted(done, key=lambda f: f.value if metric.goal == Goal.MAXIMIZE else -f.value)  # best drawn last, on top
    lines = []
    for f in ranked:
        ys = [d.unit(p, f.trial.parameters.get(p.parameter_id)) for p in params]
        ys.append(0.5 if hi <= lo else (f.value - lo) / (hi - lo))
        lines.append(list(zip(range(n), ys)))
    ax.add_collection(LineCollection(lines, colors=[cmap(norm(f.value)) for f in ranked], linewidths=1.3, alpha=0.8,
                                     gid=out.tips([d.describe(f.trial, params, metrics) for f in ranked])))
    for i, p in enumerate(params):
        ax.axvline(i, color="0.35", lw=0.8)
        if d.is_categorical(p):
            cats = d.categories(p)
            for c in cats:
                _axis_label(ax, i, d.unit(p, c), c)
        else:
            low, high = d.bounds(p)
            _axis_label(ax, i, 0, d.fmt(low))
            _axis_label(ax, i, 1, d.fmt(high))
    ax.axvline(n - 1, color="0.35", lw=0.8)
    _axis_label(ax, n - 1, 0, d.fmt(lo))
    _axis_label(ax, n - 1, 1, d.fmt(hi))
    ax.set_xticks(range(n), [p.parameter_id + (" (log)" if d.is_log(p) else "") for p in params] + [metric.metric_id])
    ax.set_yticks([])
    ax.set_xlim(-0.2, n - 0.4)
    ax.set_ylim(-0.06, 1.06)
    ax.grid(False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    out.figure.colorbar(ScalarMappable(norm, cmap), ax=ax, label=_goal(metric))
    return out


def _axis_label(ax: Any, x: float, y: float, text: str) -> None:
    """A value written beside a parallel-coordinates axis, readable over the lines."""
    ax.text(x + 0.05, y, text, fontsize=7, va="center", zorder=5,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})


def _slice(metric: MetricSpec, p: ParameterSpec, params: Sequence[ParameterSpec], done: Sequence[d.Finished],
           metrics: Sequence[MetricSpec]) -> Drawn:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    pid = p.parameter_id
    out = _figure(f"slice-{pid}", f"Slice: {metric.metric_id} against {pid}", 4.9, 3.4)
    ax = out.figure.subplots()
    cats = d.categories(p)
    norm, cmap = Normalize(1, max(len(done), 2)), colormaps["Blues"]
    points = []  # (x, objective, colour, tooltip)
    for order, f in enumerate(done, start=1):
        value = f.trial.parameters.get(pid)
        if value is None or (cats and str(value) not in cats):
            continue  # an inactive conditional parameter: this trial says nothing about it
        x = cats.index(str(value)) if cats else float(value)
        points.append((x, f.value, cmap(0.3 + 0.7 * norm(order)), d.describe(f.trial, params, metrics)))
    if points:
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=26, c=[p[2] for p in points], edgecolors="0.3",
                   linewidths=0.4, zorder=3, gid=out.tips([p[3] for p in points]))
    if cats:
        ax.set_xticks(range(len(cats)), cats)
        ax.set_xlim(-0.5, len(cats) - 0.5)
    elif d.is_log(p):
        ax.set_xscale("log")
    ax.set_xlabel(pid + (" (log scale)" if d.is_log(p) else ""))
    ax.set_ylabel(_goal(metric))
    out.figure.colorbar(ScalarMappable(norm, cmap), ax=ax, label="trial order (later is darker)")
    return out


def _curve(t: Trial, metric_id: str) -> list[tuple[int, float]]:
    """The trial's measurements of `metric_id` as (step, value), by step, finite values only."""
    pts = []
    for m in t.measurements:
        v = m.metrics.get(metric_id)
        if v is not None and math.isfinite(float(v)):
            pts.append((m.step_count, float(v)))
    return sorted(pts)


def _intermediate(metric: MetricSpec, trials: Sequence[Trial]) -> Drawn:
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    out = _figure("intermediate", f"Intermediate values: {metric.metric_id} by step, every trial", 7, 4.2)
    ax = out.figure.subplots()
    curves = {t.id: c for t in trials if (c := _curve(t, metric.metric_id))}
    few = len(curves) <= 10
    cmap = colormaps["tab10" if few else "viridis"]
    shown: set[str] = set()

    def once(label: str) -> str | None:
        if label in shown:
            return None
        shown.add(label)
        return label

    for i, t in enumerate(t for t in trials if t.id in curves):
        steps, values = zip(*curves[t.id])
        color = cmap(i % 10 if few else i / max(len(curves) - 1, 1))
        why = f"stopped early ({t.early_stopping_rule})" if t.early_stopping_rule else (
            f"stopped: {t.stop_reason}" if t.stop_reason else t.state.value.lower())
        ax.plot(steps, values, color=color, lw=1.2, marker=".", ms=4, label=f"trial {t.id}" if few else None,
                gid=out.tip(f"trial {t.id}: {metric.metric_id}={d.fmt(values[-1])} at step {steps[-1]}, {why}"))
        if t.early_stopping_rule:
            ax.scatter([steps[-1]], [values[-1]], marker="x", s=70, color="crimson", zorder=4,
                       label=once("stopped early by a rule"))
        elif t.stop_reason:
            ax.scatter([steps[-1]], [values[-1]], marker="s", s=50, facecolors="none", edgecolors="0.15", zorder=4,
                       label=once("stopped by the study"))
        lin = t.lineage
        if lin is not None and lin.parent_trial_id:
            parent = [v for s, v in curves.get(lin.parent_trial_id, []) if s <= lin.start_step]
            anchor = parent[-1] if parent else values[0]
            ax.plot([lin.start_step, steps[0]], [anchor, values[0]], ls=":", color=color, lw=1)
            ax.scatter([lin.start_step], [anchor], marker="^", s=55, color="darkorange", zorder=4,
                       label=once("PBT exploit: starts from a parent's checkpoint"),
                       gid=out.tip(f"trial {t.id} starts at step {lin.start_step} from trial {lin.parent_trial_id}'s checkpoint"))
    ax.set_xlabel("step")
    _integer_x(ax, MaxNLocator)
    ax.set_ylabel(_goal(metric))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=7, ncol=2 if few and len(curves) > 5 else 1)
    return out


def _importance(metric: MetricSpec, ranked: dict[str, float]) -> Drawn:
    order = sorted(ranked, key=lambda k: ranked[k])  # barh draws bottom-up: the largest on top
    out = _figure("importance", f"Hyperparameter importance for {metric.metric_id}\n({METHOD})",
                  7, 1.2 + 0.4 * len(order))
    ax = out.figure.subplots()
    bars = ax.barh(order, [ranked[k] for k in order], color=POINT)
    ax.bar_label(bars, labels=[f"{ranked[k]:.2f}" for k in order], padding=3, fontsize=8)
    ax.set_xlim(0, max(ranked.values()) * 1.15 or 1)
    ax.set_xlabel("share of the importance (sums to 1)")
    return out


def _pareto(metrics: Sequence[MetricSpec], params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> Drawn | None:
    ids = [m.metric_id for m in metrics]
    scored = [(t, v) for t in trials if (v := pareto.metric_values(t, ids)) is not None]
    if not scored:
        return None
    front = {t.id for t in pareto.pareto_front(trials, metrics)}
    x, y = metrics[0], metrics[1]
    extra = f" (non-dominated on all {len(metrics)} metrics)" if len(metrics) > 2 else ""
    out = _figure("pareto", f"Pareto front: {x.metric_id} and {y.metric_id}{extra}", 6, 4.4)
    ax = out.figure.subplots()
    for on in (False, True):
        group = [(t, v) for t, v in scored if (t.id in front) == on]
        if group:
            ax.scatter([v[0] for _, v in group], [v[1] for _, v in group], s=46 if on else 22, color=BEST if on else "0.6",
                       edgecolors="0.2" if on else "none", zorder=4 if on else 3,
                       label="Pareto front (not dominated)" if on else "dominated",
                       gid=out.tips([("on the front: " if on else "") + d.describe(t, params, metrics) for t, _ in group]))
    if len(metrics) == 2:
        # the staircase's corners lie on the dominated side: after each point when x is minimised
        pts = sorted((v[0], v[1]) for t, v in scored if t.id in front)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=BEST, lw=1, alpha=0.6,
                drawstyle="steps-post" if x.goal == Goal.MINIMIZE else "steps-pre")
    ax.set_xlabel(_goal(x))
    ax.set_ylabel(_goal(y))
    ax.legend(loc="best", fontsize=8)
    return out

