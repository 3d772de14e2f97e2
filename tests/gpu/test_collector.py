"""The GPU collector end to end: patched pynvml -> PynvmlBackend -> readings -> SnapshotStore."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest
import structlog
from structlog.testing import capture_logs

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._facade import PynvmlBackend
from fabricwatch.collectors.gpu._metrics import METRICS
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.collectors.gpu._types import GpuSample
from fabricwatch.errors import CollectorError
from fabricwatch.readings import Batch, MetricKind, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_gpu import SimulatedGPUs

from ._fakes import FakeGpu, FakeNvml
from .conftest import MakeNvml

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Rig:
    """A collector over the fake NVML, a manual clock and a store."""

    def __init__(self, nvml: FakeNvml, tmp: Path, **settings: Any) -> None:
        self.nvml = nvml
        self.clock = Clock()
        self.proc = tmp / "proc"
        self.proc.mkdir(exist_ok=True)
        env = CollectorEnv(node="n1", proc_root=self.proc, monotonic=self.clock)
        # Generous: on a loaded CI worker the fake's calls, run in threads,
        # have taken over 0.3 s. The hang tests set their own short timeout.
        settings.setdefault("call_timeout", 5.0)
        self.collector = GpuCollector(
            GpuSettings(**settings), env, PynvmlBackend(monotonic=self.clock)
        )
        self.store = SnapshotStore()
        self.store.register("gpu", self.collector.metrics())

    async def tick(self, dt: float = 1.0) -> Sequence[Reading]:
        self.clock.t += dt
        readings = await self.collector.collect()
        res = self.store.ingest("gpu", readings, self.clock.t)
        assert res.rejected == 0, res.reasons
        return readings

    def value(self, name: str, *labels: str) -> float:
        s = self.store.get(f"fabricwatch_gpu_{name}", labels)
        assert s is not None, (name, labels)
        return s.value

    def rate(self, name: str, *labels: str) -> float:
        s = self.store.get(f"fabricwatch_gpu_{name}", labels)
        assert s is not None and s.rate is not None, (name, labels)
        return s.rate.per_second


@pytest.fixture
async def rig_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def make(nvml: FakeNvml, **settings: Any) -> Rig:
        r = Rig(nvml, tmp_path, **settings)
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        await r.collector.close()


def _signals() -> list[tuple[str, str, tuple[str, ...]]]:
    """GPU rows of docs/signals.md: (name, kind, labels)."""
    rows = []
    for line in (REPO / "docs" / "signals.md").read_text().splitlines():
        m = re.match(r"^\| `(fabricwatch_gpu_\w+)` \| (\w+)[^|]*\| ([^|]+) \|", line)
        if m:
            labels = tuple(x.strip() for x in m.group(3).split(","))
            rows.append((m.group(1), m.group(2), labels))
    return rows


def test_specs_match_signal_catalogue() -> None:
    specs = {s.name: s for s in METRICS}
    rows = _signals()
    assert len(rows) == 14
    for name, kind, labels in rows:
        assert name in specs, name
        assert specs[name].kind is MetricKind(kind), name
        assert specs[name].labels == labels, name
    for s in METRICS:
        assert s.name.startswith("fabricwatch_gpu_")
        assert "pid" not in s.labels


def test_registered_in_builtin_registry() -> None:
    factory = builtin_registry()["gpu"]
    assert factory.settings is GpuSettings
    c = factory.build(GpuSettings(backend="simulated", simulated_count=2), CollectorEnv())
    assert c.name == "gpu"


async def test_h100_end_to_end_values_and_rates(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100)
    rig = rig_factory(nvml)
    await rig.collector.start()
    assert rig.collector.present
    await rig.tick()
    for g in h100:
        g.link_counters[4]["tx_kib"] += 2_000_000.0  # 2e6 KiB in 1 s
        g.link_counters[4]["crc"] += 3
        g.device_fields[pynvml.NVML_FI_DEV_ENERGY] += 700_000.0  # mJ in 1 s = 700 W
    await rig.tick()
    assert rig.rate("nvlink_transmit_bytes", "0", "4") == pytest.approx(2e6 * 1024)
    assert rig.rate("nvlink_transmit_bytes", "0", "5") == 0.0
    assert rig.rate("nvlink_errors", "7", "4", "crc") == pytest.approx(3.0)
    assert rig.rate("energy_joules", "1") == pytest.approx(700.0)
    assert rig.value("power_watts", "0") == pytest.approx(71.97)
    assert rig.value("power_limit_watts", "0") == pytest.approx(700.0)
    assert rig.value("memory_total_bytes", "0") == 81559 * 1024 * 1024
    assert rig.value("utilization_ratio", "0") == 0.0
    assert rig.value("sm_active_ratio", "0") == 0.0
    assert rig.value("compute_processes", "0") == 0.0
    assert rig.value("healthy", "3") == 1.0
    assert rig.value("sample_stale", "3") == 0.0
    assert rig.value("nvlink_up", "2", "17") == 1.0
    assert rig.value("clock_event_active", "0", "gpu_idle") == 1.0
    assert rig.value("clock_event_active", "0", "hw_slowdown") == 0.0
    assert rig.value("sm_clock_hertz", "0") == 345e6
    assert rig.value("temperature_celsius", "0") == 36.0
    assert rig.value("pcie_replays", "0") == 120.0
    assert rig.value("fabric_info", "0", "", "completed") == 1.0
    info = rig.store.get(
        "fabricwatch_gpu_info",
        (
            "0",
            "GPU-566e6f65-c38e-b12f-4824-6944218668b9",
            "NVIDIA H100 80GB HBM3",
            "00000000:53:00.0",
        ),
    )
    assert info is not None and info.value == 1.0
    assert rig.collector.clique() == ""


async def test_b200_clique_and_blackwell_errors(
    make_nvml: MakeNvml, b200: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    rig = rig_factory(make_nvml(b200))
    await rig.collector.start()
    await rig.tick()
    b200[0].link_counters[9]["recovery"] += 2
    b200[0].link_counters[9]["tx_bytes"] += 5e9
    await rig.tick()
    clique = "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"
    assert rig.value("fabric_info", "0", clique, "completed") == 1.0
    assert rig.collector.clique() == clique
    assert rig.rate("nvlink_errors", "0", "9", "recovery") == pytest.approx(2.0)
    assert rig.rate("nvlink_transmit_bytes", "0", "9") == pytest.approx(5e9)
    assert rig.store.get("fabricwatch_gpu_nvlink_errors", ("0", "9", "replay")) is None


async def test_a100_no_gpm_no_utilization_under_mig(
    make_nvml: MakeNvml, a100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    rig = rig_factory(make_nvml(a100))
    await rig.collector.start()
    await rig.tick()
    await rig.tick()
    assert rig.store.family("fabricwatch_gpu_sm_active_ratio") == ()
    assert rig.store.family("fabricwatch_gpu_utilization_ratio") == ()
    assert len(rig.store.family("fabricwatch_gpu_nvlink_up")) == 8 * 12
    assert rig.value("power_watts", "0") == pytest.approx(67.03)
    assert rig.store.family("fabricwatch_gpu_fabric_info")[0].labels == ("0", "", "not_supported")


async def test_absent_logs_once_and_retries_slowly(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    rig = rig_factory(nvml, retry_interval=60.0)
    with capture_logs() as logs:
        await rig.collector.start()  # absence is not a start failure
        for _ in range(5):
            with pytest.raises(CollectorError, match=r"NVML not available: .*Not Found"):
                await rig.tick(10.0)
    warnings = [e for e in logs if e["log_level"] in ("warning", "error")]
    assert [e["event"] for e in warnings] == ["nvml_absent"]
    assert "no NVIDIA driver" in warnings[0]["reason"]
    # start + one retry after 60 s (5 x 10 s), not one per cycle.
    assert nvml.calls["nvmlInit"] == 1
    nvml.init_error = None
    rig.clock.t += 15.0
    await rig.tick()  # 66 s after the start: due, and now it works
    assert rig.collector.present
    assert nvml.calls["nvmlInit"] == 2
    assert rig.value("healthy", "0") == 1.0


async def test_no_driver_on_this_machine(rig_factory: Callable[..., Rig], tmp_path: Path) -> None:
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("libnvidia-ml is installed here: the no-driver path cannot be exercised")
    env = CollectorEnv(proc_root=tmp_path)
    c = GpuCollector(GpuSettings(), env, PynvmlBackend())
    with capture_logs() as logs:
        await c.start()
        for _ in range(3):
            with pytest.raises(CollectorError, match="NVML Shared Library Not Found"):
                await c.collect()
    await c.close()
    assert [e["event"] for e in logs] == ["nvml_absent"]
    assert not c.present


async def test_hung_call_marks_stale_without_pile_up(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100)
    # 1 s, not less: at load ~10 a healthy GPU's call took over 0.2 s and counted as stuck.
    rig = rig_factory(nvml, call_timeout=1.0, workers=4)
    await rig.collector.start()
    await rig.tick()
    await rig.tick()
    tx_before = rig.value("nvlink_transmit_bytes", "2", "0")
    h100[2].hang = threading.Event()
    with capture_logs() as logs:
        for _ in range(4):
            t0 = time.monotonic()
            await rig.tick()
            assert time.monotonic() - t0 < 5.0  # bounded; never waits for the hung call
    assert rig.value("sample_stale", "2") == 1.0
    assert rig.value("sample_stale", "3") == 0.0
    assert rig.value("healthy", "2") == 1.0
    assert rig.value("nvml_stuck_calls") == 1.0
    # Last good values stay in place; counters were not repeated (no false zero rate).
    assert rig.value("power_watts", "2") == pytest.approx(h100[2].power_mw / 1000)  # type: ignore[operator]
    assert rig.value("nvlink_transmit_bytes", "2", "0") == tx_before
    # One hung call, not one per cycle: the hung GPU was asked once, threads stay bounded.
    assert nvml.calls["util"] == 2 * 8 + 8 + 3 * 7
    assert rig.collector.facade.threads <= 4
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["nvml_call_hung"]
    h100[2].hang.set()
    h100[2].hang = None
    for _ in range(50):  # bounded wait for the released thread to finish
        if not rig.collector.facade.busy(2):
            break
        await asyncio.sleep(0.02)
    await rig.tick()
    assert rig.value("sample_stale", "2") == 0.0
    assert rig.value("nvml_stuck_calls") == 0.0


async def test_gpu_lost_marks_only_that_gpu(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100)
    rig = rig_factory(nvml, lost_retry_interval=30.0)
    await rig.collector.start()
    await rig.tick()
    h100[3].lost = True
    with capture_logs() as logs:
        await rig.tick()
        await rig.tick()
    assert rig.value("healthy", "3") == 0.0
    assert rig.value("healthy", "4") == 1.0
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["gpu_lost"]
    status = {s.identity.index: s for s in rig.collector.state()}
    assert not status[3].healthy and status[4].healthy
    asked = nvml.calls["util"]
    await rig.tick()  # within the retry interval: the lost GPU is not asked
    assert nvml.calls["util"] == asked + 7
    h100[3].lost = False
    await rig.tick(31.0)
    assert rig.value("healthy", "3") == 1.0


async def test_driver_gone_mid_run_goes_absent(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100)
    rig = rig_factory(nvml)
    await rig.collector.start()
    await rig.tick()
    nvml.initialised = 0
    nvml.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with capture_logs() as logs:
        with pytest.raises(CollectorError, match="NVML not available"):
            await rig.tick()
        with pytest.raises(CollectorError, match="NVML not available"):
            await rig.tick()
    assert not rig.collector.present
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["nvml_absent"]


async def test_init_hang_is_bounded(
    make_nvml: MakeNvml,
    h100: list[FakeGpu],
    rig_factory: Callable[..., Rig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = make_nvml(h100)
    release = threading.Event()
    calls = []

    def hanging_init() -> None:
        calls.append(1)
        release.wait(10.0)
        nvml.initialised += 1

    monkeypatch.setattr(pynvml, "nvmlInit", hanging_init)
    rig = rig_factory(nvml, call_timeout=0.2, retry_interval=1.0)
    try:
        await rig.collector.start()
        assert not rig.collector.present
        assert "did not answer" in rig.collector.absent_reason
        with pytest.raises(CollectorError):
            await rig.tick(5.0)  # retry due, but the first init still hangs
        assert len(calls) == 1
    finally:
        release.set()


async def test_xid_events_counted_per_code(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    nvml = make_nvml(h100)
    rig = rig_factory(nvml)
    await rig.collector.start()
    assert any(t.name == "nvml-events" for t in threading.enumerate())
    await rig.tick()
    nvml.events.put((5, pynvml.nvmlEventTypeXidCriticalError, 79))
    nvml.events.put((5, pynvml.nvmlEventTypeDoubleBitEccError, 0))
    for _ in range(100):  # bounded: the watcher thread hands events over
        if len(rig.collector.recent_events()) == 0:
            await asyncio.sleep(0.02)
            await rig.tick(0.001)
        else:
            break
    assert [e.code for e in rig.collector.recent_events()] == [79, 0]
    # Born at 0, so the first event has a rate one cycle later.
    assert rig.value("xid_errors", "5", "79") == 0.0
    await rig.tick()
    assert rig.value("xid_errors", "5", "79") == 1.0
    assert rig.rate("xid_errors", "5", "79") == pytest.approx(1.0)
    assert rig.value("critical_events", "5", "double_bit_ecc") == 1.0
    nvml.events.put((5, pynvml.nvmlEventTypeXidCriticalError, 79))
    for _ in range(100):
        if len(rig.collector.recent_events()) < 3:
            await asyncio.sleep(0.02)
            await rig.tick(0.001)
        else:
            break
    assert rig.value("xid_errors", "5", "79") == 2.0
    await rig.collector.close()
    assert not any(t.name == "nvml-events" for t in threading.enumerate())
    assert nvml.initialised == 0  # nvmlShutdown after the threads stopped


async def test_job_attribution(
    make_nvml: MakeNvml, h100: list[FakeGpu], rig_factory: Callable[..., Rig]
) -> None:
    rig = rig_factory(make_nvml(h100))
    (rig.proc / "4242").mkdir()
    (rig.proc / "4242" / "cgroup").write_text(
        "0::/system.slice/slurmstepd.scope/job_8812/step_0/user/task_0\n"
    )
    (rig.proc / "4243").mkdir()
    (rig.proc / "4243" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod1a2b3c4d_0000_4e5f_8a9b_0123456789ab.slice/cri-containerd-x.scope\n"
    )
    h100[0].pids = [4242]
    h100[1].pids = [4243, 4243]
    h100[2].pids = [999999]  # gone before we looked: counted, no job
    await rig.collector.start()
    await rig.tick()
    assert rig.value("compute_processes", "0") == 1.0
    assert rig.value("compute_processes", "2") == 1.0
    assert rig.value("job_info", "0", "slurm:8812") == 1.0
    assert rig.value("job_info", "1", "k8s:1a2b3c4d-0000-4e5f-8a9b-0123456789ab") == 1.0
    assert (
        rig.store.family("fabricwatch_gpu_job_info")
        and len(rig.store.family("fabricwatch_gpu_job_info")) == 2
    )
    status = rig.collector.state()
    assert status[0].jobs == ("slurm:8812",)
    assert status[0].sample is not None and status[0].sample.pids == (4242,)


async def test_structlog_output_has_no_traceback(
    make_nvml: MakeNvml,
    h100: list[FakeGpu],
    rig_factory: Callable[..., Rig],
    capsys: pytest.CaptureFixture[str],
) -> None:
    structlog.reset_defaults()
    rig = rig_factory(make_nvml(h100, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    await rig.collector.start()
    out = capsys.readouterr()
    text = out.out + out.err
    assert "nvml_absent" in text
    assert "Traceback" not in text


class _Reshaped(SimulatedGPUs):
    """Two simulated H100s whose samples a subclass reshapes per cycle; it keeps what it sent."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__("H100", 2, clock)
        self.cycle = 0
        self.sent: list[tuple[int, GpuSample]] = []


