"""A study's report: its figures as SVG, one self-contained HTML page, or PNG/SVG files. (The
package also holds a study's other ways out: `export`, a table or an Optuna study, and
`tensorboard`, its trials as TensorBoard runs.)

The figures (keys in report order; each left out when the study has no data for it). A study
of several metrics gets the per-objective figures once per metric, keyed `<key>-<metric_id>`
(`parallel-error`, `parallel-speed`); a study of one keeps the bare key:

* ``history``: every finished trial's value by trial, one panel per metric, with the
  best-so-far line; trials stopped early by a rule, replaced by a PBT exploit or stopped by
  the study are marked apart from the ones that completed (legend).
* ``parallel`` (per objective): parallel coordinates of every parameter and the objective,
  lines coloured by it.
* ``slice-<parameter_id>``: one per parameter, each objective against its value (one panel per
  metric; categories as categories, a log axis for UNIT_LOG_SCALE).
* ``intermediate`` (per objective): every trial's measurements by step; trials stopped early
  by a rule marked with an x, those stopped by the study with a square, PBT exploits with a
  triangle at the step they start from. Up to 10 trials a legend names each; beyond, colours
  follow the trial number with a colour bar as the key.
* ``importance`` (per objective): hyperparameter importances (`vcli.plots.importance`: a
  random forest); needs 2 parameters and 4 finished trials, else a note says why.
* ``contour`` (per objective): the objective interpolated over each pair of parameters, with
  the trials as points (at most 4 parameters: the most important ones); needs 2 parameters.
* ``rank`` (per objective): the trials over each pair of parameters coloured by their rank.
* ``edf``: the empirical distribution of each objective's values (one panel per metric).
* ``timeline``: a bar per trial from its start to its end, coloured by outcome, and how many
  trials ran at once.
* ``pareto``: with several metrics, the first two plotted with the non-dominated trials
  highlighted (`vcli.tuning.pareto`).

"Finished" is SUCCEEDED with a finite final value of the metric. A study with none still
gets a report, which says so. The HTML report also has a summary (the best trial or the
Pareto front) and a table of every trial. Nothing here loads anything from a network: the
HTML has inline CSS and inline SVG (text drawn as paths), no scripts and no links.

Figures of thousands of trials draw a sample of them past `canvas.MAX_MARKS` marks a plot
(`vcli.plots.thin`: the best trials and the extremes kept). Given a `Slot`, the figures are
read from the figure cache on disk that `hp-tuning-jobs plot` and the dashboard share
(`vcli.plots.cache`: keyed by the study's last change), and drawn and stored there only when
it does not have them.

matplotlib (and scikit-learn for importances) are imported only when figures are drawn;
without matplotlib, drawing raises a one-line UsageError saying `pip install 'vcli[plot]'`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Callable, Sequence

from vcli.errors import UsageError
from vcli.plots import data as d
from vcli.plots.cache import Slot
from vcli.spec import Algorithm, MetricSpec, ParameterSpec, StudySpec, Trial

__all__ = ["Figure", "Slot", "study_figures", "report_html", "trial_table", "write_report", "OUTPUT_EXTENSIONS"]

#: What `write_report` can write, by the output path's extension.
OUTPUT_EXTENSIONS = (".html", ".svg", ".png")


@dataclass(frozen=True)
class Figure:
    """One figure of the report: `key` (module docstring), a human title, and `svg`, a
    standalone `<svg id="fig-<key>" ...>` element (no XML prolog or DOCTYPE) that can be
    inlined in HTML next to the others (its ids are prefixed, so they do not clash)."""

    key: str
    title: str
    svg: str


def study_figures(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial], *,
                  now: datetime | None = None, slot: Slot | None = None) -> list[Figure]:
    """Every figure the study has data for, in report order. `params` is every parameter,
    conditional ones included (`codec.iter_parameters`); `trials` in trial order; `now` is
    where running trials end on the timeline (default: the current time); `slot`: where the
    study's figures are in the figure cache (`vcli.plots.cache`), read from there when they
    are, drawn and stored there when not."""
    return _figures(spec, params, trials, now, slot=slot)[0]


def report_html(title: str, spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial], *,
                now: datetime | None = None, progress: Callable[[str], None] | None = None,
                slot: Slot | None = None) -> str:
    """The report as one self-contained HTML5 document: a summary table (the study, its
    algorithm and goals, trials by state, the best trial or the Pareto front), a table of
    every trial (`trial_table`, scrolling within the page), a line for each figure left out,
    then the figures inline. `progress` is told each step of the drawing; `slot` as in
    `study_figures`."""
    figures, notes = _figures(spec, params, trials, now, progress, slot)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>{escape(title)}</h1>",
        _summary(title, spec, params, trials),
        '<h2 id="trials">Trials</h2>',
        f'<div class="scroll">{trial_table(spec, params, trials)}</div>',
        *[f'<p class="note">{escape(n)}</p>' for n in notes],
        '<section class="figures">',
        *[f'<figure class="vcli-figure" data-key="{escape(f.key)}">\n{f.svg}\n</figure>' for f in figures],
        "</section>",
        "</main>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write_report(path: str, title: str, spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial],
                 progress: Callable[[str], None] | None = None, slot: Slot | None = None) -> list[str]:
    """Write the report by `path`'s extension and return the files written: `.html` one page
    (`report_html`); `.svg` or `.png` one file per figure, `<stem>-<key>.<ext>`. Any other
    extension is a UsageError naming --output, raised before anything is drawn. `progress` is
    told each step; `slot` as in `study_figures`."""
    stem, ext = os.path.splitext(path)
    if not ext and os.path.basename(stem).lower() in OUTPUT_EXTENSIONS:  # `--output=.html`
        raise UsageError(f"argument --output: [{path}] needs a file name before {os.path.basename(stem)}")
    if ext.lower() not in OUTPUT_EXTENSIONS:
        raise UsageError(f"argument --output: [{path}] must end in {', '.join(OUTPUT_EXTENSIONS[:-1])} "
                         f"or {OUTPUT_EXTENSIONS[-1]}")
    if ext.lower() == ".html":
        page = report_html(title, spec, params, trials, progress=progress, slot=slot)
        if progress is not None:
            progress(f"writing {path}")
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
        return [path]
    from vcli.plots.cache import rendered_figures

    fmt = ext.lower()[1:]
    drawn, _ = rendered_figures(spec, params, trials, fmt, slot=slot, progress=progress)
    written: list[str] = []
    if progress is not None:
        progress(f"writing {len(drawn)} figures")
    for fig in drawn:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", fig.key)
        target, n = f"{stem}-{name}{ext}", 2
        while target in written:  # metrics `a/b` and `a_b`: one's figures silently replaced the other's
            target, n = f"{stem}-{name}-{n}{ext}", n + 1
        with open(target, "wb") as f:
            f.write(fig.data + (b"\n" if fmt == "svg" else b""))
        written.append(target)
    return written


def _figures(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial], now: datetime | None,
             progress: Callable[[str], None] | None = None, slot: Slot | None = None) -> tuple[list[Figure], list[str]]:
    from vcli.plots.cache import rendered_figures

    drawn, notes = rendered_figures(spec, params, trials, "svg", slot=slot, now=now, progress=progress)
    if progress is not None:
        progress(f"writing {len(drawn)} figures")
    return [Figure(f.key, f.title, f.data.decode("utf-8")) for f in drawn], notes


def _summary(title: str, spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> str:
    algorithm = spec.algorithm.value
    if spec.algorithm == Algorithm.ALGORITHM_UNSPECIFIED:
        algorithm += " (Bayesian optimisation)"
    if spec.automated_stopping_spec is not None:
        algorithm += f", early stopping: {type(spec.automated_stopping_spec).__name__}"
    counts = d.counts_by_state(trials)
    rows = [
        ("Study", escape(title)),
        ("Algorithm", escape(algorithm)),
        ("Goal", escape(", ".join(f"{m.metric_id}: {m.goal.value}" for m in spec.metrics))),
        ("Trials", escape(f"{len(trials)}" + (f" ({', '.join(f'{k} {n}' for k, n in counts.items())})" if counts else ""))),
    ]
    if len(spec.metrics) > 1:
        from vcli.tuning.pareto import pareto_front

        front = pareto_front(trials, spec.metrics)
        rows.append(("Pareto front", escape(", ".join(f"trial {t.id}" for t in front) or "none yet")))
    else:
        top = d.study_best(spec, trials)
        if top is None:
            rows.append(("Best trial", "none yet"))
        else:
            rows.append(("Best trial", escape(f"trial {top.trial.id}: {spec.metrics[0].metric_id}={d.fmt(top.value)}")))
            rows.append(("Its parameters", escape(" ".join(
                f"{p.parameter_id}={d.fmt(top.trial.parameters[p.parameter_id])}" for p in params if p.parameter_id in top.trial.parameters))))
    body = "\n".join(f"<tr><th scope=\"row\">{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="summary">\n{body}\n</table>'


def trial_table(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> str:
    """Every trial as a row of an HTML table (`<table class="trials">`, rows
    `<tr id="trial-<id>">`): its number, state and outcome (`stopped early (median)`, ...),
    parameters, final value of each metric, final step, duration and start time (an
    infeasible trial's reason where its outcome goes). The study's
    result is marked: the best trial (class `best`, "best") or the Pareto front's trials
    (class `pareto`, "Pareto"). Values that are not there (an inactive conditional parameter,
    a metric not reported) are empty cells."""
    if not trials:
        return '<p class="note">No trial yet.</p>'
    result = set(d.optimal_ids(spec, trials))
    mark = "Pareto" if len(spec.metrics) > 1 else "best"
    head = ("<tr><th>Trial</th><th>State</th>" + "".join(f"<th>{escape(p.parameter_id)}</th>" for p in params)
            + "".join(f"<th>{escape(m.metric_id)}</th>" for m in spec.metrics)
            + "<th>Step</th><th>Duration</th><th>Started (UTC)</th></tr>")
    rows = [_trial_row(t, params, spec.metrics, mark if t.id in result else None) for t in trials]
    return f'<table class="trials">\n{head}\n' + "\n".join(rows) + "\n</table>"


def _trial_row(t: Trial, params: Sequence[ParameterSpec], metrics: Sequence[MetricSpec], mark: str | None) -> str:
    """Trial `t`'s `<tr>` of `trial_table`; `mark` ("best" or "Pareto") when it is (part of) the
    study's result, None otherwise."""
    final = t.final_measurement
    cells = [escape(t.id) + (f' <span class="mark">{mark}</span>' if mark else ""), _state_cell(t),
             *[escape(d.fmt(t.parameters[p.parameter_id])) if p.parameter_id in t.parameters else "" for p in params],
             *[escape(d.fmt(final.metrics[m.metric_id])) if final and m.metric_id in final.metrics else "" for m in metrics],
             *_progress_cells(t)]
    cls = f' class="{"pareto" if mark == "Pareto" else "best"}"' if mark else ""
    return f'<tr id="trial-{escape(t.id)}"{cls}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _state_cell(t: Trial) -> str:
    """The trial's state, followed by how it was stopped (early, by PBT, by the study) or why
    it is infeasible."""
    how = d.outcome_label(t) if d.outcome(t) in ("unsafe", "stopped-early", "pbt", "stopped") else t.infeasible_reason
    return escape(t.state.value) + (f' <span class="how">{escape(how)}</span>' if how else "")


def _progress_cells(t: Trial) -> list[str]:
    """The trial's final step, its duration (once ended) and its start time: empty strings
    where there is none."""
    final = t.final_measurement
    span = d.span(t) if t.end_time else None
    start = d.parse_time(t.start_time)
    return [escape(str(final.step_count)) if final else "",
            escape(d.fmt_duration((span[1] - span[0]).total_seconds())) if span else "",
            escape(f"{start:%Y-%m-%d %H:%M:%S}") if start else ""]


# System fonts only: nothing to download, and the figures' text is drawn as paths anyway.
_CSS = (
    ".scroll{max-height:60vh;overflow:auto;margin-bottom:1.5rem}"
    "body{margin:0;background:#f6f7f9;color:#1d2330;"
    "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;font-size:15px}"
    "main{max-width:1100px;margin:0 auto;padding:1.5rem}"
    "h1{font-size:1.4rem;margin:0 0 1rem}"
    "table.summary{border-collapse:collapse;background:#fff;margin-bottom:1rem}"
    "table.summary th,table.summary td{border:1px solid #d8dce3;padding:.35rem .7rem;text-align:left;vertical-align:top}"
    "table.summary th{background:#eef1f5;font-weight:600}"
    "p.note{margin:.4rem 0;color:#5a6270}"
    # figures at their own size (slices side by side), shrunk to fit a narrow window
    ".figures{display:flex;flex-wrap:wrap;gap:1rem;margin-top:1rem}"
    "figure.vcli-figure{flex:1 1 auto;margin:0;background:#fff;border:1px solid #d8dce3;border-radius:6px;padding:.5rem}"
    "figure.vcli-figure svg{display:block;max-width:100%;height:auto;margin:0 auto}"
    "h2{font-size:1.15rem;margin:1.5rem 0 .6rem}"
    "table.trials{border-collapse:collapse;background:#fff;width:100%;font-variant-numeric:tabular-nums;font-size:14px}"
    "table.trials th,table.trials td{border:1px solid #d8dce3;padding:.3rem .55rem;text-align:left;vertical-align:top}"
    "table.trials th{background:#eef1f5;font-weight:600;position:sticky;top:0}"
    "table.trials tr.best td,table.trials tr.pareto td{background:#fff6d5}"
    "span.mark{font-size:.75rem;font-weight:600;color:#8a5a00;background:#ffe8a3;border-radius:3px;padding:0 .3rem}"
    "span.how{font-size:.8rem;color:#a04a00}"
)
