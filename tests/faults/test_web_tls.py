"""web-config TLS options enforced with real TLS, basic auth hardened, file reads
capped (issue 17, items 7, 8, 9)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import bcrypt
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricwatch.errors import ConfigError
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.web import WebServer
from fabricwatch.store import SnapshotStore
from fabricwatch.webconfig import WebConfig, load_web_config


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and two client certificates of that CA."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    for name, san in (
        ("server", "IP:127.0.0.1,DNS:localhost"),
        ("client-a", "DNS:prometheus-a.example,URI:spiffe://cluster/prometheus"),
        ("client-b", "DNS:intruder.example"),
    ):
        _openssl("req", *ec, "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=d)  # fmt: skip
    return d


def _config(d: Path, name: str, tls: str, users: str = "") -> Path:
    p = d / name
    p.write_text(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n" + tls + users
    )
    return p


async def _serve(cfg: WebConfig) -> WebServer:
    reg = build_registry(SnapshotStore(), list, ReloadStatus(), process_metrics=False)
    srv = WebServer(reg, lambda: True, cfg)
    await srv.start("127.0.0.1", 0)
    return srv


@pytest.fixture
async def served() -> AsyncIterator[list[WebServer]]:
    servers: list[WebServer] = []
    yield servers
    for s in servers:
        await s.stop()


def _client(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(pki / f"{cert}.pem", pki / f"{cert}.key")
    return ctx


async def _get(
    port: int, ctx: ssl.SSLContext, path: str = "/metrics", auth: str = ""
) -> tuple[int, str]:
    """A raw HTTP/1.0 GET over TLS: status and TLS version (or 0 and the error)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"), 10
        )
    except (ssl.SSLError, ConnectionError) as exc:
        return 0, str(exc)
    version = writer.get_extra_info("ssl_object").version()
    head = f"Authorization: Basic {auth}\r\n" if auth else ""
    writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n{head}\r\n".encode())
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
    except (ssl.SSLError, ConnectionError) as exc:
        return 0, str(exc)
    finally:
        writer.close()
    return (int(line.split()[1]) if line else 0), version


MTLS = (
    "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
    "  client_allowed_sans: [prometheus-a.example]\n"
)


async def test_client_allowed_sans_is_enforced(pki: Path, served: list[WebServer]) -> None:
    srv = await _serve(load_web_config(_config(pki, "sans.yml", MTLS)))
    served.append(srv)
    assert (await _get(srv.port, _client(pki, "client-a")))[0] == 200
    for path in ("/metrics", "/api/v1/incidents", "/-/healthy"):
        status, _ = await _get(srv.port, _client(pki, "client-b"), path)
        assert status in (0, 403), (path, status)  # same CA, other SAN: refused
    uri = MTLS.replace("prometheus-a.example", "spiffe://cluster/prometheus")
    srv2 = await _serve(load_web_config(_config(pki, "uri.yml", uri)))
    served.append(srv2)
    assert (await _get(srv2.port, _client(pki, "client-a")))[0] == 200


async def test_max_version_is_enforced(pki: Path, served: list[WebServer]) -> None:
    srv = await _serve(load_web_config(_config(pki, "max.yml", "  max_version: TLS12\n")))
    served.append(srv)
    status, version = await _get(srv.port, _client(pki))
    assert status == 200 and version == "TLSv1.2"
    only13 = _client(pki)
    only13.minimum_version = ssl.TLSVersion.TLSv1_3
    assert (await _get(srv.port, only13))[0] == 0


async def test_cipher_suites_are_enforced(pki: Path, served: list[WebServer]) -> None:
    tls = (
        "  max_version: TLS12\n"
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n"
        "  prefer_server_cipher_suites: true\n"
    )
    srv = await _serve(load_web_config(_config(pki, "ciphers.yml", tls)))
    served.append(srv)
    other = _client(pki)
    other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    other.maximum_version = ssl.TLSVersion.TLSv1_2
    assert (await _get(srv.port, other))[0] == 0
    both = _client(pki)
    both.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384")
    _reader, writer = await asyncio.open_connection(
        "127.0.0.1", srv.port, ssl=both, server_hostname="127.0.0.1"
    )
    cipher = writer.get_extra_info("ssl_object").cipher()
    writer.close()
    assert cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


