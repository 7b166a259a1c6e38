"""Report: the one object every renderer and plot consumes, built from an Analysis."""

from __future__ import annotations

from collections.abc import Callable

from trace_gaps.analysis.engine.metrics import OP_DURATIONS
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.integrity import integrity_notes, unreliable_figures
from trace_gaps.analysis.kernels import kernel_summary
from trace_gaps.analysis.kinds import (
    MEAN_NS,
    SHARE_PCT,
    SKIPPED,
    STEPS,
    kind_label,
    ordered_kinds,
)
from trace_gaps.analysis.ranks import build_ranks, sharing_gpus, unsplit_notes
from trace_gaps.analysis.replay.joint import JointRun
from trace_gaps.analysis.replay.levers import Lever
from trace_gaps.analysis.replay.shapes import replay_trust
from trace_gaps.analysis.replay.whatif import (
    pace_of,
)
from trace_gaps.analysis.steps import STEP_KIND
from trace_gaps.analysis.summary import (
    ProcessFrames,
    busy_ns_per_step,
    graph_facts,
    ledger_entries,
    long_gap_findings,
    process_frames,
    step_ledger_entries,
    step_rows,
    summarise_stages,
    summarise_steps,
)
from trace_gaps.figures.speed_of_light import speed_of_light
from trace_gaps.figures.stage import StageSummary
from trace_gaps.model import (
    GLOBAL_TID,
    PID,
    Trace,
)
from trace_gaps.records.ranks import RankSummary, RanksView
from trace_gaps.records.report import (
    ExportSummary,
    GraphFacts,
    KindRow,
    LongGapFinding,
    ProcessReport,
    SlowestRank,
)
from trace_gaps.records.report import Report as Report  # cli.py and bundle.py import it from here
from trace_gaps.report.candidates import assemble_candidates
from trace_gaps.report.findings import Finding
from trace_gaps.report.headline import write_headline
from trace_gaps.report.notes import write_note
from trace_gaps.report.pricing import (
    Price,
    Prices,
    at_speed_of_light,
    at_the_limits,
    checked_levers,
    joint_run_of,
    process_prices,
)
from trace_gaps.report.timeline import build_timelines
from trace_gaps.report.verdicts import write_candidate


def build_report(
    trace: Trace,
    analysis: Analysis,
    *,
    top: int = 10,
    ranks: RanksView | None = None,
    labels: dict[int, str] | None = None,
    step_ledger: bool = True,
    what_if: str | None = None,
) -> Report:
    """Turn an Analysis into per-process ledgers, stage tables, ranked candidates and notes.

    The Report's timelines are those of the steps the analysis picked (the plots' data).
    ranks and labels (pid -> "file:pid") come from multi.py when several exports are one run.
    step_ledger False: the processes' step ledgers are left empty (for analyze's text, md
    and csv, which never print them, and a diff's side, which makes its step bucket
    tables from the analysis instead: side_runner.py).
    what_if: levers ("verify_forward=graph,sample=nosync") to predict for every process;
    raises LeverError when they name no stage of the analysed steps or do not apply.
    """
    levers = checked_levers(what_if, analysis)
    trace_start = analysis.trace_start_ns
    if ranks is None:
        ranks = build_ranks(analysis, trace.info.path.name)
    labels = labels or {}
    joint = {id(part): joint_run_of(part) for part in analysis.by_kind()}
    processes = [
        _process_report(
            trace,
            kind_analysis,
            int(pid),
            trace_start,
            ranks,
            labels.get(int(pid), ""),
            top=top,
            step_ledger=step_ledger,
            levers=levers,
            joint=joint[id(kind_analysis)],
        )
        for pid in sorted(analysis.kinds[PID].unique() if analysis.kind else [])
        or sorted(analysis.steps[PID].unique())
        for kind_analysis in analysis.by_kind()
        if (kind_analysis.steps[PID] == pid).any()
    ]
    return Report(
        export=export_summary(trace, trace_start),
        processes=processes,
        slowest_rank_by_stage=slowest_ranks(processes),
        notes=[
            write_note(facts)
            for facts in integrity_notes(trace, analysis) + unsplit_notes(ranks, analysis, labels)
        ],
        timelines=build_timelines(
            analysis, trace_start_ns=trace_start, top_kinds=_top_kinds(processes)
        ),
        ranks=ranks,
        kinds=kind_rows(analysis),
        unreliable=unreliable_figures(trace.info),
    )


def export_summary(trace: Trace, trace_start_ns: int) -> ExportSummary:
    """What the report says of the export: its file, size, versions, graph mode and GPUs."""
    return ExportSummary(
        file=trace.info.path.name,
        size_bytes=trace.info.size_bytes,
        nsys_version=trace.info.nsys_version,
        schema_version=trace.info.schema_version,
        graph_trace_mode=trace.info.graph_trace_mode.value,
        gpus=[f"{gpu.device_id}: {gpu.name}" for gpu in trace.info.gpus],
        trace_start_ns=trace_start_ns,
    )


def _top_kinds(processes: list[ProcessReport]) -> dict[int, str]:
    """Per pid, the verdict kind of its top candidate (of its first kind of step)."""
    kinds: dict[int, str] = {}
    for process in processes:
        if process.candidates:
            kinds.setdefault(process.pid, process.candidates[0].kind)
    return kinds


