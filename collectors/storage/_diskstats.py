"""Parser for ``/proc/diskstats``.

Each line is ``major minor name`` followed by 11 (kernel < 4.18), 15 (4.18+,
discard fields) or 17 (5.5+, flush fields) numbers; the whole line therefore
has 14, 18 or 20 fields (``Documentation/admin-guide/iostats.rst``). Newer
kernels may append more: extra fields are ignored. A bad line is reported and
skipped; the rest of the file still counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricwatch.errors import ParseError

SECTOR_BYTES = 512
"""diskstats counts 512-byte sectors whatever the device's block size."""

_BASE_FIELDS = 14
_DISCARD_FIELDS = 18
_FLUSH_FIELDS = 20


@dataclass(frozen=True, slots=True)
class DiskStats:
    """One device's line. Times are the kernel's milliseconds (32-bit on every kernel).

    ``discards_*`` and ``flushes``/``flush_ms`` are None when the kernel does not
    print them.
    """

    major: int
    minor: int
    name: str
    reads: int
    reads_merged: int
    read_sectors: int
    read_ms: int
    writes: int
    writes_merged: int
    write_sectors: int
    write_ms: int
    in_flight: int
    io_ms: int
    weighted_io_ms: int
    discards: int | None = None
    discard_sectors: int | None = None
    discard_ms: int | None = None
    flushes: int | None = None
    flush_ms: int | None = None

    @property
    def dev(self) -> str:
        """``major:minor``, the key mountinfo uses."""
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True, slots=True)
class DiskstatsParse:
    """Parsed devices and the lines that could not be parsed."""

    devices: tuple[DiskStats, ...]
    errors: tuple[ParseError, ...]


def parse_line(line: str, *, source: str = "diskstats", lineno: int | None = None) -> DiskStats:
    """Parse one diskstats line; raise :class:`ParseError` naming what is wrong."""
    parts = line.split()
    n = len(parts)
    if n not in (_BASE_FIELDS, _DISCARD_FIELDS) and n < _FLUSH_FIELDS:
        msg = (
            f"expected 14, 18 or 20+ fields (major minor name and counters), got {n}: "
            f"{line.strip()[:80]!r}"
        )
        raise ParseError(msg, source=source, line=lineno)
    name = parts[2]
    try:
        nums = [int(p) for p in parts[:2]] + [int(p) for p in parts[3:_FLUSH_FIELDS]]
    except ValueError:
        bad = next(p for p in parts[:2] + parts[3:_FLUSH_FIELDS] if not p.isdigit())
        msg = f"device {name!r}: field {bad[:40]!r} is not a non-negative integer"
        raise ParseError(msg, source=source, line=lineno) from None
    if min(nums) < 0:
        msg = f"device {name!r}: negative counter"
        raise ParseError(msg, source=source, line=lineno)
    major, minor, *c = nums
    disc = n >= _DISCARD_FIELDS
    flush = n >= _FLUSH_FIELDS
    return DiskStats(
        major=major,
        minor=minor,
        name=name,
        reads=c[0],
        reads_merged=c[1],
        read_sectors=c[2],
        read_ms=c[3],
        writes=c[4],
        writes_merged=c[5],
        write_sectors=c[6],
        write_ms=c[7],
        in_flight=c[8],
        io_ms=c[9],
        weighted_io_ms=c[10],
        discards=c[11] if disc else None,
        discard_sectors=c[13] if disc else None,
        discard_ms=c[14] if disc else None,
        flushes=c[15] if flush else None,
        flush_ms=c[16] if flush else None,
    )


def parse_diskstats(text: str, *, source: str = "diskstats") -> DiskstatsParse:
    """Parse the whole file; bad lines become errors, good lines are kept."""
    devices: list[DiskStats] = []
    errors: list[ParseError] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            devices.append(parse_line(line, source=source, lineno=i))
        except ParseError as exc:
            errors.append(exc)
    return DiskstatsParse(tuple(devices), tuple(errors))
