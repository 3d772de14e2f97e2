"""A small daemon stand-in for the kill -9 tests, wired like the real daemon
(IncidentDB + AlertingService).

    python -m tests.alerting.driver webhook --state-dir D --url U --secret-file F [--enqueue N]
    python -m tests.alerting.driver mqtt --state-dir D --port P --node N

``webhook``: optionally records N opened incidents (each in its own
transaction, outbox rows included), then delivers until nothing is pending,
prints ``drained`` and exits 0. ``mqtt``: connects, prints ``online`` and
runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.outputs.alerting import AlertingService
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.settings import build
from tests.alerting.conftest import make_incident


async def webhook(args: argparse.Namespace) -> int:
    db = IncidentDB.in_state_dir(Path(args.state_dir))
    alerting = build(
        AlertingSettings,
        {
            "backoff_initial": 0.05,
            "backoff_max": 0.2,
            "sinks": [
                {
                    "name": "hook",
                    "type": "webhook",
                    "url": args.url,
                    "secret_file": args.secret_file,
                    "min_severity": "info",
                    "timeout": 5.0,
                    # One transition per request, so a kill -9 lands between requests.
                    "max_batch": 1,
                }
            ],
        },
    )
    svc = AlertingService(alerting, MqttSettings(), db, node="crash-node", cluster="prod")
    db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
    now = time.time()
    for i in range(args.enqueue):
        inc = make_incident(f"{i:016x}", node="crash-node", onset=now)
        db.record([IncidentTransition("opened", now, inc)])
    await svc.start()
    print("started", flush=True)
    try:
        ok = await svc.sender.drain(within=60.0)
    finally:
        await svc.close()
        db.close()
    print("drained" if ok else "not drained", flush=True)
    return 0 if ok else 1


async def mqtt(args: argparse.Namespace) -> int:
    db = IncidentDB.in_state_dir(Path(args.state_dir))
    settings = build(
        MqttSettings,
        {"enabled": True, "port": args.port, "keepalive": 5, "reconnect_max": 1.0},
    )
    svc = AlertingService(AlertingSettings(), settings, db, node=args.node, cluster="prod")
    db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
    await svc.start()
    assert svc.publisher is not None
    if not await svc.publisher.wait_connected(10.0):
        print("not connected", flush=True)
        return 1
    print("online", flush=True)
    await asyncio.sleep(120)  # until killed
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("webhook")
    w.add_argument("--state-dir", required=True)
    w.add_argument("--url", required=True)
    w.add_argument("--secret-file", required=True)
    w.add_argument("--enqueue", type=int, default=0)
    m = sub.add_parser("mqtt")
    m.add_argument("--state-dir", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--node", required=True)
    args = p.parse_args()
    return asyncio.run(webhook(args) if args.mode == "webhook" else mqtt(args))


if __name__ == "__main__":
    sys.exit(main())
