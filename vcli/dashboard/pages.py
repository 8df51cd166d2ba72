"""The dashboard's HTML: whole pages and the parts a live page fetches again when it changes.

Everything taken from the store (display names, parameter values, messages, log lines) goes
through `esc` or the DOM's `textContent`: a display name is user input. The figures' SVG is
the one piece inserted as markup; `vcli.plots` writes it (matplotlib escapes its text).
Pages load nothing from the network: inline CSS, one inline script, no fonts, no CDN.

A live page's `<body>` names its API base (`data-live`) and the version it shows; its parts
are the elements with `data-part="NAME"`, filled from `BASE/parts/NAME` (with the page's own
query: the trial table's page and order) when `BASE/version` moves (`data-slow` parts, the
figures, last).

A study's trial table shows `PAGE_ROWS` trials a page (`?page=N`), newest first or best first
(`?order=newest|best`), so a study of 10,000 trials is a page of a few hundred kilobytes.
"""

from __future__ import annotations

import html
import math
from datetime import datetime
from typing import Sequence
from urllib.parse import quote, urlencode

from vcli.dashboard.reader import Figures, LogChunk, StudyView
from vcli.spec import JobState, Trial, TrialState
from vcli.store import JobRow, ReplicaRow

CSS = """
.scroll{max-height:60vh;overflow:auto}
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1rem 1.5rem;color:#1d2430}
a{color:#1a5fb4}h1{font-size:1.4rem;margin:.3rem 0 1rem}h2{font-size:1.1rem;margin:1.6rem 0 .5rem}
nav{font-size:.9rem;color:#5c6370}#live{float:right;font-size:.8rem;color:#5c6370}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#f4f6f8;font-weight:600}tr.best td,tr.pareto td{background:#fff6d5}
tr.stopped-early td:nth-child(2)::after{content:" stopped early";font-size:.75rem;color:#a04a00;font-weight:400}
.badge{font-size:.72rem;font-weight:600;color:#8a5a00;background:#ffe8a3;border-radius:3px;padding:0 .3rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}dt{color:#5c6370}dd{margin:0}
.state{font-weight:600;font-size:.85rem}.s-ok{color:#26a269}.s-bad{color:#c01c28}.s-run{color:#1a5fb4}.s-idle{color:#77767b}
.figures{display:flex;flex-wrap:wrap;gap:1rem}figure{margin:0;flex:1 1 520px;max-width:100%}
figure svg{max-width:100%;height:auto}
.note{color:#5c6370;font-style:italic}nav.pager{margin:.4rem 0;font-size:.9rem}nav.pager a{margin:0 .25rem}.mono{font-family:ui-monospace,monospace}
pre#log{background:#111418;color:#d8dee9;padding:.8rem;overflow-x:auto;font:12px/1.4 ui-monospace,monospace;white-space:pre-wrap}
pre#log .error{color:#ff8b8b}pre#log .vcli{color:#8fbcbb}
"""

LIVE_SCRIPT = """
(function () {
  var body = document.body, base = body.dataset.live, status = document.getElementById("live");
  if (!base) return;
  function say(text) { if (status) status.textContent = text; }
  async function refresh() {
    var r = await fetch(base + "/version", {cache: "no-store"});
    if (!r.ok) { say("not found"); return; }
    var v = (await r.json()).version;
    if (v !== body.dataset.version) {
      var parts = Array.prototype.slice.call(document.querySelectorAll("[data-part]"));
      parts.sort(function (a, b) { return (a.dataset.slow ? 1 : 0) - (b.dataset.slow ? 1 : 0); });
      for (var i = 0; i < parts.length; i++) {
        var p = await fetch(base + "/parts/" + parts[i].dataset.part + location.search, {cache: "no-store"});
        if (p.ok) parts[i].innerHTML = (await p.json()).html;
      }
      body.dataset.version = v;
    }
    say("live \\u00b7 checked " + new Date().toISOString().slice(11, 19) + " UTC");
  }
  async function loop() {
    try { await refresh(); } catch (e) { say("the dashboard is not answering"); }
    setTimeout(loop, 2000);
  }
  setTimeout(loop, 2000);
})();
"""

