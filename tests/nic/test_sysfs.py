"""sysfs parsing: real gpud H100 layout, units, N/A, garbage, descriptor budget."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from fabricwatch.collectors.nic import _collector as nic_collector
from fabricwatch.collectors.nic import _sysfs as sysfs
from fabricwatch.collectors.nic._collector import COUNTER_FILES
from fabricwatch.collectors.nic._sysfs import (
    FdBudget,
    PortGoneError,
    PortReader,
    discover_ports,
    parse_counter,
    parse_rate,
    parse_state,
)
from fabricwatch.errors import ParseError

from .conftest import Harness


def expand_tsv(tsv: Path, sys_root: Path) -> int:
    """Unflatten ``relative-path<TAB>content`` lines into ``sys_root/class/infiniband``."""
    base = sys_root / "class" / "infiniband"
    n = 0
    for line in tsv.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        rel, _, content = line.partition("\t")
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
        n += 1
    return n


@pytest.fixture
def h100_tree(shared_data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    assert expand_tsv(shared_data / "host" / "gpud_h100_sys_class_infiniband.tsv", root) > 400
    return root


def test_parse_counter_values_and_garbage() -> None:
    assert parse_counter(b"3809045607\n") == 3809045607
    assert parse_counter(b"N/A (no PMA)\n") is None
    assert parse_counter(b"") is None  # a read racing a rewrite
    for bad in (b"-1\n", b"12abc\n", b"0x10\n", b"\xff\xfe"):
        with pytest.raises(ParseError, match="non-negative integer"):
            parse_counter(bad, "x/counters/y")


def test_parse_state_and_rate() -> None:
    assert parse_state("4: ACTIVE") == (4, "ACTIVE")
    assert parse_state("5: LinkUp") == (5, "LinkUp")
    assert parse_rate("400 Gb/sec (4X NDR)") == 400e9
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5e9
    assert parse_rate("200 Gb/sec (2X NDR)") == 200e9
    with pytest.raises(ParseError):
        parse_state("ACTIVE")
    with pytest.raises(ParseError):
        parse_rate("fast")


def test_real_h100_layout_parses(h100_tree: Path) -> None:
    refs = discover_ports(h100_tree)
    expected = [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0"]
    assert [r.device for r in refs] == expected
    budget = FdBudget(10_000)
    readers = [PortReader(r, budget) for r in refs]
    try:
        samples = {r.ref.device: r.read() for r in readers}
    finally:
        for r in readers:
            r.close()
    s = samples["mlx5_0"]
    assert s.link_layer == "InfiniBand"
    assert s.state == (4, "ACTIVE") and s.phys_state == (5, "LinkUp")
    assert s.rate_bps == 400e9
    assert len(s.counters) == 21 and len(s.hw_counters) == 25  # lifespan is not a counter
    assert s.counters["port_xmit_data"] == 230442669431839
    assert s.counters["port_xmit_wait"] == 2489603687
    assert s.hw_counters["rx_write_requests"] == 3809045607
    assert not s.errors
    assert samples["mlx5_1"].counters["link_downed"] == 255
    bond = samples["mlx5_bond_0"]
    assert bond.link_layer == "Ethernet" and bond.rate_bps == 200e9
    assert "np_cnp_sent" not in bond.hw_counters  # firmware without cc_query_allowed


def test_wanted_counters_read_only_those_files_with_equal_values(h100_tree: Path) -> None:
    for ref in discover_ports(h100_tree):
        every, wanted = FdBudget(10_000), FdBudget(10_000)
        with closing(PortReader(ref, every)) as full_reader:
            full = full_reader.read()
            with closing(PortReader(ref, wanted, COUNTER_FILES)) as part_reader:
                part = part_reader.read()
                # Fewer descriptors held: the unexported counters were never opened.
                held = (every.free, wanted.free)
        assert part.counters == {k: v for k, v in full.counters.items() if k in COUNTER_FILES}
        assert part.hw_counters == {k: v for k, v in full.hw_counters.items() if k in COUNTER_FILES}
        assert (part.state, part.phys_state, part.rate_bps) == (
            full.state,
            full.phys_state,
            full.rate_bps,
        )
        assert part.has_hw_counters == full.has_hw_counters
        read_all = len(full.counters) + len(full.hw_counters)
        assert held[1] - held[0] == read_all - len(part.counters) - len(part.hw_counters)
        assert held[1] > held[0]


def _add_packets(tree: Path, n: int) -> None:
    for path in tree.rglob("port_rcv_packets"):
        path.write_text(f"{int(path.read_text()) + n}\n")


async def test_collector_readings_equal_reading_every_counter_file(
    h100_tree: Path, harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = {"ethtool": False, "ethtool_stats_dir": None}
    only = await harness(plain, sys_root=h100_tree).start()
    monkeypatch.setattr(nic_collector, "COUNTER_FILES", None)  # readers open every file
    every = await harness(plain, sys_root=h100_tree).start()
    for _ in range(3):
        # Both collectors share the harness clock: the second sees it one tick later.
        a = await only.cycle(0.5)
        b = await every.cycle(0.5)
        assert [(r.name, r.labels, r.value) for r in a] == [(r.name, r.labels, r.value) for r in b]
        _add_packets(h100_tree, 1000)


async def test_real_h100_layout_through_collector(
    h100_tree: Path, harness: Callable[..., Harness]
) -> None:
    h = await harness({"ethtool": False, "ethtool_stats_dir": None}, sys_root=h100_tree).start()
    await h.cycle()
    # 4-byte words become bytes.
    assert h.value("transmit_bytes", "mlx5_0", "1") == 230442669431839 * 4
    assert h.value("receive_bytes", "mlx5_1", "1") == 205128687774249 * 4
    assert h.now("link_up")[("mlx5_0", "1")] == 1.0
    assert h.now("link_rate_bytes_per_second")[("mlx5_0", "1")] == 50e9
    # No np_*/rp_* anywhere: present=0, and no ECN series at all (absent, not zero).
    assert set(h.now("congestion_counters_present").values()) == {0.0}
    assert not h.now("ecn_marked_packets")
    info = h.now("info")
    assert ("mlx5_bond_0", "1", "", "", "-1", "Ethernet") in info
    assert h.now("rdma_transport_events")[("mlx5_0", "1", "roce_adp_retrans")] == 3.0
    assert h.now("port_errors")[("mlx5_0", "1", "port_rcv_errors")] == 14.0


def test_na_and_garbage_values_are_skipped_not_fatal(tmp_path: Path) -> None:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "port_xmit_data").write_text("N/A (no PMA)\n")
    (port / "counters" / "port_rcv_data").write_text("garbage\n")
    (port / "counters" / "link_downed").write_text("2\n")
    (port / "state").write_text("1: DOWN\n")
    (port / "rate").write_text("nonsense\n")
    [ref] = discover_ports(tmp_path)
    with closing(PortReader(ref, FdBudget(100))) as reader:
        s = reader.read()
    assert s.counters == {"link_downed": 2}
    assert s.state == (1, "DOWN") and s.rate_bps is None
    assert len(s.errors) == 2 and any("port_rcv_data" in e for e in s.errors)
    assert not s.has_hw_counters


def test_attributes_follow_every_change_and_garbage_is_reported_at_every_read(
    tmp_path: Path,
) -> None:
    """A port's state and rate are parsed again whenever their text changes (the
    reader keeps the last parse of unchanged text), and an unparsable value is an
    error at every read, also after a good one and when the text stays the same."""
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "link_downed").write_text("0\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    [ref] = discover_ports(tmp_path)
    steps = [
        ("4: ACTIVE", "400 Gb/sec (4X NDR)", (4, "ACTIVE"), 4e11, 0),
        ("4: ACTIVE", "400 Gb/sec (4X NDR)", (4, "ACTIVE"), 4e11, 0),
        ("1: DOWN", "200 Gb/sec (2X NDR)", (1, "DOWN"), 2e11, 0),
        ("1: DOWN", "nonsense", (1, "DOWN"), None, 1),
        ("1: DOWN", "nonsense", (1, "DOWN"), None, 1),
        ("garbage", "200 Gb/sec (2X NDR)", None, 2e11, 1),
        ("4: ACTIVE", "200 Gb/sec (2X NDR)", (4, "ACTIVE"), 2e11, 0),
    ]
    with closing(PortReader(ref, FdBudget(100))) as reader:
        for state, rate, want_state, want_rate, errors in steps:
            (port / "state").write_text(state + "\n")
            (port / "rate").write_text(rate + "\n")
            s = reader.read()
            assert (s.state, s.rate_bps, len(s.errors)) == (want_state, want_rate, errors)


@pytest.mark.parametrize("budget", [0, 5, 1000])
def test_descriptor_budget_does_not_change_values(tmp_path: Path, budget: int) -> None:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "hw_counters").mkdir(parents=True)
    for i in range(20):
        (port / "hw_counters" / f"c{i}").write_text(f"{i}\n")
    [ref] = discover_ports(tmp_path)
    b = FdBudget(budget)
    reader = PortReader(ref, b)
    assert reader.read().hw_counters == {f"c{i}": i for i in range(20)}
    assert b.free == max(0, budget - 20)
    (port / "hw_counters" / "c3").write_text("33\n")  # rewritten in place
    assert reader.read().hw_counters["c3"] == 33
    reader.close()
    assert b.free == budget


def test_removed_port_without_counters_dir_raises_port_gone(tmp_path: Path) -> None:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    [ref] = discover_ports(tmp_path)
    reader = PortReader(ref, FdBudget(100))
    assert reader.read().state == (4, "ACTIVE")
    (port / "state").unlink()
    port.rmdir()
    with pytest.raises(PortGoneError):
        reader.read()
    reader.close()


def test_removed_port_raises_port_gone(tmp_path: Path) -> None:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "link_downed").write_text("0\n")
    [ref] = discover_ports(tmp_path)
    reader = PortReader(ref, FdBudget(100))
    reader.read()
    (port / "counters" / "link_downed").unlink()
    (port / "counters").rmdir()
    with pytest.raises(PortGoneError):
        reader.read()
    reader.close()


_VALUES = [
    "0\n",
    "123\n",
    " 7 \n",
    "18446744073709551615\n",
    "0012\n",
    "N/A (no PMA)\n",
    "",
    "\n",
    "-5\n",
    "+5\n",
    "1_000\n",
    "12 34\n",
    "1.5\n",
    "\x00\x01",
    "12\x0b\n",
    "x" * 200,
]


@pytest.mark.parametrize("bad", _VALUES)
def test_one_pass_read_equals_file_by_file(
    tmp_path: Path, bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held descriptors read in one pass (``_read_bulk``); over budget, file by file.
    Both give the same values and errors over clean, odd and garbage values, in-place
    rewrites and a counter going back to 0."""
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "hw_counters").mkdir()
    names = [f"c{i}" for i in range(6)]
    [ref] = discover_ports(tmp_path)
    bulk: list[bool] = []
    real = sysfs._read_bulk

    def spied(names: tuple[str, ...], fds: tuple[int, ...], out: dict[str, int]) -> bool:
        bulk.append(real(names, fds, out))
        return bulk[-1]

    monkeypatch.setattr(sysfs, "_read_bulk", spied)

    def write(values: list[str]) -> None:
        for d in ("counters", "hw_counters"):
            for n, v in zip(names, values, strict=True):
                (port / d / n).write_text(v)

    write([f"{i}\n" for i in range(6)])
    held, opened = PortReader(ref, FdBudget(100)), PortReader(ref, FdBudget(0))
    rounds = [
        [f"{i * 10}\n" for i in range(6)],
        [bad, *[f"{i * 20}\n" for i in range(5)]],
        [f"{i * 30}\n" for i in range(5)] + [bad],
        ["0\n"] * 6,  # a reset
        [f"{i}\n" for i in range(6)],
    ]
    for values in rounds:
        write(values)
        bulk.clear()
        a, b = held.read(), opened.read()
        assert (a.counters, a.hw_counters, a.errors) == (b.counters, b.hw_counters, b.errors)
        clean = all(v.strip().isdigit() for v in values)
        assert bulk == [clean, clean]  # the held reader took the one pass iff all were clean
    held.close()
    opened.close()
