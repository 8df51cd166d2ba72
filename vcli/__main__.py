"""`python -m vcli`."""

from vcli.cli import run

run()