LOG_SCRIPT = """
(function () {
  var pre = document.getElementById("log"), status = document.getElementById("live");
  var follow = document.getElementById("follow"), offset = Number(pre.dataset.offset);
  function add(lines) {
    for (var i = 0; i < lines.length; i++) {
      var span = document.createElement("span");
      span.className = lines[i][0].toLowerCase();
      span.textContent = lines[i][1] + "  " + lines[i][0] + "  " + lines[i][2] + "\\n";
      pre.appendChild(span);
    }
    if (lines.length && follow.checked) window.scrollTo(0, document.body.scrollHeight);
  }
  async function poll() {
    var ended = false;
    try {
      var r = await fetch(pre.dataset.api + "?offset=" + offset, {cache: "no-store"});
      if (r.ok) {
        var d = await r.json();
        add(d.lines);
        offset = d.offset;
        ended = d.ended && d.lines.length === 0;
      }
      status.textContent = ended ? "the job has ended" : "following \\u00b7 " + new Date().toISOString().slice(11, 19) + " UTC";
    } catch (e) { status.textContent = "the dashboard is not answering"; }
    if (!ended) setTimeout(poll, 1000);
  }
  if (pre.dataset.ended !== "1") setTimeout(poll, 1000); else status.textContent = "the job has ended";
})();
"""


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def page(title: str, body: str, *, live: str | None = None, version: str | None = None, script: str = LIVE_SCRIPT) -> str:
    """A whole HTML document; `live`: the API base a live page polls (with the `version` shown)."""
    attrs = f' data-live="{esc(live)}" data-version="{esc(version)}"' if live else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)} \u00b7 vcli dashboard</title><style>{CSS}</style></head>"
            f"<body{attrs}><span id=\"live\"></span>{body}<script>{script}</script></body></html>\n")


def error_page(status: int, message: str) -> str:
    return page(f"{status}", f'<nav><a href="/">vcli dashboard</a></nav><h1>{status}</h1><p>{esc(message)}</p>',
                script="")


# ------------------------------------------------------------------ index


def index_page(studies_html: str, jobs_html: str, version: str) -> str:
    body = ("<h1>vcli dashboard</h1>"
            f'<h2>Hyperparameter tuning jobs</h2><div data-part="studies">{studies_html}</div>'
            f'<h2>Custom jobs</h2><div data-part="jobs">{jobs_html}</div>')
    return page("jobs", body, live="/api/index", version=version)


def studies_table(studies: Sequence[tuple[JobRow, int, int]]) -> str:
    if not studies:
        return '<p class="note">No hyperparameter tuning job yet.</p>'
    rows = "".join(
        f'<tr><td class="mono"><a href="/studies/{quote(r.id)}">{esc(r.id)}</a></td><td>{esc(r.display_name)}</td>'
        f"<td>{state(r.state)}</td><td>{when(r.create_time)}</td><td>{done} / {total}</td></tr>"
        for r, done, total in studies)
    return f"<table><tr><th>ID</th><th>Name</th><th>State</th><th>Created</th><th>Trials done</th></tr>{rows}</table>"


def jobs_table(jobs: Sequence[JobRow]) -> str:
    if not jobs:
        return '<p class="note">No custom job yet.</p>'
    rows = "".join(
        f'<tr><td class="mono"><a href="/jobs/{quote(r.id)}">{esc(r.id)}</a></td><td>{esc(r.display_name)}</td>'
        f"<td>{state(r.state)}</td><td>{when(r.create_time)}</td></tr>" for r in jobs)
    return f"<table><tr><th>ID</th><th>Name</th><th>State</th><th>Created</th></tr>{rows}</table>"


# ------------------------------------------------------------------ a study


#: Trials a page of a study's trial table shows.
PAGE_ROWS = 100
#: The trial table's orders (`?order=`), the first the default.
ORDERS = {"newest": "newest first", "best": "best first"}


def study_page(view: StudyView, figures_html: str, page_number: int = 1, order: str = "newest") -> str:
    row = view.row
    body = ('<nav><a href="/">vcli dashboard</a> / hyperparameter tuning job</nav>'
            f"<h1>{esc(row.display_name)}</h1>"
            f'<div data-part="summary">{study_summary(view)}</div>'
            f'<h2>Trials</h2><div data-part="trials" class="scroll">{trial_table(view, page_number, order)}</div>'
            f'<h2>Plots</h2><div data-part="figures" data-slow="1">{figures_html}</div>')
    return page(row.display_name, body, live=f"/api/studies/{quote(row.id)}", version=view.version)


