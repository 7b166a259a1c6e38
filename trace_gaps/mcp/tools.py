"""The tools, declared in the order an agent meets them: each a name, a description, its own
parameters, the command options it takes (the command line's, parameters.py) and its body,
which answers from a command's JSON (answers.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from trace_gaps.commands.analyze import ANALYZE_OPTIONS
from trace_gaps.commands.diff import DIFF_OPTIONS
from trace_gaps.errors import TraceGapsError
from trace_gaps.mcp import answers
from trace_gaps.mcp.command_line import ResultCache
from trace_gaps.mcp.parameters import (
    CliParameter,
    cli_parameters,
    exports_parameter,
    limit_parameter,
    offset_parameter,
    section_parameter,
    tool_parameter,
)

Json = dict[str, Any]

# analyze's options but --kernels, which the tools set themselves (always on).
ANALYSIS = cli_parameters([o for o in ANALYZE_OPTIONS if o.name != "kernels"])
COMPARISON = cli_parameters(DIFF_OPTIONS)


@dataclass(frozen=True, slots=True)
class CommandLines:
    """The command lines the tools run: their JSON cached, their user errors the tool's."""

    cache: ResultCache

    def run(self, command: str, options: list[str], paths: list[str]) -> Json:
        """The command's JSON (cached), its user errors the tool's error."""
        try:
            return self.cache.get(command, options, paths)
        except TraceGapsError as error:
            raise ToolError(str(error)) from None

    def analysed(self, exports: list[str], given: Json, *extra: str) -> Json:
        """analyze's JSON of the exports, with the analysis options given to the tool."""
        options = [o for p in ANALYSIS for o in p.argv(given.pop(p.name))]
        return self.run("analyze", [*options, "--kernels", *extra, "--format=json"], exports)


