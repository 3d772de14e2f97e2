"""Driver statistics (``ethtool -S``) through the SIOCETHTOOL ioctl, and their meaning.

No ``ethtool`` binary and no ``CAP_NET_ADMIN``: GSSET_INFO gives the number
of statistics, GSTRINGS their names (cached per interface until the count or
the interface index changes), GSTATS the u64 values. The ioctl resolves the
interface in the network namespace of the socket it is issued on, so a
socket created inside another namespace reads that namespace's devices.

Kernels before the 2025 ``ethtool_get_stats`` fix copy as many entries as the
driver has *now*, whatever the caller allocated; buffers therefore carry
slack, and a count that changed between calls makes us re-read the names.

:func:`classify` maps driver-specific names (mlx5, ice, bnxt) onto the few
signals we export, keeping the priority as a label and ignoring the rest.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fabricwatch.errors import CollectorError, ParseError

SIOCETHTOOL = 0x8946
SIOCGIFINDEX = 0x8933
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
_IFREQ = struct.Struct("16sP16x")  # struct ifreq: name + ifr_data, padded to 40 bytes
_IFREQ_INT = struct.Struct("16si20x")  # struct ifreq with ifr_ifindex
_MAX_STATS = 1 << 16  # no driver has this many; guards against a garbage count


class EthtoolUnavailableError(CollectorError):
    """The interface has no driver statistics (``lo``, bonds, ``EOPNOTSUPP``)."""


class NoSuchNetdevError(CollectorError):
    """The interface does not exist (renamed, unplugged, other namespace)."""


class EthtoolSource(Protocol):
    """Where driver statistics come from: the ioctl, or dumps for replay and demos."""

    def stats(self, ifname: str) -> dict[str, int]:
        """Every statistic of ``ifname`` by name."""
        ...

    def close(self) -> None:
        """Release resources. Must not raise."""
        ...


def _slack(n: int) -> int:
    return 2 * n + 64


@dataclass(slots=True)
class _Cache:
    ifindex: int
    names: tuple[str, ...]
    values: ctypes.Array[ctypes.c_char]


class IoctlEthtool:
    """Driver statistics through ``SIOCETHTOOL``; one instance per collector thread.

    Args:
        socket_factory: makes the datagram socket the ioctls go through (tests
            pass one created inside a network namespace).
    """

    def __init__(self, socket_factory: Callable[[], socket.socket] | None = None) -> None:
        self._factory = socket_factory or (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        self._sock: socket.socket | None = None
        self._cache: dict[str, _Cache] = {}

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = self._factory()
        return self._sock

    def close(self) -> None:
        """Close the socket and forget cached names."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._cache.clear()

    def _ioctl(self, ifname: str, buf: ctypes.Array[ctypes.c_char]) -> None:
        name = ifname.encode()
        if len(name) >= IFNAMSIZ or not name or b"/" in name:
            msg = f"invalid interface name {ifname!r}"
            raise NoSuchNetdevError(msg)
        req = _IFREQ.pack(name, ctypes.addressof(buf))
        try:
            fcntl.ioctl(self._socket().fileno(), SIOCETHTOOL, req)
        except OSError as exc:
            raise _translate(exc, ifname) from None

    def _ifindex(self, ifname: str) -> int:
        req = _IFREQ_INT.pack(ifname.encode(), 0)
        try:
            res = fcntl.ioctl(self._socket().fileno(), SIOCGIFINDEX, req)
        except OSError as exc:
            raise _translate(exc, ifname) from None
        index: int = _IFREQ_INT.unpack(res)[1]
        return index

    def count(self, ifname: str) -> int:
        """Number of statistics the driver reports now (ETHTOOL_GSSET_INFO)."""
        buf = ctypes.create_string_buffer(
            struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0)
        )
        self._ioctl(ifname, buf)
        _, _, mask, n = struct.unpack_from("=IIQI", buf.raw)
        if not mask & (1 << ETH_SS_STATS):
            msg = f"{ifname}: driver reports no statistics"
            raise EthtoolUnavailableError(msg)
        if n > _MAX_STATS:
            msg = f"{ifname}: implausible statistics count {n}"
            raise EthtoolUnavailableError(msg)
        return int(n)

    def names(self, ifname: str, n: int) -> tuple[str, ...]:
        """The ``n`` statistic names (ETHTOOL_GSTRINGS)."""
        cap = _slack(n)
        buf = ctypes.create_string_buffer(12 + ETH_GSTRING_LEN * cap)
        struct.pack_into("=III", buf, 0, ETHTOOL_GSTRINGS, ETH_SS_STATS, n)
        self._ioctl(ifname, buf)
        got = struct.unpack_from("=I", buf.raw, 8)[0]
        if got != n:
            msg = f"{ifname}: statistics changed while reading names ({n} -> {got})"
            raise _CountChangedError(msg)
        raw = buf.raw
        return tuple(
            raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN]
            .split(b"\0", 1)[0]
            .decode("ascii", "replace")
            for i in range(n)
        )

    def stats(self, ifname: str) -> dict[str, int]:
        """Every statistic of ``ifname``.

        Raises:
            NoSuchNetdevError: no such interface in the socket's namespace.
            EthtoolUnavailableError: the driver has no statistics.
        """
        for _ in range(3):
            try:
                return self._stats_once(ifname)
            except _CountChangedError:
                self._cache.pop(ifname, None)
        msg = f"{ifname}: statistics kept changing while being read"
        raise EthtoolUnavailableError(msg)

    def _stats_once(self, ifname: str) -> dict[str, int]:
        n = self.count(ifname)
        ifindex = self._ifindex(ifname)
        cache = self._cache.get(ifname)
        if cache is None or len(cache.names) != n or cache.ifindex != ifindex:
            names = self.names(ifname, n)
            values = ctypes.create_string_buffer(8 + 8 * _slack(n))
            cache = _Cache(ifindex, names, values)
            self._cache[ifname] = cache
        buf = cache.values
        struct.pack_into("=II", buf, 0, ETHTOOL_GSTATS, n)
        self._ioctl(ifname, buf)
        got = struct.unpack_from("=I", buf.raw, 4)[0]
        if got != n:
            msg = f"{ifname}: statistics changed while reading values ({n} -> {got})"
            raise _CountChangedError(msg)
        numbers = struct.unpack_from(f"={n}Q", buf, 8)
        return dict(zip(cache.names, numbers, strict=True))


