"""The node's job reports to the fleet (``fabricwatch.node-jobwork/v1``), built live.

The fleet's badput and live stragglers need, per node and per window, the GPUs
each job holds and how hard they work (:mod:`fabricwatch.fleet.jobwork`).
:class:`JobWorkBuffer` keeps, tick by tick, the readings of the few families a
report needs that arrived since the last tick, as replay
:data:`~fabricwatch.engine.replay_mapping.Sample` tuples stamped with the time
they were collected; once a window of the fleet's grid
(:data:`~fabricwatch.fleet.jobwork.WINDOW` seconds of unix time) has passed,
:func:`fabricwatch.fleet.jobwork.reports` turns them into the report, the same
function fleet replay runs over a node's history. :class:`JobWorkSender` hands
reports to the daemon's one MQTT publisher at QoS 1 in the background, so a
slow or absent broker never holds the tick: while disconnected a report waits
in the publisher's bounded buffer (oldest dropped, counted in
``fabricwatch_mqtt_dropped_messages``) like the metrics summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections import deque

import structlog

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.fleet import jobwork
from fabricwatch.fleet.jobwork import JobWork
from fabricwatch.outputs.mqtt import MqttPublisher
from fabricwatch.store import SnapshotStore

log = structlog.get_logger("fabricwatch.jobreports")

FAMILIES: tuple[str, ...] = (
    sig.GPU_JOB,
    sig.GPU_SM,
    sig.GPU_POWER,
    jobwork.NCCL_BUS_BW,
    jobwork.NCCL_RAS_MISSING,
)
"""The families :func:`fabricwatch.fleet.jobwork.reports` reads."""
MAX_SAMPLES = 100_000
"""Readings one window may hold: 72 GPUs x 3 families at 0.2 s over 60 s, with room."""


class JobWorkBuffer:
    """The current window's readings of :data:`FAMILIES`, bounded."""

    def __init__(
        self,
        node: str,
        *,
        window: float = jobwork.WINDOW,
        max_samples: int = MAX_SAMPLES,
        addresses: tuple[str, ...] = (),
    ) -> None:
        self.node = node
        self.addresses = addresses
        self.window = window
        self._samples: deque[Sample] = deque(maxlen=max(1, max_samples))
        self._seen = -math.inf  # monotonic time of the last tick's newest reading
        self._closed = -math.inf  # end of the last window reported (unix seconds)
        self.dropped = 0

    def take(self, store: SnapshotStore, monotonic: float, wall: float) -> list[JobWork]:
        """Add the readings collected since the last call; return the reports of the
        windows that ended by ``wall`` (usually none, once per window one)."""
        offset = wall - monotonic
        newest = self._seen
        for fam in FAMILIES:
            for s in store.family(fam):
                if s.updated <= self._seen:
                    continue
                newest = max(newest, s.updated)
                ts = s.updated + offset
                if ts < self._closed:
                    continue  # a window already reported (a wall clock step back)
                if len(self._samples) == self._samples.maxlen:
                    self.dropped += 1
                self._samples.append((ts, fam, s.labels, s.value))
        self._seen = newest
        lo = math.floor(wall / self.window) * self.window
        if not self._samples or self._samples[0][0] >= lo:
            return []
        done = [x for x in self._samples if x[0] < lo]
        rest = [x for x in self._samples if x[0] >= lo]
        self._samples.clear()
        self._samples.extend(rest)
        self._closed = lo
        out = jobwork.reports(self.node, done, self.window)
        if self.addresses:
            # The node's own addresses: the fleet maps an NCCL RAS host to this node.
            out = [dataclasses.replace(r, addresses=self.addresses) for r in out]
        return out


class JobWorkSender:
    """Publishes job reports on ``.../<node>/jobwork`` (QoS 1) without blocking the caller."""

    def __init__(self, publisher: MqttPublisher, *, max_pending: int = 16) -> None:
        self._pub = publisher
        self._pending: deque[JobWork] = deque(maxlen=max(1, max_pending))
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def submit(self, reports: list[JobWork]) -> None:
        """Queue ``reports`` (returns at once; the oldest go when the queue is full)."""
        for r in reports:
            if len(self._pending) == self._pending.maxlen:
                self._pub.stats.dropped += 1
            self._pending.append(r)
        if reports:
            self._wake.set()

    async def start(self) -> None:
        """Start the background publishing task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="mqtt-jobwork")

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                r = self._pending.popleft()
                await self._pub.publish_or_buffer(self._pub.topics.jobwork, r.body(), qos=1)
                self.sent += 1
                log.debug("jobwork_published", start=r.start, end=r.end, jobs=len(r.jobs))

    async def close(self) -> None:
        """Stop publishing (reports not yet handed to the publisher are dropped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
