"""The host inventory's files: where `hosts.yaml` and the known_hosts files are, reading
`hosts.yaml` as written, writing it atomically, and its lock. Standard library + PyYAML.

Nothing here knows a host's settings: `vcli.placement.hosts` turns the entries into `Host`s
(and re-exports what is public here, so callers import that module alone). Removing entries
is done here, on the file as written, so that an entry which breaks the rules can be removed.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from vcli.errors import ConfigError, NotFoundError

__all__ = [
    "KnownHosts",
    "hosts_file",
    "inventory_lock",
    "known_hosts",
    "known_hosts_file",
    "read_hosts",
    "remove_hosts",
    "user_known_hosts_file",
    "write_hosts",
]


def hosts_file() -> Path:
    """The inventory file: $VCLI_HOSTS_FILE, else `<config dir>/hosts.yaml`."""
    env = os.environ.get("VCLI_HOSTS_FILE")
    if env:
        return Path(env).expanduser()
    from vcli.properties import config_dir

    return config_dir() / "hosts.yaml"


@dataclass(frozen=True)
class KnownHosts:
    """The known_hosts files host keys are checked against.

    `user` is OpenSSH's file (read only); `vcli` is vcli's own, read too, and the only file
    keys accepted with `vcli hosts add --accept-new-host-key` are appended to.
    """

    user: Path
    vcli: Path

    @property
    def files(self) -> tuple[Path, Path]:
        """Every file to read, in the order keys are looked up."""
        return (self.user, self.vcli)


def known_hosts() -> KnownHosts:
    """This user's known_hosts files (see `user_known_hosts_file` and `known_hosts_file`)."""
    return KnownHosts(user=user_known_hosts_file(), vcli=known_hosts_file())


def known_hosts_file() -> Path:
    """vcli's own known_hosts (keys accepted with `vcli hosts add --accept-new-host-key`)."""
    from vcli.properties import config_dir

    return config_dir() / "known_hosts"


def user_known_hosts_file() -> Path:
    """The user's OpenSSH known_hosts (read only): $VCLI_SSH_USER_KNOWN_HOSTS, else ~/.ssh/known_hosts."""
    env = os.environ.get("VCLI_SSH_USER_KNOWN_HOSTS")
    if env:
        return Path(env).expanduser()
    return Path("~/.ssh/known_hosts").expanduser()


def _read_text(path: Path, *, reword: bool) -> str | None:
    """The text of the inventory file at `path`, None when there is no such file.

    A file that cannot be opened or read (a directory, no permission) is one ConfigError line
    naming it. One larger than a document may be, or not UTF-8, is `read_text`'s ConfigError
    (`Invalid value for [inventory]: ...`), or with `reword` the same problem said of "The host
    inventory" (what `load_inventory` reports; `remove_hosts` reports read_text's own line)."""
    from vcli.codec.yamlio import read_text

    try:
        with open(path, "rb") as f:
            return read_text(f, str(path), "inventory")
    except FileNotFoundError:
        return None
    except ConfigError as e:  # larger than a document can be, or not UTF-8
        if not reword:
            raise
        raise ConfigError(f"The host inventory {str(e).split(']: ', 1)[-1]}") from None
    except OSError as e:  # a directory, no permission, ...
        raise ConfigError(f"The host inventory {path} cannot be read: {e.strerror}.") from None


def read_hosts(path: Path, *, reword: bool = False) -> Mapping[Any, Any]:
    """The inventory's `hosts:` mapping as written, keys as YAML read them (an absent or empty
    file: an empty mapping). Not validated: each entry is whatever the file holds.

    Raises ConfigError, one line: the file cannot be read (see `_read_text` for `reword`), is
    not YAML (aliases and duplicate keys are checked as in --config documents), is not a
    mapping whose `hosts` is a mapping, or holds a top-level key other than `hosts`."""
    from vcli.codec.yamlio import parse_yaml

    text = _read_text(path, reword=reword)
    if text is None:
        return {}
    data = parse_yaml(text, str(path), prefix="The host inventory ") or {}
    if not isinstance(data, Mapping) or not isinstance(data.get("hosts", {}), Mapping):
        raise ConfigError(f"{path}: expected `hosts:` mapping host names to settings")
    if unknown := sorted(set(map(str, data)) - {"hosts"}):  # `hots:` emptied the inventory, silently
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; the file holds `hosts:` mapping host names "
                          "to settings")
    return data.get("hosts") or {}


def write_hosts(hosts: Mapping[str, Any], path: Path) -> None:
    """Write the inventory file (its `hosts` mapping as given), atomically."""
    import tempfile

    import yaml

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {"hosts": dict(hosts)}
    # A temporary file of its own: two writers shared `hosts.yaml.tmp`, and one renamed the
    # other's away (a traceback) or over its hosts.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# vcli host inventory: edit freely or use `vcli hosts add|remove`.\n")
            yaml.safe_dump(body, f, sort_keys=False, default_flow_style=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def inventory_lock(path: Path | None = None) -> Iterator[None]:
    """Hold the inventory's lock (a `flock` on `<file>.lock` beside it) for a read-modify-write:
    two `hosts add` at once (a provisioning loop, two terminals) each keep their host; without
    it 3 of 40 were lost, one reported added."""
    import fcntl

    path = path or hosts_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ConfigError(f"The host inventory {path} cannot be written: {e.strerror}.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_hosts(names: Sequence[str]) -> None:
    """Remove the inventory entries `names`, all or none (NotFoundError for the first that is
    not there). The file is edited as written, not validated: an entry that breaks the rules
    (a hand edit, an older vcli's) can be removed, and the others are kept as they are."""
    path = hosts_file()
    with inventory_lock(path):
        raw = {str(k): v for k, v in read_hosts(path).items()}
        missing = [n for n in names if n not in raw]
        if missing:
            raise NotFoundError(f"Host [{missing[0]}] is not in the inventory ({path}); nothing was removed. "
                                "List hosts with `vcli hosts list`.")
        for n in names:
            raw.pop(n, None)
        write_hosts(raw, path)
