"""`vcli mcp` (vcli extension): serve vcli over the Model Context Protocol (`vcli.agents`)."""

from __future__ import annotations

from vcli.cli.support import command


@command("mcp")
def mcp() -> None:
    """vcli: serve vcli to an agent (Claude Code, Cursor, ...) over the Model Context Protocol
    on stdin/stdout: tools to list, create, describe and cancel custom jobs and studies, read
    their logs and best trials, and see who holds the GPUs. An MCP client starts it; it runs
    until the client closes its stdin. Needs `pip install 'vcli[mcp]'`."""
    from vcli.errors import MissingExtraError

    try:
        import mcp.server.mcpserver  # noqa: F401  (2.x: MCPServer)
    except ImportError:
        raise MissingExtraError("vcli mcp", "mcp", "the MCP Python SDK (2.x)") from None
    from vcli.agents.server import serve

    serve()
