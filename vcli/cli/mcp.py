"""`vcli mcp` (vcli extension): serve vcli over the Model Context Protocol (`vcli.agents`)."""

from __future__ import annotations

import typer

from vcli.cli.support import command


@command("mcp")
def mcp(
    allow_write: bool = typer.Option(False, "--allow-write", help="Also serve the tools that create and cancel jobs "
                                     "and studies (without it the server only reads, and `create_*` tools only "
                                     "validate)."),
) -> None:
    """vcli: serve vcli to an agent (Claude Code, Cursor, ...) over the Model Context Protocol
    on stdin/stdout: tools to list and describe custom jobs and studies, validate configs, read
    their logs and best trials, and see who holds the GPUs; with `--allow-write`, to create and
    cancel them too. An MCP client starts it; it runs until the client closes its stdin. Needs
    `pip install 'vcli[mcp]'`."""
    from vcli.errors import MissingExtraError

    try:
        import mcp.server.mcpserver  # noqa: F401  (2.x: MCPServer)
    except ImportError:
        raise MissingExtraError("vcli mcp", "mcp", "the MCP Python SDK (2.x)") from None
    from vcli.agents.server import serve

    serve(allow_write=allow_write)
