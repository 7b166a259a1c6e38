"""`trace-gaps mcp`: the commands as tools of a Model Context Protocol server, for agents.

    agent ─stdio─▶ server ─tool call─▶ `python -P -m trace_gaps <command> -f json` ─▶ its JSON
                         ◀─ answer (answers.py: a bounded cut of it) ─┘

Each tool runs the command line in a child process (its JSON kept for the drill-downs that
follow, ResultCache) and answers a question from what it prints, so the tools cannot disagree
with the CLI, the server's memory stays bounded, and nothing is written anywhere (the
commands print to stdout; no -o is ever passed). The tools' parameters are the commands'
own options, read from their signatures. A command's user error becomes the tool's error, in
one line; so does an argument a tool does not take.

Needs the optional extra: pip install 'trace-gaps[mcp]'.
"""

from __future__ import annotations

import contextlib
import glob
import inspect
import json
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

from trace_gaps import __version__
from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import dying_with_parent, end_if_stopping

INSTRUCTIONS = (
    "trace-gaps reads Nsight Systems SQLite exports (nsys export --type sqlite) of LLM decode "
    "loops and charges every ns of every step to an NVTX stage: GPU busy, waiting in a "
    "collective, or idle and why (launch, sync, queued, api, host). Start with `info` on an "
    "export, then `analyze` (the candidates are ranked; their verdicts say what to change); "
    "`diff` compares two runs with their noise. Pass absolute paths. `schema` gives the "
    "JSON Schema of analyze's and diff's results."
)
COMMAND_TIMEOUT_S = 3600
# Commands run at once; a call beyond waits for one to end. Each analysis holds up to ~1 GB
# (12 concurrent calls used 6.3 GB), and two already share a two-core machine.
CONCURRENT_COMMANDS = 2
_RUNNING = threading.BoundedSemaphore(CONCURRENT_COMMANDS)


