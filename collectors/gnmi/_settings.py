"""Settings of the gNMI collector (``[collectors.gnmi]``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fabricwatch.collector import CollectorSettings
from fabricwatch.collectors.switchcommon.targets import check_unique_names, switch_sources
from fabricwatch.settings import option


@dataclass(kw_only=True)
class TlsSettings:
    """TLS towards the target: CA to verify it, optional client certificate (mutual TLS)."""

    ca_file: str = option("", "PEM CA bundle that signed the target's certificate.")
    cert_file: str = option("", "PEM client certificate (mutual TLS).")
    key_file: str = option("", "PEM private key of the client certificate.")
    server_name: str = option("", "Name to verify in the target's certificate (default: the host).")

    def validate(self) -> None:
        """Certificate and key come together."""
        if bool(self.cert_file) != bool(self.key_file):
            msg = "tls.cert_file and tls.key_file go together"
            raise ValueError(msg)


@dataclass(kw_only=True)
class GnmiTargetSettings:
    """One gNMI target (``[[collectors.gnmi.targets]]``)."""

    name: str = option("", "Switch name used as the `switch` label (as in [collectors.switch]).")
    host: str = option("", "Address of the target's gNMI server.")
    port: int = option(9339, "TCP port of the gNMI server.", min=1, max=65535)
    profile: str = option(
        "auto", "Path profile name, or auto (by the models in the Capabilities reply)."
    )
    mode: Literal["", "node", "switch"] = option(
        "", "Override the collector's mode for this switch (empty: inherit)."
    )
    uplinks: list[str] = option([], "Static uplink ports (interface names); overrides LLDP.")
    tls: TlsSettings = field(default_factory=TlsSettings, metadata={"help": "TLS settings."})
    insecure: bool = option(
        False, "Plain-text gRPC without TLS (lab targets only; must be set explicitly)."
    )
    username: str = option("", "User name sent as gRPC metadata (with password_file).")
    password_file: str = option("", "File holding the password (else $FABRICWATCH_GNMI_PASSWORD).")
    timeout: float = option(
        5.0, "Seconds for connecting and the Capabilities call.", min=0.1, max=300.0, duration=True
    )
    port_speed_gbps: float = option(
        0.0,
        "Port speed to assume when the target reports none (for pause fractions from frames).",
        min=0.0,
        max=10000.0,
    )

    def validate(self) -> None:
        """Name and host are required; TLS unless insecure is set explicitly."""
        if not self.name:
            msg = "a gNMI target needs a name"
            raise ValueError(msg)
        if not self.host:
            msg = f"gNMI target {self.name!r} needs a host"
            raise ValueError(msg)
        if self.insecure and (self.tls.ca_file or self.tls.cert_file):
            msg = f"gNMI target {self.name!r}: insecure and tls settings exclude each other"
            raise ValueError(msg)
        if self.password_file and not self.username:
            msg = f"gNMI target {self.name!r}: password_file needs a username"
            raise ValueError(msg)


@dataclass(kw_only=True)
class GnmiSettings(CollectorSettings):
    """``[collectors.gnmi]``: switches streaming ECN, PFC and queue counters over gNMI."""

    targets: list[GnmiTargetSettings] = option([], "gNMI targets to subscribe to.")
    mode: Literal["node", "switch"] = option(
        "node",
        "node: only the ports whose LLDP neighbour is this host; switch: every port.",
    )
    node_names: list[str] = option(
        [], "Extra names this host has in LLDP (the node name is always used)."
    )
    backoff_initial: float = option(
        1.0,
        "First pause before reconnecting after a failure (seconds); doubles per failure.",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    backoff_max: float = option(
        60.0,
        "Longest pause between reconnection attempts.",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    queue_size: int = option(
        256,
        "Notifications buffered per target; when full the stream is not read (gRPC "
        "flow control pushes back on the target) instead of memory growing.",
        min=1,
        max=1_000_000,
    )
    stale_after: float = option(
        0.0,
        "Reconnect when a target sends nothing for this long (0: 3 x interval + 2 s).",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    max_paths: int = option(
        200_000,
        "Most distinct leaf paths remembered per target (bounds memory against path churn).",
        min=100,
        max=10_000_000,
    )
    profile_dirs: list[str] = option(
        [], "Extra directories of gNMI profile *.toml files (same name overrides built-in)."
    )

    def validate(self) -> None:
        """Target names are unique."""
        check_unique_names([t.name for t in self.targets], "gNMI")

    def stale_seconds(self) -> float:
        """The effective staleness limit."""
        return self.stale_after or 3.0 * self.interval + 2.0

    def sources(self) -> frozenset[str]:
        """Each target switch, by name (see :meth:`CollectorSettings.sources`)."""
        return switch_sources(t.name for t in self.targets)
