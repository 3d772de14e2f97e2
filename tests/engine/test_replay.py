"""Replay: OpenMetrics parsing, name mapping, live == replay, Prometheus API."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Mapper, ReplayError, map_series
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.engine.replay_prometheus import fetch_prometheus, selector
from fabricwatch.errors import ParseError
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live


def suite() -> Scenario:
    return Scenario(
        duration=900,
        injections=[
            Injection("pfc_storm", 150, 50, variant=1),
            Injection("eval_dip", 300, 3),
            Injection("counter_reset", 320, 1),
            Injection("gpu_fault", 400, 60, target=5),
            Injection("collector_gap", 520, 4, target=1),
            Injection("storage_latency", 600, 60),
            Injection("ecn_congestion", 780, 60),
        ],
        seed=21,
    )


def essence(trs: list[IncidentTransition]) -> list[tuple[Any, ...]]:
    return [
        (
            t.kind,
            t.at,
            t.incident.cause,
            t.incident.culprit.key,
            t.incident.onset,
            t.incident.gpus,
            t.incident.state,
        )
        for t in trs
    ]


def parse_text(text: str, source: str = "x.om") -> Mapper:
    m = Mapper()
    parse_openmetrics(io.StringIO(text), m, source=source)
    return m


def test_live_and_replay_of_own_names_are_identical() -> None:
    sc = suite()
    live = run_live(sc, node="n1")
    assert {t.incident.cause for t in live} == {
        "pfc_storm",
        "gpu_fault",
        "storage_latency",
        "ecn_congestion",
    }
    buf = io.StringIO()
    write_openmetrics(flatten(sc), buf.write)
    res = run_replay(parse_text(buf.getvalue()).finish(), node="n1")
    assert res.rejected == 0
    assert [(t.kind, t.at, to_json(t.incident)) for t in res.transitions] == [
        (t.kind, t.at, to_json(t.incident)) for t in live
    ]


def exporter_names(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
    """Write part of the data the way dcgm-exporter / node_exporter name it."""
    if name == sig.GPU_UTIL:
        return "DCGM_FI_DEV_GPU_UTIL", {"gpu": labels[0], "Hostname": "n1"}, 100.0
    if name == sig.GPU_POWER:
        return "DCGM_FI_DEV_POWER_USAGE", {"gpu": labels[0], "modelName": "H100"}, 1.0
    if name == sig.GPU_SM:
        return "DCGM_FI_PROF_SM_ACTIVE", {"gpu": labels[0]}, 1.0
    if name == sig.GPU_MEM:
        return "DCGM_FI_DEV_FB_USED", {"gpu": labels[0]}, 1.0 / 1048576
    if name == sig.NIC_TX_BYTES:
        return (
            "node_infiniband_port_data_transmitted_bytes_total",
            {"device": labels[0], "port": labels[1]},
            1.0,
        )
    if name == sig.NIC_ECN:
        return (
            "node_infiniband_np_ecn_marked_roce_packets_received_total",
            {"device": labels[0], "port": labels[1]},
            1.0,
        )
    if name == sig.NIC_CNP_HANDLED:
        return (
            "node_infiniband_rp_cnp_packets_handled_total",
            {"device": labels[0], "port": labels[1]},
            1.0,
        )
    if name == sig.NIC_LINK_UP:
        return "node_infiniband_state_id", {"device": labels[0], "port": labels[1]}, 4.0
    if name == sig.NIC_PFC_FRAMES:
        d = "received" if labels[3] == "rx" else "transmitted"
        return f"node_ethtool_{d}_prio{labels[2]}_pause", {"device": labels[0]}, 1.0
    if name == sig.SW_PFC_FRAMES:
        return (
            "cpfcIfPriorityIndications" if labels[3] == "rx" else "cpfcIfPriorityRequests",
            {
                "instance": labels[0],
                "ifName": labels[1],
                "ifIndex": "12",
                "cpfcIfPriorityValue": labels[2],
            },
            1.0,
        )
    if name == sig.SW_PORT_UP:
        return "ifOperStatus", {"instance": labels[0], "ifName": labels[1]}, 1.0
    spec = sig.SIGNAL_SPECS[name]
    suffix = "_total" if spec.kind.value == "counter" else ""
    return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0


def test_exporter_names_give_the_same_incidents() -> None:
    sc = suite()
    live = run_live(sc, node="n1")
    buf = io.StringIO()
    write_openmetrics(flatten(sc), buf.write, rename=exporter_names)
    text = buf.getvalue()
    assert "DCGM_FI_DEV_GPU_UTIL" in text and "node_ethtool_received_prio3_pause" in text
    mapper = parse_text(text)
    assert not mapper.ignored
    res = run_replay(mapper.finish(), node="n1")
    assert essence(res.transitions) == essence(live)


def test_mapping_table_details() -> None:
    t = map_series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "2", "UUID": "x"})
    assert t is not None and t.family == sig.GPU_UTIL and t.labels == ("2",) and t.scale == 0.01
    t = map_series(
        "fabricwatch_nic_link_downed_total", {"device": "mlx5_1", "port": "1", "job": "fw"}
    )
    assert t is not None and t.family == sig.NIC_LINK_DOWNED
    assert map_series("fabricwatch_nic_link_downed_total", {"device": "mlx5_1"}) is None
    assert map_series("node_cpu_seconds_total", {"cpu": "0"}) is None
    t = map_series(
        "cpfcIfPriorityWaitRx", {"ifIndex": "7", "cpfcIfPriorityWaitCoS": "3", "instance": "leaf2"}
    )
    assert t is not None and t.family == sig.SW_PFC_RATIO and t.labels == ("leaf2", "7", "3", "rx")


def test_stateful_conversions() -> None:
    text = "\n".join(
        [
            # pause duration in microseconds -> fraction of time paused
            'node_ethtool_received_prio3_pause_duration{device="eth2"} 0 100',
            'node_ethtool_received_prio3_pause_duration{device="eth2"} 900000 101',
            # DCGM last-XID gauge: a change to 79 is one event
            'DCGM_FI_DEV_XID_ERRORS{gpu="1"} 0 100',
            'DCGM_FI_DEV_XID_ERRORS{gpu="1"} 79 101',
            'DCGM_FI_DEV_XID_ERRORS{gpu="1"} 79 102',
            # NVLink MB/s rate integrated into bytes
            'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu="1"} 10 100',
            'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu="1"} 10 102',
            # disk latency from two counters
            'node_disk_write_time_seconds_total{device="nvme0n1"} 1 100',
            'node_disk_write_time_seconds_total{device="nvme0n1"} 3 101',
            'node_disk_writes_completed_total{device="nvme0n1"} 10 100',
            'node_disk_writes_completed_total{device="nvme0n1"} 110 101',
            "# EOF",
        ]
    )
    out = parse_text(text).finish()
    by = {(name, labels): (ts, v) for ts, name, labels, v in out}
    assert by[(sig.NIC_PFC_RATIO, ("eth2", "1", "3", "rx"))] == (101.0, 0.9)
    xid = [(ts, v) for ts, n, labels, v in out if n == sig.GPU_XID]
    # The count is held on every later sample of the gauge (no new event).
    assert xid == [(100.0, 0.0), (101.0, 1.0), (102.0, 1.0)]
    assert by[(sig.NVLINK_TX, ("1", "total"))] == (102.0, 20e6)
    assert by[(sig.ST_WRITE_LAT, ("nvme0n1",))][1] == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('m{a="1"} 1 100\nm{a="1" 2 101\n', 2, "not a sample line"),
        ('m{a="1"} 1 100\nm{a=1} 2 101\n', 2, "bad label set"),
        ('m{a="1",a="2"} 1 100\n', 1, "duplicate label"),
        ("# TYPE m gauge\nm 1\n", 2, "no timestamp"),
        ("m one 100\n", 1, "bad number"),
        ("m 1 yesterday\n", 1, "bad number"),
        ("m 1 101\nm 1 100\n", 2, "back in time"),
        ("m 1 100\n# EOF\nm 1 101\n", 3, "after '# EOF'"),
        ("# TYPE\n", 1, "malformed TYPE"),
        ('m{a="1"} 1 100\nfabricwatch_gpu_power_watts{gpu="0"', 2, "not a sample line"),
        ("\x00\x01\x02 garbage\n", 1, "not a sample line"),
    ],
)
def test_garbage_gets_a_line_number(text: str, line: int, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        parse_text(text, source="bad.om")
    assert info.value.line == line
    assert str(info.value).startswith(f"bad.om:{line}: ")


def test_empty_input_and_label_escapes() -> None:
    with pytest.raises(ParseError, match="empty input"):
        parse_text("")
    m = parse_text(
        'fabricwatch_storage_write_latency_seconds{path="a\\"b\\\\c"} 0.5 100 # {x="y"} 1\n'
    )
    assert m.finish() == [(100.0, sig.ST_WRITE_LAT, ('a"b\\c',), 0.5)]


def test_selector_and_bad_matcher() -> None:
    assert selector(["node=n1", 'job=~"dcgm.*"']).endswith(',node="n1",job=~"dcgm.*"}')
    with pytest.raises(ReplayError, match="--match expects"):
        selector(["node"])


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    calls = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.calls += 1
        if cls.mode == "stall":
            threading.Event().wait(1.5)
        if cls.mode == "500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        body: bytes
        if cls.mode == "garbage":
            body = b"<html>not json"
        elif cls.mode == "error":
            body = json.dumps({"status": "error", "error": "parse error at char 3"}).encode()
        else:
            body = json.dumps(
                {
                    "status": "success",
                    "data": {
                        "resultType": "matrix",
                        "result": [
                            {
                                "metric": {"__name__": "DCGM_FI_DEV_POWER_USAGE", "gpu": "0"},
                                "values": [[100.5, "300"], [101.5, "310"]],
                            }
                        ],
                    },
                }
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def fake_prometheus() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"mode": "ok", "calls": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        th.join(timeout=5)


def test_prometheus_client_errors_and_recovery(fake_prometheus: tuple[str, type[_Handler]]) -> None:
    url, handler = fake_prometheus
    for mode, message in (
        ("garbage", "did not answer JSON"),
        ("error", "parse error at char 3"),
        ("500", "HTTP 500"),
        ("stall", "cannot query Prometheus"),
    ):
        handler.mode = mode
        with pytest.raises(ReplayError, match=message):
            fetch_prometheus(url, 0, 10, [], Mapper(), timeout=0.5)
    handler.mode = "ok"  # the server recovered: so does the client
    m = Mapper()
    fetch_prometheus(url, 0, 7200, ["node=n1"], m, chunk=3600)
    assert handler.calls >= 6
    assert sorted({s[3] for s in m.finish()}) == [300.0, 310.0]
    with pytest.raises(ReplayError, match="cannot query"):
        fetch_prometheus("http://127.0.0.1:1", 0, 10, [], Mapper(), timeout=2)
    with pytest.raises(ReplayError, match="must be after"):
        fetch_prometheus(url, 10, 0, [], Mapper())
