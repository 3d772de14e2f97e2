"""Driver statistics (``ethtool -S``) through the SIOCETHTOOL ioctl, and their meaning.

No ``ethtool`` binary and no ``CAP_NET_ADMIN``: GSSET_INFO gives the number
of statistics, GSTRINGS their names (cached per interface until the count or
the interface index changes), GSTATS the u64 values. The ioctl resolves the
interface in the network namespace of the socket it is issued on, so a
socket created inside another namespace reads that namespace's devices.

Kernels before the 2025 ``ethtool_get_stats`` fix copy as many entries as the
driver has *now*, whatever the caller allocated; buffers therefore carry
slack, and a count that changed between calls makes us re-read the names.

:func:`~fabricwatch.nicnames.classify` (re-exported here) maps driver-specific
names onto the few signals we export, keeping the priority as a label.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fabricwatch.errors import CollectorError, ParseError
from fabricwatch.nicnames import (
    DROPS,
    LINK_DOWN,
    LINK_PAUSE_DURATION_US,
    LINK_PAUSE_FRAMES,
    PAUSE_DURATION_US,
    PAUSE_FRAMES,
    PRIORITY_DISCARDS,
    PRIORITY_MARKED,
    SATURATED_VALUES,
    STORM,
    Classifier,
    StatKey,
    classify,
    saturated,
)

__all__ = [
    "DROPS",
    "LINK_DOWN",
    "LINK_PAUSE_DURATION_US",
    "LINK_PAUSE_FRAMES",
    "PAUSE_DURATION_US",
    "PAUSE_FRAMES",
    "PRIORITY_DISCARDS",
    "PRIORITY_MARKED",
    "SATURATED_VALUES",
    "STORM",
    "Classifier",
    "DirEthtoolSource",
    "EthtoolSource",
    "EthtoolTextParser",
    "EthtoolUnavailableError",
    "IoctlEthtool",
    "NoSuchNetdevError",
    "StatKey",
    "classify",
    "parse_ethtool_text",
    "saturated",
]

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

    def vector(self, ifname: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Every statistic of ``ifname`` as (names, values) in the driver's order: the
        same names tuple object while the names stay the same (``stats`` is the dict)."""
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
        return dict(zip(*self.vector(ifname), strict=True))

    def vector(self, ifname: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """:meth:`stats` as (names, values); the names tuple is the cached one.

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

    def _stats_once(self, ifname: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
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
        numbers: tuple[int, ...] = struct.unpack_from(f"={n}Q", buf, 8)
        return cache.names, numbers


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
        # The common line ("     rx_bytes: 123") in one split; the checks
        # below give the same result for it, and handle everything else.
        name, sep, value = line.rpartition(":")
        value = value.strip()
        if sep and value.isdigit():
            name = name.strip()
            if name and not name.startswith("#"):
                out[name] = int(value)
                continue
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


@dataclass(frozen=True, slots=True)
class _Layout:
    """One dump's text with its values cut out: the same text with other digits
    parses to the same names, in the same order (see :class:`EthtoolTextParser`)."""

    pattern: re.Pattern[str]
    names: tuple[str, ...]
    unique: bool = True  # no name twice: the values by position are the statistics


def _layout(text: str) -> _Layout | None:
    """The layout of ``text``, or None when a line is not one ``parse_ethtool_text`` accepts.

    Each value line (the first branch of :func:`parse_ethtool_text`) becomes
    its literal text around a ``[0-9]+`` group; every other accepted line
    (blank, comment, section header) stays literal, line ending included. The
    text around a value never ends or starts with a digit, so a match splits
    into the same lines and the same values as that function would.
    """
    parts: list[str] = []
    names: list[str] = []
    for line, ended in zip(text.splitlines(), text.splitlines(keepends=True), strict=True):
        name, sep, value = line.rpartition(":")
        digits = value.strip()
        if sep and digits.isdigit():
            name = name.strip()
            if name and not name.startswith("#"):
                if not digits.isascii():
                    return None  # other digits than [0-9]: left to the line parser
                start = len(line) - len(value) + value.index(digits)
                end = start + len(digits)
                parts.append(f"{re.escape(ended[:start])}([0-9]+){re.escape(ended[end:])}")
                names.append(name)
                continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            name, sep, value = stripped.rpartition(":")
            if not (sep and not value.strip() and " " in name.strip()):
                return None  # not a line the parser skips: it would have raised
        parts.append(re.escape(ended))
    return _Layout(re.compile("".join(parts)), tuple(names), len(set(names)) == len(names))


class EthtoolTextParser:
    """:func:`parse_ethtool_text` for dumps that keep their layout from read to read.

    A driver prints the same names in the same order every time; only the
    digits change. The first dump of a source is parsed line by line and its
    layout kept; later dumps that match that layout (one regular expression,
    in C) give their values without a per-line Python loop. Anything else -
    another layout, garbage, a truncated dump - takes the line-by-line parser,
    with its errors; a dump it parses replaces the kept layout.
    """

    __slots__ = ("_layouts",)

    def __init__(self) -> None:
        self._layouts: dict[str, _Layout | None] = {}

    def parse(self, text: str, source: str) -> dict[str, int]:
        """The statistics in ``text`` (``source`` keys the kept layout and names errors).

        Raises:
            ParseError: as :func:`parse_ethtool_text`.
        """
        return dict(zip(*self.parse_vector(text, source), strict=True))

    def parse_vector(self, text: str, source: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """:meth:`parse` as (names, values): the kept layout's names tuple while the
        layout holds (a name given twice appears once, with its last value, as in
        :meth:`parse`)."""
        layout = self._layouts.get(source)
        if layout is not None:
            m = layout.pattern.fullmatch(text)
            if m is not None:
                if layout.unique:
                    return layout.names, tuple(map(int, m.groups()))
                once = dict(zip(layout.names, map(int, m.groups()), strict=True))
                return tuple(once), tuple(once.values())
        out = parse_ethtool_text(text, source)
        self._layouts[source] = _layout(text)
        return tuple(out), tuple(out.values())


class DirEthtoolSource:
    """Statistics from ``ethtool -S`` text dumps named after the interface (replay, demo)."""

    def __init__(self, directory: Path) -> None:
        self._prefix = f"{directory}{os.sep}"  # a str join per read, not a Path per read
        self._parser = EthtoolTextParser()

    def stats(self, ifname: str) -> dict[str, int]:
        """Parse ``<directory>/<ifname>``."""
        return dict(zip(*self.vector(ifname), strict=True))

    def vector(self, ifname: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """:meth:`stats` as (names, values)."""
        if not ifname or "/" in ifname or ifname in (".", ".."):
            msg = f"invalid interface name {ifname!r}"
            raise NoSuchNetdevError(msg)
        path = self._prefix + ifname
        try:
            raw = _read_all(path)
        except FileNotFoundError:
            msg = f"{ifname}: no statistics dump at {path}"
            raise NoSuchNetdevError(msg) from None
        except OSError as exc:
            msg = f"{path}: {os.strerror(exc.errno or 0)}"
            raise CollectorError(msg) from None
        # No newline translation: str.splitlines splits "\r\n" and "\r" as the
        # universal-newline reader would have turned them into "\n".
        return self._parser.parse_vector(raw.decode("utf-8", "replace"), path)

    def close(self) -> None:
        """Nothing to release."""


def _read_all(path: str) -> bytes:
    """The whole file, through descriptors (no buffered text reader per read)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
