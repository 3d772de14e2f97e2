"""LLDP uplink matching shared by the SNMP and gNMI switch collectors.

Each source reads LLDP its own way (LLDP-MIB tables over SNMP, the OpenConfig
or SONiC LLDP paths over gNMI) into :class:`Neighbour` rows; which of those
neighbours is this node (by host name or one of its MACs) is decided here,
once, for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

MAC_SUBTYPE_CHASSIS = 4
"""LldpChassisIdSubtype macAddress(4)."""
MAC_SUBTYPE_PORT = 3
"""LldpPortIdSubtype macAddress(3)."""
_HEX = re.compile(r"[0-9a-fA-F]")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One LLDP neighbour as seen from a switch port (an lldpRemTable row)."""

    time_mark: int
    local_port: int
    index: int
    chassis_subtype: int
    chassis_id: bytes
    port_subtype: int
    port_id: bytes
    sys_name: str

    def porttext_of(self) -> str:
        """The remote port id for people: a MAC as aa:bb:.., else the text."""
        if self.port_subtype == MAC_SUBTYPE_PORT:
            mac = normalize_mac(self.port_id)
            if mac:
                return mac
        return text_of(self.port_id)


def text_of(raw: bytes) -> str:
    """LLDP octet-string text: UTF-8, NULs and surrounding blanks dropped."""
    return raw.decode("utf-8", "replace").strip("\x00").strip()


def normalize_mac(raw: bytes | str) -> str | None:
    """A MAC as ``aa:bb:cc:dd:ee:ff`` from 6 raw bytes or any common text form."""
    if isinstance(raw, bytes) and len(raw) == 6:
        return ":".join(f"{b:02x}" for b in raw)
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if not re.fullmatch(r"[\s0-9a-fA-F:.\-]+", text.strip() or "x"):
        return None
    digits = "".join(_HEX.findall(text)).lower()
    if len(digits) != 12:
        return None
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def local_macs(sys_root: Path) -> set[str]:
    """MACs of this node's network interfaces from ``<sys_root>/class/net/*/address``."""
    out: set[str] = set()
    net = sys_root / "class" / "net"
    try:
        entries = sorted(net.iterdir())
    except OSError:
        return out
    for entry in entries:
        try:
            text = (entry / "address").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        mac = normalize_mac(text.strip())
        if mac and mac != "00:00:00:00:00:00":
            out.add(mac)
    return out


def _name_matches(sys_name: str, names: Iterable[str]) -> bool:
    if not sys_name:
        return False
    s = sys_name.lower()
    short = s.split(".", 1)[0]
    for name in names:
        n = name.lower()
        if n and (s == n or short == n.split(".", 1)[0]):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Uplink:
    """A switch port facing this node."""

    if_index: int
    neighbour_port: str
    matched_by: str  # "sys_name", "chassis_mac", "port_mac"


def find_uplinks(
    neighbours: Iterable[Neighbour],
    port_map: Mapping[int, int],
    node_names: Iterable[str],
    macs: set[str],
) -> tuple[dict[int, Uplink], list[Neighbour]]:
    """Uplinks (by ifIndex) whose LLDP neighbour is this node, and unmapped matches.

    A neighbour is this node when its system name equals one of
    ``node_names`` (full or short host name), or its chassis id or port id
    is one of this node's MACs.
    """
    names = list(node_names)
    found: dict[int, Uplink] = {}
    unmapped: list[Neighbour] = []
    for nb in neighbours:
        how = ""
        if _name_matches(nb.sys_name, names):
            how = "sys_name"
        elif (nb.chassis_subtype == MAC_SUBTYPE_CHASSIS or len(nb.chassis_id) == 6) and (
            normalize_mac(nb.chassis_id) in macs
        ):
            how = "chassis_mac"
        elif normalize_mac(nb.port_id) in macs:
            how = "port_mac"
        if not how:
            continue
        if_index = port_map.get(nb.local_port)
        if if_index is None:
            unmapped.append(nb)
            continue
        found.setdefault(if_index, Uplink(if_index, nb.porttext_of(), how))
    return found, unmapped
