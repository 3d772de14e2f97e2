"""Item 4 of issue 12: Cisco CBQoS ECN marks over SNMP, same family as gNMI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.switch import _cbqos
from fabricwatch.collectors.switch._ber import Oid, Value
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings
from fabricwatch.store import SnapshotStore
from tests.switch.conftest import Snmpsim, community_file, snmpsim  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

STEM = "nxos-pfc-sim"
ECN = fam.SW_ECN.name


def _collector(tmp_path: Path, port: int, **kw: object) -> SwitchCollector:
    target = TargetSettings(
        name=STEM,
        host="127.0.0.1",
        port=port,
        community_file=community_file(tmp_path, STEM),
        timeout=2.0,
        **kw,  # type: ignore[arg-type]
    )
    env = CollectorEnv(node="gpu-node-1", sys_root=tmp_path / "no-sys", state_dir=tmp_path)
    return SwitchCollector(SwitchSettings(targets=[target]), env)


@pytest.mark.parametrize("mode", ["switch", "static"])
async def test_cbqos_ecn_marks_per_port_and_class(
    snmpsim: Snmpsim,  # noqa: F811
    tmp_path: Path,
    mode: str,
) -> None:
    kw: dict[str, object] = {"mode": "switch"} if mode == "switch" else {"uplinks": ["Ethernet1/1"]}
    c = _collector(tmp_path, snmpsim.port, **kw)
    store = SnapshotStore()
    store.register("switch", c.metrics())
    await c.start()
    try:
        for k in range(3):
            readings = await c.collect()
            assert store.ingest("switch", readings, asyncio.get_running_loop().time()).rejected == 0
            if k < 2:
                await asyncio.sleep(1.05)  # snmpsim's numeric variation follows wall time
        st = c.target_state(STEM)
        assert st.up, st.last_error
        assert st.profile is not None and st.profile.cbqos_ecn
        s = store.get(ECN, (STEM, "Ethernet1/1", "c-out-q3"))
        assert s is not None and s.rate is not None
        assert 560 < s.rate.per_second < 1040  # recorded at 500 + 300 per second
        quiet = store.get(ECN, (STEM, "Ethernet1/1", "c-out-q-default"))
        assert quiet is not None and quiet.rate is not None and quiet.rate.per_second == 0.0
        # The input policy's marks (999/s) never count; node mode polls only the uplink.
        names = {x.labels[1:] for x in store.family(ECN)}
        if mode == "switch":
            assert names == {
                ("Ethernet1/1", "c-out-q3"),
                ("Ethernet1/1", "c-out-q-default"),
                ("Ethernet1/2", "c-out-q3"),
                ("Ethernet1/2", "c-out-q-default"),
            }
        else:
            assert names == {("Ethernet1/1", "c-out-q3"), ("Ethernet1/1", "c-out-q-default")}
    finally:
        await c.close()


def test_cbqos_mapping_ignores_garbage_rows() -> None:
    cb = _cbqos
    cols: dict[Oid, list[tuple[Oid, Value]]] = {
        cb.POLICY_IF_INDEX: [((*cb.POLICY_IF_INDEX, 1), 7), ((*cb.POLICY_IF_INDEX, 2), b"x")],
        cb.POLICY_DIRECTION: [((*cb.POLICY_DIRECTION, 1), 2), ((*cb.POLICY_DIRECTION, 2), 2)],
        cb.OBJ_TYPE: [((*cb.OBJ_TYPE, 1, 5), 2), ((*cb.OBJ_TYPE, 1, 6), 5), ((*cb.OBJ_TYPE, 1), 5)],
        cb.OBJ_CONFIG: [((*cb.OBJ_CONFIG, 1, 5), 50)],
        cb.OBJ_PARENT: [((*cb.OBJ_PARENT, 1, 6), 5), ((*cb.OBJ_PARENT, 1, 9), 9)],
        cb.CM_NAME: [((*cb.CM_NAME, 50), b"gold\x00")],
    }
    rows = cb.map_objects(cols, [7])
    assert rows[(1, 6)] == cb.EcnRow(7, "gold")
    assert (1, 9) not in rows  # a self-parented object without a class-map
    assert cb.map_objects(cols, [8]) == {}
    vbs: list[tuple[Oid, Value]] = [
        ((*cb.ECN_MARK_PKT64, 1, 6, 0), 10),
        ((*cb.ECN_MARK_PKT64, 1, 6, 1), 5),
        ((*cb.ECN_MARK_PKT64, 1, 6), 99),  # truncated index
        ((*cb.ECN_MARK_PKT64, 1, 6, 2), b"bad"),  # wrong type
        ((*cb.ECN_MARK_PKT64, 3, 3, 0), 1),  # unknown policy
    ]
    assert cb.ecn_marks(vbs, rows) == {(7, "gold"): 15}
