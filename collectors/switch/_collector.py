"""The switch collector: per-target discovery, polling and signal derivation."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import truediv
from pathlib import Path
from typing import Any

import structlog

from fabricwatch import signals as fam
from fabricwatch.collector import CollectionFailedError, CollectorEnv
from fabricwatch.collectors.switchcommon.uplinks import find_uplinks, local_macs
from fabricwatch.counters import TrackerSettings
from fabricwatch.errors import CollectorError, ConfigError
from fabricwatch.readings import Batch, Columns, ColumnsBuilder, MetricSpec, Reading
from fabricwatch.secrets import read_secret

from . import _cbqos
from . import _metrics as sig
from ._ber import EncodedOids, Oid, Special, Value
from ._client import (
    BulkSize,
    NativeV2cSession,
    PysnmpSession,
    Session,
    SnmpError,
    V3Credentials,
    walk,
)
from ._lldp import LOC_OIDS, REM_OIDS, map_local_ports, parse_remote
from ._profiles import Profile, ProfileSet, Table, load_profiles
from ._rates import KeyedRates
from ._settings import SwitchSettings, TargetSettings

log = structlog.get_logger("fabricwatch.collectors.switch")

SYS_DESCR = (1, 3, 6, 1, 2, 1, 1, 1, 0)
SYS_OBJECT_ID = (1, 3, 6, 1, 2, 1, 1, 2, 0)
SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)
SYS_NAME = (1, 3, 6, 1, 2, 1, 1, 5, 0)
IF_DESCR = (1, 3, 6, 1, 2, 1, 2, 2, 1, 2)
IF_NAME = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1)
_IFT = (1, 3, 6, 1, 2, 1, 2, 2, 1)
_IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
IF_COLUMNS: dict[Oid, str] = {
    (*_IFT, 5): "if_speed",
    (*_IFT, 8): "oper",
    (*_IFT, 13): "in_discards",
    (*_IFT, 14): "in_errors",
    (*_IFT, 19): "out_discards",
    (*_IFT, 20): "out_errors",
    (*_IFX, 6): "in_octets",
    (*_IFX, 10): "out_octets",
    (*_IFX, 15): "speed",
    (*_IFX, 19): "disc",
}
_COLUMN_NAMES = {
    "if_speed": "ifSpeed",
    "oper": "ifOperStatus",
    "in_discards": "ifInDiscards",
    "in_errors": "ifInErrors",
    "out_discards": "ifOutDiscards",
    "out_errors": "ifOutErrors",
    "in_octets": "ifHCInOctets",
    "out_octets": "ifHCOutOctets",
    "speed": "ifHighSpeed",
    "disc": "ifCounterDiscontinuityTime",
}
IF_SPEED = (*_IFT, 5)
IF_SPEED_MAX = 2**32 - 1
"""ifSpeed (Gauge32, bit/s) pins here above 4.29 Gb/s: then only ifHighSpeed tells."""
LLDP_REM = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)
TABLES = ("pfc", "queue", "ecn", "lldp", "ifxtable")
"""The ``table`` label values of ``switch_table_present``."""
_PFC_SIGNALS = frozenset({"pfc_frames", "pfc_duration", "pfc_total_frames"})
POLL_REASONS = ("timeout", "auth", "malformed", "snmp_error", "too_big")
PAUSE_QUANTUM_BITS = 65535 * 512
"""Bit-times one PFC frame with the maximum quanta pauses a priority for."""
_UPTIME_WRAP_GUARD = 360_000  # 1 h in TimeTicks: a decrease from near 2^32 to near 0 is a wrap


@dataclass(slots=True)
class _PortData:
    values: dict[str, int] = field(default_factory=dict)
    # (signal, direction, sub) -> (value, table)
    counters: dict[tuple[str, str, int], tuple[int, Table]] = field(default_factory=dict)


@dataclass(slots=True)
class _Target:
    cfg: TargetSettings
    mode: str
    session: Session | None = None
    profile: Profile | None = None
    sys_name: str = ""
    if_names: dict[int, str] = field(default_factory=dict)
    if_descrs: dict[int, str] = field(default_factory=dict)
    ports: dict[int, str] = field(default_factory=dict)
    uplink_ports: dict[int, str] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    get_oids: EncodedOids = field(default_factory=EncodedOids)  # every poll GETs these (_plan)
    ecn_oids: tuple[Oid, ...] = ()  # the last of get_oids: the CBQoS ECN rows
    # What each of get_oids is; empty while only compiled polls came since discovery.
    poll_plan: list[_Plan] = field(default_factory=list)
    layout: _PollLayout | None = None  # where each port's values are (see _poll_layout)
    mixed: bool = False  # a poll since discovery was taken one by one (see _readings)
    discovered_at: float | None = None
    failures: int = 0
    next_attempt: float = 0.0
    boot: int = 0
    last_uptime: int | None = None
    oper: dict[int, int] = field(default_factory=dict)
    flaps: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POLL_REASONS, 0))
    last_duration: float = 0.0
    up: bool = False
    orphans: int = 0
    last_error: str = ""
    cbqos: dict[tuple[int, int], _cbqos.EcnRow] = field(default_factory=dict)
    present: dict[str, bool] = field(default_factory=dict)
    speeds: dict[int, float] = field(default_factory=dict)  # configured, bit/s by ifIndex
    missing_said: tuple[str, ...] | None = None
    label_cache: dict[int, _PortCache] = field(default_factory=dict)  # reset by discovery
    bulk: BulkSize = field(default_factory=BulkSize)  # the discovery walk's request size
    rates: dict[int, KeyedRates] = field(default_factory=dict)  # derived gauges' counters
    builders: dict[str, ColumnsBuilder] = field(default_factory=dict)  # per-port families
    steady: _Steady | None = None  # the poll compiled for layout (see _Steady)

    @property
    def name(self) -> str:
        return self.cfg.name


_Key = tuple[str, str, int]
"""A port counter of :class:`_PortData`: (signal, direction, sub-index)."""

_SKIP, _ECN, _IF, _UPTIME, _COUNTER, _ORPHAN = range(6)
_Plan = tuple[int, int, str, _Key | None, Table | None]
"""What a polled OID is, worked out once per discovery (it depends only on the OID
and the target's tables and ports): (kind, ifIndex, IF-MIB column name, counter
key, table)."""
_PLAN_SKIP: _Plan = (_SKIP, 0, "", None, None)
_PortSlice = tuple[int, int, int, int, tuple[str, ...], tuple["_Key", ...], tuple[Table, ...]]
"""One port's values in a poll: (ifIndex, start, end of its IF-MIB values and of its
counters, the IF-MIB column names, counter keys and tables in that order)."""


@dataclass(frozen=True, slots=True)
class _PollLayout:
    """Where a poll's values are when the polled OIDs run port by port, each counter
    key once a port (no summed rows): then each port's values are two slices."""

    uptime: bool  # the first value is sysUpTime
    ports: tuple[_PortSlice, ...]
    ecn: int  # where the ECN rows start (they run to the end)


