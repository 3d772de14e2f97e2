"""The node's own addresses from procfs layouts (for NCCL RAS hosts in job reports)."""

from __future__ import annotations

from pathlib import Path

from fabricwatch.netaddrs import MAX_ADDRESSES, local_addresses

# The shape of a real /proc/net/fib_trie (Linux 6.1): the Main and Local tables
# both list the host's /32 LOCAL entries.
FIB_TRIE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 10.1.0.0/16 2 0 2
           |-- 10.1.7.17
              /32 host LOCAL
        |-- 10.1.255.255
           /32 link BROADCAST
     |-- 169.254.3.1
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
           |-- 10.1.7.17
              /32 host LOCAL
           |-- 192.168.40.17
              /32 host LOCAL
"""
# /proc/net/if_inet6: address, ifindex, prefix length, scope, flags, device.
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fe80000000000000021122fffe334455 02 40 20 80     eth0
fd000000000000000000000000000017 02 40 00 80     eth0
"""


def _proc(tmp_path: Path, fib: str | None, inet6: str | None) -> Path:
    net = tmp_path / "proc" / "net"
    net.mkdir(parents=True)
    if fib is not None:
        (net / "fib_trie").write_text(fib)
    if inet6 is not None:
        (net / "if_inet6").write_text(inet6)
    return tmp_path / "proc"


def test_global_addresses_of_a_real_layout(tmp_path: Path) -> None:
    assert local_addresses(_proc(tmp_path, FIB_TRIE, IF_INET6)) == (
        "10.1.7.17",
        "192.168.40.17",
        "fd00::17",
    )


def test_missing_files_are_no_addresses(tmp_path: Path) -> None:
    assert local_addresses(_proc(tmp_path, None, None)) == ()
    assert local_addresses(tmp_path / "nowhere") == ()


def test_garbage_and_truncation_are_skipped(tmp_path: Path) -> None:
    garbage = "|-- not-an-ip\n   /32 host LOCAL\n\x00\xff junk\n|-- 10.9.9.9\n"  # cut mid-entry
    inet6 = "zz" * 16 + " 02 40 00 80 eth0\nfd00 02\n" + IF_INET6[:40]
    assert local_addresses(_proc(tmp_path, garbage, inet6)) == ()


def test_at_most_the_cap(tmp_path: Path) -> None:
    many = "".join(
        f"  |-- 10.2.{i // 250}.{i % 250 + 1}\n     /32 host LOCAL\n" for i in range(300)
    )
    found = local_addresses(_proc(tmp_path, many, None))
    assert len(found) == MAX_ADDRESSES
