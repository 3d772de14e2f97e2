"""Prometheus exposition of the snapshot store and the daemon's own health.

A custom ``prometheus_client`` Collector builds fresh metric families from the
store on every scrape: no I/O, no instrumented objects mutated behind the
scrape's back, and no stale label values left over from departed devices.

The text format Prometheus scrapes by default (0.0.4) takes a faster path,
:func:`generate_text`: each series' escaped, sorted labels are rendered once
and cached on the series, so a scrape costs one value formatting per series.
It writes the same bytes as ``prometheus_client.generate_latest`` (a test
compares them); OpenMetrics and negotiated escapings go through
``prometheus_client``.
"""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.exposition import choose_encoder as _choose_encoder
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from fabricwatch import __version__
from fabricwatch.readings import MetricKind, MetricSpec
from fabricwatch.store import Series, SnapshotStore
from fabricwatch.supervisor import CollectorState

_INF = math.inf

_go_float = cast(Callable[[float], str], floatToGoString)
"""prometheus_client's value formatting (untyped upstream)."""


@dataclass(slots=True)
class ReloadStatus:
    """Outcome of the latest config (re)load, for the ``config_last_reload_*`` metrics."""

    successful: bool = True
    success_timestamp: float = 0.0


def _fmt_bound(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))


def _escape_value(v: str) -> str:
    # prometheus_client's label-value escaping in the text format.
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _header(name: str, kind: str, help_text: str) -> str:
    doc = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _labels_text(spec: MetricSpec, values: Sequence[str]) -> str:
    """``{a="x",b="y"} `` with labels sorted by name, as prometheus_client writes them
    after the sample name (a space alone without labels).

    Interned: the series of every family with these labels share one string (a
    switch port's labels are those of ~5 families; 4 x 512-port switches have
    ~105 000 series and ~55 000 label texts). The interpreter drops an interned
    string with its last series.
    """
    if not values:
        return " "
    pairs = sorted(zip(spec.labels, values, strict=True))
    text = ",".join(f'{k}="{_escape_value(v)}"' for k, v in pairs)
    return sys.intern(f"{{{text}}} ")


class _Exporter(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class _One:
    """One exporter as a registry for ``generate_latest``."""

    def __init__(self, exporter: _Exporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterable[Metric]:
        return self._exporter.collect()


class StoreExporter:
    """prometheus_client Collector over the snapshot store."""

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store
        # Per family: the HELP/TYPE header, rendered once.
        self._headers: dict[str, str] = {}

    def render_text(self) -> bytes:
        """The store's families in the 0.0.4 text format (same text as ``generate_latest``).

        Encoded family by family: a scrape holds one family's lines at a time, not
        every line (~100 000 for 4 x 512-port switches, ~15 MB as str) next to
        their join and its encoding.
        """
        specs = self._store.specs()
        chunks: list[bytes] = []
        headers = self._headers
        go_float = _go_float
        for name in sorted(specs):
            spec = specs[name]
            series = self._store.family(name)
            if not series:
                continue
            kind = spec.kind
            if kind is MetricKind.HISTOGRAM:
                chunks.append(generate_latest(_One(_Histograms(spec, series))))
                continue
            header = headers.get(name)
            sample_name = name + "_total" if kind is MetricKind.COUNTER else name
            if header is None:
                header = headers[name] = _header(sample_name, kind.value, spec.help)
            lines = [header]
            add = lines.append
            for s in series:
                text = s.text_labels
                if text is None:
                    text = s.text_labels = _labels_text(spec, s.labels)
                v = s.value
                # floatToGoString is repr() for a float below 1e6 that is not -Inf
                # or NaN (Go's exponent form starts at 1e6): most values, without
                # the call.
                if v.__class__ is float and -_INF < v < 1e6:
                    add(f"{sample_name}{text}{v!r}\n")
                else:
                    add(f"{sample_name}{text}{go_float(v)}\n")
            chunks.append("".join(lines).encode("utf-8"))
        return b"".join(chunks)

    def describe(self) -> Iterable[Metric]:
        """Nothing at registration: families are dynamic."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Families in name order, series in insertion order."""
        specs = self._store.specs()
        for name in sorted(specs):
            spec = specs[name]
            series = self._store.family(name)
            if not series:
                continue
            labels = list(spec.labels)
            if spec.kind is MetricKind.COUNTER:
                c = CounterMetricFamily(name, spec.help, labels=labels)
                for s in series:
                    c.add_metric(list(s.labels), s.value)
                yield c
            elif spec.kind is MetricKind.HISTOGRAM:
                yield from _Histograms(spec, series).collect()
            else:
                g = GaugeMetricFamily(name, spec.help, labels=labels)
                for s in series:
                    g.add_metric(list(s.labels), s.value)
                yield g


class _Histograms:
    """One histogram family of the store as a prometheus_client family."""

    def __init__(self, spec: MetricSpec, series: Sequence[Series]) -> None:
        self._spec = spec
        self._series = series

    def collect(self) -> Iterator[Metric]:
        spec = self._spec
        h = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels))
        for s in self._series:
            hv = s.histogram
            if hv is None:
                continue
            buckets = [(_fmt_bound(b), c) for b, c in hv.buckets]
            if not buckets or buckets[-1][0] != "+Inf":
                buckets.append(("+Inf", hv.count))
            h.add_metric(list(s.labels), buckets, hv.sum)
        yield h


