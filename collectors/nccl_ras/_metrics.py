"""Metric families of the NCCL RAS collector."""

from __future__ import annotations

from fabricwatch import signals as fam
from fabricwatch.readings import MetricKind, MetricSpec

NAME = "nccl_ras"
"""Registry name: the ``[collectors.nccl_ras]`` table and the ``collector`` label."""

MISSING_SHOWN = fam.NCCL_RAS_MISSING_SHOWN
"""Most missing ranks exported by host and GPU (bounds the series count)."""

COMMS = MetricSpec(
    "fabricwatch_nccl_ras_communicators",
    MetricKind.GAUGE,
    "NCCL communicators the job's RAS network reports.",
)
RANKS = MetricSpec(
    "fabricwatch_nccl_ras_ranks",
    MetricKind.GAUGE,
    "Ranks over all communicators, by state: responding, missing, unresponsive, dead.",
    ("state",),
)
MISSING = fam.NCCL_RAS_MISSING
UP = MetricSpec(
    "fabricwatch_nccl_ras_up",
    MetricKind.GAUGE,
    "1 when the RAS port answered the latest status query, else 0 (no NCCL job running).",
)
METRICS: tuple[MetricSpec, ...] = (COMMS, RANKS, MISSING, UP)
