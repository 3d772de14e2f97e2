"""Write-burst detection against the series' own baseline."""

from __future__ import annotations

from fabricwatch.collectors.storage._burst import BurstDetector, BurstSettings, BurstState

MB = 1e6


def _run(
    det: BurstDetector, rates: list[float], t0: float = 0.0, total0: float = 0.0
) -> tuple[list[BurstState], float, float]:
    t, total = t0, total0
    states: list[BurstState] = []
    for r in rates:
        t += 1.0
        total += r
        states.append(det.update(t, total))
    return states, t, total


def test_periodic_checkpoint_bursts_are_flagged_background_is_not() -> None:
    det = BurstDetector(BurstSettings(window=10, baseline_window=300, factor=4, min_rate=50 * MB))
    # 5 minutes of 20 MB/s background (logs, data loading): never a burst.
    states, t, total = _run(det, [20 * MB] * 300)
    assert not any(s.burst for s in states)
    assert states[-1].baseline is not None
    assert abs(states[-1].baseline - 20 * MB) < 1
    assert abs(states[-1].rate - 20 * MB) < 1
    assert abs(states[-1].window_bytes - 200 * MB) < 1
    # A 30 s checkpoint at 1.5 GB/s.
    states, t, total = _run(det, [1500 * MB] * 30, t, total)
    first = next(i for i, s in enumerate(states) if s.burst)
    assert first <= 2, "a 75x burst must be seen within a few seconds"
    assert all(s.burst for s in states[first:])
    # Back to background: the flag clears once the window has drained.
    states, t, total = _run(det, [20 * MB] * 30, t, total)
    assert states[-1].burst is False
    # The second checkpoint is seen too: 30 s of 300 s does not move the median.
    states, _, _ = _run(det, [1500 * MB] * 30, t, total)
    assert any(s.burst for s in states)
    assert states[-1].baseline is not None and states[-1].baseline < 30 * MB


def test_min_rate_keeps_idle_devices_quiet() -> None:
    det = BurstDetector(BurstSettings(window=5, baseline_window=60, factor=4, min_rate=50 * MB))
    states, t, total = _run(det, [0.0] * 60)
    # 100x of nothing is still small: 1 MB/s is not a checkpoint.
    states, _, _ = _run(det, [1 * MB] * 20, t, total)
    assert not any(s.burst for s in states)


def test_no_burst_before_a_baseline_exists() -> None:
    det = BurstDetector(BurstSettings(window=10, baseline_window=100, factor=2, min_rate=1))
    states, _, _ = _run(det, [500 * MB] * 5)
    assert all(s.baseline is None and not s.burst for s in states)


def test_hysteresis_one_slow_second_does_not_split_a_burst() -> None:
    det = BurstDetector(BurstSettings(window=2, baseline_window=100, factor=4, min_rate=10 * MB))
    states, t, total = _run(det, [5 * MB] * 100)
    states, t, total = _run(det, [800 * MB] * 10, t, total)
    assert states[-1].burst
    states, t, total = _run(det, [100 * MB], t, total)  # half-speed second
    assert states[-1].burst


def test_counter_going_back_restarts_without_negative_rates() -> None:
    det = BurstDetector(BurstSettings(window=5, baseline_window=50, factor=4, min_rate=1))
    _run(det, [10 * MB] * 20)
    s = det.update(100.0, 5.0)  # device replaced: total went back
    assert s.rate == 0.0 and s.window_bytes == 0.0
    s = det.update(100.0, 10.0)  # time did not advance
    assert s.rate >= 0.0
