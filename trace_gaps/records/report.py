"""The Report and the records of its processes: steps, ledger, candidates and their evidence,
long gaps, graphs, kernels; every type a renderer, a plot or the JSON reads starts here.

Analyses build them (analysis/summary.py, graphs.py, kernels.py; report/candidates.py),
report/build.py assembles the Report, with the words of the findings (report/verdicts.py) and
of the integrity notes (report/notes.py, from records/notes.py's NoteFacts); the JSON is
`asdict` of it and its Schema (render/schema.py) is generated from these classes.
StageSummary, whose fields are the per-stage figures, is declared with their computation in
figures/stage.py; the notes, the what-if, the ranks and the timelines have their records
beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

from trace_gaps import __version__
from trace_gaps.figures.speed_of_light import SpeedOfLight
from trace_gaps.figures.stage import StageSummary, UnexpectedCounts
from trace_gaps.records.notes import Note, UnreliableFigures
from trace_gaps.records.ranks import RanksView
from trace_gaps.records.timeline import StepTimeline
from trace_gaps.records.whatif import Prediction, ReplayCheck
from trace_gaps.vocabulary import DictKeys, IdleCause

SCHEMA_VERSION = 3  # 2: keys renamed to one rule (docs/json.md, "Naming"); 3: notes as records
# Fields (`X | None`, by name) that an option asks for: left out of the JSON where None, not
# null, so that a report without the option is unchanged; optional in the Schema.
OMITTED_WHEN_NONE = frozenset(
    {"kernels", "gpu_metrics", "speed_of_light", "pace", "apart_exports", "index_range"}
)


@dataclass(frozen=True, slots=True)
class Report:
    """The analysis of one export, ready to render."""

    export: ExportSummary
    processes: list[ProcessReport]
    slowest_rank_by_stage: list[SlowestRank]
    notes: list[Note]
    schema_version: int = field(default=SCHEMA_VERSION)
    tool_version: str = field(default=__version__)  # the trace-gaps that wrote it
    timelines: list[StepTimeline] = field(default_factory=list)  # only when asked for
    ranks: RanksView = field(default_factory=lambda: RanksView(None, [], 0, 0))
    other_exports: list[ExportSummary] = field(default_factory=list)  # analysed with `export`
    kinds: list[KindRow] = field(default_factory=list)  # where steps come in several kinds
    # Figures made unreliable by damaged rows (integrity.UNRELIABLE_SHARE): flagged, not dropped.
    unreliable: list[UnreliableFigures] = field(default_factory=list)
    # Of the exports given together, those analysed apart (not of the first one's run:
    # run/alignment.run_apart_reason), each on its own clock; None when every export is one run.
    apart_exports: list[str] | None = None


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One op name's GPU time in one stage, of one kind, over the analysed steps."""

    name: str
    stage: str
    kind: str  # OpKind: kernel, memcpy, memset, graph (a graph-level replay row)
    from_graph: bool  # run by a graph launch (a node of a replay, or the replay itself)
    count: int
    count_per_step: float
    total_ns: int
    ns_per_step: int
    mean_ns: int
    p50_ns: int
    p90_ns: int
    min_ns: int
    max_ns: int
    share_pct: float  # of the process's GPU op time in the analysed steps (the summary's total)


@dataclass(frozen=True, slots=True)
class KernelSummary:
    """The GPU ops of the analysed steps by name, stage and kind, most GPU time first."""

    steps_analysed: int
    count: int  # ops
    total_ns: int  # their GPU time, summed (concurrent ops each count)
    rows: list[KernelRow]


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """Provenance of the export."""

    file: str
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    graph_trace_mode: str
    gpus: list[str]
    trace_start_ns: int  # report timestamps are offsets from this


@dataclass(frozen=True, slots=True)
class KindRow:
    """One kind of step on one thread: how many, how long, what share of the thread's time."""

    pid: int
    kind: str
    steps: int  # analysed
    skipped: int  # as warm-up
    mean_ns: int
    share_pct: float  # of the thread's analysed step time, every kind


@dataclass(frozen=True, slots=True)
class SlowestRank:
    """For a stage present in several processes, the one where it takes longest."""

    stage: str
    pid: int
    ns_per_step: int
    others_ns_per_step: dict[str, int]


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """Everything about one process (rank)."""

    pid: int
    name: str
    headline: str  # one line: step time, GPU busy %, the biggest lever and why
    steps: StepSummary
    ledger: list[LedgerEntry]
    stages: list[StageSummary]
    candidates: list[Candidate]
    long_host_gaps: list[LongGapFinding]  # every stage's, largest first
    graphs: GraphFacts
    step_rows: list[StepRow]
    step_ledger: list[StepLedgerEntry]
    label: str = ""  # "file:pid" when several exports share this pid, else ""
    kind: str = ""  # the kind of step this section analyses, "" where steps have no kinds
    replay: ReplayCheck | None = None  # the what-if replay of unchanged steps vs measured
    what_if: Prediction | None = None  # analyze --what-if: the levers' predicted step
    export_file: str = ""  # the export it comes from, when the report has several; else ""
    kernels: KernelSummary | None = None  # analyze --kernels; left out of the JSON when None
    # GPU metrics captured: the step's speed of light; left out of the JSON when None
    speed_of_light: SpeedOfLight | None = None
    # A run-ahead loop: whether its host or its GPU sets the step; left out when None
    pace: Pace | None = None


