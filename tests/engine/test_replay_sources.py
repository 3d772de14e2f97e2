"""Replay of real exporter layouts: dcgm-exporter (default counters, MIG, blank sentinels,
4.x labels), node_exporter (every driver's ethtool names, infiniband, block devices),
snmp_exporter speeds, NIC identity, and the summary of what was not used."""

from __future__ import annotations

import argparse
import http.server
import io
import itertools
import json
import re
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from fabricwatch.cli import replay as cli_replay
from fabricwatch.collectors.storage._settings import StorageSettings
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay import run_replay, sample_spacing
from fabricwatch.engine.replay_mapping import (
    BLOCK_DEVICE_EXCLUDE,
    Mapper,
    ReplayError,
    Sample,
    dcgm_blank,
    map_series,
    parse_nic_map,
)
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.engine.replay_prometheus import fetch_prometheus
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.nicnames import classify, classify_exported
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live


def parse(text: str, mapper: Mapper | None = None) -> Mapper:
    m = mapper or Mapper()
    parse_openmetrics(io.StringIO(text), m, source="t.om")
    return m


def series(out: Iterable[Sample], family: str) -> dict[tuple[str, ...], list[tuple[float, float]]]:
    by: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    for ts, fam, labels, v in out:
        if fam == family:
            by.setdefault(labels, []).append((ts, v))
    return by


def no_duplicate_timestamps(out: Iterable[Sample]) -> None:
    seen: set[tuple[float, str, tuple[str, ...]]] = set()
    for ts, fam, labels, _ in out:
        key = (ts, fam, labels)
        assert key not in seen, key
        seen.add(key)


# -- dcgm-exporter -----------------------------------------------------------------

# dcgm-exporter 4.x label set (hostname lower-case since #655, pci_bus_id).
L4 = 'UUID="GPU-{u}",device="nvidia{g}",gpu="{g}",hostname="n1",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:{b}:00.0"'  # noqa: E501


def dcgm_default_counters(sc: Scenario) -> str:
    """A scenario as dcgm-exporter's default CSV exports it: GR_ENGINE_ACTIVE, GPU_UTIL,
    POWER_USAGE, FB_USED, no SM_ACTIVE (commented out upstream), with HELP/TYPE lines."""

    def rename(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
        g = labels[0] if labels else ""
        lab = dict(re.findall(r'(\w+)="([^"]*)"', L4.format(u=f"{g:0>8}", g=g, b=f"{g:0>2}")))
        if name == sig.GPU_SM:
            return "DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 1.0
        if name == sig.GPU_UTIL:
            return "DCGM_FI_DEV_GPU_UTIL", lab, 100.0
        if name == sig.GPU_MEM:
            return "DCGM_FI_DEV_FB_USED", lab, 1.0 / 1048576
        if name in (sig.GPU_POWER, sig.GPU_POWER_LIMIT):
            return None  # the GR fallback is what this layout is about
        spec = sig.SIGNAL_SPECS[name]
        suffix = "_total" if spec.kind.value == "counter" else ""
        return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0

    buf = io.StringIO()
    buf.write("# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n")
    write_openmetrics(flatten(sc), buf.write, rename=rename)
    return buf.getvalue()


def storm() -> Scenario:
    return Scenario(duration=420, injections=[Injection("pfc_storm", 150, 60, variant=1)], seed=5)


def test_default_counters_layout_uses_gr_engine_active() -> None:
    sc = storm()
    live = run_live(sc, node="n1")
    assert [t.incident.cause for t in live if t.kind == "opened"] == ["pfc_storm"]
    m = parse(dcgm_default_counters(sc))
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in m.ignored
    out = m.finish()
    # GR fills the utilization slot; DEV_GPU_UTIL of the same GPUs is not used.
    assert m.dropped["gpu_util_has_gr"] > 0
    util = series(out, sig.GPU_UTIL)
    assert util and max(v for pts in util.values() for _, v in pts) <= 1.0
    res = run_replay(out, node="n1")
    opened = [t.incident for t in res.transitions if t.kind == "opened"]
    # NVML's utilization stays high through a hung collective: only GR shows the stall.
    assert [(i.cause, i.culprit.key) for i in opened] == [
        (i.incident.cause, i.incident.culprit.key) for i in live if i.kind == "opened"
    ]


def test_gpu_util_alone_still_maps() -> None:
    out = parse('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 87 100\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 0 101\n')
    assert series(out.finish(), sig.GPU_UTIL) == {("0",): [(100.0, 0.87), (101.0, 0.0)]}


def mig_text() -> str:
    """An A100 in MIG mode: 4 instances (GPU_I_ID 1,2,3,4) of GPU 0, no GPU_UTIL, GPU-wide
    fields copied per instance, instance 3 starting late and carrying its value forward."""
    lines = []
    for gi in (1, 2, 3, 4):
        lab = f'gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gi}",hostname="n1"'
        start = 102 if gi == 3 else 100
        for t in range(start, 130):
            busy = gi == 1 or t < 115
            lines.append(f"DCGM_FI_DEV_FB_USED{{{lab}}} {1000 * gi} {t}")
            lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lab}}} {0.9 if busy else 0.0} {t}")
            lines.append(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{lab}}} 1000 {t}")
            lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} 250 {t}")
    # Each series is in time order; series one after another, as promtool dumps them.
    lines.sort(key=lambda ln: (ln.split(" ")[0], int(ln.split(" ")[-1])))
    return "\n".join(lines) + "\n# EOF\n"


