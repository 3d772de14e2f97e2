"""GPU collector cycle cost: 8 x H100 x 18 NVLinks at 1 s polling.

Usage (repository root)::

    .venv/bin/python bench/gpu_cycle.py [--cycles 300] [--results FILE]

Runs, in one process and back to back (the scenario clock advances 1 s per
cycle, nothing sleeps):

1. the collector over the simulated backend (8 H100, busy, 18 links each);
2. the collector over the real NVML facade (``PynvmlBackend``) with pynvml's
   functions patched to the H100 capture profile: the Python cost of our
   facade and field decoding, without the driver's own time;
3. the reference: ``SnapshotStore.ingest`` of the same readings (what the
   pipeline must spend on them anyway).

CPU is process time (all threads, the NVML pool included). Figures are
printed as ratios to the reference and to the DESIGN.md budget: the whole node
daemon under 1 % of one core, i.e. 10 ms of CPU per second.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._facade import PynvmlBackend
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.collectors.gpu._types import GpuBackend
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_gpu import Activity, ScenarioClock, SimulatedGPUs

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

REPO = Path(__file__).resolve().parent.parent
BUDGET_CPU_PER_S = 0.01  # the whole daemon: 1 % of one core
DESCRIBE = "8 x H100 x 18 NVLinks"


async def _run(
    backend: GpuBackend,
    clock: ScenarioClock,
    cycles: int,
    on_measure: Callable[[], None] | None = None,
) -> tuple[float, float, int]:
    """(collector CPU s/cycle, ingest CPU s/cycle, readings/cycle)."""
    env = CollectorEnv(proc_root=Path("/proc"), monotonic=clock)
    collector = GpuCollector(GpuSettings(events=False), env, backend)
    store = SnapshotStore()
    store.register("gpu", collector.metrics())
    await collector.start()
    assert collector.present, collector.absent_reason
    batches: list[Sequence[Reading]] = []
    for _ in range(5):  # warm-up: probes, first samples, GPM pairs
        clock.advance(1.0)
        store.ingest("gpu", await collector.collect(), clock())
    if on_measure is not None:
        on_measure()
    c0 = time.process_time()
    for _ in range(cycles):
        clock.advance(1.0)
        batches.append(await collector.collect())
    collect_cpu = time.process_time() - c0
    await collector.close()
    t = clock()
    i0 = time.process_time()
    for b in batches:
        t += 1.0
        store.ingest("gpu", b, t)
    ingest_cpu = time.process_time() - i0
    return collect_cpu / cycles, ingest_cpu / cycles, len(batches[-1])


class _FakeDriverTime:
    """Thread CPU spent inside the fake NVML (the part a real driver does in C)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                dt = time.thread_time() - t0
                with self._lock:
                    self.seconds += dt

        return timed


async def _fake_nvml_run(cycles: int) -> tuple[tuple[float, float, int], float] | None:
    """The NVML facade over the patched pynvml; also returns fake-driver CPU per cycle."""
    try:
        import pytest

        sys.path.insert(0, str(REPO))
        from tests.gpu._fakes import FakeNvml, h100_gpus
    except ImportError as exc:
        print(f"(patched-NVML run skipped: {exc})")
        return None
    clock = ScenarioClock()
    gpus = h100_gpus(REPO.parent / "shared" / "data")
    driver = _FakeDriverTime()
    with pytest.MonkeyPatch.context() as mp:
        fake = FakeNvml(gpus)
        fake._c_get_field_values = driver.wrap(fake._c_get_field_values)  # type: ignore[method-assign]
        fake.install(mp)
        import pynvml

        for name in dir(fake):
            if name.startswith("nvml"):
                mp.setattr(pynvml, name, driver.wrap(getattr(fake, name)))
        for g in gpus:
            for c in g.link_counters:
                c["tx_kib"] = c["rx_kib"] = 1e6
        result = await _run(PynvmlBackend(monotonic=clock), clock, cycles, driver.reset)
    return result, driver.seconds / cycles


def _line(name: str, cpu: float, ref: float, n: int) -> dict[str, float]:
    """Print one row; return its figures (for ``--results``)."""
    print(
        f"{name:<34} {cpu * 1e3:8.3f} ms CPU/cycle  x{cpu / ref:6.2f} of ingest  "
        f"{100 * cpu:6.3f} % of a core at 1 s  {cpu / BUDGET_CPU_PER_S:6.1%} of the daemon budget"
        f"  ({n} readings)"
    )
    return {
        "cpu_ms_per_cycle": cpu * 1e3,
        "ingest_ratio": cpu / ref,
        "cpu_share": cpu,
        "budget_ratio": cpu / BUDGET_CPU_PER_S,
        "readings": n,
    }


async def main(cycles: int, results: Path | None) -> None:
    """Run the three measurements and print them."""
    clock = ScenarioClock()
    sim = SimulatedGPUs("H100", 8, clock)
    sim.set_activity(None, Activity.BUSY)
    sim_cpu, sim_ingest, n_sim = await _run(sim, clock, cycles)
    fake = await _fake_nvml_run(cycles)
    print()
    print(f"GPU collector, {DESCRIBE}, {cycles} cycles at a simulated 1 s interval")
    rows = {
        "reference": _line("reference: store.ingest", sim_ingest, sim_ingest, n_sim),
        "simulated": _line("collector, simulated backend", sim_cpu, sim_ingest, n_sim),
    }
    if fake is not None:
        (f_cpu, f_ingest, n_fake), driver = fake
        rows["nvml"] = _line("collector, NVML facade (patched)", f_cpu, f_ingest, n_fake)
        rows["nvml_driver"] = _line("  of which the fake driver", driver, f_ingest, n_fake)
        rows["nvml_alone"] = _line("  = facade + collector alone", f_cpu - driver, f_ingest, n_fake)
        rows["nvml_reference"] = _line("  reference: its store.ingest", f_ingest, f_ingest, n_fake)
    print(
        "budget (DESIGN.md): whole node daemon < 1 % of one core = 10 ms CPU per 1 s tick; "
        "the share above is this collector's, driver time excluded"
    )
    write_results(
        results,
        {
            "cycles": cycles,
            "describe": DESCRIBE,
            "budget_cpu_share": BUDGET_CPU_PER_S,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="GPU collector cycle CPU cost")
    ap.add_argument("--cycles", type=int, default=300)
    add_results_option(ap)
    args = ap.parse_args()
    asyncio.run(main(args.cycles, args.results))
