"""The ledger of a replayed step (ledger.py's, from where its calls and ops landed), and
the mean ledger of a prediction's steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS, build_ledger
from trace_gaps.analysis.replay.codes import CATEGORIES
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import Replayed
from trace_gaps.analysis.stages import CALL_END_NS, STAGE, StageMap, ThreadStages
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import CALL_CATEGORY, END_NS, GLOBAL_TID, PID, START_NS
from trace_gaps.records.whatif import WhatIfLedgerEntry
from trace_gaps.vocabulary import SPECIAL_STAGES


def replayed_ledger(
    model: StepModel, result: Replayed, names: tuple[str, ...], wall_ns: int | None = None
) -> pd.DataFrame:
    """The ledger (ledger.py) of one replayed step, from where its calls and ops landed
    (wall_ns: the step's replayed wall, the host timeline's end by default)."""
    calls = model.item_call >= 0
    call_items = np.flatnonzero(calls)
    call_index = model.item_call[call_items]
    call_frame = pd.DataFrame(
        {
            PID: model.pid,
            GLOBAL_TID: model.tid,
            CALL_CATEGORY: np.asarray(CATEGORIES, dtype=object)[model.call_category[call_index]],
            START_NS: result.item_start[call_items],
            END_NS: result.item_end[call_items],
        }
    )
    call_end = np.full(len(model.call_ns), -1, dtype=np.int64)
    call_end[call_index] = result.item_end[call_items]
    op_call = model.op_call
    ops = pd.DataFrame(
        {
            PID: model.pid,
            START_NS: result.op_start,
            END_NS: result.op_end,
            STAGE: model.op_stage.astype(np.int64),
            CALL_END_NS: np.where(op_call >= 0, call_end[np.maximum(op_call, 0)], -1),
            WAIT_END_NS: np.where(
                model.op_peer_at >= 0,
                np.clip(model.op_peer_at, result.op_start, result.op_end),
                result.op_start,
            ),
        }
    )
    end = model.start_ns + (result.wall_ns if wall_ns is None else wall_ns)
    # The stage ranges: runs of host-timeline items of one stage.
    stage = model.item_stage
    starts, ends = result.item_start, result.item_end
    cut = np.flatnonzero(np.r_[True, stage[1:] != stage[:-1]]) if len(stage) else np.zeros(0, int)
    run_start = starts[cut] if len(cut) else np.zeros(0, dtype=np.int64)
    run_end = np.r_[starts[cut[1:]], end] if len(cut) else np.zeros(0, dtype=np.int64)
    run_code = stage[cut].astype(np.int64) if len(cut) else np.zeros(0, dtype=np.int64)
    real = np.array([names[int(c)] not in SPECIAL_STAGES for c in run_code], dtype=bool)
    thread = ThreadStages(
        step_starts=np.array([model.start_ns], dtype=np.int64),
        step_ends=np.array([end], dtype=np.int64),
        level_starts=(run_start[real].astype(np.int64),),
        level_ends=(run_end[real].astype(np.int64),),
        level_codes=(run_code[real],),
    )
    stage_map = StageMap(names=names, threads={model.tid: thread})
    step = pd.DataFrame(
        {
            STEP_ID: [model.step_id],
            PID: [model.pid],
            GLOBAL_TID: [model.tid],
            START_NS: [model.start_ns],
            END_NS: [end],
        }
    )
    del ends
    ledger, _, _ = build_ledger(ops, call_frame, step, stage_map)
    return ledger


def mean_ledger(
    ledgers: list[pd.DataFrame], steps: int, names: tuple[str, ...]
) -> list[WhatIfLedgerEntry]:
    """The steps' ledgers summed per (stage, bucket, cause), per step."""
    if not ledgers or not steps:
        return []
    whole = pd.concat(ledgers, ignore_index=True)
    summed = whole.groupby([STAGE, BUCKET, CAUSE], sort=True)[DURATION_NS].sum()
    frame = summed.reset_index()
    return [
        WhatIfLedgerEntry(
            names[code] if 0 <= code < len(names) else str(code),
            str(bucket),
            str(cause or ""),
            int(round(total / steps)),
        )
        for code, bucket, cause, total in zip(
            frame[STAGE].astype(int).tolist(),
            frame[BUCKET].tolist(),
            frame[CAUSE].tolist(),
            frame[DURATION_NS].tolist(),
            strict=True,
        )
    ]
