"""Collective ops across processes: match each instance, and measure who waits for whom.

A collective (an NCCL all-reduce, say) starts on every participant when that participant's
stream reaches it and ends on all of them together, once the last one has arrived. The
time a participant's kernel runs before the last participant's matching kernel starts is
spent waiting for a peer, not working:

    rank 0  ......host work........[allreduce]
    rank 1  [allreduce: waiting ...............|work]
                                   ^ latest start

Matching: a participant is a (process, GPU); the k-th collective of a family on each
participant that runs the family is one instance. A match is accepted only when the
instance's ends agree within max(END_TOLERANCE_NS, END_TOLERANCE_FRACTION x the shortest
duration); otherwise no wait is attributed for it and it counts as unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.intervals import covered_time
from trace_gaps.model import DEVICE_ID, END_NS, NAME, PID, START_NS


@dataclass(frozen=True, slots=True)
class CollectiveKernels:
    """A library's collective kernels: a regular expression matched at the start of the
    kernel's name (nsys's short name: no namespace, no template arguments)."""

    library: str
    pattern: re.Pattern[str]
    family: str = ""  # the operation they all perform; "": the one their name says (_FAMILY)


# Kernels of collective libraries, by name: the one place that says what is a collective
# (docs/definitions.md lists it with the sources of the names). `--collective PATTERN` adds
# more (user_collectives).
COLLECTIVE_TABLE: tuple[CollectiveKernels, ...] = (
    # ncclKernel_*, ncclDevKernel_* (NCCL >= 2.8), nccl<Op>...Kernel_* (older), and RCCL's
    # ncclDevKernel_Generic_*, which keep NCCL's names.
    CollectiveKernels("NCCL / RCCL", re.compile(r"nccl\w*Kernel")),
    CollectiveKernels("RCCL MSCCL", re.compile(r"mscclKernel")),
    # vllm/csrc/custom_all_reduce.cuh: cross_device_reduce_1stage, cross_device_reduce_2stage.
    CollectiveKernels(
        "vLLM custom all-reduce", re.compile(r"cross_device_reduce_[12]stage"), "allreduce"
    ),
    # TensorRT-LLM kernels/customAllReduceKernels.cu: oneShotAllReduceKernel,
    # twoShotAllReduceKernel; communicationKernels/allReduceFusionKernels.cu (and FlashInfer's
    # trtllm_allreduce_fusion): allreduce_fusion_kernel_oneshot_lamport, ..._twoshot_sync.
    CollectiveKernels(
        "TensorRT-LLM all-reduce",
        re.compile(r"(oneShot|twoShot)AllReduceKernel|allreduce_fusion_kernel_"),
        "allreduce",
    ),
    # TensorRT-LLM communicationKernels/moeAlltoAllKernels.cu: MoE all-to-all.
    CollectiveKernels("TensorRT-LLM MoE all-to-all", re.compile(r"moeA2A(Dispatch|Combine)Kernel")),
    # DeepEP (over NVSHMEM) csrc/kernels/{intranode,internode,internode_ll}.cu: dispatch,
    # combine and their notify_dispatch, cached_notify_dispatch, cached_notify_combine.
    CollectiveKernels(
        "DeepEP / NVSHMEM dispatch-combine",
        re.compile(r"(cached_)?(notify_)?(dispatch|combine)$"),
    ),
)
# The family of a collective: the operation, whatever the algorithm or data type.
_FAMILY = re.compile(
    r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll)",
    re.IGNORECASE,
)
END_TOLERANCE_NS = 5_000
END_TOLERANCE_FRACTION = 0.01

WAIT_END_NS = "wait_end_ns"  # on a collective op: end of its wait (its start when none)
PEER_PID = "peer_pid"  # the process whose kernel started last in the instance (-1: none)
INSTANCE = "instance"
FAMILY = "family"
EXPORT = "export"  # which export an op comes from (0 with one export)
PEER_EXPORT = "peer_export"
LAST_ARRIVAL = "last_arrival"  # started last in its instance, after another participant

COLLECTIVE_COLUMNS = [PID, DEVICE_ID, START_NS, END_NS, NAME]


def collective_library(name: str) -> str | None:
    """The library of the table whose pattern the kernel name matches, or None."""
    found = next((k for k in COLLECTIVE_TABLE if k.pattern.match(name)), None)
    return found.library if found else None


def is_collective(names: pd.Index) -> np.ndarray:
    """Per name: is it a collective library's kernel (COLLECTIVE_TABLE)?"""
    found: np.ndarray = np.array(
        [any(k.pattern.match(str(n)) for k in COLLECTIVE_TABLE) for n in names], dtype=bool
    )
    return found


