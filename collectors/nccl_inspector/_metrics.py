"""Metric families of the NCCL Inspector collector."""

from __future__ import annotations

from fabricwatch import signals as fam
from fabricwatch.readings import MetricKind, MetricSpec

NAME = "nccl_inspector"
"""Registry name: the ``[collectors.nccl_inspector]`` table and the ``collector`` label."""

_LABELS = ("gpu", "collective")

BUS_BW = fam.NCCL_BUS_BW
ALGO_BW = MetricSpec(
    "fabricwatch_nccl_algorithm_bandwidth_bytes_per_second",
    MetricKind.GAUGE,
    "Algorithm bandwidth of the GPU's latest completed NCCL collective (NCCL Inspector).",
    _LABELS,
)
EXEC_TIME = MetricSpec(
    "fabricwatch_nccl_collective_seconds",
    MetricKind.GAUGE,
    "Execution time of the GPU's latest completed NCCL collective (NCCL Inspector).",
    _LABELS,
)
RANKS = MetricSpec(
    "fabricwatch_nccl_communicator_ranks",
    MetricKind.GAUGE,
    "Ranks of the largest communicator the GPU's latest collective ran in.",
    ("gpu",),
)
FILES = MetricSpec(
    "fabricwatch_nccl_inspector_files",
    MetricKind.GAUGE,
    "Inspector dump files read in the latest collection, by outcome (ok, invalid).",
    ("outcome",),
)
METRICS: tuple[MetricSpec, ...] = (BUS_BW, ALGO_BW, EXEC_TIME, RANKS, FILES)