class _ShiftingErrors(_Reshaped):
    """The simulator with each cycle's NVLink error kinds changed: added, reordered, gone."""

    KINDS = (("crc", "replay"), ("replay", "crc", "recovery"), (), ("crc",), ("crc",))

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        s = super().sample(index, fabric=fabric)
        kinds = self.KINDS[self.cycle % len(self.KINDS)]
        links = tuple(
            dataclasses.replace(
                ln, errors={k: float(10 * ln.link + n + self.cycle) for n, k in enumerate(kinds)}
            )
            if ln.link % 2 == 0
            else ln
            for ln in s.links
        )
        s = dataclasses.replace(s, links=links)
        self.sent.append((index, s))
        return s


async def test_nvlink_error_columns_follow_kinds_that_change(tmp_path: Path) -> None:
    """Each link's error columns are its sample's (kind, value) pairs in sample order,
    also when the kinds a link reports change from one cycle to the next."""
    clock = Clock()
    sim = _ShiftingErrors(clock)
    settings = GpuSettings(backend="simulated", jobs=False)
    env = CollectorEnv(proc_root=tmp_path, monotonic=clock)
    collector = GpuCollector(settings, env, sim)
    await collector.start()
    try:
        for cycle in range(len(_ShiftingErrors.KINDS) + 1):
            sim.cycle = cycle
            sim.sent.clear()
            clock.t += 1.0
            batch = await collector.collect()
            assert isinstance(batch, Batch)
            got = [
                (labels, value)
                for c in batch.columns
                if c.name == "fabricwatch_gpu_nvlink_errors"
                for labels, value in zip(c.labels, c.values, strict=True)
            ]
            by_gpu = dict(sim.sent)
            want = [
                ((str(i), str(ln.link), kind), value)
                for i in sorted(by_gpu)
                for ln in by_gpu[i].links
                for kind, value in ln.errors.items()
            ]
            assert got == want, cycle
    finally:
        await collector.close()