def _poll_layout(plans: Sequence[_Plan]) -> _PollLayout | None:
    """The layout of a poll of ``plans`` (see :class:`_PollLayout`); None where the
    plans do not run that way."""
    uptime = bool(plans) and plans[0][0] == _UPTIME
    pos = int(uptime)
    ports: list[_PortSlice] = []
    seen: set[int] = set()
    # Ports mostly have the same columns and counters: one tuple of each kept for all.
    shared: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    while pos < len(plans) and plans[pos][0] in (_IF, _COUNTER):
        if_index = plans[pos][1]
        if if_index in seen:
            return None
        seen.add(if_index)
        start = pos
        while pos < len(plans) and plans[pos][0] == _IF and plans[pos][1] == if_index:
            pos += 1
        mid = pos
        while pos < len(plans) and plans[pos][0] == _COUNTER and plans[pos][1] == if_index:
            pos += 1
        names = tuple(p[2] for p in plans[start:mid])
        keys = tuple(p[3] for p in plans[mid:pos] if p[3] is not None)
        tables = tuple(p[4] for p in plans[mid:pos] if p[4] is not None)
        if len(set(names)) != len(names) or len(set(keys)) != pos - mid or len(tables) != len(keys):
            return None
        ports.append(
            (
                if_index,
                start,
                mid,
                pos,
                shared.setdefault(names, names),
                shared.setdefault(keys, keys),
                shared.setdefault(tables, tables),
            )
        )
    ecn = pos
    if any(p[0] != _ECN for p in plans[ecn:]):
        return None
    return _PollLayout(uptime, tuple(ports), ecn)


@dataclass(slots=True)
class _PortCache:
    """One port's label tuples and rate-tracker keys, made once per discovery: every
    poll (512 ports x ~50 readings in switch mode) reuses the same tuples."""

    port: str
    sp: tuple[str, str]
    by_dir: dict[str, tuple[str, str, str]]
    octets: dict[str, tuple[str, int, str]]
    util: dict[str, _Gauge]
    by_key: dict[_Key, _Recipe] = field(default_factory=dict)

    @classmethod
    def of(cls, sw: str, port: str, if_index: int) -> _PortCache:
        by_dir = {d: (sw, port, d) for d in ("rx", "tx")}
        return cls(
            port,
            (sw, port),
            by_dir,
            {n: (sw, if_index, n) for n in ("in_octets", "out_octets")},
            {d: (fam.SW_UTILIZATION.name, labels) for d, labels in by_dir.items()},
        )

    def recipe(self, sw: str, if_index: int, key: _Key, tb: Table) -> _Recipe:
        """What one profile-table counter of this port is (see :data:`_Recipe`)."""
        got = self.by_key.get(key)
        if got is None:
            signal, direction, sub = key
            labels: tuple[str, ...]
            rate_key: tuple[object, ...] = ()
            dur_key: _Key | None = None
            if signal in ("pfc_frames", "pfc_duration"):
                labels = (sw, self.port, str(sub), direction)
                rate_key = (sw, if_index, signal, direction, sub)
                if signal == "pfc_frames":
                    dur_key = ("pfc_duration", direction, sub)
            elif signal == "queue_drops":
                labels = (sw, self.port, tb.queue_label(sub))
            else:  # pfc_total_frames, link_pause_frames: per direction
                labels = self.by_dir.get(direction) or (sw, self.port, direction)
                rate_key = (sw, if_index, signal, direction)
            family, kind = _SIGNALS[signal]
            gauge = _GAUGES[kind]
            g = None if gauge is None else (gauge, labels)
            got = self.by_key[key] = (labels, rate_key, family, kind, dur_key, g)
        return got


_PLAIN, _FRAMES, _DURATION, _TOTAL = range(4)
_SIGNALS = {
    "pfc_frames": (fam.SW_PFC_FRAMES.name, _FRAMES),
    "pfc_duration": (fam.SW_PFC_SECONDS.name, _DURATION),
    "pfc_total_frames": (sig.PORT_PFC_PAUSE_FRAMES.name, _TOTAL),
    "link_pause_frames": (fam.SW_LINK_PAUSE_FRAMES.name, _PLAIN),
    "queue_drops": (fam.SW_QUEUE_DROPS.name, _PLAIN),
}
"""Profile-table signal -> (counter family, what derives from it: nothing, a pause
ratio from frames unless a duration counter gives it, from the duration, from
interface-total frames)."""
_GAUGES = {
    _PLAIN: None,
    _FRAMES: fam.SW_PFC_RATIO.name,
    _DURATION: fam.SW_PFC_RATIO.name,
    _TOTAL: sig.PORT_PFC_PAUSE_RATIO.name,
}
_Gauge = tuple[str, tuple[str, ...]]
"""A derived gauge series: (family, labels)."""
_Recipe = tuple[tuple[str, ...], tuple[object, ...], str, int, _Key | None, _Gauge | None]
"""A port counter's labels, rate key, family, :data:`_SIGNALS` kind, for PFC frames
the key of the duration counter that gives the ratio instead, and the gauge its
rate gives (None: none)."""


_OCTETS = (("in_octets", fam.SW_RX_BYTES.name, "rx"), ("out_octets", fam.SW_TX_BYTES.name, "tx"))
_DROPS = (
    ("in_discards", fam.SW_DISCARDS.name, "rx"),
    ("out_discards", fam.SW_DISCARDS.name, "tx"),
    ("in_errors", fam.SW_ERRORS.name, "rx"),
    ("out_errors", fam.SW_ERRORS.name, "tx"),
)


def _port_label(t: _Target, if_index: int) -> str:
    return t.if_names.get(if_index) or t.if_descrs.get(if_index) or str(if_index)


def _text(v: Value) -> str:
    return v.decode("utf-8", "replace").strip("\x00").strip() if isinstance(v, bytes) else ""