def study_summary(view: StudyView) -> str:
    row, rec, spec = view.row, view.row.record, view.spec
    done = sum(1 for t in view.trials if t.state.is_final())
    items = [("ID", f'<span class="mono">{esc(row.id)}</span>'), ("State", state(row.state)),
             ("Trials", f"{done} done of {esc(rec.get('maxTrialCount'))} ({len(view.trials)} started, "
                        f"up to {esc(rec.get('parallelTrialCount'))} at once)"),
             ("Algorithm", esc(spec.algorithm.value)),
             ("Metrics", esc(", ".join(f"{m.metric_id} ({m.goal.value.lower()})" for m in spec.metrics))),
             ("Created", when(row.create_time))]
    if row.start_time:
        items.append(("Started", when(row.start_time)))
    if row.end_time:
        items.append(("Ended", when(row.end_time)))
    items.extend(result_items(view))
    if rec.get("stopReason"):
        items.append(("Stopped because", esc(rec["stopReason"])))
    if row.error:
        items.append(("Error", esc(row.error.get("message"))))
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def result_items(view: StudyView) -> list[tuple[str, str]]:
    """The study's result so far, current while it runs (`vcli.plots.data.optimal_ids`, the
    rule of the controller and the live table): its best trial with the value, step and
    parameters, or with several metrics the trials of the Pareto front; each links to its row."""
    from vcli.plots import data as d

    spec, trials = view.spec, view.trials
    running = not JobState(view.row.state).is_final()
    if len(spec.metrics) > 1:
        front = d.optimal_ids(spec, trials)
        if not front:
            return [("Pareto front", '<span class="note">none yet</span>')]
        links = ", ".join(f'<a href="?order=best#trial-{esc(i)}">{esc(i)}</a>' for i in front)
        return [("Pareto front" + (" so far" if running else ""), f'trials {links} <span class="note">({len(front)} not dominated)</span>')]
    top = d.study_best(spec, trials)
    if top is None:
        return [("Best trial", '<span class="note">none yet</span>')]
    t, metric = top.trial, spec.metrics[0]
    step = t.final_measurement.step_count if t.final_measurement else ""
    args = " ".join(f"{p.parameter_id}={d.fmt(t.parameters[p.parameter_id])}" for p in view.params if p.parameter_id in t.parameters)
    return [("Best trial" + (" so far" if running else ""),
             f'<a href="?order=best#trial-{esc(t.id)}" id="best-trial">trial {esc(t.id)}</a>: '
             f'{esc(metric.metric_id)}={esc(d.fmt(top.value))} at step {esc(step)} <span class="mono">{esc(args)}</span>')]


def figures_part(figures: Figures) -> str:
    if figures.note:
        return f'<p class="note">{esc(figures.note)}</p>'
    if not figures.figures:
        return '<p class="note">No plot yet: no trial has reported a measurement.</p>'
    return '<div class="figures">' + "".join(
        f'<figure data-key="{esc(f.key)}" title="{esc(f.title)}">{f.svg}</figure>'  # the SVG has the title drawn in it
        for f in figures.figures) + "</div>"


def trial_table(view: StudyView, page: int = 1, order: str = "newest") -> str:
    """Page `page` (from 1; past the last is the last) of the study's trials in `order` (a key
    of ORDERS), `PAGE_ROWS` rows (`<tr id="trial-<id>">`) between two page bars: each its
    number (with a badge when it is the best trial or on the Pareto front), state, parameters,
    latest values and step, duration, why it stopped and a link to its job's replicas."""
    if not view.trials:
        return '<p class="note">No trial yet.</p>'
    from vcli.plots import data as d

    pids = [p.parameter_id for p in view.params]
    mids = [m.metric_id for m in view.spec.metrics]
    result = d.optimal_ids(view.spec, view.trials)
    ordered = ordered_trials(view, order, result)
    pages = max(1, math.ceil(len(ordered) / PAGE_ROWS))
    page = min(max(page, 1), pages)
    shown = ordered[(page - 1) * PAGE_ROWS:page * PAGE_ROWS]
    mark = "pareto" if len(mids) > 1 else "best"
    head = ("<tr><th>Trial</th><th>State</th>" + "".join(f"<th>{esc(p)}</th>" for p in pids)
            + "".join(f"<th>{esc(m)}</th>" for m in mids)
            + "<th>Step</th><th>Duration</th><th>Stop reason</th><th>Logs</th></tr>")
    found = set(result)
    rows = [_trial_row(view, t, pids, mids, mark if t.id in found else None) for t in shown]
    bar = _pager(len(ordered), page, pages, order)
    return f"{bar}<table>{head}{''.join(rows)}</table>{bar if pages > 1 else ''}"


