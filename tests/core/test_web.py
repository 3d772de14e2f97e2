"""HTTP endpoint: /metrics, health, readiness, TLS and basic auth from a web-config file."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from fabricwatch.errors import ConfigError
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.web import WebServer
from fabricwatch.store import SnapshotStore
from fabricwatch.webconfig import WebConfig, load_web_config

REPO = Path(__file__).resolve().parents[2]


def _auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return d


def _web_config(d: Path, *, tls: bool, password: str | None) -> Path:
    lines = []
    if tls:
        lines += ["tls_server_config:", "  cert_file: cert.pem", "  key_file: key.pem"]
    if password is not None:
        h = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        lines += ["basic_auth_users:", f"  alice: {h}"]
    p = d / f"web-{tls}-{password}.yml"
    p.write_text("\n".join(lines) + "\n")
    return p


async def _server(cfg: WebConfig, ready: bool = True) -> WebServer:
    reg = build_registry(SnapshotStore(), list, ReloadStatus(), process_metrics=False)
    srv = WebServer(reg, lambda: ready, cfg)
    await srv.start("127.0.0.1", 0)
    return srv


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        yield s


async def test_plain_endpoints(session: aiohttp.ClientSession) -> None:
    srv = await _server(WebConfig(), ready=False)
    base = f"http://127.0.0.1:{srv.port}"
    try:
        async with session.get(f"{base}/metrics") as r:
            assert r.status == 200
            body = await r.text()
            assert "fabricwatch_build_info" in body
            assert r.headers["Content-Type"].startswith("text/plain")
        async with session.get(
            f"{base}/metrics", headers={"Accept": "application/openmetrics-text"}
        ) as r:
            assert (await r.text()).rstrip().endswith("# EOF")
        async with session.get(f"{base}/-/healthy") as r:
            assert r.status == 200
        async with session.get(f"{base}/-/ready") as r:
            assert r.status == 503
        async with session.get(f"{base}/") as r:
            assert 'href="metrics"' in await r.text()
    finally:
        await srv.stop()


async def test_tls_and_basic_auth(tls_files: Path, session: aiohttp.ClientSession) -> None:
    cfg = load_web_config(_web_config(tls_files, tls=True, password="s3cret"))
    srv = await _server(cfg)
    base = f"https://127.0.0.1:{srv.port}"
    client_ctx = ssl.create_default_context(cafile=str(tls_files / "cert.pem"))
    try:
        async with session.get(f"{base}/metrics", ssl=client_ctx) as r:
            assert r.status == 401
            assert "Basic" in r.headers["WWW-Authenticate"]
        async with session.get(
            f"{base}/metrics", ssl=client_ctx, headers=_auth("alice", "wrong")
        ) as r:
            assert r.status == 401
        async with session.get(
            f"{base}/metrics", ssl=client_ctx, headers=_auth("mallory", "s3cret")
        ) as r:
            assert r.status == 401
        async with session.get(
            f"{base}/metrics", ssl=client_ctx, headers={"Authorization": "Basic !!!notbase64"}
        ) as r:
            assert r.status == 401
        async with session.get(
            f"{base}/metrics", ssl=client_ctx, headers=_auth("alice", "s3cret")
        ) as r:
            assert r.status == 200
            assert "fabricwatch_build_info" in await r.text()
        # Probes stay open so a kubelet/systemd check needs no secret.
        async with session.get(f"{base}/-/healthy", ssl=client_ctx) as r:
            assert r.status == 200
        # Plain HTTP to a TLS port fails, and an untrusting client refuses the cert.
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{srv.port}/metrics") as r:
                await r.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(f"{base}/metrics") as r:
                await r.read()
    finally:
        await srv.stop()


async def test_swapping_web_config_changes_users(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    srv = await _server(load_web_config(_web_config(tmp_path, tls=False, password="one")))
    url = f"http://127.0.0.1:{srv.port}/metrics"
    try:
        async with session.get(url, headers=_auth("alice", "one")) as r:
            assert r.status == 200
        srv.set_web_config(load_web_config(_web_config(tmp_path, tls=False, password="two")))
        async with session.get(url, headers=_auth("alice", "one")) as r:
            assert r.status == 401
        async with session.get(url, headers=_auth("alice", "two")) as r:
            assert r.status == 200
    finally:
        await srv.stop()


def test_bad_web_configs_are_rejected_with_the_key(tmp_path: Path) -> None:
    cases = {
        "basic_auth_users:\n  alice: plaintext\n": "basic_auth_users.alice",
        "tls_server_config:\n  cert_file: nope.pem\n": "tls_server_config",
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  colour: red\n": (
            "tls_server_config.colour"
        ),
        "basic_auth: {}\n": "basic_auth",
    }
    for text, key in cases.items():
        p = tmp_path / "w.yml"
        p.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_web_config(p)
        assert info.value.key == key, text
    p = tmp_path / "w.yml"
    p.write_text("tls_server_config: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_web_config(p)


@pytest.mark.integration
def test_promtool_accepts_our_sample_and_generated_web_configs(tls_files: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: the test command installs the Debian 'prometheus' package"
    for path in (
        REPO / "deploy" / "web-config.yml",
        _web_config(tls_files, tls=True, password="x"),
    ):
        out = subprocess.run(
            [promtool, "check", "web-config", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        load_web_config(path)  # and we accept what promtool accepts
