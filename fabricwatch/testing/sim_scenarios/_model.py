"""What a scenario is made of: injections, the node's hardware, ground truth."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Injection:
    """Something that happens to the node.

    Attributes:
        what: a fault (:data:`FAULTS`) or a confounder (:data:`CONFOUNDERS`).
        start: seconds after the scenario start.
        duration: seconds it lasts.
        magnitude: 0-1 severity knob (mapped to a realistic range per kind).
        target: GPU index, or collector index for gaps.
        variant: kind-specific choice (e.g. switch- vs NIC-side PFC storm).
        profile: ``checkpoint_write`` only: (seconds, work level 0-1) phases
            from the start (a stall that partly recovers and stalls again);
            empty = idle throughout. After the last phase the level is 0.
        write_rate: ``checkpoint_write`` only: bytes/s written while it
            lasts (0 = the kind's default range, set by ``magnitude``).
        write_s: ``checkpoint_write`` only: the writes end after this many
            seconds and the GPUs keep waiting (0 = writes throughout).
    """

    what: str
    start: float
    duration: float
    magnitude: float = 0.5
    target: int = 0
    variant: int = 0
    profile: tuple[tuple[float, float], ...] = ()
    write_rate: float = 0.0
    write_s: float = 0.0

    def level(self, t: float) -> float:
        """Work level of a profiled injection ``t`` seconds after its start."""
        end = 0.0
        for seconds, level in self.profile:
            end += seconds
            if t < end:
                return level
        return 0.0


@dataclass(frozen=True, slots=True)
class TruthIncident:
    """Ground truth of an injected fault, in scenario timestamps."""

    cause: str
    onset: float
    end: float
    culprits: tuple[str, ...]
    kind: str


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """The simulated node's hardware."""

    gpus: int = 8
    links_per_gpu: int = 1
    nic: str = "mlx5_0"
    nic_port: str = "1"
    switch: str = "leaf1"
    switch_port: str = "swp12"
    priority: str = "3"
    path: str = "ckpt"


def nvlink_collapse_lead(inj: Injection) -> int:
    """Seconds an NVLink throughput collapse precedes the hang it causes.

    ``nvlink_degraded`` variants ``3 (mod 4)`` show no link-down, no error
    burst and no XID: the link stays up while its throughput falls to
    ``0.4 * (1 - magnitude)`` of normal (less than half: -60 % down to ~0); its GPU and the
    others keep computing (slightly slower, waiting on it) for 2-5 s, then
    the collectives hang and every rank's SM activity and NVLink go to ~0.
    Zero for every other injection.
    """
    if inj.what != "nvlink_degraded" or inj.variant % 4 != 3:
        return 0
    return 2 + int(3 * min(max(inj.magnitude, 0.0), 1.0))
