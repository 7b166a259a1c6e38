"""`trace-gaps mcp`: the commands as tools of a Model Context Protocol server, for agents.

    agent ─stdio─▶ server ─tool call─▶ `python -P -m trace_gaps <command> -f json` ─▶ its JSON
                         ◀─ answer (answers.py: a bounded cut of it) ─┘

Each tool runs the command line in a child process (its JSON kept for the drill-downs that
follow, command_line.py) and answers a question from what it prints, so the tools cannot
disagree with the CLI, the server's memory stays bounded, and nothing is written anywhere (the
commands print to stdout; no -o is ever passed). The tools (tools.py) take the commands' own
options, from the declarations typer reads too (parameters.py). A command's user error
becomes the tool's error, in one line; so does an argument a tool does not take.

Needs the optional extra: pip install 'trace-gaps[mcp]'.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from trace_gaps import __version__
from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import end_if_stopping

INSTRUCTIONS = (
    "trace-gaps reads Nsight Systems SQLite exports (nsys export --type sqlite) of LLM decode "
    "loops and charges every ns of every step to an NVTX stage: GPU busy, waiting in a "
    "collective, or idle and why (launch, sync, queued, api, host). Start with `info` on an "
    "export, then `analyze` (the candidates are ranked; their verdicts say what to change); "
    "`diff` compares two runs with their noise. Pass absolute paths. `schema` gives the "
    "JSON Schema of analyze's and diff's results."
)


def build_server(*, quiet: bool = False) -> Any:
    """The MCP server: the overview, its drill-downs, info and diff as tools, each answer
    bounded (answers.py), and the JSON Schemas as resources. quiet: the SDK logs only errors
    on stderr (not each request and tool error)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent
    from pydantic import ValidationError

    from trace_gaps.mcp import answers
    from trace_gaps.mcp.command_line import ResultCache
    from trace_gaps.mcp.parameters import argument_error
    from trace_gaps.mcp.tools import TOOLS, CommandLines, Tool
    from trace_gaps.render.schema import SCHEMAS, json_schema

    class StrictServer(MCPServer):
        """Refuses an argument a tool does not take, or of the wrong type, in one line."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            tool = self._tool_manager.get_tool(name)
            if tool is not None:
                taken = tool.fn_metadata.arg_model.model_fields
                unknown = sorted(set(arguments) - set(taken))
                if unknown:
                    raise ToolError(
                        f"{name} takes no argument {', '.join(map(repr, unknown))}; "
                        f"it takes {', '.join(taken)}"
                    )
                try:
                    tool.fn_metadata.validate_arguments(arguments)
                except ValidationError as error:
                    raise ToolError(argument_error(name, error)) from None
            return await super().call_tool(name, arguments, context)

    server = StrictServer(
        "trace-gaps",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="ERROR" if quiet else "INFO",
    )
    commands = CommandLines(ResultCache())

    def add(declared: Tool) -> None:
        def tool(**given: Any) -> Any:
            """The answer once, as structured content, with a short text beside it."""
            try:
                answer, text = declared.body(commands, given)
            except answers.AnswerError as error:
                raise ToolError(str(error)) from None
            return CallToolResult(
                content=[TextContent(type="text", text=text)], structured_content=answer
            )

        tool.__name__ = declared.name
        tool.__doc__ = declared.doc
        tool.__signature__ = declared.signature()  # type: ignore[attr-defined]
        server.add_tool(tool, name=declared.name, description=declared.doc, structured_output=False)
        registered = server._tool_manager.get_tool(declared.name)
        assert registered is not None
        registered.parameters["additionalProperties"] = False

    for declared in TOOLS:
        add(declared)

    @server.resource("trace-gaps://schema/report", mime_type="application/schema+json")
    def report_schema() -> str:
        """The JSON Schema of `trace-gaps analyze -f json`."""
        return json.dumps(json_schema(SCHEMAS["report"]), indent=2)

    @server.resource("trace-gaps://schema/diff", mime_type="application/schema+json")
    def diff_schema() -> str:
        """The JSON Schema of `trace-gaps diff -f json`."""
        return json.dumps(json_schema(SCHEMAS["diff"]), indent=2)

    return server


def serve(*, quiet: bool = False) -> None:
    """Serve on stdin and stdout until the client closes them."""
    try:
        server = build_server(quiet=quiet)
    except ImportError:
        raise TraceGapsError(
            "the MCP server needs the MCP SDK, which is not installed: "
            "pip install 'trace-gaps[mcp]'."
        ) from None
    if sys.stdout is None or not _is_open(1):
        raise TraceGapsError(
            "standard output is closed: the server answers its client there; start it from "
            "the MCP client, with stdin and stdout its pipes."
        )
    try:
        server.run("stdio")
    except* OSError as group:  # the SDK's writer task: a full or failing stdout
        error = group.exceptions[0]
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)  # the flush at exit would fail again
            os.close(devnull)
        strerror = getattr(error, "strerror", None) or str(error)
        raise TraceGapsError(f"cannot write to standard output: {strerror}.") from None
    finally:
        end_if_stopping()  # SIGTERM: the SDK's thread reading stdin would hold the exit


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True
