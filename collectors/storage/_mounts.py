"""``/proc/self/mountinfo`` parsing and checkpoint-path -> mount mapping.

mountinfo lines (``proc(5)``): ``id parent major:minor root mountpoint
options [optional fields...] - fstype source super-options``. Paths are
octal-escaped (``\\040`` for a space). The mount of a path is the *last* mount
whose mount point is the longest prefix of it: later mounts hide earlier ones
on the same directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fabricwatch.errors import ParseError

from ._mountstats import NFS_FSTYPES, unescape

_MIN_FIELDS = 10  # 6 before the separator, "-", fstype, source, super options


@dataclass(frozen=True, slots=True)
class MountEntry:
    """One mountinfo line."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str
    mountpoint: str
    fstype: str
    source: str

    @property
    def dev(self) -> str:
        """``major:minor`` as diskstats and ``st_dev`` know it."""
        return f"{self.major}:{self.minor}"

    @property
    def is_nfs(self) -> bool:
        """NFS mounts are served from ``mountstats``, not ``diskstats``."""
        return self.fstype in NFS_FSTYPES


@dataclass(frozen=True, slots=True)
class MountinfoParse:
    """Mounts in file order and the lines that could not be parsed."""

    mounts: tuple[MountEntry, ...]
    errors: tuple[ParseError, ...]


def parse_line(line: str, *, source: str = "mountinfo", lineno: int | None = None) -> MountEntry:
    """Parse one mountinfo line; raise :class:`ParseError` naming what is wrong."""
    parts = line.split()
    try:
        sep = parts.index("-", 6)
    except ValueError:
        msg = f"no ' - ' separator after the optional fields: {line.strip()[:80]!r}"
        raise ParseError(msg, source=source, line=lineno) from None
    if len(parts) < _MIN_FIELDS or len(parts) < sep + 3:
        msg = f"expected at least {_MIN_FIELDS} fields, got {len(parts)}: {line.strip()[:80]!r}"
        raise ParseError(msg, source=source, line=lineno)
    major, colon, minor = parts[2].partition(":")
    if not colon:
        msg = f"device {parts[2][:20]!r} is not major:minor"
        raise ParseError(msg, source=source, line=lineno)
    try:
        ids = int(parts[0]), int(parts[1]), int(major), int(minor)
    except ValueError:
        msg = f"mount/device ids are not integers: {' '.join(parts[:3])[:60]!r}"
        raise ParseError(msg, source=source, line=lineno) from None
    mountpoint = unescape(parts[4])
    if not mountpoint.startswith("/"):
        msg = f"mount point {mountpoint[:60]!r} is not absolute"
        raise ParseError(msg, source=source, line=lineno)
    return MountEntry(
        *ids,
        root=unescape(parts[3]),
        mountpoint=mountpoint,
        fstype=parts[sep + 1],
        source=unescape(parts[sep + 2]),
    )


def parse_mountinfo(text: str, *, source: str = "mountinfo") -> MountinfoParse:
    """Parse the whole file; bad lines become errors, good lines are kept."""
    mounts: list[MountEntry] = []
    errors: list[ParseError] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            mounts.append(parse_line(line, source=source, lineno=i))
        except ParseError as exc:
            errors.append(exc)
    return MountinfoParse(tuple(mounts), tuple(errors))


def _contains(mountpoint: str, path: str) -> bool:
    if mountpoint == "/":
        return True
    return path == mountpoint or path.startswith(mountpoint + "/")


def find_mount(mounts: tuple[MountEntry, ...], path: str) -> MountEntry | None:
    """The mount a normalised absolute ``path`` lives on (None if nothing matches)."""
    best: MountEntry | None = None
    for m in mounts:
        # ">=": a later mount on the same directory hides the earlier one.
        if _contains(m.mountpoint, path) and (
            best is None or len(m.mountpoint) >= len(best.mountpoint)
        ):
            best = m
    return best


def resolve_path(path: str) -> str:
    """Canonical absolute form of ``path`` following symlinks of its existing part.

    A checkpoint directory that does not exist yet maps to the mount of its
    nearest existing ancestor: that is where it would be created.
    """
    p = PurePosixPath(os.path.abspath(path))  # noqa: PTH100 - lexical; resolve() would stat
    missing: list[str] = []
    while not Path(p).exists() and p != p.parent:
        missing.append(p.name)
        p = p.parent
    real = PurePosixPath(os.path.realpath(p))
    for part in reversed(missing):
        real /= part
    return str(real)
