"""The report's parameter-pair figures (`vcli.plots.render.draw` adds them): contour and rank
plots of the most important parameters, two by two, on `vcli.plots.canvas`."""

from __future__ import annotations

import math
from typing import Any, Sequence

from vcli.plots import data as d
from vcli.plots.canvas import MAX_MARKS, Drawn, Study, goal_label, new_figure, value_norm
from vcli.plots.thin import say_sampled, thin
from vcli.spec import IntegerValueSpec, MetricSpec, ParameterSpec

#: Contour and rank plots pair at most this many parameters (the most important ones).
MAX_PAIR_PARAMETERS = 4


def pairs(s: Study, ranked: dict[str, dict[str, float] | str | None], figures: list[Drawn], notes: list[str]) -> None:
    """Contour and rank figures, one of each per metric with finished trials (or a note)."""
    if len(s.params) < 2:
        notes.append(f"Contour plots need at least two parameters; this study has {len(s.params)}.")
    for m in s.metrics:
        if not s.done[m.metric_id]:
            continue
        chosen, which = _pair_params(s.params, ranked[m.metric_id])
        if len(chosen) >= 2:
            figures.append(_contour(s, m, chosen, which))
    for m in s.metrics:
        if s.done[m.metric_id] and s.params:
            chosen, which = _pair_params(s.params, ranked[m.metric_id])
            figures.append(_rank(s, m, chosen, which))


def _pair_params(params: Sequence[ParameterSpec], ranked: dict[str, float] | str | None) -> tuple[list[ParameterSpec], str]:
    """The parameters a contour or rank figure pairs (at most MAX_PAIR_PARAMETERS: the most
    important ones when importances are known, else the first ones), in spec order, and a
    phrase saying which they are when not all."""
    if len(params) <= MAX_PAIR_PARAMETERS:
        return list(params), ""
    if isinstance(ranked, dict):
        top = set(sorted(ranked, key=lambda k: -ranked[k])[:MAX_PAIR_PARAMETERS])
        return [p for p in params if p.parameter_id in top], f" (the {MAX_PAIR_PARAMETERS} most important of {len(params)} parameters)"
    return list(params[:MAX_PAIR_PARAMETERS]), f" (the first {MAX_PAIR_PARAMETERS} of {len(params)} parameters)"


def _coord(p: ParameterSpec, value: Any) -> float:
    """A value on a pair plot's axis: the number itself, its log10 on a log scale, a
    category's index; NaN for no value (an inactive conditional parameter)."""
    if value is None:
        return math.nan
    if d.is_categorical(p):
        cats = d.categories(p)
        return float(cats.index(str(value))) if str(value) in cats else math.nan
    x = float(value)
    if d.is_log(p):
        return math.log10(x) if x > 0 else math.nan
    return x


def _param_axis(ax: Any, p: ParameterSpec, axis: str) -> None:
    """Ticks and limits of a pair plot's axis for `p` (`axis` "x" or "y"): category names,
    powers of ten shown as values on a log scale, the spec's range with a margin."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    limits = ax.set_xlim if axis == "x" else ax.set_ylim
    if d.is_categorical(p):
        cats = d.categories(p)
        (ax.set_xticks if axis == "x" else ax.set_yticks)(range(len(cats)), cats)
        limits(-0.5, len(cats) - 0.5)
        return
    lo, hi = (math.log10(b) for b in d.bounds(p)) if d.is_log(p) else d.bounds(p)
    pad = (hi - lo) * 0.05 or 0.5
    limits(lo - pad, hi + pad)
    if d.is_log(p):
        # whole powers of ten once the range spans a decade (0.01, 0.1, 1), not 0.0316
        target.set_major_locator(MaxNLocator(nbins=6, integer=hi - lo >= 1.5))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{10 ** v:.3g}"))
    elif isinstance(p.value_spec, IntegerValueSpec):
        target.set_major_locator(MaxNLocator(nbins=6, integer=True))


def _pair_grid(out: Drawn, chosen: Sequence[ParameterSpec]) -> list[tuple[Any, ParameterSpec, ParameterSpec]]:
    """Axes for every pair of `chosen`: one axes for two parameters, else the lower triangle
    of a grid (x: the column's parameter, y: the row's); the upper cells are removed."""
    k = len(chosen)
    grid = out.figure.subplots(k - 1, k - 1, squeeze=False)
    cells = []
    for row in range(k - 1):
        for col in range(k - 1):
            ax = grid[row][col]
            if col > row:
                ax.remove()
                continue
            px, py = chosen[col], chosen[row + 1]
            cells.append((ax, px, py))
            if row == k - 2:
                ax.set_xlabel(px.parameter_id + (" (log)" if d.is_log(px) else ""))
            if col == 0:
                ax.set_ylabel(py.parameter_id + (" (log)" if d.is_log(py) else ""))
    return cells


def _pair_points(s: Study, metric: MetricSpec, px: ParameterSpec, py: ParameterSpec) -> list[tuple[float, float, d.Finished]]:
    pts = []
    for f in s.done[metric.metric_id]:
        x, y = _coord(px, f.trial.parameters.get(px.parameter_id)), _coord(py, f.trial.parameters.get(py.parameter_id))
        if not (math.isnan(x) or math.isnan(y)):
            pts.append((x, y, f))
    return pts


def _contour(s: Study, metric: MetricSpec, chosen: Sequence[ParameterSpec], which: str) -> Drawn:
    """For each pair of parameters, the objective interpolated linearly between the trials
    (a Delaunay triangulation of their points: nothing is drawn outside their hull), with the
    trials as points."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable

    k = len(chosen)
    size = 4.4 if k == 2 else 2.5 * (k - 1) + 1.2
    out = new_figure(s.key("contour", metric), f"Contour: {metric.metric_id} over pairs of parameters{which}", size + 1.0, size)
    norm, cmap = value_norm([f.value for f in s.done[metric.metric_id]]), colormaps["viridis"]
    cells = _pair_grid(out, chosen)
    for ax, px, py in cells:
        pts = _pair_points(s, metric, px, py)
        _fill_contour(ax, pts, norm, cmap)  # from every trial; the points drawn are a sample past MAX_MARKS
        every, pts = len(pts), thin(pts, MAX_MARKS, score=lambda q: metric.goal.sign * q[2].value,
                                    coords=(lambda q: q[0], lambda q: q[1]))
        say_sampled(ax, len(pts), every)
        if pts:
            ax.scatter([q[0] for q in pts], [q[1] for q in pts], s=14, c="white", edgecolors="0.1", linewidths=0.6,
                       zorder=3, gid=out.tips([s.describe(q[2].trial) for q in pts]))
        _param_axis(ax, px, "x")
        _param_axis(ax, py, "y")
        ax.grid(False)
    out.figure.colorbar(ScalarMappable(norm, cmap), ax=[c[0] for c in cells], label=goal_label(metric))
    return out


