"""The gNMI collector: decode streamed notifications into switch readings."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from fabricwatch import signals as fam
from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.switchcommon.uplinks import (
    Neighbour,
    find_uplinks,
    local_macs,
    normalize_mac,
)
from fabricwatch.counters import CounterTracker
from fabricwatch.errors import CollectorError, ConfigError, ParseError
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.supervisor import DegradedError

from . import _metrics as sig
from ._client import ERROR_REASONS, StreamError, SubscriptionGroup, TargetStream, load_credentials
from ._profiles import Leaf, Profile, ProfileSet, load_profiles
from ._proto import Scalar, flatten, join, path_text, typed_value
from ._settings import GnmiSettings, GnmiTargetSettings

log = structlog.get_logger("fabricwatch.collectors.gnmi")

MAX_PATH_CHARS = 1024
"""Longest leaf path classified; real OpenConfig/SONiC paths are under 300."""
MAX_CACHE_CHARS = 8 * 1024 * 1024
"""Path-cache size cap per target (characters of cached paths; about 20 MB with
the classification results), on top of the ``max_paths`` count cap."""
PAUSE_QUANTUM_BITS = 65535 * 512
"""Bit-times one PFC frame with the maximum quanta pauses a priority for."""
_SPEED = re.compile(r"SPEED_(\d+(?:\.\d+)?)(M|G|T)B", re.IGNORECASE)
_SPEED_UNIT = {"m": 1e6, "g": 1e9, "t": 1e12}
_UP = frozenset({"up", "UP", "Up"})
_COUNTER_FAMILY: dict[str, MetricSpec] = {
    "ecn_marks": fam.SW_ECN,
    "ecn_marked_bytes": sig.ECN_MARKED_BYTES,
    "queue_drops": fam.SW_QUEUE_DROPS,
    "queue_tx_packets": sig.QUEUE_TX_PACKETS,
}
_LLDP_FIELDS = {
    "lldp_sys_name": "sys_name",
    "lldp_port_id": "port_id",
    "lldp_chassis_id": "chassis_id",
}


def _speed_bps(value: Scalar, unit: float) -> float | None:
    """Port speed in bit/s from a number (x unit) or an OpenConfig SPEED_400GB identity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) * unit if value > 0 and math.isfinite(value) else None
    m = _SPEED.search(value)
    if m is None:
        return None
    return float(m.group(1)) * _SPEED_UNIT[m.group(2).lower()]


def _counter(value: Scalar) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if f >= 0 and math.isfinite(f) else None


@dataclass(slots=True)
class _Batch:
    """Readings of one drain, and PFC frame samples awaiting their ratio."""

    out: list[Reading]
    frames: list[tuple[str, str, str, float, float, int]] = field(default_factory=list)


@dataclass(slots=True)
class _Port:
    up: bool | None = None
    flaps: int = 0
    speed_bps: float = 0.0
    lldp: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Target:
    cfg: GnmiTargetSettings
    mode: str
    stream: TargetStream | None = None
    profile: Profile | None = None
    ports: dict[str, _Port] = field(default_factory=dict)
    uplinks: dict[str, str] | None = None  # port -> neighbour port; None: not known yet
    subscribed_ports: list[str] | None = None
    cache: dict[str, tuple[Leaf, dict[str, str]] | None] = field(default_factory=dict)
    cache_chars: int = 0  # sum of the cached paths' lengths
    ignored: dict[str, int] = field(default_factory=lambda: {"malformed": 0, "unknown_path": 0})
    notifications: int = 0
    boot_time: float | None = None
    restarts: int = 0
    has_duration: set[tuple[str, str, str]] = field(default_factory=set)
    anchor_gen: int = -1
    anchor: float = 0.0  # monotonic - target time, for this generation
    last_ts: float = 0.0
    lldp_dirty: bool = False

    @property
    def name(self) -> str:
        return self.cfg.name