class SwitchCollector:
    """Polls switches over SNMP for PFC, queue drops, link state and traffic."""

    def __init__(
        self,
        settings: SwitchSettings,
        env: CollectorEnv,
        *,
        profiles: ProfileSet | None = None,
    ) -> None:
        self._settings = settings
        self._env = env
        self._profiles = profiles or load_profiles(tuple(Path(d) for d in settings.profile_dirs))
        self._targets = [_Target(t, t.mode or settings.mode) for t in settings.targets]
        self._node_names = [env.node, *settings.node_names]
        self._tracker_settings = TrackerSettings()
        self._sem = asyncio.Semaphore(settings.max_concurrency)

    @property
    def name(self) -> str:
        """Registry name."""
        return "switch"

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return sig.METRICS

    def target_state(self, name: str) -> _Target:
        """Runtime state of one target (for tests and the demo)."""
        for t in self._targets:
            if t.name == name:
                return t
        raise KeyError(name)

    async def start(self) -> None:
        """Create one session per target; no network I/O (agents may be down)."""
        for t in self._targets:
            if t.cfg.profile != "auto":
                try:
                    t.profile = self._profiles.by_name(t.cfg.profile)
                except ConfigError as exc:
                    raise CollectorError(str(exc)) from None
            try:
                t.session = self._make_session(t.cfg)
            except ConfigError as exc:
                raise CollectorError(f"switch {t.name}: {exc}") from None

    @staticmethod
    def _make_session(cfg: TargetSettings) -> Session:
        common = {
            "timeout": cfg.timeout,
            "retries": cfg.retries,
            "max_oids_per_request": cfg.max_oids_per_request,
        }
        if cfg.version == "3":
            v3 = V3Credentials(
                user=cfg.v3.user,
                auth_protocol=cfg.v3.auth_protocol,
                auth_key=read_secret(cfg.v3.auth_key_file, key="v3.auth_key_file"),
                priv_protocol=cfg.v3.priv_protocol,
                priv_key=read_secret(cfg.v3.priv_key_file, key="v3.priv_key_file"),
                context=cfg.v3.context,
            )
            return PysnmpSession(cfg.host, cfg.port, v3=v3, **common)  # type: ignore[arg-type]
        community = (
            read_secret(cfg.community_file, key="community_file", env="FABRICWATCH_SNMP_COMMUNITY")
            or "public"
        )
        if cfg.client == "pysnmp":
            return PysnmpSession(cfg.host, cfg.port, community=community, **common)  # type: ignore[arg-type]
        return NativeV2cSession(cfg.host, cfg.port, community, **common)  # type: ignore[arg-type]

    async def collect(self) -> Sequence[Reading]:
        """Poll every target concurrently (bounded); failures only mark their target down.

        A :class:`~fabricwatch.readings.Batch`: each target's per-port families as
        :class:`~fabricwatch.readings.Columns` (one per family and target), the
        health and ECN readings as single readings.
        """
        polls = await asyncio.gather(*(self._poll(t) for t in self._targets))
        singles: list[Reading] = []
        for p in polls:
            singles.extend(p.singles)
        out = Batch(singles, self._columns(polls))
        if self._targets and not any(t.up for t in self._targets):
            # Every switch failed: the collector is down, not "up with no data".
            # The per-target health readings still go to the store.
            first = self._targets[0]
            msg = (
                f"all {len(self._targets)} switch target(s) failing; "
                f"{first.name}: {first.last_error or 'not polled yet'}"
            )
            raise CollectionFailedError(msg, out)
        return out

    def _columns(self, polls: Sequence[_Samples]) -> list[Columns]:
        """Each target's per-port families of this cycle as Columns (one per family and
        target: each target's samples carry its own poll time)."""
        out: list[Columns] = []
        counters = _COUNTER_COLUMNS
        for t, p in zip(self._targets, polls, strict=True):
            builders = t.builders
            for name, (labels, values, epochs) in p.families.items():
                if not values:
                    continue
                builder = builders.get(name)
                if builder is None:
                    builder = builders[name] = ColumnsBuilder(name)
                e = epochs if name in counters else None
                out.append(builder.columns(labels, values, epochs=e, ts=p.ts, source=t.name))
        return out

    async def close(self) -> None:
        """Close every session."""
        for t in self._targets:
            if t.session is not None:
                await t.session.close()
                t.session = None

    # -- polling ----------------------------------------------------------

    async def _poll(self, t: _Target) -> _Samples:
        out = _Samples()
        now = self._env.monotonic()
        if t.session is None or now < t.next_attempt:
            out.singles.extend(self._health(t, now))
            return out
        async with self._sem:
            t0 = self._env.monotonic()
            try:
                interval = self._settings.discovery_interval
                if t.discovered_at is None or t0 - t.discovered_at >= interval:
                    await self._discover(t)
                await self._collect_target(t, out)
            except SnmpError as exc:
                self._failed(t, exc)
                out = _Samples()
            else:
                if t.failures:
                    log.info("switch_recovered", switch=t.name, after_failures=t.failures)
                t.failures = 0
                t.up = True
            t.last_duration = self._env.monotonic() - t0
        out.singles.extend(self._health(t, self._env.monotonic()))
        return out

    def _failed(self, t: _Target, exc: SnmpError) -> None:
        t.failures += 1
        t.up = False
        t.errors[exc.reason] = t.errors.get(exc.reason, 0) + 1
        s = self._settings
        delay = min(s.backoff_initial * 2 ** (t.failures - 1), s.backoff_max)
        t.next_attempt = self._env.monotonic() + delay
        # Rediscover after an outage: the switch may have rebooted and renumbered.
        t.discovered_at = None
        t.last_error = str(exc)
        event = "switch_auth_failed" if exc.reason == "auth" else "switch_poll_failed"
        log.warning(
            event,
            switch=t.name,
            host=t.cfg.host,
            reason=exc.reason,
            error=str(exc),
            failures=t.failures,
            retry_in_s=round(delay, 3),
        )

    def _health(self, t: _Target, now: float) -> list[Reading]:
        n = (t.name,)
        stats = t.session.stats if t.session is not None else None
        out = [
            Reading(sig.TARGET_UP.name, n, 1.0 if t.up else 0.0, ts=now),
            Reading(sig.POLL_DURATION.name, n, t.last_duration, ts=now),
            Reading(sig.TIMEOUTS.name, n, float(stats.timeouts if stats else 0), ts=now),
            Reading(sig.MALFORMED.name, n, float(stats.malformed if stats else 0), ts=now),
            Reading(sig.PORTS_POLLED.name, n, float(len(t.ports)), ts=now),
            Reading(sig.ORPHAN_ROWS.name, n, float(t.orphans), ts=now),
        ]
        out.extend(
            Reading(sig.POLL_ERRORS.name, (t.name, reason), float(count), ts=now)
            for reason, count in t.errors.items()
        )
        out.extend(
            Reading(sig.TABLE_PRESENT.name, (t.name, table), 1.0 if ok else 0.0, ts=now)
            for table, ok in t.present.items()
        )
        if t.profile is not None and t.discovered_at is not None:
            out.append(Reading(sig.SWITCH_INFO.name, (t.name, t.profile.name, t.sys_name), 1.0))
            out.extend(
                Reading(fam.SW_UPLINK_INFO.name, (t.name, _port_label(t, i), nb), 1.0, ts=now)
                for i, nb in t.uplink_ports.items()
            )
        return out

    # -- discovery --------------------------------------------------------

    async def _discover(self, t: _Target) -> None:
        assert t.session is not None
        s = t.session
        vbs = await s.get([SYS_DESCR, SYS_OBJECT_ID, SYS_NAME, SYS_UPTIME])
        values = dict(vbs)
        descr = _text(values.get(SYS_DESCR))
        obj = values.get(SYS_OBJECT_ID)
        sys_oid = obj if isinstance(obj, tuple) else None
        t.sys_name = _text(values.get(SYS_NAME))
        profile = (
            self._profiles.select(sys_oid, descr)
            if t.cfg.profile == "auto"
            else self._profiles.by_name(t.cfg.profile)
        )
        if t.profile is None or profile.name != t.profile.name:
            log.info(
                "switch_profile_selected",
                switch=t.name,
                profile=profile.name,
                sys_object_id=".".join(map(str, sys_oid or ())),
            )
        t.profile = profile
        reps, mv = t.cfg.max_repetitions, 64
        names = await walk(s, [IF_NAME, IF_DESCR], max_repetitions=reps, max_varbinds=mv)
        t.if_names = {o[-1]: _text(v) for o, v in names[IF_NAME] if len(o) == len(IF_NAME) + 1}
        t.if_descrs = {o[-1]: _text(v) for o, v in names[IF_DESCR] if len(o) == len(IF_DESCR) + 1}
        # One GETBULK with repetitions 1 tells which of the profile's tables
        # exist, and whether ifXTable and the LLDP remote table do.
        probes = [tb.probe_oid() for tb in profile.tables] + [_IFX, LLDP_REM]
        present: list[Table] = []
        found: list[bool] = []
        reply = await s.bulk(probes, 1)
        for k, p in enumerate(probes):
            oid, value = reply[k] if k < len(reply) else (p, Special.END_OF_MIB_VIEW)
            found.append(
                not isinstance(value, Special) and oid[: len(p)] == p and len(oid) > len(p)
            )
        present = [tb for tb, ok in zip(profile.tables, found, strict=False) if ok]
        t.tables = present
        old = dict(t.uplink_ports)
        if t.mode == "switch":
            t.ports = {i: _port_label(t, i) for i in sorted({*t.if_names, *t.if_descrs})}
            t.uplink_ports = {}
        else:
            t.uplink_ports = await self._find_uplinks(t)
            t.ports = {i: _port_label(t, i) for i in sorted(t.uplink_ports)}
        if t.uplink_ports != old:
            log.info(
                "switch_uplinks_changed",
                switch=t.name,
                added=sorted(_port_label(t, i) for i in t.uplink_ports.keys() - old.keys()),
                removed=sorted(str(i) for i in old.keys() - t.uplink_ports.keys()),
            )
        if t.mode != "switch" and not t.uplink_ports:
            log.warning(
                "switch_no_uplinks",
                switch=t.name,
                hint="no LLDP neighbour matches this node; set uplinks to poll statically",
            )
        t.cbqos = {}
        if profile.cbqos_ecn and t.ports:
            cols = await walk(s, list(_cbqos.DISCOVERY_COLUMNS), max_repetitions=reps)
            t.cbqos = _cbqos.map_objects(cols, t.ports)
        by_signal = {tb.signal for tb in present}
        tables = {
            "pfc": bool(by_signal & _PFC_SIGNALS),
            "queue": "queue_drops" in by_signal,
            "ecn": bool(t.cbqos),
            "lldp": found[-1],
            "ifxtable": found[-2],
        }
        if tables != t.present:
            log.info(
                "switch_tables",
                switch=t.name,
                profile=profile.name,
                present=[k for k in TABLES if tables[k]],
                absent=[k for k in TABLES if not tables[k]],
            )
        t.present = tables
        t.speeds = self._configured_speeds(t)
        await self._plan(t)
        t.discovered_at = self._env.monotonic()

    def _configured_speeds(self, t: _Target) -> dict[int, float]:
        """The target's ``port_speeds`` (Gb/s by name or ifIndex) as bit/s by ifIndex."""
        if not t.cfg.port_speeds:
            return {}
        by_name = {n.lower(): i for i, n in {**t.if_descrs, **t.if_names}.items() if n}
        out: dict[int, float] = {}
        for key, gbps in t.cfg.port_speeds.items():
            idx = by_name.get(key.lower())
            if idx is None and key.isdigit():
                idx = int(key)
            if idx is None:
                log.warning("switch_port_speed_unknown_port", switch=t.name, port=key)
                continue
            out[idx] = gbps * 1e9
        return out

    async def _find_uplinks(self, t: _Target) -> dict[int, str]:
        assert t.session is not None
        if t.cfg.uplinks:
            by_name = {n.lower(): i for i, n in {**t.if_descrs, **t.if_names}.items() if n}
            out: dict[int, str] = {}
            for u in t.cfg.uplinks:
                idx = by_name.get(u.lower())
                if idx is None and u.isdigit() and (int(u) in t.if_names or int(u) in t.if_descrs):
                    idx = int(u)
                if idx is None:
                    log.warning("switch_static_uplink_unknown", switch=t.name, port=u)
                    continue
                out[idx] = "static"
            return out
        cols = await walk(t.session, [*LOC_OIDS, *REM_OIDS], max_repetitions=t.cfg.max_repetitions)
        neighbours = parse_remote(cols)
        port_map = map_local_ports(cols, t.if_names, t.if_descrs)
        macs = local_macs(self._env.sys_root)
        found, unmapped = find_uplinks(neighbours, port_map, self._node_names, macs)
        for nb in unmapped:
            log.warning(
                "switch_lldp_port_unmapped",
                switch=t.name,
                local_port=nb.local_port,
                neighbour=nb.sys_name,
            )
        return {i: u.neighbour_port for i, u in sorted(found.items())}

    @staticmethod
    def _if_columns(t: _Target) -> list[Oid]:
        # ifSpeed only stands in for ifHighSpeed: skip its varbinds where ifXTable exists.
        if t.present.get("ifxtable", True):
            return [c for c in IF_COLUMNS if c != IF_SPEED]
        return list(IF_COLUMNS)

    async def _plan(self, t: _Target) -> None:
        """Work out this target's per-poll requests once per discovery: the OIDs every
        poll GETs (:attr:`_Target.get_oids`) and what each is (``poll_plan``)."""
        t.label_cache = {}  # ports and tables may have changed
        t.mixed = False
        oids: list[Oid] = [SYS_UPTIME]
        t.orphans = 0
        if t.mode == "switch":
            await self._plan_switch(t, oids)
        else:
            await self._plan_node(t, oids)
        plans = [self._plan_oid(t, o) for o in oids]
        # Port by port (each port's OIDs in the order found): see _PollLayout.
        order = {i: k for k, i in enumerate(t.ports)}
        rank = {_UPTIME: 0, _IF: 1, _COUNTER: 1, _ECN: 2}

        def where(p: _Plan) -> tuple[int, int, int]:
            return rank[p[0]], order.get(p[1], len(order)), int(p[0] == _COUNTER)

        kept = [(p, o) for o, p in zip(oids, plans, strict=True) if p[0] in rank]
        kept.sort(key=lambda po: where(po[0]))
        # Kept encoded (the OIDs as tuples of ints are ~9x as large): the session sends
        # them as they are, the ECN rows (last) are also kept decoded for the poll.
        t.get_oids = EncodedOids(o for _, o in kept)
        t.ecn_oids = tuple(o for p, o in kept if p[0] == _ECN)
        t.poll_plan = [p for p, _ in kept]
        t.layout = _poll_layout(t.poll_plan)

    async def _plan_switch(self, t: _Target, oids: list[Oid]) -> None:
        """Every row of the polled columns, learnt by walking them once: later polls GET
        exactly the rows they use (a GET response's names are checked, not decoded,
        and rows nothing reads, such as SONiC's per-queue sent counters, are not
        asked for). Rows of ifIndexes the ifTable lacks are counted as orphans."""
        assert t.session is not None
        columns = self._if_columns(t)
        for tb in t.tables:
            columns.extend([tb.column] if tb.column is not None else tb.columns)
        if t.cbqos:
            columns.append(_cbqos.ECN_MARK_PKT64)
        rows = await walk(t.session, columns, max_repetitions=t.cfg.max_repetitions, size=t.bulk)
        for c in columns:
            for oid, value in rows[c]:
                if type(value) is not int:  # bytes, OIDs, exceptions (Special), NULL
                    continue
                kind = self._plan_oid(t, oid)[0]
                if kind == _ORPHAN:
                    t.orphans += 1
                elif kind != _SKIP:
                    oids.append(oid)

    async def _plan_node(self, t: _Target, oids: list[Oid]) -> None:
        """The uplink ports' rows: IF-MIB and column-per-sub tables by ifIndex, and the
        rows of (ifIndex, ...) tables that exist (walked under each port's prefix)."""
        ports = sorted(t.ports)
        for i in ports:
            oids.extend((*col, i) for col in self._if_columns(t))
            for tb in t.tables:
                oids.extend((*c, i) for c in tb.columns)
        # Rows of (ifIndex, ...) tables: learn exactly which exist, then GET them.
        prefixes = [(*tb.column, i) for tb in t.tables if tb.column is not None for i in ports]
        ecn_prefixes = [(*_cbqos.ECN_MARK_PKT64, p, o) for p, o in sorted(t.cbqos)]
        if ecn_prefixes and t.session is not None:
            rows = await walk(t.session, ecn_prefixes, max_repetitions=t.cfg.max_repetitions)
            for pre in ecn_prefixes:
                oids.extend(oid for oid, _ in rows.get(pre, ()) if len(oid) == len(pre) + 1)
        if prefixes and t.session is not None:
            rows = await walk(t.session, prefixes, max_repetitions=t.cfg.max_repetitions)
            for tb in t.tables:
                if tb.column is None:
                    continue
                n = len(tb.column)
                for i in ports:
                    for oid, _ in rows.get((*tb.column, i), ()):
                        if tb.match_suffix(oid[n + 1 :], 8) is not None:
                            oids.append(oid)

    # -- collection -------------------------------------------------------

    async def _collect_target(self, t: _Target, out: _Samples) -> None:
        assert t.session is not None and t.profile is not None
        values = await t.session.get_values(t.get_oids)
        out.ts = self._env.monotonic()
        self._readings(t, values, out.ts, out)

    @staticmethod
    def _plan_oid(t: _Target, oid: Oid) -> _Plan:
        """What one polled OID is for this target (see :data:`_Plan`)."""
        assert t.profile is not None
        if t.cbqos and oid[: len(_cbqos.ECN_MARK_PKT64)] == _cbqos.ECN_MARK_PKT64:
            return (_ECN, 0, "", None, None)
        known = t.ports
        head = oid[:-1]
        name = IF_COLUMNS.get(head)
        if name is not None:
            return (_IF, oid[-1], name, None, None) if oid[-1] in known else _PLAN_SKIP
        if oid == SYS_UPTIME:
            return (_UPTIME, 0, "", None, None)
        by_col: dict[Oid, tuple[Table, int]] = {}
        lengths: set[int] = set()
        for tb in t.tables:
            if tb.column is not None:
                by_col[tb.column] = (tb, -2)
                lengths.add(len(tb.column))
            for k, c in enumerate(tb.columns):
                by_col[c] = (tb, k)
        hit = by_col.get(head)
        if hit is not None and hit[1] >= 0:  # column-per-sub layout
            tb, sub = hit
            if_index = oid[-1]
        else:
            for n in lengths:
                hit = by_col.get(oid[:n])
                if hit is not None and len(oid) > n:
                    break
            else:
                return _PLAN_SKIP
            tb = hit[0]
            if_index, rest = oid[n], oid[n + 1 :]
            m = tb.match_suffix(rest, t.profile.priority_count)
            if m is None:
                return _PLAN_SKIP
            sub = m
        if if_index not in known:
            return (_ORPHAN, 0, "", None, None)
        return (_COUNTER, if_index, "", (tb.signal, tb.direction, sub), tb)

    def _readings(self, t: _Target, values: Sequence[Value], ts: float, out: _Samples) -> None:
        """One poll's values of target ``t`` (those of :attr:`_Target.get_oids`, in
        order) as samples in ``out``."""
        assert t.profile is not None
        known = t.ports
        layout = t.layout
        discs: dict[int, int]
        if layout is not None and set(map(type, values)) == _INT_ONLY:
            # Every value a number (no exception values): the poll compiled for the layout.
            steady = t.steady
            if steady is None or steady.layout is not layout:
                steady = t.steady = _compile(t, layout)
                if not t.mixed:
                    # Only polls taken one by one read each OID's plan and each port's
                    # recipes (~4 MiB a 512-port switch); made again if one comes.
                    t.poll_plan = []
                    t.label_cache = {}
            self._uptime(t, values[0] if layout.uptime else None)  # type: ignore[arg-type]
            self._steady_samples(t, steady, values, ts, out)  # type: ignore[arg-type]
            ecn_vbs = list(zip(t.ecn_oids, values[layout.ecn :], strict=True))
            if ecn_vbs:
                discs = dict(zip(steady.if_indexes, steady.disc(values), strict=True))
        else:
            # Its caches (link states, speeds) are of polls before this one.
            t.steady = None
            t.mixed = True
            plans = t.poll_plan
            if len(plans) != len(t.get_oids):
                plans = t.poll_plan = [self._plan_oid(t, o) for o in t.get_oids]
            ports: dict[int, _PortData] = {}
            self._uptime(t, self._take(plans, values, ports))
            # (ecn_marks passes over values that are no numbers, as _take does)
            ecn_vbs = list(zip(t.ecn_oids, values[len(values) - len(t.ecn_oids) :], strict=True))
            self._say_missing(t, ports)
            for if_index, pd in ports.items():
                self._port_samples(t, if_index, pd, out)
            out.rate(t.rates, self._tracker_settings, ts)
            discs = {i: pd.values.get("disc", 0) for i, pd in ports.items()}
        if ecn_vbs:
            for (if_index, queue), marks in _cbqos.ecn_marks(ecn_vbs, t.cbqos).items():
                if if_index not in known:
                    continue
                epoch = (t.boot << 32) | (discs.get(if_index, 0) & 0xFFFFFFFF)
                labels = (t.name, t.ports[if_index], queue)
                out.singles.append(
                    Reading(fam.SW_ECN.name, labels, float(marks), ts=ts, epoch=epoch)
                )

    @staticmethod
    def _take(
        plans: Sequence[_Plan], values: Sequence[Value], ports: dict[int, _PortData]
    ) -> int | None:
        """A poll's port values one by one into ``ports`` (any poll: exception values,
        summed rows); its sysUpTime."""
        uptime: int | None = None
        for plan, value in zip(plans, values, strict=True):
            if type(value) is not int:  # bytes, OIDs, exceptions (Special), NULL
                continue
            kind = plan[0]
            if kind == _COUNTER:
                if_index, key, tb = plan[1], plan[3], plan[4]
                assert key is not None and tb is not None
                pd = ports.get(if_index)
                if pd is None:
                    pd = ports[if_index] = _PortData()
                prev = pd.counters.get(key)
                pd.counters[key] = (value + (prev[0] if prev else 0), tb)
            elif kind == _IF:
                pd = ports.get(plan[1])
                if pd is None:
                    pd = ports[plan[1]] = _PortData()
                pd.values[plan[2]] = value
            elif kind == _UPTIME:
                uptime = value
        return uptime

    def _say_missing(self, t: _Target, ports: dict[int, _PortData]) -> None:
        """Log once per switch (again only when it changes) which IF-MIB columns are absent."""
        if not ports:
            return
        have: set[str] = set()
        for pd in ports.values():
            have.update(pd.values)
        no_speed = [
            t.ports[i] for i, pd in ports.items() if i in t.ports and self._speed_bps(t, i, pd) <= 0
        ]
        self._say_absent(t, have, no_speed)

    @staticmethod
    def _say_absent(t: _Target, have: set[str], no_speed: list[str]) -> None:
        """:meth:`_say_missing` for a poll whose ports had the IF-MIB columns ``have``,
        and the ports ``no_speed`` no speed."""
        if "speed" in have or t.present.get("ifxtable", True):
            have = {*have, "if_speed"}  # only the fallback for ifHighSpeed, read without ifXTable
        missing = tuple(_COLUMN_NAMES[c] for c in IF_COLUMNS.values() if c not in have)
        no_speed = sorted(no_speed)
        said = (*missing, *no_speed)
        if said == t.missing_said:
            return
        t.missing_said = said
        if not missing and not no_speed:
            return
        log.warning(
            "switch_columns_missing",
            switch=t.name,
            missing=list(missing),
            ports_without_speed=no_speed[:20],
            ports_without_speed_count=len(no_speed),
            effect="no utilization and no frame-based pfc_pause_ratio on ports without speed; "
            "set port_speeds for them"
            if no_speed
            else "",
        )

    @staticmethod
    def _speed_bps(t: _Target, if_index: int, pd: _PortData) -> float:
        """Port speed in bit/s: configured, else ifHighSpeed, else ifSpeed below its cap."""
        configured = t.speeds.get(if_index)
        if configured:
            return configured
        v = pd.values
        high = v.get("speed", 0)
        if high > 0:
            return float(high) * 1e6
        low = v.get("if_speed", 0)
        if 0 < low < IF_SPEED_MAX:
            return float(low)
        return 0.0

    def _uptime(self, t: _Target, uptime: int | None) -> None:
        if uptime is None:
            return
        last = t.last_uptime
        t.last_uptime = uptime
        if last is None or uptime >= last:
            return
        if last > 2**32 - _UPTIME_WRAP_GUARD and uptime < _UPTIME_WRAP_GUARD:
            return  # TimeTicks wrapped after ~497 days
        t.boot += 1
        t.discovered_at = None  # agent restarted: ifIndexes may have moved
        log.info("switch_restarted", switch=t.name, uptime_before=last, uptime_now=uptime)

    def _steady_samples(
        self, t: _Target, st: _Steady, values: Sequence[int], ts: float, out: _Samples
    ) -> None:
        """:meth:`_port_samples` of every port and then :meth:`_Samples.rate`, for a poll
        compiled in ``st``: whole families at a time, in C."""
        fams = out.families
        discs = st.disc(values)
        if (t.boot, discs) != st.epoch_key:
            st.epoch_key = (t.boot, discs)
            boot = t.boot << 32
            get = [boot | (d & 0xFFFFFFFF) for d in discs].__getitem__
            for part in st.counters:
                part.epochs = list(map(get, part.ports))
            for rp in st.rated:
                rp.epochs = list(map(get, rp.ports))
        opers = st.oper(values)
        if opers != st.opers:
            st.opers = opers
            st.up = [1.0 if o == 1 else 0.0 for o in opers]
            idx = st.if_indexes
            st.flaps = [
                float(_link(t, idx[k], o)) for k, o in zip(st.oper_ports, opers, strict=True)
            ]
        speed_key = (st.high(values), st.low(values))
        if speed_key != st.speed_key:
            st.speed_key = speed_key
            self._steady_speeds(t, st, *speed_key)
        if st.if_indexes:
            self._say_absent(t, st.have, st.no_speed)
        for family, labels, gauges in (
            (fam.SW_PORT_UP.name, st.oper_labels, st.up),
            (fam.SW_PORT_FLAPS.name, st.oper_labels, st.flaps),
            (fam.SW_SPEED.name, st.speed_labels, st.speeds),
        ):
            labels_l, values_l, _ = fams[family]
            labels_l.extend(labels)
            values_l.extend(gauges)
        for part in st.counters:
            labels_l, values_l, epochs_l = fams[part.family]
            vals = part.pick(values)
            labels_l.extend(part.labels)
            values_l.extend(
                map(float, vals) if part.units is None else map(operator.mul, vals, part.units)
            )
            epochs_l.extend(part.epochs)
        for rp in st.rated:
            kr = t.rates.get(rp.bits)
            if kr is None:
                kr = t.rates[rp.bits] = KeyedRates(self._tracker_settings, rp.bits)
            got = kr.update(rp.keys, rp.pick(values), ts, rp.epochs)
            for g in rp.outs:
                labels_l, values_l, _ = fams[g.family]
                rates = g.pick(got)
                try:
                    per = list(map(_first, rates))
                except TypeError:  # a counter without a rate (its first poll, a reset)
                    for r, lb, m, d in zip(rates, g.labels, g.muls, g.divs, strict=True):
                        if r is not None:
                            labels_l.append(lb)
                            values_l.append(min(1.0, r[0] * m / d))
                    continue
                labels_l.extend(g.labels)
                values_l.extend(
                    map(min, repeat(1.0), map(truediv, map(operator.mul, per, g.muls), g.divs))
                )

    def _steady_speeds(
        self, t: _Target, st: _Steady, highs: tuple[int, ...], lows: tuple[int, ...]
    ) -> None:
        """The ports' speeds from this poll's ifHighSpeed and ifSpeed (see
        :meth:`_speed_bps`) into ``st``, and what derives from them: the speed gauges
        and which rates give gauges, on what scale."""
        speeds = [
            self._speed_bps(t, i, _PortData({"speed": h, "if_speed": lo}))
            for i, h, lo in zip(st.if_indexes, highs, lows, strict=True)
        ]
        st.speed_labels = [st.labels[k] for k, bps in enumerate(speeds) if bps > 0]
        st.speeds = [bps / 8 for bps in speeds if bps > 0]
        st.no_speed = [t.ports[i] for i, bps in zip(st.if_indexes, speeds, strict=True) if bps <= 0]
        pause = float(PAUSE_QUANTUM_BITS)
        for rp in st.rated:
            by_family: dict[str, tuple[list[int], list[tuple[str, ...]], list[float], list[float]]]
            by_family = {}
            for e, (family, labels, scale, k) in enumerate(
                zip(rp.families, rp.labels, rp.scales, rp.ports, strict=True)
            ):
                if isinstance(scale, tuple):
                    mul, div = scale
                elif speeds[k] > 0:
                    mul, div = (8.0 if scale == _BIT else pause), speeds[k]
                else:
                    continue  # no speed, no gauge
                at, labels_o, muls, divs = by_family.setdefault(family, ([], [], [], []))
                at.append(e)
                labels_o.append(labels)
                muls.append(mul)
                divs.append(div)
            rp.outs = [_GaugeOut(f, _picker(a), lb, m, d) for f, (a, lb, m, d) in by_family.items()]

    def _port_samples(self, t: _Target, if_index: int, pd: _PortData, out: _Samples) -> None:
        """One port's samples into ``out``: its counters and gauges by family, and the
        counters its derived gauges need rates of (see :meth:`_Samples.derive`)."""
        sw, port = t.name, t.ports[if_index]
        pc = t.label_cache.get(if_index)
        if pc is None or pc.port != port:
            pc = t.label_cache[if_index] = _PortCache.of(sw, port, if_index)
        v = pd.values
        epoch = (t.boot << 32) | (v.get("disc", 0) & 0xFFFFFFFF)
        sp, by_dir = pc.sp, pc.by_dir
        oper = v.get("oper")
        if oper is not None:
            flaps = _link(t, if_index, oper)
            out.gauge(fam.SW_PORT_UP.name, sp, 1.0 if oper == 1 else 0.0)
            out.gauge(fam.SW_PORT_FLAPS.name, sp, float(flaps))
        speed_bps = self._speed_bps(t, if_index, pd)
        if speed_bps > 0:
            out.gauge(fam.SW_SPEED.name, sp, speed_bps / 8)
        # Derived gauges: min(1, rate x mul / div) (None: no speed, no gauge).
        per_bit = None if speed_bps <= 0 else (8.0, speed_bps)
        per_pause = None if speed_bps <= 0 else (float(PAUSE_QUANTUM_BITS), speed_bps)
        for name, family, direction in _OCTETS:
            value = v.get(name)
            if value is not None:
                out.counter(family, sp, value, epoch)
                d = _Derived.of(out.derived, 64)
                d.add(pc.octets[name], value, epoch, pc.util[direction], per_bit)
        for name, family, direction in _DROPS:
            value = v.get(name)
            if value is not None:
                out.counter(family, by_dir[direction], value, epoch)
        if pd.counters:
            self._table_samples(t, if_index, pd, pc, epoch, per_pause, out)

    @staticmethod
    def _table_samples(  # noqa: PLR0917 - the port's state, worked out by the caller
        t: _Target,
        if_index: int,
        pd: _PortData,
        pc: _PortCache,
        epoch: int,
        per_pause: _Scale | None,
        out: _Samples,
    ) -> None:
        """The port's profile-table counters (PFC, pause, queue drops) into ``out``
        (what each counter is worked out once per discovery: :meth:`_PortCache.recipe`)."""
        c = pd.counters
        fams = out.families
        derived = out.derived
        recipes = pc.by_key
        last: Table | None = None
        for key, (value, tb) in c.items():
            r = recipes.get(key)
            if r is None:
                r = pc.recipe(t.name, if_index, key, tb)
            labels, rate_key, family, kind, dur_key, gauge = r
            labels_l, values_l, epochs_l = fams[family]
            labels_l.append(labels)
            values_l.append(value * tb.unit if kind == _DURATION else float(value))
            epochs_l.append(epoch)
            if gauge is None or (dur_key is not None and dur_key in c):
                continue  # no gauge, or the ratio comes from the duration counter
            if tb is not last:  # a port's counters come table by table
                last = tb
                d = _Derived.of(derived, tb.bits)
                add_key, add_value, add_epoch = d.keys.append, d.values.append, d.epochs.append
                add_gauge, add_scale = d.gauges.append, d.scales.append
                scale = (tb.unit, 1.0) if kind == _DURATION else per_pause
            add_key(rate_key)
            add_value(value)
            add_epoch(epoch)
            add_gauge(gauge)
            add_scale(scale)


