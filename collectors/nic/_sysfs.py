"""RDMA port counters from ``/sys/class/infiniband`` (root injectable).

Reading ~60 small files per port every second is the collector's main cost,
so each port keeps its counter files open and re-reads them with ``pread`` at
offset 0 (sysfs regenerates the value on every read from offset 0). That is
one syscall per counter instead of three. A bounded :class:`FdBudget` caps how
many descriptors stay open; files over the budget are opened per read.

Only the counters a caller names (``wanted``) are opened and read: a
ConnectX port has dozens of ``hw_counters`` the product does not export, and
each read is a system call every second.

Hot-unplug: a removed sysfs attribute answers ``ENODEV`` on read and a removed
directory fails ``stat``; either makes the port report itself gone so the
collector drops it and rediscovers it when it comes back. Fixture trees on a
regular file system are detected through the directory's mtime/inode, which
changes whenever a file in it is created or removed.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from fabricwatch.errors import ParseError

T = TypeVar("T")

INFINIBAND = ("class", "infiniband")

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([GMT])b/sec", re.IGNORECASE)
_RATE_SCALE = {"M": 1e6, "G": 1e9, "T": 1e12}
_STATE = re.compile(r"^\s*([0-9]+)\s*:\s*(\S.*?)\s*$")

PORT_ATTRIBUTES = ("state", "phys_state", "rate")
COUNTER_DIRS = ("counters", "hw_counters")
READ_SIZE = 128
"""Bytes read per attribute: every counter and state value fits."""
NOT_DIGITS = re.compile(rb"[^0-9 \t\n\r\x0b\x0c]")
"""A byte no value of :func:`parse_counter`'s common case has (``int()`` also takes
signs and underscores, which that function refuses)."""


class PortGoneError(Exception):
    """The port (or one of its directories) disappeared: hot-unplug or driver reload."""


def parse_counter(raw: bytes, source: str = "") -> int | None:
    """A sysfs counter value; None for ``N/A (no PMA)`` and transiently empty reads.

    Raises:
        ParseError: for anything that is not a non-negative decimal integer.
    """
    text = raw.strip()
    if not text or text.startswith(b"N/A"):
        return None
    if not text.isdigit():
        shown = text[:40].decode("ascii", "replace")
        msg = f"expected a non-negative integer counter, got {shown!r}"
        raise ParseError(msg, source=source)
    return int(text)


def parse_state(text: str, source: str = "") -> tuple[int, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; also used for ``phys_state``."""
    m = _STATE.match(text)
    if not m:
        msg = f"expected '<id>: <NAME>', got {text[:40]!r}"
        raise ParseError(msg, source=source)
    return int(m.group(1)), m.group(2)


def parse_rate(text: str, source: str = "") -> float:
    """``"400 Gb/sec (4X NDR)"`` -> 4e11 bits per second."""
    m = _RATE.match(text)
    if not m:
        msg = f"expected a rate like '400 Gb/sec (4X NDR)', got {text[:40]!r}"
        raise ParseError(msg, source=source)
    return float(m.group(1)) * _RATE_SCALE[m.group(2).upper()]


@dataclass(frozen=True, slots=True)
class PortRef:
    """Where one RDMA port lives in sysfs."""

    device: str
    port: str
    path: Path


