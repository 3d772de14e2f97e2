"""The switch collector's fast paths equal the general ones.

The collector hands its per-port families to the store as Columns (a port whose
counters are the same as last poll's in whole runs) and rates the counters its
gauges derive from with :class:`KeyedRates`; these must give what single
readings, the counter-by-counter loop and a :class:`CounterTracker` give, over wraps, resets, gaps,
garbage and truncated replies, ports that come and go, and several targets.
A walk takes a whole well-formed reply at once, as its row-by-row loop would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from pathlib import Path

import pytest

from fabricwatch.collector import CollectionFailedError
from fabricwatch.collectors.switch._ber import Special
from fabricwatch.collectors.switch._client import take_rows, take_rows_each
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._rates import KeyedRates
from fabricwatch.collectors.switch._settings import TargetSettings
from fabricwatch.counters import CounterTracker, TrackerSettings
from fabricwatch.readings import Batch, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_snmp import SimAgent, SimPort, SimSwitch

from .conftest import Harness, ManualClock, community_file

_Snapshot = dict[tuple[str, tuple[str, ...]], tuple[float, float | None, float | None]]


def _target(tmp_path: Path, agent: SimAgent, name: str) -> TargetSettings:
    return TargetSettings(
        name=name,
        host="127.0.0.1",
        port=agent.port,
        community_file=community_file(tmp_path, "fw-sim"),
        timeout=1.0,
        retries=0,
        mode="switch",
    )


def _snapshot(store: SnapshotStore) -> _Snapshot:
    return {
        (s.spec.name, s.labels): (
            s.value,
            None if s.rate is None else s.rate.per_second,
            s.updated,
        )
        for s in store
    }


async def _collect(c: SwitchCollector) -> Batch:
    try:
        out = await c.collect()
    except CollectionFailedError as exc:
        out = exc.readings
    assert type(out) is Batch
    return out


async def test_columns_equal_single_readings_over_faults(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    targets = [_target(tmp_path, agent, n) for n in ("leaf1", "leaf2")]
    h = make_harness(targets, clock=clock, backoff_initial=0.5, backoff_max=1.0)
    # The same poller, its poll layout forgotten every poll: the general path.
    cold = make_harness(targets, clock=clock, backoff_initial=0.5, backoff_max=1.0)
    singles = SnapshotStore()
    singles.register("switch", h.collector.metrics())
    await h.collector.start()
    await cold.collector.start()
    # Fast 32-bit counters wrap every few polls; PFC pauses part of the time.
    sw.set_rate("Ethernet0", "in_discards", 1.5e9)
    sw.set_rate("Ethernet4", "out_errors", 3.0e9)
    sw.pfc_storm("Ethernet0", priority=3, direction="rx", fraction=0.4)
    sw.pfc_storm("Ethernet8", priority=5, direction="tx", fraction=0.9)
    steps: dict[int, Callable[[], None]] = {
        4: sw.restart,
        7: lambda: sw.clear_port_counters("Ethernet4"),
        9: lambda: setattr(agent, "fault", "garbage"),
        10: lambda: setattr(agent, "fault", "truncated"),
        11: lambda: setattr(agent, "fault", "silent"),
        13: lambda: setattr(agent, "fault", "none"),
        16: lambda: _drop_port(sw, agent, "Ethernet8"),
        19: lambda: _add_port(sw, agent, SimPort(9, "Ethernet8")),
        21: lambda: sw.set_rate("Ethernet0", "rx_bytes", 0.0),
        # Link state and speed change between steady polls (the compiled poll's caches).
        5: lambda: sw.set_up("Ethernet4", False),
        6: lambda: sw.set_up("Ethernet4", True),
        22: lambda: setattr(sw.port("Ethernet4"), "speed_mbps", 100_000),
        23: lambda: setattr(sw.port("Ethernet8"), "speed_mbps", 0),
        24: lambda: sw.set_up("Ethernet8", False),
    }
    seen_columns = seen_wrap = laid_out = 0
    for k in range(26):
        steps.get(k, lambda: None)()
        # A gap (longer than gap_after) while the agent is silent; 1 s otherwise.
        clock.advance(12.0 if k == 12 else 1.0)
        batch = await _collect(h.collector)
        seen_columns += len(batch.columns)
        flat: list[Reading] = list(batch)
        assert len(flat) == len(batch)
        now = clock()
        a = h.store.ingest("switch", batch, now)
        b = singles.ingest("switch", flat, now)
        assert (a.accepted, a.rejected) == (b.accepted, b.rejected)
        assert _snapshot(h.store) == _snapshot(singles)
        for name in ("leaf1", "leaf2"):
            cold.collector.target_state(name).layout = None
        cold_batch = await _collect(cold.collector)
        cold.store.ingest("switch", cold_batch, now)
        assert _snapshot(cold.store) == _snapshot(h.store)
        laid_out += h.collector.target_state("leaf1").steady is not None
        d = h.store.get("fabricwatch_switch_port_discards", ("leaf1", "Ethernet0", "rx"))
        if d is not None and d.value > 2**32:
            seen_wrap += 1
    assert seen_columns > 0 and seen_wrap > 0 and laid_out > 0
    flaps = h.store.get("fabricwatch_switch_port_flaps", ("leaf1", "Ethernet4"))
    assert flaps is not None and flaps.value == 2.0
    speed = h.store.get("fabricwatch_switch_port_speed_bytes", ("leaf1", "Ethernet4"))
    assert speed is not None and speed.value == 100e9 / 8
    ratio = h.store.get("fabricwatch_switch_pfc_pause_ratio", ("leaf2", "Ethernet0", "3", "rx"))
    assert ratio is not None and ratio.value == pytest.approx(0.4, abs=0.02)


def _drop_port(sw: SimSwitch, agent: SimAgent, name: str) -> None:
    sw.ports = [p for p in sw.ports if p.name != name]
    agent.refresh()


def _add_port(sw: SimSwitch, agent: SimAgent, port: SimPort) -> None:
    sw.ports.append(port)
    sw.ports.sort(key=lambda p: p.if_index)
    agent.refresh()


@pytest.mark.parametrize("seed", range(6))
def test_keyed_rates_equal_the_tracker(seed: int) -> None:
    """Random polls of keys that come and go, wrap (32 and 64 bit), reset, change
    epoch, stall, refresh slowly, and polls whose clock does not advance."""
    rng = random.Random(seed)
    settings = TrackerSettings()
    for bits in (32, 64):
        modulus = 1 << bits
        keyed = KeyedRates(settings, bits)
        tracker = CounterTracker(settings)
        universe: list[Hashable] = [("sw", i, "pfc", "rx", p) for i in range(4) for p in range(3)]
        values = {k: rng.randrange(modulus) for k in universe}
        epochs = dict.fromkeys(universe, 0)
        ts = 100.0
        keys = tuple(universe)
        for _ in range(120):
            if rng.random() < 0.15:  # the set of keys changes (a port leaves or comes back)
                keys = tuple(k for k in universe if rng.random() < 0.8)
            elif rng.random() < 0.5:
                keys = tuple(keys)  # equal keys in another tuple
            ts += rng.choice((0.0, 0.5, 1.0, 1.0, 1.0, 15.0))
            for k in keys:
                r = rng.random()
                if r < 0.05:
                    values[k] = rng.randrange(1000)  # a reset: back to a small value
                elif r < 0.08:
                    epochs[k] += 1
                elif r < 0.4:
                    pass  # slow refresh: the counter did not move this poll
                else:
                    step = rng.choice((1, 1000, modulus // 3))
                    values[k] = (values[k] + step) % modulus
            got = keyed.update(keys, [values[k] for k in keys], ts, [epochs[k] for k in keys])
            want = [tracker.update(k, values[k], ts, bits=bits, epoch=epochs[k]) for k in keys]
            assert got == want


@pytest.mark.parametrize("seed", range(4))
def test_take_rows_whole_reply_equals_row_by_row(seed: int) -> None:
    """The whole-reply check of a walk's column takes exactly what the loop takes:
    replies in order, past the column's end, with exception values, repeated or
    backward OIDs (agent bugs), and empty ones."""
    rng = random.Random(seed)
    col = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6)
    other = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 7)
    for _ in range(400):
        start = rng.randrange(0, 50)
        oids = [(*col, start + i) for i in range(1, rng.randrange(0, 12))]
        vbs: list[tuple[tuple[int, ...], object]] = [(o, rng.randrange(1 << 64)) for o in oids]
        mutation = rng.randrange(7)
        if vbs and mutation == 1:
            vbs[rng.randrange(len(vbs))] = (vbs[-1][0], Special.END_OF_MIB_VIEW)
        elif vbs and mutation == 2:
            vbs[rng.randrange(len(vbs))] = ((*other, 1), 5)  # walked past the column
        elif len(vbs) > 1 and mutation == 3:
            i = rng.randrange(1, len(vbs))
            vbs[i] = (vbs[i - 1][0], 7)  # the same OID twice
        elif len(vbs) > 1 and mutation == 4:
            rng.shuffle(vbs)
        elif vbs and mutation == 5:
            vbs[0] = (col, 1)  # the column's own OID
        cursor_at = (*col, rng.randrange(0, 60)) if rng.random() < 0.5 else col
        results = []
        for take in (take_rows, take_rows_each):
            rows: list[tuple[tuple[int, ...], object]] = [((*col, 0), 0)]
            cursor = {col: cursor_at}
            done: set[tuple[int, ...]] = set()
            progressed = take(col, list(vbs), rows, cursor, done)  # type: ignore[arg-type]
            results.append((progressed, rows, cursor, done))
        assert results[0] == results[1]
