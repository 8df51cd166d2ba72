"""The `vcli` command line: gcloud's `ai custom-jobs` / `ai hp-tuning-jobs` surface, run locally.

One thin module per command group (`custom_jobs`, `hp_tuning_jobs`, `config`, `hosts`), each
parsing flags, calling `vcli.control`, and printing through `output`. The CLI is the only
layer that exits the process. Errors are one line, `ERROR: (vcli.GROUP.COMMAND) ...`, on stderr
with a distinct exit code (see `vcli.errors.ExitCode`; `support.command` and, for choice
flags Click rejects itself, `choices.VcliGroup`); `--verbosity=debug` adds the traceback.
gcloud's wide flags (`--project`, `--quiet`, `--verbosity`, `--flags-file`, ...) are accepted
on every group and command, in gcloud's positions (`gcloud_flags`). Status messages go to
stderr, data to stdout.

Start-up matters (`vcli --help` runs in shells and completions): the groups import vcli's
modules inside their commands, and nothing here imports TensorFlow, Docker, paramiko or skopt.
Entry points: `run` (the `vcli` script, `python -m vcli`) and `app`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from vcli import __version__
from vcli.cli import complete, config, custom_jobs, dashboard, gpu, hosts, hp_tuning_jobs, slurm, support
from vcli.cli import mcp as mcp_server
from vcli.cli.gcloud_flags import GcloudCommand, RootGroup

app = typer.Typer(
    name="vcli",
    cls=RootGroup,
    help="Vertex AI training (custom-jobs, hp-tuning-jobs) on the machines you already have.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(custom_jobs.app, name="custom-jobs")
app.add_typer(hp_tuning_jobs.app, name="hp-tuning-jobs")
app.add_typer(config.app, name="config")
app.add_typer(hosts.hosts_app, name="hosts")
app.add_typer(slurm.slurm_app, name="slurm")
app.add_typer(gpu.gpu_app, name="gpu")
app.command("dashboard", cls=GcloudCommand)(dashboard.dashboard)
app.command("mcp", cls=GcloudCommand)(mcp_server.mcp)


def _version(value: bool) -> None:
    if value:
        print(f"vcli {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """gcloud's wide flags given here are taken by `gcloud_flags.RootGroup`."""


def run() -> None:
    """The `vcli` program (named `vcli` however it was started, so completion finds it)."""
    from typer.main import get_command

    support.whole_writes()
    command = get_command(app)
    complete.register_bash()  # after get_command, which registers typer's own bash completion
    command(prog_name="vcli")


if __name__ == "__main__":
    run()
