"""``fabricwatch probe-storage``: an on-demand checkpoint rehearsal.

Writes ``--size`` bytes to PATH in large sequential writes (optionally in
parallel streams and with ``O_DIRECT``), fsyncs, and reports the sustained
rate and per-write latency. Given a model size it answers the question that
matters before a run: how long would a checkpoint take at this rate, and does
it land within the budget (the seed's rule: under a minute, or GPUs stall)?

Exit codes: 0 measured (and fits the budget, if a model was given), 1 the
checkpoint would not fit the budget, 2 usage or I/O error, 130 interrupted.
Its files live in a hidden temporary directory under PATH that is removed
even on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from fabricwatch.errors import ExitCode
from fabricwatch.settings import parse_duration, parse_size

SCHEMA = "fabricwatch.probe-storage/v1"
_ALIGN = 4096
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*$")
_COUNT_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_JOIN_GRACE = 30.0


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        msg = f"must be more than 0 bytes, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        msg = f"must be more than 0 s, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def parse_count(text: str) -> float:
    """``"175e9"``, ``"175B"``, ``"7b"``, ``"1.5T"``, ``"350M"`` -> a parameter count."""
    m = _COUNT.match(text)
    if not m:
        msg = f"expected a parameter count like 175e9, 70B or 1.5T, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    value = float(m.group(1)) * _COUNT_SCALE[m.group(2).lower()]
    if not value > 0 or not math.isfinite(value):
        msg = f"parameter count must be positive, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        msg = f"expected a number, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not value > 0 or not math.isfinite(value):
        msg = f"must be a positive number, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _streams(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        msg = f"expected an integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 1 <= value <= 256:
        msg = f"streams must be 1-256, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add PATH and every option of ``probe-storage`` to ``parser``."""
    parser.description = (
        "Rehearse a checkpoint: write SIZE to PATH with large sequential writes and fsync, "
        "report sustained GB/s and per-write latency, and (with --params) whether a "
        "checkpoint of that model lands within the budget."
    )
    parser.epilog = (
        "Exit codes: 0 measured (and the checkpoint fits the budget, with --params), "
        "1 the checkpoint does not fit the budget, 2 usage or I/O error (PATH missing, "
        "not enough free space, a write failed), 130 interrupted."
    )
    parser.add_argument("path", metavar="PATH", type=Path, help="directory to test (must exist)")
    parser.add_argument(
        "--size", type=_size, default=_size("10GiB"), help="bytes to write in total (10GiB)"
    )
    parser.add_argument(
        "--block-size", type=_size, default=_size("16MiB"), help="bytes per write call (16MiB)"
    )
    parser.add_argument(
        "--streams", type=_streams, default=1, help="parallel writers, one file each (1)"
    )
    parser.add_argument("--direct", action="store_true", help="write with O_DIRECT")
    parser.add_argument(
        "--fsync-every",
        type=_size,
        default=None,
        help="also fsync after every this many bytes per stream (default: only at the end)",
    )
    parser.add_argument(
        "--params", type=parse_count, default=None, help="model parameters (175e9, 70B)"
    )
    parser.add_argument(
        "--bytes-per-param",
        type=_positive_float,
        default=14.0,
        help="checkpoint bytes per parameter: 14 = bf16 weights + fp32 master + Adam (14)",
    )
    parser.add_argument(
        "--budget", type=_duration, default=60.0, help="time a checkpoint may take (60s)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


@dataclass(slots=True)
class _Stream:
    path: Path
    target: int
    written: int = 0
    latencies: list[float] = field(default_factory=list)
    fsyncs: list[float] = field(default_factory=list)
    error: OSError | None = None


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM while writing."""


def _write_stream(
    s: _Stream,
    buf: mmap.mmap,
    *,
    block: int,
    direct: bool,
    fsync_every: int,
    stop: threading.Event,
) -> None:
    clock = time.perf_counter
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
    view = memoryview(buf)
    try:
        fd = os.open(s.path, flags, 0o600)
    except OSError as exc:
        s.error = exc
        stop.set()
        return
    try:
        since_sync = 0
        while s.written < s.target and not stop.is_set():
            n = min(block, s.target - s.written)
            t0 = clock()
            w = os.write(fd, view[:n])
            s.latencies.append(clock() - t0)
            if w <= 0:
                raise OSError(5, "write returned 0")
            s.written += w
            since_sync += w
            if fsync_every and since_sync >= fsync_every:
                t0 = clock()
                os.fsync(fd)
                s.fsyncs.append(clock() - t0)
                since_sync = 0
        if not stop.is_set():
            t0 = clock()
            os.fsync(fd)
            s.fsyncs.append(clock() - t0)
    except OSError as exc:
        s.error = exc
        stop.set()
    finally:
        os.close(fd)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an ascending list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C so the files are removed either way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _describe_mount(path: Path) -> dict[str, str]:
    from fabricwatch.collectors.storage._mounts import find_mount, parse_mountinfo, resolve_path

    try:
        text = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    m = find_mount(parse_mountinfo(text).mounts, resolve_path(str(path)))
    if m is None:
        return {}
    return {"mountpoint": m.mountpoint, "fstype": m.fstype, "source": m.source}


def _plan(args: argparse.Namespace) -> tuple[list[int], int]:
    """Bytes per stream and the block size (aligned for O_DIRECT)."""
    block: int = args.block_size
    per = args.size // args.streams
    if args.direct:
        block = max(_ALIGN, block - block % _ALIGN)
        per -= per % _ALIGN
    sizes = [per] * args.streams
    if not args.direct:
        sizes[-1] += args.size - per * args.streams
    return sizes, block


def _measure(args: argparse.Namespace, workdir: Path, err: TextIO) -> tuple[list[_Stream], float]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    sizes, block = _plan(args)
    streams = [_Stream(workdir / f"stream-{i}", n) for i, n in enumerate(sizes)]
    buf = mmap.mmap(-1, block)
    buf.write(os.urandom(block))  # incompressible: filers must not short-cut it
    stop = threading.Event()
    fsync_every = args.fsync_every or 0
    threads = [
        threading.Thread(
            target=_write_stream,
            args=(s, buf),
            kwargs={
                "block": block,
                "direct": args.direct,
                "fsync_every": fsync_every,
                "stop": stop,
            },
            name=f"probe-storage-{i}",
            daemon=True,
        )
        for i, s in enumerate(streams)
    ]
    show = not args.json and not args.no_progress and err.isatty()
    progress = Progress(
        TextColumn("[bold]writing"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(file=err),
        disable=not show,
        transient=True,
    )
    total = sum(sizes)
    t0 = time.perf_counter()
    try:
        with progress:
            task = progress.add_task("write", total=total)
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.1)
                progress.update(task, completed=sum(s.written for s in streams))
    except KeyboardInterrupt:
        stop.set()
        deadline = time.monotonic() + _JOIN_GRACE
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        raise _Interrupted from None
    return streams, time.perf_counter() - t0


def _report(
    args: argparse.Namespace, streams: list[_Stream], seconds: float, where: dict[str, str]
) -> dict[str, Any]:
    written = sum(s.written for s in streams)
    rate = written / seconds if seconds > 0 else 0.0
    lat = sorted(x for s in streams for x in s.latencies)
    fs = [x for s in streams for x in s.fsyncs]
    _, block = _plan(args)
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "path": str(args.path),
        **where,
        "requested_bytes": args.size,
        "bytes_written": written,
        "seconds": seconds,
        "bytes_per_second": rate,
        "gb_per_second": rate / 1e9,
        "streams": args.streams,
        "block_size": block,
        "direct": bool(args.direct),
        "fsync_every": args.fsync_every,
        "write_latency_seconds": {
            "count": len(lat),
            "p50": _quantile(lat, 0.50),
            "p99": _quantile(lat, 0.99),
            "max": lat[-1] if lat else 0.0,
            "mean": sum(lat) / len(lat) if lat else 0.0,
        },
        "fsync_seconds": {"count": len(fs), "total": sum(fs), "max": max(fs, default=0.0)},
        "checkpoint": None,
    }
    if args.params is not None:
        ckpt = args.params * args.bytes_per_param
        secs = ckpt / rate if rate > 0 else math.inf
        out["checkpoint"] = {
            "params": args.params,
            "bytes_per_param": args.bytes_per_param,
            "bytes": ckpt,
            "seconds": secs if math.isfinite(secs) else None,
            "budget_seconds": args.budget,
            "fits": secs <= args.budget,
            "budget_ratio": secs / args.budget if math.isfinite(secs) else None,
        }
    return out


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, as ``--size`` takes them."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - loop always returns


def _human(r: dict[str, Any]) -> str:
    b = human_bytes
    where = f" ({r['fstype']} on {r['source']})" if "fstype" in r else ""
    mode = "O_DIRECT" if r["direct"] else "buffered"
    lat = r["write_latency_seconds"]
    lines = [
        f"probe-storage {r['path']}{where}",
        f"  wrote       {b(r['bytes_written'])} in {r['seconds']:.2f} s: {r['streams']} "
        f"stream(s), {b(r['block_size'])} writes, {mode} + fsync",
        f"  sustained   {r['gb_per_second']:.3f} GB/s",
        f"  write       p50 {lat['p50'] * 1e3:.2f} ms  p99 {lat['p99'] * 1e3:.2f} ms  "
        f"max {lat['max'] * 1e3:.2f} ms  ({lat['count']} writes)",
        f"  fsync       {r['fsync_seconds']['total']:.3f} s total "
        f"({r['fsync_seconds']['count']} calls)",
    ]
    c = r["checkpoint"]
    if c is not None:
        secs = c["seconds"]
        took = "never (nothing written)" if secs is None else f"{secs:,.1f} s"
        verdict = "FITS" if c["fits"] else "DOES NOT FIT"
        ratio = "" if c["budget_ratio"] is None else f" ({c['budget_ratio']:.2f}x the budget)"
        lines.append(
            f"  checkpoint  {c['params']:.3g} params x {c['bytes_per_param']:g} B = "
            f"{b(c['bytes'])} -> {took} at this rate; budget "
            f"{c['budget_seconds']:g} s: {verdict}{ratio}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the rehearsal described by parsed ``args``; return the exit code."""
    err = sys.stderr
    path: Path = args.path
    if not path.is_dir():
        print(f"probe-storage: {path} is not an existing directory", file=err)
        return ExitCode.USAGE
    try:
        st = os.statvfs(path)
    except OSError as exc:
        print(f"probe-storage: cannot stat {path}: {exc.strerror}", file=err)
        return ExitCode.USAGE
    free = st.f_bavail * st.f_frsize
    if args.size > free:
        print(
            f"probe-storage: {path} has {human_bytes(free)} free, --size asks for "
            f"{human_bytes(args.size)}; "
            "pass a smaller --size",
            file=err,
        )
        return ExitCode.USAGE
    try:
        workdir = Path(tempfile.mkdtemp(prefix=".fabricwatch-probe-storage-", dir=path))
    except OSError as exc:
        print(f"probe-storage: cannot create files in {path}: {exc.strerror}", file=err)
        return ExitCode.USAGE
    try:
        with _sigterm_as_interrupt():
            streams, seconds = _measure(args, workdir, err)
    except (_Interrupted, KeyboardInterrupt):
        print("probe-storage: interrupted; files removed", file=err)
        return ExitCode.INTERRUPTED
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = next((s.error for s in streams if s.error is not None), None)
    if failed is not None:
        print(f"probe-storage: write failed: {failed.strerror or failed}", file=err)
        return ExitCode.USAGE
    report = _report(args, streams, seconds, _describe_mount(path))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_human(report))
    c = report["checkpoint"]
    return ExitCode.FAILURE if c is not None and not c["fits"] else ExitCode.OK