def run_command(command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
    """Run `python -P -m trace_gaps COMMAND OPTIONS -- PATHS` and return the JSON it prints.

    The paths follow `--`, so a path such as `-o x` is a (missing) file, never an option.
    Raises TraceGapsError with the command's message when it fails.
    """
    refuse_uncarriable(options, paths)
    refuse_reports(paths)
    try:
        with _RUNNING:
            finished = subprocess.run(
                # -P: the working folder (an agent's, often a repository it did not write) is not put
                # first on sys.path, so a folder named trace_gaps there is never imported and run.
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "trace_gaps",
                    command,
                    *options,
                    "--quiet",
                    "--",
                    *paths,
                ],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                env=child_environment(os.environ),
                # Killed with the server: a server killed mid-call left its command running on.
                preexec_fn=dying_with_parent(),
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
    except OSError as error:  # the command line itself could not be started
        raise TraceGapsError(f"trace-gaps {command} could not run: {error.strerror}") from None
    if finished.returncode != 0:
        message = one_line(finished.stderr)
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


# Linux's bound on one argument of a command line (MAX_ARG_STRLEN), and on a file's name.
ARGUMENT_BYTES = 128 * 1024
NAME_BYTES = 255


def refuse_uncarriable(options: list[str], paths: list[str]) -> None:
    """Refuse, in one line and before any file is looked at, an argument no command line can
    carry: one holding a NUL, or over 128 KiB; and a path with a name over 255 bytes."""
    for given in [*options, *paths]:
        shown = repr(given[:60]) + ("..." if len(given) > 60 else "")
        if "\x00" in given:
            raise TraceGapsError(f"{shown} holds a NUL character, which no path or option can")
        if len(given.encode(errors="surrogateescape")) > ARGUMENT_BYTES:
            raise TraceGapsError(
                f"{shown} is longer than 128 KiB, more than a command line can carry in one "
                "argument; give a shorter one"
            )
    for given in paths:
        if any(
            len(part.encode(errors="surrogateescape")) > NAME_BYTES for part in Path(given).parts
        ):
            shown = repr(given[:60]) + ("..." if len(given) > 60 else "")
            raise TraceGapsError(
                f"{shown}: a name in this path is too long (over {NAME_BYTES} bytes); pass a "
                "shorter path"
            )


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


CACHED_RESULTS = 4  # the commands' JSON the server keeps, for drill-downs that follow


class ResultCache:
    """The JSON of the last few command lines run, keyed by the command line and each export's
    path, size and modification time: an overview's drill-downs do not analyse the export again,
    and the server's memory stays bounded (CACHED_RESULTS results)."""

    def __init__(self, size: int = CACHED_RESULTS) -> None:
        self.size = size
        self.results: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
        refuse_uncarriable(options, paths)  # before stamp() looks the paths up
        key = (command, tuple(options), tuple(stamp(p) for p in paths))
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return self.results[key]
        result = run_command(command, options, paths)
        with self.lock:
            self.results[key] = result
            while len(self.results) > self.size:
                self.results.popitem(last=False)
        return result


def stamp(given: str) -> tuple[Any, ...]:
    """A path (or glob) as the cache knows it: each file it names, with its size and mtime."""
    paths = sorted(glob.glob(given)) or [given]
    return tuple(
        (os.path.abspath(p), *((s.st_size, s.st_mtime_ns) if (s := _stat(p)) else ()))
        for p in paths
    )


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def one_line(stderr: str) -> str:
    """A command's error as one line: typer's usage box (exit 2) unboxed, without its usage,
    'Try --help' and box title lines."""
    kept = []
    for line in stderr.splitlines():
        text = line.strip().strip("│╭╮╰╯─ ").strip()
        if text and not text.startswith(("Usage:", "Try '", "Error")):
            kept.append(text)
    return " ".join(" ".join(kept).split()).removeprefix("error: ") or "failed"


# The command-line parameters that are not the analysis's: output, terminal, workers, gating,
# and those a tool sets itself (--kernels: always on; --what-if: the what_if tool's levers).
NOT_TOOL_PARAMETERS = frozenset(
    {
        "exports",
        "export",
        "before",
        "after",
        "demo",
        "fmt",
        "output",
        "quiet",
        "no_color",
        "jobs",
        "scheduler",
        "fail_if_slower",
        "kernels",
        "what_if",
        "as_json",
        "include_command",
    }
)


@dataclass(frozen=True, slots=True)
class CliParameter:
    """An option of a command, as a tool parameter: its name, the flag it becomes, and the
    typed parameter (help as description, min and max as bounds)."""

    name: str
    flag: str
    parameter: inspect.Parameter

    def argv(self, value: Any) -> list[str]:
        """The option on a command line (as --flag=value, so a value that starts with a dash
        stays a value); nothing for None or False."""
        if value is None or value is False:
            return []
        if value is True:
            return [self.flag]
        if isinstance(value, list):
            return [f"{self.flag}={item}" for item in value]
        return [f"{self.flag}={value}"]


def cli_parameters(command: Callable[..., Any]) -> list[CliParameter]:
    """The analysis options of a CLI command, read from its own signature (what typer reads:
    commands/options.py declares the shared ones once), as tool parameters."""
    import typer.models
    from pydantic import Field

    found = []
    for parameter in inspect.signature(command, eval_str=True).parameters.values():
        if parameter.name in NOT_TOOL_PARAMETERS:
            continue
        base, *metadata = get_args(parameter.annotation)
        info = next(m for m in metadata if isinstance(m, typer.models.OptionInfo))
        declared = [d for d in info.param_decls or () if d.startswith("--")]
        flag = declared[0] if declared else "--" + parameter.name.replace("_", "-")
        help_text = (info.help or "").replace("\\[", "[")
        field = Field(description=help_text or None, ge=info.min, le=info.max)
        annotated = Annotated[base, field]  # type: ignore[valid-type]
        typed = parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=annotated)
        found.append(CliParameter(parameter.name, flag, typed))
    return found


def tool_parameter(name: str, annotation: Any, default: Any, description: str) -> inspect.Parameter:
    from pydantic import Field

    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[annotation, Field(description=description)],
    )


