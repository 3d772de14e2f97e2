"""Slack incoming-webhook sink.

Slack cannot deduplicate or edit through an incoming webhook, so it gets
transitions only (opened, resolved; updates off by default) as short, readable
messages: cause, culprit, GPUs, GPU-seconds lost, top evidence. A backlog
(a storm) is grouped into one message listing up to ``max_batch`` transitions,
and the sender's rate limit keeps to Slack's one message per second.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fabricwatch.engine.causes import cause_text
from fabricwatch.outputs.outbox import Delivery
from fabricwatch.outputs.sinks._http import HttpSink
from fabricwatch.outputs.sinks._render import (
    culprit_of,
    evidence_lines,
    gpus_of,
    runbook,
)

_ICONS = {"opened": ":rotating_light:", "updated": ":warning:", "resolved": ":white_check_mark:"}
_TEXT_MAX = 3000  # a section block's text limit


def _esc(text: str) -> str:
    """Escape Slack's control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def headline(event: Mapping[str, Any]) -> str:
    """One line: what happened where."""
    inc: Mapping[str, Any] = event["data"]
    transition = str(event["type"]).removeprefix("incident.")
    icon = _ICONS.get(transition, ":grey_question:")
    lost = float(inc.get("gpu_seconds_lost") or 0.0)
    what = "Resolved: " if transition == "resolved" else ""
    return (
        f"{icon} {what}*{_esc(cause_text(str(inc.get('cause', 'unknown'))))}* on "
        f"`{_esc(str(inc.get('node', '?')))}` — culprit `{_esc(culprit_of(inc))}` — "
        f"GPUs {_esc(gpus_of(inc))} — {lost:,.0f} GPU·s lost"
    )


def message(events: Sequence[Mapping[str, Any]], *, runbook_url: str = "") -> dict[str, Any]:
    """The Slack payload for one transition, or one grouped message for several."""
    if len(events) == 1:
        ev = events[0]
        inc: Mapping[str, Any] = ev["data"]
        lines = [headline(ev)]
        if ev["type"] != "incident.resolved":
            lines += [f"• {_esc(t)}" for t in evidence_lines(inc)]
            conf = inc.get("confidence")
            if isinstance(conf, int | float):
                lines.append(f"confidence {conf:.2f} · severity {ev.get('severity')}")
        else:
            lines.append(f"after {float(inc.get('duration_seconds') or 0.0):.0f} s")
        link = runbook(runbook_url, inc)
        if link:
            lines.append(f"<{link}|runbook>")
        text = "\n".join(lines)[:_TEXT_MAX]
        fallback = headline(ev)
    else:
        fallback, text = _grouped(events)
    return {
        "text": fallback,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def _grouped(events: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """A storm in one message: one line per (transition, cause, culprit) with counts."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for e in events:
        inc: Mapping[str, Any] = e["data"]
        key = (
            str(e["type"]).removeprefix("incident."),
            str(inc.get("cause", "unknown")),
            culprit_of(inc),
        )
        groups.setdefault(key, []).append(inc)
    opened = sum(1 for e in events if e["type"] == "incident.opened")
    resolved = sum(1 for e in events if e["type"] == "incident.resolved")
    fallback = (
        f":rotating_light: {len(events)} incident transitions "
        f"({opened} opened, {resolved} resolved)"
    )
    lines = [fallback]
    for (transition, cause, culprit), incs in groups.items():
        nodes = sorted({str(i.get("node", "?")) for i in incs})
        shown = ", ".join(nodes[:5]) + (f" +{len(nodes) - 5} more" if len(nodes) > 5 else "")
        lost = sum(float(i.get("gpu_seconds_lost") or 0.0) for i in incs)
        lines.append(
            f"{_ICONS.get(transition, '')} {len(incs)} {transition} — "
            f"*{_esc(cause_text(cause))}* — culprit `{_esc(culprit)}` — "
            f"nodes {_esc(shown)} — {lost:,.0f} GPU·s lost"
        )
    text = "\n".join(lines)
    if len(text) > _TEXT_MAX:
        text = text[: _TEXT_MAX - 20].rsplit("\n", 1)[0] + "\n… (truncated)"
    return fallback, text


class SlackSink(HttpSink):
    """Posts transitions to a Slack incoming webhook."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        timeout: float = 10.0,
        max_batch: int = 20,
        runbook_url: str = "",
    ) -> None:
        super().__init__(name, timeout=timeout, max_batch=max_batch)
        self.url = url
        self._runbook = runbook_url

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Post one message for the batch."""
        body = json.dumps(message([d.event() for d in batch], runbook_url=self._runbook))
        await self._http.post(self.url, body.encode(), {"Content-Type": "application/json"})