async def test_curve_preferences_are_enforced(pki: Path, served: list[WebServer]) -> None:
    srv = await _serve(
        load_web_config(_config(pki, "curve.yml", "  curve_preferences: [CurveP384]\n"))
    )
    served.append(srv)
    for groups, ok in (("P-256", False), ("P-384", True)):
        proc = await asyncio.create_subprocess_exec(
            "openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-groups", groups,
            "-CAfile", str(pki / "ca.pem"), "-brief",
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert (proc.returncode == 0) is ok, (groups, err[-500:])


@pytest.mark.parametrize(
    ("tls", "key", "match"),
    [
        ("  max_version: TLS14\n", "max_version", "expected one of"),
        ("  min_version: []\n", "min_version", "expected one of"),  # found by the fuzz test
        ("  client_auth_type: {a: 1}\n", "client_auth_type", "expected one of"),
        ("  min_version: TLS13\n  max_version: TLS12\n", "max_version", "below"),
        ("  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "cipher_suites", "insecure"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "cipher_suites", "TLS 1.3"),
        ("  curve_preferences: [X25519]\n", "curve_preferences", "exactly one"),
        ("  curve_preferences: [CurveP256, CurveP384]\n", "curve_preferences", "exactly one"),
        ("  prefer_server_cipher_suites: maybe\n", "prefer_server_cipher_suites", "true or"),
        ("  client_allowed_sans: [a]\n", "client_allowed_sans", "RequireAndVerify"),
        ("  client_allowed_sans: a\n", "client_allowed_sans", "list of strings"),
    ],
)
def test_options_that_cannot_be_applied_are_refused(
    pki: Path, tls: str, key: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        load_web_config(_config(pki, "bad.yml", tls))
    assert info.value.key == f"tls_server_config.{key}"


def test_endless_files_are_refused_with_a_clear_error(pki: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="larger than"):
        load_web_config(Path("/dev/zero"))
    p = tmp_path / "w.yml"
    p.write_text("tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_web_config(p)


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_unknown_users_cost_a_bcrypt_like_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=8)).decode()
    p = tmp_path / "w.yml"
    p.write_text(f"basic_auth_users:\n  alice: {h}\n")
    cfg = load_web_config(p)
    assert cfg.dummy_hash.startswith(b"$2b$08$")
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", spy)
    assert not cfg.check_password("mallory", "guess")
    assert not cfg.check_password("alice", "guess")
    assert checked == [cfg.dummy_hash, h.encode()]  # one bcrypt each: no timing oracle


async def test_cached_good_credentials_skip_a_full_bcrypt_queue(tmp_path: Path) -> None:
    h = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    p = tmp_path / "w.yml"
    p.write_text(f"basic_auth_users:\n  alice: {h}\n")
    srv = await _serve(load_web_config(p))
    try:
        good = f"Basic {_basic('alice', 'right')}"
        assert await srv._authorised(good) is True  # the one bcrypt of this lifetime
        flood = [
            asyncio.create_task(srv._authorised(f"Basic {_basic('alice', f'wrong{i}')}"))
            for i in range(60)
        ]
        await asyncio.sleep(0)
        # While 60 wrong passwords wait, the good scrape is answered from the cache...
        assert await srv._authorised(good) is True
        results = await asyncio.gather(*flood)
        # ...and the queue is bounded: the excess is turned away, not queued.
        assert results.count(None) >= 60 - 16 and results.count(True) == 0
    finally:
        await srv.stop()


def test_shipped_web_config_enables_no_user() -> None:
    shipped = Path(__file__).resolve().parents[2] / "deploy" / "web-config.yml"
    assert load_web_config(shipped).users == {}


_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=12)
_VALUES = st.recursive(
    _SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=12,
)
_TLS_KEYS = (
    *("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"),
    *("max_version", "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"),
    *("client_allowed_sans", "colour"),
)
_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_TLS_DOC = st.dictionaries(
    st.sampled_from(_TLS_KEYS),
    _VALUES | st.sampled_from(["TLS12", "TLS13", "server.pem", "server.key", "ca.pem"]),
    max_size=8,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "tls_server_config": _TLS_DOC | _VALUES,
            "basic_auth_users": st.dictionaries(st.text(max_size=6), _VALUES, max_size=3),
            "http_server_config": _VALUES,
            "other": _VALUES,
        },
    )
)
def test_fuzzed_web_configs_raise_only_config_error(pki: Path, doc: dict[str, object]) -> None:
    p = pki / "fuzz.yml"
    p.write_text(yaml.safe_dump(doc))
    try:
        cfg = load_web_config(p)
    except ConfigError as exc:
        assert str(exc).startswith(str(p))
    else:
        assert isinstance(cfg, WebConfig)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300))
def test_fuzzed_web_config_bytes_raise_only_config_error(pki: Path, raw: bytes) -> None:
    p = pki / "fuzz-bytes.yml"
    p.write_bytes(raw)
    with contextlib.suppress(ConfigError):  # anything else fails the test
        load_web_config(p)
