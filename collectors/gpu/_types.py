"""Values and the backend protocol shared by the NVML facade, the simulator and the collector.

A backend is synchronous and may block (NVML calls can hang for seconds or
forever); :class:`~fabricwatch.collectors.gpu._facade.NvmlFacade` runs it in a
bounded thread pool with timeouts. Nothing here imports ``pynvml``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fabricwatch.errors import CollectorError


class NvmlUnavailable(CollectorError):
    """NVML cannot be used at all: no driver, library mismatch, no devices, init hang."""


class GpuLost(CollectorError):
    """One GPU stopped answering (``GPU_IS_LOST``, ``RESET_REQUIRED``...); the others carry on."""


class FabricState(enum.IntEnum):
    """``nvmlGpuFabricState_t``."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3

    @property
    def label(self) -> str:
        """Lower-case label value (``completed``)."""
        return self.name.lower()


class EventKind(enum.Enum):
    """Critical NVML events the collector watches (``nvmlEventType*``)."""

    XID = "xid"
    DOUBLE_BIT_ECC = "double_bit_ecc"
    GPU_UNAVAILABLE = "gpu_unavailable"
    RECOVERY_ACTION = "recovery_action"


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """Who a GPU is. ``index`` is NVML's (PCI bus order), not CUDA's default order.

    ``persistence_mode`` False means every NVML call may re-initialise the GPU
    (slow, can stall); None when unknown.
    """

    index: int
    uuid: str
    model: str
    pci_bus_id: str
    persistence_mode: bool | None = None


@dataclass(frozen=True, slots=True)
class LinkSample:
    """One NVLink at one instant. ``None`` means the link does not report that value.

    Attributes:
        link: link index (the ``scopeId`` of its field values).
        up: True when active (or in low-power sleep), False when down/inactive.
        tx_bytes: cumulative transmitted data bytes.
        rx_bytes: cumulative received data bytes.
        errors: cumulative error counters by type (``crc``, ``replay``, ``recovery``...).
    """

    link: int
    up: bool | None
    tx_bytes: float | None = None
    rx_bytes: float | None = None
    errors: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """Multi-node NVLink fabric registration of one GPU (``nvmlGpuFabricInfo``).

    Attributes:
        state: registration state.
        cluster_uuid: the NVLink domain's cluster UUID ("" when not completed).
        clique_id: the clique inside the cluster.
        ok: the registration status was success (only meaningful when completed).
        health_summary: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity.
    """

    state: FabricState
    cluster_uuid: str = ""
    clique_id: int = 0
    ok: bool = False
    health_summary: int = 0

    @property
    def clique(self) -> str:
        """``<clusterUUID>.<cliqueId>`` as GPU Feature Discovery sets ``nvidia.com/gpu.clique``.

        Empty unless registration completed successfully with a non-zero cluster UUID.
        """
        if (
            self.state is not FabricState.COMPLETED
            or not self.ok
            or not self.cluster_uuid
            or set(self.cluster_uuid) <= {"0", "-"}
        ):
            return ""
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Everything read from one GPU in one cycle; ``None`` = not supported / not readable.

    Units are base units already: ratios 0-1, watts, hertz, bytes, joules, degrees Celsius.
    """

    utilization: float | None = None
    memory_utilization: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    clock_event_reasons: int | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    pids: tuple[int, ...] | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    pcie_replays: float | None = None
    ecc_corrected: float | None = None
    ecc_uncorrected: float | None = None
    remapped_correctable: float | None = None
    remapped_uncorrectable: float | None = None
    remap_pending: float | None = None
    remap_failure: float | None = None
    recovery_action: float | None = None
    links: tuple[LinkSample, ...] = ()
    fabric: FabricInfo | None = None


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """A critical event from the NVML event set.

    Attributes:
        gpu: NVML index of the GPU, -1 when the device could not be identified.
        kind: event type.
        code: the XID for XID events (999 = unknown), the event data otherwise.
        wall: wall-clock time the event was received.
    """

    gpu: int
    kind: EventKind
    code: int
    wall: float


class GpuBackend(Protocol):
    """Synchronous access to the GPUs of this node. Every method may block; call it off-loop.

    Implementations: the NVML one over ``pynvml`` and :class:`SimulatedGPUs`.
    """

    def init(self) -> None:
        """Initialise the library; raise :class:`NvmlUnavailable` when it cannot be used."""
        ...

    def shutdown(self) -> None:
        """Release the library (after every thread using it stopped). Must not raise."""
        ...

    def devices(self) -> Sequence[GpuIdentity]:
        """Discover the GPUs; raise :class:`NvmlUnavailable` if there are none."""
        ...

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        """Read one GPU. ``fabric`` asks for the (slowly changing) fabric info too.

        Raises :class:`GpuLost` when the GPU is gone and :class:`NvmlUnavailable`
        when the library itself stopped working (driver unloaded).
        """
        ...

    def open_events(self) -> bool:
        """Register for critical events; False when the platform supports none."""
        ...

    def wait_events(self, timeout_ms: int) -> Sequence[GpuEvent]:
        """Block up to ``timeout_ms`` for events; empty on timeout."""
        ...

    def close_events(self) -> None:
        """Free the event set. Must not raise."""
        ...