class GnmiCollector:
    """Subscribes to switches over gNMI for ECN marks, PFC, queue drops and link state."""

    def __init__(
        self,
        settings: GnmiSettings,
        env: CollectorEnv,
        *,
        profiles: ProfileSet | None = None,
    ) -> None:
        self._settings = settings
        self._env = env
        self._profiles = profiles or load_profiles(tuple(Path(d) for d in settings.profile_dirs))
        self._targets = [_Target(t, t.mode or settings.mode) for t in settings.targets]
        self._node_names = [env.node, *settings.node_names]
        self._tracker = CounterTracker()
        self._macs: set[str] | None = None
        self._max_skew = max(5.0, 3.0 * settings.interval)

    @property
    def name(self) -> str:
        """Registry name."""
        return "gnmi"

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
        """Validate profiles and credentials, then start one stream task per target.

        No network I/O happens here: targets may be down; their streams keep
        reconnecting in the background.
        """
        s = self._settings
        for t in self._targets:
            try:
                if t.cfg.profile != "auto":
                    t.profile = self._profiles.by_name(t.cfg.profile)
                load_credentials(t.cfg)
            except ConfigError as exc:
                raise CollectorError(f"gnmi target {t.name}: {exc}") from None
            if t.cfg.uplinks and t.mode == "node":
                t.uplinks = dict.fromkeys(t.cfg.uplinks, "static")
            t.stream = TargetStream(
                t.cfg,
                plan=lambda models, t=t: self._plan(t, models),  # type: ignore[misc]
                interval=s.interval,
                queue_size=s.queue_size,
                stale_after=s.stale_seconds(),
                backoff_initial=s.backoff_initial,
                backoff_max=s.backoff_max,
                clock=self._env.monotonic,
            )
            t.stream.start()

    async def close(self) -> None:
        """Stop every stream."""
        await asyncio.gather(*(t.stream.close() for t in self._targets if t.stream is not None))

    # -- subscription plan -------------------------------------------------

    def _plan(self, t: _Target, models: list[str]) -> list[SubscriptionGroup]:
        if t.cfg.profile == "auto":
            profile = self._profiles.select(models)
            if t.profile is None or t.profile.name != profile.name:
                log.info("gnmi_profile_selected", switch=t.name, profile=profile.name)
            t.profile = profile
        if t.profile is None:  # pragma: no cover - set above or in start()
            raise StreamError("rpc_error", "no profile")
        profile = t.profile
        # None: every port (wildcard); node mode: the uplinks, none until LLDP tells.
        ports = None if t.mode == "switch" else sorted(t.uplinks or ())
        t.subscribed_ports = ports
        groups: dict[str, list[tuple[str, bool]]] = {}
        for path, on_change, target in profile.subscription_paths(ports):
            groups.setdefault(target, []).append((path, on_change))
        return [
            SubscriptionGroup(profile.origin, target, profile.encoding, tuple(paths))
            for target, paths in groups.items()
        ]

    # -- collection --------------------------------------------------------

    async def collect(self) -> Sequence[Reading]:
        """Drain every target's queue and turn its notifications into readings."""
        out: list[Reading] = []
        for t in self._targets:
            self._drain(t, out)
            self._state_readings(t, out)
        failed = [
            t for t in self._targets if t.stream and not t.stream.up and t.stream.stats.failures
        ]
        if self._targets and len(failed) == len(self._targets):
            why = "; ".join(f"{t.name}: {t.stream.last_error}" for t in failed if t.stream)
            raise DegradedError(f"every gNMI target is down ({why})", out)
        return out

    def _drain(self, t: _Target, out: list[Reading]) -> None:
        stream = t.stream
        if stream is None:
            return
        q = stream.queue
        batch = _Batch(out)
        for _ in range(q.qsize()):
            try:
                recv, gen, resp = q.get_nowait()
            except asyncio.QueueEmpty:
                break
            if resp.WhichOneof("response") != "update":
                continue  # sync_response, deprecated error
            self._notification(t, resp.update, recv, gen, batch)
        # Ratios from frame counts only where no duration counter exists.
        sw_name = t.name
        for port, prio, direction, value, ts, gen in batch.frames:
            if (port, prio, direction) in t.has_duration:
                continue
            p = t.ports.get(port)
            speed = p.speed_bps if p and p.speed_bps else t.cfg.port_speed_gbps * 1e9
            rate = self._tracker.update(
                (sw_name, port, "pfc_frames", direction, prio), value, ts, epoch=gen
            )
            if rate is not None and speed > 0:
                ratio = min(1.0, rate.per_second * PAUSE_QUANTUM_BITS / speed)
                out.append(
                    Reading(fam.SW_PFC_RATIO.name, (sw_name, port, prio, direction), ratio, ts=ts)
                )
        if t.lldp_dirty:
            t.lldp_dirty = False
            self._update_uplinks(t)

    def _timestamp(self, t: _Target, stamp_ns: int, recv: float, gen: int) -> float:
        """Monotonic time of a sample from the target's timestamp (true sample spacing).

        The offset between the target's clock and ours is the smallest seen on
        this connection (the least delayed notification), so a notification
        that waited in a buffer keeps its own sample time; re-anchored when
        the target's clock steps; never later than receipt.
        """
        if stamp_ns <= 0:
            return recv
        target_s = stamp_ns / 1e9
        offset = recv - target_s
        if gen != t.anchor_gen or offset < t.anchor or offset - t.anchor > self._max_skew:
            t.anchor_gen = gen
            t.anchor = offset
        ts = min(target_s + t.anchor, recv)
        t.last_ts = ts
        return ts

    def _notification(self, t: _Target, n: Any, recv: float, gen: int, batch: _Batch) -> None:
        t.notifications += 1
        profile = t.profile
        if profile is None:
            return
        ts = self._timestamp(t, int(n.timestamp), recv, gen)
        prefix = path_text(n.prefix)
        for u in n.update:
            leaf_path = join(prefix, path_text(u.path))
            try:
                value = typed_value(u.val)
            except ParseError:
                t.ignored["malformed"] += 1
                continue
            if value is None:
                t.ignored["malformed"] += 1
                continue
            for path, v in flatten(leaf_path, value):
                self._leaf(t, profile, path, v, ts=ts, gen=gen, batch=batch)

    def _leaf(
        self,
        t: _Target,
        profile: Profile,
        path: str,
        value: Scalar,
        *,
        ts: float,
        gen: int,
        batch: _Batch,
    ) -> None:
        out, frames = batch.out, batch.frames
        cache = t.cache
        if path in cache:
            hit = cache[path]
        else:
            if len(path) > MAX_PATH_CHARS:
                t.ignored["malformed"] += 1  # no real leaf is this long; never cached
                return
            hit = profile.classify(path)
            # Bounded by count and by size: hostile long paths must not grow memory.
            if len(cache) >= self._settings.max_paths or t.cache_chars > MAX_CACHE_CHARS:
                cache.clear()
                t.cache_chars = 0
            cache[path] = hit
            t.cache_chars += len(path)
        if hit is None:
            t.ignored["unknown_path"] += 1
            return
        leaf, caps = hit
        signal = leaf.signal
        if signal == "boot_time":
            self._boot(t, value)
            return
        port = caps["port"]
        if signal in _LLDP_FIELDS:
            p = t.ports.setdefault(port, _Port())
            key = _LLDP_FIELDS[signal]
            text = str(value)
            if p.lldp.get(key) != text:
                p.lldp[key] = text
                t.lldp_dirty = True
            return
        if t.mode != "switch" and (t.uplinks is None or port not in t.uplinks):
            return
        sw_name = t.name
        if signal == "oper_status":
            self._oper(t, port, value)
            return
        if signal == "speed":
            bps = _speed_bps(value, leaf.unit)
            if bps is None:
                t.ignored["malformed"] += 1
            else:
                t.ports.setdefault(port, _Port()).speed_bps = bps
            return
        v = _counter(value)
        if v is None:
            t.ignored["malformed"] += 1
            return
        spec = _COUNTER_FAMILY.get(signal)
        if spec is not None:
            out.append(Reading(spec.name, (sw_name, port, caps["queue"]), v, ts=ts, epoch=gen))
            return
        direction = leaf.direction
        if signal in ("pfc_frames", "pfc_duration"):
            prio = str(int(caps["priority"]))
            if not 0 <= int(prio) <= 7:
                t.ignored["malformed"] += 1
                return
            labels = (sw_name, port, prio, direction)
            if signal == "pfc_frames":
                out.append(Reading(fam.SW_PFC_FRAMES.name, labels, v, ts=ts, epoch=gen))
                frames.append((port, prio, direction, v, ts, gen))
                return
            t.has_duration.add((port, prio, direction))
            seconds = v * leaf.unit
            out.append(Reading(fam.SW_PFC_SECONDS.name, labels, seconds, ts=ts, epoch=gen))
            rate = self._tracker.update((sw_name, port, signal, direction, prio), v, ts, epoch=gen)
            if rate is not None:
                ratio = min(1.0, rate.per_second * leaf.unit)
                out.append(Reading(fam.SW_PFC_RATIO.name, labels, ratio, ts=ts))
            return
        if signal in ("rx_bytes", "tx_bytes"):
            spec = fam.SW_RX_BYTES if signal == "rx_bytes" else fam.SW_TX_BYTES
            out.append(Reading(spec.name, (sw_name, port), v, ts=ts, epoch=gen))
            pst = t.ports.get(port)
            speed = pst.speed_bps if pst and pst.speed_bps else t.cfg.port_speed_gbps * 1e9
            rate = self._tracker.update((sw_name, port, signal), v, ts, epoch=gen)
            if rate is not None and speed > 0:
                util = min(1.0, rate.per_second * 8 / speed)
                d = "rx" if signal == "rx_bytes" else "tx"
                out.append(Reading(fam.SW_UTILIZATION.name, (sw_name, port, d), util, ts=ts))
            return
        if signal == "discards":
            out.append(
                Reading(fam.SW_DISCARDS.name, (sw_name, port, direction), v, ts=ts, epoch=gen)
            )
        elif signal == "errors":
            out.append(Reading(fam.SW_ERRORS.name, (sw_name, port, direction), v, ts=ts, epoch=gen))
        elif signal == "link_pause_frames":
            out.append(
                Reading(
                    fam.SW_LINK_PAUSE_FRAMES.name, (sw_name, port, direction), v, ts=ts, epoch=gen
                )
            )

    def _oper(self, t: _Target, port: str, value: Scalar) -> None:
        if not isinstance(value, str):
            t.ignored["malformed"] += 1
            return
        up = value in _UP
        p = t.ports.setdefault(port, _Port())
        if p.up is not None and p.up != up:
            p.flaps += 1
            log.info("switch_port_oper_changed", switch=t.name, port=port, up=up, flaps=p.flaps)
        p.up = up

    def _boot(self, t: _Target, value: Scalar) -> None:
        b = _counter(value)
        if b is None:
            t.ignored["malformed"] += 1
            return
        if t.boot_time is not None and b != t.boot_time:
            t.restarts += 1
            log.info("gnmi_target_restarted", switch=t.name, restarts=t.restarts)
        t.boot_time = b

    # -- ports -------------------------------------------------------------

    def _update_uplinks(self, t: _Target) -> None:
        """Recompute this node's uplinks from LLDP; resubscribe when they change."""
        if t.mode == "switch" or t.cfg.uplinks:
            return
        if self._macs is None:
            self._macs = local_macs(self._env.sys_root)
        names = sorted(t.ports)
        neighbours: list[Neighbour] = []
        for i, port in enumerate(names):
            lldp = t.ports[port].lldp
            if not lldp:
                continue
            chassis = lldp.get("chassis_id", "")
            port_id = lldp.get("port_id", "")
            neighbours.append(
                Neighbour(
                    time_mark=0,
                    local_port=i,
                    index=0,
                    chassis_subtype=4 if normalize_mac(chassis) else 7,
                    chassis_id=chassis.encode(),
                    port_subtype=3 if normalize_mac(port_id) else 5,
                    port_id=port_id.encode(),
                    sys_name=lldp.get("sys_name", ""),
                )
            )
        found, _ = find_uplinks(
            neighbours, {i: i for i in range(len(names))}, self._node_names, self._macs
        )
        uplinks = {names[i]: u.neighbour_port for i, u in found.items()}
        if uplinks == t.uplinks:
            return
        old = t.uplinks or {}
        log.info(
            "switch_uplinks_changed",
            switch=t.name,
            source="gnmi",
            added=sorted(uplinks.keys() - old.keys()),
            removed=sorted(old.keys() - uplinks.keys()),
        )
        t.uplinks = uplinks
        if sorted(uplinks) != t.subscribed_ports and t.stream is not None:
            t.stream.resubscribe()

    # -- state and health --------------------------------------------------

    def _state_readings(self, t: _Target, out: list[Reading]) -> None:
        now = self._env.monotonic()
        n = (t.name,)
        stream = t.stream
        up = bool(stream and stream.up)
        out.append(Reading(sig.TARGET_UP.name, n, 1.0 if up else 0.0, ts=now))
        if stream is not None:
            st = stream.stats
            out.append(Reading(sig.CONNECTS.name, n, float(st.connects), ts=now))
            out.append(Reading(sig.QUEUE_DEPTH.name, n, float(stream.queue.qsize()), ts=now))
            out.append(Reading(sig.QUEUE_WAITS.name, n, float(st.queue_waits), ts=now))
            out.extend(
                Reading(sig.STREAM_ERRORS.name, (t.name, r), float(st.errors.get(r, 0)), ts=now)
                for r in ERROR_REASONS
            )
        out.append(Reading(sig.NOTIFICATIONS.name, n, float(t.notifications), ts=now))
        out.append(Reading(sig.TARGET_RESTARTS.name, n, float(t.restarts), ts=now))
        out.extend(
            Reading(sig.IGNORED.name, (t.name, r), float(c), ts=now) for r, c in t.ignored.items()
        )
        if t.profile is not None:
            out.append(Reading(sig.TARGET_INFO.name, (t.name, t.profile.name), 1.0, ts=now))
        if t.mode != "switch" and t.uplinks:
            out.extend(
                Reading(fam.SW_UPLINK_INFO.name, (t.name, port, nb), 1.0, ts=now)
                for port, nb in sorted(t.uplinks.items())
            )
        if not up:
            return  # stale link state is not re-asserted while the stream is down
        for port, ps in t.ports.items():
            if t.mode != "switch" and (t.uplinks is None or port not in t.uplinks):
                continue
            sp = (t.name, port)
            if ps.up is not None:
                out.append(Reading(fam.SW_PORT_UP.name, sp, 1.0 if ps.up else 0.0, ts=now))
                out.append(Reading(fam.SW_PORT_FLAPS.name, sp, float(ps.flaps), ts=now))
            if ps.speed_bps:
                out.append(Reading(fam.SW_SPEED.name, sp, ps.speed_bps / 8, ts=now))