def kind_rows(analysis: Analysis) -> list[KindRow]:
    """The kinds table, where steps come in several kinds (first kind first)."""
    if analysis.kind is None:
        return []
    table = analysis.kinds
    order = {kind: i for i, kind in enumerate(ordered_kinds(table))}
    rows = table[table[STEPS] > 0].assign(order=table[STEP_KIND].map(order).fillna(len(order)))
    rows = rows.sort_values([PID, GLOBAL_TID, "order"], kind="stable")
    return [
        KindRow(
            pid=int(row[PID]),
            kind=str(row[STEP_KIND]),
            steps=int(row[STEPS]),
            skipped=int(row[SKIPPED]),
            mean_ns=int(row[MEAN_NS]),
            share_pct=float(row[SHARE_PCT]),
        )
        for _, row in rows.iterrows()
    ]


def _process_report(
    trace: Trace,
    analysis: Analysis,
    pid: int,
    trace_start: int,
    ranks: RanksView,
    label: str,
    *,
    top: int,
    step_ledger: bool,
    levers: list[Lever] | None = None,
    joint: JointRun | None = None,
) -> ProcessReport:
    frames = process_frames(analysis, pid)
    step_range = analysis.options.step_range
    steps = summarise_steps(
        frames, analysis.selection, index_range=step_range.label if step_range else None
    )
    mean_ns = steps.wall.mean_ns
    prices = process_prices(analysis, pid, mean_ns, trace.info.graph_trace_mode, joint)
    stages = summarise_stages(frames)
    if levers:
        levers = at_speed_of_light(levers, stages)
    findings = long_gap_findings(frames.long_gaps, analysis.range_tree, frames.n)
    graphs = graph_facts(trace, analysis, pid, stages, frames.n)
    waits = next(
        (r for r in ranks.processes if r.pid == pid and r.label == (label or str(pid))), None
    )
    pace = pace_of(prices.priced, prices.names, mean_ns, busy_ns_per_step(frames))
    trust = replay_trust(analysis, pid, pace, joint)
    judged = _judged(
        frames,
        stages,
        findings,
        graphs,
        sharing_gpus(analysis, pid),
        trace_start,
        top=top,
        waits=waits,
        # Where no real pair has checked the replay on this shape of step, its savings do
        # not rank the candidates: the time each explains does.
        prices=prices if prices.models and trust.covered else None,
    )
    candidates = [write_candidate(finding, waits) for finding in judged]
    busy_ns = busy_ns_per_step(frames)
    step_name = analysis.selection.name
    if analysis.kind is not None:
        step_name = f"{step_name} ({kind_label(analysis.kind)} steps)"
    replay = trust.checked(prices.models) if prices.models else None
    return ProcessReport(
        pid=pid,
        name=trace.processes.get(pid, ""),
        headline=write_headline(step_name, mean_ns, busy_ns, candidates, pace, replay),
        steps=steps,
        ledger=ledger_entries(frames),
        stages=stages,
        candidates=candidates,
        long_host_gaps=findings,
        graphs=graphs,
        step_rows=step_rows(frames, trace_start),
        step_ledger=step_ledger_entries(frames) if step_ledger else [],
        label=label,
        kind=analysis.kind or "",
        replay=replay,
        # The levers priced on the candidates' steps: one lever, one price, in the ranked
        # table, the headline and --what-if.
        what_if=prices.predict(levers) if levers and prices.models else None,
        kernels=kernel_summary(
            analysis.metrics[OP_DURATIONS], pid, prices.names, steps.steps_analysed
        )
        if analysis.options.kernel_summary
        else None,
        speed_of_light=at_the_limits(speed_of_light(stages, mean_ns, busy_ns), stages, prices),
        pace=pace,
    )


def _judged(
    frames: ProcessFrames,
    stages: list[StageSummary],
    findings: list[LongGapFinding],
    graphs: GraphFacts,
    shared_with: tuple[int, ...],
    trace_start: int,
    *,
    top: int,
    waits: RankSummary | None,
    prices: Prices | None,
) -> list[Finding]:
    """The candidates judged and ranked: by their levers' savings where prices are given (every
    lever the ranking may price is priced at once on forked children first), else by the time
    each explains."""

    def judge(saving: Callable[[str, str], Price | None] | None) -> list[Finding]:
        return assemble_candidates(
            frames,
            stages,
            findings,
            graphs,
            shared_with,
            frames.n,
            trace_start,
            top=top,
            waits=waits,
            saving=saving,
        )

    if prices is None:
        return judge(None)
    # Every lever the ranking may price (it asks for each one the others do not rule out:
    # all of them when each prices to None).
    asked: list[tuple[str, str]] = []
    judge(lambda stage, lever: asked.append((stage, lever)))
    prices.price_at_once(list(dict.fromkeys(asked)))
    return judge(prices.saving)


def slowest_ranks(processes: list[ProcessReport]) -> list[SlowestRank]:
    """For each stage present in several processes, the process where it takes longest."""
    # Kinds are compared within a kind: the first kind's sections (decode where there is one).
    processes = [p for p in processes if p.kind == processes[0].kind] if processes else []
    if len(processes) < 2:
        return []
    per_stage: dict[str, dict[int, int]] = {}
    for process in processes:
        for stage in process.stages:
            total = stage.busy_ns_per_step + stage.idle_ns_per_step
            if total:
                per_stage.setdefault(stage.name, {})[process.pid] = total
    slowest = []
    for stage_name, by_pid in sorted(per_stage.items()):
        if len(by_pid) < 2:
            continue
        pid = max(sorted(by_pid), key=lambda p: by_pid[p])
        others = {str(p): v for p, v in sorted(by_pid.items()) if p != pid}
        slowest.append(SlowestRank(stage_name, pid, by_pid[pid], others))
    return slowest
