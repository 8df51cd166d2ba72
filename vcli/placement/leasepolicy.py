"""A host's lease policy: how many GPUs each Unix user may hold at once, how many trials of one
study may run on the host, and in which order waiters get freed GPUs.

The policy is a YAML file in the host's lease directory, `policy.yaml`, written by root or by
the owner of the lease directory (`vcli hosts policy --set`; `vcli.placement.gpuinfo.read_policy`
says which files are trusted). Every vcli process that leases GPUs there reads it (at most every
`RELOAD_SECONDS`) and enforces it on itself: the leases are cooperative, the limits are too.

    max_gpus_per_user: 4        # GPUs one Unix user may hold at once on this host
    users: {alice: 8}           # per-user exceptions to max_gpus_per_user
    max_trials_per_study: 2     # trials of one study that may hold GPUs here at once
    queue: fair-share           # or first-come (the default)
    idle: {below_percent: 5, window: 30m, action: stop}   # or action: warn
    gpu_sharing: mps            # or shared: how replicas with a share of a GPU share it

Limits are checked after the leases are taken (lock, then count), so two processes of one user
that take GPUs at the same instant never both pass a limit: the later one (by the time in its
lease record) gives its GPUs back and waits.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from vcli.errors import ExitCode, VcliError

__all__ = ["LeasePolicy", "LeasePolicyError", "QUEUE_ORDERS", "load", "over_limit", "parse", "policy_text"]

#: The queue orders: first come, first served, or the waiter whose user holds fewest GPUs first.
QUEUE_ORDERS = ("first-come", "fair-share")
#: The GPU sharing mechanisms `gpu_sharing` may name (`vcli.placement.sharing`).
GPU_SHARING = ("mps", "shared")
#: How long a process keeps a host's policy before reading the file again (seconds).
RELOAD_SECONDS = 2.0


class LeasePolicyError(VcliError):
    """A trusted policy file that says something vcli cannot follow: one line naming the key."""

    exit_code = ExitCode.INVALID


@dataclass(frozen=True)
class IdlePolicy:
    """A replica whose leased GPUs all stay below `below_percent` utilisation (nvidia-smi) for
    `window` seconds is warned about in its log and in `hosts gpus`, and with `action: stop`
    stopped, its job or trial failing with that reason (`vcli.placement.gpuinfo.watch` runs
    the trainer and watches)."""

    below_percent: float
    window: float
    action: str = "warn"

    def as_dict(self) -> dict[str, Any]:
        return {"below_percent": _plain(self.below_percent), "window": f"{self.window:g}s", "action": self.action}


@dataclass(frozen=True)
class LeasePolicy:
    """One host's lease policy; the default limits nothing and serves first come, first served."""

    path: str | None = None
    max_gpus_per_user: float | None = None
    users: Mapping[str, float] = field(default_factory=dict)
    max_trials_per_study: int | None = None
    queue: str = "first-come"
    idle: IdlePolicy | None = None
    #: How replicas given a share of one GPU share it (`vcli.placement.sharing`); None: refused.
    gpu_sharing: str | None = None

    def limit(self, user: str | None) -> float | None:
        """The most GPUs `user` may hold on the host at once (None: no limit)."""
        if user is not None and user in self.users:
            return self.users[user]
        return self.max_gpus_per_user

    @property
    def limits_anything(self) -> bool:  # the GPUs a user or a study holds
        return self.max_gpus_per_user is not None or bool(self.users) or self.max_trials_per_study is not None

    def as_dict(self) -> dict[str, Any]:
        """The policy as its file says it (keys left at their default are left out)."""
        out: dict[str, Any] = {}
        if self.max_gpus_per_user is not None:
            out["max_gpus_per_user"] = _plain(self.max_gpus_per_user)
        if self.users:
            out["users"] = {u: _plain(n) for u, n in sorted(self.users.items())}
        if self.max_trials_per_study is not None:
            out["max_trials_per_study"] = self.max_trials_per_study
        if self.queue != "first-come":
            out["queue"] = self.queue
        if self.idle is not None:
            out["idle"] = self.idle.as_dict()
        if self.gpu_sharing is not None:
            out["gpu_sharing"] = self.gpu_sharing
        return out

    def where(self) -> str:
        return f"lease policy {self.path}" if self.path else "lease policy"


def _plain(n: float) -> float | int:
    return int(n) if float(n).is_integer() else n


