"""The storage collector: block devices, NFS mounts, checkpoint paths and probes."""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import structlog

from fabricwatch.collector import CollectorEnv
from fabricwatch.counters import CounterState, CounterTracker
from fabricwatch.errors import CollectorError, ParseError
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.signals import (
    ST_PROBE_FAIL,
    ST_PROBE_HIST,
    ST_PROBE_LAST,
    ST_WRITE_BURST,
    ST_WRITE_BYTES,
    ST_WRITE_LAT,
    ST_WRITE_OPS,
)

from ._burst import BurstDetector, BurstSettings, BurstState
from ._diskstats import SECTOR_BYTES, DiskStats, parse_diskstats
from ._metrics import (
    DEV_BURST,
    DEV_FLUSH_LATENCY,
    DEV_FLUSH_TIME,
    DEV_FLUSHES,
    DEV_IN_FLIGHT,
    DEV_IO_TIME,
    DEV_READ_BYTES,
    DEV_READS,
    DEV_UTIL,
    DEV_WINDOW,
    DEV_WRITE_BYTES,
    DEV_WRITE_LATENCY,
    DEV_WRITE_TIME,
    DEV_WRITES,
    FREE_BYTES,
    METRICS,
    NAME,
    NFS_ERRORS,
    NFS_EXECUTE,
    NFS_INFO,
    NFS_OPS,
    NFS_RECEIVED,
    NFS_RETRANS,
    NFS_RTT,
    NFS_SENT,
    NFS_TIMEOUTS,
    PARSE_ERRORS,
    PATH_INFO,
    PROBE_PHASE,
    PROBE_STUCK,
    SIZE_BYTES,
    SOURCE_UP,
    WRITE_BASELINE,
    WRITE_WINDOW,
)
from ._mounts import MountEntry, find_mount, parse_mountinfo, resolve_path
from ._mountstats import NfsMount, parse_mountstats
from ._probe import REASONS, ProbeResult, ProbeRunner, probe_filename
from ._settings import CheckpointPath, StorageSettings

SOURCES = ("diskstats", "mountinfo", "mountstats")

# diskstats fields tracked as counters, with their widths: the time fields are
# ``unsigned int`` milliseconds in the kernel and wrap at 2^32 on every kernel.
_READS, _RSECT, _WRITES, _WSECT, _WMS, _IOMS, _FLUSH, _FLMS = range(8)
_BITS = (64, 64, 64, 64, 32, 32, 64, 32)
_NFS_RTT, _NFS_EXE, _NFS_N = 0, 1, 2


def _dev_raw(d: DiskStats) -> tuple[int | None, ...]:
    return (
        d.reads, d.read_sectors, d.writes, d.write_sectors, d.write_ms, d.io_ms,
        d.flushes, d.flush_ms,
    )  # fmt: skip


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


@dataclass(slots=True)
class _Dev:
    """State of one block device while it is present and looked at.

    ``counters`` are the per-field :class:`~fabricwatch.counters.CounterState`
    of the collector's tracker settings, held here to skip a dict lookup per
    field per device per cycle.
    """

    dev: str
    gen: int
    burst: BurstDetector
    counters: list[CounterState | None] = field(default_factory=lambda: [None] * len(_BITS))
    totals: list[float | None] = field(default_factory=list)
    prev: list[float | None] | None = None
    prev_ts: float = 0.0
    write_latency: float | None = None
    flush_latency: float | None = None
    util: float | None = None
    state: BurstState | None = None


@dataclass(slots=True)
class _Nfs:
    mount_id: int | None
    prev: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    write_latency: float | None = None


@dataclass(slots=True)
class _Path:
    cfg: CheckpointPath
    resolved: str
    runner: ProbeRunner | None
    mount: MountEntry | None = None
    source_key: tuple[object, ...] | None = None
    epoch: int = 0
    burst: BurstDetector | None = None  # NFS paths; block paths use the device's


