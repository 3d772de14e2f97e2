"""The HTTP transport shared by the webhook-style sinks.

One :class:`aiohttp.ClientSession` per sink, a total timeout per request, and
one place that turns a response into "delivered", "retry (maybe after N s)",
"rejected" or "gone" for the outbox sender.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from datetime import UTC

import aiohttp

from fabricwatch.outputs.sinks.protocol import SinkError

_READ_LIMIT = 4096


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; garbage -> None."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def check_response(status: int, headers: Mapping[str, str], body: bytes) -> None:
    """Raise :class:`SinkError` unless ``status`` means delivered (2xx)."""
    if 200 <= status < 300:
        return
    snippet = body[:200].decode("utf-8", "replace").strip()
    what = f"HTTP {status}" + (f": {snippet}" if snippet else "")
    retry_after = parse_retry_after(headers.get("Retry-After"))
    if status == 410:
        raise SinkError(what, retryable=False, gone=True)
    if status in (408, 425, 429) or status >= 500:
        raise SinkError(what, retryable=True, retry_after=retry_after)
    if status in (401, 403):
        # Usually transient: a secret being rotated, an auth proxy restarting.
        raise SinkError(what, retryable=True, retry_after=retry_after, auth=True)
    raise SinkError(what, retryable=False)


class HttpTransport:
    """POSTs bytes to a URL; classifies failures for the outbox sender."""

    def __init__(
        self, *, timeout: float, headers: Mapping[str, str] | None = None, user_agent: str
    ) -> None:
        self.timeout = timeout
        self._headers = {"User-Agent": user_agent, **(headers or {})}
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Create the session (inside the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers=self._headers,
            )

    async def close(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        """POST ``body``; return the (truncated) response body on 2xx, else raise SinkError."""
        await self.start()
        assert self._session is not None
        try:
            async with self._session.post(
                url, data=body, headers=dict(headers), allow_redirects=False
            ) as resp:
                data = await resp.content.read(_READ_LIMIT)
                check_response(resp.status, resp.headers, data)
                return data
        except TimeoutError:
            raise SinkError(f"no response within {self.timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise SinkError(f"{type(exc).__name__}: {exc}") from None


def user_agent() -> str:
    """``fabricwatch/<version>``."""
    from fabricwatch import __version__

    return f"fabricwatch/{__version__}"


class HttpSink:
    """What every HTTP sink shares: its name, batch size, timeout and session.

    Subclasses implement ``deliver``; the outbox sender reads the rest.
    """

    def __init__(
        self, name: str, *, timeout: float, max_batch: int = 1, bearer_token: str | None = None
    ) -> None:
        self._name = name
        self._timeout = timeout
        self._max_batch = max(1, max_batch)
        headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else None
        self._http = HttpTransport(timeout=timeout, headers=headers, user_agent=user_agent())

    @property
    def name(self) -> str:
        """Sink name."""
        return self._name

    @property
    def max_batch(self) -> int:
        """Transitions per request when a backlog forms."""
        return self._max_batch

    @property
    def timeout(self) -> float:
        """Request timeout."""
        return self._timeout

    async def start(self) -> None:
        """Open the HTTP session."""
        await self._http.start()

    async def close(self) -> None:
        """Close the HTTP session."""
        await self._http.close()
