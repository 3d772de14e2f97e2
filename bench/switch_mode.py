"""Switch mode against its budget: whole switches polled centrally by the real daemon.

Usage (repository root)::

    .venv/bin/python bench/switch_mode.py [--switches 4] [--interval 10] [--ports 512]
        [--warmup 30] [--seconds 60] [--against DIR]

Runs the REAL :class:`~fabricwatch.daemon.Daemon` with only the switch
collector enabled (switch mode, every port) on ``--switches`` simulated
``--ports``-port switches polled every ``--interval`` seconds; each switch is
a real SNMPv2c agent (:class:`~fabricwatch.testing.sim_snmp.SimAgent`, every
port moving traffic, one PFC priority pausing) in a **child process** that
also scrapes ``/metrics`` every 15 s, so the agents' CPU never lands in the
daemon's. The daemon's CPU is its process CPU over the window; RSS is read
after the window with every history ring full (``SnapshotStore.pad_history``).

Budget (issue #19): a 512-port switch at 1 s, or 4 such switches at 10 s,
under 10 % of a core and 150 MiB, on the embedded defaults: the series limit
(``store.max_series_per_collector``, per switch) and the collection timeout
(0.9 x the interval) are the daemon's own, and the result says how many series
readings the limit dropped and how many collections failed (both 0 when no
data is lost). Nothing is asserted; figures are ratios to the budget from this
run. ``--against DIR`` measures the source tree ``DIR`` (e.g. ``git archive``
of an older commit) and this tree back to back, each in its own process, and
prints the ratio of the two: the A/B to quote on a shared machine. Both then
run with the limit and timeout set explicitly (``--explicit-limits``: ~52
series a port, 0.9 x the interval), as trees from before those defaults need.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

BUDGET_CPU = 0.10  # share of one core
BUDGET_RSS_MIB = 150.0
SCRAPE_INTERVAL = 15.0
PRIORITY = 3
REPO = Path(__file__).resolve().parent.parent


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _child(switches: int, ports: int, http_port: int) -> None:
    """The agents (one UDP port each) and a Prometheus-like scraper."""
    from fabricwatch.testing.sim_snmp import SimAgent, SimPort, SimSwitch

    agents = []
    for n in range(switches):
        sw = SimSwitch([SimPort(i + 1, f"swp{i + 1}") for i in range(ports)], sys_name=f"leaf{n}")
        for p in sw.ports:
            sw.set_rate(p.if_index, "rx_bytes", 2.5e9)
            sw.set_rate(p.if_index, "tx_bytes", 2.4e9)
            sw.pfc_storm(p.if_index, PRIORITY, "rx", 0.001)
        agents.append(await SimAgent(sw).start("127.0.0.1", 0))
    print(json.dumps([a.port for a in agents]), flush=True)
    url = f"http://127.0.0.1:{http_port}/metrics"
    loop = asyncio.get_running_loop()

    def scrape() -> None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
            resp.read()

    for _ in range(10_000):  # bounded: the parent kills us long before this ends
        await asyncio.sleep(SCRAPE_INTERVAL)
        await loop.run_in_executor(None, scrape)


async def _measure(
    args: argparse.Namespace, agent_ports: list[int], http_port: int
) -> dict[str, Any]:
    from fabricwatch.clock import Clock
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.config import parse_config
    from fabricwatch.daemon import Daemon
    from fabricwatch.logs import configure_logging

    state = Path(tempfile.mkdtemp(prefix="fw-switch-mode-"))
    registry = builtin_registry()
    doc: dict[str, Any] = {
        "daemon": {"node": "poller-1", "state_dir": str(state), "tick": 1.0},
        "web": {"listen": f"127.0.0.1:{http_port}"},
        "log": {"level": "warning", "format": "console"},
        "collectors": {name: {"enabled": False} for name in registry},
    }
    doc["collectors"]["switch"] = {
        "interval": args.interval,
        "mode": "switch",
        "targets": [
            {"name": f"leaf{n}", "host": "127.0.0.1", "port": p, "timeout": 5.0}
            for n, p in enumerate(agent_ports)
        ],
    }
    if args.explicit_limits:
        # ~52 series a port; a collection gets 0.9 x the interval (the first one
        # discovers every switch, walking every port).
        doc["store"] = {"max_series_per_collector": max(50_000, 60 * args.ports * args.switches)}
        doc["collectors"]["switch"]["timeout"] = max(5.0, 0.9 * args.interval)
    config = parse_config(doc, registry, source="bench")
    configure_logging(config.log.level, config.log.format)
    daemon = Daemon(config, registry, config_path=None, clock=Clock())
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.sleep(args.warmup)
        c0, w0 = time.process_time(), time.monotonic()
        await asyncio.sleep(args.seconds)
        cpu, wall = time.process_time() - c0, time.monotonic() - w0
        rss_end = _rss_mib()
        daemon.store.pad_history()
        rss_steady = _rss_mib()
        states = daemon.supervisor.states
        down = [s.name for s in states if not s.up]
        return {
            "cpu_ms_per_s": cpu / wall * 1e3,
            "cpu_ratio": cpu / wall / BUDGET_CPU,
            "rss_end_mib": rss_end,
            "rss_steady_mib": rss_steady,
            "rss_ratio": rss_steady / BUDGET_RSS_MIB,
            "series": len(daemon.store),
            "dropped_series_readings": sum(s.series_dropped for s in states),
            "collection_failures": sum(sum(s.failures.values()) for s in states),
            "down": down,
        }
    finally:
        daemon.request_stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 20)
        shutil.rmtree(state, ignore_errors=True)


def _run_once(args: argparse.Namespace) -> dict[str, Any]:
    http_port = _free_tcp_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps([args.switches, args.ports, http_port])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())
        return asyncio.run(_measure(args, ports, http_port))
    finally:
        child.kill()
        child.wait(10)


def _line(label: str, r: dict[str, Any]) -> str:
    return (
        f"{label}: CPU {r['cpu_ms_per_s']:.1f} ms/s = {r['cpu_ratio']:.2f}x of the 10 % budget, "
        f"RSS (history full) {r['rss_steady_mib']:.1f} MiB = {r['rss_ratio']:.2f}x of 150 MiB, "
        f"{r['series']} series, {r.get('dropped_series_readings', 0)} series readings "
        f"dropped, {r.get('collection_failures', 0)} failed collections"
        + (f", DOWN: {r['down']}" if r["down"] else "")
    )


def _record(path: Path, args: argparse.Namespace, r: dict[str, Any]) -> None:
    """Merge one shape's figures into ``path`` (the issue's budget has two shapes)."""
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    shapes = doc.setdefault("shapes", {})
    shapes[f"{args.switches}x{args.ports}@{args.interval:g}"] = {
        "switches": args.switches,
        "ports": args.ports,
        "interval_s": args.interval,
        "seconds": args.seconds,
        **r,
    }
    doc["budget_cpu_share"] = BUDGET_CPU
    doc["budget_rss_mib"] = BUDGET_RSS_MIB
    write_results(path, doc)


def main() -> None:
    """Measure (or, with ``--against``, A/B) one switch-mode shape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--switches", type=int, default=4)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--ports", type=int, default=512)
    ap.add_argument("--warmup", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--against", default="", help="source tree to measure first (A/B)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    ap.add_argument(
        "--explicit-limits",
        action="store_true",
        help="set the series limit and collection timeout (the A/B does, for older trees)",
    )
    add_results_option(ap)  # one entry per shape: a run adds or replaces its own
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        asyncio.run(_child(*json.loads(args.child)))
        return
    shape = f"{args.switches} x {args.ports}-port switch(es) at {args.interval:g} s"
    if not args.against:
        r = _run_once(args)
        print(json.dumps(r) if args.json else _line(shape, r))
        if args.results:
            _record(args.results, args, r)
        return
    results = {}
    argv = [
        *("--switches", str(args.switches), "--interval", str(args.interval)),
        *("--ports", str(args.ports), "--warmup", str(args.warmup)),
        *("--seconds", str(args.seconds), "--json", "--explicit-limits"),
    ]
    for label, tree in (("A", args.against), ("B", str(REPO))):
        # This script measures whichever fabricwatch PYTHONPATH puts first.
        out = subprocess.run(
            [sys.executable, __file__, *argv],
            env={**os.environ, "PYTHONPATH": tree},
            check=True,
            capture_output=True,
            text=True,
        )
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
        print(_line(f"{label} ({tree})", results[label]))
    a, b = results["A"], results["B"]
    print(
        f"{shape}: B/A CPU {b['cpu_ms_per_s'] / a['cpu_ms_per_s']:.2f}x, "
        f"RSS {b['rss_steady_mib'] / a['rss_steady_mib']:.2f}x"
    )


if __name__ == "__main__":
    main()
