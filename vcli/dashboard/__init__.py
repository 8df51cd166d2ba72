"""`vcli dashboard` (vcli extension): a read-only local web server over vcli's store.

Pages: `/` lists custom jobs and studies; `/studies/ID` shows a study's summary (with its best
trial, or with several metrics its Pareto front, current while the study runs), its plots
(`vcli.plots`, drawn server-side once per study version, kept in the figure cache on disk
that `hp-tuning-jobs plot` shares: `vcli.plots.cache`) and its trial table, 100 trials a page
(`?page=N&order=newest|best`; the best trial or the front's trials marked, trials stopped
early marked);
`/jobs/ID` a job's (or a trial's) replicas with links to `/jobs/ID/logs/TASK`, a replica's
log, followed while it grows. Every page is self-contained (inline CSS and script, nothing
from the network) and keeps itself current by polling JSON under `/api/`: a page asks for its
cheap `version` every two seconds and fetches the parts that changed only when it moved.

Read-only by construction: the store is opened with `Store(readonly=True)`, only GET and HEAD
are served (anything else is 405), log files are reached only through the paths the store
records for a job's replicas. It has no authentication: it binds to a loopback address unless
`--allow-remote` says otherwise, and while on loopback it answers only requests addressed to a
loopback name (a web page elsewhere cannot read it through DNS rebinding).

Standard library only (`http.server`); `vcli.plots` (matplotlib) is imported by the study page
when it draws, so a missing plot extra costs one hint line, not the dashboard.
"""

from __future__ import annotations

from vcli.dashboard.server import check_host, serve

__all__ = ["check_host", "serve"]
