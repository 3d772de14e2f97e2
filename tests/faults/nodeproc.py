"""A real fabricwatch daemon process on the demo's simulated node, for the fault suite.

Run as ``python -m tests.faults.nodeproc --root DIR ...``. Everything that must
survive a restart lives under ``--root``: the simulated node's files, the
virtual clock's epoch (virtual time runs on while the process is down, as real
time would), and the fault in force, read from ``ROOT/condition`` (a demo
scenario name, ``healthy`` by default) every few milliseconds. ``kill -9`` it,
SIGTERM it, start it again: the state directory and the fault carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from fabricwatch.clock import Clock
from fabricwatch.config import parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.demo.node import SimulatedNode
from fabricwatch.demo.scenarios import HEALTHY, SCENARIOS
from fabricwatch.logs import configure_logging


def virtual_clock(root: Path, speed: float) -> Clock:
    """``speed`` x real time, continuous across restarts (epoch kept under ``root``)."""
    epoch = root / "epoch.json"
    if epoch.exists():
        e = json.loads(epoch.read_text())
        w0, r0 = float(e["w0"]), float(e["r0"])
    else:
        w0 = r0 = time.time()
        epoch.write_text(json.dumps({"w0": w0, "r0": r0}))

    def now() -> float:
        return w0 + (time.time() - r0) * speed

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / speed)

    return Clock(now, now, sleep)


async def drive(node: SimulatedNode, root: Path, clock: Clock) -> None:
    """Apply the fault named in ``ROOT/condition``; its start is kept across restarts."""
    control, started = root / "condition", root / "fault.json"
    while True:
        name = control.read_text().strip() if control.exists() else "healthy"
        sc = SCENARIOS.get(name)
        if sc is None or sc.fault is None:
            node.apply(HEALTHY)
        else:
            kept = json.loads(started.read_text()) if started.exists() else {}
            if kept.get("name") != name:
                kept = {"name": name, "start": clock.wall()}
                started.write_text(json.dumps(kept))
            node.apply(sc.condition(clock.wall() - float(kept["start"])))
        await asyncio.sleep(0.01)


async def main(args: argparse.Namespace) -> int:
    root = Path(args.root)
    clock = virtual_clock(root, args.speed)
    node = SimulatedNode(root / "node", clock)
    await node.start()
    registry = node.registry()
    doc = node.config_table(listen=f"127.0.0.1:{args.port}", alerting=None)
    doc["daemon"]["state_dir"] = args.state_dir
    doc["log"] = {"level": "info", "format": "json"}
    sink: dict[str, Any] = {
        "name": "oncall",
        "type": "webhook",
        "url": args.hook,
        "secret_file": args.secret_file,
        "min_severity": "info",
        # Real seconds: a receiver in a CPU-starved test process can take more than 1 s
        # to answer a page it already took, and the retry is then a duplicate webhook-id.
        "timeout": "5s",
    }
    doc["alerting"] = {"backoff_initial": "0.1s", "backoff_max": "0.5s", "sinks": [sink]}
    if args.mqtt_port:
        doc["mqtt"] = {
            "enabled": True,
            "port": args.mqtt_port,
            "keepalive": "2s",
            "publish_timeout": "1s",
            "reconnect_initial": "0.1s",
            "reconnect_max": "0.5s",
        }
    if args.snmp_port:
        doc["collectors"]["switch"]["targets"][0]["port"] = args.snmp_port
    for name in registry:
        doc["collectors"].setdefault(name, {"enabled": False})
    config = parse_config(doc, registry, source="fault suite")
    configure_logging("info", "json")
    daemon = Daemon(config, registry, config_path=None, clock=clock)
    driver = asyncio.create_task(drive(node, root, clock))
    try:
        return await daemon.run()
    finally:
        driver.cancel()
        node.close()


def cli() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--hook", required=True)
    p.add_argument("--secret-file", required=True)
    p.add_argument("--speed", type=float, default=20.0)
    p.add_argument("--mqtt-port", type=int, default=0)
    p.add_argument("--snmp-port", type=int, default=0)
    return asyncio.run(main(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(cli())
