"""What the demo shows: a rich live view on a terminal, plain lines otherwise, and the summary.

:class:`Status` is a snapshot the runner builds from the daemon's snapshot
store; the reporters only render it, so rendering is tested on fixed values.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fabricwatch.engine.causes import cause_text

EVENTS_SHOWN = 9


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU in the live view."""

    gpu: str
    sm: float | None
    util: float | None
    power: float | None
    stalled: str = ""


@dataclass(slots=True)
class Status:
    """Everything the live view shows at one moment."""

    t: float = 0.0
    speed: float = 1.0
    scenario: str = ""
    title: str = ""
    index: int = 0
    total: int = 0
    phase: str = "starting"
    gpus: list[GpuRow] = field(default_factory=list)
    uplink_pause: float | None = None
    nic_pause: float | None = None
    ecn_rate: float | None = None
    xmit_wait: float | None = None
    nic_link_up: float | None = None
    uplink_up: float | None = None
    nvlinks_down: int = 0
    write_latency: float | None = None
    write_rate: float | None = None
    open_incidents: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0
    metrics_url: str = ""
    webhook_url: str = ""


def bar(frac: float | None, width: int = 20) -> Text:
    """A coloured bar for a 0-1 value (grey dots when unknown)."""
    if frac is None:
        return Text("·" * width, style="dim")
    f = max(0.0, min(1.0, frac))
    n = round(f * width)
    return Text("█" * n, style="green" if f >= 0.3 else "yellow" if f >= 0.05 else "red") + Text(
        "░" * (width - n), style="dim"
    )


def _alarm_bar(frac: float | None, width: int = 10) -> Text:
    """A bar where high is bad (pause fraction, transmit wait)."""
    if frac is None:
        return Text("·" * width, style="dim")
    f = max(0.0, min(1.0, frac))
    n = max(1 if f > 0.005 else 0, round(f * width))
    style = "red" if f >= 0.5 else "yellow" if f >= 0.1 else "green"
    return Text("█" * n, style=style) + Text("░" * (width - n), style="dim")


def fmt(v: float | None, spec: str, unit: str = "", scale: float = 1.0) -> str:
    """``v * scale`` formatted with ``spec`` and ``unit``; ``-`` when unknown."""
    if v is None:
        return "-"
    return f"{v * scale:{spec}}{unit}"


def incident_line(transition: str, doc: Mapping[str, Any]) -> str:
    """One line for an incident transition."""
    culprit = doc.get("culprit", {}).get("key") or "-"
    cause = str(doc.get("cause", "unknown"))
    head = f"incident {transition:<8} {cause} on {culprit}"
    if transition == "resolved":
        return f"{head}: {float(doc.get('gpu_seconds_lost', 0.0)):.0f} GPU-seconds lost"
    return f"{head} (confidence {float(doc.get('confidence', 0.0)):.2f}): {doc.get('summary', '')}"


def render(st: Status, events: Sequence[str], max_events: int = EVENTS_SHOWN) -> RenderableType:
    """The live view of one moment (the newest ``max_events`` event lines)."""
    head = Text.assemble(
        ("fabricwatch demo", "bold"),
        f"  scenario {st.index}/{st.total}: ",
        (st.scenario or "-", "bold cyan"),
        f"  {st.title}\n",
        (f"t=+{st.t:5.0f} s (simulated, x{st.speed:g})  ", "dim"),
        (st.phase, "bold yellow" if st.phase.startswith("fault") else ""),
        (f"\n/metrics {st.metrics_url}   pages -> {st.webhook_url}", "dim"),
    )
    gpus = Table(title="GPUs (SM activity)", expand=True, title_justify="left", box=None)
    gpus.add_column("gpu", justify="right", width=3)
    gpus.add_column("SM active")
    gpus.add_column("util", justify="right")
    gpus.add_column("power", justify="right")
    gpus.add_column("stalled by", no_wrap=True)
    for g in st.gpus:
        gpus.add_row(
            g.gpu,
            bar(g.sm, 12),
            fmt(g.util, ".0%"),
            fmt(g.power, ".0f", " W"),
            Text(g.stalled, style="bold red") if g.stalled else Text("-", "green"),
        )
    fabric = Table(title="fabric and storage", expand=True, title_justify="left", box=None)
    fabric.add_column("signal")
    fabric.add_column("")
    fabric.add_column("value", justify="right")
    fabric.add_row("uplink pause prio 3", _alarm_bar(st.uplink_pause), fmt(st.uplink_pause, ".0%"))
    fabric.add_row("NIC pause (prio 3 rx)", _alarm_bar(st.nic_pause), fmt(st.nic_pause, ".0%"))
    fabric.add_row("NIC transmit wait", _alarm_bar(st.xmit_wait), fmt(st.xmit_wait, ".0%"))
    fabric.add_row("NIC ECN marks", Text(""), fmt(st.ecn_rate, ",.0f", "/s"))
    link = "-"
    if st.nic_link_up is not None or st.uplink_up is not None:
        link = "up" if (st.nic_link_up or 0) >= 0.5 and (st.uplink_up or 0) >= 0.5 else "DOWN"
    fabric.add_row("NIC / uplink link", Text(""), Text(link, "red" if link == "DOWN" else ""))
    fabric.add_row(
        "NVLinks down",
        Text(""),
        Text(str(st.nvlinks_down), "red" if st.nvlinks_down else ""),
    )
    lat = st.write_latency
    fabric.add_row(
        "ckpt write latency",
        _alarm_bar(None if lat is None else min(1.0, lat / 0.5)),
        fmt(lat, ",.0f", " ms", 1000),
    )
    fabric.add_row("ckpt write rate", Text(""), fmt(st.write_rate, ",.0f", " MB/s", 1e-6))
    grid = Table.grid(expand=True)
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    grid.add_row(gpus, fabric)
    inc = Table(expand=True, box=None, show_header=True)
    inc.add_column("open incident")
    inc.add_column("culprit")
    inc.add_column("GPU-s", justify="right")
    inc.add_column("why")
    for d in st.open_incidents:
        ev = d.get("evidence") or [{}]
        inc.add_row(
            Text(cause_text(str(d.get("cause"))), "bold red"),
            str(d.get("culprit", {}).get("key", "")),
            f"{float(d.get('gpu_seconds_lost', 0.0)):.0f}",
            str(ev[0].get("text", "")),
        )
    if not st.open_incidents:
        inc.add_row(Text("none", "green"), "", "", "")
    shown = events[-max_events:] if max_events > 0 else []
    log = Text("\n".join(shown) or "(nothing yet)")
    return Group(
        Panel(head),
        grid,
        Panel(inc, title="incidents"),
        Panel(log, title=f"events (pages received: {st.pages})"),
    )


