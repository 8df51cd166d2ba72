"""`vcli slurm check`: whether --executor=slurm can run here (see `vcli.executors.slurm.check`).

Mounted by `vcli.cli` as `vcli slurm`; reaches the executor through `vcli.control.wiring`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup
from vcli.cli.support import command

slurm_app = typer.Typer(cls=GcloudGroup, help="The Slurm cluster of --executor=slurm.", no_args_is_help=True)


@slurm_app.command("check", cls=GcloudCommand)
@command("slurm.check")
def slurm_check(
    fmt: Annotated[Optional[str], typer.Option("--format", help="gcloud's --format (default yaml).")] = None,
) -> None:
    """Whether sinfo, squeue, scontrol, sbatch, srun, scancel and sacct work from here, the
    partitions, every node's CPUs, memory and GPUs, and whether the nodes see the shared
    directory (`slurm/shared-dir`) at the same path. Exit code 3 when jobs cannot run."""
    from vcli.cli.output import emit
    from vcli.control.wiring import slurm_check_report
    from vcli.errors import ExitCode

    found = slurm_check_report()
    emit(found, fmt, is_list=False)
    if not found["ok"]:
        raise typer.Exit(int(ExitCode.EXECUTOR_UNAVAILABLE))
