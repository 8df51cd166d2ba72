"""`vcli dashboard` (vcli extension): serve a read-only web view of the store (`vcli.dashboard`)."""

from __future__ import annotations

from typing import Annotated

import typer

from vcli.cli.support import command, interrupt_on_signals


@command("dashboard")
def dashboard(
    port: Annotated[int, typer.Option("--port", help="The port to listen on (0: any free port; the line printed at start names it).")] = 8080,
    host: Annotated[str, typer.Option("--host", help="The address to listen on; anything but a loopback address needs --allow-remote.")] = "127.0.0.1",
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Listen on a non-loopback --host. The dashboard has NO authentication: anyone who reaches the port reads every job, trial and log.")] = False,
) -> None:
    """vcli: a read-only local web dashboard of the jobs and studies in the store: plots that
    update while a study runs, trial tables, each replica's log. It has no authentication, so
    it listens on 127.0.0.1 unless told otherwise. Ctrl-C stops it."""
    from vcli.dashboard import check_host, serve

    check_host(host, allow_remote)  # before anything else: a refused --host is one line, exit 2
    interrupt_on_signals()  # SIGTERM and SIGHUP stop it like Ctrl-C: cleanly, exit code 0
    serve(host, port, allow_remote=allow_remote)
