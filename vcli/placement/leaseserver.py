"""The GPU lease server: a controller's hands on an SSH host's lease directory
(`vcli.placement.gpulease`), for as long as the controller's SSH channel is open.

Standard library only, like `gpulease`: it is shipped to each SSH host beside `gpulease.py`,
`gpuinfo.py` and `leasefiles.py` (`vcli.executors.ssh.remote.install_tools`, all under names
hashed from their source) and run there as `python -S leaseserver.py serve DIR GPULEASE GPUINFO
LEASEFILES`, the paths of the shipped copies. The server loads the libraries from those exact
files (`load_library`, `leasefiles` first: `gpulease` imports it),
never from a vcli the host may have installed, whose version could differ from the controller's.

The server takes and holds the locks for the controller (JSON lines on its stdin and stdout)
and hands a placed replica's descriptors to the replica's wrapper over an abstract Unix socket
(`SCM_RIGHTS`), which passes them on to the supervisor, so the lease lives exactly as long as
the supervisor. Leases the server still holds end with it, that is with the controller's SSH
channel.
"""

from __future__ import annotations

import array
import importlib.util
import json
import os
import socket
import struct
import sys
import threading
from types import ModuleType
from typing import Any, Mapping

#: The first line a lease server prints (after whatever the login shell's rc files printed).
HANDSHAKE = "VCLI-LEASES"


