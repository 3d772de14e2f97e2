"""The active write probe: write a small file, fsync it, delete it, time each step.

The I/O runs in a daemon thread of its own: a hung filer can block a thread in
``open``, ``write`` or ``fsync`` for minutes (uninterruptibly, on a frozen file
system or a hard NFS mount), so the event loop only ever looks at a finished
flag. A probe still running past its timeout is reported once as a timeout and
no second probe is started behind it until it returns.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fabricwatch.readings import HistogramValue

PROBE_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
)  # fmt: skip
"""Histogram upper bounds in seconds: 1 ms (local NVMe) to 60 s (the stall rule)."""

REASONS = ("enospc", "erofs", "eio", "timeout", "permission", "other")
"""Failure reasons, as in ``docs/signals.md``."""

_CHUNK = 4 << 20
_ALIGN = 4096
_REASON_BY_ERRNO = {
    errno.ENOSPC: "enospc",
    errno.EDQUOT: "enospc",
    errno.EROFS: "erofs",
    errno.EIO: "eio",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.ETIMEDOUT: "timeout",
}


def classify(exc: OSError) -> str:
    """Map an OS error to a failure reason of :data:`REASONS`."""
    return _REASON_BY_ERRNO.get(exc.errno or 0, "other")


def probe_filename(node: str, name: str) -> str:
    """A hidden file name stable per node and path: a crashed run leaves one file at most."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{node}.{name}")
    return f".fabricwatch-probe.{safe}"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Outcome of one probe; phase times in seconds (0 for phases not reached).

    Attributes:
        latency: open + write + fsync, what a checkpoint writer waits for.
        reason: None on success, else one of :data:`REASONS`.
        error: the OS error text on failure.
        free_bytes / size_bytes: ``statvfs`` of the directory when it worked.
    """

    latency: float
    open_s: float = 0.0
    write_s: float = 0.0
    fsync_s: float = 0.0
    unlink_s: float = 0.0
    reason: str | None = None
    error: str = ""
    free_bytes: int | None = None
    size_bytes: int | None = None


def aligned_buffer(size: int) -> mmap.mmap:
    """An anonymous, page-aligned buffer (O_DIRECT needs alignment) of random bytes.

    Random content keeps compressing or deduplicating filers from
    short-cutting the write.
    """
    buf = mmap.mmap(-1, max(size, _ALIGN))
    buf.write(os.urandom(max(size, _ALIGN)))
    return buf


def write_probe(
    directory: Path, filename: str, size: int, buf: mmap.mmap, *, direct: bool
) -> ProbeResult:
    """Run one probe synchronously (in a worker thread)."""
    clock = time.perf_counter
    target = directory / filename
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    if direct:
        flags |= os.O_DIRECT
    phases = [0.0, 0.0, 0.0, 0.0]
    step = 0
    t0 = clock()
    fd = -1
    try:
        fd = os.open(target, flags, 0o600)
        t1 = clock()
        phases[0], step = t1 - t0, 1
        view = memoryview(buf)
        left = size
        while left > 0:
            chunk = min(left, len(buf))
            written = os.write(fd, view[:chunk])
            if written <= 0:
                raise OSError(errno.EIO, "write returned 0")
            left -= written
        t2 = clock()
        phases[1], step = t2 - t1, 2
        os.fsync(fd)
        t3 = clock()
        phases[2], step = t3 - t2, 3
        os.close(fd)
        fd = -1
        target.unlink()
        phases[3] = clock() - t3
        st = os.statvfs(directory)
    except OSError as exc:
        phases[step] = clock() - t0 - sum(phases[:step])
        if fd >= 0:
            os.close(fd)
        if step > 0:
            # The probe error is the news; a leftover file is overwritten next time.
            with contextlib.suppress(OSError):
                target.unlink(missing_ok=True)
        return ProbeResult(
            sum(phases[:3]),
            phases[0],
            phases[1],
            phases[2],
            phases[3],
            reason=classify(exc),
            error=f"{exc.strerror or exc}",
        )
    return ProbeResult(
        sum(phases[:3]),
        phases[0],
        phases[1],
        phases[2],
        phases[3],
        free_bytes=st.f_bavail * st.f_frsize,
        size_bytes=st.f_blocks * st.f_frsize,
    )


class Histogram:
    """A cumulative latency histogram the collector owns (not thread-shared)."""

    __slots__ = ("_bounds", "_counts", "count", "sum")

    def __init__(self, bounds: tuple[float, ...] = PROBE_BUCKETS) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Add one observation (seconds)."""
        self._counts[bisect_left(self._bounds, value)] += 1
        self.count += 1
        self.sum += value

    def value(self) -> HistogramValue:
        """The cumulative state, ``+Inf`` bucket included."""
        out: list[tuple[float, float]] = []
        acc = 0
        for bound, c in zip((*self._bounds, float("inf")), self._counts, strict=True):
            acc += c
            out.append((bound, float(acc)))
        return HistogramValue(tuple(out), float(self.count), self.sum)


