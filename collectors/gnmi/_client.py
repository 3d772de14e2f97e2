"""The gNMI client: one long-lived Subscribe stream per target on ``grpc.aio``.

Why ``grpc.aio`` and not pygnmi's client: pygnmi blocks (one thread per
target, its own reconnect logic, no backpressure hook); ``grpc.aio`` runs
every target as a coroutine on the daemon's loop, and a bounded
:class:`asyncio.Queue` between the stream reader and ``collect()`` gives real
backpressure: when the queue is full the reader stops reading, gRPC's HTTP/2
flow control stops the target, and memory stays bounded.

:class:`TargetStream` connects (TLS with a CA and optional client
certificate, or plain text only when ``insecure`` is set), calls
Capabilities, opens the subscriptions the owner asks for, and reconnects with
exponential backoff when anything fails or the target goes quiet for
``stale_after`` seconds. Each connection is a new *generation*: the owner
uses it to treat counters across reconnects as a possible reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import structlog

from fabricwatch.errors import ConfigError
from fabricwatch.secrets import read_capped, read_secret

from ._proto import make_path, pb, pb_grpc
from ._settings import GnmiTargetSettings

log = structlog.get_logger("fabricwatch.collectors.gnmi")

ERROR_REASONS = ("tls", "auth", "unreachable", "timeout", "stale", "closed", "rpc_error")
_ENCODINGS = {"json": 0, "bytes": 1, "proto": 2, "ascii": 3, "json_ietf": 4}
_TLS_HINTS = ("ssl", "tls", "handshake", "certificate", "x509")
_MAX_MODELS = 4096
_MAX_NAME = 256
_MAX_PEM = 1024 * 1024


class StreamError(Exception):
    """A connection or stream failure with a reason from :data:`ERROR_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def classify(exc: grpc.aio.AioRpcError) -> StreamError:
    """Map a gRPC error to a reason and a message for people."""
    code = exc.code()
    details = exc.details() or ""
    low = details.lower()
    if code == grpc.StatusCode.UNAVAILABLE and any(h in low for h in _TLS_HINTS):
        return StreamError("tls", f"TLS handshake failed: {details}")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return StreamError("auth", f"authentication rejected: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return StreamError("unreachable", f"target unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return StreamError("timeout", f"deadline exceeded: {details}")
    return StreamError("rpc_error", f"{code.name}: {details}")


def _read(path: str, what: str) -> bytes:
    try:
        return read_capped(Path(path), _MAX_PEM)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}", key=f"tls.{what}") from None
    except ValueError as exc:
        raise ConfigError(str(exc), key=f"tls.{what}") from None


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a connection needs, read once at start (files may be rotated: reread on reconnect)."""

    channel_credentials: grpc.ChannelCredentials | None
    options: tuple[tuple[str, Any], ...]
    metadata: tuple[tuple[str, str], ...]


def load_credentials(cfg: GnmiTargetSettings) -> Credentials:
    """Channel credentials and call metadata for a target; raises ConfigError."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        # We reconnect ourselves, with our own backoff and logging.
        ("grpc.enable_retries", 0),
        # Without this, gRPC grows a stream's receive window on its own (BDP
        # probing, to megabytes) and keeps buffering a target we stopped
        # reading: the bounded queue would bound nothing. The default 64 KiB
        # window is ample for telemetry on a data-centre network.
        ("grpc.http2.bdp_probe", 0),
    ]
    creds: grpc.ChannelCredentials | None = None
    if not cfg.insecure:
        t = cfg.tls
        root = _read(t.ca_file, "ca_file") if t.ca_file else None
        key = _read(t.key_file, "key_file") if t.key_file else None
        chain = _read(t.cert_file, "cert_file") if t.cert_file else None
        creds = grpc.ssl_channel_credentials(
            root_certificates=root, private_key=key, certificate_chain=chain
        )
        if t.server_name:
            options.append(("grpc.ssl_target_name_override", t.server_name))
    metadata: list[tuple[str, str]] = []
    if cfg.username:
        password = (
            read_secret(cfg.password_file, key="password_file", env="FABRICWATCH_GNMI_PASSWORD")
            or ""
        )
        metadata = [("username", cfg.username), ("password", password)]
    return Credentials(creds, tuple(options), tuple(metadata))


@dataclass(frozen=True, slots=True)
class SubscriptionGroup:
    """Paths that share one Subscribe call (one prefix origin/target)."""

    origin: str
    target: str
    encoding: str
    paths: tuple[tuple[str, bool], ...]  # (path, on_change)

    def request(self, sample_interval: float) -> Any:
        """The SubscribeRequest opening a STREAM subscription."""
        subs = [
            pb.Subscription(
                path=make_path(p),
                mode=pb.ON_CHANGE if on_change else pb.SAMPLE,
                sample_interval=0 if on_change else int(sample_interval * 1e9),
            )
            for p, on_change in self.paths
        ]
        sl = pb.SubscriptionList(
            prefix=pb.Path(origin=self.origin, target=self.target),
            subscription=subs,
            mode=pb.SubscriptionList.STREAM,
            encoding=_ENCODINGS[self.encoding],
        )
        return pb.SubscribeRequest(subscribe=sl)


@dataclass(slots=True)
class StreamStats:
    """Counters of one target's connection."""

    connects: int = 0
    failures: int = 0
    responses: int = 0
    queue_waits: int = 0
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_REASONS, 0))


Item = tuple[float, int, Any]
"""A queued response: (monotonic receive time, connection generation, SubscribeResponse)."""


class TargetStream:
    """Connects, subscribes and keeps reconnecting; responses go to a bounded queue.

    ``plan`` is called on every (re)connection with the models from the
    Capabilities reply and returns the subscription groups to open; it may
    raise :class:`StreamError`. ``resubscribe()`` tears the streams down and
    reopens them at once (the port set changed) without a backoff.
    """

    def __init__(
        self,
        cfg: GnmiTargetSettings,
        *,
        plan: Callable[[list[str]], Sequence[SubscriptionGroup]],
        interval: float,
        queue_size: int,
        stale_after: float,
        backoff_initial: float,
        backoff_max: float,
        clock: Callable[[], float] = time.monotonic,
        on_state: Callable[[bool, str], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=queue_size)
        self.stats = StreamStats()
        self.generation = 0
        self.up = False
        self.last_error = ""
        self.last_reason = ""
        self.models: list[str] = []
        self._plan = plan
        self._interval = interval
        self._stale_after = stale_after
        self._backoff = (backoff_initial, backoff_max)
        self._clock = clock
        self._on_state = on_state
        self._task: asyncio.Task[None] | None = None
        self._resubscribe = asyncio.Event()
        self._last_rx = 0.0
        self._blocked = False

    def start(self) -> None:
        """Start the background task (no I/O before the loop runs it)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"gnmi-{self.cfg.name}"
            )

    async def close(self) -> None:
        """Stop the task and its connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def resubscribe(self) -> None:
        """Reopen the subscriptions with a fresh plan (e.g. the uplinks changed)."""
        self._resubscribe.set()

    def _set_state(self, up: bool, reason: str = "", message: str = "") -> None:
        changed = up != self.up
        self.up = up
        if not up:
            self.last_reason, self.last_error = reason, message
        if changed and self._on_state is not None:
            self._on_state(up, message)

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                creds = load_credentials(self.cfg)
            except ConfigError as exc:
                self._fail(StreamError("rpc_error", str(exc)), failures + 1)
                failures += 1
                await asyncio.sleep(self._delay(failures))
                continue
            try:
                await self._connect_and_stream(creds)
                failures = 0  # a resubscription request: reconnect at once
                continue
            except asyncio.CancelledError:
                raise
            except StreamError as exc:
                failures += 1
                self._fail(exc, failures)
            except Exception as exc:  # noqa: BLE001 - a session must never end for good
                # Anything else (a reply grpc.aio could not decode, a bug in a
                # plan) is a failed session too: logged, counted, backed off.
                failures += 1
                self._fail(StreamError("rpc_error", f"{type(exc).__name__}: {exc}"), failures)
            await asyncio.sleep(self._delay(failures))

    def _delay(self, failures: int) -> float:
        initial, most = self._backoff
        return float(min(initial * 2 ** max(failures - 1, 0), most))

    def _fail(self, exc: StreamError, failures: int) -> None:
        self.stats.failures += 1
        self.stats.errors[exc.reason] = self.stats.errors.get(exc.reason, 0) + 1
        event = {"tls": "gnmi_tls_failed", "auth": "gnmi_auth_failed"}.get(
            exc.reason, "gnmi_stream_failed"
        )
        log.warning(
            event,
            switch=self.cfg.name,
            host=self.cfg.host,
            port=self.cfg.port,
            reason=exc.reason,
            error=str(exc),
            failures=failures,
            retry_in_s=round(self._delay(failures), 3),
        )
        self._set_state(False, exc.reason, str(exc))

    async def _connect_and_stream(self, creds: Credentials) -> None:
        addr = f"{self.cfg.host}:{self.cfg.port}"
        if creds.channel_credentials is None:
            channel = grpc.aio.insecure_channel(addr, options=creds.options)
        else:
            channel = grpc.aio.secure_channel(
                addr, creds.channel_credentials, options=creds.options
            )
        calls: list[Any] = []
        try:
            stub = pb_grpc.gNMIStub(channel)
            md = creds.metadata or None
            try:
                caps = await stub.Capabilities(
                    pb.CapabilityRequest(), timeout=self.cfg.timeout, metadata=md
                )
                if caps is None:
                    # grpc.aio's answer to a reply it cannot deserialize.
                    raise StreamError("rpc_error", "undecodable Capabilities reply")
                self.models = [str(m.name)[:_MAX_NAME] for m in caps.supported_models][:_MAX_MODELS]
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise classify(exc) from None
                self.models = []
            groups = self._plan(self.models)
            if not groups:
                raise StreamError("rpc_error", "nothing to subscribe to")
            self.generation += 1
            gen = self.generation
            self.stats.connects += 1
            self._resubscribe.clear()
            self._last_rx = self._clock()
            readers: list[asyncio.Task[None]] = []
            for g in groups:
                call = stub.Subscribe(metadata=md)
                calls.append(call)
                await call.write(g.request(self._interval))
                readers.append(asyncio.create_task(self._reader(call, gen)))
            self._set_state(True)
            log.info(
                "gnmi_subscribed",
                switch=self.cfg.name,
                generation=gen,
                streams=len(groups),
                paths=sum(len(g.paths) for g in groups),
                models=len(self.models),
            )
            await self._watch(readers)
        except grpc.aio.AioRpcError as exc:
            raise classify(exc) from None
        finally:
            for c in calls:
                c.cancel()
            await channel.close(grace=None)

    async def _watch(self, readers: list[asyncio.Task[None]]) -> None:
        """Wait until a reader ends, the stream goes stale, or a resubscription is asked."""
        resub = asyncio.create_task(self._resubscribe.wait())
        try:
            while True:
                tick = min(self._stale_after / 4, 1.0)
                done, _ = await asyncio.wait(
                    [*readers, resub], timeout=tick, return_when=asyncio.FIRST_COMPLETED
                )
                if resub in done:
                    log.info("gnmi_resubscribing", switch=self.cfg.name)
                    return
                for t in done:
                    exc = t.exception()
                    if isinstance(exc, grpc.aio.AioRpcError):
                        raise classify(exc)
                    if exc is not None:
                        raise StreamError("rpc_error", f"{type(exc).__name__}: {exc}")
                    raise StreamError("closed", "the target closed the stream")
                quiet = self._clock() - self._last_rx
                if quiet > self._stale_after and not self._blocked:
                    raise StreamError("stale", f"no update for {quiet:.1f} s")
        finally:
            resub.cancel()
            for t in readers:
                t.cancel()
            await asyncio.gather(resub, *readers, return_exceptions=True)

    async def _reader(self, call: Any, gen: int) -> None:
        q = self.queue
        while True:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                return
            if resp is None:
                raise StreamError("rpc_error", "undecodable SubscribeResponse")
            now = self._clock()
            self._last_rx = now
            self.stats.responses += 1
            if q.full():
                self.stats.queue_waits += 1
                # Blocks while the collector is behind: the stream is then not
                # read and HTTP/2 flow control holds the target back. Time spent
                # blocked is not silence from the target.
                self._blocked = True
                try:
                    await q.put((now, gen, resp))
                finally:
                    self._blocked = False
                    self._last_rx = self._clock()
            else:
                q.put_nowait((now, gen, resp))
