"""Node job reports: built from samples, parsed back, garbage refused; the ledger's
badput from them, with job time expiring like the jobs' other series."""

from __future__ import annotations

import json

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.errors import ParseError
from fabricwatch.fleet.jobwork import NCCL_BUS_BW, NCCL_RAS_MISSING, JobWork, parse, reports
from fabricwatch.fleet.ledger import Ledger, ledger_of

T0 = 1_760_000_040.0  # a multiple of 60


def _samples(seconds: int, gpus: int = 2, job: str = "slurm:1") -> list[Sample]:
    out: list[Sample] = []
    for k in range(seconds):
        t = T0 + k
        for g in range(gpus):
            out.append((t, sig.GPU_JOB, (str(g), job), 1.0))
            out.append((t, sig.GPU_SM, (str(g),), 0.5 + 0.1 * g))
    out.append((T0 + 5, NCCL_BUS_BW, ("0", "AllReduce"), 4.0e10))
    out.append((T0 + 6, NCCL_BUS_BW, ("0", "AllReduce"), 1.0e9))
    out.append((T0 + 7, NCCL_RAS_MISSING, ("gpu-3", "1", "9"), 1.0))
    return out


def test_reports_cover_the_job_time_and_round_trip() -> None:
    rs = reports("gpu-1", _samples(150), 60.0)
    assert [r.start for r in rs] == [T0, T0 + 60, T0 + 120]
    # 150 s of 2 GPUs: the job's GPU wall time, whatever the window cut.
    assert sum(r.gpu_seconds()["slurm:1"] for r in rs) == pytest.approx(300.0)
    first = rs[0]
    assert first.jobs == (("slurm:1", ("0", "1")),) and len(first.points) == 60
    assert first.points[0][0] == T0 and first.points[0][1] == pytest.approx(0.55)
    assert first.bus_bw == (("0", 1.0e9),) and first.missing == (("gpu-3", "1", "9"),)
    assert parse(first.body(), source="t") == first


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not json",
        b'{"schema": "fabricwatch.incident-event/v1"}',
        b'{"schema": "fabricwatch.node-jobwork/v1", "node": "", "start": 0, "end": 1}',
        b'{"schema": "fabricwatch.node-jobwork/v1", "node": "a", "start": 5, "end": 1,'
        b' "jobs": {}, "work": []}',
        b'{"schema": "fabricwatch.node-jobwork/v1", "node": "a", "start": 0, "end": 1,'
        b' "jobs": {"j": [1]}, "work": []}',
        b'{"schema": "fabricwatch.node-jobwork/v1", "node": "a", "start": 0, "end": 1,'
        b' "jobs": {}, "work": [[0, NaN]]}',
        b'{"schema": "fabricwatch.node-jobwork/v1", "node": "a", "start": 0, "end": 1,'
        b' "jobs": {}, "work": [], "nccl_missing": [["h", 1, "2"]]}',
    ],
)
def test_garbage_is_refused(payload: bytes) -> None:
    with pytest.raises(ParseError):
        parse(payload, source="t")


def test_truncation_and_size_are_refused() -> None:
    body = reports("gpu-1", _samples(60), 60.0)[0].body()
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(ParseError):
            parse(body[:cut], source="t")
    with pytest.raises(ParseError, match="bytes over"):
        parse(body, source="t", max_bytes=len(body) - 1)
    doc = json.loads(body)
    doc["work"] = [[T0, 0.5]] * 10_001
    with pytest.raises(ParseError, match="too many"):
        parse(json.dumps(doc).encode(), source="t")


def _lost(led: Ledger, key: str, secs: float, now: float, job: str = "slurm:1") -> None:
    led.apply({"key": key, "revision": 1, "cluster": "prod", "cause": "pfc_storm",
               "culprit": {"kind": "switch_port"}, "job": job, "gpu_seconds_lost": secs,
               "onset_unix": now, "state": "resolved", "resolved_unix": now}, now)  # fmt: skip


def test_badput_is_lost_over_the_jobs_gpu_wall_time_and_repeats_count_once() -> None:
    led = Ledger(job_expiry=3600.0)
    rs = reports("gpu-1", _samples(150), 60.0)
    for r in [*rs, rs[0]]:  # a repeated report (a QoS 1 redelivery) counts once
        led.observe("prod", r, r.end)
    _lost(led, "a", 30.0, T0 + 150)
    [e] = led.entries()
    assert e["job_gpu_seconds"] == pytest.approx(300.0)
    assert e["badput"] == pytest.approx(0.1)
    assert [b["badput"] for b in e["by_cause"]] == [pytest.approx(0.1)]
    assert ledger_of([], reports=[("prod", r) for r in rs]).job_time == led.job_time
    # No reports: no badput, never a division by zero.
    other = Ledger()
    _lost(other, "a", 30.0, T0)
    assert other.entries()[0]["badput"] is None


def test_job_time_of_a_thousand_jobs_stays_bounded() -> None:
    led = Ledger(job_expiry=3600.0)
    for k in range(1000):
        t = T0 + 60.0 * k
        r = JobWork(f"gpu-{k % 16}", t, t + 60.0, ((f"slurm:{k}", ("0", "1")),), ((t, 0.5),))
        led.observe("prod", r, t + 60.0)
        if k % 3 == 0:
            _lost(led, f"i{k}", 10.0, t + 60.0, job=f"slurm:{k}")
        led.expire(t + 60.0)
        assert len(led.job_time) <= 61 and len(led.jobs) <= 61
    names = {r.labels[1] for r in led.readings() if r.name == "fabricwatch_fleet_job_badput_ratio"}
    assert 0 < len(names) <= 21