@dataclass(slots=True)
class _Job:
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    result: ProbeResult | None = None
    timed_out: bool = False


@dataclass(slots=True)
class ProbeState:
    """What a path's probe has seen so far (read by the collector each cycle)."""

    histogram: Histogram = field(default_factory=Histogram)
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    last_latency: float | None = None
    last: ProbeResult | None = None
    completed: int = 0
    stuck: bool = False


class ProbeRunner:
    """Schedules one path's probes; drive it with :meth:`poll` from the event loop.

    Not thread-safe: ``poll`` runs on the loop; the worker thread only writes
    its own job's ``result`` and then sets ``done``.
    """

    def __init__(
        self,
        directory: Path,
        filename: str,
        *,
        size: int,
        interval: float,
        timeout: float,
        direct: bool,
        on_error: Callable[[ProbeResult], None] | None = None,
    ) -> None:
        self.directory = directory
        self.filename = filename
        self.size = size
        self.interval = interval
        self.timeout = timeout
        self.direct = direct
        self.state = ProbeState()
        self._on_error = on_error
        self._buf: mmap.mmap | None = None
        self._job: _Job | None = None
        self._next = float("-inf")
        self.threads_started = 0

    def _run(self, job: _Job, buf: mmap.mmap) -> None:
        try:
            job.result = write_probe(
                self.directory, self.filename, self.size, buf, direct=self.direct
            )
        except Exception as exc:  # noqa: BLE001 - a thread must report, never die silently
            job.result = ProbeResult(0.0, reason="other", error=f"{type(exc).__name__}: {exc}")
        finally:
            job.done.set()

    def poll(self, now: float) -> None:
        """Harvest a finished probe, flag a stuck one, start the next when due."""
        st = self.state
        job = self._job
        if job is not None and job.done.is_set():
            self._job = None
            res = job.result
            if res is not None and not job.timed_out:
                self._record(res)
            st.stuck = False
            job = None
        if job is not None and not job.timed_out and now - job.started >= self.timeout:
            job.timed_out = True
            st.stuck = True
            st.failures["timeout"] += 1
            st.last_latency = self.timeout
            st.histogram.observe(self.timeout)
        if job is None and now >= self._next:
            self._start(now)

    def _record(self, res: ProbeResult) -> None:
        st = self.state
        st.last = res
        st.completed += 1
        if res.reason is None:
            st.last_latency = res.latency
            st.histogram.observe(res.latency)
        else:
            st.failures[res.reason] += 1
            if self._on_error is not None:
                self._on_error(res)

    def _start(self, now: float) -> None:
        if self._buf is None:
            self._buf = aligned_buffer(min(self.size, _CHUNK))
        job = _Job(now)
        self._job = job
        self._next = now + self.interval
        self.threads_started += 1
        # A daemon thread, not an executor: a thread stuck in the kernel must
        # neither hold a pool slot nor keep the interpreter from exiting.
        threading.Thread(
            target=self._run, args=(job, self._buf), name=f"fw-probe-{self.filename}", daemon=True
        ).start()

    @property
    def running(self) -> bool:
        """A probe thread is out (possibly stuck)."""
        return self._job is not None

    def close(self) -> None:
        """Forget the running job; its thread finishes (or stays stuck) on its own."""
        self._job = None