def discover_ports(sys_root: Path) -> list[PortRef]:
    """Every ``class/infiniband/<dev>/ports/<n>`` under ``sys_root``, sorted."""
    base = sys_root.joinpath(*INFINIBAND)
    refs: list[PortRef] = []
    try:
        devices = sorted(p.name for p in base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return refs
    for dev in devices:
        ports_dir = base / dev / "ports"
        try:
            ports = [p.name for p in ports_dir.iterdir()]
        except OSError:
            continue
        for port in sorted(ports, key=lambda p: (len(p), p)):
            if port.isdigit():
                refs.append(PortRef(dev, port, ports_dir / port))
    return refs


def read_text(path: Path) -> str | None:
    """A small sysfs attribute as stripped text, or None when absent/unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


class FdBudget:
    """How many counter files may stay open across all ports."""

    __slots__ = ("_free",)

    def __init__(self, limit: int) -> None:
        self._free = max(0, limit)

    @property
    def free(self) -> int:
        """Descriptors still available."""
        return self._free

    def take(self) -> bool:
        """Reserve one descriptor; False when the budget is spent."""
        if self._free <= 0:
            return False
        self._free -= 1
        return True

    def give(self) -> None:
        """Return one descriptor."""
        self._free += 1


@dataclass(slots=True)
class _File:
    name: str
    path: str
    fd: int  # -1: over budget, opened per read


@dataclass(slots=True)
class _Dir:
    path: Path
    signature: tuple[int, int] | None
    files: list[_File] = field(default_factory=list)
    # Every file held open: (names, descriptors) for the one-pass read; else None.
    bulk: tuple[tuple[str, ...], tuple[int, ...]] | None = None

    def set_files(self, files: list[_File]) -> None:
        self.files = files
        held = bool(files) and all(f.fd >= 0 for f in files)
        self.bulk = (tuple(f.name for f in files), tuple(f.fd for f in files)) if held else None


@dataclass(frozen=True, slots=True)
class HeldPort:
    """A port whose attribute and counter files are all held open, as of its last read
    (see :meth:`PortReader.held`): what the collector's one-pass cycle reads directly.

    Attributes:
        attr_fds: the ``state``/``phys_state``/``rate`` descriptors that exist.
        attr_raws: what each of them read last (and parsed without error).
        counter_fds: ``counters/`` then ``hw_counters/`` descriptors, in name order.
        counter_names: ``counters/`` names, then ``hw_counters/`` names, same order.
        dir_fd: the port directory, held open.
        dirs: (name, (inode, mtime) or None where it did not exist) of each
            counter directory, for :meth:`PortReader.unchanged`.
    """

    attr_fds: tuple[int, ...]
    attr_raws: tuple[bytes, ...]
    counter_fds: tuple[int, ...]
    counter_names: tuple[tuple[str, ...], tuple[str, ...]]
    dir_fd: int
    dirs: tuple[tuple[str, tuple[int, int] | None], ...]


@dataclass(slots=True)
class PortSample:
    """One read of one port.

    Attributes:
        link_layer: ``InfiniBand`` or ``Ethernet`` (RoCE); ``""`` when unknown.
        state: ``(id, name)`` of the logical state (4 = ACTIVE) or None.
        phys_state: ``(id, name)`` of the physical state (5 = LinkUp) or None.
        rate_bps: link rate in bits per second, or None.
        counters: ``counters/*`` raw values (``port_*_data`` still in 4-byte words).
        hw_counters: ``hw_counters/*`` raw values.
        has_hw_counters: whether the ``hw_counters`` directory exists at all.
        errors: values that could not be parsed this read (skipped).
    """

    device: str
    port: str
    link_layer: str
    state: tuple[int, str] | None
    phys_state: tuple[int, str] | None
    rate_bps: float | None
    counters: dict[str, int]
    hw_counters: dict[str, int]
    has_hw_counters: bool
    errors: list[str]


class PortReader:
    """Reads one RDMA port's attributes and counters; keeps the files open.

    Args:
        ref: the port.
        budget: descriptors this reader may keep open.
        wanted: the counter file names to read (``counters/`` and
            ``hw_counters/`` alike); None reads every file.
    """

    __slots__ = (
        "_attrs",
        "_budget",
        "_dir_fd",
        "_dirs",
        "_link_layer",
        "_parsed",
        "_wanted",
        "ref",
    )

    def __init__(
        self, ref: PortRef, budget: FdBudget, wanted: Collection[str] | None = None
    ) -> None:
        self.ref = ref
        self._budget = budget
        self._dir_fd = -1  # the port directory, opened by held()
        self._wanted = None if wanted is None else frozenset(wanted)
        self._link_layer = read_text(ref.path / "link_layer") or ""
        # Attribute name -> (its last raw bytes, what they parsed to): state and
        # rate change rarely, so most reads skip decoding and parsing.
        self._parsed: dict[str, tuple[bytes, object]] = {}
        self._attrs = _Dir(ref.path, None)
        self._attrs.files = self._open_files(ref.path, PORT_ATTRIBUTES)
        self._dirs: dict[str, _Dir] = {}
        for name in COUNTER_DIRS:
            self._dirs[name] = self._scan_dir(ref.path / name)

    @property
    def link_layer(self) -> str:
        """``InfiniBand``, ``Ethernet`` or ``""``."""
        return self._link_layer

    def _open_files(self, directory: Path, names: tuple[str, ...] | list[str]) -> list[_File]:
        files: list[_File] = []
        for name in names:
            path = str(directory / name)
            fd = -1
            if self._budget.take():
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    self._budget.give()
                    continue
            elif not Path(path).exists():
                continue
            files.append(_File(name, path, fd))
        return files

    def _scan_dir(self, path: Path) -> _Dir:
        try:
            st = path.stat()
            wanted = self._wanted
            names = sorted(
                p.name
                for p in path.iterdir()
                if p.name != "lifespan" and (wanted is None or p.name in wanted)
            )
        except OSError:
            return _Dir(path, None)
        d = _Dir(path, (st.st_ino, st.st_mtime_ns))
        d.set_files(self._open_files(path, names))
        return d

    def _close_files(self, files: list[_File]) -> None:
        for f in files:
            if f.fd >= 0:
                os.close(f.fd)
                self._budget.give()
        files.clear()

    def close(self) -> None:
        """Release every descriptor this port holds."""
        self._close_files(self._attrs.files)
        for d in self._dirs.values():
            self._close_files(d.files)
            d.bulk = None
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def held(self) -> HeldPort | None:
        """This port's descriptors when every file is held open and its last read
        parsed; None otherwise (then only :meth:`read` reads it)."""
        counters = self._dirs["counters"]
        if counters.signature is None:
            return None
        fds: list[int] = []
        names: list[tuple[str, ...]] = []
        for name in COUNTER_DIRS:
            d = self._dirs[name]
            if d.files and d.bulk is None:
                return None  # a file over the descriptor budget
            names.append(tuple(f.name for f in d.files))
            fds.extend(f.fd for f in d.files)
        raws: list[bytes] = []
        for f in self._attrs.files:
            known = self._parsed.get(f.name)
            if f.fd < 0 or known is None:
                return None
            raws.append(known[0])
        if self._dir_fd < 0:
            try:
                self._dir_fd = os.open(self.ref.path, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return None
        return HeldPort(
            tuple(f.fd for f in self._attrs.files),
            tuple(raws),
            tuple(fds),
            (names[0], names[1]),
            self._dir_fd,
            tuple((name, d.signature) for name, d in self._dirs.items()),
        )

    @staticmethod
    def unchanged(held: HeldPort) -> bool:
        """Whether :meth:`read` would find the counter directories as ``held`` lists them
        (same inode and mtime; one that did not exist still missing). Changes nothing:
        on False the caller reads the port with :meth:`read`, which re-lists them."""
        # Relative to the held port directory: one name to look up, not the whole
        # path (a symlink on real sysfs). A port directory that was removed has no
        # entries left, so a replaced port fails here as a removed one does.
        stat, fd = os.stat, held.dir_fd
        for name, signature in held.dirs:
            try:
                st = stat(name, dir_fd=fd)
            except FileNotFoundError:
                if signature is not None:
                    return False
                continue
            except OSError:
                return False
            if signature != (st.st_ino, st.st_mtime_ns):
                return False
        return True

    def _refresh_dirs(self) -> None:
        """Re-list a counter directory whose entries changed (fixture trees, PFC toggles)."""
        for name, d in self._dirs.items():
            try:
                st = d.path.stat()
            except FileNotFoundError:
                if name == "counters" and d.signature is not None:
                    raise PortGoneError(str(d.path)) from None
                sig = None
            else:
                sig = (st.st_ino, st.st_mtime_ns)
            if sig != d.signature:
                self._close_files(d.files)
                self._dirs[name] = self._scan_dir(d.path)

    @staticmethod
    def _read(f: _File) -> bytes:
        if f.fd >= 0:
            return os.pread(f.fd, READ_SIZE, 0)
        fd = os.open(f.path, os.O_RDONLY)
        try:
            return os.read(fd, READ_SIZE)
        finally:
            os.close(fd)

    def _read_values(self, d: _Dir, out: dict[str, int], errors: list[str]) -> None:
        if d.bulk is not None and _read_bulk(*d.bulk, out):
            return
        pread = os.pread
        for f in d.files:
            try:
                raw = pread(f.fd, READ_SIZE, 0) if f.fd >= 0 else self._read(f)
            except FileNotFoundError:
                # Over-budget file removed: only this counter is gone.
                d.signature = None
                continue
            except OSError as exc:
                if exc.errno == errno.ENODEV:
                    raise PortGoneError(f.path) from None
                errors.append(f"{f.path}: {exc.strerror}")
                continue
            text = raw.strip()
            if text.isdigit():  # the common case, parse_counter's first branch inlined
                out[f.name] = int(text)
                continue
            try:
                value = parse_counter(raw, f.path)
            except ParseError as exc:
                errors.append(str(exc))
                continue
            if value is not None:
                out[f.name] = value

    def _parse_attr(
        self,
        attrs: dict[str, bytes],
        name: str,
        parse: Callable[[str, str], T],
        errors: list[str],
    ) -> T | None:
        raw = attrs.get(name)
        if raw is None:
            return None
        known = self._parsed.get(name)
        if known is not None and known[0] == raw:
            return known[1]  # type: ignore[return-value] # stored by this method for this parse
        try:
            value = parse(raw.decode("utf-8", "replace").strip(), f"{self.ref.path}/{name}")
        except ParseError as exc:
            errors.append(str(exc))  # not kept: a bad value is reported at every read
            return None
        self._parsed[name] = (raw, value)
        return value

    def read(self) -> PortSample:
        """Read the port now.

        Raises:
            PortGoneError: the port went away (the caller drops this reader).
        """
        if self._dirs["counters"].signature is None:
            # Otherwise the stat of counters/ in _refresh_dirs tells the same.
            try:
                self.ref.path.stat()
            except FileNotFoundError:
                raise PortGoneError(str(self.ref.path)) from None
        self._refresh_dirs()
        errors: list[str] = []
        attrs: dict[str, bytes] = {}
        for f in self._attrs.files:
            try:
                attrs[f.name] = self._read(f)
            except OSError as exc:
                if exc.errno == errno.ENODEV:
                    raise PortGoneError(f.path) from None
                errors.append(f"{f.path}: {exc.strerror}")
        state = self._parse_attr(attrs, "state", parse_state, errors)
        phys = self._parse_attr(attrs, "phys_state", parse_state, errors)
        rate = self._parse_attr(attrs, "rate", parse_rate, errors)
        counters: dict[str, int] = {}
        hw: dict[str, int] = {}
        self._read_values(self._dirs["counters"], counters, errors)
        hw_dir = self._dirs["hw_counters"]
        self._read_values(hw_dir, hw, errors)
        return PortSample(
            device=self.ref.device,
            port=self.ref.port,
            link_layer=self._link_layer,
            state=state,
            phys_state=phys,
            rate_bps=rate,
            counters=counters,
            hw_counters=hw,
            has_hw_counters=hw_dir.signature is not None,
            errors=errors,
        )


def _read_bulk(names: tuple[str, ...], fds: tuple[int, ...], out: dict[str, int]) -> bool:
    """Every file of a directory in one pass, when every one holds a plain decimal value.

    The common steady-state read without the per-file Python of
    :meth:`PortReader._read_values`: False (``out`` untouched) on any error,
    ``N/A``, empty or garbage value, and that method then reads the files
    one by one with its own handling.
    """
    pread = os.pread
    try:
        raws = [pread(fd, READ_SIZE, 0) for fd in fds]
    except OSError:
        return False
    if NOT_DIGITS.search(b"".join(raws)) is not None:
        return False
    try:
        values = [int(raw) for raw in raws]  # int() strips what bytes.strip() strips
    except ValueError:
        return False  # empty, whitespace only, or two numbers in one file
    out.update(zip(names, values, strict=True))
    return True