def test_mig_instances_aggregate_per_gpu() -> None:
    out = parse(mig_text()).finish()
    no_duplicate_timestamps(out)
    mem = series(out, sig.GPU_MEM)
    assert list(mem) == [("0",)]
    assert mem[("0",)][0] == (100.0, (1000 + 2000 + 4000) * 1048576.0)  # instance 3 not yet
    assert {v for _, v in mem[("0",)][3:]} == {10000 * 1048576.0}  # 1+2+3+4 GiB-ish, summed
    gr = series(out, sig.GPU_UTIL)[("0",)]
    assert [v for ts, v in gr if ts >= 115] == [0.9] * 15  # instance 1 still works
    # A constant 1000 MB/s integrates to a straight line, not a saw-tooth.
    nv = series(out, sig.NVLINK_TX)[("0", "total")]
    assert len(nv) == 30
    steps = {b[1] - a[1] for a, b in itertools.pairwise(nv)}
    assert steps == {1e9}
    power = series(out, sig.GPU_POWER)[("0",)]
    assert [v for _, v in power] == [250.0] * 30


def test_mig_without_aggregation_would_duplicate() -> None:
    """The failure this guards against: the same text with GPU_I_ID stripped."""
    text = re.sub(r',GPU_I_ID="\d"', "", mig_text())
    with pytest.raises(Exception, match="back in time"):
        parse(text)


BLANKS = {
    "DCGM_FI_DEV_GPU_UTIL": "9223372036854775794",  # DCGM_FT_INT64_NOT_SUPPORTED
    "DCGM_FI_DEV_POWER_USAGE": "140737488355328",  # DCGM_FT_FP64_BLANK
    "DCGM_FI_DEV_FB_USED": "2147483632",  # DCGM_FT_INT32_BLANK
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "1.40737488355331e+14",  # DCGM_FT_FP64_NOT_PERMISSIONED
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "9223372036854775792",  # INT64_BLANK
    "DCGM_FI_DEV_XID_ERRORS": "2147483633",  # INT32_NOT_FOUND
}


@pytest.mark.parametrize("first", [True, False])
def test_dcgm_blank_sentinels_are_missing_samples(first: bool) -> None:
    """Blank values on a series' first line (strict parser) and on later lines (fast path)."""
    lines = []
    for name, blank in BLANKS.items():
        good = "0.5" if "GR" in name else "3"
        values = [blank, good, good] if first else [good, blank, good]
        lines += [f'{name}{{gpu="1",Hostname="n1"}} {v} {100 + k}' for k, v in enumerate(values)]
    m = parse("\n".join(lines) + "\n")
    out = m.finish()
    assert m.dropped["dcgm_blank"] == len(BLANKS)
    for _, fam, _, v in out:
        assert v < 1e9 or fam == sig.GPU_MEM, (fam, v)
    assert max(v for _, f, _, v in out if f == sig.GPU_POWER) == 3.0
    assert all(v <= 1.0 for _, f, _, v in out if f == sig.GPU_UTIL)
    assert not series(out, sig.GPU_XID) or max(v for _, f, _, v in out if f == sig.GPU_XID) <= 1


