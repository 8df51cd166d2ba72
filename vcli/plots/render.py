"""The study report's figures (`vcli.plots`), drawn on `vcli.plots.canvas`: the optimisation
history, parallel coordinates, slices, intermediate values, importances, the EDF, the
timeline and the Pareto front; the parameter pairs (contour and rank) are `vcli.plots.pairs`.
matplotlib is imported only when a report is made."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Callable, Sequence

from vcli.plots import data as d
from vcli.plots.canvas import (
    BEST,
    MAX_MARKS,
    MAX_VECTOR_MARKS,
    POINT,
    RC,
    Drawn,
    Study,
    axis_label,
    goal_label,
    integer_x,
    matplotlib,
    metric_names,
    new_figure,
    save,
    svg_element,
    trial_x,
    value_norm,
)
from vcli.plots.importance import METHOD, importances
from vcli.plots.thin import sample_line, say_sampled, steps, thin
from vcli.spec import Goal, MetricSpec, ParameterSpec, StudySpec, Trial
from vcli.tuning import pareto

__all__ = ["draw", "save", "svg_element", "Drawn"]

NO_FINISHED = "This study has no finished trials yet."
#: Up to this many trials the intermediate-values plot names each one in a legend; beyond,
#: a colour bar keyed by trial number is the colour key.
LEGEND_TRIALS = 10

#: How a finished trial is marked where trials are points (history): by its outcome.
MARKS = {
    "completed": {"marker": "o", "color": POINT, "s": 20},
    "unsafe": {"marker": "D", "color": "#e377c2", "s": 24},
    "stopped-early": {"marker": "X", "color": "#ff7f0e", "s": 42},
    "pbt": {"marker": "v", "color": "#8c564b", "s": 34},
    "stopped": {"marker": "s", "color": "0.45", "s": 26},
}
#: Bar colours of the timeline, by outcome (Optuna's: completed blue, pruned orange, failed red, running green).
TIMELINE_COLOURS = {
    "completed": "#1f77b4", "unsafe": "#e377c2", "stopped-early": "#ff7f0e", "pbt": "#8c564b", "stopped": "#7f7f7f",
    "infeasible": "#d62728", "running": "#2ca02c",
}
TIMELINE_LABELS = {
    "completed": "completed", "unsafe": "unsafe (beyond a safety threshold)",
    "stopped-early": "stopped early by a rule", "pbt": "replaced by a PBT exploit",
    "stopped": "stopped by the study", "infeasible": "infeasible", "running": "running",
}


def draw(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial], *,
         now: datetime | None = None, progress: Callable[[str], None] | None = None) -> tuple[list[Drawn], list[str]]:
    """Every figure the study has data for, in report order (`vcli.plots`), and one sentence
    for each figure left out (or for a study with nothing finished yet). `now` is where the
    timeline's running trials end (default: the current time); `progress` is told each step."""
    step = progress or (lambda name: None)
    mpl = matplotlib()  # first: a missing extra is the one line printed
    s = Study(spec, params, trials, {m.metric_id: d.finished(m, trials) for m in spec.metrics},
              now or datetime.now(UTC))
    figures: list[Drawn] = []
    notes: list[str] = []
    with mpl.rc_context(RC):
        # importances once per metric: their figure, and which parameters contour and rank pair
        step(f"hyperparameter importances ({len(trials)} trials)")
        ranked = {m.metric_id: importances(params, s.done[m.metric_id]) if s.done[m.metric_id] else None
                  for m in s.metrics}
        if any(s.done.values()):
            step("history, parallel coordinates and slices")
            _finished_figures(s, figures, notes)
        else:
            notes.append(NO_FINISHED)
        step("intermediate values")
        figures.extend(_intermediate(s, m) for m in s.metrics if any(_curve(t, m.metric_id) for t in trials))
        for m in s.metrics:
            found = ranked[m.metric_id]
            if isinstance(found, dict):
                figures.append(_importance(s, m, found))
            elif isinstance(found, str):
                notes.append(f"{m.metric_id}: {found}" if s.multi else found)
        if any(s.done.values()):
            from vcli.plots.pairs import pairs

            step("parameter pairs and the distribution of values")
            pairs(s, ranked, figures, notes)
            figures.append(_edf(s))
        timeline = _timeline(s)
        if timeline is not None:
            figures.append(timeline)
        if s.multi:
            front = _pareto(s)
            if front is None:
                notes.append("The Pareto front needs finished trials with a value of every metric.")
            else:
                figures.append(front)
    return figures, notes


def _finished_figures(s: Study, figures: list[Drawn], notes: list[str]) -> None:
    """History, parallel coordinates (per objective) and slices, for a study with finished trials."""
    figures.append(_history(s))
    if s.params:
        figures.extend(_parallel(s, m) for m in s.metrics if s.done[m.metric_id])
    figures.extend(_slice(s, p) for p in s.params)
    if s.multi:
        notes.extend(f"{m.metric_id}: no finished trial has a value of it yet, so its figures are left out."
                     for m in s.metrics if not s.done[m.metric_id])


# --------------------------------------------------------------------------- history


def _history(s: Study) -> Drawn:
    """One panel per metric: every finished trial's value marked by its outcome (completed,
    stopped early by a rule, replaced by a PBT exploit, stopped by the study), and the best so far."""
    from matplotlib.ticker import MaxNLocator

    out = new_figure("history", f"Optimisation history: {metric_names(s.metrics)} by trial, with the best so far",
                  7, 1.0 + 2.4 * len(s.metrics))
    axes = out.figure.subplots(len(s.metrics), 1, squeeze=False, sharex=True)[:, 0]
    x_of = trial_x(s.trials)
    for ax, m in zip(axes, s.metrics):
        done = s.done[m.metric_id]
        if done:
            line = sample_line(*steps([x_of[f.trial.id] for f in done], d.best_so_far([f.value for f in done], m.goal)),
                               MAX_MARKS // 4)
            shown = thin(done, MAX_MARKS - len(line[0]), score=lambda f, m=m: m.goal.sign * f.value,
                         coords=(lambda f: f.value, lambda f: x_of[f.trial.id]))
            say_sampled(ax, len(shown), len(done))
            groups: dict[str, list[d.Finished]] = {}
            for f in shown:
                groups.setdefault(d.outcome_label(f.trial), []).append(f)
            for label, members in sorted(groups.items(), key=lambda g: d.OUTCOMES.index(d.outcome(g[1][0].trial))):
                suffix = "" if label == "completed" else f" ({label})"
                ax.scatter([x_of[f.trial.id] for f in members], [f.value for f in members], zorder=3, label=label,
                           gid=out.tips([s.describe(f.trial) + suffix for f in members]), **MARKS[d.outcome(members[0].trial)])
            ax.plot(*line, drawstyle="steps-post", color=BEST, lw=1.5, label="best so far")
            ax.legend(loc="best", fontsize=8)
        ax.set_ylabel(goal_label(m))
        integer_x(ax, MaxNLocator)
    axes[-1].set_xlabel("trial")
    return out


# --------------------------------------------------------------------------- parallel coordinates


def _parallel(s: Study, metric: MetricSpec) -> Drawn:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection

    params, done = s.params, s.done[metric.metric_id]
    n = len(params) + 1
    out = new_figure(s.key("parallel", metric), f"Parallel coordinates: every parameter and {metric.metric_id}",
                  max(6.0, 1.4 * n + 2), 4.2)
    ax = out.figure.subplots()
    values = [f.value for f in done]
    lo, hi = min(values), max(values)
    norm, cmap = value_norm(values), colormaps["viridis"]
    shown = thin(done, MAX_MARKS // n, score=lambda f: metric.goal.sign * f.value,
                 coords=[lambda f: f.value, *[lambda f, p=p: d.unit(p, f.trial.parameters.get(p.parameter_id)) for p in params]])
    say_sampled(ax, len(shown), len(done))
    ranked = sorted(shown, key=lambda f: metric.goal.sign * f.value)  # best drawn last, on top
    lines = []
    for f in ranked:
        ys = [d.unit(p, f.trial.parameters.get(p.parameter_id)) for p in params]
        ys.append(0.5 if hi <= lo else (f.value - lo) / (hi - lo))
        lines.append(list(zip(range(n), ys)))
    ax.add_collection(LineCollection(lines, colors=cmap(norm([f.value for f in ranked])), linewidths=1.3, alpha=0.8,
                                     gid=out.tips([s.describe(f.trial) for f in ranked])))
    for i, p in enumerate(params):
        ax.axvline(i, color="0.35", lw=0.8)
        if d.is_categorical(p):
            for c in d.categories(p):
                axis_label(ax, i, d.unit(p, c), c)
        else:
            low, high = d.bounds(p)
            axis_label(ax, i, 0, d.fmt(low))
            axis_label(ax, i, 1, d.fmt(high))
    ax.axvline(n - 1, color="0.35", lw=0.8)
    axis_label(ax, n - 1, 0, d.fmt(lo))
    axis_label(ax, n - 1, 1, d.fmt(hi))
    ax.set_xticks(range(n), [p.parameter_id + (" (log)" if d.is_log(p) else "") for p in params] + [metric.metric_id])
    ax.set_yticks([])
    ax.set_xlim(-0.2, n - 0.4)
    ax.set_ylim(-0.06, 1.06)
    ax.grid(False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    out.figure.colorbar(ScalarMappable(norm, cmap), ax=ax, label=goal_label(metric))
    return out


def _slice(s: Study, p: ParameterSpec) -> Drawn:
    """Each objective against one parameter: one panel per metric, points darker the later the trial."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LinearSegmentedColormap, Normalize

    pid = p.parameter_id
    rows = [m for m in s.metrics if s.done[m.metric_id]]
    out = new_figure(f"slice-{pid}", f"Slice: {metric_names(rows)} against {pid}", 4.9, 0.6 + 2.8 * len(rows))
    axes = out.figure.subplots(len(rows), 1, squeeze=False, sharex=True)[:, 0]
    cats = d.categories(p)
    order = {t.id: i for i, t in enumerate(s.trials, start=1)}
    blues = colormaps["Blues"]
    # the light end of Blues is invisible on white: the key starts where the points do
    norm, cmap = Normalize(1, max(len(s.trials), 2)), LinearSegmentedColormap.from_list("trial-order", [blues(0.3), blues(1.0)])
    for ax, m in zip(axes, rows):
        every = []  # (x, objective, trial number, trial)
        for f in s.done[m.metric_id]:
            value = f.trial.parameters.get(pid)
            if value is None or (cats and str(value) not in cats):
                continue  # an inactive conditional parameter: this trial says nothing about it
            x = cats.index(str(value)) if cats else float(value)
            every.append((x, f.value, order[f.trial.id], f.trial))
        points = thin(every, MAX_MARKS, score=lambda q, m=m: m.goal.sign * q[1], coords=(lambda q: q[0], lambda q: q[1]))
        say_sampled(ax, len(points), len(every))
        if points:  # one colour lookup for every point (one per point: seconds at 10,000 trials)
            ax.scatter([q[0] for q in points], [q[1] for q in points], s=26, c=cmap(norm([q[2] for q in points])), edgecolors="0.3",
                       linewidths=0.4, zorder=3, gid=out.tips([s.describe(q[3]) for q in points]))
        if cats:
            ax.set_xticks(range(len(cats)), cats)
            ax.set_xlim(-0.5, len(cats) - 0.5)
        elif d.is_log(p):
            from matplotlib.ticker import FuncFormatter, NullFormatter

            ax.set_xscale("log")
            # matplotlib writes log ticks as TeX (10^-3), which text.parse_math=False (canvas.py) prints raw.
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(goal_label(m))
    axes[-1].set_xlabel(pid + (" (log scale)" if d.is_log(p) else ""))
    out.figure.colorbar(ScalarMappable(norm, cmap), ax=list(axes), label="trial order (later is darker)")
    return out


# --------------------------------------------------------------------------- intermediate values


def _curve(t: Trial, metric_id: str) -> list[tuple[int, float]]:
    """The trial's measurements of `metric_id` as (step, value), by step, finite values only."""
    pts = []
    for m in t.measurements:
        v = m.metrics.get(metric_id)
        if v is not None and math.isfinite(float(v)):
            pts.append((m.step_count, float(v)))
    return sorted(pts)


def _intermediate(s: Study, metric: MetricSpec) -> Drawn:
    """Every trial's measurements of `metric` by step. Up to LEGEND_TRIALS trials a legend
    names each; beyond, colours follow the trial number and a colour bar is the key."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    out = new_figure(s.key("intermediate", metric), f"Intermediate values: {metric.metric_id} by step, every trial", 7, 4.2)
    ax = out.figure.subplots()
    curves = {t.id: c for t in s.trials if (c := _curve(t, metric.metric_id))}
    few = len(curves) <= LEGEND_TRIALS
    x_of = trial_x(s.trials)
    numbers = [x_of[t] for t in curves]
    norm = Normalize(min(numbers), max(max(numbers), min(numbers) + 1))
    cmap = colormaps["tab10" if few else "viridis"]
    once = _Once()
    drawn = [t for t in s.trials if t.id in curves]
    if not few:
        drawn = _thin_curves(ax, metric, drawn, curves)
    colors = [cmap(i % 10) for i in range(len(drawn))] if few else list(cmap(norm([x_of[t.id] for t in drawn])))
    # Past MAX_VECTOR_MARKS the plot is an image without tooltips: one collection for every
    # curve, not an artist per trial (10,000 trials: 12 s of a 28 s drawing).
    bulk = not few and sum(len(curves[t.id]) for t in drawn) > MAX_VECTOR_MARKS
    if bulk:
        _bulk_curves(ax, [curves[t.id] for t in drawn], colors)
    for t, color in zip(drawn, colors):
        _trial_curve(out, ax, t, curves, color, metric.metric_id, few, once, line=not bulk)
    ax.set_xlabel("step")
    integer_x(ax, MaxNLocator)
    ax.set_ylabel(goal_label(metric))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=7, ncol=2 if few and len(curves) > 5 else 1)
    if not few:
        bar = out.figure.colorbar(ScalarMappable(norm, cmap), ax=ax, label="trial")
        bar.locator = MaxNLocator(integer=True)
        bar.update_ticks()
    return out


def _thin_curves(ax: Any, metric: MetricSpec, drawn: list[Trial], curves: dict[str, list[tuple[int, float]]]) -> list[Trial]:
    """`drawn` when their curves hold at most MAX_MARKS measurements in all; else the best
    curves, those that end highest, lowest and latest, and an even sample of the others, so
    many that they do (the plot says so)."""
    total = sum(len(curves[t.id]) for t in drawn)
    if total <= MAX_MARKS:
        return drawn
    shown, limit = drawn, len(drawn)
    while total > MAX_MARKS and limit > 1:  # the curves kept may be longer than the average: again, fewer
        limit = max(1, min(limit - 1, limit * MAX_MARKS // total))
        shown = thin(drawn, limit, score=lambda t: metric.goal.sign * curves[t.id][-1][1],
                     coords=(lambda t: curves[t.id][-1][1], lambda t: curves[t.id][-1][0]))
        total = sum(len(curves[t.id]) for t in shown)
    say_sampled(ax, len(shown), len(drawn))
    return shown


class _Once:
    """A legend label the first time it is asked for, None after (one legend entry per kind of mark)."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def __call__(self, label: str) -> str | None:
        if label in self.shown:
            return None
        self.shown.add(label)
        return label


def _ended_why(t: Trial) -> str:
    """How trial `t` ended, for its curve's tip: the early-stopping rule, the study's stop
    reason, else its state."""
    if t.early_stopping_rule:
        return f"stopped early ({t.early_stopping_rule})"
    return f"stopped: {t.stop_reason}" if t.stop_reason else t.state.value.lower()


def _bulk_curves(ax: Any, curves: list[list[tuple[int, float]]], colors: list[Any]) -> None:
    """Every curve as `_trial_curve` draws its line, in one line collection, without a dot at
    each measurement (thousands of curves: the dots would double the marks and hide the lines)."""
    from matplotlib.collections import LineCollection

    ax.add_collection(LineCollection(curves, colors=colors, linewidths=1.2))
    ax.autoscale_view()


def _trial_curve(out: Drawn, ax: Any, t: Trial, curves: dict[str, list[tuple[int, float]]], color: Any,
                 metric_id: str, few: bool, once: _Once, line: bool = True) -> None:
    """Draw trial `t`'s curve (`curves[t.id]`) in `color` on `ax`: the line unless `line` is
    False (`_bulk_curves` drew it; named in the legend when `few`), a mark at its end when a
    rule or the study stopped it, and for a PBT exploit a dotted link from its parent's curve
    at the step it starts from."""
    steps, values = zip(*curves[t.id])
    if line:
        ax.plot(steps, values, color=color, lw=1.2, marker=".", ms=4, label=f"trial {t.id}" if few else None,
                gid=out.tip(f"trial {t.id}: {metric_id}={d.fmt(values[-1])} at step {steps[-1]}, {_ended_why(t)}"))
    if t.early_stopping_rule:
        ax.scatter([steps[-1]], [values[-1]], marker="x", s=70, color="crimson", zorder=4,
                   label=once("stopped early by a rule"))
    elif t.stop_reason:
        ax.scatter([steps[-1]], [values[-1]], marker="s", s=50, facecolors="none", edgecolors="0.15", zorder=4,
                   label=once("stopped by the study"))
    lin = t.lineage
    if lin is not None and lin.parent_trial_id:
        parent = [v for st, v in curves.get(lin.parent_trial_id, []) if st <= lin.start_step]
        anchor = parent[-1] if parent else values[0]
        ax.plot([lin.start_step, steps[0]], [anchor, values[0]], ls=":", color=color, lw=1)
        ax.scatter([lin.start_step], [anchor], marker="^", s=55, color="darkorange", zorder=4,
                   label=once("PBT exploit: starts from a parent's checkpoint"),
                   gid=out.tip(f"trial {t.id} starts at step {lin.start_step} from trial {lin.parent_trial_id}'s checkpoint"))


# --------------------------------------------------------------------------- importance


def _importance(s: Study, metric: MetricSpec, ranked: dict[str, float]) -> Drawn:
    order = sorted(ranked, key=lambda k: ranked[k])  # barh draws bottom-up: the largest on top
    out = new_figure(s.key("importance", metric), f"Hyperparameter importance for {metric.metric_id}\n({METHOD})",
                  7, 1.2 + 0.4 * len(order))
    ax = out.figure.subplots()
    bars = ax.barh(order, [ranked[k] for k in order], color=POINT)
    ax.bar_label(bars, labels=[f"{ranked[k]:.2f}" for k in order], padding=3, fontsize=8)
    ax.set_xlim(0, max(ranked.values()) * 1.15 or 1)
    ax.set_xlabel("share of the importance (sums to 1)")
    return out


# --------------------------------------------------------------------------- contour and rank


def _edf(s: Study) -> Drawn:
    """Optuna's empirical distribution function: per metric, the share of finished trials
    whose value is at most x; a second line for the trials that ran to their end when some
    were stopped early (their values are partial)."""
    rows = [m for m in s.metrics if s.done[m.metric_id]]
    out = new_figure("edf", f"Empirical distribution of {metric_names(rows)}", 7, 0.8 + 2.6 * len(rows))
    axes = out.figure.subplots(len(rows), 1, squeeze=False)[:, 0]
    for ax, m in zip(axes, rows):
        done = s.done[m.metric_id]
        full = [f for f in done if d.outcome(f.trial) == "completed"]
        lines = [(done, f"all {len(done)} finished trials", "-")]
        if 0 < len(full) < len(done):
            lines.append((full, f"the {len(full)} that ran to their end", "--"))
        for members, label, style in lines:
            values = sorted(f.value for f in members)
            xs, ys = sample_line([values[0], *values], [0.0, *[(i + 1) / len(values) for i in range(len(values))]],
                                 MAX_MARKS // len(lines))
            ax.plot(xs, ys, drawstyle="steps-post", ls=style, lw=1.6, label=label,
                    gid=out.tip(f"{label}: {m.metric_id} from {d.fmt(values[0])} to {d.fmt(values[-1])}"))
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel(goal_label(m))
        ax.set_ylabel("share of trials ≤ x")
        ax.legend(loc="best", fontsize=8)
    return out


# --------------------------------------------------------------------------- timeline


def _timeline(s: Study) -> Drawn | None:
    """Optuna's timeline: a bar per started trial from its start to its end (running ones to
    `now`), coloured by outcome, and below it how many trials ran at once. None when no trial
    has started."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    spans = [(t, sp) for t in s.trials if (sp := d.span(t, s.now)) is not None]
    if not spans:
        return None
    t0 = min(sp[0] for _, sp in spans)
    total = max((sp[1] - t0).total_seconds() for _, sp in spans)
    unit, div = ("s", 1.0) if total < 180 else ("min", 60.0) if total < 3 * 3600 else ("h", 3600.0)
    x_of = trial_x([t for t, _ in spans])
    height = 1.6 + min(0.2 * len(spans), 7.0)
    out = new_figure("timeline", "Timeline: when each trial ran, and how many ran at once", 7.5, height + 1.6)
    bars_ax, load_ax = out.figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [height, 1.4]})
    boxes, colours, tips = [], [], []
    least = max(total / div / 400, 1e-9)  # a trial of a few milliseconds still shows as a sliver
    shown = thin(spans, MAX_MARKS, score=lambda e: _signed(s.metrics[0], e[0]),
                 coords=(lambda e: (e[1][0] - t0).total_seconds(), lambda e: (e[1][1] - t0).total_seconds(),
                         lambda e: (e[1][1] - e[1][0]).total_seconds()))
    say_sampled(bars_ax, len(shown), len(spans))
    for t, (start, end) in shown:
        x0, x1 = (start - t0).total_seconds() / div, (end - t0).total_seconds() / div
        x1 = max(x1, x0 + least)
        y = x_of[t.id]
        boxes.append([(x0, y - 0.38), (x1, y - 0.38), (x1, y + 0.38), (x0, y + 0.38)])
        kind = d.outcome(t)
        colours.append(TIMELINE_COLOURS.get(kind, "0.6"))
        seconds = (end - start).total_seconds()
        tips.append(f"trial {t.id}: {d.outcome_label(t)}, {d.fmt_duration(seconds)}"
                    f" ({start:%H:%M:%S} to {end:%H:%M:%S} UTC{', still running' if kind == 'running' else ''})"
                    f" | {s.describe(t).partition(': ')[2]}".rstrip(" |"))
    bars_ax.add_collection(PolyCollection(boxes, facecolors=colours, edgecolors="0.2", linewidths=0.4, gid=out.tips(tips)))
    bars_ax.autoscale_view()
    ys_of = [x_of[t.id] for t, _ in spans]
    bars_ax.set_ylim(max(ys_of) + 0.7, min(ys_of) - 0.7)  # the first trial on top, as in a table
    if len(spans) <= 25:
        bars_ax.set_yticks(sorted(set(ys_of)), [t.id for t, _ in sorted(spans, key=lambda e: x_of[e[0].id])])
    else:
        bars_ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=20))
    bars_ax.set_ylabel("trial")
    present = [k for k in TIMELINE_COLOURS if any(d.outcome(t) == k for t, _ in spans)]
    bars_ax.legend(handles=[Patch(facecolor=TIMELINE_COLOURS[k], edgecolor="0.2", label=TIMELINE_LABELS[k]) for k in present],
                   loc="best", fontsize=8)
    _running_at_once(out, load_ax, [(sp[0] - t0).total_seconds() / div for _, sp in spans],
                     [(sp[1] - t0).total_seconds() / div for _, sp in spans])
    load_ax.set_xlabel(f"{unit} since the first trial started ({t0:%Y-%m-%d %H:%M:%S} UTC)")
    return out


def _signed(metric: MetricSpec, t: Trial) -> float:
    """The trial's final value of `metric`, higher when better; -inf without one."""
    value = d.metric_value(t, metric.metric_id)
    return -math.inf if value is None else metric.goal.sign * value


def _running_at_once(out: Drawn, ax: Any, starts: Sequence[float], ends: Sequence[float]) -> None:
    """How many trials ran at each moment, from their start and end times (one unit of x)."""
    from matplotlib.ticker import MaxNLocator

    change: dict[float, int] = {}  # time -> trials started minus ended then (one step per time, no spikes)
    for x, step in [*((x, 1) for x in starts), *((x, -1) for x in ends)]:
        change[x] = change.get(x, 0) + step
    xs, ys, running = [0.0], [0], 0
    for x in sorted(change):
        running += change[x]
        xs.append(x)
        ys.append(running)
    xs, ys = sample_line(xs, ys, MAX_MARKS // 2)
    ax.plot(xs, ys, drawstyle="steps-post", color="0.25", lw=1.2, gid=out.tip(f"at most {max(ys)} trial(s) at once"))
    ax.fill_between(xs, ys, step="post", color="0.75", alpha=0.6)
    ax.set_ylim(0, max(ys) + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    ax.set_ylabel("running")


# --------------------------------------------------------------------------- Pareto front


#: How the Pareto figure draws a trial: on the front (True) or dominated (False).
_PARETO_STYLE: dict[bool, dict[str, Any]] = {
    True: {"s": 46, "color": BEST, "edgecolors": "0.2", "zorder": 4, "label": "Pareto front (not dominated)"},
    False: {"s": 22, "color": "0.6", "edgecolors": "none", "zorder": 3, "label": "dominated"},
}


def _pareto(s: Study) -> Drawn | None:
    """The first two metrics' values of every trial that has them all, the front (trials no
    other dominates on every metric) highlighted, and with two metrics its staircase. None
    when no trial has a value of every metric."""
    metrics = s.metrics
    ids = [m.metric_id for m in metrics]
    scored = [(t, v) for t in s.trials if (v := pareto.metric_values(t, ids)) is not None]
    if not scored:
        return None
    front = {t.id for t in pareto.pareto_front(s.trials, metrics)}
    x, y = metrics[0], metrics[1]
    extra = f" (non-dominated on all {len(metrics)} metrics)" if len(metrics) > 2 else ""
    out = new_figure("pareto", f"Pareto front: {x.metric_id} and {y.metric_id}{extra}", 6, 4.4)
    ax = out.figure.subplots()
    on_front = [(t, v) for t, v in scored if t.id in front]
    dominated = [(t, v) for t, v in scored if t.id not in front]
    shown = thin(dominated, max(0, MAX_MARKS - len(on_front)), coords=(lambda e: e[1][0], lambda e: e[1][1]))
    say_sampled(ax, len(shown) + len(on_front), len(scored))
    _pareto_points(out, ax, s, shown, False)
    _pareto_points(out, ax, s, on_front, True)
    if len(metrics) == 2:
        _pareto_staircase(ax, sorted((v[0], v[1]) for t, v in scored if t.id in front), x.goal)
    ax.set_xlabel(goal_label(x))
    ax.set_ylabel(goal_label(y))
    ax.legend(loc="best", fontsize=8)
    return out


def _pareto_points(out: Drawn, ax: Any, s: Study, group: Sequence[tuple[Trial, Sequence[float]]], on: bool) -> None:
    """Scatter `group` (trials with their metric values) in the style of the front (`on`) or of
    the dominated trials, each with its tip; nothing for an empty group."""
    if not group:
        return
    prefix = "on the front: " if on else ""
    ax.scatter([v[0] for _, v in group], [v[1] for _, v in group], **_PARETO_STYLE[on],
               gid=out.tips([prefix + s.describe(t) for t, _ in group]))


def _pareto_staircase(ax: Any, pts: Sequence[tuple[float, float]], x_goal: Goal) -> None:
    """The line through the front's points (sorted by x): the staircase's corners lie on the
    dominated side, after each point when x is minimised."""
    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=BEST, lw=1, alpha=0.6,
            drawstyle="steps-post" if x_goal == Goal.MINIMIZE else "steps-pre")
