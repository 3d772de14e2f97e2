"""The bounded call pool and the facade's per-key timeouts: no pile-up, daemon threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

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


async def test_call_each_gives_what_call_gives() -> None:
    """Results, the call's own exceptions, a hung key's timeout and then busy, and its
    recovery: the same outcomes from ``call_each`` as from one ``call`` per key."""

    def rounds(gate: threading.Event) -> list[list[tuple[str, Callable[[], object]]]]:
        def boom() -> object:
            raise ValueError("driver said no")

        return [
            [("gpu0", lambda: 1), ("gpu1", boom), ("gpu2", lambda: gate.wait(5.0))],
            [("gpu0", lambda: 2), ("gpu1", lambda: 3), ("gpu2", lambda: 4)],
            [("gpu0", lambda: 5), ("gpu2", lambda: 6)],
            [],
        ]

    async def one_by_one(
        facade: NvmlFacade, calls: list[tuple[str, Callable[[], object]]]
    ) -> list[tuple[object, BaseException | None]]:
        async def one(key: str, fn: Callable[[], object]) -> tuple[object, BaseException | None]:
            try:
                return await facade.call(key, fn), None
            except Exception as exc:  # noqa: BLE001 - compared below
                return None, exc

        return list(await asyncio.gather(*(one(k, fn) for k, fn in calls)))

    def shown(outcomes: Sequence[tuple[object, BaseException | None]]) -> list[tuple[object, str]]:
        return [(r, "" if e is None else f"{type(e).__name__}: {e}") for r, e in outcomes]

    got: dict[str, list[tuple[list[tuple[object, str]], int]]] = {}
    for how in ("call", "call_each"):
        facade = NvmlFacade(SimulatedGPUs("H100", 1, ScenarioClock()), workers=4, timeout=0.05)
        gate = threading.Event()
        trace: list[tuple[list[tuple[object, str]], int]] = []
        try:
            for i, calls in enumerate(rounds(gate)):
                if i == 2:
                    gate.set()
                    for _ in range(200):
                        if not facade.busy("gpu2"):
                            break
                        await asyncio.sleep(0.01)
                if how == "call":
                    outcomes = await one_by_one(facade, calls)
                else:
                    outcomes = await facade.call_each(calls)
                trace.append((shown(outcomes), facade.stuck))
        finally:
            gate.set()
        assert facade.close(5.0)
        got[how] = trace
    assert got["call_each"] == got["call"]
    assert got["call"][0] == (
        [(1, ""), (None, "ValueError: driver said no"), (None, "CallTimeout: gpu2")],
        1,
    )
    assert got["call"][1][0][2] == (None, "CallBusy: gpu2")