def test_dcgm_blank_values() -> None:
    blanks = (2147483632, 2147483635, 9223372036854775792, 9223372036854775795, 2**47, 2**47 + 3)
    for b in blanks:
        assert dcgm_blank(float(b)), b
        assert dcgm_blank(float(b) * 0.01 / 0.01), b
    for v in (0.0, 1.0, 700.0, 2147483631.0, 2147483637.0, 1.4e14, 9.2e18 * 0.5, 81920.0):
        assert not dcgm_blank(v), v


def test_dcgm_4x_labels_and_xid_err_code() -> None:
    text = "\n".join(
        [
            'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",pci_bus_id="00000000:9B:00.0",'
            'hostname="n1",err_code="0",err_msg=""} 0 100',
            'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",pci_bus_id="00000000:9B:00.0",'
            'hostname="n1",err_code="0",err_msg=""} 0 101',
            'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",pci_bus_id="00000000:9B:00.0",'
            'hostname="n1",err_code="79",err_msg="GPU has fallen off the bus"} 79 102',
            'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",pci_bus_id="00000000:9B:00.0",'
            'hostname="n1",err_code="79",err_msg="GPU has fallen off the bus"} 79 103',
            'DCGM_FI_DEV_POWER_USAGE{gpu="3",UUID="GPU-x",pci_bus_id="00000000:9B:00.0",'
            'hostname="n1",Hostname="n1"} 512.5 103',
        ]
    )
    m = parse(text + "\n")
    out = m.finish()
    assert not m.ignored
    assert series(out, sig.GPU_XID) == {("3", "79"): [(101.0, 0.0), (102.0, 1.0), (103.0, 1.0)]}
    assert series(out, sig.GPU_POWER) == {("3",): [(103.0, 512.5)]}


# -- node_exporter -----------------------------------------------------------------


def node_exporter_name(driver_name: str) -> str:
    """node_exporter's ethtool collector: sanitize, lower-case, rx/tx spelt out."""
    n = re.sub(r"[^a-zA-Z0-9_]", "_", driver_name).lower().lstrip("_")
    n = re.sub(r"(^|_)rx(_|$)", r"\1received\2", n)
    n = re.sub(r"(^|_)tx(_|$)", r"\1transmitted\2", n)
    return "node_ethtool_" + n


DRIVER_NAMES = [
    "rx_prio3_pause",
    "tx_prio5_pause",
    "rx_prio3_pause_duration",
    "rx_pfc_ena_frames_pri3",
    "tx_pfc_ena_frames_pri0",
    "pfc_pri3_rx_duration_us",
    "pfc_pri7_tx_duration_us",
    "rx_priority_3_xoff.nic",
    "tx_priority_2_xoff.nic",
    "port-rx-xoff_prio-3_events",
    "port.rx_priority_3_xoff_rx",
    "port.tx_priority_3_xoff_tx",
    "port.rx_priority_4_xoff",
    "rx_pause_ctrl_phy",
    "rx_global_pause",
    "link_xoff_rx.nic",
    "port_rx_pause",
    "rx_xoff_pause_rcvd",
    "tx_xoff_sent",
    "rx_pause_frames",
    "rx_priority_3_xon.nic",
    "rx_packets",
]


@pytest.mark.parametrize("name", DRIVER_NAMES)
def test_node_exporter_ethtool_names_mean_what_live_names_mean(name: str) -> None:
    exported = node_exporter_name(name)
    hit = classify_exported(exported.removeprefix("node_ethtool_"))
    assert (hit[0] if hit else None) == classify(name), exported
    key = classify(name)
    t = map_series(exported, {"device": "ens1f0np0", "instance": "n1:9100"})
    if key is not None and key.kind in ("pause_frames", "pause_duration_us"):
        assert t is not None
        assert t.family == (sig.NIC_PFC_FRAMES if key.kind == "pause_frames" else sig.NIC_PFC_RATIO)
        assert t.labels == ("ens1f0np0", "1", key.priority, key.qualifier)
    else:
        assert t is None  # link-level pause, XON, bystanders: no engine family