Body = Callable[[CommandLines, Json], tuple[Json, str]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool: its answer and a short text beside it, from body(command lines, arguments)."""

    name: str
    doc: str
    own: list[inspect.Parameter]
    taken: list[CliParameter]
    body: Body

    def signature(self) -> inspect.Signature:
        return inspect.Signature([*self.own, *(p.parameter for p in self.taken)])


def overview(commands: CommandLines, given: Json) -> tuple[Json, str]:
    answer = answers.overview_answer(commands.analysed(given.pop("exports"), given))
    headlines = [part["headline"] for part in answer["sections"]]
    return answer, "\n".join(headlines) or "no analysed process"


def candidates(commands: CommandLines, given: Json) -> tuple[Json, str]:
    where = {k: given.pop(k) for k in ("section", "offset", "limit")}
    answer = answers.candidates_answer(commands.analysed(given.pop("exports"), given), **where)
    shown = answer["offset"] + len(answer["candidates"])
    return answer, f"candidates {answer['offset']} to {shown} of {answer['total']}"


def stage(commands: CommandLines, given: Json) -> tuple[Json, str]:
    where = {k: given.pop(k) for k in ("stage", "section")}
    answer = answers.stage_answer(commands.analysed(given.pop("exports"), given), **where)
    ledger = ", ".join(f"{k} {v}" for k, v in answer["ledger_ms_per_step"].items())
    return answer, f"stage {answer['stage']} (ms per step): {ledger}"


def step(commands: CommandLines, given: Json) -> tuple[Json, str]:
    where = {k: given.pop(k) for k in ("index", "section")}
    answer = answers.step_answer(commands.analysed(given.pop("exports"), given), **where)
    walls = ", ".join(f"thread {s['thread']}: {s['wall_ms']} ms" for s in answer["steps"])
    return answer, f"step {where['index']}: {walls}"


def kernels(commands: CommandLines, given: Json) -> tuple[Json, str]:
    where = {k: given.pop(k) for k in ("stage", "section", "offset", "limit")}
    answer = answers.kernels_answer(commands.analysed(given.pop("exports"), given), **where)
    return answer, f"{len(answer['kernels'])} of {answer['total']} GPU op rows by GPU time"


def what_if(commands: CommandLines, given: Json) -> tuple[Json, str]:
    from trace_gaps.analysis.replay.levers import LeverError, parse_levers

    levers = given.pop("levers")
    try:
        parse_levers(levers)
    except LeverError as error:
        raise ToolError(f"what_if: levers: {error}") from None
    exports = [given.pop("export")]
    where = {"section": given.pop("section")}
    found = commands.analysed(exports, given, f"--what-if={levers}")
    answer = answers.what_if_answer(found, **where)
    return answer, f"what-if {levers}: predicted step {answer.get('predicted_step_ms')} ms"


def notes(commands: CommandLines, given: Json) -> tuple[Json, str]:
    where = {k: given.pop(k) for k in ("offset", "limit")}
    answer = answers.notes_answer(commands.analysed(given.pop("exports"), given), **where)
    return answer, f"{len(answer['notes'])} of {answer['total']} integrity notes"


def diff(commands: CommandLines, given: Json) -> tuple[Json, str]:
    sides = [given.pop("before"), given.pop("after")]
    most = given.pop("limit")
    options = [o for p in COMPARISON for o in p.argv(given.pop(p.name))]
    found = commands.run("diff", [*options, "--format=json"], sides)
    answer = answers.diff_answer(found, limit=most)
    return answer, "\n".join(p["verdict"] for p in answer["pairs"]) or "nothing compared"


def info(commands: CommandLines, given: Json) -> tuple[Json, str]:
    found = commands.run("info", ["--format=json"], [given["export"]])
    answer = answers.info_answer(found, offset=given["offset"], limit=given["limit"])
    return answer, f"{answer.get('file')}: step range {answer.get('step_range')}"


EXPORTS = exports_parameter()
SECTION = section_parameter()
OFFSET = offset_parameter()
REQUIRED = inspect.Parameter.empty
ONE_EXPORT = tool_parameter("export", str, REQUIRED, "Absolute path of one export.")

TOOLS = (
    Tool(
        "overview",
        "Start here: where each step's time goes and what to change. Per process (or kind of "
        "step): the headline, step statistics, the first verdicts and the top candidates "
        "(ranked by the step time their fix would save, from a what-if replay), the integrity "
        "notes by code. Under 4 KB; drill down with stage, candidates, kernels, step, what_if.",
        [EXPORTS],
        ANALYSIS,
        overview,
    ),
    Tool(
        "candidates",
        "The ranked candidates of a section, a page of them: stage, bucket (busy or idle), ms "
        "per step, the lever that fits and what it saves, and the verdict sentence.",
        [EXPORTS, SECTION, OFFSET, limit_parameter(10)],
        ANALYSIS,
        candidates,
    ),
    Tool(
        "stage",
        "One stage: its ledger (GPU busy, waiting in collectives, idle by cause: launch, sync, "
        "queued, api, host; ms per step), launches, syncs and execution mode, its candidates "
        "with verdicts and evidence (top kernels, CUDA calls, longest gaps), its long host gaps.",
        [
            EXPORTS,
            tool_parameter(
                "stage", str, REQUIRED, "A stage's name, as the overview and candidates name it."
            ),
            SECTION,
        ],
        ANALYSIS,
        stage,
    ),
    Tool(
        "step",
        "One step by its index (from 0 on each thread, warm-up included, as --steps and plot's "
        "--step-index count): when it started, its wall, busy and idle time, whether it was "
        "analysed, its ledger by stage and cause, and its longest gaps.",
        [
            EXPORTS,
            tool_parameter("index", Annotated[int, Field(ge=0)], REQUIRED, "The step's index."),
            SECTION,
        ],
        ANALYSIS,
        step,
    ),
    Tool(
        "kernels",
        "The GPU ops of the analysed steps with most GPU time (nsys's cuda_gpu_kern_sum for "
        "those steps), of one stage or all, a page: per step count and ms, mean, p50, p90.",
        [
            EXPORTS,
            tool_parameter("stage", str | None, None, "Only this stage's ops (default: all)."),
            SECTION,
            OFFSET,
            limit_parameter(20),
        ],
        ANALYSIS,
        kernels,
    ),
    Tool(
        "what_if",
        "Predict the step with levers pulled on the replayed steps, e.g. "
        "'verify_forward=graph,sample=nosync' (graph, nogaps, host50 or hostN, nohost, nosync, noapi, "
        "ontime, gpuN with N 1-99, sol; docs/what-if.md): the predicted step and its ledger.",
        [
            ONE_EXPORT,
            tool_parameter("levers", str, REQUIRED, "STAGE=LEVER pairs, comma separated."),
            SECTION,
        ],
        ANALYSIS,
        what_if,
    ),
    Tool(
        "notes",
        "The integrity notes in full: what in the export is missing, damaged or odd, and which "
        "figures it makes unreliable.",
        [EXPORTS, OFFSET, limit_parameter(20)],
        ANALYSIS,
        notes,
    ),
    Tool(
        "diff",
        "Did the fix work? The step-time change with its noise (95 % bootstrap interval), the "
        "machine's drift, and the biggest stage, bucket and candidate changes, BEFORE → AFTER. "
        "Each side is an export or a quoted glob of one run's exports.",
        [
            tool_parameter("before", str, REQUIRED, "Export (or glob) before."),
            tool_parameter("after", str, REQUIRED, "Export (or glob) after."),
            limit_parameter(8),
        ],
        COMPARISON,
        diff,
    ),
    Tool(
        "info",
        "What an export holds, before any analysis: versions, capture settings, GPUs, threads, "
        "row counts, NVTX ranges (a page, the most frequent first), and the step range the "
        "analysis would take.",
        [ONE_EXPORT, OFFSET, limit_parameter(40)],
        [],
        info,
    ),
)
