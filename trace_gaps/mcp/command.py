"""`trace-gaps mcp`: the commands as tools of an MCP server on stdio (server.py). Here, beside
the server, not in commands/: the server is built on the commands (their declared options),
so the command that starts it sits above them, as cli.py does."""

from __future__ import annotations

from trace_gaps.commands.output_options import QuietOpt


def mcp(quiet: QuietOpt = False) -> None:
    """Serve the analysis as MCP tools on stdio, for coding agents: an overview, then drill-downs.

    Needs pip install 'trace-gaps\\[mcp]'; see docs/mcp.md.
    """
    from trace_gaps.mcp.server import serve

    serve(quiet=quiet)
