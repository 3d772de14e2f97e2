"""Settings of the switch collector (``[collectors.switch]``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fabricwatch.collector import CollectorSettings
from fabricwatch.collectors.switchcommon.targets import check_unique_names, switch_sources
from fabricwatch.settings import option

from ._client import AUTH_PROTOCOLS, PRIV_PROTOCOLS


@dataclass(kw_only=True)
class V3Settings:
    """SNMPv3 USM credentials; keys come only from files."""

    user: str = option("", "USM user name.")
    auth_protocol: str = option("sha", "Authentication protocol.", choices=AUTH_PROTOCOLS)
    auth_key_file: str = option("", "File holding the authentication passphrase.")
    priv_protocol: str = option("aes", "Privacy protocol.", choices=PRIV_PROTOCOLS)
    priv_key_file: str = option("", "File holding the privacy passphrase.")
    context: str = option("", "SNMPv3 context name.")


@dataclass(kw_only=True)
class TargetSettings:
    """One switch to poll (``[[collectors.switch.targets]]``)."""

    name: str = option("", "Switch name used as the `switch` label.")
    host: str = option("", "Address of the switch's SNMP agent.")
    port: int = option(161, "UDP port of the agent.", min=1, max=65535)
    version: Literal["2c", "3"] = option("2c", "SNMP version: 2c or 3.")
    community_file: str = option(
        "", "File holding the v2c community (else $FABRICWATCH_SNMP_COMMUNITY, else 'public')."
    )
    v3: V3Settings = field(default_factory=V3Settings, metadata={"help": "SNMPv3 credentials."})
    timeout: float = option(
        1.0, "Seconds to wait for one response.", min=0.01, max=60.0, duration=True
    )
    retries: int = option(1, "Resends of a request before it times out.", min=0, max=10)
    max_repetitions: int = option(25, "GETBULK max-repetitions per column.", min=1, max=200)
    max_oids_per_request: int = option(
        256,
        "Most varbinds in one GET. GETs start at 40 and grow while the agent answers "
        "them; a tooBig answer shrinks them to what it answers.",
        min=1,
        max=1024,
    )
    profile: str = option("auto", "Vendor profile name, or auto (by sysObjectID / sysDescr).")
    mode: Literal["", "node", "switch"] = option(
        "", "Override the collector's mode for this switch (empty: inherit)."
    )
    uplinks: list[str] = option(
        [], "Static uplink ports (ifName, ifDescr or ifIndex); overrides LLDP discovery."
    )
    port_speeds: dict[str, float] = option(
        {},
        "Port speed in Gb/s by ifName, ifDescr or ifIndex; overrides ifHighSpeed / ifSpeed "
        "(for agents without ifXTable, whose ifSpeed pins at 4294967295 above 4.29 Gb/s).",
        min=0.001,
        max=100000.0,
    )
    client: Literal["auto", "native", "pysnmp"] = option(
        "auto", "SNMP client: native (fast v2c), pysnmp, or auto (native for v2c, pysnmp for v3)."
    )

    def validate(self) -> None:
        """Name and host are required; v3 needs a user."""
        if not self.name:
            msg = "a switch target needs a name"
            raise ValueError(msg)
        if not self.host:
            msg = f"switch target {self.name!r} needs a host"
            raise ValueError(msg)
        if self.version == "3" and not self.v3.user:
            msg = f"switch target {self.name!r}: version 3 needs v3.user"
            raise ValueError(msg)
        if self.version == "3" and self.client == "native":
            msg = f"switch target {self.name!r}: the native client speaks v2c only"
            raise ValueError(msg)


@dataclass(kw_only=True)
class SwitchSettings(CollectorSettings):
    """``[collectors.switch]``: switches to poll over SNMP and how."""

    targets: list[TargetSettings] = option([], "Switches to poll.")
    mode: Literal["node", "switch"] = option(
        "node",
        "node: poll only the ports whose LLDP neighbour is this host; switch: every port.",
    )
    node_names: list[str] = option(
        [], "Extra names this host has in LLDP (the node name is always used)."
    )
    discovery_interval: float = option(
        600.0,
        "Seconds between LLDP / ifTable rediscoveries.",
        min=1.0,
        max=86400.0,
        duration=True,
    )
    max_concurrency: int = option(8, "Switches polled at the same time.", min=1, max=256)
    backoff_initial: float = option(
        2.0,
        "First pause after a failed poll (seconds); doubles per failure.",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    backoff_max: float = option(
        300.0,
        "Longest pause between polls of a failing switch.",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    profile_dirs: list[str] = option(
        [], "Extra directories of vendor profile *.toml files (same name overrides built-in)."
    )

    def validate(self) -> None:
        """Target names are unique."""
        check_unique_names([t.name for t in self.targets], "switch")

    def sources(self) -> frozenset[str]:
        """Each target switch, by name (see :meth:`CollectorSettings.sources`)."""
        return switch_sources(t.name for t in self.targets)
