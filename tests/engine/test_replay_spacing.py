"""Live equals replay at the spacings real exporters scrape at (5, 15, 30 s), and
node_exporter's NFS (mountstats) and carrier (netclass) families in replay."""

from __future__ import annotations

import argparse
import io
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from fabricwatch.cli import replay as cli_replay
from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.engine.replay import Spacing, run_replay, sample_spacing
from fabricwatch.engine.replay_mapping import Mapper, map_series
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import Injection, NodeSpec, Scenario, run_live

Steps = list[tuple[float, list[tuple[str, list[Reading]]]]]


def scenario(path: str = "ckpt") -> Scenario:
    # Faults long enough to span several samples at 30 s.
    return Scenario(
        duration=1500,
        injections=[
            Injection("pfc_storm", 300, 150, variant=1),
            Injection("storage_latency", 700, 180),
            Injection("link_down", 1100, 150),
        ],
        seed=5,
        node=NodeSpec(path=path),
    )


def spaced(sc: Scenario, spacing: int) -> Steps:
    """The scenario as a daemon ticking every second sees exporters sampled every
    ``spacing`` seconds: batches only on multiples of it, ticks every second, up to
    the tick of the last sample (where a replay of the same samples stops)."""
    out: Steps = []
    for k, (t, batches) in enumerate(sc.steps()):
        out.append((t, batches if k % spacing == 0 else []))
    last = max(i for i, (_, b) in enumerate(out) if any(rs for _, rs in b))
    return out[: last + 1]


def readings(steps: Steps) -> Iterator[Reading]:
    for _, batches in steps:
        for _, rs in batches:
            yield from rs


def replay_text(text: str, mapper: Mapper | None = None) -> list[IncidentTransition]:
    m = mapper or Mapper()
    parse_openmetrics(io.StringIO(text), m, source="t.om")
    res = run_replay(m.finish(), node="n1")
    assert res.rejected == 0
    return res.transitions


def essence(trs: Iterable[IncidentTransition]) -> list[tuple[object, ...]]:
    return [
        (t.kind, t.at, t.incident.cause, t.incident.culprit.key, t.incident.onset, t.incident.gpus)
        for t in trs
    ]


@pytest.mark.parametrize("spacing", [5, 15, 30])
def test_live_equals_replay_at_every_spacing(spacing: int) -> None:
    sc = scenario()
    steps = spaced(sc, spacing)
    live = run_live(sc, node="n1", steps=steps)
    # The engine saw incidents at this spacing: the equality is not one of two empties.
    assert {t.incident.cause for t in live} & {"pfc_storm", "storage_latency", "link_down"}
    buf = io.StringIO()
    write_openmetrics(readings(steps), buf.write)
    replayed = replay_text(buf.getvalue())
    assert [(t.kind, t.at, to_json(t.incident)) for t in replayed] == [
        (t.kind, t.at, to_json(t.incident)) for t in live
    ]


# -- node_exporter mountstats: an NFS mount is a storage path ----------------------------

EXPORT = "nas1:/ckpt"
_NFS_LABELS = f'export="{EXPORT}",protocol="tcp",mountaddr="10.0.0.5"'


def nfs_lines(steps: Steps) -> str:
    """Write latency as node_exporter's mountstats counters: per WRITE sample, 64
    more WRITE requests and 64 x the latency more request (execute) time."""
    ops = busy = 0.0
    req, exe, other = [], [], []
    for r in readings(steps):
        if r.name != sig.ST_WRITE_LAT:
            continue
        ops += 64.0
        busy += 64.0 * r.value
        op = f'{_NFS_LABELS},operation="WRITE"'
        req.append(f"node_mountstats_nfs_operations_requests_total{{{op}}} {ops!r} {r.ts!r}\n")
        exe.append(
            f"node_mountstats_nfs_operations_request_time_seconds_total{{{op}}} {busy!r} {r.ts!r}\n"
        )
        read = f'{_NFS_LABELS},operation="READ"'
        other.append(f"node_mountstats_nfs_operations_requests_total{{{read}}} 7 {r.ts!r}\n")
    return "".join(req + exe + other)


