"""Collectives by a table of kernel-name patterns, and --collective for more.

No GPU here runs vLLM, TensorRT-LLM, RCCL or DeepEP: the table is tested on real NCCL
captures whose all-reduce kernel is renamed to each library's kernel name (the names come
from the libraries' sources, listed in docs/definitions.md)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import shipped_json, shipped_trace
from trace_gaps.analysis.collectives import collective_library, family_of
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.run.multi import analyse_exports

runner = CliRunner()
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"

KNOWN = {
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": ("NCCL / RCCL", "allreduce"),
    "ncclKernel_AllGather_RING_LL_Sum_int8_t": ("NCCL / RCCL", "allgather"),
    "ncclAllReduceRingLLKernel_sum_f16": ("NCCL / RCCL", "allreduce"),
    "ncclDevKernel_Generic_1": ("NCCL / RCCL", "ncclDevKernel_Generic_1"),
    "mscclKernel_Sum_bf16_LL": ("RCCL MSCCL", "mscclKernel_Sum_bf16_LL"),
    "cross_device_reduce_1stage": ("vLLM custom all-reduce", "allreduce"),
    "cross_device_reduce_2stage": ("vLLM custom all-reduce", "allreduce"),
    "oneShotAllReduceKernel": ("TensorRT-LLM all-reduce", "allreduce"),
    "twoShotAllReduceKernel": ("TensorRT-LLM all-reduce", "allreduce"),
    "allreduce_fusion_kernel_oneshot_lamport": ("TensorRT-LLM all-reduce", "allreduce"),
    "allreduce_fusion_kernel_twoshot_sync": ("TensorRT-LLM all-reduce", "allreduce"),
    "moeA2ADispatchKernel": ("TensorRT-LLM MoE all-to-all", "moeA2ADispatchKernel"),
    "moeA2ACombineKernel": ("TensorRT-LLM MoE all-to-all", "moeA2ACombineKernel"),
    "dispatch": ("DeepEP / NVSHMEM dispatch-combine", "dispatch"),
    "combine": ("DeepEP / NVSHMEM dispatch-combine", "combine"),
    "notify_dispatch": ("DeepEP / NVSHMEM dispatch-combine", "notify_dispatch"),
    "cached_notify_combine": ("DeepEP / NVSHMEM dispatch-combine", "cached_notify_combine"),
}
NOT_COLLECTIVES = [
    "elementwise_kernel",
    "reduce_kernel",
    "dispatch_sampling_kernel",
    "combine_and_scale",
    "gemv2T_kernel_val",
    "cross_device_copy",
]


@pytest.mark.parametrize("name", KNOWN)
def test_every_table_entry_names_its_library_and_operation(name):
    assert (collective_library(name), family_of(name)) == KNOWN[name]


@pytest.mark.parametrize("name", NOT_COLLECTIVES)
def test_look_alike_kernels_are_not_collectives(name):
    assert collective_library(name) is None


def _corpus(name: str) -> Path:
    return shipped_trace(name)


def renamed(source: Path, target: Path, name: str) -> Path:
    """A copy of a real capture whose NCCL all-reduce kernel is called `name`."""
    shutil.copyfile(source, target)
    with sqlite3.connect(target) as connection:
        done = connection.execute(
            "UPDATE StringIds SET value = ? WHERE value = ?", (name, NCCL_NAME)
        ).rowcount
    assert done == 1
    return target


def _waits(paths: list[Path], patterns: tuple[str, ...] = ()) -> dict[int, int]:
    report = analyse_exports(paths, AnalysisOptions(collective_patterns=patterns)).report
    return {rank.pid: rank.wait_ns_per_step for rank in report.ranks.processes}


@cache
def _shipped_waits(*names: str) -> dict[int, int]:
    """_waits of shipped captures no test edits: once per test process."""
    return _waits([_corpus(name) for name in names])


# One library's name by default (the table test above covers every name); the others
# renamed into the same capture in the thorough run.
@pytest.mark.parametrize(
    "name",
    [
        "cross_device_reduce_1stage",
        pytest.param("oneShotAllReduceKernel", marks=pytest.mark.thorough),
        pytest.param("dispatch", marks=pytest.mark.thorough),
    ],
)
def test_a_renamed_all_reduce_waits_as_nccl_does_in_one_export(tmp_path, name):
    # tp_eager: one export of two ranks; rank 1 (2605) waits 7.89 ms/step for rank 0.
    source = _corpus("tp_eager")
    waits = _waits([renamed(source, tmp_path / "tp.sqlite", name)])
    assert waits == _shipped_waits("tp_eager")
    assert waits[2605] > 7_000_000


def test_renamed_per_rank_exports_are_matched_across_exports(tmp_path):
    sources = [_corpus("tp_rank0"), _corpus("tp_rank1")]
    name = "allreduce_fusion_kernel_oneshot_lamport"
    copies = [renamed(s, tmp_path / s.name, name) for s in sources]
    waits = _waits(copies)
    assert waits == _shipped_waits("tp_rank0", "tp_rank1")
    assert waits[2947] > 9_000_000  # rank 0 waits 9.10 ms/step for rank 1


def test_a_users_pattern_makes_its_kernels_collectives_in_every_command(tmp_path):
    source = _corpus("tp_eager")
    path = renamed(source, tmp_path / "tp.sqlite", "my_team_allreduce_v2")
    assert _waits([path]) == {}  # not in the table: no collectives, no waits
    result = runner.invoke(
        app,
        [
            "analyze",
            str(path),
            "-f",
            "json",
            "--collective",
            "^my_team_",
            "--collective",
            "^no_such_kernel$",
        ],
    )
    assert result.exit_code == 0, result.output
    ranks = json.loads(result.stdout)["ranks"]
    original = shipped_json(source)
    assert ranks["pace_setter_pid"] == 2604
    assert ranks["processes"] == original["ranks"]["processes"]
    diff = runner.invoke(
        app, ["diff", str(path), str(source), "-f", "json", "--collective", "my_team"]
    )
    assert diff.exit_code == 0, diff.output
    assert all(abs(p["wall"]["change_ns"]) == 0 for p in json.loads(diff.stdout)["processes"])


def test_a_pattern_that_is_not_a_regular_expression_is_a_usage_error():
    result = runner.invoke(app, ["analyze", "--demo", "--collective", "("])
    assert result.exit_code == 2
    assert "not a regular expression" in result.output
