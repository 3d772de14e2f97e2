"""PynvmlBackend against the real pynvml module with patched functions, per generation."""

from __future__ import annotations

import ctypes.util

import pynvml
import pytest

from fabricwatch.collectors.gpu._facade import (
    FieldDecoder,
    PynvmlBackend,
    _get_field_values,
    decode_fields,
)
from fabricwatch.collectors.gpu._types import EventKind, FabricState, GpuLost, NvmlUnavailable

from ._fakes import GB200_CLIQUE, GB200_CLUSTER, MIB, Fabric, FakeGpu
from .conftest import MakeNvml

FI = pynvml


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _backend(clock: Clock | None = None) -> PynvmlBackend:
    b = PynvmlBackend(monotonic=clock or Clock())
    b.init()
    return b


def test_h100_identity_and_values_from_capture(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    b = _backend()
    ids = b.devices()
    assert [i.index for i in ids] == list(range(8))
    assert ids[0].uuid == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert ids[0].model == "NVIDIA H100 80GB HBM3"
    assert ids[0].pci_bus_id == "00000000:53:00.0"
    assert ids[0].persistence_mode is True
    s = b.sample(0, fabric=True)
    # Units: W, bytes, Hz, ratios, joules.
    assert s.power_watts == pytest.approx(71.97)
    assert s.power_limit_watts == pytest.approx(700.0)
    assert s.memory_total_bytes == 81559 * MIB
    assert s.memory_used_bytes == 0
    assert s.utilization == 0.0 and s.memory_utilization == 0.0
    assert s.sm_clock_hz == 345e6 and s.memory_clock_hz == 2619e6
    assert s.clock_event_reasons == pynvml.nvmlClocksEventReasonGpuIdle
    assert s.temperature_celsius == 36 and s.memory_temperature_celsius == 44
    assert s.pcie_replays == 120  # "Replays Since Reset : 120" on an idle H100
    assert s.energy_joules == pytest.approx(1000.0)
    assert s.remapped_correctable == 0 and s.remap_pending == 0
    assert s.pids == ()
    assert len(s.links) == 18 and all(ln.up for ln in s.links)
    assert set(s.links[17].errors) == {"crc", "replay", "recovery"}
    assert s.fabric is not None and s.fabric.state is FabricState.COMPLETED
    assert s.fabric.clique == ""  # H100 SXM: completed, no multi-node cluster
    # Exactly one batched field call per GPU per sample, every link in scopeId.
    before = len(nvml.field_requests)
    b.sample(1, fabric=False)
    assert len(nvml.field_requests) == before + 1
    scopes = {
        sc for fid, sc in nvml.field_requests[-1] if fid == FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    }
    assert scopes == set(range(18))


def test_h100_nvlink_kib_become_bytes(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    make_nvml(h100)
    b = _backend()
    b.devices()
    h100[2].link_counters[5].update(tx_kib=3.0, rx_kib=5.0, crc=7.0, replay=2.0, recovery=1.0)
    link = b.sample(2, fabric=False).links[5]
    assert link.tx_bytes == 3 * 1024 and link.rx_bytes == 5 * 1024
    assert dict(link.errors) == {"crc": 7.0, "replay": 2.0, "recovery": 1.0}
    h100[2].link_state[5] = pynvml.NVML_NVLINK_STATE_INACTIVE
    h100[2].link_state[6] = pynvml.NVML_NVLINK_STATE_SLEEP
    links = b.sample(2, fabric=False).links
    assert links[5].up is False and links[6].up is True


def test_h100_gpm_needs_two_samples_100ms_apart(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    h100[0].gpm = {FI.NVML_GPM_METRIC_SM_UTIL: 82.5, FI.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 40.0}
    clock = Clock()
    b = _backend(clock)
    b.devices()
    assert b.sample(0, fabric=False).sm_active is None  # first sample: nothing to diff
    clock.t += 0.05
    assert b.sample(0, fabric=False).sm_active is None  # < 100 ms: skipped, no metrics call
    assert nvml.calls["gpm_metrics"] == 0
    clock.t += 1.0
    s = b.sample(0, fabric=False)
    assert s.sm_active == pytest.approx(0.825)
    assert s.tensor_active == pytest.approx(0.40)
    assert s.sm_occupancy is None  # metric not returned -> absent, not zero
    b.shutdown()
    assert nvml.calls["gpm_free"] == 16  # two buffers per GPU freed
    assert nvml.initialised == 0


def test_a100_mig_no_gpm_no_fabric(make_nvml: MakeNvml, a100: list[FakeGpu]) -> None:
    nvml = make_nvml(a100)
    b = _backend()
    ids = b.devices()
    assert ids[0].uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert ids[1].uuid == "GPU-a7605225-d684-1f65-4ad4-ee2ab39338b4"
    s = b.sample(0, fabric=True)
    assert s.utilization is None  # MIG: NOT_SUPPORTED, not 0
    assert s.sm_active is None
    assert s.power_watts == pytest.approx(67.03) and s.power_limit_watts == pytest.approx(500.0)
    assert s.memory_total_bytes == 81920 * MIB and s.memory_used_bytes == 50 * MIB
    assert s.sm_clock_hz == 1275e6
    assert s.remapped_correctable is None  # N/A in the capture
    assert len(s.links) == 12
    assert s.fabric is not None and s.fabric.state is FabricState.NOT_SUPPORTED
    b.sample(0, fabric=True)
    # Unsupported calls are remembered: asked once, never again.
    assert nvml.calls["util"] == 1
    assert nvml.calls["fabric_v"] == 1
    assert nvml.calls["gpm_sample"] == 0


def test_b200_uses_nvlink5_fields(make_nvml: MakeNvml, b200: list[FakeGpu]) -> None:
    nvml = make_nvml(b200)
    b = _backend()
    b.devices()
    b200[4].link_counters[17].update(
        tx_bytes=4096.0, rx_bytes=8192.0, crc=3.0, recovery=2.0, recovery_failed=1.0
    )
    s = b.sample(4, fabric=True)
    link = s.links[17]
    assert link.tx_bytes == 4096.0 and link.rx_bytes == 8192.0  # bytes, not KiB
    assert dict(link.errors) == {"crc": 3.0, "recovery": 2.0, "recovery_failed": 1.0}
    asked = {fid for fid, _ in nvml.field_requests[-1]}
    assert FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX not in asked
    assert FI.NVML_FI_DEV_NVLINK_ERROR_DL_CRC not in asked
    assert FI.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS in asked
    assert s.fabric is not None
    assert s.fabric.clique == f"{GB200_CLUSTER}.{GB200_CLIQUE}"
    assert s.fabric.health_summary == 1


@pytest.mark.parametrize("max_struct", ["v3", "v2", "legacy"])
def test_fabric_struct_versions(make_nvml: MakeNvml, b200: list[FakeGpu], max_struct: str) -> None:
    for g in b200:
        assert g.fabric is not None
        g.fabric.max_struct = max_struct
    nvml = make_nvml(b200)
    b = _backend()
    b.devices()
    for _ in range(2):
        f = b.sample(0, fabric=True).fabric
        assert f is not None and f.clique == f"{GB200_CLUSTER}.{GB200_CLIQUE}"
    if max_struct == "legacy":
        assert nvml.calls["fabric_legacy"] == 2
    # The fallback is remembered: at most one mismatching call.
    assert nvml.calls["fabric_v"] <= 2 + (max_struct != "v3")


def test_fabric_registration_states(make_nvml: MakeNvml, b200: list[FakeGpu]) -> None:
    # Azure/azhpc-images#506: Completed / Insufficient Resources / CliqueId 0 / zero UUID.
    b200[0].fabric = Fabric(
        FI.NVML_GPU_FABRIC_STATE_COMPLETED, status=FI.NVML_ERROR_INSUFFICIENT_RESOURCES
    )
    # NVIDIA/gpu-operator#2511: In Progress.
    b200[1].fabric = Fabric(FI.NVML_GPU_FABRIC_STATE_IN_PROGRESS, GB200_CLUSTER, 7)
    make_nvml(b200)
    b = _backend()
    b.devices()
    f0 = b.sample(0, fabric=True).fabric
    f1 = b.sample(1, fabric=True).fabric
    assert f0 is not None and f0.state is FabricState.COMPLETED and not f0.ok
    assert f0.clique == ""
    assert f1 is not None and f1.state is FabricState.IN_PROGRESS and f1.clique == ""


def test_gpu_lost_only_that_gpu(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    make_nvml(h100)
    b = _backend()
    b.devices()
    h100[3].lost = True
    with pytest.raises(GpuLost, match="GPU 3"):
        b.sample(3, fabric=False)
    assert b.sample(4, fabric=False).power_watts is not None


def test_gpu_lost_at_discovery_keeps_a_slot(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    h100[5].lost = True
    make_nvml(h100)
    b = _backend()
    ids = b.devices()
    assert len(ids) == 8 and ids[5].model == "unknown"
    with pytest.raises(GpuLost):
        b.sample(5, fabric=False)
    assert b.sample(6, fabric=False).links


def test_not_supported_fields_and_garbage_value_types(
    make_nvml: MakeNvml, h100: list[FakeGpu]
) -> None:
    for g in h100:
        g.refuse_fields = {FI.NVML_FI_DEV_ENERGY, FI.NVML_FI_DEV_NVLINK_GET_STATE}
        g.bad_value_type = {FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER}
        g.temperature_v = False
        g.temp = 41
    nvml = make_nvml(h100)
    b = _backend()
    b.devices()
    h100[0].link_state[2] = FI.NVML_NVLINK_STATE_INACTIVE
    s = b.sample(0, fabric=False)
    assert s.energy_joules is None
    assert s.pcie_replays is None  # unknown valueType: dropped, not misread
    # No state field on this driver: the per-link call answers instead.
    assert s.links[2].up is False and s.links[3].up is True
    assert s.temperature_celsius == 41  # deprecated call after FUNCTION_NOT_FOUND
    b.sample(0, fabric=False)
    assert nvml.calls["temperature_v"] == 1


def test_field_call_failing_entirely(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    b = _backend()
    b.devices()
    nvml.field_error = pynvml.NVML_ERROR_UNKNOWN
    s = b.sample(0, fabric=False)
    assert s.power_watts is not None
    assert s.links[0].tx_bytes is None and s.links[0].up is None
    nvml.field_error = pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLost):
        b.sample(0, fabric=False)


def test_init_failure_library_not_found(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    make_nvml(h100, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlUnavailable, match=r"error 12.*no NVIDIA driver"):
        PynvmlBackend().init()


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version mismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "DeviceAllow"),
    ],
)
def test_init_failure_hints(make_nvml: MakeNvml, h100: list[FakeGpu], code: int, hint: str) -> None:
    make_nvml(h100, init_error=code)
    with pytest.raises(NvmlUnavailable, match=hint):
        PynvmlBackend().init()


def test_no_gpus_is_unavailable(make_nvml: MakeNvml) -> None:
    make_nvml([])
    b = _backend()
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        b.devices()


def test_driver_gone_mid_run(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    b = _backend()
    b.devices()
    nvml.initialised = 0  # every call now answers UNINITIALIZED
    with pytest.raises(NvmlUnavailable, match="stopped working"):
        b.sample(0, fabric=False)


def test_real_pynvml_without_driver() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("libnvidia-ml is installed here: the no-driver path cannot be exercised")
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        PynvmlBackend().init()


def test_events_xid_and_others(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    nvml.unsupported_events = {0x4000}
    b = _backend()
    b.devices()
    assert b.open_events()
    assert nvml.registered[0] & pynvml.nvmlEventTypeXidCriticalError
    assert not nvml.registered[0] & 0x4000
    assert b.wait_events(10) == []  # timeout -> nothing
    nvml.events.put((6, pynvml.nvmlEventTypeXidCriticalError, 79))
    nvml.events.put((2, pynvml.nvmlEventTypeDoubleBitEccError, 0))
    evs = b.wait_events(500)
    assert [(e.gpu, e.kind, e.code) for e in evs] == [
        (6, EventKind.XID, 79),
        (2, EventKind.DOUBLE_BIT_ECC, 0),
    ]
    b.close_events()
    assert nvml.freed_event_sets == 1
    assert b.wait_events(10) == []


def test_events_unsupported(make_nvml: MakeNvml, h100: list[FakeGpu]) -> None:
    nvml = make_nvml(h100)
    nvml.unsupported_events = {pynvml.nvmlEventTypeXidCriticalError}
    b = _backend()
    b.devices()
    assert not b.open_events()
    assert nvml.freed_event_sets == 1


@pytest.mark.parametrize("generation", ["h100", "a100", "b200"])
def test_field_decoder_equals_decode_fields(
    make_nvml: MakeNvml, request: pytest.FixtureRequest, generation: str
) -> None:
    """The one-struct decode gives decode_fields' list, answer by answer, through
    failing fields, a garbage value type, a value type change and the GPU lost."""
    gpus: list[FakeGpu] = request.getfixturevalue(generation)
    nvml = make_nvml(gpus)
    b = _backend()
    b.devices()
    dev = b._devices[0]
    g = gpus[0]
    link_field = min(g.link_fields - {FI.NVML_FI_DEV_NVLINK_GET_STATE})
    decoder = FieldDecoder()

    def check() -> None:
        try:
            arr = _get_field_values(dev.handle, dev.request_array)
        except pynvml.NVMLError:
            return
        assert decoder.decode(arr) == decode_fields(arr)

    check()
    assert decoder._whole is not None  # every field answered: the layout is learned
    for c in g.link_counters:
        c["crc"] += 3.0  # new values, same layout
    check()
    check()
    g.refuse_fields = {link_field}  # a field failing after the layout was learned
    check()
    g.refuse_fields = set()
    g.bad_value_type = {FI.NVML_FI_DEV_ENERGY}  # garbage value type: no value
    check()
    g.bad_value_type = set()
    g.link_counters[1]["crc"] = 2.5  # a value that changes its value type
    check()
    check()
    g.link_counters[1]["crc"] = 4.0
    check()
    nvml.field_error = pynvml.NVML_ERROR_GPU_IS_LOST
    check()
    nvml.field_error = None
    g.lost = True
    check()


class _PlainDecoder(FieldDecoder):
    """Decodes every answer field by field (the reference)."""

    def decode(self, values: object) -> list[tuple[int, float | None]]:
        return decode_fields(values)


def test_sample_with_field_decoder_equals_plain_decode(
    make_nvml: MakeNvml, h100: list[FakeGpu]
) -> None:
    """Samples decoded through the learned layout equal those decoded field by field."""
    make_nvml(h100)
    clock = Clock()
    fast, plain = _backend(clock), _backend(clock)
    fast.devices()
    plain.devices()
    for dev in plain._devices:
        dev.decoder = _PlainDecoder()
    for cycle in range(4):
        clock.t += 1.0
        for c in h100[2].link_counters:
            c["tx_kib"] += 1000.0 * cycle
        if cycle == 2:
            h100[2].refuse_fields = {min(h100[2].link_fields - {FI.NVML_FI_DEV_NVLINK_GET_STATE})}
        for i in range(len(h100)):
            assert fast.sample(i, fabric=False) == plain.sample(i, fabric=False)
    assert all(dev.decoder._whole is not None for dev in fast._devices)