def _fill_contour(ax: Any, pts: Sequence[tuple[float, float, d.Finished]], norm: Any, cmap: Any) -> None:
    """Filled contours of the points' values (equal points averaged); nothing when they do
    not span a triangle (fewer than three distinct points, or all on one line) or all values
    are equal."""
    merged: dict[tuple[float, float], list[float]] = {}
    for x, y, f in pts:
        merged.setdefault((x, y), []).append(f.value)
    if len(merged) < 3:
        return
    xs, ys = [k[0] for k in merged], [k[1] for k in merged]
    zs = [sum(v) / len(v) for v in merged.values()]
    if max(zs) <= min(zs):
        return
    from matplotlib.tri import Triangulation

    levels = [norm.vmin + (norm.vmax - norm.vmin) * i / 14 for i in range(15)]
    try:
        ax.tricontourf(Triangulation(xs, ys), zs, levels=levels, cmap=cmap, norm=norm, alpha=0.85, zorder=1)
    except (ValueError, RuntimeError):  # collinear points: Delaunay has no triangle to fill
        pass


def _rank(s: Study, metric: MetricSpec, chosen: Sequence[ParameterSpec], which: str) -> Drawn:
    """Optuna's rank plot: the trials over each pair of parameters (over the one parameter and
    the objective, for a study of one), coloured by their rank, so where the good trials lie
    shows whatever the spread of the values. The colour bar names the value at each rank."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    done = s.done[metric.metric_id]
    order = sorted(done, key=lambda f: -metric.goal.sign * f.value)  # best first
    rank = {f.trial.id: (i / (len(order) - 1) if len(order) > 1 else 0.0) for i, f in enumerate(order)}
    cmap, norm = colormaps["RdYlBu_r"], Normalize(0, 1)
    k = len(chosen)
    size = 4.4 if k <= 2 else 2.5 * (k - 1) + 1.2
    out = new_figure(s.key("rank", metric), f"Rank: trials coloured by their rank in {metric.metric_id}{which}", size + 1.2, size)
    if k == 1:
        p = chosen[0]
        ax = out.figure.subplots()
        pts = [(_coord(p, f.trial.parameters.get(p.parameter_id)), f.value, f) for f in done]
        pts = [q for q in pts if not math.isnan(q[0])]
        cells = [ax]
        _rank_points(out, s, ax, pts, rank, cmap)
        _param_axis(ax, p, "x")
        ax.set_xlabel(p.parameter_id + (" (log)" if d.is_log(p) else ""))
        ax.set_ylabel(goal_label(metric))
    else:
        cells = []
        for ax, px, py in _pair_grid(out, chosen):
            _rank_points(out, s, ax, _pair_points(s, metric, px, py), rank, cmap)
            _param_axis(ax, px, "x")
            _param_axis(ax, py, "y")
            cells.append(ax)
    bar = out.figure.colorbar(ScalarMappable(norm, cmap), ax=cells, label=f"{goal_label(metric)}, by rank")
    ticks = [0, 0.25, 0.5, 0.75, 1] if len(order) > 1 else [0]
    bar.set_ticks(ticks, labels=[("best " if t == 0 else "") + d.fmt(order[round(t * (len(order) - 1))].value) for t in ticks])
    return out


def _rank_points(out: Drawn, s: Study, ax: Any, pts: Sequence[tuple[float, float, d.Finished]],
                 rank: dict[str, float], cmap: Any) -> None:
    if not pts:
        return
    shown = thin(pts, MAX_MARKS, score=lambda q: -rank[q[2].trial.id], coords=(lambda q: q[0], lambda q: q[1]))
    say_sampled(ax, len(shown), len(pts))
    worst_first = sorted(shown, key=lambda q: -rank[q[2].trial.id])  # the best drawn last, on top
    ax.scatter([q[0] for q in worst_first], [q[1] for q in worst_first], s=30, c=[cmap(rank[q[2].trial.id]) for q in worst_first],
               edgecolors="0.25", linewidths=0.4, zorder=3,
               gid=out.tips([f"rank {round(rank[q[2].trial.id] * 100)}%: {s.describe(q[2].trial)}" for q in worst_first]))


# --------------------------------------------------------------------------- EDF
