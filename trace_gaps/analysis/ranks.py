"""The cross-rank view: per process, its collectives, how long it waits in them and for whom,
what that peer was doing meanwhile, and which process sets the pace.

Counted over each process's analysed steps: a collective belongs to the step its kernel
starts in. The process that arrives last (its kernel starts last in a matched instance) most
often sets the pace; the others wait for it inside their collectives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import (
    EXPORT,
    FAMILY,
    INSTANCE,
    LAST_ARRIVAL,
    PEER_EXPORT,
    PEER_PID,
    WAIT_END_NS,
    CollectiveMatch,
)
from trace_gaps.analysis.engine.metrics import PEER_IDLE
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.note_facts import note_of
from trace_gaps.analysis.stages import ThreadStages
from trace_gaps.analysis.steps import IS_WARMUP
from trace_gaps.analysis.summary import UNSPLIT_SHARE_OF_STEP
from trace_gaps.intervals import covered_time
from trace_gaps.model import DEVICE_ID, END_NS, GLOBAL_TID, NAME, PID, START_NS
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, Severity
from trace_gaps.records.ranks import PeerWait, RankSummary, RanksView, UnsplitCollectives
from trace_gaps.vocabulary import NO_STAGE

# A peer's stages listed in a verdict: the few it spent most time in.
PEER_STAGES_SHOWN = 3
# Without the peers' exports, an instance's own work (its transfer) is taken to be at most this
# many times the shortest instance of its kernel name on its GPU; the rest of its time is
# waiting. Checked on the real per-rank pair against the wait measured with both exports
# (docs/definitions.md, "One rank's export alone").
TRANSFER_CEILING_FACTOR = 2


@dataclass(frozen=True, slots=True)
class RankSource:
    """One export's analysis, with the offset that puts its times on the common clock."""

    export: int
    analysis: Analysis
    offset_ns: int = 0
    labels: dict[int, str] = field(default_factory=dict)  # pid -> label, where pids repeat
    file: str = ""  # the export's file name

    def label(self, pid: int) -> str:
        return self.labels.get(pid, str(pid))


def build_ranks(analysis: Analysis, file: str = "") -> RanksView:
    """The cross-rank view of one export's analysis (empty without collectives); file: the
    export's name, from which the other ranks' exports are guessed."""
    return build_ranks_across([RankSource(0, analysis, file=file)], analysis.collectives)


def build_ranks_across(sources: list[RankSource], match: CollectiveMatch) -> RanksView:
    """The cross-rank view over several exports; match's times are on the common clock."""
    if not match.any:
        return RanksView(None, [], 0, 0)
    ops = match.ops
    # An op with a peer: its instance has another participant somewhere in the analysis.
    participants = ops.groupby([FAMILY, INSTANCE])[PID].transform("size").to_numpy()
    ops = ops.assign(has_peer=participants > 1)
    by_export = {source.export: source for source in sources}
    summaries = []
    for source in sources:
        steps = source.analysis.steps
        for pid, process_steps in steps.groupby(PID, sort=True):
            pid = int(cast(int, pid))
            analysed = process_steps[~process_steps[IS_WARMUP]]
            analysed = analysed.assign(
                **{
                    START_NS: analysed[START_NS] + source.offset_ns,
                    END_NS: analysed[END_NS] + source.offset_ns,
                }
            )
            mine = ops[(ops[EXPORT] == source.export) & (ops[PID] == pid)]
            mine = mine[_in_windows(mine[START_NS].to_numpy(), analysed)]
            if mine.empty:
                continue
            summaries.append(_rank_summary(source, pid, mine, analysed, ops, by_export))
    ranked = [s for s in summaries if s.last_arrival_fraction > 0]
    pace = max(ranked, key=lambda s: (s.last_arrival_fraction, -s.pid)) if ranked else None
    return RanksView(
        pace.pid if pace else None,
        summaries,
        match.instances,
        match.unmatched,
        pace_setter=pace.label if pace else None,
    )


