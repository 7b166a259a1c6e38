"""`trace-gaps mcp`: the MCP SDK's own client, over stdio, against the server in a child
process: the overview and its drill-downs within their bounds, bad arguments refused in one
line, errors, and nothing written."""

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

from tests.conftest import ROOT, SAMPLE_TRACES

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import (  # noqa: E402
    StdioServerParameters,
    get_default_environment,
    stdio_client,
)


def with_server(work: Callable[[ClientSession], Awaitable[Any]], cwd: Path) -> Any:
    """Start `trace-gaps mcp` as a child process, run work(session) against it, stop it.

    The server starts as the `trace-gaps` command does, without the working folder on sys.path
    (-P): what a tool call's child imports is the question, not how the test starts it."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-P", "-m", "trace_gaps", "mcp", "--quiet"],
            cwd=cwd,
            # The SDK passes a bare environment: this checkout's code, as the tests import it.
            env={**get_default_environment(), "PYTHONPATH": str(ROOT)},
        )
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            return await work(session)

    return anyio.run(main)


TOOLS = ["candidates", "diff", "info", "kernels", "notes", "overview", "stage", "step", "what_if"]


def wire_size(result: Any) -> int:
    return len(json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":")))


def test_the_overview_and_its_drill_downs_answer_within_their_bounds(tmp_path):
    export = tmp_path / "exports" / "spec_sync.sqlite"
    export.parent.mkdir()
    shutil.copyfile(SAMPLE_TRACES / "spec_sync.sqlite", export)
    exports = [str(export)]

    async def work(session: ClientSession) -> dict[str, Any]:
        tools = await session.list_tools()
        overview = await session.call_tool("overview", {"exports": exports})
        top = overview.structured_content["sections"][0]["top"][0]["stage"]
        calls = {
            "stage": ("stage", {"exports": exports, "stage": top}),
            "candidates": ("candidates", {"exports": exports, "limit": 2}),
            "kernels": ("kernels", {"exports": exports, "stage": top, "limit": 5}),
            "step": ("step", {"exports": exports, "index": 3}),
            "notes": ("notes", {"exports": exports}),
            "what_if": ("what_if", {"export": str(export), "levers": f"{top}=graph"}),
            "narrowed": ("overview", {"exports": exports, "steps": "3:6", "top": 2}),
            "info": ("info", {"export": str(export), "limit": 3}),
        }
        got = {name: await session.call_tool(*call) for name, call in calls.items()}
        resources = await session.list_resources()
        return {
            "tools": tools.tools,
            "overview": overview,
            "top": top,
            **got,
            "resources": sorted(str(r.uri) for r in resources.resources),
        }

    got = with_server(work, tmp_path)
    assert sorted(tool.name for tool in got["tools"]) == TOOLS
    # Every analysis option of the CLI, from its declaration; no argument beyond them.
    overview_tool = next(t for t in got["tools"] if t.name == "overview")
    assert set(overview_tool.input_schema["properties"]) == {
        "exports", "step", "skip", "steps", "depth", "kind", "domain", "process", "collective",
        "top",
    }  # fmt: skip
    assert overview_tool.input_schema["additionalProperties"] is False
    assert got["resources"] == ["trace-gaps://schema/diff", "trace-gaps://schema/report"]
    for name in ["overview", "stage", "candidates", "kernels", "step", "notes", "what_if", "info"]:
        assert not got[name].is_error, (name, got[name].content[0].text)
        # Sent once: the data as structured content, a short text beside it.
        assert wire_size(got[name]) <= (4_000 if name == "overview" else 16_000), name
        assert len(got[name].content) == 1 and len(got[name].content[0].text) < 1_000, name
    overview = got["overview"].structured_content["sections"][0]
    assert overview["headline"] in got["overview"].content[0].text
    assert overview["verdicts"] and overview["steps"]["analysed"] > 0
    assert got["stage"].structured_content["ledger_ms_per_step"]
    assert got["stage"].structured_content["candidates"][0]["evidence"]
    page = got["candidates"].structured_content
    assert len(page["candidates"]) == 2 and page["next_offset"] == 2
    assert {k["stage"] for k in got["kernels"].structured_content["kernels"]} == {got["top"]}
    assert got["step"].structured_content["steps"][0]["index"] == 3
    assert 0 < got["what_if"].structured_content["predicted_ms"] < overview["steps"]["mean_ms"]
    # --steps and --top reach the command: three steps, two candidates.
    narrowed = got["narrowed"].structured_content["sections"][0]
    assert narrowed["steps"]["analysed"] == 3 and narrowed["candidates"] == 2
    assert len(got["info"].structured_content["ranges"]) == 3
    # Nothing written: not beside the export, not in the server's folder.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["exports", "spec_sync.sqlite"]


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    export = str(SAMPLE_TRACES / "spec_sync.sqlite")
    calls = [
        (
            "overview",
            {"exports": [export], "what_if": "draft=graph"},
            "takes no argument 'what_if'",
        ),
        ("overview", {"exports": [export], "top": 0}, "top: Input should be greater than"),
        ("overview", {"exports": [export], "depth": "deep"}, "depth: Input should be a valid"),
        ("overview", {"exports": export}, "exports: Input should be a valid list"),
        ("overview", {"exports": [export], "steps": "3-6"}, "--steps"),
        ("stage", {"exports": [export], "stage": "nosuch"}, "no stage 'nosuch'"),
        ("step", {"exports": [export]}, "index: Field required"),
        ("what_if", {"export": export, "levers": "verify_forward=gpu0"}, "gpu"),
        ("candidates", {"exports": [export], "limit": 0}, "limit: Input should be greater"),
        ("kernels", {"exports": [export], "limit": 101}, "limit: Input should be less"),
        ("notes", {"exports": [export], "bogus": 1}, "notes takes no argument 'bogus'"),
        ("diff", {"before": export}, "diff: after: Field required"),
        ("info", {"exports": [export]}, "info takes no argument 'exports'"),
        ("nosuch", {}, "nosuch"),
    ]

    async def work(session: ClientSession) -> list[Any]:
        return [await session.call_tool(name, arguments) for name, arguments, _ in calls]

    for (name, arguments, words), result in zip(calls, with_server(work, tmp_path), strict=True):
        text = result.content[0].text
        assert result.is_error, (name, arguments)
        assert words in text and "\n" not in text and len(text) < 400, (name, arguments, text)


def test_diff_and_errors_reach_the_client(tmp_path):
    before, after = SAMPLE_TRACES / "spec_eager.sqlite", SAMPLE_TRACES / "spec_graph_node.sqlite"
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")

    async def work(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("diff", {"before": str(before), "after": str(after)}),
            await session.call_tool("info", {"export": str(tmp_path / "missing.sqlite")}),
            await session.call_tool("overview", {"exports": ["-o", str(tmp_path / "x.md")]}),
            await session.call_tool("overview", {"exports": [str(report)]}),
        ]

    diffed, missing, option, native = with_server(work, tmp_path)
    assert not diffed.is_error, diffed.content[0].text
    assert wire_size(diffed) <= 16_000
    pair = diffed.structured_content["pairs"][0]
    assert pair["verdict"].startswith("Step time") and pair["verdict"] in diffed.content[0].text
    assert pair["wall"]["is_beyond_noise"] and len(pair["buckets"]) <= 8
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
    from trace_gaps.mcp.command_line import child_environment

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
    from trace_gaps.mcp.command_line import refuse_reports
    from trace_gaps.nsys.convert import REPORT_MAGIC

    shutil.copy(SAMPLE_TRACES / "plain_decode.sqlite", tmp_path / "y1.bin")
    report = tmp_path / "y[1].bin"
    report.write_bytes(REPORT_MAGIC + b"\0" * 64)
    with pytest.raises(TraceGapsError, match="is an Nsight Systems report"):
        refuse_reports([str(report)])
    refuse_reports([str(tmp_path / "y1.bin")])  # an export: not refused
    with pytest.raises(TraceGapsError, match="is an Nsight Systems report"):
        refuse_reports([str(tmp_path / "y*.bin")])  # a glob matching the report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y1.bin", "y[1].bin"]


def test_the_tools_take_the_options_the_commands_declare():
    """One list of options, both surfaces: the analysis tools take analyze's declared options
    (but --kernels, always on), diff takes diff's, in their order and with their help."""
    from trace_gaps.commands.analyze import ANALYZE_OPTIONS
    from trace_gaps.commands.diff import DIFF_OPTIONS
    from trace_gaps.mcp.tools import TOOLS

    taken = {tool.name: [p.name for p in tool.taken] for tool in TOOLS}
    analysis = [o.name for o in ANALYZE_OPTIONS if o.name != "kernels"]
    assert analysis == ["step", "skip", "steps", "depth", "kind", "domain", "process"] + [
        "collective",
        "top",
    ]
    for name in ("overview", "candidates", "stage", "step", "kernels", "what_if", "notes"):
        assert taken[name] == analysis
    assert taken["diff"] == [o.name for o in DIFF_OPTIONS]
    assert taken["diff"][-3:] == ["process_before", "process_after", "repeats"]
    assert taken["info"] == []
    flags = {p.name: p.flag for tool in TOOLS for p in tool.taken}
    assert flags["step"] == "--step" and flags["process_before"] == "--process-before"
