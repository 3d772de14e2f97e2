"""Ingest rate and CPU share of the gNMI collector: 64 ports x 8 queues, 1 s sampling.

Starts the simulated gNMI target (``fabricwatch.testing.sim_gnmi``)
in a separate process on 127.0.0.1 (plain text; its CPU is not counted) with
64 ports x 8 egress queues, and runs the real collector in this process with
``collect()`` once per interval into a :class:`SnapshotStore`, as the daemon
does. Collector CPU is ``time.process_time`` over the run (the gRPC reader,
decoding, rates and the store).

Runs:
  1. switch mode, OpenConfig layout, 1 s SAMPLE: every port and queue;
  2. switch mode, SONiC layout (JSON values), 1 s;
  3. node mode (this node's 2 uplinks from LLDP), OpenConfig, 1 s;
  4. saturation: OpenConfig, 50 ms SAMPLE, for notifications per CPU-second.
Reference in the same process: protobuf parsing alone of the same
OpenConfig notifications (``SubscribeResponse.FromString`` + walking every
update), so the collector's cost is shown as a ratio over bare decoding.

Budget (DESIGN.md): the whole node daemon under 1 % of one core at 1 s
polling (with 4 switch uplinks); no gNMI-specific budget exists.

Run: ``.venv/bin/python bench/gnmi_ingest.py [--seconds 10] [--results FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.gnmi._collector import GnmiCollector
from fabricwatch.collectors.gnmi._proto import make_path, pb
from fabricwatch.collectors.gnmi._settings import GnmiSettings, GnmiTargetSettings
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_gnmi import demo_target

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

BUDGET_CPU_PER_S = 0.01  # the whole daemon: 1 % of one core
PORTS = 64
QUEUES = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_target(layout: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "fabricwatch.testing.sim_gnmi", "--insecure",
            "--port", str(port), "--ports", str(PORTS), "--queues", str(QUEUES),
            "--layout", layout, "--node", "bench-node",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "simulated gNMI target ... on host:port"
    if not line:
        proc.kill()
        msg = "the simulated target did not start"
        raise RuntimeError(msg)
    return proc, port


async def _run(layout: str, mode: str, interval: float, seconds: float) -> dict[str, float]:
    proc, port = _start_target(layout)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            st = GnmiSettings(
                interval=interval,
                mode=mode,  # type: ignore[arg-type]
                queue_size=4096,
                targets=[
                    GnmiTargetSettings(name="leaf1", host="127.0.0.1", port=port, insecure=True)
                ],
            )
            env = CollectorEnv(node="bench-node", sys_root=Path(tmp), state_dir=Path(tmp))
            c = GnmiCollector(st, env)
            store = SnapshotStore()
            store.register("gnmi", c.metrics())
            await c.start()
            t = c.target_state("leaf1")
            # Warm up: connected, LLDP settled, subscriptions final.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await asyncio.sleep(interval)
                store.ingest("gnmi", await c.collect(), time.monotonic())
                live = t.stream is not None and t.stream.up and t.notifications > 0
                if live and (mode == "switch" or t.subscribed_ports):
                    break
            await asyncio.sleep(2 * interval)
            store.ingest("gnmi", await c.collect(), time.monotonic())
            n0, rd0 = t.notifications, 0
            cpu0, wall0 = time.process_time(), time.monotonic()
            next_at = wall0
            while time.monotonic() - wall0 < seconds:
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                readings = await c.collect()
                rd0 += len(readings)
                store.ingest("gnmi", readings, time.monotonic())
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
            notes = t.notifications - n0
            await c.close()
            return {
                "notifications_per_s": notes / wall,
                "readings_per_s": rd0 / wall,
                "cpu_share": cpu / wall,
                "cpu_us_per_notification": 1e6 * cpu / max(notes, 1),
                "series": float(len(store)),
            }
    finally:
        proc.terminate()
        proc.wait(10)


def _reference(rounds: int) -> float:
    """CPU µs per notification to parse and walk the same OpenConfig notifications."""
    sim = demo_target(PORTS, layout="openconfig", queues=QUEUES)
    blobs: list[bytes] = []
    for cpath, values in sim.containers():
        updates = [
            pb.Update(
                path=pb.Path(elem=[pb.PathElem(name=k)]),
                val=pb.TypedValue(uint_val=v)
                if isinstance(v, int)
                else pb.TypedValue(string_val=str(v)),
            )
            for k, v in values.items()
        ]
        n = pb.Notification(
            timestamp=1, prefix=make_path(cpath, origin="openconfig"), update=updates
        )
        blobs.append(pb.SubscribeResponse(update=n).SerializeToString())
    parse = pb.SubscribeResponse.FromString
    t0 = time.process_time()
    total = 0
    for _ in range(rounds):
        for b in blobs:
            r = parse(b)
            for u in r.update.update:
                total += len(u.path.elem) + (1 if u.val.WhichOneof("value") else 0)
    cpu = time.process_time() - t0
    return 1e6 * cpu / (rounds * len(blobs))


async def main(seconds: float, results_file: Path | None) -> None:
    print(f"gNMI ingest, {PORTS} ports x {QUEUES} queues, target in a separate process")
    runs = [
        ("switch_openconfig", "switch mode, OpenConfig, 1 s SAMPLE", "openconfig", "switch", 1.0),
        ("switch_sonic", "switch mode, SONiC JSON, 1 s SAMPLE", "sonic", "switch", 1.0),
        ("node", "node mode (2 LLDP uplinks), OpenConfig, 1 s", "openconfig", "node", 1.0),
        ("saturation", "saturation: OpenConfig, 50 ms SAMPLE", "openconfig", "switch", 0.05),
    ]
    ref = _reference(20)
    results = []
    for _, label, layout, mode, interval in runs:
        r = await _run(layout, mode, interval, seconds)
        results.append((label, r))
    w = max(len(label) for label, _ in results)
    print(f"{'run':<{w}}  notif/s  readings/s  CPU share  us/notif  x ref  series")
    for label, r in results:
        print(
            f"{label:<{w}}  {r['notifications_per_s']:7.0f}  {r['readings_per_s']:10.0f}"
            f"  {100 * r['cpu_share']:8.2f}%  {r['cpu_us_per_notification']:8.1f}"
            f"  {r['cpu_us_per_notification'] / ref:5.1f}  {r['series']:6.0f}"
        )
    sat = results[-1][1]
    print(
        f"reference: protobuf parse + walk alone = {ref:.1f} us/notification"
        f" (ratios above are collector CPU / this)"
    )
    print(
        f"saturation: {sat['notifications_per_s'] / max(sat['cpu_share'], 1e-9):,.0f}"
        " notifications per CPU-second"
    )
    node = results[2][1]
    print(
        f"budget: whole node daemon < 1.00% of a core at 1 s; gNMI node mode uses "
        f"{100 * node['cpu_share']:.2f}% ({node['cpu_share'] / BUDGET_CPU_PER_S:.2f}x the "
        "whole budget)"
    )
    by_run = {
        key: {**r, "ref_ratio": r["cpu_us_per_notification"] / ref}
        for (key, *_), (_, r) in zip(runs, results, strict=True)
    }
    write_results(
        results_file,
        {
            "seconds": seconds,
            "ports": PORTS,
            "queues": QUEUES,
            "reference_us_per_notification": ref,
            "runs": by_run,
            "saturation_notifications_per_cpu_s": sat["notifications_per_s"]
            / max(sat["cpu_share"], 1e-9),
            "budget_cpu_share": BUDGET_CPU_PER_S,
            "budget_ratio": node["cpu_share"] / BUDGET_CPU_PER_S,
        },
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="gNMI collector ingest benchmark")
    ap.add_argument("--seconds", type=float, default=10.0)
    add_results_option(ap)
    args = ap.parse_args()
    asyncio.run(main(args.seconds, args.results))
