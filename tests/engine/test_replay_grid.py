"""Replay ticks in the phase of the data: once a round of samples is in.

Live, the engine ticks right after the collectors' round of its instant
(``Supervisor.settled``). Recorded data comes in phases of its own (each
Prometheus target has its scrape offset); a grid on fixed half-tick marks
made every stall wait for up to a tick more than live (at 1 s samples,
half a sample on average: seed 777 of the sweep read a median latency of
2.25 samples at 1 s, 2.16 in the data's phase).
"""

from __future__ import annotations

import math
import random

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay import first_tick, run_replay
from fabricwatch.engine.replay_mapping import Sample

T0 = 1_700_000_000.0


def _phase(t: float) -> float:
    return round(t - math.floor(t), 6)


def _round(
    seconds: int, phases: dict[str, float], *, jitter: float = 0.0, late: float = 0.0
) -> list[Sample]:
    """One sample per family per second at its phase (each scrape of a family
    moved by up to ``jitter``; a share ``late`` of them 0.3 s late)."""
    r = random.Random(5)
    out: list[Sample] = []
    for k in range(seconds):
        for fam, ph in phases.items():
            dt = r.uniform(-jitter, jitter) + (0.3 if r.random() < late else 0.0)
            out.append((round(T0 + k + ph + dt, 3), fam, ("0",), 1.0))
    out.sort(key=lambda s: s[0])
    return out


@pytest.mark.parametrize(
    ("phases", "jitter", "late", "want"),
    [
        # dcgm-exporter's and node_exporter's scrapes 0.28 s apart: the round
        # is in with the later one.
        ({sig.GPU_SM: 0.13, sig.ST_WRITE_BYTES: 0.41}, 0.0, 0.0, 0.41),
        # Scrape jitter of +-30 ms: the latest of the cluster but a tenth of
        # its scrapes (0.41 + 0.8 x 0.03).
        ({sig.GPU_SM: 0.13, sig.ST_WRITE_BYTES: 0.41}, 0.03, 0.0, 0.434),
        # A few late scrapes do not move the grid.
        ({sig.GPU_SM: 0.13, sig.ST_WRITE_BYTES: 0.41}, 0.0, 0.03, 0.41),
        # A round across the tick boundary ends after it.
        ({sig.GPU_SM: 0.93, sig.ST_WRITE_BYTES: 0.05}, 0.0, 0.0, 0.05),
        # The engine's own recordings: the collectors' offsets in one round.
        ({sig.GPU_SM: 0.05, sig.NIC_ECN: 0.1, sig.SW_PFC_RATIO: 0.3}, 0.0, 0.0, 0.3),
    ],
)
def test_the_grid_ticks_when_a_round_is_in(
    phases: dict[str, float], jitter: float, late: float, want: float
) -> None:
    samples = _round(600, phases, jitter=jitter, late=late)
    t = first_tick(samples, 1.0)
    assert samples[0][0] <= t < samples[0][0] + 1.0
    assert _phase(t) == pytest.approx(want, abs=0.002)
    # On a sample's own time: a tick includes the samples of its phase.
    assert any(s[0] == t for s in samples) or jitter


def test_a_stall_opens_on_the_tick_that_has_its_samples() -> None:
    # GPU work at .13 each second, the hang from 1000.0: the first idle
    # sample is the one at 1001.13, and its discrete evidence (an XID) comes
    # with it. The open is dated on that sample's round, not the half tick.
    out: list[Sample] = []
    for k in range(1, 1801):
        ts = round(T0 + k + 0.13, 3)
        idle = 1000 < k < 1120
        for g in range(8):
            sm = 0.002 if idle else 0.8 + 0.01 * math.sin(7 * k + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        if k >= 1000:
            out.append((ts, sig.GPU_XID, ("3", "79"), 1.0 if k == 1001 else 0.0))
    opened = [tr for tr in run_replay(out).transitions if tr.kind == "opened"]
    assert [tr.incident.cause for tr in opened] == ["gpu_fault"]
    assert opened[0].at == round(T0 + 1001.13, 3)
