"""A fake NVML: the real ``pynvml`` module with its functions patched, per generation.

Error classes, constants and ctypes structures stay pynvml's own, so the
facade's error mapping and struct handling are exercised for real. Profiles
are built from the real captures in ``../shared/data/host/``:

* H100 (Hopper, GPM): ``gpud_h100x8_nvidia-smi-q_535.183.01.txt`` (8 GPUs).
* A100 (Ampere, no GPM): ``telegraf_a100-sxm4-80gb_mig_nvidia-smi-q-x.xml``
  (MIG enabled: utilization is NOT_SUPPORTED) and the 12-link
  ``gpud_a100_nvidia-smi_nvlink_status.txt``.
* B200 (Blackwell): the H100 values with NVLink5 field IDs and the GB200 fabric
  (cluster UUID / clique) from ``github_issue_excerpts.md``.
"""

from __future__ import annotations

import ctypes
import queue
import re
import threading
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

SUCCESS = pynvml.NVML_SUCCESS
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
MIB = 1024 * 1024

FI = pynvml
# Per-link field IDs each generation answers (scopeId = link).
HOPPER_LINK_FIELDS = {
    FI.NVML_FI_DEV_NVLINK_GET_STATE,
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
}
BLACKWELL_LINK_FIELDS = {
    FI.NVML_FI_DEV_NVLINK_GET_STATE,
    FI.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
    FI.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES,
    FI.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    FI.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    FI.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
}
# Per-link counter field -> FakeGpu.link_counters key.
LINK_COUNTER_KEYS = {
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "tx_kib",
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "rx_kib",
    FI.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES: "tx_bytes",
    FI.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES: "rx_bytes",
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: "crc",
    FI.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: "crc",
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
    FI.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
    FI.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS: "recovery",
    FI.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS: "recovery_failed",
}


@dataclass
class Fabric:
    """Fabric info a fake GPU reports; ``max_struct`` = newest struct its driver knows."""

    state: int
    cluster_uuid: str = "00000000-0000-0000-0000-000000000000"
    clique: int = 0
    status: int = SUCCESS
    health_summary: int = 0
    max_struct: str = "v3"  # v3 | v2 | legacy


