"""The demo's scenarios: what the simulated node does, and the ground truth.

A scenario is a healthy training job plus at most one injected fault. The
fault is a function of the seconds since it began that returns the node's
:class:`Condition` (so a flapping link is a fault whose condition changes
over time). Causes and culprit keys use the engine's vocabulary
(:mod:`fabricwatch.testing.sim_scenarios`), so the summary can compare what the
engine said with what was injected.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

NODE = "gpu-node-1"
"""The simulated node's name (in LLDP on the switch, in labels and incidents)."""
SWITCH = "leaf1"
UPLINK = "Ethernet0"
"""The switch port facing the node's NIC (``demo_switch`` gives it LLDP neighbour NODE)."""
PRIORITY = 3
NIC = "mlx5_0"
NIC_PORT = "1"
CKPT = "ckpt"
GPUS = 8
NVLINK_GPU = 3
NVLINK_LINK = 7


class Work(enum.Enum):
    """What the GPUs of the training job do."""

    TRAIN = "train"
    """Full-speed training."""
    SLOW = "slow"
    """Training, slowed by the network (``Condition.load`` of normal work)."""
    HUNG = "hung"
    """A collective hangs: utilization stays ~100 %, SMs and power collapse."""
    WAIT = "wait"
    """Blocked on I/O (a checkpoint): processes and memory stay, the GPUs do nothing."""


@dataclass(frozen=True, slots=True)
class Condition:
    """The simulated node's state at one moment; the default is healthy training.

    Attributes:
        work: what the GPUs do.
        load: share of normal work while ``work`` is SLOW.
        uplink_pause: switch uplink PFC pause-time fraction (priority 3).
        nic_pause: host NIC PFC pause-time fraction (priority 3, rx).
        ecn_rate: ECN-marked RoCE packets per second at the NIC.
        xmit_wait: share of time the NIC waited to transmit.
        link_up: the NIC port and its switch uplink are up.
        traffic: share of normal RDMA traffic.
        nvlink_down: (gpu, link) pairs that are down.
        ckpt_write_rate: bytes per second written to the checkpoint path.
        ckpt_latency: seconds per write on the checkpoint path.
    """

    work: Work = Work.TRAIN
    load: float = 1.0
    uplink_pause: float = 0.004
    nic_pause: float = 0.002
    ecn_rate: float = 40.0
    xmit_wait: float = 0.02
    link_up: bool = True
    traffic: float = 1.0
    nvlink_down: tuple[tuple[int, int], ...] = ()
    ckpt_write_rate: float = 6e6
    ckpt_latency: float = 0.004


HEALTHY = Condition()


@dataclass(frozen=True, slots=True)
class Truth:
    """What an injected fault should become: a cause and the culprits that count as right."""

    cause: str
    culprits: tuple[str, ...]
    kind: str = "stall"


@dataclass(frozen=True, slots=True)
class Scenario:
    """One demo scenario.

    Attributes:
        name: the ``--scenario`` name.
        title: one line for people.
        story: what happens, in a sentence.
        fault: condition as a function of seconds since the fault began; None = healthy.
        truth: the incident the fault should produce; None = no incident at all.
        xids: (gpu, xid) events raised when the fault begins.
        lead: seconds the fault runs before the GPUs feel it.
    """

    name: str
    title: str
    story: str
    fault: Callable[[float], Condition] | None
    truth: Truth | None
    xids: tuple[tuple[int, int], ...] = ()
    lead: float = 1.0

    def condition(self, since_fault: float | None) -> Condition:
        """The node's condition ``since_fault`` seconds into the fault (None: before/after)."""
        if since_fault is None or self.fault is None:
            return HEALTHY
        cond = self.fault(since_fault)
        if since_fault < self.lead and cond.work is not Work.TRAIN:
            # The fault shows on the fabric first; the job notices a moment later.
            cond = replace(cond, work=Work.TRAIN, load=1.0)
        return cond


def _pfc_storm(_t: float) -> Condition:
    return replace(
        HEALTHY,
        work=Work.HUNG,
        uplink_pause=0.97,
        nic_pause=0.25,
        ecn_rate=120.0,
        traffic=0.02,
    )


def _ecn(_t: float) -> Condition:
    return replace(
        HEALTHY,
        work=Work.SLOW,
        load=0.45,
        ecn_rate=25_000.0,
        xmit_wait=0.35,
        traffic=0.7,
    )