def nfs_names(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
    if name == sig.ST_WRITE_BYTES:
        labels_ = {"export": labels[0], "protocol": "tcp", "mountaddr": "10.0.0.5"}
        return "node_mountstats_nfs_total_write_bytes_total", labels_, 1.0
    if name == sig.ST_WRITE_LAT:
        return None  # written as the two mountstats counters
    spec = sig.SIGNAL_SPECS[name]
    suffix = "_total" if spec.kind.value == "counter" else ""
    return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0


@pytest.mark.parametrize("spacing", [1, 15])
def test_nfs_mountstats_replay_like_the_live_nfs_path(spacing: int) -> None:
    sc = scenario(path=EXPORT)
    steps = spaced(sc, spacing)
    live = run_live(sc, node="n1", steps=steps)
    assert ("storage_latency", f"storage:{EXPORT}") in {
        (t.incident.cause, t.incident.culprit.key) for t in live
    }
    buf = io.StringIO()
    write_openmetrics(readings(steps), buf.write, rename=nfs_names)
    text = buf.getvalue().removesuffix("# EOF\n") + nfs_lines(steps) + "# EOF\n"
    m = Mapper()
    assert essence(replay_text(text, m)) == essence(live)
    assert not m.ignored
    assert m.dropped["nfs_not_write"] > 0


def test_nfs_latency_is_one_intervals_execute_time_over_its_writes() -> None:
    op = f'{_NFS_LABELS},operation="WRITE"'
    text = (
        f"node_mountstats_nfs_operations_requests_total{{{op}}} 100 1000\n"
        f"node_mountstats_nfs_operations_requests_total{{{op}}} 150 1015\n"
        f"node_mountstats_nfs_operations_request_time_seconds_total{{{op}}} 2 1000\n"
        f"node_mountstats_nfs_operations_request_time_seconds_total{{{op}}} 3 1015\n"
        f"node_mountstats_nfs_total_write_bytes_total{{{_NFS_LABELS}}} 4096 1015\n"
        f"node_mountstats_nfs_write_bytes_total{{{_NFS_LABELS}}} 4096 1015\n"
        "# EOF\n"
    )
    m = Mapper()
    parse_openmetrics(io.StringIO(text), m)
    out = m.finish()
    assert (1015.0, sig.ST_WRITE_LAT, (EXPORT,), 1.0 / 50.0) in out
    assert (1015.0, sig.ST_WRITE_BYTES, (EXPORT,), 4096.0) in out
    # write() syscall bytes are not what reaches the server: not mapped, and said so.
    assert m.ignored == {"node_mountstats_nfs_write_bytes_total": 1}
    no_export = {"operation": "WRITE"}
    assert map_series("node_mountstats_nfs_operations_requests_total", no_export) is None


# -- node_exporter netclass: carrier state and carrier-down events ---------------------------

NETDEV = "ens1f0np0"


def carrier_names(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
    if name == sig.NIC_LINK_UP:
        return "node_network_carrier", {"device": NETDEV}, 1.0
    if name == sig.NIC_LINK_DOWNED:
        return "node_network_carrier_down_changes_total", {"device": NETDEV}, 1.0
    spec = sig.SIGNAL_SPECS[name]
    suffix = "_total" if spec.kind.value == "counter" else ""
    return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0


@pytest.mark.parametrize("spacing", [1, 15])
def test_carrier_replays_as_the_rdma_ports_link_state(spacing: int) -> None:
    sc = scenario()
    steps = spaced(sc, spacing)
    live = run_live(sc, node="n1", steps=steps)
    assert "link_down" in {t.incident.cause for t in live}
    buf = io.StringIO()
    write_openmetrics(readings(steps), buf.write, rename=carrier_names)
    text = buf.getvalue().removesuffix("# EOF\n")
    t0 = sc.start_ts
    # Interfaces that are no RDMA port: dropped by name, or for not being in the map.
    text += "".join(
        f'node_network_carrier{{device="{d}"}} {k % 2} {t0 + k}\n'
        for d in ("veth1a2b", "eno1")
        for k in range(0, 300, spacing)
    )
    text += f'fabricwatch_nic_info{{device="mlx5_0",port="1",netdev="{NETDEV}"}} 1 {t0}\n# EOF\n'
    m = Mapper()
    assert essence(replay_text(text, m)) == essence(live)
    assert m.dropped["virtual_netdev"] > 0 and m.dropped["not_rdma_netdev"] > 0


def test_carrier_down_changes_are_discrete_link_events() -> None:
    # A flap between two 30 s scrapes: the gauge reads 1 both times, the counter moved.
    text = (
        'node_network_carrier{device="ens2"} 1 1000\n'
        'node_network_carrier{device="ens2"} 1 1030\n'
        'node_network_carrier_down_changes_total{device="ens2"} 3 1000\n'
        'node_network_carrier_down_changes_total{device="ens2"} 4 1030\n'
        'node_network_carrier_changes_total{device="ens2"} 8 1030\n'
        "# EOF\n"
    )
    m = Mapper()
    parse_openmetrics(io.StringIO(text), m)
    out = m.finish()
    assert (1030.0, sig.NIC_LINK_DOWNED, ("ens2", "1"), 4.0) in out
    assert (1030.0, sig.NIC_LINK_UP, ("ens2", "1"), 1.0) in out
    assert m.ignored == {"node_network_carrier_changes_total": 1}
    # A carrier series without its netdev label, or a value other than 1, is no link up.
    assert map_series("node_network_carrier", {"interface": "ens2"}) is None
    m = Mapper()
    parse_openmetrics(io.StringIO('node_network_carrier{device="ens2"} 3 1000\n# EOF\n'), m)
    assert m.finish() == [(1000.0, sig.NIC_LINK_UP, ("ens2", "1"), 0.0)]


def test_cli_says_the_spacing_and_what_it_could_not_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = Scenario(duration=300, seed=2, node=NodeSpec(path=EXPORT))
    steps = spaced(sc, 15)
    buf = io.StringIO()
    write_openmetrics(readings(steps), buf.write, rename=nfs_names)
    t0 = sc.start_ts
    unused = "".join(
        f"node_mountstats_nfs_write_bytes_total{{{_NFS_LABELS}}} {k} {t0 + 15 * k}\n"
        for k in range(3)
    )
    f = tmp_path / "t.om"
    f.write_text(buf.getvalue().removesuffix("# EOF\n") + nfs_lines(steps) + unused + "# EOF\n")
    p = argparse.ArgumentParser()
    cli_replay.configure_parser(p)
    assert cli_replay.run(p.parse_args([str(f), "--json", "--node", "n1"])) == 0
    err = capsys.readouterr().err.strip().splitlines()
    summary = json.loads(err[-1])
    assert summary["spacing_seconds"] == 15.0
    assert "shorter than two samples (30 s)" in summary["spacing_warning"]
    assert summary["unmapped"] == {"node_mountstats_nfs_write_bytes_total": 3}
    assert summary["dropped"]["nfs_not_write"] > 0
    human = "\n".join(err[:-1])
    assert "sample spacing: 15 s" in human and "node_mountstats_nfs_write_bytes_total 3" in human


def test_gpu_metrics_refreshed_slower_than_scraped_are_named_in_the_warning() -> None:
    # dcgm-exporter collecting every 45 s, scraped every 15 s: replay drops
    # the held repeats, so GPU work is seen every 45 s while the rest is
    # seen every 15 s. What the engine cannot see is set by the 45 s.
    samples = sorted(
        [(1000.0 + 45 * k, sig.GPU_SM, (str(g),), 0.7) for k in range(40) for g in range(8)]
        + [
            (1000.0 + 15 * k, sig.NIC_TX_BYTES, (f"mlx5_{p}", "1"), 1e9)
            for k in range(120)
            for p in range(8)
        ]
        + [
            (1000.0 + 15 * k, sig.NIC_RX_BYTES, (f"mlx5_{p}", "1"), 1e9)
            for k in range(120)
            for p in range(8)
        ]
    )
    sp = sample_spacing(samples)
    assert sp is not None and sp.median == 15.0 and sp.gpu_work == 45.0
    text = sp.warning(EngineSettings())
    assert "GPU work samples are 45 s apart" in text and "a scrape (60 s)" in text
    # Scraped faster than min_duration, or without SM activity (power is no
    # window average), one idle refresh is not enough by itself.
    assert "two of its refreshes (15 s)" in Spacing(5.0, 10, 7.5).warning(EngineSettings())
    no_sm = sample_spacing(
        [(t, sig.GPU_POWER if f == sig.GPU_SM else f, lab, v) for t, f, lab, v in samples]
    )
    assert no_sm is not None and not no_sm.sm_active
    assert "two of its refreshes (90 s)" in no_sm.warning(EngineSettings())
    # Without GPU series, refreshed with every scrape, or refreshed slower
    # but still seen within the minimum duration: the plain spacing rule.
    no_gpu = sample_spacing([s for s in samples if s[1] != sig.GPU_SM])
    assert no_gpu is not None and math.isnan(no_gpu.gpu_work)
    assert no_gpu.warning(EngineSettings()).startswith("samples are 15 s apart")
    assert Spacing(1.0, 10, 2.0).warning(EngineSettings()) == ""
    assert "two samples (30 s)" in Spacing(15.0, 10, 15.0).warning(EngineSettings())
