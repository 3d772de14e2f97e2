"""``fabricwatch demo --scenario all --speed 10``: time, CPU and detection latency.

Runs the demo in-process (plain output discarded) and, as the reference in
the same command, feeds the engine the same faults straight from its own
scenario simulator (:func:`fabricwatch.testing.sim_scenarios.run_live`: no
collectors, no protocols, no scaled clock). Prints, per fault, how long the
full pipeline on simulated hardware took to open the incident against the
engine alone, plus the demo's wall time, CPU and achieved speed.

    .venv/bin/python bench/demo_run.py
"""

from __future__ import annotations

import asyncio
import io
import statistics
import sys
import time

from fabricwatch.demo.runner import Demo, DemoOptions
from fabricwatch.demo.scenarios import Timing, select
from fabricwatch.demo.view import PlainReporter
from fabricwatch.logs import configure_logging
from fabricwatch.testing.sim_scenarios import Injection, Scenario, run_live

SPEED = 10.0
BUDGET_WALL = 60.0
BUDGET_TICKS = 2.0

# demo scenario -> (engine fault, variant) of the same cause and culprit
REFERENCE = {
    "pfc-storm": ("pfc_storm", 0),
    "checkpoint-stall": ("storage_latency", 1),
    "ecn-congestion": ("ecn_congestion", 0),
    "nvlink-degraded": ("nvlink_degraded", 0),
    "link-flap": ("link_down", 1),
}


def engine_only(fault: str, variant: int, duration: float) -> float | None:
    """Seconds from injection to the incident opening, engine fed directly."""
    start = 150
    sc = Scenario(
        duration=start + int(duration) + 60,
        injections=[Injection(fault, start, duration, magnitude=0.8, variant=variant)],
        seed=7,
        missing=0.0,
    )
    onset = sc.start_ts + start
    for tr in run_live(sc):
        if tr.kind == "opened" and tr.incident.cause == fault:
            return tr.at - onset
    return None


def main() -> None:
    configure_logging("error", "console", stream=sys.stderr)
    timing = Timing()
    demo = Demo(
        DemoOptions(scenarios=select("all"), speed=SPEED, timing=timing),
        PlainReporter(io.StringIO()),
    )
    cpu0, wall0 = time.process_time(), time.monotonic()
    result = asyncio.run(demo.run())
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    sim = demo.now()  # the demo's scaled clock: timeline, drain and teardown
    assert result.summary is not None, result.message
    doc = result.summary
    print(f"demo --scenario all --speed {SPEED:g}: exit {result.code}, ok={doc['ok']}")
    print(
        f"  wall {wall:.1f} s (budget ~{BUDGET_WALL:.0f} s: {wall / BUDGET_WALL:.2f}x of it), "
        f"simulated {sim:.0f} s -> x{sim / wall:.1f} overall "
        f"({sim / wall / SPEED:.2f} of x{SPEED:g}: start-up and teardown run in real time)"
    )
    print(f"  CPU {cpu:.1f} s = {cpu / wall:.2f} cores on average (this process and its threads)")
    print()
    print(f"{'scenario':<18}{'pipeline':>10}{'engine only':>13}{'ratio':>8}   (s to open)")
    ratios = []
    for sc in doc["scenarios"]:
        if sc["name"] not in REFERENCE:
            continue
        fault, variant = REFERENCE[sc["name"]]
        ref = engine_only(fault, variant, timing.fault)
        got = sc["detection_latency_seconds"]
        ratio = got / ref if got is not None and ref else None
        if ratio is not None:
            ratios.append(ratio)
        print(
            f"{sc['name']:<18}{'-' if got is None else f'{got:.1f}':>10}"
            f"{'-' if ref is None else f'{ref:.1f}':>13}"
            f"{'-' if ratio is None else f'{ratio:.2f}x':>8}"
        )
    if ratios:
        print(f"median ratio pipeline / engine only: {statistics.median(ratios):.2f}x")
    delay = doc["onset_to_open_seconds"]
    print(
        f"stall onset -> incident opened, median: {delay['median_ticks']} ticks "
        f"(budget {BUDGET_TICKS:g} ticks: {delay['median_ticks'] / BUDGET_TICKS:.2f}x of it)"
    )


if __name__ == "__main__":
    main()
