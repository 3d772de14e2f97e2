"""Metric families of the gNMI collector.

Switch data families are the SNMP switch collector's own :class:`MetricSpec`
objects (``fabricwatch.collectors.switch._metrics``), so both sources feed the
same series names with identical declarations. Only what SNMP has no
equivalent for, and the stream's own health, is declared here.
"""

from __future__ import annotations

from fabricwatch.collectors.switch import _metrics as sw
from fabricwatch.readings import MetricKind, MetricSpec

G = MetricKind.GAUGE
C = MetricKind.COUNTER
S = ("switch",)

ECN_MARKED_BYTES = MetricSpec(
    "fabricwatch_switch_ecn_marked_bytes",
    C,
    "ECN-marked bytes per egress queue (gNMI ecn-marked-octets / SAI WRED_ECN_MARKED_BYTES).",
    sw.SPQ,
)
QUEUE_TX_PACKETS = MetricSpec(
    "fabricwatch_switch_queue_transmit_packets",
    C,
    "Packets transmitted per egress queue (gNMI transmit-pkts / SAI_QUEUE_STAT_PACKETS).",
    sw.SPQ,
)
TARGET_UP = MetricSpec(
    "fabricwatch_gnmi_target_up", G, "1 while the gNMI subscription to the switch is open.", S
)
TARGET_INFO = MetricSpec(
    "fabricwatch_gnmi_target_info",
    G,
    "1 per target: the path profile in use.",
    ("switch", "profile"),
)
CONNECTS = MetricSpec(
    "fabricwatch_gnmi_subscriptions",
    C,
    "Subscriptions opened (first connect, reconnects and resubscriptions).",
    S,
)
STREAM_ERRORS = MetricSpec(
    "fabricwatch_gnmi_stream_errors",
    C,
    "Failed connections or streams by reason (tls, auth, unreachable, timeout, stale, "
    "closed, rpc_error).",
    ("switch", "reason"),
)
NOTIFICATIONS = MetricSpec(
    "fabricwatch_gnmi_notifications", C, "Notifications processed from the target.", S
)
IGNORED = MetricSpec(
    "fabricwatch_gnmi_ignored_updates",
    C,
    "Updates ignored by reason: malformed (undecodable or wrong type) or unknown_path.",
    ("switch", "reason"),
)
QUEUE_DEPTH = MetricSpec(
    "fabricwatch_gnmi_queue_depth", G, "Notifications waiting for the next collection.", S
)
QUEUE_WAITS = MetricSpec(
    "fabricwatch_gnmi_queue_full",
    C,
    "Times the stream reader found the queue full and held the target back.",
    S,
)
TARGET_RESTARTS = MetricSpec(
    "fabricwatch_gnmi_target_restarts",
    C,
    "Target restarts seen (boot-time changed).",
    S,
)

ALL = (
    sw.PFC_PAUSE_RATIO,
    sw.PFC_PAUSE_FRAMES,
    sw.PFC_PAUSE_SECONDS,
    sw.LINK_PAUSE_FRAMES,
    sw.PORT_UP,
    sw.PORT_FLAPS,
    sw.RX_BYTES,
    sw.TX_BYTES,
    sw.DISCARDS,
    sw.ERRORS,
    sw.UTILIZATION,
    sw.SPEED,
    sw.QUEUE_DROPS,
    sw.ECN_MARKED,
    sw.UPLINK_INFO,
    ECN_MARKED_BYTES,
    QUEUE_TX_PACKETS,
    TARGET_UP,
    TARGET_INFO,
    CONNECTS,
    STREAM_ERRORS,
    NOTIFICATIONS,
    IGNORED,
    QUEUE_DEPTH,
    QUEUE_WAITS,
    TARGET_RESTARTS,
)
