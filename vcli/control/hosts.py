"""What `vcli hosts` asks of SSH hosts, for the CLI (which imports no executor): verifying a
host's key before it goes into the inventory, and probing hosts (`vcli hosts check`). The SSH
work itself is the ssh executor's (`vcli.executors.ssh`), imported when a command connects."""

from __future__ import annotations

from typing import Any, Sequence

from vcli.placement.hosts import Host

__all__ = ["check_hosts", "is_host_key_error", "verify_host_key"]


def verify_host_key(host: Host, *, accept_new: bool, accept_hint: str | None = None) -> tuple[str, str, bool] | None:
    """Check `host`'s SSH key against the known_hosts files by connecting once.

    `accept_new`: record the key in vcli's known_hosts if it is not known yet (never replaces a
    changed one) and return (key type, fingerprint, newly recorded); else return None.
    Raises ExecutorError: a host-key problem (`is_host_key_error`: an unknown key, whose message
    ends with `accept_hint` when given, or a changed one; nothing was sent to the host), or the
    host could not be reached now.
    """
    from vcli.executors.ssh import UnknownHostKeyError, accept_host_key, connect

    try:
        if accept_new:
            return accept_host_key(host)
        client, _ = connect(host)
        client.close()
        return None
    except UnknownHostKeyError as e:
        if accept_hint is None:
            raise
        raise UnknownHostKeyError(e.host, e.key_type, e.fingerprint, accept_hint=accept_hint) from None


def is_host_key_error(e: BaseException) -> bool:
    """Whether `e` (from `verify_host_key`) is about the host's key rather than reaching it."""
    from vcli.executors.ssh import HostKeyError

    return isinstance(e, HostKeyError)


def check_hosts(hosts: Sequence[Host], *, reachability: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    """`vcli hosts check`: per-host facts and problem lines (see `vcli.executors.ssh.check_hosts`)."""
    from vcli.executors.ssh import check_hosts as probe

    return probe(hosts, reachability=reachability)



