"""Faults: restarts, TLS and auth errors, malformed data, stalls, slow consumers, no target."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collectors.gnmi._proto import make_path, pb
from fabricwatch.collectors.gnmi._settings import GnmiTargetSettings
from fabricwatch.testing.sim_gnmi import demo_target
from tests.gnmi.conftest import MakeHarness, ManualClock, Pki, write_secret

pytestmark = pytest.mark.integration

ECN = fam.SW_ECN.name
KEYS = (
    (ECN, ("leaf1", "Ethernet1/1", "3")),
    (fam.SW_DISCARDS.name, ("leaf1", "Ethernet1/1", "rx")),
)


async def test_target_restart_resubscribes_without_a_spike(make_harness: MakeHarness) -> None:
    clock = ManualClock()
    sim = demo_target(2, layout="openconfig", clock=clock)
    sim.ecn_surge("Ethernet1/1", 3, 5_000)
    sim.set_rate("Ethernet1/1", "in_discards", 1e9)  # beyond 2^31 in 3 s: a 32-bit family
    h = await make_harness(sim, clock=clock, mode="switch")
    t = h.collector.target_state("leaf1")
    assert t.stream is not None
    await h.fresh(*KEYS)
    for _ in range(3):
        await h.step(clock, *KEYS)
    assert h.rate(ECN, "leaf1", "Ethernet1/1", "3") == pytest.approx(5_000, rel=1e-3)
    before = t.stream.stats.connects
    await h.server.restart()
    await h.until("resubscribed", lambda: t.stream is not None and t.stream.stats.connects > before)
    await h.fresh(*KEYS)
    for _ in range(3):
        await h.step(clock, *KEYS)
    assert h.rate(ECN, "leaf1", "Ethernet1/1", "3") == pytest.approx(5_000, rel=1e-3)
    ecn = h.store.get(ECN, ("leaf1", "Ethernet1/1", "3"))
    assert ecn is not None and max(p.value for p in ecn.history) <= 5_000 * 1.01
    disc = h.store.get(fam.SW_DISCARDS.name, ("leaf1", "Ethernet1/1", "rx"))
    assert disc is not None and max(p.value for p in disc.history) <= 1e9 * 1.01
    assert t.restarts == 1
    assert h.server.subscriptions >= 2
    assert sum(t.stream.stats.errors.values()) >= 1
    assert h.series("fabricwatch_gnmi_target_up", "leaf1") == 1.0


async def test_wrong_ca_is_a_clear_tls_error_and_recovers(
    make_harness: MakeHarness, pki: Pki, tmp_path: Path
) -> None:
    ca_copy = tmp_path / "ca.pem"
    shutil.copy(pki.wrong_ca, ca_copy)
    target = GnmiTargetSettings(name="leaf1", host="127.0.0.1", tls=pki.client_tls(ca=ca_copy))
    h = await make_harness(demo_target(2), tls=pki.server_tls(mutual=True), target=target)
    t = h.collector.target_state("leaf1")
    assert t.stream is not None
    await h.until(
        "a TLS failure", lambda: t.stream is not None and t.stream.stats.errors["tls"] >= 1
    )
    assert not t.stream.up
    assert t.stream.last_reason == "tls"
    assert "TLS handshake failed" in t.stream.last_error
    assert "CERTIFICATE_VERIFY_FAILED" in t.stream.last_error.upper()
    assert h.series("fabricwatch_gnmi_target_up", "leaf1") == 0.0
    assert h.series("fabricwatch_gnmi_stream_errors", "leaf1", "tls") is not None
    assert h.server.capabilities_calls == 0
    # The operator fixes the CA file: the next attempt reads it again.
    shutil.copy(pki.ca, ca_copy)
    await h.until(
        "up after the CA fix", lambda: h.series("fabricwatch_gnmi_target_up", "leaf1") == 1.0
    )


async def test_tls_is_not_skipped_unless_insecure_is_set(make_harness: MakeHarness) -> None:
    target = GnmiTargetSettings(name="leaf1", host="127.0.0.1")  # TLS with system roots
    h = await make_harness(demo_target(2), target=target)  # a plain-text target
    t = h.collector.target_state("leaf1")
    await h.until(
        "a TLS failure", lambda: t.stream is not None and t.stream.stats.errors["tls"] >= 1
    )
    assert h.server.capabilities_calls == 0


async def test_wrong_password_is_an_auth_error(
    make_harness: MakeHarness, pki: Pki, tmp_path: Path
) -> None:
    target = GnmiTargetSettings(
        name="leaf1",
        host="127.0.0.1",
        tls=pki.client_tls(),
        username="telemetry",
        password_file=write_secret(tmp_path, "pw", "wrong"),
    )
    h = await make_harness(
        demo_target(2), tls=pki.server_tls(), target=target, username="telemetry", password="right"
    )
    t = h.collector.target_state("leaf1")
    await h.until(
        "an auth failure", lambda: t.stream is not None and t.stream.stats.errors["auth"] >= 1
    )
    assert t.stream is not None and not t.stream.up
    assert "authentication rejected" in t.stream.last_error


def _garbage() -> list[object]:
    ecn_leaf = "/qos/interfaces/interface[interface-id=Ethernet1/1]/output/queues/queue[name=7]"
    return [
        # Truncated JSON.
        pb.Notification(
            update=[
                pb.Update(
                    path=make_path("/interfaces/interface[name=Ethernet1/1]/state/counters"),
                    val=pb.TypedValue(json_ietf_val=b'{"openconfig-interfaces:in-octets": "12'),
                )
            ]
        ),
        # Wrong types on known leaves, a negative counter, an empty value.
        pb.Notification(
            prefix=make_path(f"{ecn_leaf}/state"),
            update=[
                pb.Update(path=make_path("ecn-marked-pkts"), val=pb.TypedValue(string_val="lots")),
                pb.Update(path=make_path("dropped-pkts"), val=pb.TypedValue(int_val=-5)),
                pb.Update(path=make_path("transmit-pkts"), val=pb.TypedValue()),
                pb.Update(path=make_path("ecn-marked-octets"), val=pb.TypedValue(bool_val=True)),
            ],
        ),
        # Unknown paths.
        pb.Notification(
            update=[
                pb.Update(path=make_path("/vendor/x[id=1]/y"), val=pb.TypedValue(uint_val=1)),
                pb.Update(
                    path=make_path("/interfaces/interface[name=Ethernet1/1]/state/counters/z"),
                    val=pb.TypedValue(uint_val=2),
                ),
            ]
        ),
        # A priority out of range never passes the profile's digit capture: unknown.
        pb.Notification(
            update=[
                pb.Update(
                    path=make_path("/system/state/boot-time"), val=pb.TypedValue(string_val="x")
                )
            ]
        ),
    ]


async def test_malformed_notifications_and_unknown_paths_are_counted_and_ignored(
    make_harness: MakeHarness,
) -> None:
    clock = ManualClock()
    sim = demo_target(2, layout="openconfig", clock=clock)
    sim.ecn_surge("Ethernet1/1", 3, 2_000)
    sim.inject = _garbage()
    h = await make_harness(sim, clock=clock, mode="switch")
    t = h.collector.target_state("leaf1")
    await h.fresh((ECN, ("leaf1", "Ethernet1/1", "3")))
    for _ in range(3):
        await h.step(clock, (ECN, ("leaf1", "Ethernet1/1", "3")))
    assert h.rate(ECN, "leaf1", "Ethernet1/1", "3") == pytest.approx(2_000, rel=1e-3)
    assert t.ignored["malformed"] >= 3 * 6
    assert t.ignored["unknown_path"] >= 3 * 2
    readings = await h.collect()
    counted = {
        r.labels[1]: r.value for r in readings if r.name == "fabricwatch_gnmi_ignored_updates"
    }
    assert counted == {
        "malformed": t.ignored["malformed"],
        "unknown_path": t.ignored["unknown_path"],
    }
    assert t.stream is not None and t.stream.up and t.stream.stats.connects == 1
    # Garbage never reached a series: queue 7 only has its good samples.
    bad = h.store.get(ECN, ("leaf1", "Ethernet1/1", "7"))
    assert bad is not None and bad.value == 0.0
    assert t.restarts == 0  # a malformed boot-time is not a restart


async def test_a_silent_target_is_marked_down_and_reconnected(make_harness: MakeHarness) -> None:
    sim = demo_target(2)
    h = await make_harness(sim, mode="switch", stale_after=0.3)
    t = h.collector.target_state("leaf1")
    assert t.stream is not None
    await h.until("up", lambda: t.stream is not None and t.stream.up)
    sim.stalled = True
    await h.until("stale", lambda: t.stream is not None and t.stream.stats.errors["stale"] >= 1)
    assert h.series("fabricwatch_gnmi_target_up", "leaf1") == 0.0 or t.stream.up
    sim.stalled = False
    await h.until(
        "up again", lambda: t.stream is not None and t.stream.up and t.stream.stats.connects >= 2
    )


async def test_slow_consumer_backpressure_bounds_memory(make_harness: MakeHarness) -> None:
    sim = demo_target(2, layout="openconfig", queues=2)
    sim.flood = 5
    h = await make_harness(sim, mode="switch", queue_size=8, stale_after=5.0)
    t = h.collector.target_state("leaf1")
    assert t.stream is not None
    stream = t.stream
    # Do not collect: the queue fills, the reader stops, the target is held back.
    for _ in range(500):
        if stream.queue.qsize() >= 8:
            break
        await asyncio.sleep(0.01)
    assert stream.queue.qsize() == 8
    plateau = None
    for _ in range(50):
        a = h.server.sent
        await asyncio.sleep(0.1)
        if h.server.sent == a:
            plateau = a
            break
    assert plateau is not None, "the target kept sending into a full client"
    assert stream.queue.qsize() == 8  # never more than configured
    assert stream.stats.queue_waits >= 1
    # Collecting again drains it and the stream carries on (no stale reconnect).
    before = h.ingested
    await h.until("draining resumes the stream", lambda: h.server.sent > plateau)
    assert h.ingested > before
    assert stream.stats.errors["stale"] == 0 and stream.stats.connects == 1
    assert h.series("fabricwatch_gnmi_queue_full", "leaf1") is not None


async def test_unreachable_target_backs_off_and_recovers(make_harness: MakeHarness) -> None:
    h = await make_harness(demo_target(2), start_server=False, mode="switch")
    t = h.collector.target_state("leaf1")
    await h.until(
        "two failed attempts",
        lambda: t.stream is not None and t.stream.stats.errors["unreachable"] >= 2,
    )
    assert h.series("fabricwatch_gnmi_target_up", "leaf1") == 0.0
    await h.server.start()
    await h.until("up", lambda: h.series("fabricwatch_gnmi_target_up", "leaf1") == 1.0)


async def test_a_target_that_never_answers_times_out(make_harness: MakeHarness) -> None:
    held: list[asyncio.StreamWriter] = []

    async def swallow(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)  # accept, read nothing, answer nothing

    h = await make_harness(
        demo_target(2),
        start_server=False,
        target=GnmiTargetSettings(name="leaf1", host="127.0.0.1", insecure=True, timeout=0.3),
    )
    tcp = await asyncio.start_server(swallow, "127.0.0.1", h.server.port)
    try:
        t = h.collector.target_state("leaf1")
        await h.until(
            "a timeout", lambda: t.stream is not None and t.stream.stats.errors["timeout"] >= 1
        )
        assert t.stream is not None and not t.stream.up
    finally:
        tcp.close()
        for w in held:
            w.close()
        await tcp.wait_closed()
