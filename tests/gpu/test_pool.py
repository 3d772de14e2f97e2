"""The bounded call pool and the facade's per-key timeouts: no pile-up, daemon threads."""

from __future__ import annotations

import threading

import pytest

from fabricwatch.collectors.gpu._facade import CallBusy, CallTimeout, NvmlFacade
from fabricwatch.collectors.gpu._pool import CallPool
from fabricwatch.testing.sim_gpu import ScenarioClock, SimulatedGPUs


def test_pool_is_bounded_and_daemon() -> None:
    pool = CallPool(2)
    gate = threading.Event()
    futs = [pool.submit(gate.wait, 5.0) for _ in range(5)]
    assert pool.threads == 2
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("nvml-"))
    gate.set()
    assert all(f.result(timeout=5.0) for f in futs)
    pool.close()
    assert pool.join(5.0)
    with pytest.raises(RuntimeError):
        pool.submit(int)


def test_pool_carries_exceptions() -> None:
    pool = CallPool(1)

    def boom() -> None:
        raise ValueError("driver said no")

    with pytest.raises(ValueError, match="driver said no"):
        pool.submit(boom).result(timeout=5.0)
    pool.close()
    assert pool.join(5.0)
    with pytest.raises(ValueError, match="workers"):
        CallPool(0)


async def test_facade_timeout_then_busy_then_recovers() -> None:
    facade = NvmlFacade(SimulatedGPUs("H100", 1, ScenarioClock()), workers=2, timeout=0.05)
    gate = threading.Event()
    try:
        with pytest.raises(CallTimeout):
            await facade.call("gpu0", gate.wait, 5.0)
        assert facade.stuck == 1
        for _ in range(3):  # a stuck key never queues a second call
            with pytest.raises(CallBusy):
                await facade.call("gpu0", gate.wait, 5.0)
        assert facade.threads == 1
        assert await facade.call("gpu1", int, "7") == 7  # other keys carry on
    finally:
        gate.set()
    for _ in range(100):
        if not facade.busy("gpu0"):
            break
        threading.Event().wait(0.01)
    assert facade.stuck == 0
    assert await facade.call("gpu0", int, "8") == 8
    assert facade.close(5.0)
