"""Host-wide GPU leases on an SSH host, from the controller's side.

The leases of an SSH host live on the host, in its lease directory (the inventory's
`gpu_lease_dir`, default `vcli.placement.gpulease.DEFAULT_DIR`), so controllers on different
machines that drive one GPU host see each other's replicas. A controller reaches them through
one lease server per host (`vcli.placement.leaseserver`: `python -S leaseserver.py serve DIR
GPULEASE`, shipped with the supervisor and started on its own SSH channel the first time
placement asks): `RemoteLeases` has the interface of `vcli.placement.gpulease.LeaseDir` that
`vcli.placement.gpus.GpuAllocator` and `vcli.placement.JobPlacer` use (`acquire`, `release`,
`probe`, `held_here`, `queue`, `waiters`, `nvidia_busy`), each call one JSON line there and back.

A placed replica's leases go from the server to the replica's wrapper and supervisor on the
host (`build_remote_command(gpu_leases=(socket, indices))`); from then on they end with the
supervisor. Leases the server holds for a replica that never started end with the server, that
is with this controller's channel: a controller that dies leaks no lease.

A host that cannot be reached holds no lease for anyone: `acquire` raises `LeaseBusy` with an
`unavailable` reason (placement skips the GPU and says why), `probe` reports nothing held.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from vcli.errors import ExecutorError
from vcli.executors.ssh.link import HostLink, qargv
from vcli.placement.gpulease import DEFAULT_DIR, LeaseBusy, base_record
from vcli.placement.leaseserver import HANDSHAKE

__all__ = ["RemoteLeases", "RemoteShare"]

#: How long one request may take before the server counts as lost (seconds).
REPLY_TIMEOUT = 30.0


@dataclass(frozen=True)
class RemoteShare:
    """A share of GPU `index` the lease server holds for this controller; `key` names it there
    (its lock file) and `record` is what it was taken with."""

    index: int
    key: str
    record: Mapping[str, Any] = field(default_factory=dict, compare=False)


class _RemoteInfo:
    """`vcli.placement.gpuinfo` of an SSH host, through its lease server."""

    def __init__(self, leases: RemoteLeases) -> None:
        self.leases = leases

    def memory_total(self) -> dict[int, int]:
        return {int(i): int(m) for i, m in self.leases._pairs("memory_total") if isinstance(m, int)}

    def ensure_mps(self) -> str | None:
        try:
            why = self.leases._call({"op": "ensure_mps"}).get("ensure_mps")
        except ExecutorError as e:
            return str(e)
        return why if isinstance(why, str) else None


class RemoteLeases:
    """The lease directory of one SSH host, through a lease server there. Thread-safe."""

    def __init__(self, link: HostLink, path: str | None = None) -> None:
        self.link = link
        self.path = path or DEFAULT_DIR
        self._lock = threading.Lock()
        self._chan: Any = None
        self._conn: Any = None
        self._reader: Any = None
        #: The server's hand-off socket (abstract Unix socket name on the host).
        self.socket: str | None = None
        #: Indices the server holds for this controller (not yet handed to a replica).
        self._held: set[int] = set()
        #: Shares of a GPU the server holds for this controller (not yet handed to a replica).
        self._shares: list[RemoteShare] = []
        self._keys = itertools.count()

    # ------------------------------------------------------------------ the server

    def _start(self) -> None:
        from vcli.executors.ssh.remote import install_tools

        tools = install_tools(self.link)
        conn, chan = self.link.open_session()
        try:
            chan.settimeout(REPLY_TIMEOUT)
            chan.exec_command(qargv([self.link.host.python, "-S", tools.leaseserver, "serve", self.path, tools.gpulease,
                                     tools.gpuinfo, tools.leasefiles]))
            reader = chan.makefile("rb")
            for _ in range(200):  # skip what the login shell's rc files print
                line = reader.readline()
                if not line:
                    err = chan.recv_stderr(4096).decode("utf-8", "replace").strip() if chan.recv_stderr_ready() else ""
                    raise ExecutorError(f"the lease server exited{': ' + err if err else ''}")
                text = line.decode("utf-8", "replace").strip()
                if text.startswith(HANDSHAKE + " "):
                    hello = json.loads(text[len(HANDSHAKE) + 1:])
                    break
            else:
                raise ExecutorError("no handshake from the lease server")
        except Exception:
            chan.close()
            conn.channels = max(0, conn.channels - 1)
            raise
        self._conn, self._chan, self._reader, self.socket = conn, chan, reader, str(hello["socket"])

    def _call(self, req: Mapping[str, Any], *, start: bool = True) -> dict[str, Any]:
        """One request and its answer. Raises ExecutorError (the server is then given up; the
        leases it held end with it). `start=False`: no server is started for this request."""
        with self._lock:
            try:
                if self._chan is None or self._chan.closed:
                    self._drop()  # whatever a lost server held ended with it
                    if not start:
                        return {"ok": True}
                    self._start()
                self._chan.sendall(json.dumps(dict(req)).encode() + b"\n")
                line = self._reader.readline()
                if not line:
                    raise ExecutorError("the lease server closed its channel")
                reply = json.loads(line)
            except ExecutorError as e:
                self._drop()
                raise ExecutorError(f"Host {self.link.host.name}: GPU leases in {self.path}: {e}") from None
            except Exception as e:  # a broken channel, a timeout, garbage
                self._drop()
                raise ExecutorError(f"Host {self.link.host.name}: GPU leases in {self.path}: "
                                    f"{e or type(e).__name__}") from None
            if not isinstance(reply, dict):
                raise ExecutorError(f"Host {self.link.host.name}: the lease server answered {reply!r}")
            return reply

    def _drop(self) -> None:
        if self._chan is not None:
            try:
                self._chan.close()
            except Exception:
                pass
            if self._conn is not None:
                self._conn.channels = max(0, self._conn.channels - 1)
        self._conn = self._chan = self._reader = self.socket = None
        self._held.clear()
        self._shares.clear()

    def close(self) -> None:
        """Stop the server: leases not handed to a replica end."""
        with self._lock:
            self._drop()

    # ------------------------------------------------------------------ LeaseDir's interface

    def acquire(self, indices: Iterable[int], record: Mapping[str, Any], *, share: float | None = None) -> list[Any]:
        """Lease every index or none (with `share`: a share of one GPU, a `RemoteShare`); raises
        `LeaseBusy` (also when the host cannot be asked)."""
        wanted = sorted(set(int(i) for i in indices))
        try:
            reply = self._call({"op": "acquire", "indices": wanted, "record": dict(record),
                                **({"share": share} if share else {})})
        except ExecutorError as e:
            raise LeaseBusy(wanted[0] if wanted else -1, {"unavailable": str(e)}) from None
        if "busy" in reply:
            holder = reply.get("holder")
            raise LeaseBusy(int(reply["busy"]), holder if isinstance(holder, dict) else {})
        if not reply.get("ok"):
            raise LeaseBusy(wanted[0] if wanted else -1, {"unavailable": str(reply.get("error") or reply)})
        if share:
            got = [RemoteShare(wanted[0], str(key), dict(record)) for key in reply.get("keys") or []]
            with self._lock:
                self._shares.extend(got)
            return got
        with self._lock:
            self._held.update(wanted)
        return wanted

    def held_share(self, index: int, **owner: Any) -> RemoteShare | None:
        """The share of GPU `index` the server holds for this controller whose record says `owner`."""
        with self._lock:
            return next((s for s in self._shares if s.index == int(index)
                         and all(s.record.get(k) == v for k, v in owner.items())), None)

    def release_share(self, share: RemoteShare, *, handed: bool = False) -> None:
        """Give a share back (`handed`: a replica's wrapper took it; the server holds it no more)."""
        with self._lock:
            if share not in self._shares:
                return
            self._shares.remove(share)
        if not handed:
            try:
                self._call({"op": "release_share", "key": share.key}, start=False)
            except ExecutorError:
                pass

    def replica_keys(self, launch: Any, host_name: str) -> list[int | str]:
        """What a placed replica's wrapper takes over from the server: its GPU indices, or its
        share's key; those the placer did not take (a resumed job's replica that never started)
        are taken now. One another replica holds is an ExecutorError."""
        indices = [int(i) for i in launch.placement.gpu_indices]
        owner = {"job": launch.job_id, "replica": launch.task_name}
        share = launch.placement.gpu_share
        held = [self.held_share(i, **owner) for i in indices] if share else []
        missing = [i for n, i in enumerate(indices) if (held[n] is None if share else self.held_here(i) is None)]
        try:
            taken = self.acquire(missing, {**base_record(trial=launch.trial_id, **owner)}, share=share) if missing else []
        except LeaseBusy as e:
            raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host_name}: {e}.") from None
        if share:
            return [s.key for s in [*(h for h in held if h is not None), *taken]]
        return list(indices)

    def held_here(self, index: int) -> bool | None:
        """True while the server holds `index` for this controller (None otherwise)."""
        with self._lock:
            return True if int(index) in self._held else None

    def handed_over(self, keys: Iterable[int | str]) -> None:
        """A replica's wrapper took these leases (indices, or shares' keys): the server no
        longer holds them."""
        keys = list(keys)
        with self._lock:
            self._held.difference_update(int(k) for k in keys if isinstance(k, int))
            self._shares = [s for s in self._shares if s.key not in keys]

    def info(self) -> _RemoteInfo:
        """The host's `vcli.placement.gpuinfo`, asked through the server (what shares need)."""
        return _RemoteInfo(self)

    def release(self, indices: Iterable[int]) -> None:
        """Give back what the server still holds of `indices` (idempotent, never raises)."""
        with self._lock:
            mine = sorted(set(int(i) for i in indices) & self._held)
            self._held.difference_update(mine)
        if mine:
            try:
                self._call({"op": "release", "indices": mine}, start=False)
            except ExecutorError:
                pass  # a lost server held nothing any more

    def probe(self, indices: Iterable[int], *, strict: bool = False) -> dict[int, dict[str, Any] | None]:
        """index -> holder record while leased (by anyone), None while free or unknown (the
        host cannot be asked: `acquire` then says why). `strict`: raise ExecutorError instead."""
        wanted = [int(i) for i in indices]
        out: dict[int, dict[str, Any] | None] = {i: None for i in wanted}
        if not wanted:
            return out
        try:
            reply = self._call({"op": "probe", "indices": wanted})
        except ExecutorError:
            if strict:
                raise
            return out
        for pair in reply.get("held") or []:
            if isinstance(pair, list) and len(pair) == 2 and int(pair[0]) in out:
                out[int(pair[0])] = pair[1] if isinstance(pair[1], dict) else None
        return out

    def nvidia_busy(self) -> dict[int, str]:
        """GPUs of the host that a process vcli did not start uses (the host's nvidia-smi);
        {} when the host has none or cannot be asked (`acquire` then says why)."""
        try:
            reply = self._call({"op": "busy"})
        except ExecutorError:
            return {}
        out: dict[int, str] = {}
        for pair in reply.get("busy") or []:
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str):
                out[int(pair[0])] = pair[1]
        return out

    def gpu_processes(self) -> dict[int, list[dict[str, Any]]]:
        """Who holds GPU memory on the host (its nvidia-smi); {} when it cannot be asked."""
        return {int(i): [p for p in procs if isinstance(p, dict)]
                for i, procs in self._pairs("processes") if isinstance(procs, list)}

    def utilization(self) -> dict[int, float]:
        """The host's GPUs' utilisation in percent (its nvidia-smi); {} when it cannot be asked."""
        return {int(i): float(pct) for i, pct in self._pairs("utilization") if isinstance(pct, (int, float))}

    def holders(self) -> list[dict[str, Any]]:
        """Every lease held on the host (`LeaseDir.holders`); [] when it cannot be asked."""
        try:
            reply = self._call({"op": "holders"})
        except ExecutorError:
            return []
        return [r for r in reply.get("holders") or [] if isinstance(r, dict)]

    def policy(self) -> dict[str, Any]:
        """The host's lease policy file (`gpuinfo.read_policy` there); an unreachable host's
        is an `error`, never "no policy"."""
        try:
            reply = self._call({"op": "policy"})
        except ExecutorError as e:
            return {"path": f"{self.link.host.name}:{self.path}", "error": f"cannot be read: {e}"}
        policy = reply.get("policy")
        return policy if isinstance(policy, dict) else {}

    def write_policy(self, text: str) -> dict[str, Any]:
        """Write the host's lease policy file there, as its login user (`gpuinfo.write_policy`)."""
        try:
            done = self._call({"op": "write_policy", "text": text}).get("done")
        except ExecutorError as e:
            return {"path": f"{self.link.host.name}:{self.path}", "error": str(e)}
        return done if isinstance(done, dict) else {"error": f"the lease server answered {done!r}"}

    def _pairs(self, op: str) -> list[tuple[Any, Any]]:
        try:
            reply = self._call({"op": op})
        except ExecutorError:
            return []
        return [(p[0], p[1]) for p in reply.get(op) or [] if isinstance(p, list) and len(p) == 2]

    def waiters(self) -> list[dict[str, Any]]:
        try:
            reply = self._call({"op": "waiters"})
        except ExecutorError:
            return []
        return [w for w in reply.get("waiters") or [] if isinstance(w, dict)]

    def queue(self, record: Mapping[str, Any]) -> _Entry:
        """Enter `record` in the host's waiting queue until the entry is closed (best effort)."""
        key = f"w{next(self._keys)}"
        entry = _Entry(self, key, dict(record))
        entry.touch()
        return entry


class _Entry:
    def __init__(self, leases: RemoteLeases, key: str, record: dict[str, Any]) -> None:
        self.leases, self.key, self.record = leases, key, record

    def touch(self) -> None:
        """Enter the queue, or mark another try (`vcli.placement.gpulease.Waiting.touch`)."""
        try:
            self.leases._call({"op": "queue", "key": self.key, "record": self.record})
        except ExecutorError:
            pass

    def close(self) -> None:
        try:
            self.leases._call({"op": "unqueue", "key": self.key}, start=False)
        except ExecutorError:
            pass


def lease_dir_of(host: Any) -> str:
    """The host's lease directory (inventory `gpu_lease_dir`, else the default)."""
    return getattr(host, "gpu_lease_dir", None) or DEFAULT_DIR

