"""vcli for agents: `vcli mcp` serves vcli's jobs and studies over the Model Context Protocol.

`jobs` is what the tools do, in plain Python (no MCP): each returns a JSON-able dict or raises
a `VcliError` carrying vcli's one-line message. `server` wires them into an MCP server (the
`mcp` extra) on stdin/stdout; only `vcli mcp` imports it.
"""