class _CountChangedError(CollectorError):
    pass


def _translate(exc: OSError, ifname: str) -> CollectorError:
    if exc.errno == errno.ENODEV:
        return NoSuchNetdevError(f"{ifname}: no such network interface")
    if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
        return EthtoolUnavailableError(f"{ifname}: ethtool statistics not supported")
    return CollectorError(f"{ifname}: ethtool ioctl failed: {exc.strerror}")


def parse_ethtool_text(text: str, source: str = "") -> dict[str, int]:
    """Parse ``ethtool -S`` output.

    Skipped: blank lines, comments (``# ethtool -S eth0``, as node_exporter's
    fixtures start) and section headers, i.e. a name with a space and no value
    (``NIC statistics:``, ``Standard stats for eth0:``).

    Raises:
        ParseError: a line that is not ``name: unsigned-integer`` (names the line).
    """
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = stripped.rpartition(":")
        name = name.strip()
        value = value.strip()
        if sep and not value and " " in name:
            continue  # a section header
        if not sep or not name:
            msg = f"expected 'name: value', got {stripped[:60]!r}"
            raise ParseError(msg, source=source, line=lineno)
        if not value.isdigit():
            msg = f"{name}: expected an unsigned integer, got {value[:30]!r}"
            raise ParseError(msg, source=source, line=lineno)
        out[name] = int(value)
    return out


