"""The Report's vocabulary: the words of its buckets, causes, stages, verdicts and diff, and
the fixed keys of its dicts."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Self


class DictKeys(tuple[str, ...]):
    """The keys a dict field of a record may have, annotated on its type
    (`Annotated[dict[str, int], DictKeys(...)]`): the JSON Schema lists them (render/schema.py)."""

    def __new__(cls, keys: Iterable[str]) -> Self:
        return super().__new__(cls, (str(key) for key in keys))  # a StrEnum's str is its value


class Bucket(StrEnum):
    """Whether the GPU was running something, waiting in a collective, or idle."""

    BUSY = "busy"
    WAIT = "wait"
    IDLE = "idle"


WAIT_CAUSE = "collective"  # the cause of every wait row


class IdleCause(StrEnum):
    """What the step's thread was doing while the GPU sat idle."""

    LAUNCH = "launch"
    SYNC = "sync"
    QUEUED = "queued"
    API = "api"
    HOST = "host"


# Cause codes in the segment arrays: 0 is busy, then the idle causes in this order.
CAUSE_ORDER: tuple[IdleCause, ...] = (
    IdleCause.LAUNCH,
    IdleCause.SYNC,
    IdleCause.QUEUED,
    IdleCause.API,
    IdleCause.HOST,
)


# Stage names of time no NVTX stage owns (a real range with one of these names is renamed).
# Short gaps between launches within this many times the stage's median launch spacing are
# the "even" ones: per-op dispatch (analysis/long_gaps.py measures, report/findings.py judges).
DISPATCH_FACTOR = 4


NO_STAGE = "(no stage)"  # inside a step, outside every stage


BETWEEN_STEPS = "(between steps)"  # on a step thread, outside every step


OTHER_THREAD = "(other thread)"  # launched by a thread that has no steps


NO_LAUNCH_CALL = "(no launch call)"  # the op's launching call is not in the export


SPECIAL_STAGES = (NO_STAGE, BETWEEN_STEPS, OTHER_THREAD, NO_LAUNCH_CALL)


class ExecutionMode(StrEnum):
    """How a stage's GPU work reaches the GPU."""

    GRAPH = "graph"  # every op from a graph launch
    EAGER = "eager"  # no op from a graph launch
    MIXED = "mixed"
    NONE = "none"  # no GPU op


class VerdictKind(StrEnum):
    """What a verdict says the candidate is."""

    GPU_BOUND = "gpu_bound"
    LONG_HOST_GAPS = "long_host_gaps"
    LAUNCH_BOUND = "launch_bound"
    HOST_BOUND = "host_bound"  # host code between calls, not launch work
    BLOCKED_IN_OS = "blocked_in_os"
    SYNC_BOUND = "sync_bound"
    QUEUED = "queued"
    API = "api"
    LAUNCH_CALLS = "launch_calls"
    WAITING_FOR_PEER = "waiting_for_peer"  # GPU held by collectives waiting for another rank
    # Collective kernels' time that one export cannot split into waiting and transfer.
    COLLECTIVE_UNSPLIT = "collective_unsplit"


class Presence(StrEnum):
    """Where a stage exists: on both sides, or on one only."""

    BOTH = "both"
    BEFORE_ONLY = "before only"
    AFTER_ONLY = "after only"


class CandidateStatus(StrEnum):
    """How a ranked (stage, bucket) candidate moved between the two reports."""

    APPEARED = "appeared"
    VANISHED = "vanished"
    GREW = "grew"
    SHRANK = "shrank"
    UNCHANGED = "unchanged"