class SelfExporter:
    """The daemon's own health: build info, collector health, config reloads."""

    def __init__(
        self,
        states: Callable[[], Sequence[CollectorState]],
        reload: ReloadStatus,
    ) -> None:
        self._states = states
        self._reload = reload

    def describe(self) -> Iterable[Metric]:
        """Nothing at registration: families are dynamic."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Build info, per-collector health and reload status."""
        info = GaugeMetricFamily(
            "fabricwatch_build_info",
            "A metric with a constant 1 labelled by the fabricwatch version and Python version.",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        states = self._states()
        up = GaugeMetricFamily(
            "fabricwatch_collector_up",
            "1 if the collector's latest collection succeeded, else 0.",
            labels=["collector"],
        )
        dur = GaugeMetricFamily(
            "fabricwatch_collector_duration_seconds",
            "Duration of the collector's latest collection attempt.",
            labels=["collector"],
        )
        last = GaugeMetricFamily(
            "fabricwatch_collector_last_success_timestamp_seconds",
            "Unix time of the collector's latest successful collection "
            "(values are cached between scrapes by design).",
            labels=["collector"],
        )
        fails = CounterMetricFamily(
            "fabricwatch_collector_failures",
            "Failed collection or start attempts by reason.",
            labels=["collector", "reason"],
        )
        rejected = CounterMetricFamily(
            "fabricwatch_collector_rejected_readings",
            "Readings dropped as malformed (wrong labels, NaN, undeclared family).",
            labels=["collector"],
        )
        dropped = CounterMetricFamily(
            "fabricwatch_collector_dropped_series_readings",
            "Readings dropped because they would add a series beyond "
            "store.max_series_per_collector.",
            labels=["collector"],
        )
        for s in states:
            dropped.add_metric([s.name], s.series_dropped)
            up.add_metric([s.name], 1.0 if s.up else 0.0)
            dur.add_metric([s.name], s.last_duration)
            last.add_metric([s.name], s.last_success_wall)
            rejected.add_metric([s.name], s.rejected_readings)
            for reason, n in sorted(s.failures.items()):
                fails.add_metric([s.name, reason], n)
        yield from (up, dur, last, fails, rejected, dropped)
        ok = GaugeMetricFamily(
            "fabricwatch_config_last_reload_successful",
            "Whether the last configuration reload attempt was successful.",
        )
        ok.add_metric([], 1.0 if self._reload.successful else 0.0)
        yield ok
        ts = GaugeMetricFamily(
            "fabricwatch_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration reload.",
        )
        ts.add_metric([], self._reload.success_timestamp)
        yield ts


class ExporterRegistry(CollectorRegistry):
    """A registry that remembers its exporters in order, for :func:`generate_text`."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.exporters: list[_Exporter] = []

    def register(self, collector: _Exporter) -> None:
        """Register ``collector`` (and remember it, in order)."""
        super().register(collector)
        self.exporters.append(collector)

    def unregister(self, collector: _Exporter) -> None:
        """Unregister ``collector``."""
        super().unregister(collector)
        self.exporters.remove(collector)


def generate_text(registry: CollectorRegistry) -> bytes:
    """The 0.0.4 text exposition: ``generate_latest``'s bytes, the store's part from cache."""
    if not isinstance(registry, ExporterRegistry):
        return generate_latest(registry)
    parts: list[bytes] = []
    for exporter in registry.exporters:
        if isinstance(exporter, StoreExporter):
            parts.append(exporter.render_text())
        else:
            parts.append(generate_latest(_One(exporter)))
    return b"".join(parts)


def choose_encoder(accept_header: str) -> tuple[Callable[[CollectorRegistry], bytes], str]:
    """``prometheus_client``'s content negotiation, with :func:`generate_text` for 0.0.4 text."""
    encoder, content_type = _choose_encoder(accept_header)
    if encoder is generate_latest and content_type == CONTENT_TYPE_PLAIN_0_0_4:
        return generate_text, content_type
    return encoder, content_type


def build_registry(
    store: SnapshotStore,
    states: Callable[[], Sequence[CollectorState]],
    reload: ReloadStatus,
    *,
    process_metrics: bool = True,
) -> CollectorRegistry:
    """A fresh, non-global registry with the daemon's exporters."""
    registry = ExporterRegistry()
    registry.register(SelfExporter(states, reload))
    registry.register(StoreExporter(store))
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry
