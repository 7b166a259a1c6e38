"""The machine's drift between a diff's two sides, told apart from the code's change.

Two captures of unchanged code differ mostly by the machine: six captures in a row of one
synchronous decode on an H100 ran 1.83 to 2.22 ms/step, the host's launch path taking up to
×1.9 as long in one as in another (docs/diff.md, "The machine and the code"). So each side's
speed is measured on what the code change did not touch:

- the **host**: host time per launch (between CUDA calls, and inside calls but syncs, which
  wait for the GPU) of each stage that launches GPU work and launches as much per step on
  both sides (within SAME_COUNT_FRACTION), after ÷ before. Stages that launch nothing are
  not measured (their host time may be a timer, a sleep or a spin) and not scaled;
- the **GPU**: each op's place in its stage (the k-th op a step launches in the stage) where
  the stage launches as many ops in every step of both sides, its mean duration after ÷
  before; the same op by place, not by name, as a wider MLP's elementwise kernels share
  their names with the unchanged attention's. Where fewer than MIN_PARTS places compare,
  the mean duration of each op name with as many ops per step on both sides (within
  SAME_COUNT_FRACTION), after ÷ before.

Each is the parts' time together, after ÷ before (weighted by the before's time), held to
what most parts agree on (agreed_ratio): within the middle half of the parts' own ratios
(25th to 75th percentile, the lower and the higher value), and none where that middle half
holds 1 (the parts disagree on the direction); not measured with fewer than MIN_PARTS parts
(one stage or one kernel cannot tell the machine from the code). A code change that slows one
stage of several, or a few kernels, stays the code's; one that slows most of them is taken
for the machine.

The machine's part of the step change is the before side's replayed steps (what-if replay,
analysis/replay/) replayed again at the after side's host and GPU speed, less the plain
replay; the code's part is the rest. Facts only; the words are in render/diff.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.metrics import OP_DURATIONS, REPLAY_MODELS
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.kernels import DURATION_NS, OPS
from trace_gaps.analysis.replay.codes import EAGER_LAUNCHES, LAUNCH_GRAPH, SYNC
from trace_gaps.analysis.replay.levers import on_time
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import replay
from trace_gaps.analysis.replay.whatif import ends, models_of, steady_wall
from trace_gaps.diff.changes import NsInterval, PctInterval, WallChange
from trace_gaps.model import NAME, PID
from trace_gaps.records.report import ProcessReport, Report

# With one capture a side the run-to-run noise is unknown; this many a side (diff --repeats)
# give a t interval over the runs with 4 degrees of freedom (t = 2.78, not 12.7 for 2 + 1).
CAPTURES_TO_SETTLE = 3

# A speed is measured on at least this many parts (stages, op names) that agree.
MIN_PARTS = 2

# The call categories that launch GPU work (bench_whatif scales the same stages).
LAUNCHES = np.array(sorted(EAGER_LAUNCHES | {LAUNCH_GRAPH}), dtype=np.int8)
# Launches (or ops) per step are "as many" on both sides when they differ by at most this
# share (an eager speculative decode launched 324.0 and 323.93 per step in two runs).
SAME_COUNT_FRACTION = 0.01


@dataclass(frozen=True, slots=True)
class ProcessSpeed:
    """What one process of one side is measured at: per stage, launches and host time per
    step (its replayed steps); per op name, ops per step and mean duration (its analysed
    ops). The before side keeps its replay models, to replay at the after side's speed."""

    pid: int
    launches_per_step: dict[str, float]
    host_ns_per_step: dict[str, float]
    ops_per_step: dict[str, float]
    op_mean_ns: dict[str, float]
    # Per stage that launches as many ops in every step: each place's mean duration.
    op_places_ns: dict[str, np.ndarray]
    models: tuple[StepModel, ...] = ()
    stage_names: tuple[str, ...] = ()


# A side's speeds per process: (its export's file where the side has several exports, as
# ProcessReport.export_file names it, else ""; its pid).
SideSpeeds = dict[tuple[str, int], ProcessSpeed]


def speed_of(speeds: SideSpeeds, process: ProcessReport) -> ProcessSpeed | None:
    """The measured speed of a side's process, or None."""
    return speeds.get((process.export_file, process.pid))


@dataclass(frozen=True, slots=True)
class HostSpeed:
    """The host's speed after against before, on the stages that launch as much per step."""

    time_change_pct: float | None  # their host time, after vs before; None: < MIN_PARTS
    stages: list[str]
    before_ns_per_step: int
    after_ns_per_step: int