_INT_ONLY = {int}
_first = operator.itemgetter(0)
_UTIL = fam.SW_UTILIZATION.name
_PFC_RATIO = fam.SW_PFC_RATIO.name
_PAUSE_RATIO = sig.PORT_PFC_PAUSE_RATIO.name
_COUNTER_COLUMNS = (
    fam.SW_RX_BYTES.name,
    fam.SW_TX_BYTES.name,
    fam.SW_DISCARDS.name,
    fam.SW_ERRORS.name,
    fam.SW_PFC_FRAMES.name,
    fam.SW_PFC_SECONDS.name,
    sig.PORT_PFC_PAUSE_FRAMES.name,
    fam.SW_LINK_PAUSE_FRAMES.name,
    fam.SW_QUEUE_DROPS.name,
)
_GAUGE_COLUMNS = (
    fam.SW_PORT_UP.name,
    fam.SW_PORT_FLAPS.name,
    fam.SW_SPEED.name,
    _UTIL,
    _PFC_RATIO,
    _PAUSE_RATIO,
)
_COLUMN_FAMILIES = _COUNTER_COLUMNS + _GAUGE_COLUMNS
"""The per-port families, handed to the store as Columns (in this order)."""

_Scale = tuple[float, float]
_Family = tuple[list[tuple[str, ...]], list[float], list[int | None]]
"""One family's series of one poll: labels, values, epochs (counters only)."""


