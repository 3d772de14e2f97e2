"""Values that flow from collectors into the pipeline.

A collector declares its metric families once (:class:`MetricSpec`) and then
returns plain :class:`Reading` values each cycle. Readings carry label *values*
in the order of the spec's ``labels``: it keeps the hot path free of dicts.

A collector with many series of one family (NVLink per link) may hand them
over as :class:`Columns` inside a :class:`Batch`: one labels tuple and one
list of values per family and cycle instead of a reading per series. A batch
is still a sequence of readings to every other reader; the store takes the
columns whole (one lookup per family, rates by
:class:`~fabricwatch.counters.FamilyCounters`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

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


@dataclass(slots=True)
class Columns:
    """One family's samples of one cycle: ``values[i]`` is the sample of series ``labels[i]``.

    Not frozen, though no reader changes one: a frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``, which made a ``Columns``
    cost about four times as much (one per family and cycle).

    Attributes:
        name: the family's :attr:`MetricSpec.name`.
        labels: each series' label values. Hand the store the *same tuple
            object* every cycle while the family's series stay the same (see
            :meth:`ColumnsBuilder.columns`): the store then finds its series by
            one identity check instead of a lookup per series.
        values: the samples (counters: raw values), in the order of ``labels``.
        epoch: discontinuity token of every series (see :attr:`Reading.epoch`).
        epochs: each series' own token instead, in the order of ``labels``.
        ts: monotonic time of the samples, if the collector knows it better
            than the pipeline (see :attr:`Reading.ts`).
        source: which of the collector's sources the samples are of, when one
            collector feeds a family from several (a switch per target, each
            with its own poll time): the store keeps each source's series apart.
    """

    name: str
    labels: tuple[tuple[str, ...], ...]
    values: Sequence[float]
    epoch: int | None = None
    epochs: Sequence[int | None] | None = None
    ts: float | None = None
    source: str = ""

    def readings(self) -> Iterator[Reading]:
        """The same samples as single readings."""
        name, epoch, epochs, ts = self.name, self.epoch, self.epochs, self.ts
        for i, (labels, value) in enumerate(zip(self.labels, self.values, strict=True)):
            yield Reading(name, labels, value, ts, epoch if epochs is None else epochs[i])


class ColumnsBuilder:
    """Makes one family's :class:`Columns` cycle after cycle, keeping the labels tuple
    object while the series are the same ones (cheap when the caller reuses its
    label tuples: they compare by identity)."""

    __slots__ = ("_labels", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._labels: tuple[tuple[str, ...], ...] = ()

    def columns(
        self,
        labels: list[tuple[str, ...]],
        values: Sequence[float],
        epoch: int | None = None,
        epochs: Sequence[int | None] | None = None,
        *,
        ts: float | None = None,
        source: str = "",
    ) -> Columns:
        """This cycle's columns of the family (``epochs``, ``ts``, ``source``: see
        :class:`Columns`)."""
        now = tuple(labels)
        # Tuples of the same label tuples compare by identity, item by item, in C.
        if now != self._labels:
            self._labels = now
        return Columns(self.name, self._labels, values, epoch, epochs, ts, source)


class Batch(Sequence[Reading]):
    """One collection's readings: single :class:`Reading` values plus whole families
    as :class:`Columns`.

    To everything but the store it is the sequence of readings it stands for
    (single readings first, then each family's series in order).
    """

    __slots__ = ("_flat", "columns", "readings")

    def __init__(self, readings: list[Reading], columns: list[Columns]) -> None:
        self.readings = readings
        self.columns = columns
        self._flat: list[Reading] | None = None

    def _all(self) -> list[Reading]:
        flat = self._flat
        if flat is None:
            flat = self._flat = list(self.readings)
            for c in self.columns:
                flat.extend(c.readings())
        return flat

    def __len__(self) -> int:
        return len(self.readings) + sum(len(c.values) for c in self.columns)

    def __iter__(self) -> Iterator[Reading]:
        return iter(self._all())

    @overload
    def __getitem__(self, index: int) -> Reading: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Reading]: ...
    def __getitem__(self, index: int | slice) -> Reading | Sequence[Reading]:
        return self._all()[index]
