"""Is a Ray address a cluster vcli can use? Asked before `ray.init`, which retries an
unreachable GCS, or a port that is not one, without bound (printing warnings, deaf to Ctrl-C).
Standard library only."""

from __future__ import annotations

import os
import socket

from vcli.errors import ExecutorError

__all__ = ["CONNECT_TIMEOUT_SECONDS", "CURRENT_CLUSTER_FILE", "check_reachable"]

#: How long the GCS of a cluster may take to accept a TCP connection (seconds).
CONNECT_TIMEOUT_SECONDS = 10.0
#: Where Ray records the GCS address of the cluster started on this machine (`address="auto"`).
CURRENT_CLUSTER_FILE = "/tmp/ray/ray_current_cluster"


def check_reachable(address: str) -> None:
    """Raise ExecutorError at once when the cluster's GCS (or Ray client server) does not accept
    a TCP connection: `ray.init` would retry for ever, printing warnings every few seconds.
    `auto` is $RAY_ADDRESS, else the address Ray recorded in CURRENT_CLUSTER_FILE (none: Ray
    says so itself, at once)."""
    import socket

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
                return
    hostport = target.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return  # not host:port: let Ray judge it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_SECONDS) as conn:
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