@dataclass(slots=True)
class _Derived:
    """The counters of one width whose rates give gauges, in poll order: counter ``i``
    gives ``gauges[i]`` = (gauge family, labels), min(1, rate x mul / div) for
    ``scales[i]`` = (mul, div) (no gauge where None: a port without speed)."""

    keys: list[tuple[object, ...]] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    epochs: list[int | None] = field(default_factory=list)
    gauges: list[_Gauge] = field(default_factory=list)
    scales: list[_Scale | None] = field(default_factory=list)

    def add(
        self,
        key: tuple[object, ...],
        value: int,
        epoch: int,
        gauge: _Gauge,
        scale: _Scale | None,
    ) -> None:
        """Counter ``key`` at ``value``, whose rate gives ``gauge``."""
        self.keys.append(key)
        self.values.append(value)
        self.epochs.append(epoch)
        self.gauges.append(gauge)
        self.scales.append(scale)

    @classmethod
    def of(cls, derived: dict[int, _Derived], bits: int) -> _Derived:
        """The counters of width ``bits`` in ``derived`` (made when there are none yet)."""
        d = derived.get(bits)
        if d is None:
            d = derived[bits] = cls()
        return d


class _Samples:
    """One target's poll: single readings, and the per-port families as columns.

    Every series of the per-port families goes into per-family lists (no
    :class:`Reading` per series); :meth:`SwitchCollector.collect` hands them to the
    store as :class:`~fabricwatch.readings.Columns`, the same samples the single
    readings of ``Batch.readings`` stand for.
    """

    __slots__ = ("derived", "families", "singles", "ts")

    def __init__(self) -> None:
        self.ts: float | None = None  # when the poll's last response came
        self.singles: list[Reading] = []
        self.families: dict[str, _Family] = {n: ([], [], []) for n in _COLUMN_FAMILIES}
        self.derived: dict[int, _Derived] = {}

    def counter(self, name: str, labels: tuple[str, ...], value: float, epoch: int) -> None:
        labels_l, values_l, epochs_l = self.families[name]
        labels_l.append(labels)
        values_l.append(float(value))
        epochs_l.append(epoch)

    def gauge(self, name: str, labels: tuple[str, ...], value: float) -> None:
        labels_l, values_l, _ = self.families[name]
        labels_l.append(labels)
        values_l.append(value)

    def rate(self, rates: dict[int, KeyedRates], settings: TrackerSettings, ts: float) -> None:
        """Rate the derived counters (state in ``rates``, by width) and add their gauges."""
        for bits, d in self.derived.items():
            kr = rates.get(bits)
            if kr is None:
                kr = rates[bits] = KeyedRates(settings, bits)
            got = kr.update(tuple(d.keys), d.values, ts, d.epochs)
            fams = self.families
            for (gauge, labels), scale, rate in zip(d.gauges, d.scales, got, strict=True):
                if rate is not None and scale is not None:
                    labels_l, values_l, _ = fams[gauge]
                    labels_l.append(labels)
                    values_l.append(min(1.0, rate[0] * scale[0] / scale[1]))
        self.derived = {}


