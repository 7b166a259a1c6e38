"""Report: the one object every renderer and plot consumes, built from an Analysis."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import cast

from trace_gaps.analysis.engine.metrics import GPU_METRICS, OP_DURATIONS, REPLAY_MODELS
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
from trace_gaps.analysis.ranks import build_ranks, unsplit_notes
from trace_gaps.analysis.replay.chain import replay_step
from trace_gaps.analysis.replay.joint import JointRun, joint_run
from trace_gaps.analysis.replay.levers import Lever, LeverError, not_applicable, parse_levers
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.whatif import (
    check_replay,
    ends,
    models_of,
    pace_of,
    predict,
    predict_run,
    priced_subset,
)
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, STEP_KIND
from trace_gaps.analysis.summary import (
    busy_ns_per_step,
    graph_facts,
    ledger_entries,
    long_gap_findings,
    process_frames,
    sharing_gpus,
    step_ledger_entries,
    step_rows,
    summarise_stages,
    summarise_steps,
)
from trace_gaps.figures import SpeedOfLight, StageSummary, speed_of_light
from trace_gaps.model import (
    END_NS,
    GLOBAL_TID,
    PID,
    SPECIAL_STAGES,
    START_NS,
    GraphTraceMode,
    Trace,
)
from trace_gaps.parallel import forked_map
from trace_gaps.records import (
    ExportSummary,
    KindRow,
    Prediction,
    ProcessReport,
    RanksView,
    SlowestRank,
)
from trace_gaps.records import Report as Report  # cli.py and bundle.py import it from here
from trace_gaps.report.candidates import assemble_candidates
from trace_gaps.report.findings import Finding
from trace_gaps.report.headline import write_headline
from trace_gaps.report.levers import NO_GPU_METRICS_WORDS, check_levers
from trace_gaps.report.notes import write_note
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
    levers = parse_levers(what_if) if what_if is not None else None
    if levers:
        # A lever need only change some kind's or process's steps; where it changes none,
        # that section's prediction lists it as not applicable.
        sections = [
            (part.stage_map.names, list(part.metrics[REPLAY_MODELS].values()))
            for part in analysis.by_kind()
        ]
        sol = next((lever for lever in levers if lever.kind == "sol"), None)
        if sol is not None and all(
            part.metrics[GPU_METRICS] is None for part in analysis.by_kind()
        ):
            raise LeverError(f"{sol.label} does not apply: {NO_GPU_METRICS_WORDS}")
        # Each process's sol levers get their stages' speeds of light with its stage figures.
        check_levers(
            levers, [(names, models) for names, models in sections if models], speeds_known=False
        )
    trace_start = analysis.trace_start_ns
    if ranks is None:
        ranks = build_ranks(analysis, trace.info.path.name)
    labels = labels or {}
    joint = {id(part): _joint_run(part) for part in analysis.by_kind()}
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
    export = ExportSummary(
        file=trace.info.path.name,
        size_bytes=trace.info.size_bytes,
        nsys_version=trace.info.nsys_version,
        schema_version=trace.info.schema_version,
        graph_trace_mode=trace.info.graph_trace_mode.value,
        gpus=[f"{gpu.device_id}: {gpu.name}" for gpu in trace.info.gpus],
        trace_start_ns=trace_start,
    )
    return Report(
        export=export,
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
    steps = summarise_steps(frames, analysis.selection)
    kind_steps = set(analysis.steps[STEP_ID].tolist())  # a kind's section: its own steps
    models = [m for m in models_of(analysis.metrics[REPLAY_MODELS], pid) if m.step_id in kind_steps]
    names, mode = analysis.stage_map.names, trace.info.graph_trace_mode
    mean_ns = steps.wall.mean_ns
    prices: dict[tuple[str, str], tuple[int, int] | None] = {}
    priced = priced_subset(models)
    base = [ends(replay_step(model)) for model in priced]

    together = joint if joint is not None and pid in joint.pids else None

    def price(pair: tuple[str, str]) -> tuple[int, int] | None:
        try:
            if together is not None:  # ranks in lockstep: what the lever saves the run
                found = predict_run(
                    together, pid, [Lever(*pair)], names, mode, mean_ns, with_ledger=False
                )
            else:
                found = predict(
                    priced,
                    [Lever(*pair)],
                    names,
                    mode,
                    mean_ns,
                    with_ledger=False,
                    base_walls=base,
                )
        except LeverError:
            return None
        return (found.predicted_ns, found.saving_ns)

    def saving(stage: str, lever: str) -> tuple[int, int] | None:
        if (stage, lever) not in prices:
            prices[stage, lever] = price((stage, lever))
        return prices[stage, lever]

    stages = summarise_stages(frames)
    if levers:
        levers = at_speed_of_light(levers, stages)
    findings = long_gap_findings(frames.long_gaps, analysis.range_tree, frames.n)
    graphs = graph_facts(trace, analysis, pid, stages, frames.n)
    waits = next(
        (r for r in ranks.processes if r.pid == pid and r.label == (label or str(pid))), None
    )

    def judge(
        saving: Callable[[str, str], tuple[int, int] | None] | None,
    ) -> list[Finding]:
        return assemble_candidates(
            frames,
            stages,
            findings,
            graphs,
            sharing_gpus(analysis, pid),
            frames.n,
            trace_start,
            top=top,
            waits=waits,
            saving=saving if models else None,
        )

    if models:
        # Every lever the ranking may price (it asks for each one the others do not rule out:
        # all of them when each prices to None), priced at once on forked children.
        asked: list[tuple[str, str]] = []
        judge(lambda stage, lever: asked.append((stage, lever)))
        pairs = list(dict.fromkeys(asked))
        found = forked_map(price, pairs)
        if found is not None:
            prices.update(zip(pairs, found, strict=True))
    judged = judge(saving)
    pace = pace_of(priced, names, mean_ns, busy_ns_per_step(frames))
    candidates = [write_candidate(finding, waits) for finding in judged]
    step_name = analysis.selection.name
    if analysis.kind is not None:
        step_name = f"{step_name} ({kind_label(analysis.kind)} steps)"
    return ProcessReport(
        pid=pid,
        name=trace.processes.get(pid, ""),
        headline=write_headline(
            step_name, steps.wall.mean_ns, busy_ns_per_step(frames), candidates, pace
        ),
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
        replay=check_replay(models) if models else None,
        # The levers priced on the candidates' steps: one lever, one price, in the ranked
        # table, the headline and --what-if.
        what_if=(
            predict_run(together, pid, levers, names, mode, mean_ns, strict=False)
            if together is not None
            else _what_if(models, priced, base, levers, names, mode, mean_ns)
        )
        if levers and models
        else None,
        kernels=kernel_summary(analysis.metrics[OP_DURATIONS], pid, names, steps.steps_analysed)
        if analysis.options.kernel_summary
        else None,
        speed_of_light=_at_the_limits(
            speed_of_light(stages, steps.wall.mean_ns, busy_ns_per_step(frames)),
            stages,
            lambda sols: (
                predict_run(
                    together, pid, sols, names, mode, mean_ns, with_ledger=False, strict=False
                )
                if together is not None
                else _what_if(models, priced, base, sols, names, mode, mean_ns, with_ledger=False)
            ),
            names,
            models,
        ),
        pace=pace,
    )


def _joint_run(analysis: Analysis) -> JointRun | None:
    """The joint replay of the analysis's ranks where they meet at matched collectives, for
    steps that are iterations (a step range or cycle; a whole process as one step is not
    one of a loop's iterations)."""
    if analysis.selection.name is None:
        return None
    steps = analysis.steps[~analysis.steps[IS_WARMUP]]
    means = (steps[END_NS] - steps[START_NS]).groupby(steps[PID]).mean().round()
    return joint_run(
        analysis.metrics[REPLAY_MODELS],
        analysis.collectives,
        {int(cast(int, pid)): int(ns) for pid, ns in means.items()},
    )


def _what_if(
    models: list[StepModel],
    priced: list[StepModel],
    base: list[tuple[int, int]],
    levers: list[Lever],
    names: tuple[str, ...],
    mode: GraphTraceMode,
    mean_ns: int,
    *,
    with_ledger: bool = True,
) -> Prediction:
    """--what-if priced on the candidates' steps (one lever, one price in the ranked table,
    the headline and here), or on every replayed step where a lever changes only steps
    outside them."""
    if any(
        not_applicable(lever, names, priced) is not None
        and not_applicable(lever, names, models) is None
        for lever in levers
    ):
        return predict(models, levers, names, mode, mean_ns, strict=False, with_ledger=with_ledger)
    return predict(
        priced,
        levers,
        names,
        mode,
        mean_ns,
        strict=False,
        base_walls=base,
        with_ledger=with_ledger,
    )


def at_speed_of_light(levers: list[Lever], stages: Sequence[StageSummary]) -> list[Lever]:
    """The levers, each sol lever given what its stage's ops scale by: the stage's speed of
    light over its GPU busy time (left None where the stage has no GPU metrics)."""
    scales = {
        stage.name: stage.gpu_metrics.sol_ns_per_step / stage.busy_ns_per_step
        for stage in stages
        if stage.gpu_metrics is not None and stage.busy_ns_per_step > 0
    }
    return [
        dataclasses.replace(lever, op_scale=scales.get(lever.stage))
        if lever.kind == "sol"
        else lever
        for lever in levers
    ]


def _at_the_limits(
    sol: SpeedOfLight | None,
    stages: Sequence[StageSummary],
    predict_levers: Callable[[list[Lever]], Prediction],
    names: tuple[str, ...],
    models: list[StepModel],
) -> SpeedOfLight | None:
    """The step's speed of light with the step predicted with every stage's GPU work at its
    speed of light (--what-if of every stage's sol lever, priced as --what-if prices it)."""
    if sol is None or not models:
        return sol
    levers = at_speed_of_light(
        [Lever(stage.name, "sol") for stage in stages if stage.name not in SPECIAL_STAGES],
        stages,
    )
    pulled = [lever for lever in levers if not_applicable(lever, names, models) is None]
    if not pulled:
        return sol
    found = predict_levers(pulled)
    return dataclasses.replace(
        sol, predicted_step_ns=found.predicted_ns, levers=[lever.label for lever in pulled]
    )


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