def _nvlink(_t: float) -> Condition:
    return replace(
        HEALTHY,
        work=Work.HUNG,
        traffic=0.05,
        nvlink_down=((NVLINK_GPU, NVLINK_LINK),),
    )


def _checkpoint(_t: float) -> Condition:
    return replace(
        HEALTHY,
        work=Work.WAIT,
        traffic=0.02,
        ckpt_write_rate=1.6e9,
        ckpt_latency=0.45,
    )


FLAP_DOWN = 4.0
FLAP_PERIOD = 9.0


def _flap(t: float) -> Condition:
    if t % FLAP_PERIOD < FLAP_DOWN:
        return replace(HEALTHY, work=Work.HUNG, link_up=False, traffic=0.0)
    return HEALTHY


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "healthy training",
            "The job trains at full speed with normal noise: nothing must be reported.",
            None,
            None,
        ),
        Scenario(
            "pfc-storm",
            "PFC pause storm on a switch uplink",
            f"Switch {SWITCH} port {UPLINK} is paused 97% of the time on priority {PRIORITY}; "
            "the job's collectives hang.",
            _pfc_storm,
            Truth("pfc_storm", (f"switch:{SWITCH}:{UPLINK}:{PRIORITY}",)),
        ),
        Scenario(
            "checkpoint-stall",
            "checkpoint into a slow filer",
            f"A 1.6 GB/s checkpoint burst hits path {CKPT!r} whose writes take 450 ms; "
            "the GPUs wait for it.",
            _checkpoint,
            Truth("storage_latency", (f"storage:{CKPT}",)),
            lead=0.0,
        ),
        Scenario(
            "ecn-congestion",
            "ECN congestion slows the job",
            f"NIC {NIC} sees 25k ECN marks/s and waits to transmit 35% of the time; "
            "the job runs at 45% speed.",
            _ecn,
            Truth(
                "ecn_congestion",
                (f"nic:{NIC}:{NIC_PORT}", f"switch:{SWITCH}:{UPLINK}"),
                kind="slowdown",
            ),
        ),
        Scenario(
            "nvlink-degraded",
            "NVLink goes down",
            f"GPU {NVLINK_GPU} loses NVLink {NVLINK_LINK} (XID 74); the collective hangs.",
            _nvlink,
            Truth(
                "nvlink_degraded",
                (f"gpu:{NVLINK_GPU}:link:{NVLINK_LINK}", f"gpu:{NVLINK_GPU}"),
            ),
            xids=((NVLINK_GPU, 74),),
            lead=0.0,
        ),
        Scenario(
            "link-flap",
            "flapping NIC link",
            f"NIC {NIC} port {NIC_PORT} and switch port {UPLINK} go down for "
            f"{FLAP_DOWN:.0f} s every {FLAP_PERIOD:.0f} s.",
            _flap,
            Truth("link_down", (f"nic:{NIC}:{NIC_PORT}", f"switch:{SWITCH}:{UPLINK}")),
            lead=0.0,
        ),
    )
}
"""Every scenario by name, in the order ``all`` runs them."""

ALL = "all"


def select(name: str) -> list[Scenario]:
    """The scenarios ``--scenario NAME`` runs (``all``: every one, healthy first)."""
    if name == ALL:
        return list(SCENARIOS.values())
    try:
        return [SCENARIOS[name]]
    except KeyError:
        known = ", ".join([*SCENARIOS, ALL])
        msg = f"unknown scenario {name!r} (known: {known})"
        raise ValueError(msg) from None


@dataclass(frozen=True, slots=True)
class Timing:
    """Simulated seconds of each part of the demo.

    Attributes:
        warmup: healthy training before the first scenario (the engine arms GPUs
            after 10 s of work and needs a baseline before the first onset).
        fault: how long each fault lasts (``--duration``; a slowdown opens an
            incident only after 10 s below its baseline, so at least 20).
        settle: healthy seconds after a fault, long enough for its incident to
            end (2 s) and resolve (the demo's ``resolve_hold``).
        healthy: length of the ``healthy`` scenario.
    """

    warmup: float = 25.0
    fault: float = 24.0
    settle: float = 16.0
    healthy: float = 20.0

    def span(self, sc: Scenario) -> float:
        """Seconds one scenario takes after the warm-up."""
        if sc.fault is None:
            return self.healthy
        return self.fault + self.settle


RESOLVE_HOLD = 10.0
"""The demo engine's ``resolve_hold``: longer than a flap's up time, so a flap pages once."""