@dataclass(frozen=True, slots=True)
class Pace:
    """A loop whose host runs ahead of the GPU (it waits for the step before's work, not its
    own): host and GPU overlap, and the slower of the two sets the step (whatif.pace_of)."""

    paced_by: str  # "host" (it hardly ever waits in a sync) or "gpu" (the host waits for it)
    host_ns_per_step: int  # the step thread's host code and CUDA calls, syncs left out
    sync_ns_per_step: int  # the step thread's time waiting in syncs
    gpu_busy_ns_per_step: int  # the ledger's GPU busy time
    host_by_stage_ns_per_step: dict[str, int]  # host_ns_per_step by stage, the largest three


@dataclass(frozen=True, slots=True)
class StepSummary:
    """Which range is the step, how many were analysed and skipped, and their wall time."""

    name: str | None
    reason: StepChoice
    steps_analysed: int
    steps_skipped: int
    # SkipReason code (never ANALYSED's): steps skipped for it
    skip_reasons: Annotated[dict[str, int], DictKeys(r for r in SkipReason if r)]
    threads: int
    wall: WallStats
    index_range: str | None = None  # --steps A:B as normalised ("3:6"); None without


class StepFound(StrEnum):
    """How the step range was found (its words: report/step_reasons.py)."""

    GIVEN = "given"  # named with --step
    MOST_FREQUENT = "most_frequent"  # the most frequent repeating outer range (or family)
    CYCLE = "cycle"  # no range encloses an iteration: the cycle of repeating sibling ranges
    NONE = "none"  # no step range: each process is one step spanning its GPU work


class SkipReason(StrEnum):
    """Why a step is skipped, "" where it is analysed (words: report/step_reasons.py).

    The codes sort as their words do, so that a report lists them in the same order."""

    ANALYSED = ""
    GIVEN_SKIP = "given_skip"  # among the first N of its thread, --skip N
    LOADS_MODULES = "loads_modules"  # warm-up: it loads CUDA modules
    LONGER_THAN_MEDIAN = "longer_than_median"  # warm-up: WARMUP_LENGTH_FACTOR x the median
    OUTSIDE_STEPS = "outside_steps"  # its index is outside --steps A:B


@dataclass(frozen=True, slots=True)
class StepChoice:
    """How the step range was chosen: a code, and the numbers its words are written from."""

    code: StepFound
    instances: int = 0  # ranges (cycles) found of the step range
    names: int = 0  # the distinct range names among them (several: a family)
    also_repeating: list[str] = field(default_factory=list)  # a cycle's next repeating ranges


@dataclass(frozen=True, slots=True)
class WallStats:
    """Step wall time over the analysed steps."""

    mean_ns: int
    p50_ns: int
    p90_ns: int
    max_ns: int
    min_ns: int


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """Mean ns per analysed step charged to one (stage, bucket, cause)."""

    stage: str
    bucket: str
    cause: str | None
    ns_per_step: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (stage, bucket) and the time per step it explains."""

    rank: int
    stage: str
    bucket: str
    ns_per_step: int
    share_fraction: float
    kind: str  # VerdictKind
    lever_ns_per_step: int  # the time per step the verdict's cause explains
    why: str  # the verdict's reason in one clause (the headline's)
    verdict: str
    evidence: Evidence
    lever: str = ""  # the what-if lever it is priced with (whatif.choose_lever), "" when none
    predicted_step_ns: int | None = None  # the mean step with that lever pulled (replay.py)
    saving_ns: int | None = None  # the measured mean step minus predicted_step_ns
    explained_rank: int = 0  # its place by the time it explains (rank is by saving)


@dataclass(frozen=True, slots=True)
class Evidence:
    """The facts beside a candidate."""

    idle_by_cause_ns_per_step: Annotated[dict[str, int], DictKeys(IdleCause)]
    launches_per_step: float
    syncs_per_step: float
    host_ns_per_launch: int | None  # short-gap host time per launch (long gaps left out)
    top_kernels: list[KernelShare]
    top_api_calls: list[CallShare]
    longest_gaps: list[GapEvidence]
    unexpected_calls_per_step: UnexpectedCounts
    host_blocked_in: list[CallShare] = field(default_factory=list)  # OS calls during idle host time
    long_host_gaps: list[LongGapFinding] = field(
        default_factory=list
    )  # this stage's, largest first
    long_gap_idle_ns_per_step: int = 0  # GPU-idle host time inside all of this stage's long gaps


@dataclass(frozen=True, slots=True)
class KernelShare:
    """An op name's GPU time in a stage, with the part a collective waited for a peer.

    The ledger splits a collective the same way: its wait is the wait bucket's, the rest
    (transfer and compute) the busy bucket's.
    """

    name: str
    ns_per_step: int  # all of its time
    count_per_step: float
    wait_ns_per_step: int = 0  # the part waiting for a peer; 0 for an op that is no collective

    @property
    def running_ns_per_step(self) -> int:
        """The part not waiting: what it holds of its stage's busy bucket."""
        return self.ns_per_step - self.wait_ns_per_step


