"""`trace-gaps mcp`: the commands as tools of a Model Context Protocol server, for agents.

    agent ─stdio─▶ server ─tool call─▶ `python -P -m trace_gaps <command> -f json` ─▶ its JSON

Each tool runs the command line in a child process and returns what it prints: the same
bytes as `analyze -f json` (or `info`, `diff`), so the tools cannot disagree with the CLI,
the server's memory does not grow with the exports analysed, and nothing is written
anywhere (the commands print to stdout; no -o is ever passed). A command's user error
(exit 1) becomes the tool's error, with the command's one-line message.

Needs the optional extra: pip install 'trace-gaps[mcp]'.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
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
COMMAND_TIMEOUT_S = 3600


def run_command(command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
    """Run `python -P -m trace_gaps COMMAND OPTIONS -- PATHS` and return the JSON it prints.

    The paths follow `--`, so a path such as `-o x` is a (missing) file, never an option.
    Raises TraceGapsError with the command's message when it fails.
    """
    refuse_reports(paths)
    finished = subprocess.run(
        # -P: the working folder (an agent's, often a repository it did not write) is not put
        # first on sys.path, so a folder named trace_gaps there is never imported and run.
        [sys.executable, "-P", "-m", "trace_gaps", command, *options, "--quiet", "--", *paths],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=child_environment(os.environ),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if finished.returncode != 0:
        message = finished.stderr.strip().removeprefix("error: ") or "failed"
        raise TraceGapsError(f"trace-gaps {command} failed: {message}")
    result: dict[str, Any] = json.loads(finished.stdout)
    return result


def child_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment of a command's child: PYTHONSAFEPATH set, so that the Python processes
    it starts in turn (the fork server of the window workers) leave the working folder off
    sys.path as -P does, and PYTHONPATH without its empty or relative entries (each is the
    working folder, or a folder inside it)."""
    child = {**environment, "PYTHONSAFEPATH": "1"}
    kept = [p for p in child.pop("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    if kept:
        child["PYTHONPATH"] = os.pathsep.join(kept)
    return child


def refuse_reports(paths: list[str]) -> None:
    """Refuse native reports (.nsys-rep), and globs matching one: the command line would
    export them to SQLite beside the report, and the server writes nothing.

    Each argument is checked as a file and as a glob both: the command line takes the file
    when it exists (`y[1].bin`) and the glob's matches when not (inputs.expand_exports), so
    whichever it takes has been checked."""
    from trace_gaps.nsys.convert import is_report

    for given in paths:
        for path in [Path(given), *(Path(p) for p in glob.glob(given))]:
            if path.is_file() and is_report(path):
                raise TraceGapsError(
                    f"{path} is an Nsight Systems report; the server reads SQLite exports "
                    f"only (it writes nothing). Export it first: nsys export --type sqlite "
                    f"-o {path.with_suffix('.sqlite')} {path}"
                )


def analysis_options(
    step: str | None,
    skip: int | None,
    depth: int,
    kind: str | None,
    domain: str | None,
    process: int | None,
) -> list[str]:
    """The command-line options of an analysis, for the ones given (as --name=value, so a
    value that starts with a dash stays a value)."""
    given: list[tuple[str, object]] = [
        ("--step", step),
        ("--skip", skip),
        ("--kind", kind),
        ("--domain", domain),
        ("--process", process),
    ]
    options = [f"{name}={value}" for name, value in given if value is not None]
    return [*options, f"--depth={depth}"]


def build_server(*, quiet: bool = False) -> Any:
    """The MCP server with the tools info, analyze, diff and schema, and the schemas as
    resources. quiet: the SDK logs only errors on stderr (not each request and tool error)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from trace_gaps.schema import SCHEMAS, json_schema

    server = MCPServer(
        "trace-gaps",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="ERROR" if quiet else "INFO",
    )

    def call(command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
        """run_command, its user errors the tool's error (the agent reads the message)."""
        try:
            return run_command(command, options, paths)
        except TraceGapsError as error:
            raise ToolError(str(error)) from None

    @server.tool()
    def info(export: str) -> dict[str, Any]:
        """What an export holds: versions, capture settings, GPUs, threads, row counts, NVTX
        ranges, and the step range `analyze` would take."""
        return call("info", ["--format=json"], [export])

    @server.tool()
    def analyze(
        exports: list[str],
        step: str | None = None,
        skip: int | None = None,
        depth: int = 1,
        kind: str | None = None,
        domain: str | None = None,
        process: int | None = None,
        top: int = 10,
        steps: str | None = None,
        kernels: bool = False,
    ) -> dict[str, Any]:
        """The report of `trace-gaps analyze -f json`: per process the step ledger (busy,
        wait, idle by cause per stage), launch economics, ranked candidates with verdicts and
        evidence, and notes. Several exports are one run (one per rank), on one clock.
        step: the NVTX range of a step (name, family or glob; found when omitted).
        steps: only the steps with index A to B-1 on each thread ("A:B", warm-up included).
        kernels: add the per-kernel summary (count, total, percentiles per stage)."""
        options = analysis_options(step, skip, depth, kind, domain, process)
        extra = [f"--steps={steps}"] if steps is not None else []
        extra += ["--kernels"] if kernels else []
        return call("analyze", [*options, *extra, f"--top={top}", "--format=json"], exports)

    @server.tool()
    def diff(
        before: str,
        after: str,
        step: str | None = None,
        skip: int | None = None,
        depth: int = 1,
        kind: str | None = None,
        domain: str | None = None,
        process: int | None = None,
    ) -> dict[str, Any]:
        """The result of `trace-gaps diff -f json`: did the fix work? The step-time change
        with its noise, and the stage, bucket and launch changes that explain it. Each side is
        an export or a quoted glob of one run's exports."""
        options = analysis_options(step, skip, depth, kind, domain, process)
        return call("diff", [*options, "--format=json"], [before, after])

    @server.tool()
    def schema(kind: str = "report") -> dict[str, Any]:
        """The JSON Schema of analyze's result (kind "report") or diff's (kind "diff")."""
        if kind not in SCHEMAS:
            raise ToolError(f"no schema {kind!r}: choose one of {', '.join(SCHEMAS)}.")
        return json_schema(SCHEMAS[kind])

    @server.resource("trace-gaps://schema/report", mime_type="application/schema+json")
    def report_schema() -> str:
        """The JSON Schema of analyze's result."""
        return json.dumps(json_schema(SCHEMAS["report"]), indent=2)

    @server.resource("trace-gaps://schema/diff", mime_type="application/schema+json")
    def diff_schema() -> str:
        """The JSON Schema of diff's result."""
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
    try:
        server.run("stdio")
    finally:
        end_if_stopping()  # SIGTERM: the SDK's thread reading stdin would hold the exit