def ordered_trials(view: StudyView, order: str, result: Sequence[str]) -> list[Trial]:
    """The study's trials in `order`: "newest" by trial number, the last first; "best" the
    study's result first (its best trial or the Pareto front's trials), then the trials with
    a final value of the first metric, best first, then the others newest first. Ties keep
    the newest first, so a page shows the same trials each time."""
    newest = list(reversed(view.trials))
    if order != "best":
        return newest
    from vcli.plots import data as d

    metric = view.spec.metrics[0]
    first = set(result)

    def rank(t: Trial) -> tuple[int, float]:
        if t.id in first:
            return 0, 0.0
        value = d.metric_value(t, metric.metric_id)
        return (1, -metric.goal.sign * value) if value is not None else (2, 0.0)

    return sorted(newest, key=rank)  # sorted is stable: equal ranks stay newest first


def _pager(total: int, page: int, pages: int, order: str) -> str:
    """The bar above (and below) the trial table: which trials it shows, the other order, and
    links to the first, previous, next and last pages (`?page=N&order=...`)."""
    def href(n: int, how: str) -> str:
        return "?" + esc(urlencode({"page": n, "order": how}))

    lo, hi = (page - 1) * PAGE_ROWS + 1, min(page * PAGE_ROWS, total)
    other = next(k for k in ORDERS if k != order)
    parts = [f"trials {lo}\u2013{hi} of {total}, {ORDERS[order]} (<a href=\"{href(1, other)}\">{ORDERS[other]}</a>)"]
    if pages > 1:
        links = [("first", 1, page > 1), ("previous", page - 1, page > 1), ("next", page + 1, page < pages),
                 ("last", pages, page < pages)]
        parts.append(f"page {page} of {pages}: " + " ".join(
            f'<a href="{href(n, order)}" rel="{"prev" if name == "previous" else name}">{name}</a>' if live
            else f'<span class="note">{name}</span>' for name, n, live in links))
    return '<nav class="pager">' + " \u00b7 ".join(parts) + "</nav>"


def _trial_row(view: StudyView, t: Trial, pids: Sequence[str], mids: Sequence[str], mark: str | None) -> str:
    """Trial `t`'s row of `trial_table`; `mark` ("best" or "pareto", a key of BADGES) when it is
    (part of) the study's result, None otherwise. Metrics and step are the final measurement's,
    else the latest one's while the trial runs."""
    from vcli.plots import data as d

    final = t.final_measurement
    latest = final or (t.measurements[-1] if t.measurements else None)
    job = view.trial_jobs.get(t.id)
    span = d.span(t)
    badge = f' <span class="badge" title="{esc(BADGES[mark])}">{mark}</span>' if mark else ""
    cells = [esc(t.id) + badge, state(t.state.value), *[esc(number(t.parameters.get(p))) for p in pids],
             *[esc(number(latest.metrics.get(m)) if latest else "") for m in mids],
             esc(latest.step_count if latest else ""),
             esc(d.fmt_duration((span[1] - span[0]).total_seconds())) if span else "", esc(_stop_reason(t)),
             f'<a href="/jobs/{quote(job)}">replicas</a>' if job else ""]
    classes = [c for c in (mark or "", "stopped-early" if t.early_stopping_rule else "") if c]
    cls = f' class="{" ".join(classes)}"' if classes else ""
    return f'<tr id="trial-{esc(t.id)}"{cls}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _stop_reason(t: Trial) -> str:
    """Why the trial stopped, as far as known: the study's stop reason, the infeasible reason
    and the early-stopping rule, joined by "; " ("" when none)."""
    return "; ".join(x for x in (t.stop_reason, t.infeasible_reason,
                                 f"early stopping: {t.early_stopping_rule}" if t.early_stopping_rule else None) if x)


BADGES = {"best": "the best trial so far", "pareto": "on the Pareto front: no other trial is better on every metric"}


# ------------------------------------------------------------------ a job and its logs


