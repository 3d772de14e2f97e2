"""``fabricwatch demo``: the whole product on simulated hardware in one command.

A training job runs on a simulated node; faults hit its switch uplink, NIC,
NVLinks and checkpoint storage; the real daemon pipeline (collectors over
SNMP, the NVML facade, sysfs and procfs; the correlation engine; the incident
store; ``/metrics``; webhook pages) explains each one. At the end a table
compares what fabricwatch reported with what was injected.

Exit codes: 0 every scenario was explained correctly, 1 one was not,
3 the daemon could not start, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.demo.scenarios import ALL, SCENARIOS, Timing, select
from fabricwatch.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

MIN_FAULT = 20.0
"""Shortest fault (simulated seconds): a slowdown needs 10 s below its baseline to open."""


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to ``parser``."""
    parser.add_argument(
        "--scenario",
        default=ALL,
        choices=[*SCENARIOS, ALL],
        help="scenario to run (default: all, healthy first)",
    )
    parser.add_argument(
        "--speed",
        type=_positive,
        default=10.0,
        help="run simulated time this many times faster than real time (default 10)",
    )
    parser.add_argument(
        "--duration",
        type=_positive,
        default=Timing().fault,
        metavar="S",
        help=f"simulated seconds each fault lasts (default {Timing().fault:g}, min {MIN_FAULT:g})",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="after the scenarios, keep the healthy node and /metrics up until Ctrl-C",
    )
    parser.add_argument(
        "--summary-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the summary (incidents vs injected ground truth) as JSON",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="plain progress lines even on a terminal (the live view needs a TTY anyway)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the daemon's warnings and errors on stderr",
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo; return the exit code."""
    from rich.console import Console

    from fabricwatch.demo.runner import DemoOptions, alerting_wired, run_demo
    from fabricwatch.demo.view import LiveReporter, PlainReporter, Reporter
    from fabricwatch.logs import configure_logging

    scenarios = select(args.scenario)
    if args.duration < MIN_FAULT:
        print(f"fabricwatch demo: --duration must be at least {MIN_FAULT:g} s", file=sys.stderr)
        return ExitCode.USAGE
    configure_logging("warning" if args.verbose else "error", "console", stream=sys.stderr)
    console = Console(highlight=False)
    live = console.is_terminal and not args.plain
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 120))
    print(
        f"fabricwatch demo: {len(scenarios)} scenario(s) at x{args.speed:g} "
        f"({'alerting wired' if alerting_wired() else 'alerting not wired: no pages'})"
    )
    reporter: Reporter = LiveReporter(console) if live else PlainReporter()
    shown: list[bool] = []

    def show(doc: dict[str, Any]) -> None:
        shown.append(True)
        print_summary(console, doc)

    opts = DemoOptions(
        scenarios=scenarios,
        speed=args.speed,
        timing=Timing(fault=args.duration),
        keep_running=args.keep_running,
        summary_json=args.summary_json,
        on_summary=show,
    )
    result = run_demo(opts, reporter)
    if result.summary is None:
        msg = result.message or "the demo did not run"
        print(f"fabricwatch demo: {msg}", file=sys.stderr)
        return result.code if result.code else ExitCode.CANNOT_START
    if not shown:
        print_summary(console, result.summary)
    return result.code


def print_summary(console: Console, doc: dict[str, Any]) -> None:
    """The tables and the closing lines."""
    from fabricwatch.demo.runner import STORAGE_NOTE
    from fabricwatch.demo.view import cause_table, summary_table

    console.print()
    console.print(summary_table(doc))
    console.print(cause_table(doc))
    lat = doc["detection_latency_seconds"]
    delay = doc["onset_to_open_seconds"]
    if lat["median"] is not None:
        console.print(
            f"detection latency from fault injection: median {lat['median']:.1f} s, "
            f"max {lat['max']:.1f} s; from stall onset to incident: median "
            f"{delay['median']:.1f} s ({delay['median_ticks']:.1f} engine ticks)"
        )
    console.print(STORAGE_NOTE)
    if doc["alerting"]:
        console.print(f"pages received by the webhook receiver: {doc['pages_received']}")
    else:
        console.print("pages: alerting is not wired into the daemon yet, so none were sent")
    if doc["unexpected_incidents"]:
        console.print(f"unexpected incidents: {', '.join(doc['unexpected_incidents'])}")
    console.print(
        "result: every scenario explained correctly"
        if doc["ok"]
        else "result: fabricwatch got something wrong (see the table)"
    )