def _link(t: _Target, if_index: int, oper: int) -> int:
    """Port ``if_index``'s ifOperStatus this poll into ``t``; its flap count (a change
    between up and not up counts one, and is logged)."""
    prev = t.oper.get(if_index)
    flaps = t.flaps.setdefault(if_index, 0)
    if prev is not None and (prev == 1) != (oper == 1):
        t.flaps[if_index] = flaps = flaps + 1
        log.info(
            "switch_port_oper_changed",
            switch=t.name,
            port=t.ports[if_index],
            up=oper == 1,
            flaps=flaps,
        )
    t.oper[if_index] = oper
    return flaps


_Pick = Callable[[Sequence[Any]], tuple[Any, ...]]
"""Some of a poll's values, by their positions, as a tuple (in C)."""


def _picker(positions: Sequence[int]) -> _Pick:
    """:data:`_Pick` of ``positions``; -1 picks 0 (a port without that column)."""
    at = tuple(positions)
    if -1 in at:
        return lambda v: tuple(0 if i < 0 else v[i] for i in at)
    if len(at) == 1:
        i = at[0]
        return lambda v: (v[i],)
    if not at:
        return lambda v: ()
    return operator.itemgetter(*at)


_BIT, _PAUSE = range(2)
"""A derived gauge's scale by the port's speed: per bit (utilization) or per pause
quantum (ratios from frames); otherwise a fixed (mul, div)."""


