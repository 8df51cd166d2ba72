"""Wait until a container has stopped: the process that holds a container replica's GPU leases.

    python -S lease_keeper.py ENGINE_URL CONTAINER_ID

The Docker executor runs it under the replica supervisor (`vcli.executors.supervisor`, which
holds the leases' descriptors) right after the container started: the supervisor, and so the
host-wide lease of the container's GPUs, lives until the container stops or is removed
(`POST /containers/ID/wait` answers then, or fails because the container is gone), whatever
happens to the vcli process that started it. Standard library only; exits 0 in every case.
"""

from __future__ import annotations

import http.client
import socket
import sys
import time


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=None)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self._path)
        self.sock = sock


def _connection(url: str) -> http.client.HTTPConnection:
    if url.startswith("unix://"):
        return _UnixConnection(url[len("unix://"):])
    host = url.split("://", 1)[-1].rstrip("/")
    return http.client.HTTPConnection(host, timeout=None)


def wait(url: str, container: str) -> None:
    """Until the engine says the container is not running (stopped, removed, or unknown)."""
    for _ in range(10):  # an engine restart drops the connection: ask again
        try:
            conn = _connection(url)
            conn.request("POST", f"/containers/{container}/wait?condition=not-running")
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(1.0)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: lease_keeper.py ENGINE_URL CONTAINER_ID", file=sys.stderr)
        sys.exit(2)
    wait(sys.argv[1], sys.argv[2])