@dataclass(frozen=True, slots=True)
class GpuSpeed:
    """The GPU's speed after against before: the change of the same ops' durations most of
    them agree on, the ops told by their place in a stage or else by name."""

    time_change_pct: float | None  # None: < MIN_PARTS places or op names compare
    op_names: int  # op names it is measured on (0: measured on places)
    ops_per_step: int  # ops a step it is measured on by place (0: measured on names)
    before_ns_per_step: int  # those ops' time per step
    after_ns_per_step: int


@dataclass(frozen=True, slots=True)
class MachineSplit:
    """The step change split: the machine's part (the before replayed at the after's speeds,
    less the before replayed) and the code's (the rest, with the step bootstrap's interval
    moved by the machine's part)."""

    host: HostSpeed
    gpu: GpuSpeed
    machine_ns: int
    code: WallChange


def measuring(options: AnalysisOptions) -> AnalysisOptions:
    """The options a diff's side is analysed with: every analysed op's duration kept (the
    GPU's speed is measured per op name)."""
    return replace(options, kernel_summary=True)


def compared_steps(report: Report) -> dict[int, list[int]]:
    """Per process of the kind a diff compares (the first kind), its analysed step ids."""
    first_kind = report.processes[0].kind if report.processes else ""
    return {
        process.pid: [row.step_id for row in process.step_rows if not row.is_warmup]
        for process in report.processes
        if process.kind == first_kind
    }


def process_speeds(
    analysis: Analysis, step_ids: dict[int, list[int]], *, keep_models: bool, export_file: str = ""
) -> SideSpeeds:
    """Per pid of step_ids (its analysed steps of the kind compared): its speed figures, keyed
    (export_file, pid)."""
    models = analysis.metrics[REPLAY_MODELS]
    names = tuple(analysis.stage_map.names)
    durations = analysis.metrics[OP_DURATIONS]
    speeds: SideSpeeds = {}
    for pid, ids in step_ids.items():
        wanted = set(ids)
        mine = [m for m in models_of(models, pid) if m.step_id in wanted]
        if not mine or not ids:
            continue
        launches, host = _stage_figures(mine, names)
        ops_per_step, mean_ns = _op_figures(durations, pid, len(ids))
        speeds[export_file, pid] = ProcessSpeed(
            pid=pid,
            launches_per_step=launches,
            host_ns_per_step=host,
            ops_per_step=ops_per_step,
            op_mean_ns=mean_ns,
            op_places_ns=_op_places(mine, names),
            models=tuple(mine) if keep_models else (),
            stage_names=names if keep_models else (),
        )
    return speeds