def argument_error(tool: str, error: Any) -> str:
    """A pydantic ValidationError as one line: the first problem, with how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "arguments"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    got = first.get("input")
    shown = "" if isinstance(got, dict) else f", got {json.dumps(got, default=str)[:80]}"
    return f"{tool}: {where}: {first['msg']}{shown}{more}"


EXPORTS = (
    "Absolute paths of files from `nsys export --type sqlite` (a quoted glob too); several: "
    "the exports of one run, one per rank, analysed as one."
)
SECTION = "Which section of the overview (0: the first; a process, or one kind of its steps)."
OFFSET = "The first item of the page (next_offset of the page before)."
LIMIT = "Items on the page."


def build_server(*, quiet: bool = False) -> Any:
    """The MCP server: the overview, its drill-downs, info and diff as tools, each answer
    bounded (answers.py), and the JSON Schemas as resources. quiet: the SDK logs only errors
    on stderr (not each request and tool error)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent
    from pydantic import Field, ValidationError

    from trace_gaps.commands.analyze import analyze as analyze_command
    from trace_gaps.commands.diff import diff as diff_command
    from trace_gaps.mcp import answers
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
    cache = ResultCache()
    analysis = cli_parameters(analyze_command)
    comparison = cli_parameters(diff_command)

    def run(command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
        """The command's JSON (cached), its user errors the tool's error."""
        try:
            return cache.get(command, options, paths)
        except TraceGapsError as error:
            raise ToolError(str(error)) from None

    def analysed(exports: list[str], given: dict[str, Any], *extra: str) -> dict[str, Any]:
        options = [o for p in analysis for o in p.argv(given.pop(p.name))]
        return run("analyze", [*options, "--kernels", *extra, "--format=json"], exports)

    def answered(answer: dict[str, Any], text: str) -> Any:
        """The answer once, as structured content, with a short text beside it."""
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=answer
        )

    def add(
        name: str,
        doc: str,
        own: list[inspect.Parameter],
        taken: list[CliParameter],
        body: Callable[[dict[str, Any]], tuple[dict[str, Any], str]],
    ) -> None:
        def tool(**given: Any) -> Any:
            try:
                answer, text = body(given)
            except answers.AnswerError as error:
                raise ToolError(str(error)) from None
            return answered(answer, text)

        tool.__name__ = name
        tool.__doc__ = doc
        tool.__signature__ = inspect.Signature([*own, *(p.parameter for p in taken)])  # type: ignore[attr-defined]
        server.add_tool(tool, name=name, description=doc, structured_output=False)
        registered = server._tool_manager.get_tool(name)
        assert registered is not None
        registered.parameters["additionalProperties"] = False

    exports_parameter = inspect.Parameter(
        "exports",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[list[str], Field(min_length=1, description=EXPORTS)],
    )
    section = tool_parameter("section", Annotated[int, Field(ge=0)], 0, SECTION)
    offset = tool_parameter("offset", Annotated[int, Field(ge=0)], 0, OFFSET)

    def limit(default: int) -> inspect.Parameter:
        return tool_parameter("limit", Annotated[int, Field(ge=1, le=100)], default, LIMIT)

    def overview(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        answer = answers.overview_answer(analysed(given.pop("exports"), given))
        headlines = [part["headline"] for part in answer["sections"]]
        return answer, "\n".join(headlines) or "no analysed process"

    add(
        "overview",
        "Start here: where each step's time goes and what to change. Per process (or kind of "
        "step): the headline, step statistics, the first verdicts and the top candidates "
        "(ranked by the step time their fix would save, from a what-if replay), the integrity "
        "notes by code. Under 4 KB; drill down with stage, candidates, kernels, step, what_if.",
        [exports_parameter],
        analysis,
        overview,
    )

    def candidates(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        where = {k: given.pop(k) for k in ("section", "offset", "limit")}
        answer = answers.candidates_answer(analysed(given.pop("exports"), given), **where)
        shown = answer["offset"] + len(answer["candidates"])
        return answer, f"candidates {answer['offset']} to {shown} of {answer['total']}"

    add(
        "candidates",
        "The ranked candidates of a section, a page of them: stage, bucket (busy or idle), ms "
        "per step, the lever that fits and what it saves, and the verdict sentence.",
        [exports_parameter, section, offset, limit(10)],
        analysis,
        candidates,
    )

    stage_parameter = tool_parameter(
        "stage",
        str,
        inspect.Parameter.empty,
        "A stage's name, as the overview and candidates name it.",
    )

    def stage(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        where = {k: given.pop(k) for k in ("stage", "section")}
        answer = answers.stage_answer(analysed(given.pop("exports"), given), **where)
        ledger = ", ".join(f"{k} {v}" for k, v in answer["ledger_ms_per_step"].items())
        return answer, f"stage {answer['stage']} (ms per step): {ledger}"

    add(
        "stage",
        "One stage: its ledger (GPU busy, waiting in collectives, idle by cause: launch, sync, "
        "queued, api, host; ms per step), launches, syncs and execution mode, its candidates "
        "with verdicts and evidence (top kernels, CUDA calls, longest gaps), its long host gaps.",
        [exports_parameter, stage_parameter, section],
        analysis,
        stage,
    )

    def step(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        where = {k: given.pop(k) for k in ("index", "section")}
        answer = answers.step_answer(analysed(given.pop("exports"), given), **where)
        walls = ", ".join(f"thread {s['thread']}: {s['wall_ms']} ms" for s in answer["steps"])
        return answer, f"step {where['index']}: {walls}"

    add(
        "step",
        "One step by its index (from 0 on each thread, warm-up included, as --steps and plot's "
        "--step-index count): when it started, its wall, busy and idle time, whether it was "
        "analysed, its ledger by stage and cause, and its longest gaps.",
        [
            exports_parameter,
            tool_parameter(
                "index", Annotated[int, Field(ge=0)], inspect.Parameter.empty, "The step's index."
            ),
            section,
        ],
        analysis,
        step,
    )

    def kernels(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        where = {k: given.pop(k) for k in ("stage", "section", "offset", "limit")}
        answer = answers.kernels_answer(analysed(given.pop("exports"), given), **where)
        return answer, f"{len(answer['kernels'])} of {answer['total']} GPU op rows by GPU time"

    add(
        "kernels",
        "The GPU ops of the analysed steps with most GPU time (nsys's cuda_gpu_kern_sum for "
        "those steps), of one stage or all, a page: per step count and ms, mean, p50, p90.",
        [
            exports_parameter,
            tool_parameter("stage", str | None, None, "Only this stage's ops (default: all)."),
            section,
            offset,
            limit(20),
        ],
        analysis,
        kernels,
    )

    def what_if(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        from trace_gaps.analysis.replay.levers import LeverError, parse_levers

        levers = given.pop("levers")
        try:
            parse_levers(levers)
        except LeverError as error:
            raise ToolError(f"what_if: levers: {error}") from None
        exports = [given.pop("export")]
        where = {"section": given.pop("section")}
        answer = answers.what_if_answer(analysed(exports, given, f"--what-if={levers}"), **where)
        return answer, f"what-if {levers}: predicted step {answer.get('predicted_step_ms')} ms"

    add(
        "what_if",
        "Predict the step with levers pulled on the replayed steps, e.g. "
        "'verify_forward=graph,sample=nosync' (graph, nogaps, host50, nohost, nosync, noapi, "
        "ontime, gpuN with N 1-99, sol; docs/what-if.md): the predicted step and its ledger.",
        [
            tool_parameter("export", str, inspect.Parameter.empty, "Absolute path of one export."),
            tool_parameter(
                "levers", str, inspect.Parameter.empty, "STAGE=LEVER pairs, comma separated."
            ),
            section,
        ],
        analysis,
        what_if,
    )

    def notes(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        where = {k: given.pop(k) for k in ("offset", "limit")}
        answer = answers.notes_answer(analysed(given.pop("exports"), given), **where)
        return answer, f"{len(answer['notes'])} of {answer['total']} integrity notes"

    add(
        "notes",
        "The integrity notes in full: what in the export is missing, damaged or odd, and which "
        "figures it makes unreliable.",
        [exports_parameter, offset, limit(20)],
        analysis,
        notes,
    )

    def diff(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        sides = [given.pop("before"), given.pop("after")]
        most = given.pop("limit")
        options = [o for p in comparison for o in p.argv(given.pop(p.name))]
        answer = answers.diff_answer(run("diff", [*options, "--format=json"], sides), limit=most)
        return answer, "\n".join(p["verdict"] for p in answer["pairs"]) or "nothing compared"

    add(
        "diff",
        "Did the fix work? The step-time change with its noise (95 % bootstrap interval), the "
        "machine's drift, and the biggest stage, bucket and candidate changes, BEFORE → AFTER. "
        "Each side is an export or a quoted glob of one run's exports.",
        [
            tool_parameter("before", str, inspect.Parameter.empty, "Export (or glob) before."),
            tool_parameter("after", str, inspect.Parameter.empty, "Export (or glob) after."),
            limit(8),
        ],
        comparison,
        diff,
    )

    def info(given: dict[str, Any]) -> tuple[dict[str, Any], str]:
        found = run("info", ["--format=json"], [given["export"]])
        answer = answers.info_answer(found, offset=given["offset"], limit=given["limit"])
        return answer, f"{answer.get('file')}: step range {answer.get('step_range')}"

    add(
        "info",
        "What an export holds, before any analysis: versions, capture settings, GPUs, threads, "
        "row counts, NVTX ranges (a page, the most frequent first), and the step range the "
        "analysis would take.",
        [
            tool_parameter("export", str, inspect.Parameter.empty, "Absolute path of one export."),
            offset,
            limit(40),
        ],
        [],
        info,
    )

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
