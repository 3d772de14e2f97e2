"""Prometheus exposition of the snapshot store and the daemon's own health.

A custom ``prometheus_client`` Collector builds fresh metric families from the
store on every scrape: no I/O, no instrumented objects mutated behind the
scrape's back, and no stale label values left over from departed devices.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector

from fabricwatch import __version__
from fabricwatch.readings import MetricKind
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState


@dataclass(slots=True)
class ReloadStatus:
    """Outcome of the latest config (re)load, for the ``config_last_reload_*`` metrics."""

    successful: bool = True
    success_timestamp: float = 0.0


def _fmt_bound(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))


class StoreExporter:
    """prometheus_client Collector over the snapshot store."""

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

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
                h = HistogramMetricFamily(name, spec.help, labels=labels)
                for s in series:
                    hv = s.histogram
                    if hv is None:
                        continue
                    buckets = [(_fmt_bound(b), c) for b, c in hv.buckets]
                    if not buckets or buckets[-1][0] != "+Inf":
                        buckets.append(("+Inf", hv.count))
                    h.add_metric(list(s.labels), buckets, hv.sum)
                yield h
            else:
                g = GaugeMetricFamily(name, spec.help, labels=labels)
                for s in series:
                    g.add_metric(list(s.labels), s.value)
                yield g


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


def build_registry(
    store: SnapshotStore,
    states: Callable[[], Sequence[CollectorState]],
    reload: ReloadStatus,
    *,
    process_metrics: bool = True,
) -> CollectorRegistry:
    """A fresh, non-global registry with the daemon's exporters."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SelfExporter(states, reload))
    registry.register(StoreExporter(store))
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry
