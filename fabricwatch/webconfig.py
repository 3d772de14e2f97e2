"""Prometheus exporter-toolkit style web-config: TLS and basic auth.

The file format is the one ``promtool check web-config`` validates
(``tls_server_config``, ``basic_auth_users`` with bcrypt hashes,
``http_server_config``). Unknown keys are rejected, like the toolkit does.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from fabricwatch.errors import ConfigError

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
    "client_allowed_sans",
}


@dataclass(frozen=True)
class WebConfig:
    """A parsed web-config file.

    Attributes:
        tls: server TLS context, or None for plain HTTP.
        users: user name -> bcrypt hash; empty means no authentication.
        headers: extra response headers from ``http_server_config.headers``.
    """

    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def check_password(self, user: str, password: str, cache: dict[str, bool]) -> bool:
        """bcrypt-check a password. ``cache`` remembers results: bcrypt is slow on purpose."""
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(b"\0".join([user.encode(), password.encode(), hashed])).hexdigest()
        hit = cache.get(key)
        if hit is not None:
            return hit
        ok = bcrypt.checkpw(password.encode(), hashed)
        if len(cache) > 1024:
            cache.clear()
        cache[key] = ok
        return ok


def load_web_config(path: Path) -> WebConfig:
    """Read and validate a web-config file; relative file names resolve beside it."""
    src = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read web config: {exc.strerror}", path=src) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", path=src) from None
    if data is None:
        return WebConfig()
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", path=src)
    for key in data:
        if key not in {"tls_server_config", "basic_auth_users", "http_server_config"}:
            raise ConfigError(
                "unknown key (known: tls_server_config, basic_auth_users, http_server_config)",
                path=src,
                key=str(key),
            )
    base = path.parent
    tls = _tls_context(data.get("tls_server_config"), base, src)
    users: dict[str, bytes] = {}
    raw_users = data.get("basic_auth_users") or {}
    if not isinstance(raw_users, dict):
        raise ConfigError(
            "expected a mapping of user: bcrypt hash", path=src, key="basic_auth_users"
        )
    for user, hashed in raw_users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(
                "expected a bcrypt hash (htpasswd -nBC 10 '' | tr -d ':'), never a plain password",
                path=src,
                key=f"basic_auth_users.{user}",
            )
        users[str(user)] = hashed.encode()
    headers: dict[str, str] = {}
    http = data.get("http_server_config") or {}
    if not isinstance(http, dict):
        raise ConfigError("expected a mapping", path=src, key="http_server_config")
    for k, v in http.items():
        if k == "headers" and isinstance(v, dict):
            headers = {str(hk): str(hv) for hk, hv in v.items()}
        elif k != "http2":
            raise ConfigError("unsupported key", path=src, key=f"http_server_config.{k}")
    return WebConfig(tls=tls, users=users, headers=headers)


def _tls_context(raw: Any, base: Path, src: str) -> ssl.SSLContext | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping", path=src, key="tls_server_config")
    for k in raw:
        if k not in _TLS_KEYS:
            raise ConfigError("unknown key", path=src, key=f"tls_server_config.{k}")
    cert, key = raw.get("cert_file"), raw.get("key_file")
    if not cert or not key:
        raise ConfigError(
            "cert_file and key_file are both required for TLS", path=src, key="tls_server_config"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    min_version = raw.get("min_version", "TLS12")
    if min_version not in _TLS_VERSIONS:
        raise ConfigError(
            f"expected one of {', '.join(_TLS_VERSIONS)}",
            path=src,
            key="tls_server_config.min_version",
        )
    ctx.minimum_version = _TLS_VERSIONS[min_version]
    try:
        ctx.load_cert_chain(base / str(cert), base / str(key))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load certificate/key: {exc}", path=src, key="tls_server_config.cert_file"
        ) from None
    auth = raw.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise ConfigError(
            f"expected one of {', '.join(_CLIENT_AUTH)}",
            path=src,
            key="tls_server_config.client_auth_type",
        )
    ctx.verify_mode = _CLIENT_AUTH[auth]
    ca = raw.get("client_ca_file")
    if ca:
        try:
            ctx.load_verify_locations(base / str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load client CA: {exc}", path=src, key="tls_server_config.client_ca_file"
            ) from None
    elif auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        raise ConfigError(
            f"client_auth_type {auth} needs client_ca_file",
            path=src,
            key="tls_server_config.client_ca_file",
        )
    return ctx
