"""Alertmanager API v2 sink: ``POST /api/v2/alerts``.

Alertmanager treats an alert as firing until its ``endsAt``; a source must
re-send firing alerts periodically and keep sending a resolved alert (with
``endsAt`` in the past) for a while so every peer of an HA cluster sees it.
The sink re-sends, every ``resend_interval``, the latest delivered state of
each incident: firing ones with ``endsAt = now + 4 x interval``, resolved
ones for ``resolved_resend`` seconds after resolve. A backlog is sent as one
array (the API takes a list), which is this sink's flood control; grouping
pages is Alertmanager's own job (``group_by`` in its route).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabricwatch.outputs.outbox import Delivery, iso
from fabricwatch.outputs.sinks._http import HttpSink
from fabricwatch.outputs.sinks._render import (
    culprit_of,
    evidence_lines,
    gpus_of,
    latest_per_incident,
    runbook,
)

_LABEL_MEMORY = 10_000  # incidents whose last posted label set is remembered
ALERTNAMES = {"stall": "FabricwatchGPUStall", "slowdown": "FabricwatchGPUSlowdown"}


class AlertmanagerSink(HttpSink):
    """Posts incidents as Alertmanager alerts and keeps them alive while firing."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        timeout: float = 10.0,
        max_batch: int = 64,
        resend_interval: float = 60.0,
        resolved_resend: float = 300.0,
        runbook_url: str = "",
        generator_url: str = "",
        bearer_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name, timeout=timeout, max_batch=max_batch, bearer_token=bearer_token)
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self._resend = resend_interval
        self._resolved_resend = resolved_resend
        self._runbook = runbook_url
        self._generator = generator_url
        self._clock = clock
        self._labels: dict[str, dict[str, str]] = {}

    @property
    def refresh_interval(self) -> float:
        """Re-send period of firing alerts."""
        return self._resend

    @property
    def resolved_resend(self) -> float:
        """How long resolved alerts keep being re-sent."""
        return self._resolved_resend

    def alert(self, event: Mapping[str, Any], now: float) -> dict[str, Any]:
        """The API v2 ``postableAlert`` of one stored event."""
        inc: Mapping[str, Any] = event["data"]
        resolved = event["type"] == "incident.resolved"
        labels = {
            "alertname": ALERTNAMES.get(str(inc.get("kind")), "FabricwatchIncident"),
            "cause": str(inc.get("cause") or "unknown"),
            "node": str(inc.get("node") or "unknown"),
            "culprit": culprit_of(inc),
            "severity": str(event.get("severity") or "warning"),
            "cluster": str(event.get("cluster") or "default"),
        }
        annotations = {
            "summary": str(inc.get("summary", "")),
            "evidence": "\n".join(evidence_lines(inc)) or "none",
            "gpus": gpus_of(inc),
            "gpu_seconds_lost": f"{float(inc.get('gpu_seconds_lost') or 0.0):.0f}",
            "incident": str(inc.get("key", "")),
            "dedup_key": str(event.get("dedup_key", "")),
        }
        link = runbook(self._runbook, inc)
        if link:
            annotations["runbook_url"] = link
        starts = inc.get("onset") or event.get("timestamp")
        ends = (inc.get("resolved_at") or event.get("timestamp")) if resolved else None
        if ends is not None and starts is not None and str(ends) < str(starts):
            # Same ISO format both sides, so string order is time order; Alertmanager
            # rejects the whole POST (400) when an alert ends before it starts.
            ends = starts
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": annotations,
            "startsAt": starts,
            "endsAt": ends or iso(now + 4.0 * self._resend),
        }
        if self._generator:
            alert["generatorURL"] = self._generator
        return alert

    async def _post(self, rows: Sequence[Delivery]) -> None:
        now = self._clock()
        # Resolved first, so a new incident with the same labels is not ended by the old one.
        ordered = sorted(rows, key=lambda d: d.transition != "resolved")
        alerts: list[dict[str, Any]] = []
        posted: dict[str, dict[str, str]] = {}
        for d in ordered:
            alert = self.alert(d.event(), now)
            prev = self._labels.get(d.dedup_key)
            if prev is not None and prev != alert["labels"]:
                # The update changed the cause or culprit, so the label set (the alert's
                # identity) changed: end the old alert instead of letting it time out.
                alerts.append({**alert, "labels": prev, "endsAt": iso(now)})
            alerts.append(alert)
            posted[d.dedup_key] = alert["labels"]
        await self._http.post(
            self.url, json.dumps(alerts).encode(), {"Content-Type": "application/json"}
        )
        self._labels.update(posted)
        while len(self._labels) > _LABEL_MEMORY:
            self._labels.pop(next(iter(self._labels)))

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """POST the latest state of each incident in ``batch``."""
        await self._post(latest_per_incident(batch))

    async def refresh(self, firing: Sequence[Delivery]) -> None:
        """Re-POST firing (and recently resolved) incidents."""
        await self._post(latest_per_incident(firing))
