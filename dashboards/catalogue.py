"""The exporter's metric catalogue, taken from a real ``/metrics`` scrape.

Every collector of :func:`fabricwatch.collectors.builtin_registry` (built with
its factory's default settings; ``start()`` is never called, so no device is
needed) and the correlation engine declare their families in a
:class:`~fabricwatch.store.SnapshotStore`. Each family gets one plausible
reading, the daemon's real HTTP endpoint serves the store on a loopback port,
and the scrape is parsed with ``prometheus_client``'s parser. Nothing is
listed by hand: a collector registered tomorrow is in tomorrow's catalogue.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch.collector import CollectorEnv
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.web import WebServer
from fabricwatch.readings import HistogramValue, MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState
from fabricwatch.webconfig import WebConfig

ENGINE = "engine"
FLEET = "fleet"
"""Collector name under which the engine's families are registered."""

ENGINE_FAMILIES = (
    "fabricwatch_gpu_stalled",
    "fabricwatch_incidents_opened",
    "fabricwatch_stall_gpu_seconds",
    "fabricwatch_stall_cost",
)
"""Engine families that rules and dashboards rely on; missing ones are an error."""

SCRAPE_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
"""Series Prometheus itself adds to every target at scrape time."""

_LABEL_VALUES: Mapping[str, str] = {
    "gpu": "0",
    "link": "0",
    "xid": "79",
    "type": "crc",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "model": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:18:00.0",
    "job_id": "slurm:1234",
    "switch": "leaf-01",
    "port": "swp12",
    "priority": "3",
    "direction": "rx",
    "queue": "3",
    "device": "mlx5_0",
    "path": "checkpoints",
    "reason": "timeout",
    "cause": "pfc_storm",
    "clique": "00000000-0000-0000-0000-000000000000.1",
    "fabric_state": "completed",
    "level": "warning",
}


class CatalogueError(RuntimeError):
    """The catalogue cannot be built (a collector or the engine is missing or broken)."""


@dataclass(frozen=True, slots=True)
class Family:
    """One exported family as scraped.

    Attributes:
        name: family name as the parser reports it (counters without ``_total``).
        kind: ``gauge``, ``counter``, ``histogram``...
        labels: label names of its samples (``le`` excluded).
        samples: sample names (``_total``, ``_bucket``, ``_sum``, ``_count``...).
        owner: the collector (or ``engine``/``daemon``) that declares it.
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    samples: frozenset[str]
    owner: str


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Families from the scrape plus recording-rule names.

    Attributes:
        families: family name -> :class:`Family`.
        recording_rules: names of recording rules (queryable like metrics).
        exposition: the scraped text, for debugging and ``promtool check metrics``.
    """

    families: Mapping[str, Family]
    recording_rules: frozenset[str]
    exposition: str

    def names(self) -> frozenset[str]:
        """Every queryable series name: samples, recording rules, scrape series."""
        out: set[str] = set(self.recording_rules) | SCRAPE_SERIES
        for fam in self.families.values():
            out |= fam.samples
        return frozenset(out)

    def family_of(self, sample: str) -> Family | None:
        """The family a sample name belongs to, or None."""
        for fam in self.families.values():
            if sample in fam.samples:
                return fam
        return None


def plausible_labels(labels: Sequence[str]) -> tuple[str, ...]:
    """Label values that look like real ones (``gpu="0"``, ``priority="3"``...)."""
    return tuple(_LABEL_VALUES.get(name, "x") for name in labels)


def sample_reading(spec: MetricSpec, value: float = 1.0) -> Reading:
    """One reading of ``spec`` with plausible labels (histograms get buckets)."""
    hist = None
    if spec.kind is MetricKind.HISTOGRAM:
        hist = HistogramValue(
            buckets=((0.01, 1.0), (0.1, 2.0), (1.0, 3.0), (float("inf"), 3.0)),
            count=3.0,
            sum=0.6,
        )
    return Reading(spec.name, plausible_labels(spec.labels), value, histogram=hist)


def declared_specs(state_dir: Path | None = None) -> dict[str, Sequence[MetricSpec]]:
    """Collector/engine name -> the families it declares.

    Collectors are built with their factory's default settings and an
    environment pointing at an empty temporary tree; their ``start()`` is not
    called. Raises :class:`CatalogueError` when a collector cannot even be
    built or the engine's families are missing.
    """
    from fabricwatch.collectors import builtin_registry

    out: dict[str, Sequence[MetricSpec]] = {}
    with tempfile.TemporaryDirectory(prefix="fabricwatch-catalogue-") as tmp:
        root = Path(tmp) if state_dir is None else state_dir
        env = CollectorEnv(
            node="catalogue-node",
            proc_root=root / "proc",
            sys_root=root / "sys",
            state_dir=root / "state",
        )
        for name, factory in sorted(builtin_registry().items()):
            try:
                collector = factory.build(factory.settings(), env)
                out[name] = tuple(collector.metrics())
            except Exception as exc:
                msg = f"collector {name!r} cannot be built with default settings: {exc!r}"
                raise CatalogueError(msg) from exc
    out[ENGINE] = engine_specs()
    from fabricwatch.outputs.alerting import METRICS as ALERTING_METRICS

    out["alerting"] = ALERTING_METRICS
    from fabricwatch.engine.db import STATE_METRICS

    out["state"] = STATE_METRICS
    # The fleet aggregator's own families: its job panels query them.
    from fabricwatch.fleet.api import FLEET_METRICS
    from fabricwatch.fleet.ledger import LEDGER_METRICS

    out[FLEET] = (*FLEET_METRICS, *LEDGER_METRICS)
    return out


