"""Cisco CBQoS ECN marks: ``cbQosREDClassStatsTable`` rows mapped to (port, class).

CISCO-CLASS-BASED-QOS-MIB (``1.3.6.1.4.1.9.9.166``) indexes RED statistics
by ``(cbQosPolicyIndex, cbQosObjectsIndex, cbQosREDValue)``, not by ifIndex.
The policy index leads to the interface through ``cbQosServicePolicyTable``
(``cbQosIfIndex``, ``cbQosPolicyDirection``); the objects index leads, via
``cbQosObjectsTable`` parents, to the class-map whose name
(``cbQosCMName``) becomes the ``queue`` label. Marks are summed over RED
values (precedence / DSCP). Only output policies count: ECN marking happens
at egress queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._ber import Oid, Value

CBQOS = (1, 3, 6, 1, 4, 1, 9, 9, 166, 1)
POLICY_DIRECTION = (*CBQOS, 1, 1, 1, 3)  # cbQosPolicyDirection: 1 input, 2 output
POLICY_IF_INDEX = (*CBQOS, 1, 1, 1, 4)  # cbQosIfIndex
OBJ_CONFIG = (*CBQOS, 5, 1, 1, 2)  # cbQosConfigIndex
OBJ_TYPE = (*CBQOS, 5, 1, 1, 3)  # cbQosObjectsType: 2 classmap
OBJ_PARENT = (*CBQOS, 5, 1, 1, 4)  # cbQosParentObjectsIndex
CM_NAME = (*CBQOS, 7, 1, 1, 1)  # cbQosCMName, by config index
ECN_MARK_PKT64 = (*CBQOS, 20, 1, 1, 21)  # cbQosREDECNMarkPkt64
DISCOVERY_COLUMNS = (POLICY_DIRECTION, POLICY_IF_INDEX, OBJ_CONFIG, OBJ_TYPE, OBJ_PARENT, CM_NAME)
_OUTPUT = 2
_CLASSMAP = 2


@dataclass(frozen=True, slots=True)
class EcnRow:
    """Where one (policy, object) pair's ECN marks belong."""

    if_index: int
    queue: str


def _int(v: Value) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def map_objects(
    columns: Mapping[Oid, Sequence[tuple[Oid, Value]]], ports: Iterable[int]
) -> dict[tuple[int, int], EcnRow]:
    """(policy, object) -> port and class name, for output policies on ``ports``."""
    wanted = set(ports)
    policy_if: dict[int, int] = {}
    direction: dict[int, int] = {}
    for col, target in ((POLICY_IF_INDEX, policy_if), (POLICY_DIRECTION, direction)):
        for oid, v in columns.get(col, ()):
            iv = _int(v)
            if len(oid) == len(col) + 1 and iv is not None:
                target[oid[-1]] = iv
    objs: dict[tuple[int, int], dict[str, int]] = {}
    for col, key in ((OBJ_CONFIG, "config"), (OBJ_TYPE, "type"), (OBJ_PARENT, "parent")):
        for oid, v in columns.get(col, ()):
            iv = _int(v)
            if len(oid) == len(col) + 2 and iv is not None:
                objs.setdefault((oid[-2], oid[-1]), {})[key] = iv
    names: dict[int, str] = {}
    for oid, v in columns.get(CM_NAME, ()):
        if len(oid) == len(CM_NAME) + 1 and isinstance(v, bytes):
            names[oid[-1]] = v.decode("utf-8", "replace").strip("\x00").strip()
    out: dict[tuple[int, int], EcnRow] = {}
    for (policy, obj), _attrs in objs.items():
        if_index = policy_if.get(policy)
        if if_index not in wanted or direction.get(policy) != _OUTPUT:
            continue
        # Walk up to the class-map this object belongs to (bounded: no cycles).
        cur = obj
        name = ""
        for _ in range(8):
            a = objs.get((policy, cur))
            if a is None:
                break
            if a.get("type") == _CLASSMAP:
                name = names.get(a.get("config", -1), "")
                break
            cur = a.get("parent", 0)
        if name:
            assert if_index is not None
            out[(policy, obj)] = EcnRow(if_index, name)
    return out


def ecn_marks(
    varbinds: Iterable[tuple[Oid, Value]], rows: Mapping[tuple[int, int], EcnRow]
) -> dict[tuple[int, str], int]:
    """(ifIndex, class) -> ECN-marked packets, summed over RED values."""
    n = len(ECN_MARK_PKT64)
    out: dict[tuple[int, str], int] = {}
    for oid, v in varbinds:
        iv = _int(v)
        if iv is None or len(oid) != n + 3 or oid[:n] != ECN_MARK_PKT64:
            continue
        row = rows.get((oid[n], oid[n + 1]))
        if row is None:
            continue
        key = (row.if_index, row.queue)
        out[key] = out.get(key, 0) + iv
    return out