class _PatchyLinks(_Reshaped):
    """The simulator with links that stop reporting a value, come back, reorder or go."""

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        s = super().sample(index, fabric=fabric)
        c = self.cycle
        links = list(s.links)
        if c % 3 == 1:  # some links without one value or another
            links = [
                dataclasses.replace(
                    ln,
                    up=None if ln.link % 4 == 1 else ln.up,
                    tx_bytes=None if ln.link % 5 == 2 else ln.tx_bytes,
                    rx_bytes=None if (ln.link + index) % 3 == 0 else ln.rx_bytes,
                )
                for ln in links
            ]
        if c == 4:
            links = links[::-1]  # another order
        if c == 5:
            links = links[: len(links) // 2]  # links gone
        if c == 6:
            links = [dataclasses.replace(ln, up=False) for ln in links]
        s = dataclasses.replace(s, links=tuple(links))
        self.sent.append((index, s))
        return s


async def test_nvlink_columns_skip_what_a_link_does_not_report(tmp_path: Path) -> None:
    """The up/transmit/receive columns are, GPU by GPU and link by link in sample
    order, the values a link reports (None: no series that cycle), whatever mix of
    links reports them."""
    async for cycle, batch, by_gpu in _reshaped_cycles(_PatchyLinks, tmp_path, 9):
        for family, field in (
            ("fabricwatch_gpu_nvlink_up", "up"),
            ("fabricwatch_gpu_nvlink_transmit_bytes", "tx_bytes"),
            ("fabricwatch_gpu_nvlink_receive_bytes", "rx_bytes"),
        ):
            got = [
                (labels, value)
                for c in batch.columns
                if c.name == family
                for labels, value in zip(c.labels, c.values, strict=True)
            ]
            want = [
                ((str(i), str(ln.link)), float(v))
                for i in sorted(by_gpu)
                for ln in by_gpu[i].links
                if (v := getattr(ln, field)) is not None
            ]
            assert got == want, (cycle, family)


class _PatchyGauges(_Reshaped):
    """The simulator with some GPUs not reporting some per-GPU values, cycle by cycle."""

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        s = super().sample(index, fabric=fabric)
        c = self.cycle
        if c % 3 == 1:
            s = dataclasses.replace(s, memory_temperature_celsius=None, energy_joules=None)
        if c % 4 == 2 and index == 0:
            s = dataclasses.replace(s, power_watts=None, pcie_replays=None, ecc_corrected=None)
        if c == 5:
            s = dataclasses.replace(s, temperature_celsius=None)  # no GPU reports it
        self.sent.append((index, s))
        return s


async def _reshaped_cycles(
    make: Callable[[Clock], _Reshaped], tmp_path: Path, cycles: int
) -> AsyncIterator[tuple[int, Batch, dict[int, GpuSample]]]:
    """(cycle, batch, sample sent per GPU) of a collector over a reshaping simulator."""
    clock = Clock()
    sim = make(clock)
    collector = GpuCollector(
        GpuSettings(backend="simulated", jobs=False),
        CollectorEnv(proc_root=tmp_path, monotonic=clock),
        sim,
    )
    await collector.start()
    try:
        for cycle in range(cycles):
            sim.cycle = cycle
            sim.sent.clear()
            clock.t += 1.0
            batch = await collector.collect()
            assert isinstance(batch, Batch)
            yield cycle, batch, dict(sim.sent)
    finally:
        await collector.close()


async def test_per_gpu_columns_hold_what_each_gpu_reports(tmp_path: Path) -> None:
    """Every per-GPU family's column is, GPU by GPU, the values the samples report
    (None: no series that cycle), counters with the collector's epoch, whichever
    GPUs leave which values out."""
    fields = (
        ("fabricwatch_gpu_power_watts", "power_watts", False),
        ("fabricwatch_gpu_temperature_celsius", "temperature_celsius", False),
        ("fabricwatch_gpu_memory_temperature_celsius", "memory_temperature_celsius", False),
        ("fabricwatch_gpu_energy_joules", "energy_joules", True),
        ("fabricwatch_gpu_pcie_replays", "pcie_replays", True),
    )
    async for cycle, batch, by_gpu in _reshaped_cycles(_PatchyGauges, tmp_path, 8):
        cols = {c.name: c for c in batch.columns}
        for family, field, counter in fields:
            want = [
                ((str(i),), float(v))
                for i in sorted(by_gpu)
                if (v := getattr(by_gpu[i], field)) is not None
            ]
            c = cols.get(family)
            got = [] if c is None else list(zip(c.labels, c.values, strict=True))
            assert got == want, (cycle, family)
            if c is not None:
                assert (c.epoch is not None) == counter
        ecc = [
            (labels, v)
            for labels, v in zip(
                cols["fabricwatch_gpu_ecc_errors"].labels,
                cols["fabricwatch_gpu_ecc_errors"].values,
                strict=True,
            )
        ]
        want_ecc = [
            ((str(i), kind), v)
            for i in sorted(by_gpu)
            for kind, v in (
                ("corrected", by_gpu[i].ecc_corrected),
                ("uncorrected", by_gpu[i].ecc_uncorrected),
            )
            if v is not None
        ]
        assert ecc == want_ecc, cycle
