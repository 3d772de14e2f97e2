"""The NVML facade: the only module that imports ``pynvml``.

Two parts:

* :class:`PynvmlBackend` - a synchronous :class:`~._types.GpuBackend` over
  nvidia-ml-py. It probes each GPU once (NVLink count, GPM support, which
  field IDs the generation answers) and then reads a GPU with one batched
  ``nvmlDeviceGetFieldValues`` plus a handful of plain calls per cycle.
* :class:`NvmlFacade` - runs any backend off the event loop in a bounded
  pool of daemon threads, with a timeout per call and at most one outstanding
  call per key (GPU), and watches critical events in one dedicated thread.

Field IDs and semantics: ``pynvml.py`` of nvidia-ml-py and ``nvml.h`` (NVIDIA
go-nvml ``gen/nvml/nvml.h``); dcgm-exporter's field names for the replay side.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import struct
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from ._pool import CallPool
from ._types import (
    EventKind,
    FabricInfo,
    FabricState,
    GpuBackend,
    GpuEvent,
    GpuIdentity,
    GpuLost,
    GpuSample,
    LinkSample,
    NvmlUnavailable,
)

T = TypeVar("T")

KIB = 1024.0
_MHZ = 1e6

# Error codes that mean "this GPU is gone" versus "the library is gone".
_LOST_CODES = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
    }
)
_GONE_CODES = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)
# Permanent "no": remembered per GPU and call so the call is not repeated.
_UNSUPPORTED_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
    }
)

_INIT_HINTS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 not found: no NVIDIA driver here",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "driver/library version mismatch: reload the nvidia module or reboot"
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: "no access to /dev/nvidia* (DeviceAllow=char-nvidia* rw)",
}

# -- field plan -------------------------------------------------------------------------

# Device-scope fields read every cycle: key -> field ID.
_DEVICE_FIELDS: dict[str, int] = {
    "pcie_replays": pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    "pcie_tx": pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    "pcie_rx": pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    "energy": pynvml.NVML_FI_DEV_ENERGY,
    "ecc_corrected": pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    "ecc_uncorrected": pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    "remap_cor": pynvml.NVML_FI_DEV_REMAPPED_COR,
    "remap_unc": pynvml.NVML_FI_DEV_REMAPPED_UNC,
    "remap_pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    "remap_failure": pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    "recovery_action": pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    "memory_temp": pynvml.NVML_FI_DEV_MEMORY_TEMP,
}

# Per-link fields (scopeId = link): key -> candidates (field ID, scale) in order of
# preference. Blackwell answers NOT_SUPPORTED for 138/139 and 161-163 and has the
# NVLink5 counters instead; the probe picks the first candidate that answers.
_LINK_FIELDS: dict[str, tuple[tuple[int, float], ...]] = {
    "state": ((pynvml.NVML_FI_DEV_NVLINK_GET_STATE, 1.0),),
    "tx": (
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KIB),
        (pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, 1.0),
    ),
    "rx": (
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, KIB),
        (pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES, 1.0),
    ),
    "crc": (
        (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 1.0),
        (pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, 1.0),
    ),
    "replay": ((pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 1.0),),
    "recovery": (
        (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1.0),
        (pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, 1.0),
    ),
    "recovery_failed": ((pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, 1.0),),
}
LINK_ERROR_TYPES = ("crc", "replay", "recovery", "recovery_failed")

# NVML_NVLINK_STATE_*: ACTIVE and SLEEP (low-power, link healthy) count as up.
_LINK_UP_STATES = frozenset({pynvml.NVML_NVLINK_STATE_ACTIVE, pynvml.NVML_NVLINK_STATE_SLEEP})

_GPM_METRICS: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",
}
# Each timed-out wait wakes the event thread (and takes the GIL) for nothing: one
# wake a second, well inside the 2 s the collector's teardown waits for the thread.
_EVENT_WAIT_MS = 1000
_GPM_MIN_INTERVAL = 0.1  # NVML wants > 100 ms between the two samples

_EVENT_MASKS: tuple[tuple[int, EventKind], ...] = (
    (pynvml.nvmlEventTypeXidCriticalError, EventKind.XID),
    (pynvml.nvmlEventTypeDoubleBitEccError, EventKind.DOUBLE_BIT_ECC),
    (getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000), EventKind.GPU_UNAVAILABLE),
    (getattr(pynvml, "nvmlEventTypeGpuRecoveryAction", 0x8000), EventKind.RECOVERY_ACTION),
)


def _code(exc: BaseException) -> int:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else pynvml.NVML_ERROR_UNKNOWN


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    return str(v)


def _field_value(fv: Any) -> float | None:
    """Decode one ``c_nvmlFieldValue_t`` by its ``valueType``; None unless it succeeded."""
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    vt = fv.valueType
    v = fv.value
    if vt == pynvml.NVML_VALUE_TYPE_DOUBLE:
        out = float(v.dVal)
    elif vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        out = float(v.uiVal)
    elif vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        out = float(v.ulVal)
    elif vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        out = float(v.ullVal)
    elif vt == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        out = float(v.sllVal)
    elif vt == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        out = float(v.siVal)
    elif vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        out = float(v.usVal)
    else:
        return None
    return out


def _raw_layout() -> struct.Struct | None:
    """A ``struct`` view of ``c_nvmlFieldValue_t`` when its layout is the expected one.

    pynvml's structures route every attribute read through a Python-level
    ``__getattribute__``; decoding ~120 values per GPU per second that way
    costs more than everything else in a cycle, so the array is unpacked from
    its buffer instead (checked against the ctypes offsets, else not used).
    """
    c = pynvml.c_nvmlFieldValue_t
    expected = {
        "fieldId": (0, 4),
        "scopeId": (4, 4),
        "valueType": (24, 4),
        "nvmlReturn": (28, 4),
        "value": (32, 8),
    }
    for name, (offset, size) in expected.items():
        f = getattr(c, name)
        if (f.offset, f.size) != (offset, size):
            return None
    if ctypes.sizeof(c) != 40 or ctypes.sizeof(ctypes.c_ulong) != 8:
        return None
    return struct.Struct("<II16xII8s")


_RAW = _raw_layout()
# valueType -> struct format of the 8-byte union member.
_VALUE_FORMATS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: struct.Struct("<d"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: struct.Struct("<I4x"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: struct.Struct("<Q"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: struct.Struct("<Q"),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: struct.Struct("<q"),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: struct.Struct("<i4x"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: struct.Struct("<H6x"),
}


def decode_fields(values: Any) -> list[tuple[int, float | None]]:
    """``(nvmlReturn, value)`` per element of a ``nvmlDeviceGetFieldValues`` result.

    The value is None unless the element succeeded with a known value type.
    """
    if _RAW is not None and isinstance(values, ctypes.Array):
        out: list[tuple[int, float | None]] = []
        for _fid, _scope, vtype, ret, raw in _RAW.iter_unpack(bytes(values)):
            fmt = _VALUE_FORMATS.get(vtype)
            if ret != pynvml.NVML_SUCCESS or fmt is None:
                out.append((ret, None))
            else:
                out.append((ret, float(fmt.unpack(raw)[0])))
        return out
    return [(int(fv.nvmlReturn), _field_value(fv)) for fv in values]


# valueType -> the 8-byte union member's format inside a whole-array struct.
_VALUE_CODES = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "d",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "I4x",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "Q",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "Q",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "q",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "i4x",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "H6x",
}


class FieldDecoder:
    """:func:`decode_fields` for one GPU's fixed request, in one ``struct`` call per cycle.

    A field's value type does not change between calls, so once every field
    of an answer succeeded, the whole array's layout (value type, return code
    and value of each element) is one struct. Later answers are unpacked with
    it and taken as they are when their value types and return codes are the
    same again (every field succeeded); any other answer goes through
    :func:`decode_fields`. The result is the same list either way.
    """

    __slots__ = ("_ok", "_types", "_whole")

    def __init__(self) -> None:
        self._whole: struct.Struct | None = None
        self._types: tuple[int, ...] = ()
        self._ok: tuple[int, ...] = ()

    def decode(self, values: Any) -> list[tuple[int, float | None]]:
        """``decode_fields(values)``."""
        whole = self._whole
        if (
            whole is not None
            and isinstance(values, ctypes.Array)
            and ctypes.sizeof(values) == whole.size
        ):
            flat = whole.unpack_from(values)
            rets = flat[1::3]
            if rets == self._ok and flat[0::3] == self._types:
                return list(zip(rets, map(float, flat[2::3]), strict=True))
        out = decode_fields(values)
        if _RAW is not None and isinstance(values, ctypes.Array):
            self._learn(_RAW, values, out)
        return out

    def _learn(
        self, raw: struct.Struct, values: Any, decoded: list[tuple[int, float | None]]
    ) -> None:
        """Take this answer's layout when every field succeeded with a known value type."""
        if any(v is None for _, v in decoded):
            return  # a failed field's value type says nothing: keep the last layout
        types = tuple(vtype for _f, _s, vtype, _r, _v in raw.iter_unpack(bytes(values)))
        if types == self._types:
            return
        self._types = types
        self._ok = (pynvml.NVML_SUCCESS,) * len(types)
        self._whole = struct.Struct("<" + "".join("24xII" + _VALUE_CODES[t] for t in types))


