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

        try:
            run()
        finally:
            _concluded()
    except KeyboardInterrupt:
        sys.stderr.write("ERROR: (vcli) Interrupted.\n")
        raise SystemExit(130) from None
    except OSError as e:  # help or usage text to a closed pipe or a full disk: never a traceback
        import errno
        import os

        from vcli.cli.support import OUTPUT_ERRNOS

        if e.errno != errno.EPIPE and e.errno not in OUTPUT_ERRNOS:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush stays quiet
        if e.errno == errno.EPIPE:
            raise SystemExit(128 + 13) from None
        sys.stderr.write(f"ERROR: (vcli) cannot write the output: {e.strerror}.\n")
        raise SystemExit(1) from None


def _concluded() -> None:
    """The command has concluded (what it started is stopped, its exit code chosen): signals from
    here on are ignored. Python's finalization puts SIG_DFL back on the handlers vcli installed,
    so the rest of a burst of Ctrl-Cs killed vcli by SIGINT (exit -2 instead of 130) after it
    had cleaned up; an ignored signal keeps being ignored."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass


if __name__ == "__main__":
    main()
