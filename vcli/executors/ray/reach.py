"""Is a Ray address a cluster vcli can use? Asked before `ray.init`, which retries an
unreachable GCS, or a port that is not one, without bound (printing warnings, deaf to Ctrl-C);
and is it still there (`ClusterWatch`, asked before each call into Ray once connected: Ray's
core ends a process whose GCS stays unreachable for 60 s, in the middle of whatever it was
doing). Standard library only."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable

from vcli.errors import ExecutorError

__all__ = ["CONNECT_TIMEOUT_SECONDS", "CURRENT_CLUSTER_FILE", "ClusterLost", "ClusterWatch", "bounded", "check_reachable", "gcs_of"]

#: How long the GCS of a cluster may take to accept a TCP connection (seconds).
CONNECT_TIMEOUT_SECONDS = 10.0
#: How long the GCS may refuse connections before the cluster counts as lost (seconds): Ray
#: itself ends a process whose GCS stays unreachable for 60 s, mid-call, recording nothing.
LOST_AFTER_SECONDS = 5.0
#: How long one reachability answer is trusted (seconds).
RECHECK_SECONDS = 0.5
#: Where Ray records the GCS address of the cluster started on this machine (`address="auto"`).
CURRENT_CLUSTER_FILE = "/tmp/ray/ray_current_cluster"


def gcs_of(address: str) -> tuple[str, str, int, str] | None:
    """(host:port, host, port, where it came from) of the GCS (or Ray client server) that
    `address` names; None when it names none vcli can tell (Ray then judges it itself).
    `auto` is $RAY_ADDRESS, else the address Ray recorded in CURRENT_CLUSTER_FILE."""
    target, origin = address, ""
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS", "")
        origin = " ($RAY_ADDRESS)"
        if not target or target == "auto":
            try:
                with open(CURRENT_CLUSTER_FILE, encoding="utf-8") as f:
                    target = f.read().strip()
                origin = f" (recorded in {CURRENT_CLUSTER_FILE})"
            except OSError:
                return None
    hostport = target.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return None  # not host:port: let Ray judge it
    return hostport, host.strip("[]"), int(port), origin


def check_reachable(address: str) -> None:
    """Raise ExecutorError at once when the cluster's GCS (or Ray client server) does not accept
    a TCP connection: `ray.init` would retry for ever, printing warnings every few seconds.
    An address whose GCS vcli cannot tell (`gcs_of`): Ray says what is wrong itself, at once."""
    gcs = gcs_of(address)
    if gcs is None:
        return
    hostport, host, port, origin = gcs
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SECONDS) as conn:
            speaks = _speaks_grpc(conn)
    except OSError as e:
        stale = " It is left from a cluster that is gone: start one (`ray start --head`) or pass --ray-address." \
            if address == "auto" and "recorded" in origin else ""
        raise ExecutorError(f"Cannot connect to the Ray cluster at {hostport}{origin}: "
                            f"{e.strerror or e or 'no answer'}.{stale}") from None
    if not speaks:  # ray.init retried it for ever (an HTTP server: the dashboard's 8265, say), deaf to Ctrl-C
        raise ExecutorError(f"{hostport}{origin} accepts connections but is not a Ray cluster (its GCS, or a "
                            "ray:// client server, speaks gRPC; this does not): the GCS listens on port 6379 unless "
                            "`ray start --head --port` said otherwise.")


#: HTTP/2's client connection preface, then an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _speaks_grpc(conn: socket.socket) -> bool:
    """Does the peer answer HTTP/2's preface with a SETTINGS frame (as every gRPC server, Ray's
    GCS among them, must first)? True when unsure: TLS (RAY_USE_TLS) hides it."""
    if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        return True
    try:
        conn.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:  # a timeout too: a server that says nothing
        return False
    return head[3] == 0x04  # the frame's type: SETTINGS


class ClusterLost(ExecutorError):
    """The Ray cluster's GCS has refused connections for LOST_AFTER_SECONDS (`why`: as `lost()`)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"{why[:1].upper()}{why[1:]}.")


class ClusterWatch:
    """Whether the cluster's GCS still accepts connections, asked before each call into Ray.

    A call into Ray while the GCS is gone blocks inside Ray's core library until, 60 s later,
    it ends the whole process (`Failed to connect to GCS within 60 seconds ... The program will
    terminate`), so a controller never recorded its job's end. `answering()` is False while the
    GCS refuses (no call into Ray then); `lost()` says why once it has refused for
    LOST_AFTER_SECONDS, and stays said. Thread-safe; an address it cannot tell is never lost."""

    def __init__(self, address: str) -> None:
        self._gcs = gcs_of(address)
        self._lock = threading.Lock()
        self._checked = -1e18
        self._ok = True
        self._refusing_since: float | None = None
        self._lost: str | None = None

    def answering(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._lost is not None:
                return False
            if self._gcs is None or now - self._checked < RECHECK_SECONDS:
                return self._ok
            hostport, host, port, _ = self._gcs
            try:
                with socket.create_connection((host, port), timeout=2.0):
                    pass
            except OSError as e:
                self._ok = False
                self._refusing_since = self._refusing_since if self._refusing_since is not None else now
                if now - self._refusing_since >= LOST_AFTER_SECONDS:
                    self._lost = (f"the Ray cluster at {hostport} is gone: its GCS has refused connections for "
                                  f"{now - self._refusing_since:.0f} s ({e.strerror or e or 'no answer'})")
            else:
                self._ok, self._refusing_since = True, None
            self._checked = now
            return self._ok

    def lost(self) -> str | None:
        """Why the cluster counts as lost, or None; asks the GCS first if that is due."""
        self.answering()
        return self._lost


def bounded(watch: ClusterWatch, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` (a call into Ray that asks the GCS: `ray.nodes`, `get_actor`,
    creating a named actor or a placement group), in a thread: raises ClusterLost, leaving the
    thread blocked inside Ray, once `watch` counts the cluster as lost."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller as it is
            box["error"] = e

    thread = threading.Thread(target=run, name="vcli-ray-call", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(RECHECK_SECONDS)
        if thread.is_alive() and (why := watch.lost()) is not None:
            raise ClusterLost(why)
    if "error" in box:
        raise box["error"]
    return box["value"]