def _field_array(request: Sequence[tuple[int, int]]) -> Any:
    arr = (pynvml.c_nvmlFieldValue_t * len(request))()
    for i, (fid, scope) in enumerate(request):
        arr[i].fieldId = fid
        arr[i].scopeId = scope
    return arr


def _get_field_values(handle: Any, arr: Any) -> Any:
    """``nvmlDeviceGetFieldValues`` into a prepared array.

    pynvml's wrapper rebuilds the request array through Python-level
    ``__setattr__`` on every call (~240 per GPU per cycle); the IDs never
    change, so the array is built once and the C function is called directly,
    through pynvml's own function-pointer cache and error mapping.
    """
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    ret = fn(handle, ctypes.c_int32(len(arr)), ctypes.byref(arr))
    pynvml._nvmlCheckReturn(ret)
    return arr


def _handle_key(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


@dataclass(slots=True)
class _Slot:
    key: str
    link: int  # -1 for device fields
    scale: float


@dataclass(slots=True)
class _Device:
    identity: GpuIdentity
    handle: Any
    links: int = 0
    request: list[tuple[int, int]] = field(default_factory=list)
    request_array: Any = None  # c_nvmlFieldValue_t[n], IDs filled once, reused every cycle
    decoder: FieldDecoder = field(default_factory=FieldDecoder)
    slots: list[_Slot] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    gpm: bool = False
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_prev: int = -1  # index into gpm_samples of the last good sample, -1 none
    gpm_ts: float = 0.0
    fabric_variant: str = "v3"


class PynvmlBackend:
    """:class:`~._types.GpuBackend` over nvidia-ml-py. Thread-safe as NVML is; stateless per call
    apart from per-GPU probes and the GPM sample buffers (one outstanding call per GPU)."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._devices: list[_Device] = []
        self._by_handle: dict[int, int] = {}
        self._event_set: Any = None
        self._initialised = False

    # -- lifecycle ----------------------------------------------------------------------

    def init(self) -> None:
        """``nvmlInit``; any failure becomes :class:`NvmlUnavailable` with an operator hint."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            code = _code(exc)
            hint = _INIT_HINTS.get(code, "")
            detail = f"{exc} (NVML error {code})" + (f"; {hint}" if hint else "")
            raise NvmlUnavailable(detail) from None
        self._initialised = True

    def shutdown(self) -> None:
        """Free GPM samples and ``nvmlShutdown``; errors are swallowed (best effort)."""
        for dev in self._devices:
            for s in dev.gpm_samples:
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlGpmSampleFree(s)
            dev.gpm_samples.clear()
        self._devices = []
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()

    def devices(self) -> Sequence[GpuIdentity]:
        """Enumerate and probe every GPU (identity, NVLinks, GPM, supported fields)."""
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"cannot count GPUs: {exc}") from None
        if count <= 0:
            raise NvmlUnavailable("NVML initialised but no NVIDIA GPU is visible")
        devs: list[_Device] = []
        for index in range(count):
            try:
                devs.append(self._probe(index))
            except pynvml.NVMLError as exc:
                code = _code(exc)
                if code in _GONE_CODES:
                    raise NvmlUnavailable(f"GPU {index}: {exc}") from None
                # A GPU lost at start still gets a slot so it can be reported failed.
                devs.append(_Device(GpuIdentity(index, "", "unknown", ""), None))
        self._devices = devs
        self._by_handle = {}
        for d in devs:
            key = _handle_key(d.handle) if d.handle is not None else None
            if key is not None:
                self._by_handle[key] = d.identity.index
        return [d.identity for d in devs]

    def _probe(self, index: int) -> _Device:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid_ = _text(pynvml.nvmlDeviceGetUUID(h))
        model = _text(pynvml.nvmlDeviceGetName(h))
        try:
            bus = _text(pynvml.nvmlDeviceGetPciInfo_v3(h).busId)
        except pynvml.NVMLError:
            bus = ""
        persistence: bool | None
        try:
            persistence = pynvml.nvmlDeviceGetPersistenceMode(h) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            persistence = None
        dev = _Device(GpuIdentity(index, uuid_, model, bus, persistence), h)
        dev.links = self._count_links(h)
        self._plan_fields(dev)
        dev.gpm = self._gpm_supported(dev)
        return dev

    @staticmethod
    def _count_links(h: Any) -> int:
        # Stop at the first NOT_SUPPORTED after >= 1 link; on link 0 it means no NVLink.
        n = 0
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(h, link)
            except pynvml.NVMLError as exc:
                if _code(exc) in _LOST_CODES or _code(exc) in _GONE_CODES:
                    raise
                break
            n = link + 1
        return n

    def _plan_fields(self, dev: _Device) -> None:
        """One probing call picks the field IDs this GPU answers; later cycles ask only those."""
        probe: list[tuple[int, int]] = [(fid, 0) for fid in _DEVICE_FIELDS.values()]
        link_cands: list[tuple[str, int, float]] = []
        if dev.links:
            for key, cands in _LINK_FIELDS.items():
                for fid, scale in cands:
                    probe.append((fid, 0))
                    link_cands.append((key, fid, scale))
        try:
            values = _get_field_values(dev.handle, _field_array(probe))
        except pynvml.NVMLError as exc:
            if _code(exc) in _LOST_CODES or _code(exc) in _GONE_CODES:
                raise
            return
        ok = [ret == pynvml.NVML_SUCCESS for ret, _ in decode_fields(values)]
        request: list[tuple[int, int]] = []
        slots: list[_Slot] = []
        for i, (key, fid) in enumerate(_DEVICE_FIELDS.items()):
            if ok[i]:
                request.append((fid, 0))
                slots.append(_Slot(key, -1, 1.0))
        chosen: dict[str, tuple[int, float]] = {}
        base = len(_DEVICE_FIELDS)
        for j, (key, fid, scale) in enumerate(link_cands):
            if key not in chosen and ok[base + j]:
                chosen[key] = (fid, scale)
        for link in range(dev.links):
            for key, (fid, scale) in chosen.items():
                request.append((fid, link))
                slots.append(_Slot(key, link, scale))
        dev.request = request
        dev.request_array = _field_array(request)
        dev.slots = slots
        if "state" not in chosen:
            dev.unsupported.add("state_field")

    def _gpm_supported(self, dev: _Device) -> bool:
        try:
            support = pynvml.nvmlGpmQueryDeviceSupport(dev.handle)
            if not support.isSupportedDevice:
                return False
            dev.gpm_samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        except pynvml.NVMLError:
            return False
        return True

    # -- sampling -------------------------------------------------------------------------

    def _call(self, dev: _Device, name: str, fn: Callable[..., T], *args: Any) -> T | None:
        """One NVML call with the error policy: lost -> GpuLost, gone -> NvmlUnavailable,
        unsupported -> None and never asked again, anything else -> None this cycle."""
        if name in dev.unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code in _LOST_CODES:
                raise GpuLost(f"GPU {dev.identity.index}: {exc}") from None
            if code in _GONE_CODES:
                raise NvmlUnavailable(f"NVML stopped working: {exc}") from None
            if code in _UNSUPPORTED_CODES:
                dev.unsupported.add(name)
            return None

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        """Read one GPU: one batched field call, a few plain calls, GPM when supported."""
        try:
            dev = self._devices[index]
        except IndexError:
            raise GpuLost(f"GPU {index} is not known to NVML") from None
        if dev.handle is None:
            raise GpuLost(f"GPU {index} could not be opened")
        h = dev.handle
        values: dict[str, float] = {}
        link_vals: dict[int, dict[str, float]] = {}
        if dev.request:
            fvs = self._call(dev, "fields", _get_field_values, h, dev.request_array)
            if fvs is not None:
                for slot, (ret, v) in zip(dev.slots, dev.decoder.decode(fvs), strict=False):
                    if v is None:
                        if ret in _LOST_CODES:
                            raise GpuLost(f"GPU {index}: field values: GPU is lost")
                        continue
                    if slot.link < 0:
                        values[slot.key] = v * slot.scale
                    else:
                        link_vals.setdefault(slot.link, {})[slot.key] = v * slot.scale
        links = self._links(dev, link_vals)
        util = self._call(dev, "util", pynvml.nvmlDeviceGetUtilizationRates, h)
        power = self._call(dev, "power", pynvml.nvmlDeviceGetPowerUsage, h)
        limit = self._call(dev, "limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
        sm_clk = self._call(dev, "sm_clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        mem_clk = self._call(
            dev, "mem_clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM
        )
        reasons = self._call(dev, "reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        mem = self._call(dev, "memory", pynvml.nvmlDeviceGetMemoryInfo, h)
        temp = self._temperature(dev)
        procs = self._call(dev, "procs", pynvml.nvmlDeviceGetComputeRunningProcesses, h)
        gpm = self._gpm(dev) if dev.gpm else {}
        fab = self._fabric(dev) if fabric else None
        pids = None if procs is None else tuple(sorted({int(p.pid) for p in procs}))
        return GpuSample(
            utilization=None if util is None else util.gpu / 100.0,
            memory_utilization=None if util is None else util.memory / 100.0,
            sm_active=gpm.get("sm_active"),
            sm_occupancy=gpm.get("sm_occupancy"),
            tensor_active=gpm.get("tensor_active"),
            dram_active=gpm.get("dram_active"),
            power_watts=None if power is None else power / 1000.0,
            power_limit_watts=None if limit is None else limit / 1000.0,
            energy_joules=_scaled(values.get("energy"), 1e-3),
            sm_clock_hz=None if sm_clk is None else sm_clk * _MHZ,
            memory_clock_hz=None if mem_clk is None else mem_clk * _MHZ,
            clock_event_reasons=None if reasons is None else int(reasons),
            memory_used_bytes=None if mem is None else float(mem.used),
            memory_total_bytes=None if mem is None else float(mem.total),
            temperature_celsius=temp,
            memory_temperature_celsius=values.get("memory_temp"),
            pids=pids,
            pcie_tx_bytes=values.get("pcie_tx"),
            pcie_rx_bytes=values.get("pcie_rx"),
            pcie_replays=values.get("pcie_replays"),
            ecc_corrected=values.get("ecc_corrected"),
            ecc_uncorrected=values.get("ecc_uncorrected"),
            remapped_correctable=values.get("remap_cor"),
            remapped_uncorrectable=values.get("remap_unc"),
            remap_pending=values.get("remap_pending"),
            remap_failure=values.get("remap_failure"),
            recovery_action=values.get("recovery_action"),
            links=links,
            fabric=fab,
        )

    def _links(
        self, dev: _Device, link_vals: dict[int, dict[str, float]]
    ) -> tuple[LinkSample, ...]:
        out: list[LinkSample] = []
        for link in range(dev.links):
            vals = link_vals.get(link, {})
            up: bool | None
            if "state" in vals:
                up = int(vals["state"]) in _LINK_UP_STATES
            elif "state_field" in dev.unsupported:
                # Older drivers without field 165: the per-link call.
                st = self._call(
                    dev, f"link_state_{link}", pynvml.nvmlDeviceGetNvLinkState, dev.handle, link
                )
                up = None if st is None else bool(st)
            else:
                up = None
            errors = {t: vals[t] for t in LINK_ERROR_TYPES if t in vals}
            out.append(LinkSample(link, up, vals.get("tx"), vals.get("rx"), errors))
        return tuple(out)

    def _temperature(self, dev: _Device) -> float | None:
        if "temp_v" not in dev.unsupported:
            t = self._call(
                dev,
                "temp_v",
                pynvml.nvmlDeviceGetTemperatureV,
                dev.handle,
                pynvml.NVML_TEMPERATURE_GPU,
            )
            if t is not None:
                return float(t)
            if "temp_v" not in dev.unsupported:
                return None
        # nvmlDeviceGetTemperatureV is recent; the deprecated call answers on older drivers.
        t = self._call(
            dev, "temp", pynvml.nvmlDeviceGetTemperature, dev.handle, pynvml.NVML_TEMPERATURE_GPU
        )
        return None if t is None else float(t)

    def _gpm(self, dev: _Device) -> dict[str, float]:
        now = self._monotonic()
        if dev.gpm_prev >= 0 and now - dev.gpm_ts < _GPM_MIN_INTERVAL:
            return {}
        cur = 1 - dev.gpm_prev if dev.gpm_prev >= 0 else 0
        got = self._call(dev, "gpm", pynvml.nvmlGpmSampleGet, dev.handle, dev.gpm_samples[cur])
        if got is None:
            if "gpm" in dev.unsupported:
                dev.gpm = False
            dev.gpm_prev = -1
            return {}
        out: dict[str, float] = {}
        if dev.gpm_prev >= 0:
            mg = pynvml.c_nvmlGpmMetricsGet_t()
            mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(_GPM_METRICS)
            mg.sample1 = dev.gpm_samples[dev.gpm_prev]
            mg.sample2 = dev.gpm_samples[cur]
            for i, mid in enumerate(_GPM_METRICS):
                mg.metrics[i].metricId = mid
            if self._call(dev, "gpm_metrics", pynvml.nvmlGpmMetricsGet, mg) is not None:
                for i in range(len(_GPM_METRICS)):
                    m = mg.metrics[i]
                    name = _GPM_METRICS.get(int(m.metricId))
                    if name is not None and m.nvmlReturn == pynvml.NVML_SUCCESS:
                        out[name] = min(max(float(m.value) / 100.0, 0.0), 1.0)
        dev.gpm_prev = cur
        dev.gpm_ts = now
        return out

    def _fabric(self, dev: _Device) -> FabricInfo | None:
        """Fabric info through the versioned call with the v3 struct; v2 / legacy on old drivers.

        pynvml's ``c_nvmlGpuFabricInfoV_t`` is the v2 struct while the header's
        ``nvmlGpuFabricInfoV_t`` is v3, so the struct is chosen explicitly.
        """
        h = dev.handle
        info: Any
        while True:
            variant = dev.fabric_variant
            if variant == "v3":
                info = pynvml.c_nvmlGpuFabricInfo_v3_t()
                fn: Callable[..., Any] = pynvml.nvmlDeviceGetGpuFabricInfoV
            elif variant == "v2":
                info = pynvml.c_nvmlGpuFabricInfo_v2_t()
                fn = pynvml.nvmlDeviceGetGpuFabricInfoV
            elif variant == "legacy":
                info = pynvml.c_nvmlGpuFabricInfo_t()
                fn = pynvml.nvmlDeviceGetGpuFabricInfo
            else:
                return FabricInfo(FabricState.NOT_SUPPORTED)
            try:
                fn(h, ctypes.byref(info))
                break
            except pynvml.NVMLError as exc:
                code = _code(exc)
                if code in _LOST_CODES:
                    raise GpuLost(f"GPU {dev.identity.index}: {exc}") from None
                if code in _GONE_CODES:
                    raise NvmlUnavailable(f"NVML stopped working: {exc}") from None
                if code == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH and variant == "v3":
                    dev.fabric_variant = "v2"
                elif code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND and variant in ("v3", "v2"):
                    dev.fabric_variant = "legacy"
                elif code == pynvml.NVML_ERROR_NOT_SUPPORTED:
                    dev.fabric_variant = "none"
                    return FabricInfo(FabricState.NOT_SUPPORTED)
                else:
                    return None
        try:
            state = FabricState(int(info.state))
        except ValueError:
            return None
        raw = bytes(info.clusterUuid)
        cluster = str(uuid.UUID(bytes=raw)) if len(raw) == 16 else ""
        return FabricInfo(
            state=state,
            cluster_uuid=cluster,
            clique_id=int(info.cliqueId),
            ok=int(info.status) == pynvml.NVML_SUCCESS,
            health_summary=int(getattr(info, "healthSummary", 0)),
        )

    # -- events ---------------------------------------------------------------------------

    def open_events(self) -> bool:
        """Register XID first (alone), then the other critical types one by one per GPU."""
        try:
            es = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError:
            return False
        registered = False
        for dev in self._devices:
            if dev.handle is None:
                continue
            for mask, _kind in _EVENT_MASKS:
                try:
                    pynvml.nvmlDeviceRegisterEvents(dev.handle, mask, es)
                except pynvml.NVMLError:
                    # NOT_SUPPORTED registers nothing; XID failing means none of them will do.
                    if mask == pynvml.nvmlEventTypeXidCriticalError:
                        break
                    continue
                registered = True
        if not registered:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(es)
            return False
        self._event_set = es
        return True

    def wait_events(self, timeout_ms: int) -> Sequence[GpuEvent]:
        """Wait for one event, then drain whatever else is already queued (bounded)."""
        es = self._event_set
        if es is None:
            return []
        out: list[GpuEvent] = []
        wait = timeout_ms
        for _ in range(64):
            try:
                data = pynvml.nvmlEventSetWait(es, wait)
            except pynvml.NVMLError as exc:
                code = _code(exc)
                if code == pynvml.NVML_ERROR_TIMEOUT:
                    break
                if code in _GONE_CODES:
                    raise NvmlUnavailable(f"event wait: {exc}") from None
                if out:
                    break
                raise
            out.append(self._event(data))
            wait = 0
        return out

    def _event(self, data: Any) -> GpuEvent:
        key = _handle_key(data.device)
        gpu = self._by_handle.get(key, -1) if key is not None else -1
        etype = int(data.eventType)
        kind = EventKind.XID
        for mask, k in _EVENT_MASKS:
            if etype & mask:
                kind = k
                break
        return GpuEvent(gpu, kind, int(data.eventData), time.time())

    def close_events(self) -> None:
        """Free the event set (best effort)."""
        es, self._event_set = self._event_set, None
        if es is not None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(es)


def _scaled(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


# -- the async facade --------------------------------------------------------------------------


class CallTimeout(Exception):
    """The call did not finish in time; it keeps running in its thread."""


class CallBusy(Exception):
    """The previous call for this key is still running (stuck): nothing was submitted."""


class NvmlFacade:
    """Runs a :class:`GpuBackend` off the loop: bounded threads, per-call timeouts, no pile-up.

    Every call has a key (``"init"``, a GPU index...). While a call for a key is
    outstanding, another call for the same key raises :class:`CallBusy` at once
    instead of queueing: a hung GPU costs at most one thread.
    """

    def __init__(self, backend: GpuBackend, *, workers: int, timeout: float) -> None:
        self.backend = backend
        self.timeout = timeout
        self._pool = CallPool(workers)
        self._inflight: dict[Hashable, Future[Any]] = {}
        self._events: collections.deque[GpuEvent] = collections.deque(maxlen=4096)
        self._event_errors: collections.deque[str] = collections.deque(maxlen=64)
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def stuck(self) -> int:
        """Calls that outlived their timeout and are still running."""
        return sum(1 for f in self._inflight.values() if not f.done())

    @property
    def threads(self) -> int:
        """Worker threads started (bounded by ``workers``)."""
        return self._pool.threads

    def busy(self, key: Hashable) -> bool:
        """Whether a call for ``key`` is still outstanding."""
        fut = self._inflight.get(key)
        return fut is not None and not fut.done()

    async def call(self, key: Hashable, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the pool and wait up to the facade's timeout.

        Raises :class:`CallBusy`, :class:`CallTimeout`, or whatever ``fn`` raised.
        """
        prev = self._inflight.get(key)
        if prev is not None:
            if not prev.done():
                raise CallBusy(key)
            del self._inflight[key]
        fut = self._pool.submit(fn, *args)
        self._inflight[key] = fut
        wrapped = asyncio.wrap_future(fut)
        done, _ = await asyncio.wait({wrapped}, timeout=self.timeout)
        if not done:
            # The asyncio wrapper may get an exception later; mark it retrieved.
            wrapped.add_done_callback(_consume)
            raise CallTimeout(key)
        del self._inflight[key]
        return wrapped.result()

    async def call_each(
        self, calls: Sequence[tuple[Hashable, Callable[[], T]]]
    ) -> list[tuple[T | None, BaseException | None]]:
        """:meth:`call` for each ``(key, fn)`` at once, with one wait for them all.

        Each outcome is ``(result, None)`` or ``(None, exception)``, the
        exception being what :meth:`call` would raise for that key:
        :class:`CallBusy`, :class:`CallTimeout` or the call's own. One waiter
        and one timer per cycle instead of a task, a wrapped future and a timer
        per call; the calls still run on their own workers, each under its key.
        """
        outcomes: list[tuple[T | None, BaseException | None]] = [(None, None)] * len(calls)
        pending: list[tuple[int, Hashable, Future[T]]] = []
        inflight = self._inflight
        for i, (key, fn) in enumerate(calls):
            prev = inflight.get(key)
            if prev is not None:
                if not prev.done():
                    outcomes[i] = (None, CallBusy(key))
                    continue
                del inflight[key]
            fut = self._pool.submit(fn)
            inflight[key] = fut
            pending.append((i, key, fut))
        if pending:
            await self._wait_all([fut for _, _, fut in pending])
        for i, key, fut in pending:
            if not fut.done():
                outcomes[i] = (None, CallTimeout(key))  # stays in flight: the next call is busy
                continue
            del inflight[key]
            exc = fut.exception()
            outcomes[i] = (None, exc) if exc is not None else (fut.result(), None)
        return outcomes

    async def _wait_all(self, futures: list[Future[T]]) -> None:
        """Until every future is done or the facade's timeout passed (one loop wake-up)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        left = [len(futures)]
        lock = threading.Lock()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        def one_done(_: Future[T]) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(wake)

        for fut in futures:
            fut.add_done_callback(one_done)
        try:
            async with asyncio.timeout(self.timeout):
                await waiter
        except TimeoutError:
            pass

    def start_events(self, on_error: Callable[[str], None]) -> None:
        """Start the event-watching thread (the backend's events must be open)."""
        if self._watcher is not None:
            return
        self._watch_stop.clear()
        t = threading.Thread(target=self._watch, args=(on_error,), name="nvml-events", daemon=True)
        self._watcher = t
        t.start()

    def drain_events(self) -> list[GpuEvent]:
        """Events received since the last drain (bounded buffer; oldest dropped first)."""
        out: list[GpuEvent] = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return out

    def _watch(self, on_error: Callable[[str], None]) -> None:
        backoff = 1.0
        while not self._watch_stop.is_set():
            try:
                # Short waits bound how long close() waits for this thread.
                events = self.backend.wait_events(_EVENT_WAIT_MS)
            except NvmlUnavailable as exc:
                on_error(str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - the watcher must survive driver noise
                on_error(f"event wait failed: {exc}")
                self._watch_stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            self._events.extend(events)

    def stop_events(self, timeout: float) -> bool:
        """Stop the watcher; True when it exited within ``timeout`` seconds."""
        t, self._watcher = self._watcher, None
        self._watch_stop.set()
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def close(self, timeout: float) -> bool:
        """Stop the pool; True when no thread is left inside the backend."""
        self._pool.close()
        return self._pool.join(timeout) and self.stuck == 0


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