def _gpus(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise LeasePolicyError(f"{key}: expected a number of GPUs >= 0, got {value!r}")
    return float(value)


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LeasePolicyError(f"{key}: expected a whole number >= 1, got {value!r}")
    return value


def _users(key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise LeasePolicyError(f"{key}: expected a mapping of user name to GPUs, got {value!r}")
    return {str(u): _gpus(f"{key}.{u}", n) for u, n in value.items()}


def _queue(key: str, value: Any) -> str:
    if value not in QUEUE_ORDERS:
        raise LeasePolicyError(f"{key}: expected one of {', '.join(QUEUE_ORDERS)}, got {value!r}")
    return str(value)


def _idle(key: str, value: Any) -> IdlePolicy:
    from vcli.codec.flags import parse_duration

    if not isinstance(value, dict):
        raise LeasePolicyError(f"{key}: expected a mapping of below_percent, window, action, got {value!r}")
    unknown = sorted(str(k) for k in value if k not in ("below_percent", "window", "action"))
    if unknown:
        raise LeasePolicyError(f"{key}.{unknown[0]}: unknown key (the keys are below_percent, window, action)")
    pct = value.get("below_percent")
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 100:
        raise LeasePolicyError(f"{key}.below_percent: expected a percentage in (0, 100], got {pct!r}")
    window = value.get("window")
    try:
        seconds = float(window) if isinstance(window, (int, float)) and not isinstance(window, bool) else \
            parse_duration(str(window), f"{key}.window")
    except VcliError:
        seconds = -1.0
    if not 0 < seconds < math.inf:
        raise LeasePolicyError(f"{key}.window: expected a duration such as 30m or 600s, got {window!r}")
    action = value.get("action", "warn")
    if action not in ("warn", "stop"):
        raise LeasePolicyError(f"{key}.action: expected warn or stop, got {action!r}")
    return IdlePolicy(float(pct), seconds, str(action))


def _sharing(key: str, value: Any) -> str:
    if value not in GPU_SHARING:
        raise LeasePolicyError(f"{key}: expected one of {', '.join(GPU_SHARING)}, got {value!r}")
    return str(value)


#: key -> how its value is read (raising LeasePolicyError naming the key).
KEYS: dict[str, Callable[[str, Any], Any]] = {
    "max_gpus_per_user": _gpus,
    "users": _users,
    "max_trials_per_study": _count,
    "queue": _queue,
    "idle": _idle,
    "gpu_sharing": _sharing,
}


def parse(text: str, path: str | None = None) -> LeasePolicy:
    """The policy a file's `text` states; `LeasePolicyError` (one line, naming the file and the
    key) for anything else, unknown keys included."""
    import yaml

    where = path or "the lease policy"
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise LeasePolicyError(f"{where}: not valid YAML{line}: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise LeasePolicyError(f"{where}: expected a mapping of {', '.join(KEYS)}, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in KEYS)
    if unknown:
        raise LeasePolicyError(f"{where}: unknown key {unknown[0]!r} (the keys are {', '.join(KEYS)})")
    try:
        return LeasePolicy(path=path, **{k: KEYS[k](k, v) for k, v in data.items()})
    except LeasePolicyError as e:
        raise LeasePolicyError(f"{where}: {e}") from None


def policy_text(policy: Mapping[str, Any]) -> str:
    """The YAML of a policy file holding `policy` (`LeasePolicy.as_dict`)."""
    import yaml

    return yaml.safe_dump(dict(policy), sort_keys=False, default_flow_style=False) if policy else "{}\n"


_CACHE: dict[int, tuple[float, LeasePolicy]] = {}
_WARNED: set[tuple[str, str]] = set()


def load(leases: Any, *, fresh: bool = False) -> LeasePolicy:
    """The policy of the host whose lease directory is `leases` (a `LeaseDir` or an SSH host's
    `RemoteLeases`), read again at most every `RELOAD_SECONDS` unless `fresh`. A file that is not
    to be trusted is one warning (once per process) and limits nothing; a trusted file that says
    something wrong raises `LeasePolicyError`."""
    now = time.monotonic()
    cached = _CACHE.get(id(leases))
    if cached is not None and not fresh and now - cached[0] < RELOAD_SECONDS:
        return cached[1]
    raw = leases.policy()
    if raw.get("error"):
        key = (str(raw.get("path")), str(raw["error"]))
        if key not in _WARNED:
            _WARNED.add(key)
            print(f"WARNING: the lease policy {raw.get('path')} is ignored: {raw['error']}.", file=sys.stderr)
        policy = LeasePolicy()
    else:
        policy = parse(str(raw.get("text") or ""), raw.get("path")) if raw else LeasePolicy()
    _CACHE[id(leases)] = (now, policy)
    return policy


def never_fits(policy: LeasePolicy, user: str | None, count: float, host: str) -> str | None:
    """Why a request for `count` GPUs of one host by `user` can never be granted there."""
    limit = policy.limit(user)
    if limit is not None and count > limit:
        return (f"{user} may hold at most {_plain(limit)} GPU{'' if limit == 1 else 's'} at once on host {host} "
                f"({policy.where()}), and this asks for {_plain(count)}")
    return None


def over_limit(policy: LeasePolicy, holders: Sequence[Mapping[str, Any]], mine: Mapping[str, Any],
               gpus: Sequence[int]) -> str | None:
    """Why the leases of `gpus` just taken with record `mine` (which carries a `ticket` unique to
    this request) must be given back, or None: a limit of `policy` is passed counting them and
    every lease taken before them (`holders`, as `LeaseDir.holders` lists them now). Who "the
    user" is comes from the host: the owner of the directory the new leases are in (on an SSH
    host, the login user there)."""
    if not policy.limits_anything:
        return None
    own = {int(i) for i in gpus}

    def is_mine(h: Mapping[str, Any]) -> bool:
        return h.get("gpu") in own and h.get("ticket") == mine.get("ticket")

    ours = [h for h in holders if is_mine(h)]
    if not ours:  # they are not held any more (a host that cannot be asked): nothing to count
        return None
    uid, user = ours[0].get("uid"), ours[0].get("user")
    # Lock, then count: each holder's `since` is stamped after its locks, so of two takers that
    # race, the later one always counts the earlier (an unwritten record counts too).
    stamp = max(_num(h.get("since")) for h in ours)
    earlier = [h for h in holders if not is_mine(h) and _num(h.get("since")) <= stamp]
    limit = policy.limit(user)
    if limit is not None:
        held = sum(_share(h) for h in earlier if h.get("uid") == uid)
        if held + sum(_share(h) for h in ours) > limit + 1e-9:
            return f"{user} holds {_plain(round(held, 3))} of at most {_plain(limit)} GPUs per user ({policy.where()})"
    return _over_study_limit(policy, earlier, mine)


def _over_study_limit(policy: LeasePolicy, earlier: Sequence[Mapping[str, Any]], mine: Mapping[str, Any]) -> str | None:
    study, trial = mine.get("study"), mine.get("trial")
    if policy.max_trials_per_study is None or not (study and trial):
        return None
    # A record read while its holder rewrites it (empty, no `since`) may be this study's: it counts.
    trials = {h.get("trial") or f"unknown-{n}" for n, h in enumerate(earlier)
              if (h.get("study") == study and h.get("trial") != trial) or "since" not in h}
    if len(trials) + 1 <= policy.max_trials_per_study:
        return None
    return (f"study {study} runs {len(trials)} of at most {policy.max_trials_per_study} trials per study "
            f"on this host ({policy.where()})")


def held_by_user(holders: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """User -> how many GPUs of the host the user's leases hold now (shares count as such)."""
    out: dict[str, float] = {}
    for h in holders:
        user = str(h.get("user") or "?")
        out[user] = _plain(round(out.get(user, 0) + _share(h), 6))
    return out


def _share(holder: Mapping[str, Any]) -> float:
    share = holder.get("share")
    return float(share) if isinstance(share, (int, float)) and 0 < share < 1 else 1.0


def at_limit(policy: LeasePolicy, user: str | None, held: Mapping[str, float]) -> bool:
    """`user` holds all the GPUs the policy lets them hold (a waiter that cannot take more)."""
    limit = policy.limit(user)
    return limit is not None and held.get(str(user), 0) >= limit


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def set_keys(current: Mapping[str, Any], assignments: Sequence[str], removals: Sequence[str]) -> dict[str, Any]:
    """`current` (a policy's `as_dict`) with `KEY=VALUE` assignments (VALUE read as YAML;
    `users.NAME=N` for one user's limit, `idle.window=30m` for one key of a mapping) and `KEY`
    removals applied, checked by `parse`."""
    import yaml

    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in current.items()}
    for item in assignments:
        key, eq, text = item.partition("=")
        if not eq or not key:
            raise LeasePolicyError(f"--set: expected KEY=VALUE, got {item!r}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        top, dot, sub = key.partition(".")
        if dot:
            before = out.get(top)
            out[top] = {**(before if isinstance(before, dict) else {}), sub: value}
        else:
            out[key] = value
    for key in removals:
        top, dot, sub = key.partition(".")
        if dot and isinstance(out.get(top), dict):
            out[top].pop(sub, None)
            if not out[top]:
                out.pop(top)
        elif not dot:
            out.pop(key, None)
    return parse(policy_text(out), "--set").as_dict()


def write(leases: Any, policy: Mapping[str, Any]) -> str:
    """Write `policy` as the policy file of the host whose lease directory is `leases` (a
    `LeaseDir`, or an SSH host's `RemoteLeases`: written there by its lease server), atomically;
    only root or the directory's owner may. Returns the file's path; `LeasePolicyError` says
    why it cannot be written."""
    done = leases.write_policy(policy_text(policy))
    _CACHE.clear()
    if done.get("error"):
        raise LeasePolicyError(f"cannot set the lease policy: {done['error']}")
    return str(done.get("path"))
