"""Our NVTX projection agrees with nsys's own (nvtx_gpu_proj_sum, run by nsys 2025.3 on the samples).

nsys projects each NVTX range onto the GPU: the ops launched while it was open (children
included), and the span from the first op's start to the last op's end. Our stage of an op
is the same rule at depth 1, so per stage name the op counts and projected spans must match.
nsys counts a node-level graph replay as one GPU op (one per launching call); so do we here,
by counting distinct correlation ids.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.builders import projected_frames
from tests.conftest import SAMPLE_TRACES
from tests.test_ledger import analyse
from trace_gaps.analysis.stages import CALL_START_NS, LAUNCH_TID, STAGE
from trace_gaps.analysis.steps import step_at
from trace_gaps.nsys.load import load_trace

STATS = SAMPLE_TRACES / "nsys_stats"
STAGES = (
    "draft_forward",
    "build_tree",
    "prepare_for_verify",
    "verify_forward",
    "accept_sample_commit",
)


def nsys_projection(name: str) -> dict[str, tuple[int, int]]:
    """Per range name: (Total GPU Ops, Total Proj Time ns) from nsys's CSV."""
    with (STATS / f"{name}_nvtx_gpu_proj_sum.csv").open() as handle:
        return {
            row["Range"].lstrip(":"): (int(row["Total GPU Ops"]), int(row["Total Proj Time (ns)"]))
            for row in csv.DictReader(handle)
        }


@pytest.mark.parametrize("name", ["spec_eager", "spec_graph_node"])
def test_ops_and_projected_time_per_stage_match_nsys(name: str) -> None:
    path: Path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists() or not (STATS / f"{name}_nvtx_gpu_proj_sum.csv").exists():
        pytest.skip("sample trace or nsys stats not present")
    expected = nsys_projection(name)
    analysis = analyse(path, skip=0)
    ops = projected_frames(load_trace(path), analysis)[1]
    ops = ops.assign(
        step=step_at(analysis.steps, ops[LAUNCH_TID].to_numpy(), ops[CALL_START_NS].to_numpy())
    )
    ops = ops[ops["step"] >= 0]
    names = np.array(analysis.stage_map.names, dtype=object)
    ops = ops.assign(stage_name=names[ops[STAGE].to_numpy()])
    per_instance = ops.groupby(["stage_name", "step"]).agg(
        first=("start_ns", "min"), last=("end_ns", "max"), count=("correlation_id", "nunique")
    )
    per_instance["span"] = per_instance["last"] - per_instance["first"]
    ours = per_instance.groupby("stage_name").agg(count=("count", "sum"), span=("span", "sum"))
    compared = 0
    for stage in STAGES:
        if stage not in expected:
            continue
        count, span = expected[stage]
        assert int(ours.loc[stage, "count"]) == count, stage
        assert int(ours.loc[stage, "span"]) == span, stage
        compared += 1
    assert compared >= 3