def _stage_figures(
    models: list[StepModel], names: tuple[str, ...]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per stage with calls or host time: launches per step, and host time per step (host
    gaps, and calls but syncs)."""
    n = len(names)
    launches, host = np.zeros(n), np.zeros(n)
    for m in models:
        gaps = m.item_call < 0
        host += np.bincount(m.item_stage[gaps], weights=m.item_ns[gaps], minlength=n)[:n]
        not_sync = m.call_category != SYNC
        host += np.bincount(m.call_stage[not_sync], weights=m.call_ns[not_sync], minlength=n)[:n]
        launched = np.isin(m.call_category, LAUNCHES)
        launches += np.bincount(m.call_stage[launched], minlength=n)[:n]
    kept = np.flatnonzero((host > 0) | (launches > 0))
    return (
        {names[i]: float(launches[i] / len(models)) for i in kept},
        {names[i]: float(host[i] / len(models)) for i in kept},
    )


def _op_places(models: list[StepModel], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per stage whose steps each launch as many ops: the mean duration of its k-th op (ops
    the step's calls launched, in start order)."""
    per_stage: dict[int, list[np.ndarray]] = {}
    for m in models:
        own = np.flatnonzero(m.op_call >= 0)
        own = own[np.lexsort((m.op_start[own], m.op_stage[own]))]
        stages, firsts = np.unique(m.op_stage[own], return_index=True)
        for stage, ns in zip(stages.tolist(), np.split(m.op_ns[own], firsts[1:]), strict=True):
            per_stage.setdefault(stage, []).append(ns)
    return {
        names[stage]: np.mean(np.vstack(steps), axis=0)
        for stage, steps in per_stage.items()
        if len(steps) == len(models) and len({len(ns) for ns in steps}) == 1
    }


def _op_figures(
    durations: pd.DataFrame, pid: int, steps: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Per op name of the process: ops per analysed step and mean duration."""
    rows = durations[durations[PID].to_numpy() == pid]
    if rows.empty:
        return {}, {}
    ops = rows[OPS].to_numpy(dtype=np.float64)
    grouped = (
        pd.DataFrame(
            {
                NAME: rows[NAME].astype(str).to_numpy(),
                OPS: ops,
                "total": ops * rows[DURATION_NS].to_numpy(dtype=np.float64),
            }
        )
        .groupby(NAME, sort=True)[[OPS, "total"]]
        .sum()
    )
    return (
        dict(zip(grouped.index, (grouped[OPS] / steps).tolist(), strict=True)),
        dict(zip(grouped.index, (grouped["total"] / grouped[OPS]).tolist(), strict=True)),
    )


def _same_count(before: float, after: float) -> bool:
    return before > 0 and abs(after - before) <= SAME_COUNT_FRACTION * before


def agreed_ratio(before_ns: list[float], after_ns: list[float]) -> float | None:
    """The parts' time after ÷ before, held to what most parts agree on (module docstring):
    1 where the middle half of their own ratios holds 1, else the whole's ratio within that
    middle half; None with fewer than MIN_PARTS parts."""
    if len(before_ns) < MIN_PARTS:
        return None
    ratios = [a / b for a, b in zip(after_ns, before_ns, strict=True)]
    low = float(np.percentile(ratios, 25, method="lower"))
    high = float(np.percentile(ratios, 75, method="higher"))
    if low <= 1 <= high:
        return 1.0
    return float(np.clip(sum(after_ns) / sum(before_ns), low, high))


def host_speed(before: ProcessSpeed, after: ProcessSpeed) -> HostSpeed:
    """Host time of the stages that launch, as many per step on both sides: after vs before,
    the change most of them agree on."""
    stages = sorted(
        stage
        for stage, launches in before.launches_per_step.items()
        if launches > 0
        and before.host_ns_per_step[stage] > 0
        and _same_count(launches, after.launches_per_step.get(stage, 0.0))
    )
    ns_before = [before.host_ns_per_step[s] for s in stages]
    # Host time per launch, after, at the before's launches per step.
    ns_after = [
        after.host_ns_per_step[s] / after.launches_per_step[s] * before.launches_per_step[s]
        for s in stages
    ]
    agreed = agreed_ratio(ns_before, ns_after)
    if agreed is None:
        return HostSpeed(None, [], 0, 0)
    return HostSpeed(
        round(100 * (agreed - 1), 2), stages, round(sum(ns_before)), round(sum(ns_after))
    )


def gpu_speed(before: ProcessSpeed, after: ProcessSpeed) -> GpuSpeed:
    """The change of the same ops' durations most of them agree on (module docstring): by
    place where MIN_PARTS places compare, else by name."""
    places = [
        stage
        for stage, ns in before.op_places_ns.items()
        if len(after.op_places_ns.get(stage, ())) == len(ns)
    ]
    ns_before = [float(x) for s in places for x in before.op_places_ns[s]]
    ns_after = [float(x) for s in places for x in after.op_places_ns[s]]
    agreed = agreed_ratio(ns_before, ns_after)
    if agreed is not None:
        return GpuSpeed(
            round(100 * (agreed - 1), 2),
            0,
            len(ns_before),
            round(sum(ns_before)),
            round(sum(ns_after)),
        )
    names = [
        name
        for name, per_step in before.ops_per_step.items()
        if _same_count(per_step, after.ops_per_step.get(name, 0.0)) and before.op_mean_ns[name] > 0
    ]
    # Each op name's time per step at the before's ops per step.
    ns_before = [before.ops_per_step[n] * before.op_mean_ns[n] for n in names]
    ns_after = [before.ops_per_step[n] * after.op_mean_ns[n] for n in names]
    agreed = agreed_ratio(ns_before, ns_after)
    if agreed is None:
        return GpuSpeed(None, 0, 0, 0, 0)
    return GpuSpeed(
        round(100 * (agreed - 1), 2), len(names), 0, round(sum(ns_before)), round(sum(ns_after))
    )


def ratio(pct: float | None) -> float:
    """The time ratio (after ÷ before) of a time change in percent; 1 where not measured."""
    return 1.0 if pct is None else 1 + pct / 100


def at_speed(
    model: StepModel, host_ratio: float, gpu_ratio: float, stages: frozenset[int] | None = None
) -> StepModel:
    """The step model run by a host `host_ratio` times as slow and a GPU `gpu_ratio` times.

    Host: the host gaps and the calls but syncs of `stages` (codes; None: every stage), and
    the step's launch latency and graph launch-to-first-node time (host-paced: with
    --cuda-graph-trace=node the first node starts as the cudaGraphLaunch call returns;
    without them, unchanged captures differed by up to 6 % after the correction). GPU: every
    op's duration."""
    staged_items = np.ones(len(model.item_ns), dtype=bool)
    staged_calls = np.ones(len(model.call_ns), dtype=bool)
    if stages is not None:
        codes = np.fromiter(stages, dtype=np.int64)
        staged_items = np.isin(model.item_stage, codes)
        staged_calls = np.isin(model.call_stage, codes)
    items = (model.item_call < 0) & staged_items
    calls = (model.call_category != SYNC) & staged_calls
    return replace(
        model,
        item_ns=np.where(items, np.round(model.item_ns * host_ratio), model.item_ns).astype(
            np.int64
        ),
        call_ns=np.where(calls, np.round(model.call_ns * host_ratio), model.call_ns).astype(
            np.int64
        ),
        launch_ns=int(round(model.launch_ns * host_ratio)),
        graph_first_ns=int(round(model.graph_first_ns * host_ratio)),
        op_ns=np.round(model.op_ns * gpu_ratio).astype(np.int64),
    )


def machine_change_ns(before: ProcessSpeed, host: HostSpeed, gpu: GpuSpeed) -> int:
    """The step change the machine explains: the before's replayed steps at the after's
    host speed (on the stages it was measured on) and GPU speed, less their plain replay
    (a run-ahead step no shorter than its GPU work: whatif.steady_wall)."""
    plain, scaled = _walls_at_speed(before, host, gpu, peers_on_time=False)
    return scaled - plain


def own_pace_ns(before: ProcessSpeed, host: HostSpeed, gpu: GpuSpeed) -> tuple[int, int]:
    """A rank's own pace: its before's replayed step with its collectives' waits for peers
    taken out (the `ontime` lever on every stage), plain and at the after's speeds."""
    return _walls_at_speed(before, host, gpu, peers_on_time=True)


def run_machine_ns(paces: list[tuple[int, int]]) -> int:
    """Ranks in lockstep: the machine's part of the run's step change. The run goes at its
    slowest rank's own pace (own_pace_ns: what it would take without waiting for its
    peers), so the change is the slowest own pace at the after's speeds less the slowest
    plain: a rank whose host slowed can take the pace from the one that set it."""
    return max(scaled for _, scaled in paces) - max(plain for plain, _ in paces)


def _walls_at_speed(
    before: ProcessSpeed, host: HostSpeed, gpu: GpuSpeed, *, peers_on_time: bool
) -> tuple[int, int]:
    """The mean of the before's replayed steps, plain and at the after's speeds ((0, 0)
    where neither speed was measured or no model was kept); peers_on_time: with its
    collectives' waits for peers taken out."""
    if not before.models or (host.time_change_pct is None and gpu.time_change_pct is None):
        return 0, 0
    codes = frozenset(before.stage_names.index(s) for s in host.stages)
    plains, scaleds = [], []
    for model in before.models:
        if peers_on_time:
            model = on_time(model, np.ones(len(model.op_ns), dtype=bool))
        plain = replay(model)
        scaled = replay(
            at_speed(model, ratio(host.time_change_pct), ratio(gpu.time_change_pct), codes)
        )
        plains.append(plain.wall_ns)
        scaleds.append(steady_wall(ends(plain), scaled))
    return int(round(float(np.mean(plains)))), int(round(float(np.mean(scaleds))))


def split_change(
    before: ProcessSpeed,
    after: ProcessSpeed,
    wall: WallChange,
    before_mean_ns: float,
    threshold_ns: float,
) -> MachineSplit:
    """The step change `wall` split into the machine's part and the code's; the code's is
    beyond noise when its interval (the step bootstrap's, moved) excludes 0 and it is at
    least threshold_ns."""
    host, gpu = host_speed(before, after), gpu_speed(before, after)
    machine = machine_change_ns(before, host, gpu)
    return MachineSplit(
        host, gpu, machine, code_change(wall, machine, before_mean_ns, threshold_ns)
    )


def code_change(
    wall: WallChange, machine_ns: int, before_mean_ns: float, threshold_ns: float
) -> WallChange:
    """The step change less the machine's part, its interval moved by as much."""
    change = wall.change_ns - machine_ns

    def pct(ns: int) -> float:
        return round(100 * ns / before_mean_ns, 2)

    ci = (
        NsInterval(wall.ci_ns.low_ns - machine_ns, wall.ci_ns.high_ns - machine_ns)
        if wall.ci_ns is not None
        else None
    )
    return WallChange(
        change_ns=change,
        change_pct=pct(change) if before_mean_ns else None,
        ci_ns=ci,
        ci_pct=PctInterval(pct(ci.low_ns), pct(ci.high_ns)) if ci and before_mean_ns else None,
        is_beyond_noise=bool(ci.excludes_zero and abs(change) >= threshold_ns) if ci else None,
    )