def job_page(row: JobRow, replicas: Sequence[ReplicaRow], version: str) -> str:
    up = (f'<a href="/studies/{quote(row.parent_id)}">study {esc(row.parent_id)}</a> / trial {esc(row.trial_id)}'
          if row.parent_id else "custom job")
    body = (f'<nav><a href="/">vcli dashboard</a> / {up}</nav><h1>{esc(row.display_name)}</h1>'
            f'<div data-part="summary">{job_summary(row)}</div>'
            f'<h2>Replicas</h2><div data-part="replicas">{replica_table(row, replicas)}</div>')
    return page(row.display_name, body, live=f"/api/jobs/{quote(row.id)}", version=version)


def job_summary(row: JobRow) -> str:
    items = [("ID", f'<span class="mono">{esc(row.id)}</span>'), ("State", state(row.state)), ("Created", when(row.create_time))]
    if row.start_time:
        items.append(("Started", when(row.start_time)))
    if row.end_time:
        items.append(("Ended", when(row.end_time)))
    if row.record.get("outputDirectory"):
        items.append(("Output", f'<span class="mono">{esc(row.record["outputDirectory"])}</span>'))
    if row.error:
        items.append(("Error", esc(row.error.get("message"))))
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def replica_table(row: JobRow, replicas: Sequence[ReplicaRow]) -> str:
    if not replicas:
        return '<p class="note">No replica has started yet.</p>'
    rows = "".join(
        f"<tr><td class=\"mono\">{esc(r.task_name)}</td><td>{esc(r.host)}</td><td>{esc(r.address)}</td>"
        f"<td>{state(r.state)}</td><td>{esc(r.exit_code)}</td><td>{esc(r.message)}</td>"
        f'<td><a href="/jobs/{quote(row.id)}/logs/{quote(r.task_name)}">log</a></td></tr>' for r in replicas)
    return ("<table><tr><th>Task</th><th>Host</th><th>Address</th><th>State</th><th>Exit code</th><th>Message</th>"
            f"<th>Log</th></tr>{rows}</table>")


def log_page(row: JobRow, replica: ReplicaRow, chunk: LogChunk, ended: bool) -> str:
    api = f"/api/jobs/{quote(row.id)}/logs/{quote(replica.task_name)}"
    lines = "".join(f'<span class="{esc(sev.lower())}">{esc(t)}  {esc(sev)}  {esc(msg)}\n</span>'
                    for sev, t, msg in log_lines(chunk))
    skipped = f'<p class="note">The first {chunk.start} bytes of the log are not shown.</p>' if chunk.start else ""
    body = (f'<nav><a href="/">vcli dashboard</a> / <a href="/jobs/{quote(row.id)}">{esc(row.display_name)}</a>'
            f" / {esc(replica.task_name)}</nav><h1>{esc(replica.task_name)} log</h1>"
            f'<p class="mono note">{esc(replica.log_path)}</p>'
            '<label><input type="checkbox" id="follow" checked> follow the end</label>'
            f'{skipped}<pre id="log" data-api="{esc(api)}" data-offset="{chunk.offset}" '
            f'data-ended="{1 if ended else 0}">{lines}</pre>')
    return page(f"{replica.task_name} log", body, script=LOG_SCRIPT)


def log_lines(chunk: LogChunk) -> list[tuple[str, str, str]]:
    """(severity, local time, message) of each record: stderr is ERROR (as in stream-logs),
    vcli's own messages about the replica are VCLI."""
    out = []
    for ts, stream, message in chunk.records:
        severity = {"stderr": "ERROR", "vcli": "VCLI"}.get(stream, "INFO")
        out.append((severity, datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S"), message))
    return out


# ------------------------------------------------------------------ small pieces


_OK = {JobState.JOB_STATE_SUCCEEDED.value, TrialState.SUCCEEDED.value}
_BAD = {JobState.JOB_STATE_FAILED.value, JobState.JOB_STATE_CANCELLED.value, TrialState.INFEASIBLE.value, "FAILED"}
_RUN = {JobState.JOB_STATE_RUNNING.value, TrialState.ACTIVE.value, "RUNNING"}


def state(value: str) -> str:
    cls = "s-ok" if value in _OK else "s-bad" if value in _BAD else "s-run" if value in _RUN else "s-idle"
    return f'<span class="state {cls}">{esc(value.removeprefix("JOB_STATE_"))}</span>'


def when(iso: str | None) -> str:
    """A stored RFC 3339 time, to the second, with its zone."""
    return esc(iso[:19].replace("T", " ") + " UTC") if iso else ""


def number(value: object) -> object:
    return f"{value:.6g}" if isinstance(value, float) else ("" if value is None else value)