def load_library(path: str | None = None, name: str = "gpulease") -> ModuleType:
    """A library of the lease server, `name` being `gpulease`, `gpuinfo` or `leasefiles` (it
    is registered as `vcli_NAME`, where a shipped `gpulease` finds its sibling): the copy at `path`
    (shipped to an SSH host), or vcli's own `vcli.placement.NAME` when `path` is None."""
    if path is None:
        return importlib.import_module(f"vcli.placement.{name}")
    spec = importlib.util.spec_from_file_location(f"vcli_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the lease library {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def serve(path: str, lib: ModuleType, stdin: Any = None, stdout: Any = None, info: ModuleType | None = None) -> int:
    """`python -S leaseserver.py serve DIR GPULEASE GPUINFO LEASEFILES`: serve the lease directory DIR of
    the host this runs on with the lease library `lib` and the GPU information library `info`
    (`load_library`), for as long as stdin is open (the controller's SSH channel).

    Prints `VCLI-LEASES {"socket": NAME, "path": DIR, "pid": PID}`, then answers each JSON
    request line with one JSON line:

    - `{"op": "acquire", "indices": [...], "record": {...}, "share": F?}` -> `{"ok": true,
      "keys": [...]}` (a share's key: its lock file), or `{"busy": INDEX, "holder": {...}}` (all
      or none, as `LeaseDir.acquire`); `{"op": "release_share", "key": K}` gives a share back;
    - `{"op": "release", "indices": [...]}` -> `{"ok": true}`;
    - `{"op": "probe", "indices": [...]}` -> `{"held": [[INDEX, RECORD or null], ...]}`;
    - `{"op": "waiters"}` -> `{"waiters": [...]}`;
    - `{"op": "busy"}` -> `{"busy": [[INDEX, WHY], ...]}`: GPUs that a process vcli did not
      start uses, by this host's nvidia-smi (`gpuinfo.nvidia_busy`; none without it);
    - `{"op": "processes"}` -> `{"processes": [[INDEX, [PROCESS, ...]], ...]}`: who holds GPU
      memory there (`gpuinfo.gpu_processes`); `{"op": "utilization"}` ->
      `{"utilization": [[INDEX, PERCENT], ...]}`;
    - `{"op": "holders"}` -> `{"holders": [RECORD, ...]}`: every lease held there
      (`LeaseDir.holders`); `{"op": "policy"}` -> `{"policy": {...}}` (`gpuinfo.read_policy`);
      `{"op": "memory_total"}`, `{"op": "ensure_mps"}` (`gpuinfo`'s, for shares);
      `{"op": "write_policy", "text": YAML}` -> `{"done": {"path", "error"?}}` (`gpuinfo.write_policy`);
    - `{"op": "queue", "key": K, "record": {...}}` / `{"op": "unqueue", "key": K}`: an entry in
      the host's waiting queue while a job waits (queueing K again marks another try);
    - anything that fails -> `{"error": TEXT}`.

    A replica's wrapper on this host takes the leases of its GPUs from the server through the
    abstract Unix socket NAME: the server sends the descriptors and closes its own copies, so
    from then on the lease ends with the wrapper's supervisor, not with the server. Only
    processes of the server's own user may take them. Leases the server still holds when its
    stdin closes end with it (the controller went away before the replica started).
    """
    leases = lib.LeaseDir(os.path.expanduser(path), info=info or load_library(None, "gpuinfo"))
    inp = stdin if stdin is not None else sys.stdin
    out = stdout if stdout is not None else sys.stdout
    hand = _HandOff(leases)
    waiting: dict[str, Any] = {}
    out.write(f"{HANDSHAKE} {json.dumps({'socket': hand.name, 'path': leases.path, 'pid': os.getpid()})}\n")
    out.flush()
    try:
        for line in inp:
            try:
                reply = _answer(lib, leases, waiting, json.loads(line))
            except lib.LeaseBusy as e:
                reply = {"busy": e.index, "holder": e.holder}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                reply = {"error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    except (OSError, KeyboardInterrupt):
        pass
    finally:
        hand.close()
        for entry in waiting.values():
            entry.close()
    return 0


def _answer(lib: ModuleType, leases: Any, waiting: dict[str, Any], req: Mapping[str, Any]) -> dict[str, Any]:
    op = req["op"]
    if op in _WITH_ARGUMENTS:
        return _WITH_ARGUMENTS[op](leases, req)
    if op == "queue":
        key = str(req["key"])
        if key in waiting:
            waiting[key].touch()
        else:
            waiting[key] = leases.queue(dict(req.get("record") or {}))
        return {"ok": True}
    if op == "unqueue":
        entry = waiting.pop(str(req["key"]), None)
        if entry is not None:
            entry.close()
        return {"ok": True}
    if op in _READS:
        return {op: _READS[op](leases)}
    if op == "ping":
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}")


def _acquire(leases: Any, req: Mapping[str, Any]) -> dict[str, Any]:
    got = leases.acquire([int(i) for i in req["indices"]], dict(req.get("record") or {}), share=req.get("share"))
    return {"ok": True, **({"keys": [lease.path for lease in got]} if req.get("share") else {})}


def _release_share(leases: Any, req: Mapping[str, Any]) -> dict[str, Any]:
    lease = leases.share_at(str(req["key"]))
    if lease is not None:
        leases.release_share(lease)
    return {"ok": True}


def _release(leases: Any, req: Mapping[str, Any]) -> dict[str, Any]:
    leases.release([int(i) for i in req["indices"]])
    return {"ok": True}


#: The requests that carry arguments (take, give back, probe, write): op -> its answer.
_WITH_ARGUMENTS: dict[str, Any] = {
    "acquire": _acquire,
    "release": _release,
    "release_share": _release_share,
    "probe": lambda leases, req: {"held": [[i, rec] for i, rec in leases.probe([int(i) for i in req["indices"]]).items()]},
    "write_policy": lambda leases, req: {"done": leases.write_policy(str(req["text"]))},
}


def _pairs(mapping: Mapping[int, Any]) -> list[list[Any]]:
    return [[i, value] for i, value in sorted(mapping.items())]


#: The requests that only read: op -> what its answer's one key holds.
_READS: dict[str, Any] = {
    "waiters": lambda leases: leases.waiters(),
    "busy": lambda leases: _pairs(leases.nvidia_busy()),
    "processes": lambda leases: _pairs(leases.info().gpu_processes()),
    "utilization": lambda leases: _pairs(leases.info().utilization()),
    "holders": lambda leases: leases.holders(),
    "policy": lambda leases: leases.info().read_policy(leases.path),
    "memory_total": lambda leases: _pairs(leases.info().memory_total()),
    "ensure_mps": lambda leases: leases.info().ensure_mps(),
}


class _HandOff:
    """The server's abstract Unix socket: a wrapper sends `{"gpus": [...]}` and receives the
    lock descriptors of those GPUs (SCM_RIGHTS); the server then closes its own copies."""

    def __init__(self, leases: Any) -> None:
        self.leases = leases
        self.name = f"vcli-gpulease-{os.getpid()}-{os.urandom(8).hex()}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + self.name)  # abstract: no file to leave behind, gone with the server
        self.sock.listen(16)
        threading.Thread(target=self._serve, name="vcli-lease-handoff", daemon=True).start()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    self._hand(conn)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    try:
                        conn.sendall(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode() + b"\n")
                    except OSError:
                        pass

    def _hand(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid not in (os.geteuid(), 0):  # only the server's own user takes its leases
            raise ValueError(f"uid {uid} may not take these leases")
        data = b""
        while not data.endswith(b"\n") and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        # Whole GPUs by index; shares by their key (the share's lock file).
        wanted = [int(g) if str(g).isdigit() else str(g) for g in json.loads(data)["gpus"]]
        held = [self.leases.held_here(g) if isinstance(g, int) else self.leases.share_at(g) for g in wanted]
        missing = [g for g, lease in zip(wanted, held) if lease is None]
        if missing:
            raise ValueError(f"GPU(s) {missing} are not leased by this controller")
        fds = array.array("i", [lease.fd for lease in held if lease is not None])
        conn.sendmsg([b'{"ok": true}\n'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
        # In flight, then the wrapper's: the locks stay held.
        self.leases.release([g for g in wanted if isinstance(g, int)])
        for g, lease in zip(wanted, held):
            if isinstance(g, str) and lease is not None:
                self.leases.release_share(lease)




def main(args: list[str]) -> int:
    if len(args) == 5 and args[0] == "serve":  # the libraries shipped to an SSH host
        load_library(args[4], "leasefiles")  # first: the lease library imports it
        return serve(args[1], load_library(args[2]), info=load_library(args[3], "gpuinfo"))
    if len(args) == 2 and args[0] == "serve":  # vcli's own libraries
        return serve(args[1], load_library(None))
    print("usage: python -S leaseserver.py serve LEASE_DIR [GPULEASE_PY GPUINFO_PY LEASEFILES_PY]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
