"""Which replicas are live and which partitions this one owns (rendezvous hashing).

Each replica publishes a retained ``online`` on ``.../_fleet/<name>/replicas/<id>``
(``offline`` as its Last Will). Every replica reads all of them; whenever the
live set changes, each computes the owner of every partition over the live set
(:func:`~fabricwatch.fleet.model.owner_of`) and subscribes to the member topics
of the partitions it gained, unsubscribing from those it lost.
"""

from __future__ import annotations

from collections.abc import Callable

import aiomqtt
import structlog

from fabricwatch.fleet.grouper import Grouper
from fabricwatch.fleet.model import FleetTopics, owner_of

log = structlog.get_logger("fabricwatch.fleet")


class Membership:
    """Live replicas and this replica's partitions."""

    def __init__(
        self,
        replica: str,
        partitions: int,
        grouper: Grouper,
        topics: FleetTopics,
        *,
        wall: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self.replica = replica
        self.partitions = partitions
        self.grouper = grouper
        self.topics = topics
        self._wall = wall
        self._mono = monotonic
        self.replicas: dict[str, bool] = {}
        self.dirty = True
        self.subscribed: set[int] = set()
        self.first_owned_at: float | None = None

    def on_replica(self, replica: str, online: bool) -> None:
        """A replica's retained status arrived."""
        if self.replicas.get(replica) != online:
            self.replicas[replica] = online
            self.dirty = True
            log.info("fleet_replica", replica=replica, online=online)

    def disconnected(self) -> None:
        """Without the broker this replica cannot know who owns what: stop paging until
        it has reconnected and re-read the retained state."""
        self.subscribed.clear()
        self.grouper.set_owned((), self._wall())
        self.dirty = True

    def live(self, connected: bool) -> list[str]:
        """Replicas seen online (this one included while connected)."""
        live = {r for r, up in self.replicas.items() if up}
        if connected:
            live.add(self.replica)
        return sorted(live)

    async def apply(self, client: aiomqtt.Client) -> None:
        """Recompute ownership over the live replicas; (un)subscribe partitions."""
        self.dirty = False
        live = self.live(True)
        want = {p for p in range(self.partitions) if owner_of(p, live) == self.replica}
        gained, lost = self.grouper.set_owned(want, self._wall())
        t = self.topics
        if lost:
            for p in sorted(lost):
                await client.unsubscribe(t.partition_filter(p))
                self.subscribed.discard(p)
        if gained:
            await client.subscribe([(t.partition_filter(p), 1) for p in sorted(gained)])
            self.subscribed |= gained
        if gained or lost:
            log.info(
                "fleet_partitions",
                replica=self.replica,
                live=live,
                owned=len(want),
                gained=len(gained),
                lost=len(lost),
            )
        if self.first_owned_at is None:
            self.first_owned_at = self._mono()