def engine_specs() -> Sequence[MetricSpec]:
    """The engine's families (with cost accounting on, so every family shows)."""
    try:
        from fabricwatch.engine import Engine, EngineSettings
    except ImportError as exc:
        msg = f"the correlation engine is not importable: {exc}"
        raise CatalogueError(msg) from exc
    engine = Engine(EngineSettings(cost_per_gpu_hour=1.0), SnapshotStore(), "catalogue-node")
    specs = tuple(engine.metrics())
    missing = sorted(set(ENGINE_FAMILIES) - {s.name for s in specs})
    if missing:
        msg = f"the engine does not declare {', '.join(missing)}"
        raise CatalogueError(msg)
    return specs


def populated_store(specs: Mapping[str, Sequence[MetricSpec]]) -> SnapshotStore:
    """A store with every family registered and fed one plausible reading."""
    store = SnapshotStore()
    for owner, fams in specs.items():
        store.register(owner, fams)
        result = store.ingest(owner, [sample_reading(s) for s in fams], now=1.0)
        if result.rejected:
            msg = f"{owner}: the store rejected sample readings: {result.reasons}"
            raise CatalogueError(msg)
    return store


def collector_states(names: Iterable[str]) -> list[CollectorState]:
    """Healthy-looking supervisor states with one failure each (so every self family shows)."""
    return [
        CollectorState(
            name=n,
            up=True,
            started=True,
            first_attempt_done=True,
            last_duration=0.01,
            last_success_wall=1.0,
            failures={"timeout": 1},
            collections=1,
        )
        for n in names
        if n != ENGINE
    ]


async def _scrape(store: SnapshotStore, states: list[CollectorState]) -> str:
    registry = build_registry(store, lambda: states, ReloadStatus(), process_metrics=True)
    server = WebServer(registry, lambda: True, WebConfig())
    await server.start("127.0.0.1", 0)
    try:
        timeout = aiohttp.ClientTimeout(total=10)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"http://127.0.0.1:{server.port}/metrics") as resp,
        ):
            resp.raise_for_status()
            return await resp.text()
    finally:
        await server.stop()


def recording_rule_names(rules_file: Path) -> frozenset[str]:
    """Names of the recording rules in a Prometheus rules file."""
    doc = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    return frozenset(
        str(rule["record"])
        for group in doc.get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    )


def parse_exposition(text: str, owners: Mapping[str, str]) -> dict[str, Family]:
    """Families of an exposition text, with their owners (``daemon`` when undeclared)."""
    families: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        labels: set[str] = set()
        samples: set[str] = set()
        for s in fam.samples:
            samples.add(s.name)
            labels |= set(s.labels) - {"le", "quantile"}
        families[fam.name] = Family(
            fam.name,
            fam.type,
            tuple(sorted(labels)),
            frozenset(samples),
            owners.get(fam.name, "daemon"),
        )
    return families


def build_catalogue(rules_file: Path | None = None) -> Catalogue:
    """Scrape the real exporter over every declared family; add recording rules."""
    specs = declared_specs()
    store = populated_store(specs)
    states = collector_states(specs)
    text = asyncio.run(_scrape(store, states))
    owners = {s.name: owner for owner, fams in specs.items() for s in fams}
    families = parse_exposition(text, owners)
    missing = sorted(n for n in owners if n not in families)
    if missing:
        msg = f"declared but not exported: {', '.join(missing)}"
        raise CatalogueError(msg)
    rules = recording_rule_names(rules_file) if rules_file is not None else frozenset()
    return Catalogue(families, rules, text)


def markdown(cat: Catalogue) -> str:
    """The catalogue as the Markdown table of ``docs/metrics.md``."""
    rows: list[tuple[str, str, str, str, str]] = []
    for fam in text_string_to_metric_families(cat.exposition):
        if fam.name.startswith(("process_", "python_")):
            continue
        known = cat.families[fam.name]
        name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        labels = ", ".join(known.labels)
        help_text = fam.documentation.replace("|", "\\|")
        rows.append((known.owner, name, fam.type, labels, help_text))
    lines = [
        "# Metric catalogue",
        "",
        "Every family the daemon exports (and, source `fleet`, the fleet aggregator),",
        "taken from a real scrape of the exporter",
        "(`dashboards/catalogue.py`); regenerate with",
        "`python -m dashboards.catalogue > docs/metrics.md` (a test keeps it current).",
        "Plus the standard `process_*` families.",
        "",
        "| source | metric | type | labels | help |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {o} | `{n}` | {t} | {lb} | {h} |" for o, n, t, lb, h in sorted(rows)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown(build_catalogue()))
