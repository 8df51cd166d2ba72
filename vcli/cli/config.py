"""`vcli config set | get | unset | list`: vcli's properties (see `vcli.properties`), as `gcloud config`."""

from __future__ import annotations

from typing import Annotated

import typer

from vcli.cli.complete import property_names
from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup
from vcli.cli.support import command, err

app = typer.Typer(cls=GcloudGroup, help="View and set vcli properties (like `gcloud config`).", no_args_is_help=True)

#: Every property of `vcli.properties.KNOWN`, spelled out so that `--help` imports no data model
#: (tests/test_config.py fails when they differ).
PROPERTY_NAMES = ("executor, hosts, python, ray/address, storage/gcs-root, gpu/lease-dir, gpu/exclude-busy, "
                  "slurm/partition, slurm/account, slurm/qos, slurm/shared-dir, tracking/uri, tuning/suggestion-wait")

Property = Annotated[str, typer.Argument(help=f"One of: {PROPERTY_NAMES}.", autocompletion=property_names)]


@app.command("set", cls=GcloudCommand)
@command("config.set")
def config_set(prop: Property, value: Annotated[str, typer.Argument()]) -> None:
    """Set a property (see `vcli config list`; the properties are listed under PROP)."""
    from vcli import properties

    properties.set_(prop, value)
    err(f"Updated property [{prop}].")


@app.command("get", cls=GcloudCommand)
@command("config.get")
def config_get(prop: Property) -> None:
    """Print a property's value."""
    from vcli import properties

    value = properties.get(prop, check=True)
    if value is None:
        err("(unset)")
    else:
        print(value)


@app.command("unset", cls=GcloudCommand)
@command("config.unset")
def config_unset(prop: Property) -> None:
    """Remove a property (its default applies again)."""
    from vcli import properties

    properties.unset(prop)
    err(f"Unset property [{prop}].")


@app.command("list", cls=GcloudCommand)
@command("config.list")
def config_list() -> None:
    """Print every property that is set."""
    from vcli import properties

    for k, v in sorted(properties.load().items()):
        print(f"{k} = {v}")
