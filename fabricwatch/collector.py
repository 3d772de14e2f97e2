"""The collector contract, its settings base class and the registry entry type.

A collector owns its I/O and nothing else. It receives its environment (file
system roots, clock, node identity) as arguments so tests can point it at
fixture trees and loopback agents. The daemon core never imports a concrete
collector: :mod:`fabricwatch.collectors` hands it a registry.
"""

from __future__ import annotations

import enum
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from fabricwatch.errors import CollectorError
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.settings import option

MIN_DERIVED_TIMEOUT = 5.0
"""The shortest collection timeout derived from an interval (see
:meth:`CollectorSettings.collection_timeout`): what every collector had before."""


class StartupPolicy(enum.Enum):
    """What the daemon does when a collector's ``start()`` fails."""

    ERROR = "error"
    """Refuse to start the daemon (exit code 3): the operator asked for this source."""
    IGNORE = "ignore"
    """Log once and leave the collector down for this run."""
    RETRY = "retry"
    """Log, then retry ``start()`` with backoff until it succeeds."""


@dataclass(kw_only=True)
class CollectorSettings:
    """Keys every ``[collectors.<name>]`` table has. Collectors subclass it.

    Attributes:
        enabled: run this collector at all.
        interval: seconds between collections.
        timeout: a collection still running after this many seconds is
            cancelled and counted as failed (0: derived from the interval, see
            :meth:`collection_timeout`).
        startup: what to do when the collector cannot start.
    """

    enabled: bool = option(True, "Run this collector.")
    interval: float = option(
        1.0, "Seconds between collections.", min=0.05, max=3600.0, duration=True
    )
    timeout: float = option(
        0.0,
        "Cancel a collection that runs longer than this (seconds; 0: 0.9 x interval, "
        "at least 5 s).",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    startup: StartupPolicy = option(
        StartupPolicy.RETRY, "On start failure: error (refuse to run), ignore, or retry."
    )

    def collection_timeout(self) -> float:
        """Seconds a collection (or ``start()``) may take: ``timeout``, or where it is 0
        0.9 x ``interval``, at least :data:`MIN_DERIVED_TIMEOUT`.

        A collector polled every 10 s or more has the time its interval gives: one
        switch-mode poller's first collection discovers every switch (four 512-port
        switches took ~8 s on the 2-core reference box), which a fixed 5 s cancelled
        again at every attempt.
        """
        return self.timeout or max(MIN_DERIVED_TIMEOUT, 0.9 * self.interval)

    def sources(self) -> frozenset[str]:
        """What this collector polls that no other enabled collector may poll too.

        Names like ``switch 'leaf1'``: two collectors feeding the same
        series would interleave their counters (each source counts from its
        own base, so the rates would read as resets). Empty by default.
        """
        return frozenset()


@dataclass(frozen=True, slots=True)
class CollectorEnv:
    """The environment a collector runs in; tests substitute every part.

    Attributes:
        node: this node's name (defaults to the host name).
        proc_root: where procfs is mounted (``/host/proc`` in a container).
        sys_root: where sysfs is mounted.
        state_dir: writable directory for the daemon's state.
        monotonic: the clock for intervals.
        wall: the clock for timestamps shown to people.
    """

    node: str = field(default_factory=socket.gethostname)
    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    state_dir: Path = Path("/var/lib/fabricwatch")
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


class CollectionFailedError(CollectorError):
    """The collection failed as a whole, but has readings that describe the failure.

    A multi-target collector raises it when every target failed: the
    supervisor reports the collector down *and* ingests ``readings`` (per-target
    health such as ``switch_target_up`` 0), so the cause stays visible.
    """

    def __init__(self, message: str, readings: Sequence[Reading]) -> None:
        super().__init__(message)
        self.readings = readings


@runtime_checkable
class Collector(Protocol):
    """What the supervisor drives.

    ``collect()`` returns the readings of one cycle. It may raise: the
    supervisor contains the error, counts it and backs off. It must not block
    the event loop; blocking work goes to a thread with its own timeout.
    """

    @property
    def name(self) -> str:
        """Registry name, used as the ``collector`` label."""
        ...

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce (stable across cycles)."""
        ...

    async def start(self) -> None:
        """Open devices, sessions, sockets. Raise CollectorError if impossible."""
        ...

    async def collect(self) -> Sequence[Reading]:
        """One collection cycle (a :class:`~fabricwatch.readings.Batch` may carry
        whole families as columns)."""
        ...

    async def close(self) -> None:
        """Release everything ``start()`` acquired. Must not raise."""
        ...


S = TypeVar("S", bound=CollectorSettings)


@dataclass(frozen=True, slots=True)
class CollectorFactory(Generic[S]):
    """A registry entry: how to configure and build one kind of collector.

    Attributes:
        name: the ``[collectors.<name>]`` table and ``collector`` label value.
        settings: the settings dataclass (a :class:`CollectorSettings` subclass).
        create: builds the collector from validated settings and the environment.
        description: one line for ``--help`` and the README.
        default_enabled: whether the collector runs when the config says nothing.
    """

    name: str
    settings: type[S]
    create: Callable[[S, CollectorEnv], Collector]
    description: str
    default_enabled: bool = True

    def build(self, settings: CollectorSettings, env: CollectorEnv) -> Collector:
        """Create the collector; ``settings`` must be an instance of :attr:`settings`."""
        if not isinstance(settings, self.settings):
            msg = f"{self.name}: settings must be {self.settings.__name__}"
            raise TypeError(msg)
        return self.create(settings, env)


Registry = dict[str, CollectorFactory[Any]]
