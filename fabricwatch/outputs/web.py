"""The HTTP endpoint: /metrics, health, readiness, a landing page and API routes.

Served by aiohttp on the daemon's event loop. ``/metrics`` renders the
registry in memory (no I/O at scrape time). When a web-config file sets basic
auth users, every path except the health probes needs credentials, as with
Prometheus' own exporters. A ``client_allowed_sans`` list is checked on every
request, probes included (the toolkit refuses the handshake).

bcrypt is slow on purpose: good credentials are remembered (a scrape every
15 s costs one bcrypt per process lifetime) and looked up on the event loop,
before the bcrypt pool; the pool's queue is bounded, so a flood of wrong
passwords gets 429 instead of delaying good scrapes behind it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from fabricwatch import __version__
from fabricwatch.outputs.exposition import choose_encoder
from fabricwatch.webconfig import WebConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_OPEN_PATHS = frozenset({"/-/healthy", "/-/ready"})
_GOOD_CACHE = 256
"""Good credentials remembered (LRU); only good ones, so wrong guesses cannot evict them."""
_BCRYPT_WORKERS = 2
_BCRYPT_QUEUE = 16
"""bcrypt checks waiting or running at most; beyond that a request gets 429."""
_LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>fabricwatch</title></head>
<body><h1>fabricwatch {version}</h1>
<p>GPU fabric-health monitor: attributes GPU stalls to PFC storms, ECN congestion,
NVLink faults and checkpoint stalls.</p>
<ul>
<li><a href="metrics">metrics</a></li>
<li><a href="-/healthy">health</a></li>
<li><a href="-/ready">readiness</a></li>
{extra}
</ul></body></html>
"""


@dataclass(frozen=True)
class Route:
    """An extra GET route (e.g. ``/api/v1/incidents``) with its landing-page title."""

    path: str
    handler: Handler
    title: str


class WebServer:
    """aiohttp application bound to one address; web-config swappable at runtime."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        web_config: WebConfig,
        routes: Sequence[Route] = (),
    ) -> None:
        self._registry = registry
        self._ready = ready
        self._web_config = web_config
        self._good: OrderedDict[str, None] = OrderedDict()
        self._bcrypt = ThreadPoolExecutor(_BCRYPT_WORKERS, thread_name_prefix="bcrypt")
        self._bcrypt_busy = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port: int = 0
        self.scheme = "http"
        app = web.Application(middlewares=[self._auth_middleware])
        app.router.add_get("/", self._landing)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/-/healthy", self._healthy)
        app.router.add_get("/-/ready", self._readiness)
        for r in routes:
            app.router.add_get(r.path, r.handler)
        self._routes = tuple(routes)
        self._app = app

    def set_web_config(self, web_config: WebConfig) -> None:
        """Swap auth users and headers (TLS changes need a restart: the socket is bound)."""
        self._web_config = web_config
        self._good.clear()

    async def start(self, host: str, port: int) -> None:
        """Bind and serve. ``port=0`` picks a free port (see :attr:`port`)."""
        self._runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        await self._runner.setup()
        ssl_ctx = self._web_config.tls
        self.scheme = "https" if ssl_ctx is not None else "http"
        self._site = web.TCPSite(self._runner, host, port, ssl_context=ssl_ctx, reuse_address=True)
        await self._site.start()
        server = self._site._server  # aiohttp has no public accessor
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        """Close listeners and finish in-flight requests."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._bcrypt.shutdown(wait=False, cancel_futures=True)

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        cfg = self._web_config
        if cfg.allowed_sans:
            peercert = request.transport.get_extra_info("peercert") if request.transport else None
            if not cfg.san_allowed(peercert):
                return web.Response(
                    status=403, text="Forbidden: client certificate SAN not allowed\n"
                )
        if cfg.users and request.path not in _OPEN_PATHS:
            verdict = await self._authorised(request.headers.get("Authorization", ""))
            if verdict is None:
                return web.Response(
                    status=429,
                    text="Too many authentication attempts in progress\n",
                    headers={"Retry-After": "1"},
                )
            if not verdict:
                return web.Response(
                    status=401,
                    text="Unauthorized\n",
                    headers={"WWW-Authenticate": 'Basic realm="fabricwatch"'},
                )
        response = await handler(request)
        for k, v in cfg.headers.items():
            response.headers[k] = v
        return response

    async def _authorised(self, header: str) -> bool | None:
        """True, False, or None when the bcrypt queue is full (answer 429)."""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token or len(token) > 4096:
            return False
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        cfg = self._web_config
        key = cfg.cache_key(user, password)
        if key in self._good:
            self._good.move_to_end(key)
            return True
        if self._bcrypt_busy >= _BCRYPT_QUEUE:
            return None
        self._bcrypt_busy += 1
        try:
            # bcrypt takes ~100 ms by design: keep it off the event loop.
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._bcrypt, cfg.check_password, user, password)
        finally:
            self._bcrypt_busy -= 1
        if ok and cfg is self._web_config:
            self._good[key] = None
            while len(self._good) > _GOOD_CACHE:
                self._good.popitem(last=False)
        return ok

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self._registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthy(self, _request: web.Request) -> web.Response:
        return web.Response(text="Healthy\n")

    async def _readiness(self, _request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="Ready\n")
        return web.Response(status=503, text="Not ready: collectors have not all run once\n")

    async def _landing(self, _request: web.Request) -> web.Response:
        extra = "\n".join(
            f'<li><a href="{r.path.lstrip("/")}">{r.title}</a></li>' for r in self._routes
        )
        return web.Response(
            text=_LANDING.format(version=__version__, extra=extra), content_type="text/html"
        )