class DirEthtoolSource:
    """Statistics from ``ethtool -S`` text dumps named after the interface (replay, demo)."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def stats(self, ifname: str) -> dict[str, int]:
        """Parse ``<directory>/<ifname>``."""
        if not ifname or "/" in ifname or ifname in (".", ".."):
            msg = f"invalid interface name {ifname!r}"
            raise NoSuchNetdevError(msg)
        path = self._dir / ifname
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            msg = f"{ifname}: no statistics dump at {path}"
            raise NoSuchNetdevError(msg) from None
        except OSError as exc:
            msg = f"{path}: {os.strerror(exc.errno or 0)}"
            raise CollectorError(msg) from None
        return parse_ethtool_text(text, str(path))

    def close(self) -> None:
        """Nothing to release."""


# --- meaning ---------------------------------------------------------------

PAUSE_FRAMES = "pause_frames"
PAUSE_DURATION_US = "pause_duration_us"
LINK_PAUSE_FRAMES = "link_pause_frames"
LINK_PAUSE_DURATION_US = "link_pause_duration_us"
STORM = "pause_storm"
DROPS = "drops"
PRIORITY_DISCARDS = "priority_discards"
PRIORITY_MARKED = "priority_ecn_marked"
LINK_DOWN = "link_down_events"


@dataclass(frozen=True, slots=True)
class StatKey:
    """What a driver statistic means.

    Attributes:
        kind: one of the module's kind constants.
        priority: ``"0"``-``"7"`` for per-priority statistics, else ``""``.
        qualifier: direction (``rx``/``tx``), storm level or drop/discard reason.
    """

    kind: str
    priority: str = ""
    qualifier: str = ""


_DISCARD_REASON = {"buf_discard": "buffer", "cong_discard": "congestion", "discards": "other"}


# Order matters: where two names of one driver mean the same thing (mlx5's
# rx_global_pause and rx_pause_ctrl_phy), the earlier pattern wins and the
# later name is ignored, so the signal is never counted twice.
_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], StatKey]], ...] = (
    # mlx5: rx_prio3_pause / rx_prio3_pause_duration (microseconds)
    (re.compile(r"^(rx|tx)_prio([0-7])_pause$"), lambda m: StatKey(PAUSE_FRAMES, m[2], m[1])),
    (
        re.compile(r"^(rx|tx)_prio([0-7])_pause_duration$"),
        lambda m: StatKey(PAUSE_DURATION_US, m[2], m[1]),
    ),
    # i40e (in-tree since 4.19 and out-of-tree 2.x): port.rx_priority_3_xoff_rx
    (
        re.compile(r"^port\.(rx|tx)_priority_([0-7])_xoff_\1$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # ice: rx_priority_3_xoff.nic; older i40e: port.rx_priority_3_xoff
    (
        re.compile(r"^(?:port\.)?(rx|tx)_priority_([0-7])_xoff(?:\.nic)?$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # ice out-of-tree with unified statistic names: port-rx-xoff_prio-3_events
    (
        re.compile(r"^port-(rx|tx)-xoff_prio-([0-7])_events$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # bnxt_en: rx_pfc_ena_frames_pri3, pfc_pri3_rx_duration_us (port_stats_ext)
    (
        re.compile(r"^(rx|tx)_pfc_ena_frames_pri([0-7])$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    (
        re.compile(r"^pfc_pri([0-7])_(rx|tx)_duration_us$"),
        lambda m: StatKey(PAUSE_DURATION_US, m[1], m[2]),
    ),
    # 802.3x link-level pause. mlx5: rx_global_pause (global pause mode), else
    # rx_pause_ctrl_phy (PHY MAC-control PAUSE frames; PFC uses another opcode).
    (re.compile(r"^(rx|tx)_global_pause$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (re.compile(r"^(rx|tx)_pause_ctrl_phy$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (
        re.compile(r"^(rx|tx)_global_pause_duration$"),
        lambda m: StatKey(LINK_PAUSE_DURATION_US, "", m[1]),
    ),
    # ice link_xoff_rx.nic / port-rx-xoff_events; i40e port.link_xoff_rx
    (
        re.compile(
            r"^(?:link_xoff_(rx|tx)\.nic|port\.link_xoff_(rx|tx)|port-(rx|tx)-xoff_events)$"
        ),
        lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1] or m[2] or m[3]),
    ),
    # bnxt_en rx_pause_frames; sfc port_rx_pause; tg3 rx_xoff_pause_rcvd / tx_xoff_sent
    (re.compile(r"^(rx|tx)_pause_frames$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (re.compile(r"^port_(rx|tx)_pause$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (
        re.compile(r"^(?:rx_xoff_pause_(rcvd)|(tx)_xoff_sent)$"),
        lambda m: StatKey(LINK_PAUSE_FRAMES, "", "rx" if m[1] else "tx"),
    ),
    (re.compile(r"^tx_pause_storm_(warning|error)_events$"), lambda m: StatKey(STORM, "", m[1])),
    (
        re.compile(r"^rx_prio([0-7])_(buf_discard|cong_discard|discards)$"),
        lambda m: StatKey(PRIORITY_DISCARDS, m[1], _DISCARD_REASON[m[2]]),
    ),
    (re.compile(r"^rx_prio([0-7])_marked$"), lambda m: StatKey(PRIORITY_MARKED, m[1])),
    (
        re.compile(r"^((?:rx|tx)_discards_phy|rx_out_of_buffer|dev_out_of_buffer)$"),
        lambda m: StatKey(DROPS, "", m[1]),
    ),
    (re.compile(r"^link_down_events_phy$"), lambda m: StatKey(LINK_DOWN)),
)

SATURATED_VALUES = frozenset({2**32 - 1, 2**64 - 1})
"""Values a counter pinned at its maximum shows (32-bit hardware counters that
saturate instead of wrapping, behind a 64-bit ethtool or sysfs field)."""
_RATE_KINDS = frozenset(
    {PAUSE_FRAMES, PAUSE_DURATION_US, LINK_PAUSE_FRAMES, LINK_PAUSE_DURATION_US}
)


def _rank(name: str) -> tuple[StatKey, int] | None:
    for rank, (pattern, make) in enumerate(_PATTERNS):
        m = pattern.match(name)
        if m:
            return make(m), rank
    return None


def classify(name: str) -> StatKey | None:
    """What ``name`` means, or None for statistics we do not export."""
    hit = _rank(name)
    return None if hit is None else hit[0]


def saturated(key: StatKey, value: int) -> bool:
    """A pause counter pinned at its maximum: its rate is unknown, not zero."""
    return key.kind in _RATE_KINDS and value in SATURATED_VALUES


class Classifier:
    """:func:`classify` with a per-name cache (names repeat every cycle)."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[str, tuple[StatKey, int] | None] = {}

    def select_named(self, stats: Mapping[str, int]) -> list[tuple[StatKey, int, str]]:
        """The statistics we export with their meaning and driver name, one per meaning."""
        best: dict[StatKey, tuple[int, int, str]] = {}
        cache = self._cache
        for name, value in stats.items():
            try:
                hit = cache[name]
            except KeyError:
                hit = cache[name] = _rank(name)
            if hit is None:
                continue
            key, rank = hit
            prev = best.get(key)
            if prev is None or rank < prev[0]:
                best[key] = (rank, value, name)
        if len(cache) > 65536:  # a driver renaming stats forever must not grow us forever
            cache.clear()
        return [(key, value, name) for key, (_, value, name) in best.items()]

    def select(self, stats: Mapping[str, int]) -> list[tuple[StatKey, int]]:
        """The statistics we export, with their meaning."""
        return [(key, value) for key, value, _ in self.select_named(stats)]