@dataclass
class FakeGpu:
    """One fake GPU. ``None`` values answer NOT_SUPPORTED."""

    uuid: str
    name: str
    bus_id: str
    generation: str  # ampere | hopper | blackwell
    links: int = 0
    util: tuple[int, int] | None = (0, 0)
    power_mw: int | None = 70000
    limit_mw: int | None = 700000
    sm_mhz: int | None = 345
    mem_mhz: int | None = 2619
    reasons: int | None = 0x1
    mem_total: int | None = 81559 * MIB
    mem_used: int | None = 0
    temp: int | None = 36
    pids: list[int] | None = field(default_factory=list)
    gpm: dict[int, float] | None = None
    fabric: Fabric | None = None
    persistence: bool = True
    device_fields: dict[int, float] = field(default_factory=dict)
    link_state: list[int] = field(default_factory=list)
    link_counters: list[dict[str, float]] = field(default_factory=list)
    lost: bool = False
    hang: threading.Event | None = None
    temperature_v: bool = True
    refuse_fields: set[int] = field(default_factory=set)  # answer NOT_SUPPORTED (old driver)
    bad_value_type: set[int] = field(default_factory=set)  # answer a garbage valueType

    def __post_init__(self) -> None:
        if not self.link_state:
            self.link_state = [pynvml.NVML_NVLINK_STATE_ACTIVE] * self.links
        if not self.link_counters:
            self.link_counters = [
                {"tx_kib": 0.0, "rx_kib": 0.0, "tx_bytes": 0.0, "rx_bytes": 0.0, "crc": 0.0,
                 "replay": 0.0, "recovery": 0.0, "recovery_failed": 0.0}
                for _ in range(self.links)
            ]  # fmt: skip

    @property
    def link_fields(self) -> set[int]:
        if self.generation == "blackwell":
            return BLACKWELL_LINK_FIELDS
        return HOPPER_LINK_FIELDS


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Patches pynvml's functions to serve ``gpus``; ``init_error`` makes ``nvmlInit`` fail."""

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.field_requests: list[list[tuple[int, int]]] = []
        self.initialised = 0
        self.events: queue.Queue[tuple[int, int, int]] = queue.Queue()
        self.registered: dict[int, int] = {}
        self.unsupported_events: set[int] = set()
        self.freed_event_sets = 0
        self.field_error: int | None = None
        self._structs = [pynvml.struct_c_nvmlDevice_t() for _ in gpus]
        self._handles = [pynvml.c_nvmlDevice_t(s) for s in self._structs]
        self._gpm_owner: dict[int, int] = {}
        self._lock = threading.Lock()

    # -- helpers --------------------------------------------------------------------------

    def handle(self, index: int) -> Any:
        return self._handles[index]

    def _gpu(self, handle: Any, call: str) -> FakeGpu:
        with self._lock:
            self.calls[call] += 1
        if not self.initialised:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        addr = ctypes.cast(handle, ctypes.c_void_p).value
        for i, h in enumerate(self._handles):
            if ctypes.cast(h, ctypes.c_void_p).value == addr:
                g = self.gpus[i]
                if g.lost:
                    raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
                return g
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @staticmethod
    def _opt(value: Any) -> Any:
        if value is None:
            raise _err(NOT_SUPPORTED)
        return value

    def install(self, mp: pytest.MonkeyPatch) -> FakeNvml:
        """Patch every pynvml function the facade uses."""
        for name in dir(self):
            if name.startswith("nvml") or name == "_nvmlGetFunctionPointer":
                assert hasattr(pynvml, name), name
                mp.setattr(pynvml, name, getattr(self, name))
        return self

    # -- library --------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _err(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        if not self.initialised:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not self.initialised:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if self.gpus[index].lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self._handles[index]

    # -- identity -------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._gpu(h, "uuid").uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._gpu(h, "name").name

    def nvmlDeviceGetPciInfo_v3(self, h: Any) -> Any:
        g = self._gpu(h, "pci")
        info = pynvml.nvmlPciInfo_t()
        info.busId = g.bus_id.encode()
        return info

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        return 1 if self._gpu(h, "persistence").persistence else 0

    # -- NVLink / fields ------------------------------------------------------------------

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        g = self._gpu(h, "nvlink_state")
        if link >= g.links:
            raise _err(NOT_SUPPORTED)
        return 1 if g.link_state[link] == pynvml.NVML_NVLINK_STATE_ACTIVE else 0

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        # The facade calls nvmlDeviceGetFieldValues' C function into a reused array.
        if name == "nvmlDeviceGetFieldValues":
            return self._c_get_field_values
        raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _c_get_field_values(self, h: Any, count: ctypes.c_int32, ref: Any) -> int:
        try:
            g = self._gpu(h, "nvmlDeviceGetFieldValues")
        except pynvml.NVMLError as exc:
            return int(exc.value)
        if self.field_error is not None:
            return self.field_error
        arr = ref._obj
        assert len(arr) == count.value
        req: list[tuple[int, int]] = []
        for fv in arr:
            fid, scope = int(fv.fieldId), int(fv.scopeId)
            req.append((fid, scope))
            value = self._field(g, fid, scope)
            if value is None:
                fv.nvmlReturn = NOT_SUPPORTED
                continue
            fv.nvmlReturn = SUCCESS
            if fid in g.bad_value_type:
                fv.valueType = 42
                fv.value.ullVal = 7
            elif isinstance(value, float) and not value.is_integer():
                fv.valueType = pynvml.NVML_VALUE_TYPE_DOUBLE
                fv.value.dVal = value
            elif fid == FI.NVML_FI_DEV_NVLINK_GET_STATE:
                fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                fv.value.uiVal = int(value)
            else:
                fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                fv.value.ullVal = int(value)
        self.field_requests.append(req)
        return int(SUCCESS)

    @staticmethod
    def _field(g: FakeGpu, fid: int, scope: int) -> float | None:
        if fid in g.refuse_fields:
            return None
        if fid in g.link_fields:
            if scope >= g.links:
                return None
            if fid == FI.NVML_FI_DEV_NVLINK_GET_STATE:
                return float(g.link_state[scope])
            return g.link_counters[scope][LINK_COUNTER_KEYS[fid]]
        return g.device_fields.get(fid)

    # -- plain calls ------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu(h, "util")
        if g.hang is not None:
            g.hang.wait(10.0)  # bounded: the test releases it
        u = self._opt(g.util)
        return pynvml.c_nvmlUtilization_t(gpu=u[0], memory=u[1])

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(self._opt(self._gpu(h, "power").power_mw))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return int(self._opt(self._gpu(h, "limit").limit_mw))

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        g = self._gpu(h, "clock")
        return int(self._opt(g.sm_mhz if kind == pynvml.NVML_CLOCK_SM else g.mem_mhz))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return int(self._opt(self._gpu(h, "reasons").reasons))

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: Any = None) -> Any:
        g = self._gpu(h, "memory")
        total = self._opt(g.mem_total)
        used = self._opt(g.mem_used)
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetTemperatureV(self, h: Any, sensor: int) -> int:
        g = self._gpu(h, "temperature_v")
        if not g.temperature_v:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return int(self._opt(g.temp))

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return int(self._opt(self._gpu(h, "temperature").temp))

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._gpu(h, "procs")
        pids = self._opt(g.pids)
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in pids]

    # -- GPM --------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        g = self._gpu(h, "gpm_support")
        return SimpleNamespace(version=1, isSupportedDevice=1 if g.gpm is not None else 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        return pynvml.c_nvmlGpmSample_t(pynvml.struct_c_nvmlGpmSample_t())

    def nvmlGpmSampleFree(self, s: Any) -> None:
        self.calls["gpm_free"] += 1

    def nvmlGpmSampleGet(self, h: Any, s: Any) -> Any:
        g = self._gpu(h, "gpm_sample")
        self._opt(g.gpm)
        addr = ctypes.cast(s, ctypes.c_void_p).value
        assert addr is not None
        self._gpm_owner[addr] = self.gpus.index(g)
        return s

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:
        self.calls["gpm_metrics"] += 1
        a1 = ctypes.cast(mg.sample1, ctypes.c_void_p).value
        a2 = ctypes.cast(mg.sample2, ctypes.c_void_p).value
        assert a2 is not None and a1 != a2, "GPM needs two distinct samples"
        g = self.gpus[self._gpm_owner[a2]]
        assert g.gpm is not None
        assert mg.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            if int(m.metricId) in g.gpm:
                m.value = g.gpm[int(m.metricId)]
                m.nvmlReturn = SUCCESS
            else:
                m.nvmlReturn = NOT_SUPPORTED
        return mg

    # -- fabric -----------------------------------------------------------------------------

    def _fill_fabric(self, g: FakeGpu, info: Any) -> None:
        f = g.fabric
        if f is None:
            raise _err(NOT_SUPPORTED)
        raw = uuidlib.UUID(f.cluster_uuid).bytes
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        info.status = f.status
        info.cliqueId = f.clique
        info.state = f.state
        if hasattr(info, "healthSummary"):
            info.healthSummary = f.health_summary

    def nvmlDeviceGetGpuFabricInfoV(self, h: Any, ref: Any) -> int:
        g = self._gpu(h, "fabric_v")
        info = ref._obj  # a byref() argument, as the facade must pass
        if g.fabric is not None and g.fabric.max_struct == "legacy":
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        known = {"v3": {0x3000028, 0x2000024}, "v2": {0x2000024}}
        max_struct = g.fabric.max_struct if g.fabric is not None else "v3"
        if info.version not in known[max_struct]:
            raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        self._fill_fabric(g, info)
        return int(SUCCESS)

    def nvmlDeviceGetGpuFabricInfo(self, h: Any, ref: Any) -> int:
        g = self._gpu(h, "fabric_legacy")
        self._fill_fabric(g, ref._obj)
        return int(SUCCESS)

    # -- events -----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._es = pynvml.c_nvmlEventSet_t(pynvml.struct_c_nvmlEventSet_t())
        return self._es

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, es: Any) -> None:
        g = self._gpu(h, "register_events")
        if mask in self.unsupported_events:
            raise _err(NOT_SUPPORTED)
        i = self.gpus.index(g)
        self.registered[i] = self.registered.get(i, 0) | mask

    def nvmlEventSetWait(self, es: Any, timeout_ms: int) -> Any:
        try:
            gpu, etype, data = self.events.get(timeout=min(timeout_ms, 1000) / 1000.0)
        except queue.Empty:
            raise _err(pynvml.NVML_ERROR_TIMEOUT) from None
        ev = pynvml.c_nvmlEventData_t()
        ev.device = self._handles[gpu]
        ev.eventType = etype
        ev.eventData = data
        return ev

    def nvmlEventSetFree(self, es: Any) -> None:
        self.freed_event_sets += 1


