"""`trace-gaps mcp --quiet` given arguments no command line can carry (issue 45): a NUL in a
path, an argument over 128 KiB, a name over 255 bytes. Each is the tool's error in one line,
and nothing (no rich traceback) reaches the server's stderr."""

from __future__ import annotations

import sys
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

EXPORT = str(SAMPLE_TRACES / "spec_sync.sqlite")


def call_quiet_server(
    calls: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> tuple[list[Any], str]:
    """The results of the tool calls, and what the server wrote to its stderr."""
    errlog = tmp_path / "server.stderr"

    async def main() -> list[Any]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-P", "-m", "trace_gaps", "mcp", "--quiet"],
            cwd=tmp_path,
            env={**get_default_environment(), "PYTHONPATH": str(ROOT)},
        )
        with errlog.open("w") as log:
            async with (
                stdio_client(params, errlog=log) as streams,
                ClientSession(*streams) as session,
            ):
                await session.initialize()
                return [await session.call_tool(name, arguments) for name, arguments in calls]

    results = anyio.run(main)
    return results, errlog.read_text()


def test_arguments_no_command_line_can_carry_are_refused_in_one_line(tmp_path):
    long_name = str(tmp_path / ("a" * 300 + ".sqlite"))
    calls = [
        ("info", {"export": EXPORT + "\x00x"}),
        ("overview", {"exports": [EXPORT, "b\x00.sqlite"]}),
        ("info", {"export": "/" + "x" * 200_000}),
        ("overview", {"exports": [EXPORT], "collective": ["a" * 200_000]}),
        ("info", {"export": long_name}),
        ("overview", {"exports": [long_name]}),
    ]
    results, stderr = call_quiet_server(calls, tmp_path)
    for (name, _), result in zip(calls, results, strict=True):
        text = result.content[0].text
        assert result.is_error, (name, text[:200])
        assert "\n" not in text and len(text) < 600, (name, text[:600])
    texts = [result.content[0].text for result in results]
    assert "NUL" in texts[0] and "NUL" in texts[1]
    assert "128 KiB" in texts[2] and "128 KiB" in texts[3]
    assert "too long" in texts[4] and "too long" in texts[5]
    assert stderr == ""
