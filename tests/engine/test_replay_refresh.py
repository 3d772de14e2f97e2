"""Slow-refresh exporters in replay: a value re-read from the exporter's
cache between two of its refreshes is no new sample (issue #16, slow-refresh
counters; :mod:`fabricwatch.engine.replay_refresh`)."""

from __future__ import annotations

import io
import itertools
import math
import random

from bench import crosscheck_traces as gen
from fabricwatch.engine import signals as sig
from fabricwatch.engine import tracegen as tg
from fabricwatch.engine.replay import run_replay, sample_spacing
from fabricwatch.engine.replay_mapping import Mapper, Sample
from fabricwatch.engine.replay_openmetrics import parse_openmetrics
from fabricwatch.engine.replay_refresh import held_mask, refresh_periods, refresh_steps
from fabricwatch.engine.settings import EngineSettings

T0 = 1_700_000_000.0


def _mapped(text: str) -> tuple[list[Sample], Mapper]:
    m = Mapper()
    parse_openmetrics(io.StringIO(text + "\n# EOF\n"), m)
    return m.finish(), m


def _dcgm(spacing: float, n: int, refresh: int, *, seed: int = 5) -> str:
    """8 GPUs' power and NVLink rate from a dcgm-exporter that collects every
    ``refresh`` scrapes: each scrape re-reads the latest collection."""
    rng = random.Random(seed)
    lines: list[str] = []
    for gpu in range(8):
        held_p = held_r = 0.0
        for i in range(n):
            ts = T0 + i * spacing
            if i % refresh == 0:
                held_p = 400.0 + 20.0 * rng.random()
                held_r = 1e9 * (1.0 + 0.1 * rng.random())
            lines.append(f'DCGM_FI_DEV_POWER_USAGE{{gpu="{gpu}"}} {held_p!r} {ts:.3f}')
            lines.append(f'DCGM_FI_PROF_NVLINK_TX_BYTES{{gpu="{gpu}"}} {held_r!r} {ts:.3f}')
    lines.sort(key=lambda line: (line.split("{")[0], line.split()[0], float(line.split()[-1])))
    return "\n".join(lines)


def _series(samples: list[Sample], family: str, labels: tuple[str, ...]) -> list[Sample]:
    return [s for s in samples if s[1] == family and s[2] == labels]


def test_held_repeats_of_a_slow_refresh_exporter_are_no_samples() -> None:
    samples, m = _mapped(_dcgm(5.0, 240, 3))
    power = _series(samples, sig.GPU_POWER, ("0",))
    steps = [b[0] - a[0] for a, b in itertools.pairwise(power)]
    assert sig.median(steps) == 15.0, steps[:10]
    assert m.dropped.get("held_repeat", 0) > 0
    # The NVLink rate integrates over the whole refresh: bytes keep their total.
    tx = _series(samples, sig.NVLINK_TX, ("0", "total"))
    assert sig.median([b[0] - a[0] for a, b in itertools.pairwise(tx)]) == 15.0
    assert math.isclose(tx[-1][3] / (tx[-1][0] - tx[0][0]), 1.05e9, rel_tol=0.05)


def test_every_scrape_is_a_sample_where_the_exporter_refreshes_each_scrape() -> None:
    samples, m = _mapped(_dcgm(5.0, 240, 1))
    assert len(_series(samples, sig.GPU_POWER, ("0",))) == 240
    assert "held_repeat" not in m.dropped


def test_a_gauge_that_truly_holds_still_is_not_read_as_slow_refresh() -> None:
    # An idle GPU's power and a constant gauge repeat legitimately; a gauge
    # that changes at random scrapes (integer percent) is refreshed each scrape.
    rng = random.Random(3)
    times = [T0 + i for i in range(600)]
    constant = [70.0] * 600
    assert refresh_steps([], 1.0) == 1
    steps = [float(rng.choice((50, 50, 60, 60, 60, 70))) for _ in times]
    periods = refresh_periods(
        {"idle": (times, constant), "util": (times, steps)}, {"idle": "gpu", "util": "gpu"}
    )
    assert periods == {}


def test_the_refresh_period_is_read_where_values_often_hold_over_refreshes() -> None:
    # Changes every 9 scrapes more often than every 3 (values held over two
    # or three refreshes: flat or aliased signals), yet every interval a
    # multiple of 3: the exporter refreshes every 3 scrapes, not every 9
    # (with 9 only 38 % of the intervals were multiples and the data read
    # as fresh: cross-check seed 2041).
    gaps = [9] * 38 + [3] * 26 + [6] * 24 + [12] * 10 + [24]
    random.Random(6).shuffle(gaps)
    changes = list(itertools.accumulate(gaps, initial=0))
    assert refresh_steps([float(c) for c in changes], 1.0) == 3
    # Intervals of 3 and 4 scrapes alike share no refresh period.
    mixed = itertools.accumulate([3, 4, 3] * 15, initial=0)
    assert refresh_steps([float(c) for c in mixed], 1.0) == 1