def test_infiniband_transmit_wait_and_rate() -> None:
    rate = 50e9  # 400 Gb/s in bytes/s
    quarter = 0.25 * rate / 8  # ticks of 8 bytes in a quarter second
    text = "\n".join(
        [
            f'node_infiniband_rate_bytes_per_second{{device="mlx5_0",port="1"}} {rate} {t}'
            for t in (100, 101, 102)
        ]
        + [
            f'node_infiniband_port_transmit_wait_total{{device="mlx5_0",port="1"}} {v} {t}'
            for t, v in ((100, 0), (101, quarter), (102, 2 * quarter))
        ]
        + [
            f'node_infiniband_port_transmit_wait_total{{device="mlx4_0",port="1"}} 4294967295 {t}'
            for t in (100, 101)
        ]
        + [
            f'node_infiniband_port_transmit_wait_total{{device="mlx5_3",port="1"}} {t} {t}'
            for t in (100, 101)
        ]
    )
    m = parse(text + "\n")
    out = m.finish()
    wait = series(out, sig.NIC_XMIT_WAIT)
    assert list(wait) == [("mlx5_0", "1")]
    assert [v for _, v in wait[("mlx5_0", "1")]] == pytest.approx([0.25, 0.25])
    assert m.dropped["saturated"] == 2  # mlx4's pinned counter: not a wait of 0
    assert m.dropped["no_link_rate"] == 1  # mlx5_3 has no rate: no ratio guessed
    assert series(out, sig.NIC_RATE) == {
        ("mlx5_0", "1"): [(100.0, rate), (101.0, rate), (102.0, rate)]
    }


def test_block_devices_filtered_like_the_storage_collector() -> None:
    names = [
        "nvme0n1",
        "nvme0n1p1",
        "sda",
        "sda2",
        "vdb",
        "vdb1",
        "dm-0",
        "sr0",
        "loop3",
        "zram0",
        "ram1",
        "fd0",
        "md0",
        "md0p1",
    ]
    names += ["mmcblk0", "mmcblk0p2", "xvda", "xvda1"]
    text = "".join(
        f'node_disk_written_bytes_total{{device="{d}"}} {k} {100 + k}\n'
        for d in names
        for k in range(2)
    )
    m = parse(text)
    paths = {labels[0] for _, fam, labels, _ in m.finish() if fam == sig.ST_WRITE_BYTES}
    assert paths == {"nvme0n1", "sda", "vdb", "md0", "mmcblk0", "xvda"}
    assert m.dropped["block_device"] == 2 * (len(names) - len(paths))
    # Everything the live collector's default device_exclude drops, replay drops too.
    live = re.compile(StorageSettings().device_exclude)
    assert all(BLOCK_DEVICE_EXCLUDE.match(d) for d in names if live.search(d))


def test_switch_speed_from_if_high_speed_else_if_speed() -> None:
    text = "\n".join(
        [
            'ifHighSpeed{instance="leaf1",ifName="Ethernet0"} 25000 100',
            'ifSpeed{instance="leaf1",ifName="Ethernet0"} 4294967295 100',
            'ifSpeed{instance="leaf1",ifName="Management1"} 1000000000 100',
            'ifSpeed{instance="leaf1",ifName="Ethernet1/1"} 4294967295 100',
        ]
    )
    out = parse(text + "\n").finish()
    assert series(out, sig.SW_SPEED) == {
        ("leaf1", "Ethernet0"): [(100.0, 25e9 / 8)],
        ("leaf1", "Management1"): [(100.0, 1e9 / 8)],
    }


# -- NIC identity: the same fault, the same culprit key live and in replay -----------


