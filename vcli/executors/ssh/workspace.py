"""vcli's helper on SSH hosts: a replica's private working directory and its Python environment,
made on the host by `vcli.packages` itself.

Shipped by `vcli.executors.ssh.code.install_workspace` to `<workdir>/bin/vcli-lib-<hash>/` with a
`vcli` package beside it that holds only `vcli.errors` and `vcli.packages` (both stdlib-only),
and run there by the host's python:

    python workspace.py populate CODE_DIR STORE WORKDIR...
        `packages.snapshot(CODE_DIR, STORE)` (a read-only copy per content, made once), then
        `packages.populate(snapshot, WORKDIR)` for every WORKDIR: what the process executor
        does with a local package, done with the package's synced copy on the host.
    python workspace.py env SPEC_JSON
        `packages.python_env` of SPEC {"home", "python", "packages", "requirements",
        "requirementFiles", "origin"} (host paths): `<home>/envs/<key>`, built once per content.
        Prints `VCLI-PROGRESS <line>` lines, then `VCLI-PYTHON <the environment's python>` and
        `VCLI-PATH <this session's PATH>` (what a replica's PATH starts from).

A failure prints `VCLI-ERROR <one line>` and exits with status 1.
"""

from __future__ import annotations

import json
import os
import sys
import threading


def _populate(code_dir: str, store: str, workdirs: list[str]) -> None:
    from vcli import packages

    snapshot = packages.snapshot(code_dir, store)
    for workdir in workdirs:
        packages.populate(snapshot, workdir)


def _env(spec: dict) -> None:  # type: ignore[type-arg]
    from vcli import packages

    installs = packages.Installs(
        requirements=tuple(spec.get("requirements") or ()),
        requirement_files=tuple(spec.get("requirementFiles") or ()),
        packages=tuple(spec.get("packages") or ()),
        origin=spec.get("origin"),
    )
    python = packages.python_env(installs, python=spec["python"], home=spec["home"],
                                 progress=lambda line: print(f"VCLI-PROGRESS {line}", flush=True),
                                 cancelled=threading.Event())
    print(f"VCLI-PYTHON {python}", flush=True)
    print(f"VCLI-PATH {os.environ.get('PATH', '')}", flush=True)


def main(argv: list[str]) -> int:
    from vcli.errors import ExecutorError

    try:
        if len(argv) >= 3 and argv[0] == "populate":
            _populate(argv[1], argv[2], argv[3:])
        elif len(argv) == 2 and argv[0] == "env":
            _env(json.loads(argv[1]))
        else:
            print(f"VCLI-ERROR usage: workspace.py populate|env ... (got {argv!r})", flush=True)
            return 2
    except ExecutorError as e:
        print(f"VCLI-ERROR {' '.join(str(e).split())}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
