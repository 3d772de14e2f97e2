"""Alert sinks (Alertmanager, PagerDuty, Slack, signed webhook), routing, flood control.

:func:`build_sinks` turns ``[[alerting.sinks]]`` settings into sink objects,
their routes and their token buckets, reading secrets from their files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fabricwatch.errors import ConfigError
from fabricwatch.outputs.settings import DEFAULT_PAGERDUTY_URL, SinkSettings
from fabricwatch.outputs.sinks.alertmanager import AlertmanagerSink
from fabricwatch.outputs.sinks.pagerduty import PagerDutySink
from fabricwatch.outputs.sinks.protocol import Sink
from fabricwatch.outputs.sinks.routing import Route, Router, severity_of
from fabricwatch.outputs.sinks.slack import SlackSink
from fabricwatch.outputs.sinks.webhook import WebhookSink
from fabricwatch.outputs.token_bucket import TokenBucket
from fabricwatch.secrets import read_secret

__all__ = [
    "AlertmanagerSink",
    "BuiltSinks",
    "PagerDutySink",
    "Route",
    "Router",
    "SlackSink",
    "WebhookSink",
    "build_sinks",
    "flood_defaults",
    "severity_of",
]


@dataclass(frozen=True, slots=True)
class FloodControl:
    """A sink type's default request rate (per minute), burst and batch size."""

    rate_per_minute: float
    burst: int
    max_batch: int


_FLOOD = {
    # Alertmanager groups pages itself; we only keep the POST rate sane.
    "alertmanager": FloodControl(120.0, 10, 64),
    # PagerDuty throttles an integration key at 120 events/min; stay under it.
    "pagerduty": FloodControl(60.0, 10, 1),
    # Slack: "1 message per second, short bursts allowed".
    "slack": FloodControl(60.0, 3, 20),
    # 10 requests/s of up to 50 transitions: a 20,000-transition backlog (a
    # receiver down through a storm) drains in about 40 s, not 33 minutes.
    "webhook": FloodControl(600.0, 50, 50),
}


def flood_defaults(kind: str) -> FloodControl:
    """The defaults for a sink type."""
    return _FLOOD[kind]


@dataclass(frozen=True, slots=True)
class BuiltSinks:
    """Sinks ready for :class:`~fabricwatch.outputs.outbox.OutboxSender`."""

    sinks: list[Sink]
    routes: list[Route]
    limits: dict[str, TokenBucket]


def _secret(path: str, key: str) -> str:
    value = read_secret(path, key=key)
    if not value:
        raise ConfigError(f"secret file {path} is empty", key=key)
    return value


def build_sinks(
    settings: Sequence[SinkSettings],
    *,
    monotonic: Callable[[], float] = time.monotonic,
    clock: Callable[[], float] = time.time,
) -> BuiltSinks:
    """Build the enabled sinks; ConfigError if a secret file is missing or invalid."""
    sinks: list[Sink] = []
    routes: list[Route] = []
    limits: dict[str, TokenBucket] = {}
    for i, s in enumerate(settings):
        if not s.enabled:
            continue
        where = f"alerting.sinks[{i}]"
        flood = _FLOOD[s.type]
        batch = s.max_batch or flood.max_batch
        bearer = (
            _secret(s.bearer_token_file, f"{where}.bearer_token_file")
            if s.bearer_token_file
            else None
        )
        sink: Sink
        if s.type == "alertmanager":
            sink = AlertmanagerSink(
                s.name,
                s.url,
                timeout=s.timeout,
                max_batch=batch,
                resend_interval=s.resend_interval,
                runbook_url=s.runbook_url,
                generator_url=s.generator_url,
                bearer_token=bearer,
                clock=clock,
            )
        elif s.type == "pagerduty":
            sink = PagerDutySink(
                s.name,
                _secret(s.routing_key_file, f"{where}.routing_key_file"),
                url=s.url or DEFAULT_PAGERDUTY_URL,
                timeout=s.timeout,
                runbook_url=s.runbook_url,
            )
        elif s.type == "slack":
            sink = SlackSink(
                s.name, s.url, timeout=s.timeout, max_batch=batch, runbook_url=s.runbook_url
            )
        else:
            try:
                sink = WebhookSink(
                    s.name,
                    s.url,
                    _secret(s.secret_file, f"{where}.secret_file"),
                    timeout=s.timeout,
                    max_batch=batch,
                    bearer_token=bearer,
                    clock=clock,
                )
            except ValueError as exc:
                raise ConfigError(str(exc), key=f"{where}.secret_file") from None
        sinks.append(sink)
        send_updates = s.send_updates if s.send_updates is not None else s.type != "slack"
        routes.append(
            Route(
                s.name,
                s.min_severity,
                frozenset(s.causes),
                tuple(s.nodes),
                send_updates,
            )
        )
        limits[s.name] = TokenBucket(
            (s.rate_per_minute or flood.rate_per_minute) / 60.0,
            s.burst or flood.burst,
            monotonic=monotonic,
        )
    return BuiltSinks(sinks, routes, limits)
