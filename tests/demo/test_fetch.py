"""The demo's client of /api/v1/incidents against a scripted loopback server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from fabricwatch.demo.runner import fetch_incidents
from fabricwatch.errors import FabricwatchError

GOOD = {"schema": "fabricwatch.incidents/v1", "incidents": [{"key": "a", "cause": "pfc_storm"}]}


class Script:
    """What the next request gets."""

    def __init__(self) -> None:
        self.mode = "good"


SCRIPT = web.AppKey("script", Script)


async def _handler(request: web.Request) -> web.StreamResponse:
    script = request.app[SCRIPT]
    mode = script.mode
    if mode == "good":
        return web.json_response(GOOD)
    if mode == "garbage":
        return web.Response(body=b"\x00\xff<html>oops", content_type="text/html")
    if mode == "wrong_schema":
        return web.json_response({"schema": "other/v1", "incidents": []})
    if mode == "not_a_list":
        return web.json_response({"schema": "fabricwatch.incidents/v1", "incidents": {"a": 1}})
    if mode == "keyless":
        return web.json_response({"schema": "fabricwatch.incidents/v1", "incidents": [{}]})
    if mode == "array":
        return web.json_response([GOOD])
    if mode == "error":
        return web.json_response({"error": "boom"}, status=503)
    if mode == "truncated":
        resp = web.StreamResponse(headers={"Content-Length": "4096"})
        await resp.prepare(request)
        await resp.write(json.dumps(GOOD).encode()[:20])
        assert request.transport is not None
        request.transport.close()
        return resp
    # "hang": answer much later than the client waits (bounded, so cleanup is quick).
    await asyncio.sleep(3)
    return web.json_response(GOOD)


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Script]]:
    script = Script()
    app = web.Application()
    app[SCRIPT] = script
    app.router.add_get("/api/v1/incidents", _handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/api/v1/incidents", script
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("garbage", "not JSON"),
        ("wrong_schema", "not a fabricwatch.incidents/v1"),
        ("not_a_list", "not a fabricwatch.incidents/v1"),
        ("array", "not a fabricwatch.incidents/v1"),
        ("keyless", "without a key"),
        ("error", "HTTP 503"),
        ("truncated", "Error"),
        ("hang", "within 0.3 s"),
    ],
)
async def test_bad_answers_raise_a_clear_error_then_recovery(
    server: tuple[str, Script], mode: str, message: str
) -> None:
    url, script = server
    script.mode = mode
    with pytest.raises(FabricwatchError, match=message):
        await fetch_incidents(url, wait=0.3)
    script.mode = "good"
    assert await fetch_incidents(url, wait=5) == GOOD["incidents"]


async def test_nobody_listening_is_an_error() -> None:
    with pytest.raises(FabricwatchError, match="Connect"):
        await fetch_incidents("http://127.0.0.1:9/api/v1/incidents", wait=2)