@dataclass(slots=True)
class _CounterPart:
    """One counter family's series in a compiled poll, in the order the general path
    gives them: where each value is, its unit (None: all 1), labels and port."""

    family: str
    pick: _Pick
    units: list[float] | None
    labels: list[tuple[str, ...]]
    ports: list[int]  # each series' port (its position in _Steady.if_indexes): its epoch
    epochs: list[int | None] = field(default_factory=list)  # of the last poll's port epochs


@dataclass(slots=True)
class _GaugeOut:
    """One gauge family's share of a :class:`_RatedPart` while the ports' speeds stay:
    the rates at ``pick`` give ``min(1, rate x muls[i] / divs[i])``."""

    family: str
    pick: _Pick
    labels: list[tuple[str, ...]]
    muls: list[float]
    divs: list[float]


@dataclass(slots=True)
class _RatedPart:
    """The counters of one width whose rates give gauges, in a compiled poll (what
    :class:`_Derived` collects in the general path, in its order)."""

    bits: int
    keys: tuple[tuple[object, ...], ...]
    pick: _Pick
    ports: list[int]
    families: list[str]  # each counter's gauge: its family and labels (two lists, not
    labels: list[tuple[str, ...]]  # a (family, labels) tuple each: ~70 bytes less a counter)
    scales: list[int | _Scale]  # _BIT, _PAUSE or a fixed scale
    epochs: list[int | None] = field(default_factory=list)
    outs: list[_GaugeOut] = field(default_factory=list)  # for the last poll's speeds


