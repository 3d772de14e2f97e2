"""Device check: run the real GPU collector over NVML and print every metric family.

Usage (repository root, on a machine with an NVIDIA GPU and driver)::

    .venv/bin/python tests/gpu/check_nvml.py [--seconds 10] [--interval 1]

Runs the collector for ``--seconds`` at ``--interval``, feeds a SnapshotStore
like the daemon does, then prints every family with its series (counters as
total and rate), the fabric clique, jobs, events and the cost of each cycle.

Exit status: 0 all core signals present; 1 a core signal is missing (listed);
2 NVML is not available here (no driver / no GPU), with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._facade import PynvmlBackend
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.errors import CollectorError
from fabricwatch.readings import MetricKind
from fabricwatch.store import SnapshotStore

CORE = (
    "fabricwatch_gpu_info",
    "fabricwatch_gpu_healthy",
    "fabricwatch_gpu_power_watts",
    "fabricwatch_gpu_power_limit_watts",
    "fabricwatch_gpu_memory_used_bytes",
    "fabricwatch_gpu_compute_processes",
)
WORK = ("fabricwatch_gpu_utilization_ratio", "fabricwatch_gpu_sm_active_ratio")
NVLINK = ("fabricwatch_gpu_nvlink_transmit_bytes", "fabricwatch_gpu_nvlink_receive_bytes")
GPM_MODELS = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200", "B300")


def _fmt(v: float) -> str:
    return f"{v:.6g}"


async def run(seconds: float, interval: float) -> int:
    """Collect for ``seconds``; print; return the exit status."""
    state = Path(tempfile.mkdtemp(prefix="fabricwatch-check-"))
    env = CollectorEnv(state_dir=state)
    settings = GpuSettings(interval=interval)
    collector = GpuCollector(settings, env, PynvmlBackend())
    store = SnapshotStore()
    store.register("gpu", collector.metrics())
    await collector.start()
    if not collector.present:
        print(f"no NVML: {collector.absent_reason}", file=sys.stderr)
        print("check not run: this machine has no usable NVIDIA GPU/driver", file=sys.stderr)
        await collector.close()
        return 2
    cycles: list[float] = []
    cpu0 = time.process_time()
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                readings = await collector.collect()
            except CollectorError as exc:
                errors.append(str(exc))
            else:
                store.ingest("gpu", readings, time.monotonic())
            cycles.append(time.perf_counter() - t0)
            await asyncio.sleep(max(0.0, interval - (time.perf_counter() - t0)))
    finally:
        cpu = time.process_time() - cpu0
        await collector.close()

    for spec in collector.metrics():
        series = store.family(spec.name)
        print(f"# {spec.name} ({spec.kind.value}) {len(series)} series")
        for s in sorted(series, key=lambda x: x.labels):
            labels = ",".join(f'{k}="{v}"' for k, v in zip(spec.labels, s.labels, strict=True))
            if spec.kind is MetricKind.COUNTER:
                rate = "n/a" if s.rate is None else _fmt(s.rate.per_second) + "/s"
                print(f"{spec.name}{{{labels}}} total={_fmt(s.value)} rate={rate}")
            else:
                print(f"{spec.name}{{{labels}}} {_fmt(s.value)}")
    print(f"# clique: {collector.clique() or '(none)'}")
    for st in collector.state():
        print(
            f"# gpu {st.identity.index} {st.identity.model} {st.identity.uuid} "
            f"healthy={st.healthy} stale={st.stale} jobs={list(st.jobs)} fabric={st.fabric}"
        )
    for ev in collector.recent_events():
        print(f"# event gpu={ev.gpu} kind={ev.kind.value} code={ev.code}")
    if cycles:
        ordered = sorted(cycles)
        median = ordered[len(ordered) // 2]
        print(
            f"# cycles={len(cycles)} collect wall ms: median={median * 1e3:.2f} "
            f"max={ordered[-1] * 1e3:.2f}; process CPU {cpu:.3f}s over {seconds:g}s "
            f"= {100 * cpu / seconds:.2f}% of a core (pid {os.getpid()})"
        )
    for e in errors:
        print(f"# collect error: {e}")

    missing = [n for n in CORE if not store.family(n)]
    if not any(store.family(n) for n in WORK):
        missing.append(" or ".join(WORK))
    if store.family("fabricwatch_gpu_nvlink_up"):
        missing += [n for n in NVLINK if not store.family(n)]
    models = {st.identity.model for st in collector.state()}
    if any(m in model for model in models for m in GPM_MODELS) and not store.family(WORK[1]):
        missing.append(WORK[1] + " (GPM expected on this model)")
    if missing:
        print("MISSING core signals: " + "; ".join(missing), file=sys.stderr)
        return 1
    print("OK: all core signals present")
    return 0


def main() -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    return asyncio.run(run(args.seconds, args.interval))


if __name__ == "__main__":
    sys.exit(main())
