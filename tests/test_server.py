"""`trace-gaps mcp`: the MCP SDK's own client, over stdio, against the server in a child
process: the tools, a report that matches the Schema, errors, and nothing written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLE_TRACES, assert_matches_schema
from trace_gaps.schema import SCHEMAS, json_schema

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402


def with_server(work: Callable[[ClientSession], Awaitable[Any]], cwd: Path) -> Any:
    """Start `trace-gaps mcp` as a child process, run work(session) against it, stop it.

    The server starts as the `trace-gaps` command does, without the working folder on sys.path
    (-P): what a tool call's child imports is the question, not how the test starts it."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable, args=["-P", "-m", "trace_gaps", "mcp", "--quiet"], cwd=cwd
        )
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            return await work(session)

    return anyio.run(main)


def test_the_tools_are_listed_and_analyze_matches_the_schema(tmp_path):
    export = tmp_path / "exports" / "spec_sync.sqlite"
    export.parent.mkdir()
    shutil.copyfile(SAMPLE_TRACES / "spec_sync.sqlite", export)

    async def work(session: ClientSession) -> dict[str, Any]:
        tools = await session.list_tools()
        analyzed = await session.call_tool("analyze", {"exports": [str(export)]})
        narrowed = await session.call_tool(
            "analyze", {"exports": [str(export)], "steps": "3:6", "kernels": True}
        )
        info = await session.call_tool("info", {"export": str(export)})
        schema = await session.call_tool("schema", {"kind": "report"})
        resources = await session.list_resources()
        return {
            "tools": sorted(tool.name for tool in tools.tools),
            "analyze": analyzed,
            "narrowed": narrowed,
            "info": info,
            "schema": schema,
            "resources": sorted(str(r.uri) for r in resources.resources),
        }

    got = with_server(work, tmp_path)
    assert got["tools"] == ["analyze", "diff", "info", "schema"]
    assert got["resources"] == ["trace-gaps://schema/diff", "trace-gaps://schema/report"]
    analyzed = got["analyze"]
    assert not analyzed.is_error
    assert_matches_schema(json.dumps(analyzed.structured_content))
    # The text content is the same report, for clients that read text only.
    assert json.loads(analyzed.content[0].text) == analyzed.structured_content
    assert analyzed.structured_content["processes"][0]["candidates"]
    # --steps and --kernels reach the command: three steps, each kernel summarised.
    narrowed = got["narrowed"].structured_content
    assert not got["narrowed"].is_error
    assert_matches_schema(json.dumps(narrowed))
    assert narrowed["processes"][0]["steps"]["steps_analysed"] == 3
    assert narrowed["processes"][0]["kernels"]
    assert "kernels" not in analyzed.structured_content["processes"][0]
    assert got["info"].structured_content["ranges"]
    assert got["schema"].structured_content == json_schema(SCHEMAS["report"])
    # Nothing written: not beside the export, not in the server's folder.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["exports", "spec_sync.sqlite"]


def test_diff_and_errors_reach_the_client(tmp_path):
    before, after = SAMPLE_TRACES / "spec_eager.sqlite", SAMPLE_TRACES / "spec_graph_node.sqlite"
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")

    async def work(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("diff", {"before": str(before), "after": str(after)}),
            await session.call_tool("info", {"export": str(tmp_path / "missing.sqlite")}),
            await session.call_tool("analyze", {"exports": ["-o", str(tmp_path / "x.md")]}),
            await session.call_tool("analyze", {"exports": [str(report)]}),
        ]

    diffed, missing, option, native = with_server(work, tmp_path)
    assert not diffed.is_error
    assert_matches_schema(json.dumps(diffed.structured_content), "diff")
    assert missing.is_error and "does not exist" in missing.content[0].text
    # A path that looks like an option is a path.
    assert option.is_error and not (tmp_path / "x.md").exists()
    assert native.is_error and "nsys export --type sqlite" in native.content[0].text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nsys-rep"]


def test_a_package_planted_in_the_working_folder_is_not_run(tmp_path):
    # An agent's working folder is often a repository it did not write: one holding a
    # trace_gaps package must not be what `python -m trace_gaps` runs for a tool call.
    ran = tmp_path / "planted-code-ran"
    planted = tmp_path / "trace_gaps"
    planted.mkdir()
    for name in ("__init__.py", "__main__.py"):
        (planted / name).write_text(
            f"open({str(ran)!r}, 'a').write({name!r} + '\\n')\nprint('{{\"planted\": 1}}')\n"
        )

    async def work(session: ClientSession) -> Any:
        return await session.call_tool("info", {"export": str(SAMPLE_TRACES / "spec_sync.sqlite")})

    info = with_server(work, tmp_path)
    assert not ran.exists(), ran.read_text()
    assert not info.is_error, info.content[0].text
    assert info.structured_content["ranges"]


def test_the_child_environment_keeps_the_working_folder_off_the_path():
    from trace_gaps.server import child_environment

    environment = {"HOME": "/home/a", "PYTHONPATH": os.pathsep.join(["", "/opt/lib", ".", "src"])}
    assert child_environment(environment) == {
        "HOME": "/home/a",
        "PYTHONPATH": "/opt/lib",
        "PYTHONSAFEPATH": "1",
    }
    assert "PYTHONPATH" not in child_environment({"PYTHONPATH": "."})


def test_sigterm_ends_the_server_while_its_client_keeps_stdin_open(tmp_path):
    server = subprocess.Popen(
        [sys.executable, "-P", "-m", "trace_gaps", "mcp", "--quiet"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    hello = {"name": "test", "version": "0"}
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": hello},
    }
    server.stdin.write(json.dumps(request).encode() + b"\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 1  # serving, stdin still open
    server.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        server.wait(timeout=15)
    finally:
        server.kill()
        server.communicate()
    assert server.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - sent < 3


def test_a_report_named_like_a_glob_is_refused_as_the_command_would_read_it(tmp_path):
    """issue 45: `y[1].bin` (a report) beside `y1.bin` (what the glob matches): the command
    reads the file named, so the server checks it, not only the glob's matches."""
    from trace_gaps.errors import TraceGapsError
    from trace_gaps.nsys.convert import REPORT_MAGIC
    from trace_gaps.server import refuse_reports

    shutil.copy(SAMPLE_TRACES / "plain_decode.sqlite", tmp_path / "y1.bin")
    report = tmp_path / "y[1].bin"
    report.write_bytes(REPORT_MAGIC + b"\0" * 64)
    with pytest.raises(TraceGapsError, match="is an Nsight Systems report"):
        refuse_reports([str(report)])
    refuse_reports([str(tmp_path / "y1.bin")])  # an export: not refused
    with pytest.raises(TraceGapsError, match="is an Nsight Systems report"):
        refuse_reports([str(tmp_path / "y*.bin")])  # a glob matching the report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y1.bin", "y[1].bin"]