def nic_storm_as_node_exporter(sc: Scenario, extra: str = "") -> str:
    """The NIC's PFC counters as node_exporter's ethtool collector names them (by netdev),
    everything else in fabricwatch's names (RDMA device, as node_infiniband has it)."""
    readings = list(flatten(sc))
    dur: dict[tuple[str, ...], tuple[float, float]] = {}
    extra_lines: list[str] = []
    for r in readings:
        if r.name == sig.NIC_PFC_RATIO:
            ts = r.ts or 0.0
            total, last = dur.get(r.labels, (0.0, ts))
            total += r.value * (ts - last) * 1e6
            dur[r.labels] = (total, ts)
            d = "received" if r.labels[3] == "rx" else "transmitted"
            extra_lines.append(
                f'node_ethtool_{d}_prio{r.labels[2]}_pause_duration{{device="ens1f0np0"}} '
                f"{round(total)} {ts!r}"
            )

    def rename(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
        if name == sig.NIC_PFC_RATIO:
            return None
        if name == sig.NIC_PFC_FRAMES:
            d = "received" if labels[3] == "rx" else "transmitted"
            return f"node_ethtool_{d}_prio{labels[2]}_pause", {"device": "ens1f0np0"}, 1.0
        spec = sig.SIGNAL_SPECS[name]
        suffix = "_total" if spec.kind.value == "counter" else ""
        return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0

    buf = io.StringIO()
    write_openmetrics(readings, buf.write, rename=rename)
    body = buf.getvalue().removesuffix("# EOF\n")
    return body + "\n".join(sorted(extra_lines, key=lambda ln: ln.split(" ")[0])) + "\n" + extra


def _culprits(samples: list[Sample]) -> list[tuple[str, str]]:
    res = run_replay(samples, node="n1")
    return [
        (t.incident.cause, t.incident.culprit.key) for t in res.transitions if t.kind == "opened"
    ]


def test_same_fault_same_culprit_key_live_and_replay() -> None:
    sc = storm()
    live = [
        (t.incident.cause, t.incident.culprit.key)
        for t in run_live(sc, node="n1")
        if t.kind == "opened"
    ]
    assert live == [("pfc_storm", "nic:mlx5_0:1:3")]
    text = nic_storm_as_node_exporter(sc)
    # Without identity the netdev is the culprit: not the key live reports.
    assert _culprits(parse(text).finish()) == [("pfc_storm", "nic:ens1f0np0:1:3")]
    # --nic-map, or fabricwatch_nic_info in the same data: the live key.
    mapped = parse(text, Mapper(parse_nic_map(["ens1f0np0=mlx5_0"]))).finish()
    assert _culprits(mapped) == live
    info = (
        'fabricwatch_nic_info{device="mlx5_0",port="1",netdev="ens1f0np0",pci_address='
        '"0000:3b:00.0",numa_node="0",link_layer="Ethernet"} 1 1700000000\n'
    )
    assert _culprits(parse(nic_storm_as_node_exporter(sc, info)).finish()) == live


def test_bond_members_sum_into_the_rdma_port() -> None:
    text = "".join(
        f'node_ethtool_received_prio3_pause{{device="{d}"}} {k * n} {100 + k}\n'
        for d, n in (("ens1f0np0", 10), ("ens1f1np1", 5))
        for k in range(3)
    )
    m = Mapper(parse_nic_map(["ens1f0np0=mlx5_bond_0", "ens1f1np1=mlx5_bond_0:1"]))
    out = parse(text, m).finish()
    assert series(out, sig.NIC_PFC_FRAMES) == {
        ("mlx5_bond_0", "1", "3", "rx"): [(100.0, 0.0), (101.0, 15.0), (102.0, 30.0)]
    }


def test_nic_map_syntax() -> None:
    assert parse_nic_map(["a=mlx5_0", "b=mlx5_1:2"]) == {"a": ("mlx5_0", "1"), "b": ("mlx5_1", "2")}
    for bad in ("a", "=mlx5_0", "a=", "a=mlx5_0:x"):
        with pytest.raises(ReplayError, match="NETDEV=RDMA_DEVICE"):
            parse_nic_map([bad])


# -- what was not used, and the spacing seen ---------------------------------------


def test_spacing_and_its_warning() -> None:
    s = [(100.0 + 15 * k, sig.GPU_POWER, ("0",), 300.0) for k in range(10)]
    sp = sample_spacing(s)
    assert sp is not None and sp.median == 15.0
    # The engine scales to the spacing; what it still cannot see is said.
    assert "shorter than two samples (30 s)" in sp.warning(EngineSettings())
    assert sp.warning(EngineSettings(min_duration=30.0)) == ""
    coarse = sample_spacing([(100.0 + 90 * k, sig.GPU_POWER, ("0",), 300.0) for k in range(10)])
    assert coarse is not None and "up to 60 s" in coarse.warning(EngineSettings())
    fine = sample_spacing([(100.0 + k, sig.GPU_POWER, ("0",), 300.0) for k in range(10)])
    assert fine is not None and fine.median == 1.0 and fine.warning(EngineSettings()) == ""
    assert sample_spacing([]) is None


def test_cli_lists_every_unused_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = storm()
    buf = io.StringIO()
    scenario = list(flatten(sc))
    t0 = min(r.ts or 0.0 for r in scenario)
    readings = [
        *scenario,
        *(Reading(sig.NIC_RX_BYTES, ("mlx5_9", "1"), float(k), ts=t0 + k) for k in range(5)),
    ]
    write_openmetrics(readings, buf.write)
    text = buf.getvalue().removesuffix("# EOF\n")
    text += "".join(f'node_cpu_seconds_total{{cpu="0"}} {k} {t0 + 15 * k}\n' for k in range(4))
    text += f'DCGM_FI_DEV_GPU_UTIL{{gpu="0"}} 9223372036854775794 {t0}\n'
    f = tmp_path / "t.om"
    f.write_text(text)
    args = argparse_ns([str(f), "--json", "--node", "n1"])
    assert cli_replay.run(args) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)  # the incident array, unchanged
    summary = json.loads(cap.err.strip().splitlines()[-1])
    assert summary["schema"] == "fabricwatch.replay-summary/v1"
    assert summary["unmapped"] == {"node_cpu_seconds_total": 4}
    assert summary["mapped_not_read"][sig.NIC_RX_BYTES] > 0
    assert summary["dropped"] == {"dcgm_blank": 1}
    assert summary["spacing_seconds"] == 1.0 and summary["spacing_warning"] == ""
    human = "\n".join(cap.err.strip().splitlines()[:-1])
    assert "node_cpu_seconds_total 4" in human and "dcgm_blank 1" in human
    assert "sample spacing: 1 s" in human