@dataclass(frozen=True, slots=True)
class CallShare:
    """A CUDA API name's host time in a stage."""

    name: str
    ns_per_step: int
    count_per_step: float


@dataclass(frozen=True, slots=True)
class GapEvidence:
    """One idle run, as an offset from the trace start."""

    step_index: int
    start_offset_ns: int
    duration_ns: int
    cause: str


@dataclass(frozen=True, slots=True)
class LongGapFinding:
    """Long host gaps of one stage that share a pattern, per analysed step.

    The pattern: the CUDA call before and after each gap ("" for the step's start or end)
    and the OS calls inside it (names, sorted).
    """

    stage: str
    call_before: str
    call_after: str
    os_calls: list[str]
    nvtx_path: list[str]  # the ranges open where the longest of them starts, outermost first
    gaps_per_step: float
    ns_per_step: int  # their length
    idle_ns_per_step: int  # the GPU-idle host time inside them: what the ledger charges
    os_ns_per_step: int  # the time inside OS calls in them (outermost calls only)
    typical_ns: int  # median length
    longest_ns: int
    ends_in_code_load: bool  # the call after loads or builds code (cuLibraryLoadData, ...)


@dataclass(frozen=True, slots=True)
class GraphFacts:
    """A process's CUDA graphs: captures, instantiations, graph events and replays."""

    captures: list[GraphCapture]
    instantiations: int
    graph_events: int  # CUDA_GRAPH_EVENTS rows of the process (graphs created, cloned, ...)
    replays_per_step: float  # graph launches per analysed step, all stages
    unmatched_captures: int  # captures no analysed stage matches: stated at process level


@dataclass(frozen=True, slots=True)
class GraphCapture:
    """One stream capture: cudaStreamBeginCapture … EndCapture on one thread."""

    thread: int
    begin_offset_ns: int  # BeginCapture's start, from the trace start
    duration_ns: int  # from BeginCapture's start to EndCapture's end
    nvtx_path: list[str]  # ranges open at BeginCapture, outermost first
    stage: str | None  # the stage it belongs to (match_stage); None: no stage matches
    instantiations: int  # instantiate calls on the thread after it, before the next capture
    node_count: int | None  # CUDA_GRAPH_NODE_EVENTS rows on the thread during it; None: no table
    replays_per_step: float | None  # graph launches/step of its stage; 0 when none in the process


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step (analysed or warm-up) and its ledger by stage and bucket."""

    step_id: int
    thread: int
    step_index: int
    start_offset_ns: int
    wall_ns: int
    is_warmup: bool
    skip_reason: str
    busy_ns: int
    idle_ns: int
    wait_ns: int = 0  # GPU held by collectives waiting for a peer


@dataclass(frozen=True, slots=True)
class StepLedgerEntry:
    """ns of one step charged to one (stage, bucket, cause)."""

    step_id: int
    stage: str
    bucket: str
    cause: str | None
    duration_ns: int

    def __reduce__(self) -> tuple[type[StepLedgerEntry], tuple[int, str, str, str | None, int]]:
        # Pickled as its fields, in order (a diff's side sends a report of ~25 per step):
        # 2.6x faster to load than the dataclass default, which looks up its fields each time.
        fields = (self.step_id, self.stage, self.bucket, self.cause, self.duration_ns)
        return StepLedgerEntry, fields


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where the numbers come from: the export file and how it was captured."""

    file: str
    size_bytes: int
    sha256: str
    nsys_version: str | None
    trace_gaps_version: str
    capture_settings: list[tuple[str, str]]  # only those privacy.shareable_settings keeps
    command_included: bool = False  # the program's arguments kept (--include-command)
    session_start_utc_ns: int | None = None  # when its capture session started (epoch ns)
