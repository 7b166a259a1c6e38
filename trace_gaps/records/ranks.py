"""The records of several ranks: each rank's step, which peer it waits for, and the
collective time one export cannot split."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RanksView:
    """Who waits for whom. pace_setter_pid is None without matched collectives."""

    pace_setter_pid: int | None
    processes: list[RankSummary]
    matched_instances: int
    unmatched_instances: int
    pace_setter: str | None = None  # its label


@dataclass(frozen=True, slots=True)
class RankSummary:
    """One process's collectives, per analysed step."""

    pid: int
    collectives_per_step: float
    collective_ns_per_step: int  # the collective kernels' time, waits included
    wait_ns_per_step: int  # of it, waiting for a peer
    last_arrival_fraction: float  # of its matched collectives, the share in which it arrived last
    waits_for: list[PeerWait]
    label: str = ""  # "file:pid" where pids repeat across exports, else the pid
    # Set when none of its collectives has a participant elsewhere in the analysis.
    unsplit: UnsplitCollectives | None = None


@dataclass(frozen=True, slots=True)
class PeerWait:
    """Time per step a process waits in collectives for one peer (the last to arrive)."""

    pid: int
    ns_per_step: int
    last_arrivals_per_step: float  # instances per step in which that peer arrived last
    # What the peer's step thread was in while this process waited: stage -> ns per step.
    peer_stages_ns_per_step: dict[str, int]
    label: str = ""  # "file:pid" where pids repeat across exports, else the pid
    # Of that wait, how long the peer's GPU sat idle, by cause (same export only): the peer is
    # late because of its host (launch, host, sync ...) rather than its own GPU work.
    peer_idle_ns_per_step: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UnsplitCollectives:
    """A process's collective time that no peer in the analysis splits into waiting and
    transfer (one rank's export alone), per analysed step."""

    collective_ns_per_step: int
    # Time beyond TRANSFER_CEILING_FACTOR x the shortest instance of the kernel's name on its
    # GPU, summed: at least this much is waiting. None: no bound (no_bound_reason says why).
    wait_lower_bound_ns_per_step: int | None
    no_bound_reason: str  # "" when there is a bound
    names: list[str]  # its collective kernels, most time first
    exports_to_add: str  # a glob of the other ranks' exports, guessed from the file name ("")
    # The wait lower bound is at least UNSPLIT_SHARE_OF_STEP of the process's mean step: how
    # much a lever of this process saves the run is the missing ranks' to decide (a rank made
    # faster arrives earlier and waits longer), so none of its candidates is priced.
    peers_decide_levers: bool = False
