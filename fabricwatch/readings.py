"""Values that flow from collectors into the pipeline.

A collector declares its metric families once (:class:`MetricSpec`) and then
returns plain :class:`Reading` values each cycle. Readings carry label *values*
in the order of the spec's ``labels``: it keeps the hot path free of dicts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

METRIC_PREFIX = "fabricwatch_"


class MetricKind(enum.Enum):
    """How a family is exported and how the pipeline treats its values."""

    GAUGE = "gauge"
    """A value that can go up and down; stored as is."""
    COUNTER = "counter"
    """A monotonically increasing device counter; the pipeline turns it into rates."""
    HISTOGRAM = "histogram"
    """A histogram the collector accumulates itself (see :class:`HistogramValue`)."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """Declaration of one metric family.

    Attributes:
        name: full exported name with the ``fabricwatch_`` prefix; counters
            without the ``_total`` suffix (the exposition adds it).
        kind: gauge, counter or histogram.
        help: HELP text, in base units.
        labels: label names, in the order readings give their values.
        bits: counter width (32 or 64) used for wrap detection.
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    bits: int = 64

    def __post_init__(self) -> None:
        if not self.name.startswith(METRIC_PREFIX):
            msg = f"metric {self.name!r} must start with {METRIC_PREFIX!r}"
            raise ValueError(msg)
        if self.kind is MetricKind.COUNTER and self.name.endswith("_total"):
            msg = f"counter {self.name!r}: declare it without '_total', the exposition adds it"
            raise ValueError(msg)
        if self.bits not in (32, 64):
            msg = f"metric {self.name!r}: bits must be 32 or 64"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """Cumulative histogram state: ``buckets`` are (upper bound, cumulative count)."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float


class Reading(NamedTuple):
    """One sample of one series.

    A NamedTuple rather than a dataclass: collectors create thousands per
    second and tuple construction is about three times cheaper.

    Attributes:
        name: the family's :attr:`MetricSpec.name`.
        labels: label values, in the order of :attr:`MetricSpec.labels`.
        value: the sample (a counter's raw value for counters).
        ts: monotonic time of the sample if the collector knows it better
            than the pipeline (e.g. the moment an SNMP response arrived).
        epoch: discontinuity token for counters: when it changes (device
            reboot, ``ifCounterDiscontinuityTime``), the tracker treats the
            next value as a reset instead of a delta.
        histogram: the histogram state for histogram families.
    """

    name: str
    labels: tuple[str, ...]
    value: float
    ts: float | None = None
    epoch: int | None = None
    histogram: HistogramValue | None = None
