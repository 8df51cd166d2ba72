"""`python -m vcli`, and the `vcli` script's entry point (`main`).

Ctrl-C while vcli's modules are still importing (the first tenth of a second of any command,
longer on a loaded machine) or before a command's own handler is in place is the documented
one line and exit 130, never a `KeyboardInterrupt` traceback or a death by SIGINT.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from vcli.cli import run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("ERROR: (vcli) Interrupted.\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