def _rank_summary(
    source: RankSource,
    pid: int,
    mine: pd.DataFrame,
    analysed: pd.DataFrame,
    ops: pd.DataFrame,
    by_export: dict[int, RankSource],
) -> RankSummary:
    n = max(len(analysed), 1)
    waits = (mine[WAIT_END_NS] - mine[START_NS]).to_numpy()
    waits_for = []
    for (peer_export, peer), rows in mine[waits > 0].groupby([PEER_EXPORT, PEER_PID], sort=True):
        peer_export, peer = int(cast(int, peer_export)), int(cast(int, peer))
        peer_source = by_export.get(peer_export)
        peer_last = ops[(ops[EXPORT] == peer_export) & (ops[PID] == peer) & ops[LAST_ARRIVAL]]
        waits_for.append(
            PeerWait(
                pid=peer,
                ns_per_step=int(round((rows[WAIT_END_NS] - rows[START_NS]).sum() / n)),
                last_arrivals_per_step=round(
                    float(_in_windows(peer_last[START_NS].to_numpy(), analysed).sum()) / n, 2
                ),
                peer_stages_ns_per_step=_peer_stages(
                    peer_source.analysis, peer, rows, n, peer_source.offset_ns
                )
                if peer_source
                else {},
                label=peer_source.label(peer) if peer_source else str(peer),
                peer_idle_ns_per_step=_peer_idle(source, pid, peer, peer_export, n),
            )
        )
    waits_for.sort(key=lambda w: (-w.ns_per_step, w.label))
    matched = int(mine["matched"].sum())
    return RankSummary(
        pid=pid,
        collectives_per_step=round(len(mine) / n, 2),
        collective_ns_per_step=int(round((mine[END_NS] - mine[START_NS]).sum() / n)),
        wait_ns_per_step=int(round(waits.sum() / n)),
        last_arrival_fraction=round(float(mine[LAST_ARRIVAL].sum()) / max(matched, 1), 3),
        waits_for=waits_for,
        label=source.label(pid),
        unsplit=None
        if mine["has_peer"].any()
        else _unsplit(mine, n, source.file, int((analysed[END_NS] - analysed[START_NS]).sum() / n)),
    )


def _unsplit(mine: pd.DataFrame, n: int, file: str, step_ns: int) -> UnsplitCollectives:
    """The process's collective time per step and the lower bound of its wait; step_ns: its
    mean analysed step, against which the bound decides whether its levers are priced.

    rank alone  [allreduce ....................][allreduce ..][allreduce .]
    shortest of the name:                                       |---m---|
    waiting at least:  duration - TRANSFER_CEILING_FACTOR x m, per instance (0 when shorter)
    """
    durations = mine[END_NS] - mine[START_NS]
    shortest = durations.groupby([mine[DEVICE_ID], mine[NAME]]).transform("min")
    repeats = durations.groupby([mine[DEVICE_ID], mine[NAME]]).transform("size")
    by_name = durations.groupby(mine[NAME]).sum().sort_values(ascending=False, kind="stable")
    bound = (durations - TRANSFER_CEILING_FACTOR * shortest).clip(lower=0)
    has_bound = bool((repeats > 1).any())
    bound_ns = int(round(bound[repeats > 1].sum() / n)) if has_bound else 0
    return UnsplitCollectives(
        collective_ns_per_step=int(round(durations.sum() / n)),
        wait_lower_bound_ns_per_step=int(round(bound[repeats > 1].sum() / n))
        if has_bound
        else None,
        no_bound_reason=""
        if has_bound
        else "each collective kernel runs once per GPU in the analysed steps: there is no "
        "shorter instance of it to compare with",
        names=[str(name) for name in by_name.index],
        exports_to_add=_other_ranks_glob(file),
        peers_decide_levers=has_bound and bound_ns >= UNSPLIT_SHARE_OF_STEP * step_ns,
    )


def unsplit_notes(
    ranks: RanksView, analysis: Analysis, labels: dict[int, str] | None = None
) -> list[NoteFacts]:
    """A note per process of this analysis whose collectives no peer in the analysis splits:
    the peers missing, its time in collective kernels, and the levers left unpriced."""
    labels = labels or {}
    mine = {(int(pid), labels.get(int(pid), str(pid))) for pid in analysis.steps[PID].unique()}
    notes = []
    for rank in ranks.processes:
        unsplit = rank.unsplit
        if unsplit is None or (rank.pid, rank.label) not in mine:
            continue
        bound = unsplit.wait_lower_bound_ns_per_step
        notes.append(
            note_of(
                NoteCode.COLLECTIVES_UNSPLIT,
                Severity.PARTIAL,
                [Figures.GPU_TIME, Figures.WAITS],
                process=rank.label,
                collectives_per_step=rank.collectives_per_step,
                collective_ns_per_step=unsplit.collective_ns_per_step,
                wait_lower_bound_ns_per_step=-1 if bound is None else bound,
                names=tuple(unsplit.names),
                exports_to_add=unsplit.exports_to_add,
                peers_decide_levers=int(unsplit.peers_decide_levers),
            )
        )
    return notes