def argparse_ns(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli_replay.configure_parser(p)
    return p.parse_args(argv)


class _Matrix(http.server.BaseHTTPRequestHandler):
    """A Prometheus range-vector answer with a blank sentinel and two MIG instances."""

    def do_GET(self) -> None:
        mig = {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "GPU_I_PROFILE": "3g.40gb"}
        result = [
            {
                "metric": {"__name__": "DCGM_FI_DEV_POWER_USAGE", "gpu": "0", "hostname": "n1"},
                "values": [[100, "300"], [101, "140737488355328"], [102, "310"]],
            },
            {"metric": {**mig, "GPU_I_ID": "1"}, "values": [[100, "100"], [101, "100"]]},
            {"metric": {**mig, "GPU_I_ID": "2"}, "values": [[100, "50"], [101, "60"]]},
        ]
        body = json.dumps(
            {"status": "success", "data": {"resultType": "matrix", "result": result}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def test_prometheus_source_drops_blanks_and_aggregates_mig() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Matrix)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        m = Mapper()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        fetch_prometheus(url, 99.0, 102.0, ["node=n1"], m, chunk=3600.0, timeout=5.0)
    finally:
        server.shutdown()
        server.server_close()
        th.join(timeout=5)
    out = m.finish()
    assert m.dropped == {"dcgm_blank": 1}
    assert series(out, sig.GPU_POWER) == {("0",): [(100.0, 300.0), (102.0, 310.0)]}
    mib = 1048576.0
    assert series(out, sig.GPU_MEM) == {("0",): [(100.0, 150 * mib), (101.0, 160 * mib)]}
