"""LLDP-MIB tables read into :class:`~fabricwatch.collectors.switchcommon.uplinks.Neighbour` rows.

Which of them face this node is decided in :mod:`~fabricwatch.collectors.switchcommon.uplinks`.

``lldpRemTable`` rows are indexed ``(lldpRemTimeMark, lldpRemLocalPortNum,
lldpRemIndex)``. The time mark is not always 0 (Junos uses real marks), and
the local port number is an ``LldpPortNumber`` with no mandatory relation to
ifIndex (Dell OS10 differs), so it is mapped through ``lldpLocPortTable``
(port id / description -> ifName or ifDescr) before falling back to "the
same number is an ifIndex".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fabricwatch.collectors.switchcommon.uplinks import Neighbour, text_of

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

_LOCAL_SUBTYPE_PORT = 7


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
            sys_name=text_of(_bytes(r.get("sys_name"))),
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
        port_id = text_of(_bytes(row.get("id")))
        desc = text_of(_bytes(row.get("desc")))
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
