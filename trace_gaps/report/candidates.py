"""The candidates of one process: (stage, busy|idle) ranked by the time per step each explains,
each with its evidence and judgement (findings.py), then by the saving its lever predicts
(analysis/replay/whatif.py); their words are written by verdicts.py when the report is built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from trace_gaps.analysis.ledger import BUCKET, CAUSE
from trace_gaps.analysis.long_gaps import LONG_GAP_MIN_NS
from trace_gaps.analysis.replay.whatif import choose_lever
from trace_gaps.analysis.steps import STEP_ID, STEP_INDEX
from trace_gaps.analysis.summary import UNSPLIT_SHARE_OF_STEP, ProcessFrames, frame_rows
from trace_gaps.figures.inputs import StageInputs
from trace_gaps.figures.stage import StageSummary, StepValue, Total, summarise_stage
from trace_gaps.model import END_NS, NAME, START_NS
from trace_gaps.records.ranks import RankSummary
from trace_gaps.records.report import (
    CallShare,
    Candidate,
    Evidence,
    GapEvidence,
    GraphFacts,
    KernelShare,
    LongGapFinding,
)
from trace_gaps.report.findings import Finding, Judgement, StageFacts, judge
from trace_gaps.vocabulary import CAUSE_ORDER, Bucket, IdleCause, VerdictKind


def idle_split(ledger_means: pd.DataFrame, stage: str) -> dict[str, int]:
    """Per cause, the idle ns per step charged to a stage (every cause present, zero or not)."""
    rows = ledger_means[
        (ledger_means["stage"] == stage) & (ledger_means[BUCKET] == Bucket.IDLE.value)
    ]
    by_cause = rows.groupby(CAUSE)["ns_per_step"].sum()
    return {cause.value: int(by_cause.get(cause.value, 0)) for cause in CAUSE_ORDER}


def rank_candidates(ledger_means: pd.DataFrame, *, wall_mean_ns: int) -> pd.DataFrame:
    """One row per (stage, bucket) with ns_per_step and share, largest first."""
    grouped = ledger_means.groupby(["stage", BUCKET], sort=False)["ns_per_step"].sum().reset_index()
    grouped = grouped[grouped["ns_per_step"] > 0]
    grouped = grouped.sort_values(
        ["ns_per_step", "stage", BUCKET], ascending=[False, True, True], kind="stable"
    )
    share = grouped["ns_per_step"] / wall_mean_ns if wall_mean_ns else 0.0
    return grouped.assign(share=share, rank=np.arange(1, len(grouped) + 1)).reset_index(drop=True)


def host_ns_per_launch(
    split: dict[str, int], launches_per_step: float, long_gap_idle_ns: int = 0
) -> int | None:
    """Idle host time in the short gaps between calls (long gaps left out), per launch (None
    without launches)."""
    if launches_per_step <= 0:
        return None
    short = max(split[IdleCause.HOST.value] - long_gap_idle_ns, 0)
    return int(round(short / launches_per_step))


def assemble_candidates(
    frames: ProcessFrames,
    stages: list[StageSummary],
    findings: list[LongGapFinding],
    graphs: GraphFacts,
    shared_with: tuple[int, ...],
    n: int,
    trace_start: int,
    *,
    top: int,
    waits: RankSummary | None = None,
    saving: Callable[[str, str], tuple[int, int] | None] | None = None,
) -> list[Finding]:
    """Rank the (stage, bucket) candidates and give each its evidence and judgement (its
    kind and the time its cause explains); write_candidate puts it in words.

    saving(stage, lever) -> (predicted step ns, saving ns) or None (whatif.py): each
    candidate gets the lever that fits its kind and what pulling it saves; they are then
    ranked by that saving (ties: by the time explained), and the first `top` kept. Not for
    a process whose missing peers decide its levers (UnsplitCollectives.peers_decide_levers).
    """
    if waits is not None and waits.unsplit is not None and waits.unsplit.peers_decide_levers:
        # This process waits for ranks whose exports are missing: a lever that makes it
        # faster saves the run only what they let it (docs/what-if.md, "One rank's export
        # alone"), so the candidates are ranked by the time they explain.
        saving = None
    by_name = {stage.name: stage for stage in stages}
    step_index = frames.steps.set_index(STEP_ID)[STEP_INDEX]
    wall_mean = (
        int(round((frames.analysed[END_NS] - frames.analysed[START_NS]).sum() / n)) if n else 0
    )
    judged = []
    ranked = rank_candidates(frames.means, wall_mean_ns=wall_mean)
    if saving is None:
        ranked = ranked.head(top)
    for rank, stage, bucket, ns_per_step, share in frame_rows(
        ranked, "rank", "stage", BUCKET, "ns_per_step", "share"
    ):
        summary = by_name.get(stage)
        evidence = _evidence(frames, stage, bucket, summary, findings, step_index, trace_start)
        captured_here = tuple(
            " > ".join(c.nvtx_path) + (f", {c.node_count} nodes" if c.node_count else "")
            for c in graphs.captures
            if c.stage == stage
        )
        facts = _stage_facts(summary, captured_here, shared_with)
        unsplit_ns = _unsplit_collective_ns(evidence, waits) if bucket == Bucket.BUSY.value else 0
        judgement = (
            Judgement(VerdictKind.WAITING_FOR_PEER, int(ns_per_step))
            if bucket == Bucket.WAIT.value
            else Judgement(VerdictKind.COLLECTIVE_UNSPLIT, min(unsplit_ns, int(ns_per_step)))
            if waits is not None
            and waits.unsplit is not None
            and unsplit_ns >= UNSPLIT_SHARE_OF_STEP * wall_mean
            else judge(bucket, int(ns_per_step), evidence, facts)
        )
        candidate = Candidate(
            rank=int(rank),
            stage=stage,
            bucket=bucket,
            ns_per_step=int(ns_per_step),
            share_fraction=round(float(share), 4),
            kind=judgement.kind.value,
            lever_ns_per_step=judgement.lever_ns_per_step,
            why="",
            verdict="",
            evidence=evidence,
            explained_rank=int(rank),
        )
        judged.append(Finding(candidate, judgement, facts, unsplit_ns))
    if saving is None:
        return judged
    return rank_by_saving(judged, by_name, saving, top)


def _evidence(
    frames: ProcessFrames,
    stage: str,
    bucket: str,
    summary: StageSummary | None,
    findings: list[LongGapFinding],
    step_index: pd.Series,
    trace_start: int,
) -> Evidence:
    """What a (stage, bucket) candidate is made of: its idle causes, launches and syncs, top
    kernels and calls, longest gaps, unexpected calls and OS calls, per analysed step."""
    n = frames.n
    is_idle = bucket == Bucket.IDLE.value
    split = idle_split(frames.means, stage)
    launches = sum(summary.launches_per_step.values()) if summary else 0.0
    long_idle = summary.long_gap_idle_ns_per_step if summary and is_idle else 0
    gaps = (
        frames.gaps[frames.gaps["stage"] == stage].nlargest(3, "duration")
        if is_idle
        else frames.gaps.iloc[:0]
    )
    return Evidence(
        idle_by_cause_ns_per_step=split if is_idle else {},
        launches_per_step=round(launches, 2),
        syncs_per_step=summary.syncs_per_step if summary else 0.0,
        host_ns_per_launch=host_ns_per_launch(split, launches, long_idle) if is_idle else None,
        top_kernels=[
            KernelShare(str(name), int(round(total / n)), round(count / n, 2), int(round(wait / n)))
            for name, total, count, wait in frame_rows(
                frames.kernels[frames.kernels["stage"] == stage],
                NAME,
                "total_ns",
                "count",
                "wait_ns",
            )
        ],
        top_api_calls=[
            CallShare(str(name), int(round(total / n)), round(count / n, 2))
            for name, total, count in frame_rows(
                frames.api_calls[frames.api_calls["stage"] == stage].head(3),
                NAME,
                "total",
                "count",
            )
        ],
        longest_gaps=[
            GapEvidence(
                int(step_index[step_id]), int(start - trace_start), int(duration), str(cause)
            )
            for step_id, start, duration, cause in frame_rows(
                gaps, STEP_ID, START_NS, "duration", CAUSE
            )
        ],
        unexpected_calls_per_step=summary.unexpected_calls_per_step if summary else {},
        host_blocked_in=[
            CallShare(str(name), int(round(total / n)), round(count / n, 2))
            for name, total, count in frame_rows(
                frames.blocked[frames.blocked["stage"] == stage].head(3), NAME, "total", "count"
            )
        ]
        if is_idle
        else [],
        long_host_gaps=[f for f in findings if f.stage == stage][:3] if is_idle else [],
        long_gap_idle_ns_per_step=long_idle,
    )


def rank_by_saving(
    findings: list[Finding],
    by_name: dict[str, StageSummary],
    saving: Callable[[str, str], tuple[int, int] | None],
    top: int,
) -> list[Finding]:
    """Each candidate with its lever's predicted step and saving, ranked by the saving."""
    priced = []
    for finding in findings:
        candidate = finding.candidate
        summary = by_name.get(candidate.stage)
        launches = summary.eager_launches_per_step if summary else 0.0
        mode = summary.execution if summary else ""
        lever, found = choose_lever(
            candidate.stage, candidate.kind, candidate.bucket, launches, mode, saving
        )
        predicted, saved = found if found is not None else (None, None)
        priced.append(
            replace(
                finding,
                candidate=replace(
                    candidate, lever=lever, predicted_step_ns=predicted, saving_ns=saved
                ),
            )
        )
    priced.sort(key=lambda f: (-(f.candidate.saving_ns or 0), f.candidate.explained_rank))
    kept = priced[:top]
    # The candidate that explains most time stays listed (last, if its lever saves little).
    first = next((f for f in priced if f.candidate.explained_rank == 1), None)
    if first is not None and first not in kept and kept:
        kept[-1] = first
    return [replace(f, candidate=replace(f.candidate, rank=i)) for i, f in enumerate(kept, start=1)]


def _unsplit_collective_ns(evidence: Evidence, waits: RankSummary | None) -> int:
    """A busy candidate's time per step in collective kernels no peer's export splits."""
    if waits is None or waits.unsplit is None:
        return 0
    names = set(waits.unsplit.names)
    return sum(kernel.ns_per_step for kernel in evidence.top_kernels if kernel.name in names)


def _stage_facts(
    summary: StageSummary | None, captured_here: tuple[str, ...], shared_with: tuple[int, ...]
) -> StageFacts:
    return StageFacts(summary or _EMPTY_STAGE, captured_here, shared_with)


# A stage with no launch, no call and no time: what a candidate without a stage summary has.
_EMPTY_STAGE = summarise_stage(
    StageInputs(
        name="",
        steps=0,
        totals=dict.fromkeys(Total, 0),
        busy_ns_per_step=0,
        idle_ns_per_step=0,
        launch_spacing_ns=None,
        long_gap_threshold_ns=LONG_GAP_MIN_NS,
        even_gap_fraction=None,
        long_gaps=0,
        long_gap_idle_ns=0,
        step_values=dict.fromkeys(StepValue, ()),
    )
)
