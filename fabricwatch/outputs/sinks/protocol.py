"""What the outbox sender drives: the :class:`Sink` protocol and its :class:`SinkError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from fabricwatch.errors import DeliveryError
from fabricwatch.outputs.outbox import Delivery


class SinkError(DeliveryError):
    """A delivery attempt failed; says whether and when to retry.

    Attributes:
        retryable: try again later (network, timeout, 5xx, 429, 401/403).
        retry_after: the receiver's ``Retry-After`` in seconds, if it sent one.
        gone: the receiver said 410 Gone: stop this sink until restart.
        auth: the receiver refused the credentials (401/403): retried up to
            ``RetryPolicy.auth_retries`` attempts, then dead-lettered.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        retry_after: float | None = None,
        gone: bool = False,
        auth: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.gone = gone
        self.auth = auth


@runtime_checkable
class Sink(Protocol):
    """A destination the sender drives; one ordered worker each."""

    @property
    def name(self) -> str:
        """The outbox ``sink`` key and metrics label."""
        ...

    @property
    def max_batch(self) -> int:
        """How many pending transitions one request may carry (1 = no grouping)."""
        ...

    @property
    def timeout(self) -> float:
        """Seconds one :meth:`deliver` may take."""
        ...

    async def start(self) -> None:
        """Acquire sessions; must not raise for an unreachable receiver."""
        ...

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Send ``batch`` (in order) or raise :class:`SinkError`."""
        ...

    async def close(self) -> None:
        """Release sessions. Must not raise."""
        ...


@runtime_checkable
class RefreshingSink(Sink, Protocol):
    """A sink that must re-send firing incidents (Alertmanager)."""

    @property
    def refresh_interval(self) -> float:
        """Seconds between re-sends."""
        ...

    @property
    def resolved_resend(self) -> float:
        """How long after resolve the resolved state keeps being re-sent."""
        ...

    async def refresh(self, firing: Sequence[Delivery]) -> None:
        """Re-send these (latest delivered transition per incident)."""
        ...