class Reporter(Protocol):
    """Where the runner sends what happens."""

    def event(self, t: float, text: str) -> None:
        """Something happened at simulated time ``t``."""
        ...

    def update(self, st: Status) -> None:
        """The latest status (called a few times per second)."""
        ...

    def close(self) -> None:
        """The run is over (before the summary is printed)."""
        ...


def stamp(t: float, text: str) -> str:
    """An event line with its simulated time."""
    return f"[+{t:6.1f}s] {text}"


class PlainReporter:
    """Plain lines for logs and pipes: events, and a status line every few simulated seconds."""

    def __init__(self, out: TextIO | None = None, every: float = 5.0) -> None:
        self._out = out or sys.stdout
        self._every = every
        self._next = 0.0

    def _print(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()

    def event(self, t: float, text: str) -> None:
        """Print the event."""
        self._print(stamp(t, text))

    def update(self, st: Status) -> None:
        """Print a compact status line every ``every`` simulated seconds."""
        if st.t < self._next or not st.gpus:
            return
        self._next = st.t + self._every
        sms = [g.sm for g in st.gpus if g.sm is not None]
        stalled = sum(1 for g in st.gpus if g.stalled)
        sm = fmt(sum(sms) / len(sms), ".2f") if sms else "-"
        self._print(
            stamp(
                st.t,
                f"status   GPU SM {sm} ({stalled}/{len(st.gpus)} stalled) | uplink pause "
                f"{fmt(st.uplink_pause, '.0%')} | ECN {fmt(st.ecn_rate, ',.0f', '/s')} | "
                f"ckpt write {fmt(st.write_latency, ',.0f', ' ms', 1000)} | "
                f"open incidents {len(st.open_incidents)}",
            )
        )

    def close(self) -> None:
        """Nothing to tear down."""


class LiveReporter:
    """The rich live view (only on a terminal)."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._events: deque[str] = deque(maxlen=50)
        self._status = Status()
        self._closed = False
        self._live = Live(
            render(self._status, []),
            console=console,
            refresh_per_second=4,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _room(self) -> int:
        # The panels above the event log take about 22 rows; the log gets the rest.
        return max(2, min(EVENTS_SHOWN, self._console.size.height - 22))

    def event(self, t: float, text: str) -> None:
        """Add the event to the log panel (printed as a line once the view is closed)."""
        if self._closed:
            self._console.print(stamp(t, text), highlight=False)
            return
        self._events.append(stamp(t, text))
        self._live.update(render(self._status, list(self._events), self._room()))

    def update(self, st: Status) -> None:
        """Redraw with the new status."""
        self._status = st
        if not self._closed:
            self._live.update(render(st, list(self._events), self._room()))

    def close(self) -> None:
        """Stop the live display (its last frame stays on screen); idempotent."""
        if not self._closed:
            self._closed = True
            self._live.stop()


def summary_table(doc: Mapping[str, Any]) -> Table:
    """Per scenario: what fabricwatch reported, how fast, GPU-seconds, pages, and the verdict."""
    t = Table(title="injected faults vs what fabricwatch reported")
    t.add_column("scenario", no_wrap=True)
    t.add_column("reported cause / culprit", overflow="fold", min_width=22)
    t.add_column("after", justify="right", no_wrap=True)
    t.add_column("GPU-s lost (injected)", justify="right")
    t.add_column("pages", justify="right")
    t.add_column("verdict", overflow="fold")
    for sc in doc["scenarios"]:
        exp = sc["expected"]
        incs = sc["incidents"]
        lat = sc["detection_latency_seconds"]
        lost = sum(float(i["gpu_seconds_lost"] or 0.0) for i in incs)
        reported = "\n".join(f"{i['cause']}\n{i['culprit'] or '-'}" for i in incs)
        t.add_row(
            sc["name"],
            reported or "no incident",
            "-" if lat is None else f"{lat:.1f} s",
            f"{lost:.0f} ({sc['injected_gpu_seconds']:.0f})" if exp is not None else "-",
            str(len(sc["pages"])) if doc["alerting"] else "n/a",
            Text("OK" if sc["ok"] else f"WRONG: {sc['reason']}", "green" if sc["ok"] else "red"),
        )
    return t


def cause_table(doc: Mapping[str, Any]) -> Table:
    """GPU-seconds lost by cause."""
    t = Table(title="GPU-seconds lost by cause")
    t.add_column("cause")
    t.add_column("GPU-seconds", justify="right")
    for cause, secs in doc["gpu_seconds_by_cause"].items():
        t.add_row(cause_text(cause), f"{secs:,.0f}")
    if not doc["gpu_seconds_by_cause"]:
        t.add_row("(none)", "0")
    return t
