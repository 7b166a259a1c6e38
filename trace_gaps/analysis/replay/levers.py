"""The levers: what a user's `--what-if STAGE=LEVER` names (Lever, parse_levers), what each
does to a step's model (apply_lever), and whether it changes anything (applies,
not_applicable: a code; report/levers.py puts it in words). docs/what-if.md, "Levers".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from trace_gaps.analysis.replay.codes import (
    API,
    CATEGORY_CODE,
    EAGER_LAUNCHES,
    LAUNCH_GRAPH,
    NO_INDEX,
    OTHER,
    SYNC,
)
from trace_gaps.analysis.replay.model import (
    GRAPH_LAUNCH_NS_PER_NODE,
    GRAPH_NODE_SPACING_NS,
    StepModel,
)
from trace_gaps.model import CallCategory, GraphTraceMode
from trace_gaps.records.whatif import NotApplicable
from trace_gaps.vocabulary import SPECIAL_STAGES

# Host gaps at least this long (and LONG_GAP_FACTOR times the stage's median gap) are long
# host gaps (as in long_gaps.py); a graph keeps them, `nogaps` removes them.
LONG_GAP_MIN_NS = 1_000_000
LONG_GAP_FACTOR = 10

LEVER_KINDS = ("graph", "nogaps", "host50", "nohost", "nosync", "noapi", "ontime", "sol")
_GPU = re.compile(r"^gpu([1-9][0-9]?)$")  # 1-99: gpu0 would change nothing
# hostN: the stage's host time between calls N % shorter (host50 halves it; 1-99: nohost is 100)
HOST_SHARE = re.compile(r"^host([1-9][0-9]?)$")


class LeverError(ValueError):
    """A lever the user asked for that does not exist or does not apply."""


class LeverNotApplicable(LeverError):
    """Levers that change nothing in the steps they are priced on (whatif.predict, strict),
    with why as codes (NotApplicable.reason; report/levers.py says them in words)."""

    def __init__(self, skipped: list[NotApplicable]) -> None:
        super().__init__("; ".join(f"{n.lever}: {n.reason}" for n in skipped))
        self.skipped = skipped


@dataclass(frozen=True, slots=True)
class Lever:
    """One transformation of a stage: graph, nogaps, hostN (its host time between calls N %
    shorter; host50 halves it), nohost, nosync, noapi, ontime, gpuN (its GPU work N %
    faster) or sol (its GPU work down to its speed of light).

    op_scale: what a sol lever scales the stage's ops by, its speed of light over its GPU
    busy time (the report sets it from the stage's GPU metrics); None: not known."""

    stage: str
    kind: str
    op_scale: float | None = None
    pid: int | None = None  # `rank=PID:stage=lever`: that process's steps only; None: all

    @property
    def label(self) -> str:
        rank = f"{RANK_PREFIX}{self.pid}:" if self.pid is not None else ""
        return f"{rank}{self.stage}={self.kind}"

    def of(self, pid: int) -> bool:
        """Whether the lever is pulled on this process's steps."""
        return self.pid is None or self.pid == pid


RANK_PREFIX = "rank="
# The launches of ops other than kernels: a graph holding one starts early (_as_graph).
_COPIES = [
    CATEGORY_CODE[CallCategory.LAUNCH_MEMCPY.value],
    CATEGORY_CODE[CallCategory.LAUNCH_MEMSET.value],
]


def parse_levers(text: str) -> list[Lever]:
    """'verify_forward=graph,sample=nosync' -> levers ('rank=2604:forward=graph': that
    process's steps only); raises LeverError on bad syntax."""
    levers = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        pid = None
        if part.startswith(RANK_PREFIX):
            rank, colon, rest = part[len(RANK_PREFIX) :].partition(":")
            if not colon or not rank.strip().isdigit():
                raise LeverError(f"'{part}' is not rank=PID:STAGE=LEVER (PID a process id)")
            pid, part = int(rank), rest.strip()
        stage, eq, kind = part.rpartition("=")
        kind = kind.strip()
        if not eq or not stage.strip():
            raise LeverError(f"'{part}' is not STAGE=LEVER")
        if kind not in LEVER_KINDS and not _GPU.match(kind) and not HOST_SHARE.match(kind):
            raise LeverError(
                f"unknown lever '{kind}' in '{part}': use one of {', '.join(LEVER_KINDS)}, "
                "hostN (host code N % shorter) or gpuN (GPU work N % faster), N 1-99"
            )
        levers.append(Lever(stage.strip(), kind, pid=pid))
    if not levers:
        raise LeverError("no lever given: STAGE=LEVER[,STAGE=LEVER...]")
    return levers


def applies(model: StepModel, code: int, kind: str) -> bool:
    """Whether a lever changes anything in this step (its stage has what it removes)."""
    calls_here = model.call_stage == code
    if kind == "graph":
        here = model.call_category[calls_here]
        return bool(np.isin(here, list(EAGER_LAUNCHES)).any()) and not (here == LAUNCH_GRAPH).any()
    if kind == "nosync":
        return bool((model.call_category[calls_here] == SYNC).any())
    if kind == "noapi":
        return bool(np.isin(model.call_category[calls_here], list(API)).any())
    if kind == "ontime":
        return bool((model.op_wait_ns[model.op_stage == code] > 0).any())
    if kind == "nogaps":
        return bool(_long_gap(model, code).any())
    if kind == "nohost" or HOST_SHARE.match(kind):
        return bool((model.item_ns[model.item_stage == code] > 0).any())
    return bool((model.op_stage == code).any())  # gpuN, sol


def apply_lever(
    model: StepModel,
    code: int,
    kind: str,
    mode: GraphTraceMode,
    *,
    op_scale: float | None = None,
) -> StepModel:
    """The model with one lever pulled on the stage of this code (op_scale: a sol lever's,
    Lever.op_scale)."""
    if kind == "graph":
        return _as_graph(model, code, mode)
    if kind in ("nogaps", "nohost") or HOST_SHARE.match(kind):
        return _less_host(model, code, kind)
    if kind == "nosync":
        return _without_calls(model, code, model.call_category == SYNC, keep_ops=True)
    if kind == "noapi":
        return _without_calls(model, code, np.isin(model.call_category, list(API)), keep_ops=True)
    if kind == "ontime":
        return on_time(model, model.op_stage == code)
    if kind == "sol":
        if op_scale is None:
            raise LeverError("sol needs the stage's speed of light (GPU metrics)")
        # The running part of each op scales; a collective's wait for a peer is not GPU work.
        here = model.op_stage == code
        running = model.op_ns - model.op_wait_ns
        scaled = model.op_wait_ns + np.round(running * min(op_scale, 1.0)).astype(np.int64)
        return replace(model, op_ns=np.where(here, scaled, model.op_ns))
    match = _GPU.match(kind)
    if match is None:
        raise LeverError(f"unknown lever '{kind}'")
    faster = int(match.group(1))
    here = model.op_stage == code
    scaled = (model.op_ns * (100 - faster) + 50) // 100
    return replace(model, op_ns=np.where(here, scaled, model.op_ns))


def on_time(model: StepModel, here: np.ndarray) -> StepModel:
    """The step with the collective waits for a peer of the ops `here` taken out (the
    `ontime` lever on a stage; on every op, a rank's own pace: diff/drift.py)."""
    return replace(
        model,
        op_ns=np.where(here, model.op_ns - model.op_wait_ns, model.op_ns),
        op_wait_ns=np.where(here, 0, model.op_wait_ns),
        op_peer_at=np.where(here, NO_INDEX, model.op_peer_at),
    )


def _long_gap(model: StepModel, code: int) -> np.ndarray:
    """Per item: a long host gap of this stage."""
    gaps = (model.item_call < 0) & (model.item_stage == code) & (model.item_ns > 0)
    median = int(np.median(model.item_ns[gaps])) if gaps.any() else 0
    threshold = max(LONG_GAP_MIN_NS, LONG_GAP_FACTOR * median)
    long: np.ndarray = gaps & (model.item_ns >= threshold)
    return long


def _less_host(model: StepModel, code: int, kind: str) -> StepModel:
    gaps = (model.item_call < 0) & (model.item_stage == code)
    if kind == "nogaps":
        long = _long_gap(model, code)
        median = int(np.median(model.item_ns[gaps & ~long])) if (gaps & ~long).any() else 0
        item_ns = np.where(long, median, model.item_ns)
    elif found := HOST_SHARE.match(kind):
        kept = 100 - int(found.group(1))
        item_ns = np.where(gaps, model.item_ns * kept // 100, model.item_ns)
    else:
        item_ns = np.where(gaps, 0, model.item_ns)
    return replace(model, item_ns=item_ns.astype(np.int64))


def _without_calls(model: StepModel, code: int, which: np.ndarray, keep_ops: bool) -> StepModel:
    """Calls of the stage in `which` cost nothing and wait for nothing; a blocking copy
    among them still launches its op (as an async copy would)."""
    gone = which & (model.call_stage == code)
    return replace(
        model,
        call_ns=np.where(gone, 0, model.call_ns),
        call_category=np.where(gone, OTHER, model.call_category).astype(np.int8),
        call_waits_for=np.where(gone, NO_INDEX, model.call_waits_for).astype(np.int32),
        call_tail_ns=np.where(gone, 0, model.call_tail_ns),
        call_cuts_graph=model.call_cuts_graph & ~gone,
    )


def _as_graph(model: StepModel, code: int, mode: GraphTraceMode) -> StepModel:
    """The stage's eager launches become graph launches: one per run of its launches with
    neither another stage's time nor a sync the host blocks in between them (a graph
    cannot hold the sync, whose wait stays; one instance of a stage that recurs in the step,
    an op-level range, is a run of its own: its ops depend on the other stages' between),
    at the first launch of the run. The host time between a run's launches goes (long
    host gaps stay); the time around a sync stays. A launch costs GRAPH_LAUNCH_NS_PER_NODE a
    node, and no less than one of the launches it replaces; its ops run as graph nodes when
    the call returns (EARLY_GRAPH_FIRST_PCT into it for a graph holding a copy, a memset or
    a collective kernel), GRAPH_NODE_SPACING_NS apart."""
    eager = np.isin(model.call_category, list(EAGER_LAUNCHES)) & (model.call_stage == code)
    launches = np.flatnonzero(eager)
    if not len(launches):
        return model
    per_node = GRAPH_LAUNCH_NS_PER_NODE.get(mode, GRAPH_LAUNCH_NS_PER_NODE[GraphTraceMode.NODE])
    item_of_call = np.full(len(model.call_ns), NO_INDEX, dtype=np.int64)
    calls_at = np.flatnonzero(model.item_call >= 0)
    item_of_call[model.item_call[calls_at]] = calls_at
    # A run: the launches after the same number of breaks (another stage's item, a sync).
    cuts = np.zeros(len(model.item_call), dtype=bool)
    cuts[calls_at] = model.call_cuts_graph[model.item_call[calls_at]]
    run_of = np.cumsum((model.item_stage != code) | cuts)[item_of_call[launches]]
    call_ns = model.call_ns.copy()
    call_ns[launches] = 0
    category = model.call_category.copy()
    category[launches] = OTHER
    op_call = model.op_call.copy()
    span = np.zeros(len(model.item_call), dtype=bool)
    firsts, early = [], []
    for run in np.unique(run_of):
        members = launches[run_of == run]
        first = int(members[0])
        ops = np.isin(model.op_call, members)
        op_call[ops] = first
        # No cheaper than one of the launches it replaces: a graph of one kernel is launched
        # like the kernel (an assumption; the captures hold no graph of a few nodes).
        one_launch = int(model.call_ns[members].mean())
        call_ns[first] = max(per_node * max(int(ops.sum()), 1), one_launch)
        category[first] = LAUNCH_GRAPH
        span[item_of_call[first] : item_of_call[members[-1]] + 1] = True
        firsts.append(first)
        # A graph of more than kernels (a copy, a memset, a collective) starts its first
        # node early in its launch call (model.EARLY_GRAPH_FIRST_PCT).
        if np.isin(model.call_category[members], _COPIES).any() or model.op_collective[ops].any():
            early.append(first)
    # The host time between a run's launches goes, but for long gaps: the dispatch that a
    # graph removes.
    between = span & (model.item_call < 0) & (model.item_stage == code)
    item_ns = np.where(between & ~_long_gap(model, code), 0, model.item_ns)
    graphed = np.isin(model.op_call, launches)
    has_graphs = bool(model.op_graph.any())
    return replace(
        model,
        item_ns=item_ns.astype(np.int64),
        call_ns=call_ns,
        call_category=category,
        op_call=op_call.astype(np.int32),
        op_graph=model.op_graph | graphed,
        op_gap=np.where(graphed, NO_INDEX, model.op_gap),
        lever_graphs=model.lever_graphs | frozenset(firsts),
        early_graphs=model.early_graphs | frozenset(early),
        graph_spacing_ns=model.graph_spacing_ns if has_graphs else GRAPH_NODE_SPACING_NS,
    )


def present_stages(names: tuple[str, ...], models: list[StepModel]) -> list[str]:
    """The stages of these steps that a lever can name, sorted."""
    return sorted(
        {
            names[int(c)]
            for m in models
            for c in np.unique(np.r_[m.call_stage, m.op_stage, m.item_stage])
            if 0 <= int(c) < len(names) and names[int(c)] not in SPECIAL_STAGES
        }
    )


def not_applicable(
    lever: Lever, names: tuple[str, ...], models: list[StepModel], *, speeds_known: bool = True
) -> NotApplicable | None:
    """Why the lever changes nothing in these steps, or None when it does. speeds_known
    False: a sol lever is checked for its stage's GPU ops only (the report gives it its
    stage's speed of light, per process, later)."""
    if lever.pid is not None:
        models = [m for m in models if m.pid == lever.pid]
        if not models:
            return NotApplicable(lever.label, lever.stage, lever.kind, "other_rank")
    if lever.stage not in present_stages(names, models):
        return NotApplicable(lever.label, lever.stage, lever.kind, "no_stage")
    if lever.kind == "sol" and lever.op_scale is None and speeds_known:
        return NotApplicable(lever.label, lever.stage, lever.kind, "no_gpu_metrics")
    code = names.index(lever.stage)
    at_limit = lever.kind == "sol" and lever.op_scale is not None and lever.op_scale >= 1
    if at_limit or not any(applies(m, code, lever.kind) for m in models):
        return NotApplicable(lever.label, lever.stage, lever.kind, "nothing_to_change")
    return None