def test_held_repeats_of_a_flat_aliased_gpu_group_are_dropped() -> None:
    # The trace of 2041 (1 s, dcgm every 3 scrapes, power only): a 1.5 s
    # evaluation pause read idle on the three scrapes of one refresh, next
    # to a write burst on another disk, opened a 2 s "checkpoint". Its GPU
    # samples are one refresh apart and the pause one sample: no incident but
    # the job's slowdown.
    trace = gen.generate(2041, "ecn_slow", "missing_family", 1.0)
    assert trace.params.get("slow_refresh") == "dcgm every 3 scrapes"
    assert any(c.what == "eval_pause+disk_burst" for c in trace.confounders)
    samples, mapper = _mapped(trace.text.removesuffix("# EOF\n"))
    assert mapper.dropped.get("held_repeat", 0) > 0
    power = _series(samples, sig.GPU_POWER, ("0",))
    assert sig.median([b[0] - a[0] for a, b in itertools.pairwise(power)]) == 3.0
    incs = [tr.incident for tr in run_replay(samples).incidents()]
    assert [(i.kind, i.cause) for i in incs] == [("slowdown", "unknown")], [i.summary for i in incs]


def test_one_held_series_in_a_fresh_group_keeps_its_samples() -> None:
    # A fresh exporter whose series change every scrape, with one swapped
    # pair of samples: noise between refreshes is no refresh period.
    rng = random.Random(4)
    times = [T0 + i for i in range(300)]
    series = {f"g{k}": (times, [rng.random() for _ in times]) for k in range(4)}
    vals = list(series["g0"][1])
    vals[10], vals[11] = vals[11], vals[10]
    series["g0"] = (times, vals)
    assert refresh_periods(series, dict.fromkeys(series, "gpu")) == {}


def test_held_mask_keeps_each_change_and_one_sample_per_refresh() -> None:
    times = [float(i) for i in range(12)]
    values = [1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3]
    mask = held_mask(times, [float(v) for v in values], 3.0)
    assert [t for t, k in zip(times, mask, strict=True) if k] == [0.0, 3.0, 6.0, 9.0]


def test_dcgm_refreshing_every_third_scrape_keeps_an_nvlink_crc_burst_the_cause() -> None:
    # dcgm-exporter collecting every 3 scrapes at 15 s: the CRC counter of
    # GPU 3 holds for two scrapes and then jumps, and its job stalls. Read as
    # samples, the repeats make the burst look like zero rate and the stall's
    # window too fine; the stall was 'unknown'.
    trace = gen.generate(202054, "nvlink_crc", "two_jobs", 15.0)
    assert str(trace.params.get("slow_refresh", "")).startswith("dcgm every")
    mapper = Mapper()
    parse_openmetrics(io.StringIO(trace.text), mapper, source="nvlink_crc.om")
    res = run_replay(mapper.finish())
    verdicts = [(tr.incident.cause, tr.incident.culprit.key) for tr in res.incidents()]
    assert verdicts == [("nvlink_degraded", trace.truth[0].culprits[0])], verdicts


def test_the_sweeps_slow_refresh_variant_is_read_as_such() -> None:
    # bench/engine_eval.py's slow_refresh variant (tracegen): dcgm-exporter
    # refreshing every 2-3 scrapes below 30 s. Replay sees the refresh
    # period (held repeats dropped), node_exporter's series at the scrape.
    for spacing, slow in ((5.0, True), (30.0, False)):
        plan = tg.plan_for(31379, spacing, "slow_refresh", hours=0.5)
        buf = io.StringIO()
        tg.generate(plan, buf.write)
        mapper = Mapper()
        parse_openmetrics(io.StringIO(buf.getvalue()), mapper)
        samples = mapper.finish()
        sp = sample_spacing(samples)
        # The GPU exporter's series outnumber the node's: the scrape is read
        # off the node's own series, and the warning compares with that.
        assert sp is not None and sp.node == spacing
        if slow:
            assert sp.gpu_work in (2 * spacing, 3 * spacing), sp
            assert mapper.dropped.get("held_repeat", 0) > 0
            assert f"other series {spacing:g} s" in sp.warning(EngineSettings())
        else:
            assert sp.gpu_work == spacing and not mapper.dropped.get("held_repeat")