# -- profiles from the real captures ---------------------------------------------------------


def _num(text: str) -> float:
    m = re.match(r"\s*(-?[0-9.]+)", text)
    assert m, text
    return float(m.group(1))


def parse_smi_q(text: str) -> list[dict[str, str]]:
    """``nvidia-smi -q`` text -> one flat ``{"Section/Key": value}`` dict per GPU."""
    gpus: list[dict[str, str]] = []
    cur: dict[str, str] | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f:.]+)$", line)
        if m:
            cur = {"Bus": m.group(1)}
            gpus.append(cur)
            stack = []
            continue
        if cur is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key])
        if sep and value.strip():
            cur[path] = value.strip()
        else:
            stack.append((indent, key))
    return gpus


def h100_gpus(shared_data: Path) -> list[FakeGpu]:
    """The 8 H100s of the nvidia-smi -q capture, as Hopper fakes with GPM and 18 links."""
    text = (shared_data / "host" / "gpud_h100x8_nvidia-smi-q_535.183.01.txt").read_text()
    out: list[FakeGpu] = []
    for i, q in enumerate(parse_smi_q(text)):
        idle = q["Clocks Event Reasons/Idle"] == "Active"
        g = FakeGpu(
            uuid=q["GPU UUID"],
            name=q["Product Name"],
            bus_id=q["PCI/Bus Id"],
            generation="hopper",
            links=18,
            util=(int(_num(q["Utilization/Gpu"])), int(_num(q["Utilization/Memory"]))),
            power_mw=int(_num(q["GPU Power Readings/Power Draw"]) * 1000),
            limit_mw=int(_num(q["GPU Power Readings/Current Power Limit"]) * 1000),
            sm_mhz=int(_num(q["Clocks/SM"])),
            mem_mhz=int(_num(q["Clocks/Memory"])),
            reasons=0x1 if idle else 0x0,
            mem_total=int(_num(q["FB Memory Usage/Total"])) * MIB,
            mem_used=int(_num(q["FB Memory Usage/Used"])) * MIB,
            temp=int(_num(q["Temperature/GPU Current Temp"])),
            pids=[],
            gpm={
                pynvml.NVML_GPM_METRIC_SM_UTIL: 0.0,
                pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 0.0,
                pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.0,
                pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 0.0,
            },
            fabric=Fabric(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
            if q["Fabric/State"] == "Completed"
            else None,
            persistence=q["Persistence Mode"] == "Enabled",
            device_fields={
                FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _num(q["PCI/Replays Since Reset"]),
                FI.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: 0.0,
                FI.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: 0.0,
                FI.NVML_FI_DEV_ENERGY: 1_000_000.0 + i,
                FI.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: _num(q["ECC Errors/Volatile/DRAM Correctable"]),
                FI.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: _num(q["ECC Errors/Volatile/DRAM Uncorrectable"]),
                FI.NVML_FI_DEV_REMAPPED_COR: _num(q["Remapped Rows/Correctable Error"]),
                FI.NVML_FI_DEV_REMAPPED_UNC: _num(q["Remapped Rows/Uncorrectable Error"]),
                FI.NVML_FI_DEV_REMAPPED_PENDING: 0.0 if q["Remapped Rows/Pending"] == "No" else 1.0,
                FI.NVML_FI_DEV_REMAPPED_FAILURE: 0.0
                if q["Remapped Rows/Remapping Failure Occurred"] == "No"
                else 1.0,
                FI.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0.0,
                FI.NVML_FI_DEV_MEMORY_TEMP: _num(q["Temperature/Memory Current Temp"]),
            },
        )
        out.append(g)
    assert len(out) == 8
    return out


def a100_gpus(shared_data: Path) -> list[FakeGpu]:
    """8 A100s: UUIDs and 12 links from the nvlink status; values from the MIG XML GPU."""
    host = shared_data / "host"
    root = ET.parse(host / "telegraf_a100-sxm4-80gb_mig_nvidia-smi-q-x.xml").getroot()
    x = root.find("gpu")
    assert x is not None

    def t(path: str) -> str:
        el = x.find(path)
        assert el is not None and el.text is not None, path
        return el.text

    status = (host / "gpud_a100_nvidia-smi_nvlink_status.txt").read_text()
    heads = re.findall(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-f-]+)\)$", status, re.M)
    blocks = re.split(r"^GPU \d+: .*$", status, flags=re.M)[1:]
    link_counts = [len(b.strip().splitlines()) for b in blocks]
    mig = t("mig_mode/current_mig") == "Enabled"
    out: list[FakeGpu] = []
    for (idx, name, uuid_), nlinks in zip(heads, link_counts, strict=True):
        i = int(idx)
        out.append(
            FakeGpu(
                uuid=t("uuid") if i == 0 else uuid_,
                name=name,
                bus_id=t("pci/pci_bus_id") if i == 0 else f"00000000:{0x07 + 0x10 * i:02X}:00.0",
                generation="ampere",
                links=nlinks,
                # MIG enabled: utilization.gpu is not supported ([h L7066-7088]; XML says N/A).
                util=None if mig else (0, 0),
                power_mw=int(_num(t("gpu_power_readings/power_draw")) * 1000),
                limit_mw=int(_num(t("gpu_power_readings/current_power_limit")) * 1000),
                sm_mhz=int(_num(t("clocks/sm_clock"))),
                mem_mhz=int(_num(t("clocks/mem_clock"))),
                reasons=0x0,
                mem_total=int(_num(t("fb_memory_usage/total"))) * MIB,
                mem_used=int(_num(t("fb_memory_usage/used"))) * MIB,
                temp=int(_num(t("temperature/gpu_temp"))),
                gpm=None,
                fabric=None,  # <fabric><state>N/A
                device_fields={
                    FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _num(t("pci/replay_counter")),
                    FI.NVML_FI_DEV_ENERGY: 5_000_000.0,
                    FI.NVML_FI_DEV_MEMORY_TEMP: _num(t("temperature/memory_temp")),
                    # remapped_rows N/A in the capture: no REMAPPED_* fields.
                },
            )
        )
    assert len(out) == 8 and all(g.links == 12 for g in out)
    return out


GB200_CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
GB200_CLIQUE = 4026


def b200_gpus(shared_data: Path) -> list[FakeGpu]:
    """Blackwell: H100 capture values, NVLink5 fields, GB200 fabric (gpud#1106 excerpt)."""
    excerpt = (shared_data / "host" / "github_issue_excerpts.md").read_text()
    assert GB200_CLUSTER in excerpt and f'"clique_id":{GB200_CLIQUE}' in excerpt
    out = h100_gpus(shared_data)
    for g in out:
        g.name = "NVIDIA B200"
        g.generation = "blackwell"
        g.limit_mw = 1_000_000
        g.fabric = Fabric(
            pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, GB200_CLUSTER, GB200_CLIQUE, SUCCESS, 1
        )
    return out