def user_collectives(patterns: Sequence[str]) -> Callable[[pd.Index], np.ndarray]:
    """Per name: a collective of the table, or a name in which one of the user's patterns
    (regular expressions, from --collective) is found."""
    if not patterns:
        return is_collective
    compiled = [re.compile(pattern) for pattern in patterns]

    def chooser(names: pd.Index) -> np.ndarray:
        extra = np.array([any(p.search(str(n)) for p in compiled) for n in names], dtype=bool)
        chosen: np.ndarray = is_collective(names) | extra
        return chosen

    return chooser


def family_of(name: str) -> str:
    """The operation a collective kernel performs: its table entry's, else the one its name
    says, else the name itself (its instances are matched with the same name only)."""
    listed = next((k.family for k in COLLECTIVE_TABLE if k.pattern.match(name) and k.family), "")
    if listed:
        return listed
    found = _FAMILY.search(name)
    return found.group(1).lower() if found else name


@dataclass(frozen=True, slots=True)
class CollectiveMatch:
    """Every collective op with its instance, its wait and the peer it waited for."""

    # COLLECTIVE_COLUMNS, EXPORT, FAMILY, INSTANCE, WAIT_END_NS, PEER_PID, PEER_EXPORT,
    # matched, LAST_ARRIVAL
    ops: pd.DataFrame
    instances: int
    unmatched: int  # instances whose ends disagree, or which some participant lacks

    @property
    def any(self) -> bool:
        return len(self.ops) > 0

    def of_export(self, export: int, offset_ns: int) -> CollectiveMatch:
        """This match's ops of one export, as export 0 in that export's own clock (times
        minus offset_ns): what that export's analysis reads."""
        ops = self.ops[self.ops[EXPORT] == export]
        shifted = ops.assign(
            **{
                START_NS: ops[START_NS] - offset_ns,
                END_NS: ops[END_NS] - offset_ns,
                WAIT_END_NS: ops[WAIT_END_NS] - offset_ns,
                EXPORT: ops[EXPORT] * 0,
            }
        )
        return CollectiveMatch(shifted, self.instances, self.unmatched)

    def lookup(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per pid of export 0: (sorted starts, wait ends, peer pids) of its matched ops that
        wait (of_export first puts another export's ops there, in that export's clock)."""
        ops = self.ops[self.ops[EXPORT] == 0]
        waiting = ops[ops[WAIT_END_NS] > ops[START_NS]]
        found = {}
        for pid, rows in waiting.groupby(PID):
            rows = rows.sort_values(START_NS, kind="stable")
            found[int(cast(int, pid))] = (
                rows[START_NS].to_numpy(),
                rows[WAIT_END_NS].to_numpy(),
                rows[PEER_PID].to_numpy(),
            )
        return found


PARTICIPANT = [EXPORT, PID, DEVICE_ID]


def number_instances(ops: pd.DataFrame) -> pd.DataFrame:
    """COLLECTIVE_COLUMNS and EXPORT (0 when absent) with each op's FAMILY and INSTANCE: the
    k-th collective of a family on one participant, sorted by family, participant and start.
    The family is worked out once per distinct name."""
    exports = ops[EXPORT].to_numpy() if EXPORT in ops.columns else 0
    ops = ops[COLLECTIVE_COLUMNS].assign(**{EXPORT: exports})
    names = pd.Index(ops[NAME].astype(str).unique())
    families = pd.Series([family_of(n) for n in names], index=names)
    ops[FAMILY] = ops[NAME].astype(str).map(families).to_numpy()
    ops = ops.sort_values([FAMILY, *PARTICIPANT, START_NS], kind="stable", ignore_index=True)
    ops[INSTANCE] = ops.groupby([FAMILY, *PARTICIPANT]).cumcount().to_numpy()
    return ops


def match_collectives(ops: pd.DataFrame) -> CollectiveMatch:
    """Match the collective ops of all processes into instances and measure each wait."""
    columns = [
        *COLLECTIVE_COLUMNS,
        EXPORT,
        FAMILY,
        INSTANCE,
        WAIT_END_NS,
        PEER_PID,
        PEER_EXPORT,
        "matched",
        LAST_ARRIVAL,
    ]
    if ops.empty:
        return CollectiveMatch(pd.DataFrame(columns=columns), 0, 0)
    ops = number_instances(ops)
    participants = ops.groupby(FAMILY)[PARTICIPANT].apply(lambda f: len(f.drop_duplicates()))
    grouped = ops.groupby([FAMILY, INSTANCE])
    latest_start = grouped[START_NS].transform("max").to_numpy()
    earliest_start = grouped[START_NS].transform("min").to_numpy()
    first_end = grouped[END_NS].transform("min").to_numpy()
    last_end = grouped[END_NS].transform("max").to_numpy()
    shortest = (ops[END_NS] - ops[START_NS]).groupby([ops[FAMILY], ops[INSTANCE]]).transform("min")
    size = grouped[PID].transform("size").to_numpy()
    tolerance = np.maximum(END_TOLERANCE_NS, END_TOLERANCE_FRACTION * shortest.to_numpy())
    complete = size == ops[FAMILY].map(participants).to_numpy()
    matched = complete & (size > 1) & (last_end - first_end <= tolerance)
    starts, ends = ops[START_NS].to_numpy(), ops[END_NS].to_numpy()
    wait_end = np.where(matched, np.clip(latest_start, starts, ends), starts)
    # The peer: the participant whose kernel started last (the first such on a tie).
    last_row = grouped[START_NS].transform("idxmax").to_numpy()
    waits = matched & (wait_end > starts)
    ops[WAIT_END_NS] = wait_end.astype(np.int64)
    ops[PEER_PID] = np.where(waits, ops[PID].to_numpy()[last_row], -1).astype(np.int64)
    ops[PEER_EXPORT] = np.where(waits, ops[EXPORT].to_numpy()[last_row], -1).astype(np.int64)
    ops["matched"] = matched
    # Last to arrive: the latest start, in an instance where someone started earlier.
    ops[LAST_ARRIVAL] = matched & (starts == latest_start) & (earliest_start < latest_start)
    instances = ops.groupby([FAMILY, INSTANCE])["matched"].all()
    multi = ops.groupby([FAMILY, INSTANCE])[PID].size() > 1
    return CollectiveMatch(
        ops[columns],
        instances=int(multi.sum()),
        unmatched=int((multi & ~instances).sum()),
    )


def wait_ends(
    ops: pd.DataFrame, lookup: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> np.ndarray:
    """Per op: the end of its collective wait (its start when it does not wait)."""
    result = ops[START_NS].to_numpy().copy()
    if not lookup or ops.empty:
        return result
    pids = ops[PID].to_numpy()
    starts = ops[START_NS].to_numpy()
    for pid, (sorted_starts, ends, _) in lookup.items():
        at = np.flatnonzero(pids == pid)
        if not len(at):
            continue
        pos = np.searchsorted(sorted_starts, starts[at])
        pos_ok = np.minimum(pos, len(sorted_starts) - 1)
        hit = (pos < len(sorted_starts)) & (sorted_starts[pos_ok] == starts[at])
        result[at[hit]] = ends[pos_ok[hit]]
    return result


PEER_IDLE_COLUMNS = [PID, PEER_PID, "cause", "duration_ns"]


def peer_idle_during_waits(
    waits: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    idle_runs: pd.DataFrame,
    window_steps: pd.DataFrame,
    all_steps: pd.DataFrame,
) -> pd.DataFrame:
    """Per (pid, peer pid, idle cause): how long the peer's GPU sat idle, by cause, while the
    collectives of pid that start in its analysed steps waited for that peer.

    idle_runs are one window's GPU idle runs (step_id, start_ns, end_ns, cause) of the
    window's steps: each peer's idle time is counted in the window that holds its steps, so
    the sum over windows is the same however the steps are cut into windows.
    """
    found: list[tuple[int, int, str, int]] = []
    if not waits or idle_runs.empty:
        return pd.DataFrame(found, columns=PEER_IDLE_COLUMNS)
    step_pid = window_steps.set_index("step_id")[PID]
    runs = idle_runs.assign(**{PID: step_pid.reindex(idle_runs["step_id"]).to_numpy()})
    analysed = all_steps[~all_steps["is_warmup"]]
    for peer, peer_runs in runs.groupby(PID, sort=True):
        for pid, (starts, ends, peers) in waits.items():
            at = (peers == peer) & _inside(starts, analysed[analysed[PID] == pid])
            if not at.any():
                continue
            for cause, cause_runs in peer_runs.groupby("cause", observed=True):
                ordered = cause_runs.sort_values(START_NS, kind="stable")
                covered = covered_time(
                    starts[at], ends[at], ordered[START_NS].to_numpy(), ordered[END_NS].to_numpy()
                )
                if covered:
                    found.append((int(pid), int(cast(int, peer)), str(cause), covered))
    return pd.DataFrame(found, columns=PEER_IDLE_COLUMNS)


def _inside(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    if steps.empty:
        return np.zeros(len(times), dtype=bool)
    ordered = steps.sort_values(START_NS, kind="stable")
    step_starts, step_ends = ordered[START_NS].to_numpy(), ordered[END_NS].to_numpy()
    at = np.searchsorted(step_starts, times, side="right") - 1
    inside: np.ndarray = (at >= 0) & (times < step_ends[np.maximum(at, 0)])
    return inside
