"""The dashboard's HTTP server: routes, read-only methods, errors as pages, a clean stop.

Routes (GET and HEAD only; anything else is 405):
  /                                  the index          /api/index/version, /api/index/parts/NAME
  /studies/ID?page=N&order=O         a study            /api/studies/ID/version, .../parts/NAME?page=N&order=O
  /jobs/ID                           a job or trial     /api/jobs/ID/version, .../parts/NAME
  /jobs/ID/logs/TASK                 a replica's log    /api/jobs/ID/logs/TASK?offset=N
Unknown paths and ids are a 404 page; an error in a handler is a 500 page with one line (and
the same line on stderr), and the server goes on.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from vcli.dashboard import pages
from vcli.dashboard.reader import Reader, read_log
from vcli.errors import InvalidValueError, UsageError
from vcli.spec import JobState

#: What a page may load: only itself (inline style and script, its own /api); nothing else.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class NotFound(Exception):
    """The path, or the job, study or replica it names, does not exist (a 404 page)."""


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback `host` unless `allow_remote`: the dashboard has no authentication."""
    if not allow_remote and not is_loopback(host):
        raise UsageError(f"argument --host: {host} is not a loopback address, and the dashboard has no "
                         "authentication: anyone who can reach it would read every job and log; pass "
                         "--allow-remote to serve it there anyway.")


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow client never holds up Ctrl-C
    allow_reuse_address = True
    request_queue_size = 128  # socketserver's 5 left some of 200 clients connecting at once unanswered

    def __init__(self, address: tuple[str, int], reader: Reader, *, loopback_only: bool) -> None:
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.reader = reader
        self.loopback_only = loopback_only

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-response (a closed tab) is nothing to report; anything
        else is one line, never socketserver's traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        line = f"{type(error).__name__}: {error}".splitlines()[0] if error else "unknown error"
        print(f"ERROR: (vcli.dashboard) a request from {client_address[0]} failed: {line}", file=sys.stderr, flush=True)


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "vcli-dashboard"
    #: Seconds a connection may stay silent (or not read its response) before it is closed:
    #: every connection holds a thread, so idle ones would pile up without bound.
    timeout = 30.0

    def do_GET(self) -> None:
        self._respond(body=True)

    def do_HEAD(self) -> None:
        self._respond(body=False)

    def _not_allowed(self) -> None:
        self._send(405, "text/html", pages.error_page(405, f"{self.command} is not allowed: the dashboard is read-only."),
                   body=True, extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: the terminal is kept for the one start line and errors."""

    # ------------------------------------------------------------------ dispatch

    def _respond(self, *, body: bool) -> None:
        url = urlsplit(self.path)
        host = _host_name(self.headers.get("Host", ""))
        if self.server.loopback_only and host and not is_loopback(host):
            # Bound to loopback, so only a local client can be talking; a foreign Host header means
            # a page from elsewhere reaching it through DNS rebinding.
            self._send(403, "text/html", pages.error_page(403, "Open the dashboard through 127.0.0.1 or localhost."), body=body)
            return
        try:
            status, kind, content = route(self.server.reader, [unquote(p) for p in url.path.split("/")[1:]],
                                          parse_qs(url.query))
        except NotFound as e:
            status, kind, content = 404, "text/html", pages.error_page(404, str(e) or f"Nothing at {url.path}.")
        except Exception as e:  # one line to the client and the terminal; the server goes on
            line = f"{type(e).__name__}: {e}".splitlines()[0]
            print(f"ERROR: (vcli.dashboard) {self.command} {url.path}: {line}", file=sys.stderr, flush=True)
            status, kind, content = 500, "text/html", pages.error_page(500, f"The dashboard failed on this page: {line}")
        self._send(status, kind, content, body=body)

    def _send(self, status: int, kind: str, content: str, *, body: bool, extra: dict[str, str] | None = None) -> None:
        data = content.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)


Response = tuple[int, str, str]


def route(reader: Reader, parts: list[str], query: dict[str, list[str]]) -> Response:
    """(status, content type, body) for the path `parts` (`/a/b` is ["a", "b"])."""
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]  # /jobs/ID/ is /jobs/ID
    match parts:
        case [""]:
            parts_ = _index_parts(reader)
            return _html(pages.index_page(parts_["studies"], parts_["jobs"], _digest(parts_)))
        case ["studies", sid]:
            page, order = _table_page(query)
            view = _study(reader, sid)
            return _html(pages.study_page(view, pages.figures_part(reader.figures(view)), page, order))
        case ["jobs", jid]:
            row, replicas = _job(reader, jid)
            return _html(pages.job_page(row, replicas, _digest(_job_parts(reader, jid))))
        case ["jobs", jid, "logs", task]:
            row, replica = _replica(reader, jid, task)
            return _html(pages.log_page(row, replica, read_log(replica.log_path, None), JobState(row.state).is_final()))
        case ["api", "index", *rest]:
            return _live(rest, lambda: _digest(_index_parts(reader)), lambda: _index_parts(reader))
        case ["api", "studies", sid, *rest]:
            return _live(rest, lambda: _study_version(reader, sid), lambda: _study_parts(reader, sid, query))
        case ["api", "jobs", jid, "logs", task]:
            row, replica = _replica(reader, jid, task)
            offset = _offset(query)
            chunk = read_log(replica.log_path, offset)
            return _json({"lines": pages.log_lines(chunk), "offset": chunk.offset, "start": chunk.start,
                          "ended": JobState(row.state).is_final()})
        case ["api", "jobs", jid, *rest]:
            return _live(rest, lambda: _digest(_job_parts(reader, jid)), lambda: _job_parts(reader, jid))
    raise NotFound()


def _live(rest: list[str], version: Callable[[], str], parts: Callable[[], dict[str, Callable[[], str] | str]]) -> Response:
    """A live page's API: `version`, or `parts/NAME` with the version it was rendered at."""
    match rest:
        case ["version"]:
            return _json({"version": version()})
        case ["parts", name]:
            found = parts()
            if name not in found:
                raise NotFound(f"There is no part {name}.")
            part = found[name]
            return _json({"html": part() if callable(part) else part})
    raise NotFound()


# ------------------------------------------------------------------ pages' parts


def _index_parts(reader: Reader) -> dict[str, str]:
    return {"studies": pages.studies_table(reader.studies()), "jobs": pages.jobs_table(reader.custom_jobs())}


def _study(reader: Reader, sid: str) -> Any:
    view = reader.study(sid)
    if view is None:
        raise NotFound(f"There is no hyperparameter tuning job {sid}.")
    return view


def _study_version(reader: Reader, sid: str) -> str:
    version = reader.study_version(sid)
    if version is None:
        raise NotFound(f"There is no hyperparameter tuning job {sid}.")
    return version


def _study_parts(reader: Reader, sid: str, query: dict[str, list[str]]) -> dict[str, Callable[[], str] | str]:
    page, order = _table_page(query)
    view = _study(reader, sid)
    # The figures are drawn only when asked for (and then at most once per version).
    return {"summary": pages.study_summary(view), "trials": pages.trial_table(view, page, order),
            "figures": lambda: pages.figures_part(reader.figures(view))}


def _job(reader: Reader, jid: str) -> Any:
    found = reader.job(jid)
    if found is None:
        raise NotFound(f"There is no custom job {jid}.")
    return found


def _job_parts(reader: Reader, jid: str) -> dict[str, str]:
    row, replicas = _job(reader, jid)
    return {"summary": pages.job_summary(row), "replicas": pages.replica_table(row, replicas)}


def _replica(reader: Reader, jid: str, task: str) -> Any:
    found = reader.replica(jid, task)
    if found is None:
        raise NotFound(f"Job {jid} has no replica {task}.")
    return found


def _table_page(query: dict[str, list[str]]) -> tuple[int, str]:
    """The trial table's page (from 1) and order (`pages.ORDERS`) a study page's query asks for."""
    order = (query.get("order") or [next(iter(pages.ORDERS))])[0]
    if order not in pages.ORDERS:
        raise NotFound(f"order must be one of {', '.join(pages.ORDERS)}, not {order!r}.")
    raw = (query.get("page") or ["1"])[0]
    try:
        return max(1, int(raw)), order
    except ValueError:
        raise NotFound(f"page must be a number, not {raw!r}.") from None


def _offset(query: dict[str, list[str]]) -> int | None:
    values = query.get("offset")
    if not values:
        return None
    try:
        return max(0, int(values[0]))
    except ValueError:
        raise NotFound(f"offset must be a number of bytes, not {values[0]!r}.") from None


def _digest(parts: dict[str, str]) -> str:
    """The version of a page whose parts are cheap to render: a hash of what they show."""
    return hashlib.sha1("\0".join(parts.values()).encode()).hexdigest()[:16]


def _html(content: str) -> Response:
    return 200, "text/html", content


def _json(value: Any) -> Response:
    return 200, "application/json", json.dumps(value)


def _host_name(header: str) -> str:
    """The host of a Host header (`127.0.0.1:8080`, `[::1]:8080`, `localhost`)."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


# ------------------------------------------------------------------ running it


def serve(host: str, port: int, *, allow_remote: bool = False, home: Path | str | None = None,
          announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
    """Serve the dashboard until a KeyboardInterrupt (Ctrl-C; the CLI maps SIGTERM and SIGHUP to
    it too), then return with the socket closed. `announce` gets the one line with the address
    (the real port when `port` is 0) once the socket is listening. A port that cannot be bound
    is an InvalidValueError naming --port (or --host, for an address this machine does not have).
    """
    check_host(host, allow_remote)
    if not 0 <= port <= 65535:
        raise InvalidValueError("--port", f"a port is a number from 0 to 65535 (0: any free port), not {port}.")
    reader = Reader(home)
    try:
        server = DashboardServer((host, port), reader, loopback_only=is_loopback(host))
    except OSError as e:
        reader.close()
        flag = "--port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        raise InvalidValueError(flag, f"cannot listen on {host}:{port}: {e.strerror or e}.") from None
    try:
        shown = f"[{host}]" if ":" in host else host
        announce(f"Serving the vcli dashboard at http://{shown}:{server.server_address[1]}/ (read-only; Ctrl-C stops it)")
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
    finally:
        server.server_close()
        reader.close()
