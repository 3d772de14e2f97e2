"""Parser for ``/proc/self/mountstats`` (NFS client statistics).

Every mount has a ``device <src> mounted on <dir> with fstype <fs>`` line; NFS
mounts (``nfs``, ``nfs4``) follow it with indented statistics
(``fs/nfs/super.c:nfs_show_stats``, ``net/sunrpc/stats.c``):

* ``opts:`` mount options, ``age:`` seconds since mount,
* ``bytes:`` normal/direct/server read and write bytes and page counts,
* ``RPC iostats version: 1.0|1.1  p/v: 100003/<vers> (nfs)``,
* ``xprt:`` transport counters,
* ``per-op statistics`` then one line per RPC op: ``ops transmissions
  major-timeouts bytes-sent bytes-received queue-ms rtt-ms execute-ms``
  plus ``errors`` from iostats 1.1 on.

A malformed line is reported and skipped; the rest of the mount still counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricwatch.errors import ParseError

NFS_FSTYPES = frozenset({"nfs", "nfs4"})

_DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)(?: statvers=(\S+))?\s*$")
_OP_FIELDS_MIN = 8
_BYTES_FIELDS = 8
_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(text: str) -> str:
    r"""Undo the kernel's octal escaping of mount paths (``\040`` is a space)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


@dataclass(frozen=True, slots=True)
class NfsOp:
    """Cumulative statistics of one RPC operation on one mount (times in ms)."""

    ops: int
    transmissions: int
    timeouts: int
    bytes_sent: int
    bytes_received: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int
    errors: int | None = None

    @property
    def retransmissions(self) -> int:
        """Transmissions beyond the first of each op."""
        return max(0, self.transmissions - self.ops)


@dataclass(frozen=True, slots=True)
class NfsBytes:
    """The ``bytes:`` line: what the application and the server saw."""

    normal_read: int
    normal_write: int
    direct_read: int
    direct_write: int
    server_read: int
    server_write: int
    read_pages: int
    write_pages: int


@dataclass(slots=True)
class NfsMount:
    """One NFS mount's statistics."""

    export: str
    mountpoint: str
    fstype: str
    statvers: str = ""
    opts: dict[str, str] = field(default_factory=dict)
    age: int | None = None
    bytes: NfsBytes | None = None
    xprt: str = ""
    ops: dict[str, NfsOp] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """NFS version from the mount options (``3``, ``4.1``...), else from the fstype."""
        return self.opts.get("vers", "4" if self.fstype == "nfs4" else "3")

    @property
    def server(self) -> str:
        """The server address (``addr=`` option) or the host part of the export."""
        return self.opts.get("addr") or self.export.rpartition(":")[0] or self.export


@dataclass(frozen=True, slots=True)
class MountstatsParse:
    """NFS mounts by mount point and the lines that could not be parsed."""

    mounts: dict[str, NfsMount]
    errors: tuple[ParseError, ...]


def _ints(values: list[str], what: str, source: str, lineno: int) -> list[int]:
    try:
        out = [int(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not v.isdigit())
        msg = f"{what}: {bad[:40]!r} is not an integer"
        raise ParseError(msg, source=source, line=lineno) from None
    if out and min(out) < 0:
        msg = f"{what}: negative counter"
        raise ParseError(msg, source=source, line=lineno)
    return out


def _parse_stat_line(
    mount: NfsMount,
    line: str,
    in_ops: bool,
    source: str,
    lineno: int,
    *,
    ops: frozenset[str] | None,
) -> bool:
    """Apply one indented line to ``mount``; return whether per-op lines follow."""
    key, sep, rest = line.strip().partition(":")
    if not sep:
        if key == "per-op statistics":
            return True
        msg = f"mount {mount.mountpoint}: unexpected line {line.strip()[:60]!r}"
        raise ParseError(msg, source=source, line=lineno)
    if in_ops and ops is not None and key not in ops:
        return True
    values = rest.split()
    if in_ops:
        if len(values) < _OP_FIELDS_MIN:
            msg = (
                f"mount {mount.mountpoint}: op {key} has {len(values)} fields, expected at "
                f"least {_OP_FIELDS_MIN} (truncated?)"
            )
            raise ParseError(msg, source=source, line=lineno)
        nums = _ints(values[:9], f"mount {mount.mountpoint} op {key}", source, lineno)
        n, trans, tmo, sent, recv, queue, rtt, exe = nums[:8]
        mount.ops[key] = NfsOp(
            n, trans, tmo, sent, recv, queue, rtt, exe, nums[8] if len(nums) > 8 else None
        )
        return True
    if key == "opts":
        for opt in rest.strip().split(","):
            name, _, val = opt.partition("=")
            mount.opts[name] = val
    elif key == "age":
        mount.age = _ints(values[:1], f"mount {mount.mountpoint} age", source, lineno)[0]
    elif key == "bytes":
        if len(values) < _BYTES_FIELDS:
            msg = f"mount {mount.mountpoint}: bytes has {len(values)} fields, expected 8"
            raise ParseError(msg, source=source, line=lineno)
        nums = _ints(values[:8], f"mount {mount.mountpoint} bytes", source, lineno)
        mount.bytes = NfsBytes(*nums)
    elif key == "xprt" and values:
        mount.xprt = values[0]
    # Other keys (events, caps, sec, nfsv4, RPC iostats version...) are not needed.
    return in_ops


def parse_mountstats(
    text: str, *, source: str = "mountstats", ops: frozenset[str] | None = None
) -> MountstatsParse:
    """Parse the file; NFS mounts are kept, other file systems skipped.

    ``ops`` limits the per-op lines parsed (and checked) to those named; the
    NFSv4 table has about 60 ops and a collector exports three.
    """
    mounts: dict[str, NfsMount] = {}
    errors: list[ParseError] = []
    current: NfsMount | None = None
    in_ops = False
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("device "):
            current, in_ops = None, False
            m = _DEVICE.match(line)
            if m is None:
                msg = f"malformed device line {line.strip()[:80]!r}"
                errors.append(ParseError(msg, source=source, line=i))
                continue
            export, mnt, fstype, statvers = m.groups()
            if fstype in NFS_FSTYPES:
                current = NfsMount(unescape(export), unescape(mnt), fstype, statvers or "")
                mounts[current.mountpoint] = current
            continue
        if current is None:
            if not line[:1].isspace():
                msg = f"unexpected line outside a mount: {line.strip()[:60]!r}"
                errors.append(ParseError(msg, source=source, line=i))
            continue
        try:
            in_ops = _parse_stat_line(current, line, in_ops, source, i, ops=ops)
        except ParseError as exc:
            errors.append(exc)
    return MountstatsParse(mounts, tuple(errors))
