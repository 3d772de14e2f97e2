"""The node's own IP addresses, from procfs (no DNS, no extra package).

NCCL RAS names a missing rank by its host's address; the fleet maps it to a
node by the addresses each node lists in its job reports. Read from
``<proc>/net/fib_trie`` (IPv4: the ``/32 host LOCAL`` entries) and
``<proc>/net/if_inet6`` (IPv6, global scope), so a container pointed at the
host's ``/proc`` (``daemon.proc_root``) reports the host's addresses.
Loopback and link-local addresses are left out: RAS never names them.
"""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path

MAX_ADDRESSES = 64
"""Addresses one node lists at most (a report carries them every window)."""
_READ_CAP = 4 << 20


def _read(path: Path) -> list[str]:
    try:
        with path.open("r", encoding="ascii", errors="replace") as fh:
            return fh.read(_READ_CAP).splitlines()
    except OSError:
        return []


def _ipv4(lines: list[str]) -> list[str]:
    out: list[str] = []
    for prev, line in itertools.pairwise(lines):
        if "/32 host LOCAL" not in line or "|--" not in prev:
            continue
        text = prev.split("|--", 1)[1].strip()
        try:
            addr = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        if not (addr.is_loopback or addr.is_link_local):
            out.append(str(addr))
    return out


def _ipv6(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or len(fields[0]) != 32 or fields[3] != "00":
            continue  # not a global-scope entry (or not an entry at all)
        try:
            addr = ipaddress.IPv6Address(int(fields[0], 16))
        except ValueError:
            continue
        if not (addr.is_loopback or addr.is_link_local):
            out.append(str(addr))
    return out


def local_addresses(proc_root: Path = Path("/proc")) -> tuple[str, ...]:
    """The node's global IPv4 and IPv6 addresses, sorted, at most :data:`MAX_ADDRESSES`;
    empty when procfs does not have them (unreadable, another OS)."""
    found = set(_ipv4(_read(proc_root / "net" / "fib_trie")))
    found |= set(_ipv6(_read(proc_root / "net" / "if_inet6")))
    return tuple(sorted(found))[:MAX_ADDRESSES]