class StorageCollector:
    """Per-device diskstats, per-mount NFS stats, per-path mapping, probes and bursts.

    Block-device counters are exported as running totals unwrapped by the
    collector's own :class:`~fabricwatch.counters.CounterTracker`: their time
    fields are 32-bit milliseconds, and converting them to seconds would hide
    the wrap from the pipeline. NFS counters are 64-bit and exported raw, with
    the mount id as epoch so a remount is a reset.
    """

    def __init__(self, settings: StorageSettings, env: CollectorEnv) -> None:
        self._s = settings
        self._env = env
        self._log = structlog.get_logger("fabricwatch.collectors.storage").bind(collector=NAME)
        self._tracker = CounterTracker()
        self._bs = BurstSettings(
            window=settings.burst_window,
            baseline_window=settings.baseline_window,
            factor=settings.burst_factor,
            min_rate=settings.burst_min_rate,
        )
        self._exclude = re.compile(settings.device_exclude)
        self._nfs_ops = frozenset(settings.nfs_ops)
        self._devs: dict[str, _Dev] = {}
        self._gens: dict[str, int] = {}
        self._partition: dict[tuple[str, str], bool] = {}
        self._nfs: dict[str, _Nfs] = {}
        self._mounts: tuple[MountEntry, ...] = ()
        self._next_remap = float("-inf")
        self._errors = dict.fromkeys(SOURCES, 0)
        self._up = dict.fromkeys(SOURCES, 0.0)
        self._last_error: dict[str, str] = {}
        self._paths = [self._make_path(p) for p in settings.paths]

    def _make_path(self, p: CheckpointPath) -> _Path:
        runner = None
        if p.probe:
            runner = ProbeRunner(
                p.path,
                probe_filename(self._env.node, p.name),
                size=p.probe_size,
                interval=p.probe_interval,
                timeout=p.probe_timeout,
                direct=p.o_direct,
                on_error=functools.partial(self._probe_failed, p.name),
            )
        return _Path(p, os.path.normpath(str(p.path)), runner)

    @property
    def name(self) -> str:
        """Registry name."""
        return NAME

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return METRICS

    async def start(self) -> None:
        """Resolve symlinks of the paths (off the loop: a hung mount blocks stat) and map them."""
        for p in self._paths:
            try:
                p.resolved = await asyncio.wait_for(
                    asyncio.to_thread(resolve_path, str(p.cfg.path)), timeout=p.cfg.probe_timeout
                )
            except (TimeoutError, OSError) as exc:
                self._log.warning("path_resolve_failed", path=p.cfg.name, error=str(exc))
        if not self._paths and not (self._env.proc_root / "diskstats").is_file():
            msg = f"{self._env.proc_root / 'diskstats'} is missing and no paths are configured"
            raise CollectorError(msg)

    async def close(self) -> None:
        """Let go of probe threads (a stuck one finishes on its own)."""
        for p in self._paths:
            if p.runner is not None:
                p.runner.close()

    # -- reading -------------------------------------------------------------------

    def _read(self, source: str, path: Path) -> str | None:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self._fail(source, f"cannot read {path}: {exc.strerror or exc}")
            return None
        return text

    def _fail(self, source: str, message: str) -> None:
        self._up[source] = 0.0
        # Log a problem when it starts or changes, not every second.
        if self._last_error.get(source) != message:
            self._last_error[source] = message
            self._log.warning("storage_source_error", source=source, error=message)

    def _parsed(self, source: str, errors: Sequence[ParseError], good: int) -> None:
        self._errors[source] += len(errors)
        if errors and not good:
            self._fail(source, str(errors[0]))
            return
        if errors:
            msg = str(errors[0])
            if self._last_error.get(source) != msg:
                self._last_error[source] = msg
                self._log.warning(
                    "storage_parse_error", source=source, error=msg, lines=len(errors)
                )
        else:
            self._last_error.pop(source, None)
        self._up[source] = 1.0

    # -- one cycle -----------------------------------------------------------------

    async def collect(self) -> Sequence[Reading]:
        """Read the proc files, derive latencies and bursts, harvest and start probes."""
        now = self._env.monotonic()
        out: list[Reading] = []
        if now >= self._next_remap:
            self._remap()
            self._next_remap = now + self._s.remap_interval
        disks = self._collect_disks(now, out)
        nfs = self._collect_nfs(now, out)
        for p in self._paths:
            self._collect_path(p, now, disks, nfs, out)
        for src in SOURCES:
            out.append(Reading(SOURCE_UP.name, (src,), self._up[src]))
            out.append(Reading(PARSE_ERRORS.name, (src,), float(self._errors[src])))
        return out

    def _remap(self) -> None:
        text = self._read("mountinfo", self._env.proc_root / "self" / "mountinfo")
        if text is None:
            return
        parsed = parse_mountinfo(text, source=str(self._env.proc_root / "self" / "mountinfo"))
        self._parsed("mountinfo", parsed.errors, len(parsed.mounts))
        if parsed.mounts:
            self._mounts = parsed.mounts
        for p in self._paths:
            p.mount = find_mount(self._mounts, p.resolved)

    def _collect_disks(self, now: float, out: list[Reading]) -> dict[str, _Dev]:
        path = self._env.proc_root / "diskstats"
        text = self._read("diskstats", path)
        if text is None:
            return {}
        parsed = parse_diskstats(text, source=str(path))
        self._parsed("diskstats", parsed.errors, len(parsed.devices))
        if not parsed.devices:
            return {}
        wanted: set[str] = set()
        for p in self._paths:
            if p.mount is not None and not p.mount.is_nfs:
                wanted.add(p.mount.dev)
                wanted.add(PurePosixPath(p.mount.source).name)
        seen: dict[str, _Dev] = {}
        present: set[str] = set()
        for d in parsed.devices:
            if d.name in present:
                continue  # a duplicate line is garbage; the first one counts
            present.add(d.name)
            export = self._exported(d)
            backs_path = d.dev in wanted or d.name in wanted
            # Devices nobody looks at (partitions, idle loops) cost nothing.
            if not export and not backs_path:
                continue
            st = self._update_dev(d, now)
            seen[d.name] = st
            if backs_path:
                seen[d.dev] = st
            if export:
                self._emit_dev(d, st, out)
        for name in [n for n in self._devs if n not in seen]:
            self._devs.pop(name, None)
        if len(self._partition) > len(present):
            self._partition = {k: v for k, v in self._partition.items() if k[0] in present}
        return seen

    def _is_partition(self, d: DiskStats) -> bool:
        key = (d.name, d.dev)
        part = self._partition.get(key)
        if part is None:
            part = (self._env.sys_root / "dev" / "block" / d.dev / "partition").exists()
            self._partition[key] = part
        return part

    def _exported(self, d: DiskStats) -> bool:
        if self._exclude.search(d.name):
            return False
        if not self._s.include_partitions and self._is_partition(d):
            return False
        return self._s.include_idle or d.reads > 0 or d.writes > 0

    def _update_dev(self, d: DiskStats, now: float) -> _Dev:
        st = self._devs.get(d.name)
        if st is None or st.dev != d.dev:
            gen = self._gens.get(d.name, 0) + 1
            self._gens[d.name] = gen
            st = _Dev(d.dev, gen, BurstDetector(self._bs))
            self._devs[d.name] = st
        tuning = self._tracker.settings
        totals: list[float | None] = []
        counters = st.counters
        for i, v in enumerate(_dev_raw(d)):
            if v is None:
                totals.append(None)
                continue
            cs = counters[i]
            if cs is None:
                counters[i] = CounterState(v, now, st.gen)
                totals.append(float(v))
            else:
                cs.update(v, now, tuning, bits=_BITS[i], epoch=st.gen)
                totals.append(cs.total)
        prev = st.prev
        if prev is not None and now > st.prev_ts:
            dw = _delta(totals, prev, _WRITES)
            st.write_latency = _ratio(_delta(totals, prev, _WMS), dw) / 1000.0
            st.util = min(1.0, _delta(totals, prev, _IOMS) / 1000.0 / (now - st.prev_ts))
            if totals[_FLUSH] is not None and prev[_FLUSH] is not None:
                df = _delta(totals, prev, _FLUSH)
                st.flush_latency = _ratio(_delta(totals, prev, _FLMS), df) / 1000.0
        st.totals = totals
        st.prev = totals
        st.prev_ts = now
        wsect = totals[_WSECT]
        if wsect is not None:
            st.state = st.burst.update(now, wsect * SECTOR_BYTES)
        return st

    def _emit_dev(self, d: DiskStats, st: _Dev, out: list[Reading]) -> None:
        lab = (d.name,)
        t = st.totals
        ep = st.gen
        for spec, idx, scale in (
            (DEV_READS, _READS, 1.0),
            (DEV_READ_BYTES, _RSECT, SECTOR_BYTES),
            (DEV_WRITES, _WRITES, 1.0),
            (DEV_WRITE_BYTES, _WSECT, SECTOR_BYTES),
            (DEV_WRITE_TIME, _WMS, 0.001),
            (DEV_IO_TIME, _IOMS, 0.001),
            (DEV_FLUSHES, _FLUSH, 1.0),
            (DEV_FLUSH_TIME, _FLMS, 0.001),
        ):
            v = t[idx]
            if v is not None:
                out.append(Reading(spec.name, lab, v * scale, epoch=ep))
        out.append(Reading(DEV_IN_FLIGHT.name, lab, float(d.in_flight)))
        if st.write_latency is not None:
            out.append(Reading(DEV_WRITE_LATENCY.name, lab, st.write_latency))
        if st.util is not None:
            out.append(Reading(DEV_UTIL.name, lab, st.util))
        if st.flush_latency is not None:
            out.append(Reading(DEV_FLUSH_LATENCY.name, lab, st.flush_latency))
        if st.state is not None:
            out.append(Reading(DEV_WINDOW.name, lab, st.state.window_bytes))
            out.append(Reading(DEV_BURST.name, lab, float(st.state.burst)))

    def _collect_nfs(self, now: float, out: list[Reading]) -> dict[str, NfsMount]:
        if not any(m.is_nfs for m in self._mounts):
            # No NFS mounted: mountstats has nothing for us; skip the read.
            self._up["mountstats"] = 1.0
            for mp in list(self._nfs):
                self._forget_nfs(mp)
            return {}
        path = self._env.proc_root / "self" / "mountstats"
        text = self._read("mountstats", path)
        if text is None:
            return {}
        parsed = parse_mountstats(text, source=str(path), ops=self._nfs_ops)
        self._parsed("mountstats", parsed.errors, len(parsed.mounts))
        ids = {m.mountpoint: m.mount_id for m in self._mounts if m.is_nfs}
        for mp, m in parsed.mounts.items():
            self._emit_nfs(mp, m, ids.get(mp), now, out)
        for mp in [mp for mp in self._nfs if mp not in parsed.mounts]:
            self._forget_nfs(mp)
        return parsed.mounts

    def _forget_nfs(self, mp: str) -> None:
        """An unmounted share's state goes, so memory follows the mount table."""
        self._nfs.pop(mp, None)
        for op in self._nfs_ops:
            for k in (_NFS_RTT, _NFS_EXE, _NFS_N):
                self._tracker.forget(("nfs", mp, op, k))

    def _emit_nfs(
        self, mp: str, m: NfsMount, mount_id: int | None, now: float, out: list[Reading]
    ) -> None:
        st = self._nfs.get(mp)
        if st is None or st.mount_id != mount_id:
            st = _Nfs(mount_id)
            self._nfs[mp] = st
        out.append(
            Reading(NFS_INFO.name, (mp, m.export, m.version, m.opts.get("proto", m.xprt)), 1.0)
        )
        for op in self._s.nfs_ops:
            o = m.ops.get(op)
            if o is None:
                continue
            lab = (mp, op)
            out.append(Reading(NFS_OPS.name, lab, float(o.ops), epoch=mount_id))
            out.append(Reading(NFS_SENT.name, lab, float(o.bytes_sent), epoch=mount_id))
            out.append(Reading(NFS_RECEIVED.name, lab, float(o.bytes_received), epoch=mount_id))
            out.append(Reading(NFS_RETRANS.name, lab, float(o.retransmissions), epoch=mount_id))
            out.append(Reading(NFS_TIMEOUTS.name, lab, float(o.timeouts), epoch=mount_id))
            if o.errors is not None:
                out.append(Reading(NFS_ERRORS.name, lab, float(o.errors), epoch=mount_id))
            # Interval averages from the tracker's totals: a remount resets them.
            tot = []
            for k, v in enumerate((o.rtt_ms, o.execute_ms, o.ops)):
                key = ("nfs", mp, op, k)
                self._tracker.update(key, v, now, epoch=mount_id)
                tot.append(self._tracker.total(key) or 0.0)
            prev = st.prev.get(op)
            st.prev[op] = (tot[0], tot[1], tot[2])
            if prev is None:
                continue
            n = tot[_NFS_N] - prev[_NFS_N]
            rtt = _ratio(tot[_NFS_RTT] - prev[_NFS_RTT], n) / 1000.0
            exe = _ratio(tot[_NFS_EXE] - prev[_NFS_EXE], n) / 1000.0
            out.append(Reading(NFS_RTT.name, lab, rtt))
            out.append(Reading(NFS_EXECUTE.name, lab, exe))
            if op == "WRITE":
                st.write_latency = exe

    def _collect_path(
        self,
        p: _Path,
        now: float,
        disks: dict[str, _Dev],
        nfs: dict[str, NfsMount],
        out: list[Reading],
    ) -> None:
        lab = (p.cfg.name,)
        m = p.mount
        if m is not None:
            dev = disks.get(m.dev) or disks.get(PurePosixPath(m.source).name)
            source = m.source
            key: tuple[object, ...] | None = None
            if m.is_nfs:
                nm = nfs.get(m.mountpoint)
                if nm is not None and nm.bytes is not None:
                    key = ("nfs", m.mountpoint, m.mount_id)
                    self._path_epoch(p, key)
                    if p.burst is None:
                        p.burst = BurstDetector(self._bs)
                    total = float(nm.bytes.server_write)
                    out.append(Reading(ST_WRITE_BYTES.name, lab, total, epoch=p.epoch))
                    op = nm.ops.get("WRITE")  # absent when nfs_ops leaves WRITE out
                    if op is not None:
                        out.append(Reading(ST_WRITE_OPS.name, lab, float(op.ops), epoch=p.epoch))
                    self._emit_burst(lab, p.burst.update(now, total), out)
                    ns = self._nfs.get(m.mountpoint)
                    if ns is not None and ns.write_latency is not None:
                        out.append(Reading(ST_WRITE_LAT.name, lab, ns.write_latency))
            elif dev is not None and dev.totals and dev.totals[_WSECT] is not None:
                source = next((n for n, d in self._devs.items() if d is dev), source)
                key = ("blk", dev.dev, dev.gen)
                self._path_epoch(p, key)
                wsect = dev.totals[_WSECT] or 0.0
                out.append(Reading(ST_WRITE_BYTES.name, lab, wsect * SECTOR_BYTES, epoch=p.epoch))
                writes = dev.totals[_WRITES]
                if writes is not None:
                    out.append(Reading(ST_WRITE_OPS.name, lab, writes, epoch=p.epoch))
                if dev.write_latency is not None:
                    out.append(Reading(ST_WRITE_LAT.name, lab, dev.write_latency))
                if dev.state is not None:
                    self._emit_burst(lab, dev.state, out)
            out.append(Reading(PATH_INFO.name, (*lab, m.mountpoint, m.fstype, source), 1.0))
        if p.runner is not None:
            self._collect_probe(p.runner, lab, now, out)

    def _path_epoch(self, p: _Path, key: tuple[object, ...]) -> None:
        if p.source_key is not None and p.source_key != key:
            p.epoch += 1
        p.source_key = key

    @staticmethod
    def _emit_burst(lab: tuple[str, ...], bs: BurstState, out: list[Reading]) -> None:
        out.append(Reading(WRITE_WINDOW.name, lab, bs.window_bytes))
        out.append(Reading(ST_WRITE_BURST.name, lab, float(bs.burst)))
        if bs.baseline is not None:
            out.append(Reading(WRITE_BASELINE.name, lab, bs.baseline))

    @staticmethod
    def _collect_probe(
        runner: ProbeRunner, lab: tuple[str, ...], now: float, out: list[Reading]
    ) -> None:
        runner.poll(now)
        st = runner.state
        out.append(Reading(ST_PROBE_HIST.name, lab, 0.0, histogram=st.histogram.value()))
        for reason in REASONS:
            out.append(Reading(ST_PROBE_FAIL.name, (*lab, reason), float(st.failures[reason])))
        out.append(Reading(PROBE_STUCK.name, lab, float(st.stuck)))
        if st.last_latency is not None:
            out.append(Reading(ST_PROBE_LAST.name, lab, st.last_latency))
        last = st.last
        if last is not None:
            for phase, v in (
                ("open", last.open_s),
                ("write", last.write_s),
                ("fsync", last.fsync_s),
                ("unlink", last.unlink_s),
            ):
                out.append(Reading(PROBE_PHASE.name, (*lab, phase), v))
            if last.free_bytes is not None:
                out.append(Reading(FREE_BYTES.name, lab, float(last.free_bytes)))
            if last.size_bytes is not None:
                out.append(Reading(SIZE_BYTES.name, lab, float(last.size_bytes)))

    def _probe_failed(self, name: str, res: ProbeResult) -> None:
        self._log.warning("storage_probe_failed", path=name, reason=res.reason, error=res.error)

    # -- for tests and benchmarks -----------------------------------------------------

    def probe_runner(self, name: str) -> ProbeRunner | None:
        """The probe runner of a configured path (None if it does not probe)."""
        return next((p.runner for p in self._paths if p.cfg.name == name), None)

    def path_mount(self, name: str) -> MountEntry | None:
        """The mount a configured path maps to, as of the last mountinfo read."""
        return next((p.mount for p in self._paths if p.cfg.name == name), None)


def _delta(now: list[float | None], prev: list[float | None], i: int) -> float:
    a, b = now[i], prev[i]
    return 0.0 if a is None or b is None else a - b
