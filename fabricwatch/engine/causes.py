"""Every cause an incident can have: one enumeration with its text and precedence.

The values are the strings incidents, metrics labels and golden files carry
(``Cause.PFC_STORM == "pfc_storm"``), so code compares with the enum while
the wire format stays a plain string.
"""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    """An incident's cause, in precedence order among the evidence causes.

    Ties between equally strong causes go to the more specific, more causal
    finding: the order of the members (``unknown`` last, it is never
    evidence).
    """

    LINK_DOWN = "link_down"
    GPU_FAULT = "gpu_fault"
    NVLINK_DEGRADED = "nvlink_degraded"
    PFC_STORM = "pfc_storm"
    STORAGE_LATENCY = "storage_latency"
    CHECKPOINT_WRITE = "checkpoint_write"
    ECN_CONGESTION = "ecn_congestion"
    # Causes only the fleet can name: they come from comparing a job's nodes
    # (stragglers) or from NCCL's own view of the collective, never from one
    # node's counters.
    STRAGGLER = "straggler"
    COLLECTIVE_HANG = "collective_hang"
    COLLECTIVE_SLOW = "collective_slow"
    UNKNOWN = "unknown"

    @property
    def text(self) -> str:
        """The cause in words, for incident summaries."""
        return _TEXT[self]

    @property
    def halts(self) -> bool:
        """Whether evidence of this cause may open a stall before
        ``min_duration``: causes that stop a job's traffic or make it wait
        (a checkpoint is the job waiting for its own write). Congestion
        slows traffic without stopping it: a 1-3 s dip that coincides with
        an ECN burst is no fault."""
        return self in _HALTS

    @property
    def slows(self) -> bool:
        """Whether evidence of this cause may explain a slowdown (work going
        on at a lower rate). A checkpoint is the job waiting for its own
        write: it stalls the GPUs, and a write burst while they go on
        working slower is someone else's writer, not the job's checkpoint."""
        return self is not Cause.CHECKPOINT_WRITE

    @property
    def on_node(self) -> bool:
        """Whether a node's own engine can attribute this cause (the fleet-only
        causes come from comparing nodes or from NCCL)."""
        return self not in _FLEET_ONLY

    @property
    def precedence(self) -> int:
        """Rank in ties: lower wins."""
        return _RANK[self]


_TEXT = {
    Cause.PFC_STORM: "PFC pause storm",
    Cause.ECN_CONGESTION: "ECN congestion",
    Cause.LINK_DOWN: "link down",
    Cause.NVLINK_DEGRADED: "NVLink degraded",
    Cause.GPU_FAULT: "GPU fault",
    Cause.CHECKPOINT_WRITE: "checkpoint write stall",
    Cause.STORAGE_LATENCY: "slow storage",
    Cause.STRAGGLER: "straggler",
    Cause.COLLECTIVE_HANG: "collective hang",
    Cause.COLLECTIVE_SLOW: "slow collective",
    Cause.UNKNOWN: "unknown",
}
_FLEET_ONLY = frozenset({Cause.STRAGGLER, Cause.COLLECTIVE_HANG, Cause.COLLECTIVE_SLOW})
_RANK = {c: i for i, c in enumerate(Cause)}
_HALTS = frozenset(
    {
        Cause.LINK_DOWN,
        Cause.GPU_FAULT,
        Cause.NVLINK_DEGRADED,
        Cause.PFC_STORM,
        Cause.STORAGE_LATENCY,
        Cause.CHECKPOINT_WRITE,
    }
)


def cause_text(cause: str) -> str:
    """The words for ``cause``; a cause this version does not know (an
    incident from a newer database) reads as itself."""
    try:
        return Cause(cause).text
    except ValueError:
        return cause
