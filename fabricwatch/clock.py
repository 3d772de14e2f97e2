"""Time as the pipeline sees it: a monotonic clock, a wall clock and sleep.

The daemon and the supervisor take a :class:`Clock` so the demo can run the
real pipeline faster than real time (:func:`scaled_clock`) and tests can
control time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clock:
    """The three time functions the pipeline uses."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


def scaled_clock(speed: float) -> Clock:
    """A clock running ``speed`` times faster than real time, starting now.

    Sleeps are shortened accordingly, so an interval of 1 s passes in
    ``1/speed`` real seconds while every timestamp the pipeline sees still
    advances by 1 s.
    """
    if speed <= 0:
        msg = "speed must be > 0"
        raise ValueError(msg)
    m0, w0 = time.monotonic(), time.time()

    def monotonic() -> float:
        return m0 + (time.monotonic() - m0) * speed

    def wall() -> float:
        return w0 + (time.monotonic() - m0) * speed

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / speed)

    return Clock(monotonic, wall, sleep)
