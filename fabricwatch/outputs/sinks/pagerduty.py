"""PagerDuty Events API v2 sink.

``trigger`` on open and on significant updates (same ``dedup_key``: PagerDuty
updates the alert instead of opening another), ``resolve`` on resolve. The
routing key comes from a file. One event per request (the API has no batch);
flood control is the sender's rate limit plus PagerDuty's own content-based
alert grouping, for which ``group`` (cause) and ``class`` (culprit kind) are set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fabricwatch.outputs.outbox import Delivery
from fabricwatch.outputs.settings import DEFAULT_PAGERDUTY_URL
from fabricwatch.outputs.sinks._http import HttpSink
from fabricwatch.outputs.sinks._render import culprit_of, evidence_lines, gpus_of, runbook

MAX_EVENT_BYTES = 512_000
_SUMMARY_MAX = 1024


class PagerDutySink(HttpSink):
    """Sends trigger/resolve events keyed by the incident's dedup key."""

    def __init__(
        self,
        name: str,
        routing_key: str,
        *,
        url: str = DEFAULT_PAGERDUTY_URL,
        timeout: float = 10.0,
        runbook_url: str = "",
    ) -> None:
        if not routing_key:
            msg = f"sink {name!r}: empty PagerDuty routing key"
            raise ValueError(msg)
        super().__init__(name, timeout=timeout)
        self._key = routing_key
        self.url = url
        self._runbook = runbook_url

    @property
    def max_batch(self) -> int:
        """One event per request."""
        return 1

    def event(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The Events v2 body of one stored event (at most 512,000 bytes)."""
        inc: Mapping[str, Any] = stored["data"]
        dedup = str(stored["dedup_key"])[:255]
        if stored["type"] == "incident.resolved":
            return {"routing_key": self._key, "event_action": "resolve", "dedup_key": dedup}
        culprit = inc.get("culprit") or {}
        details: dict[str, Any] = {
            "incident": inc.get("key"),
            "node": inc.get("node"),
            "cause": inc.get("cause"),
            "confidence": inc.get("confidence"),
            "culprit": culprit_of(inc),
            "gpus": gpus_of(inc),
            "job": inc.get("job"),
            "gpu_seconds_lost": inc.get("gpu_seconds_lost"),
            "onset": inc.get("onset"),
            "transition": str(stored["type"]).removeprefix("incident."),
            "evidence": evidence_lines(inc, limit=10),
        }
        body: dict[str, Any] = {
            "routing_key": self._key,
            "event_action": "trigger",
            "dedup_key": dedup,
            "client": "fabricwatch",
            "payload": {
                "summary": str(inc.get("summary") or inc.get("cause") or "incident")[:_SUMMARY_MAX],
                "source": str(inc.get("node") or "unknown"),
                "severity": str(stored.get("severity") or "warning"),
                "timestamp": stored.get("timestamp"),
                "component": culprit_of(inc),
                "group": str(inc.get("cause") or "unknown"),
                "class": str(culprit.get("kind") or inc.get("kind") or "incident")
                if isinstance(culprit, Mapping)
                else "incident",
                "custom_details": details,
            },
        }
        link = runbook(self._runbook, inc)
        if link:
            body["links"] = [{"href": link, "text": "Runbook"}]
        while len(json.dumps(body).encode()) > MAX_EVENT_BYTES and details["evidence"]:
            details["evidence"] = details["evidence"][:-1]
        return body

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Send each event (the sender passes one)."""
        for d in batch:
            body = json.dumps(self.event(d.event())).encode()
            await self._http.post(self.url, body, {"Content-Type": "application/json"})
