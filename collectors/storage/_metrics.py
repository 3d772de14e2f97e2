"""Metric families of the storage collector: the checkpoint-path families of the
signals contract (:mod:`fabricwatch.signals`), then block-device, NFS and health ones."""

from __future__ import annotations

from fabricwatch.readings import MetricKind, MetricSpec
from fabricwatch.signals import (
    ST_PROBE_FAIL,
    ST_PROBE_HIST,
    ST_PROBE_LAST,
    ST_WRITE_BURST,
    ST_WRITE_BYTES,
    ST_WRITE_LAT,
    ST_WRITE_OPS,
)

NAME = "storage"
G, C, H = MetricKind.GAUGE, MetricKind.COUNTER, MetricKind.HISTOGRAM
_P = ("path",)
_D = ("device",)
_N = ("mountpoint", "op")


def _s(name: str, kind: MetricKind, help: str, labels: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(f"fabricwatch_storage_{name}", kind, help, labels)


# --- checkpoint paths (names and labels fixed by docs/signals.md) ----------------
PROBE_PHASE = _s(
    "probe_phase_seconds",
    G,
    "Latest probe's time per phase: open, write, fsync, unlink.",
    ("path", "phase"),
)
PROBE_STUCK = _s("probe_stuck", G, "1 while a probe is still blocked past its timeout.", _P)
WRITE_WINDOW = _s("write_window_bytes", G, "Bytes written during the burst window.", _P)
WRITE_BASELINE = _s(
    "write_baseline_bytes_per_second", G, "Median write rate over the baseline window.", _P
)
PATH_INFO = _s(
    "path_info",
    G,
    "Where a checkpoint path lives (=1).",
    ("path", "mountpoint", "fstype", "source"),
)
FREE_BYTES = _s("free_bytes", G, "Space available to unprivileged writers on the path.", _P)
SIZE_BYTES = _s("size_bytes", G, "Size of the file system holding the path.", _P)

# --- block devices ----------------------------------------------------------------
DEV_READS = _s("device_reads_completed", C, "Reads completed by the block device.", _D)
DEV_READ_BYTES = _s("device_read_bytes", C, "Bytes read by the block device.", _D)
DEV_WRITES = _s("device_writes_completed", C, "Writes completed by the block device.", _D)
DEV_WRITE_BYTES = _s("device_written_bytes", C, "Bytes written by the block device.", _D)
DEV_WRITE_TIME = _s(
    "device_write_time_seconds", C, "Time spent on writes (summed over requests).", _D
)
DEV_IO_TIME = _s("device_io_time_seconds", C, "Time the device had I/O in flight.", _D)
DEV_FLUSHES = _s("device_flushes_completed", C, "Flush requests completed (kernel 5.5+).", _D)
DEV_FLUSH_TIME = _s("device_flush_time_seconds", C, "Time spent on flushes (kernel 5.5+).", _D)
DEV_IN_FLIGHT = _s("device_io_in_progress", G, "I/Os currently in flight.", _D)
DEV_WRITE_LATENCY = _s(
    "device_write_latency_seconds",
    G,
    "Average write latency over the last interval; 0 when no write completed.",
    _D,
)
DEV_FLUSH_LATENCY = _s(
    "device_flush_latency_seconds",
    G,
    "Average flush latency over the last interval; 0 when no flush completed.",
    _D,
)
DEV_UTIL = _s("device_utilization_ratio", G, "Share of the last interval with I/O in flight.", _D)
DEV_BURST = _s("device_write_burst", G, "1 while writes exceed their baseline by the factor.", _D)
DEV_WINDOW = _s("device_write_window_bytes", G, "Bytes written during the burst window.", _D)

# --- NFS mounts -----------------------------------------------------------------
NFS_OPS = _s("nfs_operations", C, "NFS RPC operations completed.", _N)
NFS_SENT = _s("nfs_sent_bytes", C, "Bytes sent for the operation (requests, data for WRITE).", _N)
NFS_RECEIVED = _s(
    "nfs_received_bytes", C, "Bytes received for the operation (replies, data for READ).", _N
)
NFS_RETRANS = _s("nfs_retransmissions", C, "RPC transmissions beyond the first.", _N)
NFS_TIMEOUTS = _s("nfs_timeouts", C, "RPC major timeouts.", _N)
NFS_ERRORS = _s("nfs_errors", C, "Operations that completed with an error (iostats 1.1+).", _N)
NFS_RTT = _s(
    "nfs_rtt_seconds", G, "Average RPC round trip per operation over the last interval.", _N
)
NFS_EXECUTE = _s(
    "nfs_execute_seconds",
    G,
    "Average execute time (queue + round trip) per operation over the last interval.",
    _N,
)
NFS_INFO = _s(
    "nfs_mount_info", G, "An NFS mount (=1).", ("mountpoint", "export", "version", "proto")
)

# --- the collector's own health -------------------------------------------------
SOURCE_UP = _s("source_up", G, "1 when the source file was read and parsed.", ("source",))
PARSE_ERRORS = _s("parse_errors", C, "Lines that could not be parsed, by source.", ("source",))

METRICS: tuple[MetricSpec, ...] = (
    ST_PROBE_HIST, ST_PROBE_LAST, ST_PROBE_FAIL, PROBE_PHASE, PROBE_STUCK,
    ST_WRITE_LAT, ST_WRITE_BYTES, ST_WRITE_OPS, ST_WRITE_BURST, WRITE_WINDOW, WRITE_BASELINE,
    PATH_INFO,
    FREE_BYTES, SIZE_BYTES,
    DEV_READS, DEV_READ_BYTES, DEV_WRITES, DEV_WRITE_BYTES, DEV_WRITE_TIME, DEV_IO_TIME,
    DEV_FLUSHES, DEV_FLUSH_TIME, DEV_IN_FLIGHT, DEV_WRITE_LATENCY, DEV_FLUSH_LATENCY, DEV_UTIL,
    DEV_BURST, DEV_WINDOW,
    NFS_OPS, NFS_SENT, NFS_RECEIVED, NFS_RETRANS, NFS_TIMEOUTS, NFS_ERRORS, NFS_RTT,
    NFS_EXECUTE, NFS_INFO,
    SOURCE_UP, PARSE_ERRORS,
)  # fmt: skip
