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


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_killed_mid_call_takes_its_command_with_it(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import time

    server = subprocess.Popen(
        [sys.executable, "-P", "-m", "trace_gaps", "mcp", "--quiet"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert server.stdin is not None and server.stdout is not None
    hello = {"name": "test", "version": "0"}
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": hello},
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "overview", "arguments": {"exports": [EXPORT]}},
        },
    ]
    server.stdin.write(json.dumps(messages[0]).encode() + b"\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 1
    for message in messages[1:]:
        server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()
    deadline = time.monotonic() + 30
    while not (children := children_of(server.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert children
        server.kill()
        server.wait(timeout=10)
        deadline = time.monotonic() + 1  # the analysis alone runs on for seconds
        while any(_running(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [c for c in children if _running(c)]
    finally:
        for child in children_of(server.pid):
            os.kill(child, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_no_more_than_two_commands_run_at_once(monkeypatch):
    """12 concurrent tool calls ran 12 analyses at once (6.3 GB, issue 45)."""
    import subprocess
    import threading
    import time

    from trace_gaps.mcp import command_line as tool_command_line

    running, most = [0], [0]
    lock = threading.Lock()

    def command_line(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.1)
        with lock:
            running[0] -= 1
        return subprocess.CompletedProcess(args, 0, "{}", "")

    monkeypatch.setattr(tool_command_line.subprocess, "run", command_line)
    threads = [
        threading.Thread(target=tool_command_line.run_command, args=("info", [], [EXPORT]))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == tool_command_line.CONCURRENT_COMMANDS == 2


INITIALIZE = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"0"}}}\n'
)


@pytest.mark.parametrize(
    ("stdout", "line"),
    [
        (">/dev/full", "error: cannot write to standard output: No space left on device."),
        (">&-", "error: standard output is closed: the server answers its client there;"),
    ],
)
def test_the_server_with_a_full_or_closed_stdout_says_so_in_one_line(stdout, line, tmp_path):
    import os
    import shlex
    import subprocess

    if "full" in stdout and not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    command = shlex.join([sys.executable, "-P", "-m", "trace_gaps", "mcp", "--quiet"])
    done = subprocess.run(
        f"{command} {stdout}",
        shell=True,
        input=INITIALIZE.encode(),
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), done.stderr.decode()[-2000:]