def _other_ranks_glob(file: str) -> str:
    """The other ranks' exports, guessed from one's name: its last number made a wildcard
    (tp_rank1.sqlite -> tp_rank*.sqlite); "" when the name holds no number."""
    found = list(re.finditer(r"\d+", file))
    if not found:
        return ""
    last = found[-1]
    return file[: last.start()] + "*" + file[last.end() :]


def _peer_idle(source: RankSource, pid: int, peer: int, peer_export: int, n: int) -> dict[str, int]:
    """The peer's GPU idle ns per step by cause during pid's waits (same export only)."""
    if peer_export != source.export:
        return {}
    rows = source.analysis.metrics[PEER_IDLE]
    rows = rows[(rows[PID] == pid) & (rows[PEER_PID] == peer)]
    by_cause = rows.groupby("cause")["duration_ns"].sum().sort_values(ascending=False)
    return {str(cause): int(round(ns / n)) for cause, ns in by_cause.items() if ns > 0}


def _in_windows(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Which times fall inside one of the (disjoint, per thread) step windows."""
    found = np.zeros(len(times), dtype=bool)
    for _, thread_steps in steps.groupby(GLOBAL_TID):
        starts = thread_steps[START_NS].to_numpy()
        ends = thread_steps[END_NS].to_numpy()
        order = np.argsort(starts)
        starts, ends = starts[order], ends[order]
        at = np.searchsorted(starts, times, side="right") - 1
        found |= (at >= 0) & (times < ends[np.maximum(at, 0)])
    return found


def _peer_stages(
    analysis: Analysis, peer: int, waits: pd.DataFrame, n: int, offset_ns: int = 0
) -> dict[str, int]:
    """Per stage of the peer's step thread: ns per step of overlap with the wait intervals
    (on the common clock; the peer's own times plus offset_ns)."""
    peer_steps = analysis.steps[analysis.steps[PID] == peer]
    if peer_steps.empty:
        return {}
    tid = int(peer_steps[GLOBAL_TID].value_counts().index[0])
    thread = analysis.stage_map.threads.get(tid)
    if thread is None:
        return {}
    totals = _overlaps(
        waits[START_NS].to_numpy() - offset_ns,
        waits[WAIT_END_NS].to_numpy() - offset_ns,
        thread,
        analysis.stage_map.names,
    )
    shown = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:PEER_STAGES_SHOWN]
    return {stage: int(round(ns / n)) for stage, ns in shown if ns > 0}


def _overlaps(
    starts: np.ndarray, ends: np.ndarray, thread: ThreadStages, names: tuple[str, ...]
) -> dict[str, int]:
    """Per stage name: how much of the intervals the thread spent in it (outside every stage
    but inside a step: NO_STAGE; outside every step: "(between steps)"), one vectorised
    pass per stage code."""
    stage_starts, stage_ends = thread.level_starts[0], thread.level_ends[0]
    codes = thread.level_codes[0]
    totals: dict[str, int] = {}
    for code in np.unique(codes):
        mine = codes == code
        name = names[int(code)]
        totals[name] = totals.get(name, 0) + covered_time(
            starts, ends, stage_starts[mine], stage_ends[mine]
        )
    in_steps = covered_time(starts, ends, thread.step_starts, thread.step_ends)
    outside = {
        NO_STAGE: in_steps - sum(totals.values()),
        "(between steps)": int((ends - starts).sum()) - in_steps,
    }
    totals = {name: ns for name, ns in totals.items() if ns > 0}
    for name, ns in outside.items():
        if ns > 0:
            totals[name] = totals.get(name, 0) + ns
    return totals


def sharing_gpus(analysis: Analysis, pid: int) -> tuple[int, ...]:
    """Other processes that ran ops on the GPUs this process used."""
    ops = analysis.device_ops
    devices = ops.loc[ops[PID] == pid, DEVICE_ID].unique()
    others = ops.loc[ops[DEVICE_ID].isin(devices) & (ops[PID] != pid), PID].unique()
    return tuple(sorted(int(other) for other in others))
