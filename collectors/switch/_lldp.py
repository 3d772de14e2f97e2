"""LLDP-MIB uplink discovery: which switch ports face this node.

``lldpRemTable`` rows are indexed ``(lldpRemTimeMark, lldpRemLocalPortNum,
lldpRemIndex)``. The time mark is not always 0 (Junos uses real marks), and
the local port number is an ``LldpPortNumber`` with no mandatory relation to
ifIndex (Dell OS10 differs), so it is mapped through ``lldpLocPortTable``
(port id / description -> ifName or ifDescr) before falling back to "the
same number is an ifIndex".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._ber import Oid, Value

LLDP_LOC_PORT = (1, 0, 8802, 1, 1, 2, 1, 3, 7, 1)
LLDP_REM = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)
LOC_COLUMNS = {2: "id_subtype", 3: "id", 4: "desc"}
REM_COLUMNS = {
    4: "chassis_subtype",
    5: "chassis_id",
    6: "port_subtype",
    7: "port_id",
    9: "sys_name",
}
LOC_OIDS = tuple((*LLDP_LOC_PORT, c) for c in LOC_COLUMNS)
REM_OIDS = tuple((*LLDP_REM, c) for c in REM_COLUMNS)

_MAC_SUBTYPE_CHASSIS = 4
_MAC_SUBTYPE_PORT = 3
_LOCAL_SUBTYPE_PORT = 7
_HEX = re.compile(r"[0-9a-fA-F]")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One lldpRemTable row."""

    time_mark: int
    local_port: int
    index: int
    chassis_subtype: int
    chassis_id: bytes
    port_subtype: int
    port_id: bytes
    sys_name: str

    def port_text(self) -> str:
        """The remote port id for people: a MAC as aa:bb:.., else the text."""
        if self.port_subtype == _MAC_SUBTYPE_PORT:
            mac = normalize_mac(self.port_id)
            if mac:
                return mac
        return _text(self.port_id)


def _text(raw: bytes) -> str:
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


def _int(v: Value) -> int:
    return v if isinstance(v, int) else 0


def _bytes(v: Value) -> bytes:
    return v if isinstance(v, bytes) else b""


def parse_remote(columns: Mapping[Oid, Sequence[tuple[Oid, Value]]]) -> list[Neighbour]:
    """Neighbours from walked lldpRemTable columns; rows with a bad index are skipped."""
    rows: dict[tuple[int, int, int], dict[str, Value]] = {}
    for col, name in REM_COLUMNS.items():
        prefix = (*LLDP_REM, col)
        for oid, value in columns.get(prefix, ()):
            ridx = oid[len(prefix) :]
            if len(ridx) != 3:
                continue
            rows.setdefault((ridx[0], ridx[1], ridx[2]), {})[name] = value
    out = [
        Neighbour(
            time_mark=k[0],
            local_port=k[1],
            index=k[2],
            chassis_subtype=_int(r.get("chassis_subtype")),
            chassis_id=_bytes(r.get("chassis_id")),
            port_subtype=_int(r.get("port_subtype")),
            port_id=_bytes(r.get("port_id")),
            sys_name=_text(_bytes(r.get("sys_name"))),
        )
        for k, r in sorted(rows.items())
    ]
    return out


def map_local_ports(
    columns: Mapping[Oid, Sequence[tuple[Oid, Value]]],
    if_names: Mapping[int, str],
    if_descrs: Mapping[int, str],
) -> dict[int, int]:
    """lldpLocPortNum -> ifIndex, through lldpLocPortId / Desc and IF-MIB names.

    Order: the port id or description equals an ifName or ifDescr; a
    "local"-subtype port id that is an ifIndex; the port number itself when
    it is an ifIndex (Arista, NX-OS, Junos, community SONiC).
    """
    by_name: dict[str, int] = {}
    for table in (if_descrs, if_names):  # ifName wins over ifDescr on a clash
        for idx, name in table.items():
            if name:
                by_name[name.lower()] = idx
    loc: dict[int, dict[str, Value]] = {}
    for col, name in LOC_COLUMNS.items():
        prefix = (*LLDP_LOC_PORT, col)
        for oid, value in columns.get(prefix, ()):
            lidx = oid[len(prefix) :]
            if len(lidx) == 1:
                loc.setdefault(lidx[0], {})[name] = value
    mapping: dict[int, int] = {}
    for num, row in loc.items():
        port_id = _text(_bytes(row.get("id")))
        desc = _text(_bytes(row.get("desc")))
        hit = by_name.get(port_id.lower()) if port_id else None
        if hit is None and desc:
            hit = by_name.get(desc.lower())
        if (
            hit is None
            and _int(row.get("id_subtype")) == _LOCAL_SUBTYPE_PORT
            and port_id.isdigit()
            and int(port_id) in if_names
        ):
            hit = int(port_id)
        if hit is None and (num in if_names or num in if_descrs):
            hit = num
        if hit is not None:
            mapping[num] = hit
    return mapping


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
        elif (nb.chassis_subtype == _MAC_SUBTYPE_CHASSIS or len(nb.chassis_id) == 6) and (
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
        found.setdefault(if_index, Uplink(if_index, nb.port_text(), how))
    return found, unmapped
