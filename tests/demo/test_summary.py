"""The verdict: incidents matched to injected faults by onset, cause and culprit."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fabricwatch.demo.receiver import Page
from fabricwatch.demo.scenarios import SCENARIOS
from fabricwatch.demo.summary import Injected, gpu_seconds_by_cause, judge, report

T0 = 1_800_000_000.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _doc(  # noqa: PLR0917 - a row of test data
    key: str, cause: str, culprit: str, onset: float, opened: float, lost: float
) -> dict[str, Any]:
    return {
        "key": key,
        "kind": "stall",
        "state": "resolved",
        "cause": cause,
        "culprit": {"key": culprit},
        "confidence": 0.9,
        "onset_unix": onset,
        "opened_at": _iso(opened),
        "gpu_seconds_lost": lost,
        "summary": f"{cause} summary",
    }


def _page(key: str, transition: str = "opened") -> Page:
    return Page(transition, key, "c", "x", "critical", "", 0.0)


def _injections() -> list[Injected]:
    healthy = Injected(SCENARIOS["healthy"], start=T0, end=T0 + 20)
    pfc = Injected(
        SCENARIOS["pfc-storm"], start=T0 + 20, end=T0 + 60, fault_start=T0 + 20, fault_end=T0 + 44
    )
    pfc.gpu_seconds = 184.0
    ckpt = Injected(
        SCENARIOS["checkpoint-stall"],
        start=T0 + 60,
        end=T0 + 100,
        fault_start=T0 + 60,
        fault_end=T0 + 84,
    )
    return [healthy, pfc, ckpt]


def test_right_cause_and_culprit_with_pages_is_ok() -> None:
    docs = [
        _doc("a", "pfc_storm", "switch:leaf1:Ethernet0:3", T0 + 21, T0 + 23.5, 190),
        _doc("b", "storage_latency", "storage:ckpt", T0 + 60.5, T0 + 62, 170),
    ]
    pages = [_page("a"), _page("a", "resolved"), _page("b")]
    verdicts, stray = judge(_injections(), docs, pages, alerting=True)
    assert [v.ok for v in verdicts] == [True, True, True]
    assert stray == []
    assert verdicts[1].latency == 3.5
    assert verdicts[1].open_delay == 2.5
    assert len(verdicts[1].pages) == 2
    doc = report(
        verdicts, stray, docs, pages, speed=10, tick=1.0, storage_backend="simulated", alerting=True
    )
    assert doc["ok"] is True
    assert doc["gpu_seconds_by_cause"] == {"pfc_storm": 190.0, "storage_latency": 170.0}
    assert doc["detection_latency_seconds"]["median"] == 2.75
    assert doc["onset_to_open_seconds"]["median_ticks"] == 2.0
    assert doc["scenarios"][1]["injected_gpu_seconds"] == 184.0
    assert doc["scenarios"][0]["expected"] is None


def test_wrong_culprit_wrong_cause_and_missed_fault_are_wrong() -> None:
    docs = [_doc("a", "pfc_storm", "nic:mlx5_0:1:3", T0 + 21, T0 + 23, 190)]
    verdicts, _ = judge(_injections(), docs, [_page("a")], alerting=True)
    assert not verdicts[1].ok
    assert "expected pfc_storm on switch:leaf1:Ethernet0:3" in verdicts[1].reason
    assert not verdicts[2].ok
    assert verdicts[2].reason == "not detected"
    docs = [_doc("a", "ecn_congestion", "switch:leaf1:Ethernet0:3", T0 + 21, T0 + 23, 190)]
    verdicts, _ = judge(_injections(), docs, [_page("a")], alerting=True)
    assert "got ecn_congestion" in verdicts[1].reason


def test_no_page_is_wrong_only_when_alerting_is_wired() -> None:
    docs = [_doc("a", "pfc_storm", "switch:leaf1:Ethernet0:3", T0 + 21, T0 + 23, 190)]
    verdicts, _ = judge(_injections()[:2], docs, [], alerting=True)
    assert not verdicts[1].ok
    assert verdicts[1].reason == "detected, but no page arrived"
    verdicts, _ = judge(_injections()[:2], docs, [_page("a", "resolved")], alerting=True)
    assert not verdicts[1].ok
    verdicts, _ = judge(_injections()[:2], docs, [], alerting=False)
    assert verdicts[1].ok


def test_incident_during_healthy_and_stray_incidents_fail_the_run() -> None:
    docs = [
        _doc("h", "unknown", "", T0 + 5, T0 + 15, 80),
        _doc("a", "pfc_storm", "switch:leaf1:Ethernet0:3", T0 + 21, T0 + 23, 190),
        _doc("late", "gpu_fault", "gpu:1", T0 + 500, T0 + 502, 2),
    ]
    verdicts, stray = judge(_injections()[:2], docs, [_page("a")], alerting=True)
    assert not verdicts[0].ok
    assert verdicts[0].reason == "1 unexpected incident(s)"
    assert verdicts[1].ok
    assert [d["key"] for d in stray] == ["late"]
    doc = report(
        verdicts, stray, docs, [], speed=10, tick=1.0, storage_backend="simulated", alerting=True
    )
    assert doc["ok"] is False
    assert doc["unexpected_incidents"] == ["late"]


def test_an_incident_counts_for_one_scenario_only() -> None:
    # Onset where the slack of two faults overlaps: the earlier scenario takes it.
    inj = _injections()
    inj[1].fault_end = T0 + 57
    docs = [_doc("a", "pfc_storm", "switch:leaf1:Ethernet0:3", T0 + 58, T0 + 61, 10)]
    verdicts, stray = judge(inj, docs, [_page("a")], alerting=True)
    assert [len(v.incidents) for v in verdicts] == [0, 1, 0]
    assert stray == []


def test_gpu_seconds_by_cause_sums_and_orders() -> None:
    docs = [
        _doc("a", "pfc_storm", "x", 0, 0, 10.0),
        _doc("b", "link_down", "y", 0, 0, 30.0),
        _doc("c", "pfc_storm", "x", 0, 0, 25.0),
    ]
    assert list(gpu_seconds_by_cause(docs).items()) == [("pfc_storm", 35.0), ("link_down", 30.0)]