@dataclass(slots=True)
class _Steady:
    """A target's poll compiled for one :class:`_PollLayout` (every value a number):
    each family's series as positions into the poll's values, picked in C, instead
    of a dict per port and appends per series. What depends on the values of a
    few columns (epochs on ifCounterDiscontinuityTime and reboots, link state,
    speeds) is worked out again only when those values change. Equal to the
    general path, series by series (``tests/switch/test_columns.py``)."""

    layout: _PollLayout
    if_indexes: list[int]
    labels: list[tuple[str, str]]  # (switch, port) of each port
    have: set[str]  # the IF-MIB columns the ports have
    disc: _Pick
    oper_ports: list[int]  # the ports with ifOperStatus (positions in if_indexes)
    oper_labels: list[tuple[str, str]]
    oper: _Pick
    high: _Pick
    low: _Pick
    counters: list[_CounterPart]
    rated: list[_RatedPart]
    epoch_key: tuple[int, tuple[int, ...]] | None = None  # (boot, discs) epochs are of
    opers: tuple[int, ...] | None = None  # the link states the gauges below are of
    up: list[float] = field(default_factory=list)
    flaps: list[float] = field(default_factory=list)
    speed_key: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    speed_labels: list[tuple[str, str]] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)  # bytes/s, of speed_labels' ports
    no_speed: list[str] = field(default_factory=list)


def _compile(t: _Target, layout: _PollLayout) -> _Steady:
    """Compile target ``t``'s poll for ``layout`` (see :class:`_Steady`), walking the
    ports as :meth:`SwitchCollector._port_samples` does."""
    sw = t.name
    if_indexes: list[int] = []
    port_labels: list[tuple[str, str]] = []
    have: set[str] = set()
    disc: list[int] = []
    oper: list[int] = []
    oper_ports: list[int] = []
    high: list[int] = []
    low: list[int] = []
    counters: dict[str, tuple[list[int], list[float], list[tuple[str, ...]], list[int]]] = {}
    rated: dict[
        int,
        tuple[
            list[tuple[object, ...]],
            list[int],
            list[int],
            list[str],
            list[tuple[str, ...]],
            list[int | _Scale],
        ],
    ] = {}
    # One int object per position and one tuple per fixed scale, however many parts
    # refer to them (a 512-port switch's poll has ~21 000 positions).
    ints = list(range(layout.ecn))
    fixed: dict[_Scale, _Scale] = {}

    def counter(family: str, at: int, unit: float, labels: tuple[str, ...], k: int) -> None:
        got = counters.get(family)
        if got is None:
            got = counters[family] = ([], [], [], [])
        got[0].append(at)
        got[1].append(unit)
        got[2].append(labels)
        got[3].append(k)

    def rate(  # noqa: PLR0917 - one derived counter's parts
        bits: int, key: tuple[object, ...], at: int, k: int, g: _Gauge, scale: int | _Scale
    ) -> None:
        got = rated.get(bits)
        if got is None:
            got = rated[bits] = ([], [], [], [], [], [])
        got[0].append(key)
        got[1].append(at)
        got[2].append(k)
        got[3].append(g[0])
        got[4].append(g[1])
        got[5].append(scale)

    for k, (if_index, start, mid, _, names, keys, tables) in enumerate(layout.ports):
        port = t.ports[if_index]
        pc = t.label_cache.get(if_index)
        if pc is None or pc.port != port:
            pc = t.label_cache[if_index] = _PortCache.of(sw, port, if_index)
        at = {name: ints[start + j] for j, name in enumerate(names)}
        have.update(names)
        if_indexes.append(if_index)
        port_labels.append(pc.sp)
        disc.append(at.get("disc", -1))
        if "oper" in at:
            oper.append(at["oper"])
            oper_ports.append(k)
        high.append(at.get("speed", -1))
        low.append(at.get("if_speed", -1))
        for name, family, direction in _OCTETS:
            if name in at:
                counter(family, at[name], 1.0, pc.sp, k)
                rate(64, pc.octets[name], at[name], k, pc.util[direction], _BIT)
        for name, family, direction in _DROPS:
            if name in at:
                counter(family, at[name], 1.0, pc.by_dir[direction], k)
        for j, (key, tb) in enumerate(zip(keys, tables, strict=True)):
            labels, rate_key, family, kind, dur_key, gauge = pc.recipe(sw, if_index, key, tb)
            counter(family, ints[mid + j], tb.unit if kind == _DURATION else 1.0, labels, k)
            if gauge is None or (dur_key is not None and dur_key in keys):
                continue  # no gauge, or the ratio comes from the duration counter
            if kind == _DURATION:
                scale: int | _Scale = fixed.setdefault((tb.unit, 1.0), (tb.unit, 1.0))
            else:
                scale = _PAUSE
            rate(tb.bits, rate_key, ints[mid + j], k, gauge, scale)
    return _Steady(
        layout,
        if_indexes,
        port_labels,
        have,
        _picker(disc),
        oper_ports,
        [port_labels[k] for k in oper_ports],
        _picker(oper),
        _picker(high),
        _picker(low),
        [
            _CounterPart(
                f, _picker(at), None if all(u == 1.0 for u in units) else units, labels, ports
            )
            for f, (at, units, labels, ports) in counters.items()
        ],
        [
            _RatedPart(bits, tuple(keys), _picker(at), ports, families, labels, scales)
            for bits, (keys, at, ports, families, labels, scales) in rated.items()
        ],
    )
