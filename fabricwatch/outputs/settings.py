"""``[alerting]`` and ``[mqtt]`` configuration tables.

Built with :func:`fabricwatch.settings.build` like every other table; the lead
adds :class:`AlertingSettings` and :class:`MqttSettings` to the root config.
Secrets (PagerDuty routing keys, webhook signing secrets, bearer tokens, the
MQTT password) are only ever named by ``*_file`` keys and read with
:func:`fabricwatch.secrets.read_secret`.

Example::

    [alerting]
    max_age = "24h"

    [[alerting.sinks]]
    name = "am"
    type = "alertmanager"
    url = "http://127.0.0.1:9093"

    [[alerting.sinks]]
    name = "oncall"
    type = "pagerduty"
    routing_key_file = "pagerduty-key"     # systemd credential name
    min_severity = "error"

    [mqtt]
    enabled = true
    host = "broker.example"
    password_file = "mqtt-password"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricwatch.settings import option

SinkType = Literal["alertmanager", "pagerduty", "slack", "webhook"]
Severity = Literal["info", "warning", "error", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error", "critical")
"""Ascending; the PagerDuty Events v2 severity set."""

MQTT_SINK = "mqtt"
"""Outbox sink name of the MQTT incident publisher (configured by ``[mqtt]``)."""
DEFAULT_PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
_SINK_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(kw_only=True)
class SinkSettings:
    """One ``[[alerting.sinks]]`` entry: where to send, what, and how fast.

    Keys that do not apply to a sink's ``type`` are ignored for it; required
    keys (``url`` for HTTP sinks, the secret file for PagerDuty and signed
    webhooks) are checked by :meth:`validate`.
    """

    name: str = option("", "Sink name: the `sink` label and the outbox key ([a-z0-9_-]).")
    type: SinkType = option(
        "webhook", "alertmanager, pagerduty, slack or webhook (MQTT is [mqtt])."
    )
    enabled: bool = option(True, "Deliver to this sink.")
    url: str = option(
        "",
        "Alertmanager base URL, Slack webhook URL or webhook URL (PagerDuty: Events v2 URL).",
        secret_url=True,
    )
    routing_key_file: str = option("", "PagerDuty: file holding the integration routing key.")
    secret_file: str = option(
        "", "Webhook: file holding the Standard Webhooks secret (whsec_<base64>)."
    )
    bearer_token_file: str = option("", "Alertmanager/webhook: file with a bearer token.")
    min_severity: Severity = option("warning", "Route incidents of at least this severity.")
    causes: list[str] = option([], "Route only these causes (empty: all).")
    nodes: list[str] = option([], "Route only nodes matching these glob patterns (empty: all).")
    send_updates: bool | None = option(
        None, "Also send significant updates (default true; false for Slack, which cannot edit)."
    )
    rate_per_minute: float = option(
        0.0, "Flood control: requests per minute, 0 = the type's default.", min=0.0, max=60000.0
    )
    burst: int = option(0, "Flood control: burst size, 0 = the type's default.", min=0, max=10000)
    max_batch: int = option(
        0,
        "Flood control: transitions grouped in one request when a backlog forms, "
        "0 = the type's default (PagerDuty and MQTT always 1).",
        min=0,
        max=1000,
    )
    timeout: float = option(
        10.0, "Per-request timeout in seconds.", min=0.1, max=300.0, duration=True
    )
    resend_interval: float = option(
        60.0,
        "Alertmanager: re-send firing alerts this often (endsAt = now + 4 x interval).",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    runbook_url: str = option(
        "", "Runbook link in annotations/links; `{cause}` is replaced by the cause."
    )
    generator_url: str = option(
        "", "Alertmanager: generatorURL (e.g. this node's /api URL).", secret_url=True
    )

    def validate(self) -> None:
        """Reject sinks that cannot work: bad name, missing URL or secret."""
        if not self.name or not set(self.name) <= _SINK_NAME_CHARS or len(self.name) > 64:
            msg = f"sink name must be 1-64 characters of [a-z0-9_-], got {self.name!r}"
            raise ValueError(msg)
        if self.type in ("alertmanager", "slack", "webhook") and not self.url:
            msg = f"sink {self.name!r}: type {self.type} needs a url"
            raise ValueError(msg)
        if self.url and not self.url.startswith(("http://", "https://")):
            msg = f"sink {self.name!r}: url must start with http:// or https://"
            raise ValueError(msg)
        if self.type == "pagerduty" and not self.routing_key_file:
            msg = f"sink {self.name!r}: pagerduty needs routing_key_file"
            raise ValueError(msg)
        if self.type == "webhook" and not self.secret_file:
            msg = f"sink {self.name!r}: webhook needs secret_file (deliveries are signed)"
            raise ValueError(msg)


@dataclass(kw_only=True)
class AlertingSettings:
    """``[alerting]``: the durable outbox, its sender and the sinks."""

    enabled: bool = option(True, "Deliver incidents to the configured sinks.")
    max_age: float = option(
        86400.0,
        "Give up on a delivery this old (dead-lettered, counted, logged).",
        min=1.0,
        max=30 * 86400.0,
        duration=True,
    )
    backoff_initial: float = option(
        1.0,
        "First retry delay in seconds (doubles, with jitter).",
        min=0.01,
        max=3600.0,
        duration=True,
    )
    backoff_max: float = option(
        300.0, "Longest retry delay in seconds.", min=0.01, max=86400.0, duration=True
    )
    max_retry_after: float = option(
        3600.0, "Cap on a receiver's Retry-After.", min=1.0, max=86400.0, duration=True
    )
    retention: float = option(
        7 * 86400.0,
        "Keep delivered and dead rows this long for `incidents --deliveries`.",
        min=60.0,
        max=365 * 86400.0,
        duration=True,
    )
    auth_failure_retries: int = option(
        20,
        "Attempts a delivery gets while the receiver answers 401/403 (secret rotation, an "
        "auth proxy), with the usual backoff, before it is dead-lettered.",
        min=1,
        max=10_000,
    )
    sinks: list[SinkSettings] = option([], "Alert sinks ([[alerting.sinks]] tables).")

    def validate(self) -> None:
        """Sink names are unique (they key the outbox rows)."""
        seen: set[str] = set()
        for s in self.sinks:
            if s.name == MQTT_SINK:
                msg = f"sink name {MQTT_SINK!r} is reserved for [mqtt] incident publishing"
                raise ValueError(msg)
            if s.name in seen:
                msg = f"duplicate sink name {s.name!r}"
                raise ValueError(msg)
            seen.add(s.name)
        if self.backoff_initial > self.backoff_max:
            msg = "backoff_initial must not exceed backoff_max"
            raise ValueError(msg)


@dataclass(kw_only=True)
class MqttSettings:
    """``[mqtt]``: publish status, incidents, job reports and a metrics summary to a broker."""

    enabled: bool = option(False, "Connect to an MQTT broker.")
    host: str = option("127.0.0.1", "Broker host name or address.")
    port: int = option(0, "Broker port; 0 = 1883, or 8883 with TLS.", min=0, max=65535)
    client_id: str = option("", "MQTT client id; empty = fabricwatch-<node>.")
    username: str = option("", "User name (the password comes from password_file).")
    password_file: str = option("", "File holding the MQTT password.")
    tls: bool = option(False, "Connect with TLS.")
    ca_file: str = option("", "TLS: CA bundle to verify the broker (empty: system CAs).")
    cert_file: str = option("", "TLS: client certificate (PEM) for mutual TLS.")
    key_file: str = option("", "TLS: client key (PEM).")
    tls_insecure: bool = option(False, "TLS: skip the broker host name check (tests only).")
    keepalive: float = option(
        30.0,
        "Keepalive in seconds; the broker fires the Will after 1.5x this.",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    topic_prefix: str = option("fabricwatch/v1", "Topic prefix before <cluster>/<node>.")
    incidents: bool = option(True, "Publish incident transitions (QoS 1, from the outbox).")
    metrics_interval: float = option(
        0.0,
        "Publish a metrics summary (QoS 0) this often; 0 = off.",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    jobwork: bool = option(
        True,
        "Publish a job report (the jobs' GPUs and work, for the fleet's badput and "
        "stragglers) per 60 s window of unix time (QoS 1).",
    )
    publish_timeout: float = option(
        10.0, "Wait this long for the broker's PUBACK.", min=0.1, max=300.0, duration=True
    )
    reconnect_initial: float = option(
        0.5, "First reconnect delay in seconds.", min=0.01, max=600.0, duration=True
    )
    reconnect_max: float = option(
        30.0, "Longest reconnect delay in seconds.", min=0.01, max=3600.0, duration=True
    )
    buffer: int = option(
        100,
        "Summary, metric and job-report messages kept while disconnected (oldest dropped).",
        min=0,
        max=100_000,
    )

    def validate(self) -> None:
        """Topic prefix without wildcards or a leading slash; key needs a cert."""
        if self.topic_prefix.startswith("/") or any(c in self.topic_prefix for c in "+#"):
            msg = "topic_prefix must not start with '/' or contain '+' or '#'"
            raise ValueError(msg)
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in self.topic_prefix):
            # MQTT forbids U+0000 in topics; other controls break logs and ACLs.
            msg = "topic_prefix must not contain NUL or other control characters"
            raise ValueError(msg)
        if len(self.topic_prefix.encode()) > 1024:
            msg = "topic_prefix is longer than 1024 bytes"
            raise ValueError(msg)
        if self.key_file and not self.cert_file:
            msg = "key_file needs cert_file"
            raise ValueError(msg)
        if self.password_file and not self.username:
            msg = "password_file needs username"
            raise ValueError(msg)

    def effective_port(self) -> int:
        """The configured port, or the protocol default."""
        if self.port:
            return self.port
        return 8883 if self.tls else 1883
