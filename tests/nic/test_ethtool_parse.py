"""``ethtool -S`` text and name classification: real mlx5 capture, other drivers, garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.collectors.nic._ethtool import (
    DROPS,
    LINK_DOWN,
    LINK_PAUSE_DURATION_US,
    LINK_PAUSE_FRAMES,
    PAUSE_DURATION_US,
    PAUSE_FRAMES,
    PRIORITY_DISCARDS,
    PRIORITY_MARKED,
    STORM,
    Classifier,
    DirEthtoolSource,
    NoSuchNetdevError,
    StatKey,
    classify,
    parse_ethtool_text,
)
from fabricwatch.errors import ParseError


@pytest.fixture
def mlx5_text(shared_data: Path) -> str:
    return (shared_data / "host" / "ethq_mlx5_core_ethtool-S.txt").read_text()


def test_real_mlx5_capture(mlx5_text: str) -> None:
    stats = parse_ethtool_text(mlx5_text, "ethq")
    assert len(stats) == len([ln for ln in mlx5_text.splitlines() if ln.strip()])
    assert stats["rx_packets"] == 845320277
    assert stats["rx_prio0_bytes"] == 2202570777997
    selected = dict(Classifier().select(stats))
    # PFC was off on that host: no per-priority pause statistics, as the kernel doc says.
    assert not any(k.kind in (PAUSE_FRAMES, PAUSE_DURATION_US) for k in selected)
    assert selected[StatKey(DROPS, "", "rx_discards_phy")] == 0
    assert selected[StatKey(DROPS, "", "rx_out_of_buffer")] == 0
    assert StatKey(LINK_DOWN) in selected
    assert selected[StatKey(LINK_PAUSE_FRAMES, "", "rx")] == 0
    assert StatKey(LINK_PAUSE_DURATION_US, "", "tx") in selected
    # Bystanders (per-ring, per-priority bytes, csum...) are ignored.
    assert len(selected) < 15


def test_header_and_indentation_as_ethtool_prints(mlx5_text: str) -> None:
    head = "NIC statistics:\n" + "".join(f"     {ln}\n" for ln in mlx5_text.splitlines()[:5])
    assert parse_ethtool_text(head) == parse_ethtool_text("\n".join(mlx5_text.splitlines()[:5]))


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("rx_packets: 1\ntx_packets 2\n", 2, "name: value"),
        ("rx_packets: 1\ntx_packets:\n", 2, "unsigned integer"),  # truncated mid-line
        ("rx_packets: -5\n", 1, "unsigned integer"),
        ("rx_packets: 1.5\n", 1, "unsigned integer"),
        (": 7\n", 1, "name: value"),
        ("\x00\x01\x02garbage", 1, "name: value"),
    ],
)
def test_garbage_names_the_line(text: str, line: int, match: str) -> None:
    with pytest.raises(ParseError, match=match) as info:
        parse_ethtool_text(text, "dump")
    assert info.value.line == line
    assert str(info.value).startswith(f"dump:{line}:")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("rx_prio3_pause", StatKey(PAUSE_FRAMES, "3", "rx")),
        ("tx_prio3_pause", StatKey(PAUSE_FRAMES, "3", "tx")),
        ("rx_prio3_pause_duration", StatKey(PAUSE_DURATION_US, "3", "rx")),
        ("tx_prio7_pause_duration", StatKey(PAUSE_DURATION_US, "7", "tx")),
        ("rx_priority_3_xoff.nic", StatKey(PAUSE_FRAMES, "3", "rx")),  # ice
        ("port.tx_priority_5_xoff", StatKey(PAUSE_FRAMES, "5", "tx")),  # i40e style
        ("rx_pfc_ena_frames_pri3", StatKey(PAUSE_FRAMES, "3", "rx")),  # bnxt_en
        ("tx_pause_storm_warning_events", StatKey(STORM, "", "warning")),
        ("tx_pause_storm_error_events", StatKey(STORM, "", "error")),
        ("rx_prio3_buf_discard", StatKey(PRIORITY_DISCARDS, "3", "buffer")),
        ("rx_prio3_cong_discard", StatKey(PRIORITY_DISCARDS, "3", "congestion")),
        ("rx_prio2_discards", StatKey(PRIORITY_DISCARDS, "2", "other")),
        ("rx_prio3_marked", StatKey(PRIORITY_MARKED, "3")),
        ("tx_discards_phy", StatKey(DROPS, "", "tx_discards_phy")),
        ("dev_out_of_buffer", StatKey(DROPS, "", "dev_out_of_buffer")),
        ("link_down_events_phy", StatKey(LINK_DOWN)),
    ],
)
def test_classify_driver_names(name: str, key: StatKey) -> None:
    assert classify(name) == key


@pytest.mark.parametrize(
    "name",
    [
        "rx_prio3_bytes",
        "rx_prio8_pause",
        "rx_prio3_pause_transition",
        "rx0_packets",
        "rx_prio3_pausex",
    ],
)
def test_classify_ignores_the_rest(name: str) -> None:
    assert classify(name) is None


def test_dir_source_reads_dumps_and_rejects_bad_names(tmp_path: Path) -> None:
    (tmp_path / "eth0").write_text("NIC statistics:\n     rx_prio3_pause: 12\n")
    src = DirEthtoolSource(tmp_path)
    assert src.stats("eth0") == {"rx_prio3_pause": 12}
    with pytest.raises(NoSuchNetdevError):
        src.stats("eth9")
    with pytest.raises(NoSuchNetdevError):
        src.stats("../etc")
    (tmp_path / "eth1").write_text("NIC statistics:\n     rx_prio3_pause: 1")
    (tmp_path / "eth1").write_text("NIC statistics:\n     rx_prio3_pau")  # torn write
    with pytest.raises(ParseError):
        src.stats("eth1")
