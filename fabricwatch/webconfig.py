"""Prometheus exporter-toolkit style web-config: TLS and basic auth.

The file format is the one ``promtool check web-config`` validates
(``tls_server_config``, ``basic_auth_users`` with bcrypt hashes,
``http_server_config``). Unknown keys are rejected, like the toolkit does.
Every TLS option is applied as the toolkit applies it, or refused with an
error that says why: a security option is never accepted and ignored.

- ``min_version``/``max_version``: ``TLS10`` ... ``TLS13``.
- ``cipher_suites``: Go names of TLS 1.0-1.2 suites (TLS 1.3 suites are not
  configurable, in Go or OpenSSL); mapped to OpenSSL names.
- ``curve_preferences``: one curve (``CurveP256``, ``CurveP384``,
  ``CurveP521``). Python's ssl module can restrict the key exchange to a
  single group only, so a longer list or ``X25519`` is refused.
- ``prefer_server_cipher_suites``: the server's order wins (OpenSSL
  ``SSL_OP_CIPHER_SERVER_PREFERENCE``); default true as in the toolkit.
- ``client_allowed_sans``: the client certificate's DNS, IP, e-mail or URI
  SAN must be one of these (checked per connection, before any handler);
  needs a client CA and a verifying ``client_auth_type``.
"""

from __future__ import annotations

import hashlib
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.config import MAX_CONFIG_BYTES
from fabricwatch.errors import ConfigError
from fabricwatch.secrets import MAX_SECRET_BYTES, read_capped

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
# Go crypto/tls names (tls.CipherSuites(): the secure TLS 1.0-1.2 suites) -> OpenSSL.
_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
_TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1"}
_VERIFYING = frozenset({"VerifyClientCertIfGiven", "RequireAndVerifyClientCert"})
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
    allowed_sans: frozenset[str] = frozenset()
    # Checked for unknown users, so they take as long as a wrong password
    # (user names cannot be found by timing).
    dummy_hash: bytes = b""

    def cache_key(self, user: str, password: str) -> str:
        """The key under which good credentials are remembered (cheap: no bcrypt)."""
        hashed = self.users.get(user, self.dummy_hash)
        return hashlib.sha256(b"\0".join([user.encode(), password.encode(), hashed])).hexdigest()

    def check_password(self, user: str, password: str) -> bool:
        """bcrypt-check a password (slow on purpose: call it off the event loop)."""
        # Here, not at module level: only a web-config with basic_auth_users needs
        # bcrypt, and the default daemon has none (RSS budget, issue #19).
        import bcrypt

        hashed = self.users.get(user)
        if hashed is None:
            if self.dummy_hash:
                bcrypt.checkpw(password.encode(), self.dummy_hash)
            return False
        return bcrypt.checkpw(password.encode(), hashed)

    def san_allowed(self, peercert: dict[str, Any] | None) -> bool:
        """Whether a verified client certificate carries an allowed SAN (or none is required)."""
        if not self.allowed_sans:
            return True
        if not peercert:
            return False
        names = {str(v) for _kind, v in peercert.get("subjectAltName", ())}
        return not names.isdisjoint(self.allowed_sans)


def load_web_config(path: Path) -> WebConfig:
    """Read and validate a web-config file; relative file names resolve beside it."""
    # Imported when a web-config is given, not with the module: the default daemon
    # serves plain HTTP and never parses YAML (RSS budget, issue #19).
    import yaml

    src = str(path)
    try:
        data = yaml.safe_load(read_capped(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read web config: {exc.strerror}", path=src) from None
    except ValueError as exc:  # too large or not UTF-8
        raise ConfigError(f"cannot read web config: {exc}", path=src) from None
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
    tls, sans = _tls_context(data.get("tls_server_config"), base, src)
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
    dummy = b""
    if users:
        import bcrypt  # only basic auth hashes (see check_password)

        # Same cost as the configured hashes: "$2b$10$..." -> 10.
        cost = max(int(h.split(b"$")[2]) for h in users.values() if h.count(b"$") >= 3)
        dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))
    return WebConfig(tls=tls, users=users, headers=headers, allowed_sans=sans, dummy_hash=dummy)


def _file(base: Path, name: object, src: str, key: str) -> Path:
    """A file named by the config, checked to be readable and of sane size."""
    path = base / str(name)
    try:
        read_capped(path, MAX_SECRET_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", path=src, key=key) from None
    except ValueError as exc:
        raise ConfigError(str(exc), path=src, key=key) from None
    return path


def _str_list(raw: dict[str, Any], name: str, src: str) -> list[str]:
    value = raw.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("expected a list of strings", path=src, key=f"tls_server_config.{name}")
    return list(value)


def _tls_context(raw: Any, base: Path, src: str) -> tuple[ssl.SSLContext | None, frozenset[str]]:
    if raw is None:
        return None, frozenset()
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
    if not isinstance(min_version, str) or min_version not in _TLS_VERSIONS:
        raise ConfigError(
            f"expected one of {', '.join(_TLS_VERSIONS)}",
            path=src,
            key="tls_server_config.min_version",
        )
    ctx.minimum_version = _TLS_VERSIONS[min_version]
    max_version = raw.get("max_version", "TLS13")
    if not isinstance(max_version, str) or max_version not in _TLS_VERSIONS:
        raise ConfigError(
            f"expected one of {', '.join(_TLS_VERSIONS)}",
            path=src,
            key="tls_server_config.max_version",
        )
    if _TLS_VERSIONS[max_version] < _TLS_VERSIONS[min_version]:
        raise ConfigError(
            f"{max_version} is below min_version {min_version}",
            path=src,
            key="tls_server_config.max_version",
        )
    ctx.maximum_version = _TLS_VERSIONS[max_version]
    _ciphers(ctx, _str_list(raw, "cipher_suites", src), src)
    _curves(ctx, _str_list(raw, "curve_preferences", src), src)
    prefer = raw.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise ConfigError(
            "expected true or false", path=src, key="tls_server_config.prefer_server_cipher_suites"
        )
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    cert_path = _file(base, cert, src, "tls_server_config.cert_file")
    key_path = _file(base, key, src, "tls_server_config.key_file")
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load certificate/key: {exc}", path=src, key="tls_server_config.cert_file"
        ) from None
    auth = raw.get("client_auth_type", "NoClientCert")
    if not isinstance(auth, str) or auth not in _CLIENT_AUTH:
        raise ConfigError(
            f"expected one of {', '.join(_CLIENT_AUTH)}",
            path=src,
            key="tls_server_config.client_auth_type",
        )
    ctx.verify_mode = _CLIENT_AUTH[auth]
    ca = raw.get("client_ca_file")
    if ca:
        ca_path = _file(base, ca, src, "tls_server_config.client_ca_file")
        try:
            ctx.load_verify_locations(ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load client CA: {exc}", path=src, key="tls_server_config.client_ca_file"
            ) from None
    elif auth in _VERIFYING:
        raise ConfigError(
            f"client_auth_type {auth} needs client_ca_file",
            path=src,
            key="tls_server_config.client_ca_file",
        )
    sans = frozenset(_str_list(raw, "client_allowed_sans", src))
    if sans and (auth not in _VERIFYING or not ca):
        raise ConfigError(
            "needs client_auth_type RequireAndVerifyClientCert (or VerifyClientCertIfGiven) "
            "and client_ca_file: only a verified certificate's SANs mean anything",
            path=src,
            key="tls_server_config.client_allowed_sans",
        )
    return ctx, sans


def _ciphers(ctx: ssl.SSLContext, names: list[str], src: str) -> None:
    if not names:
        return
    key = "tls_server_config.cipher_suites"
    openssl: list[str] = []
    for name in names:
        if name in _TLS13_SUITES:
            raise ConfigError(
                f"{name} is a TLS 1.3 suite; TLS 1.3 suites are not configurable (as in Go): "
                "list TLS 1.2 suites only",
                path=src,
                key=key,
            )
        if name not in _CIPHERS:
            raise ConfigError(
                f"unknown or insecure cipher suite {name!r} (known: {', '.join(sorted(_CIPHERS))})",
                path=src,
                key=key,
            )
        openssl.append(_CIPHERS[name])
    try:
        ctx.set_ciphers(":".join(openssl))
    except ssl.SSLError as exc:
        raise ConfigError(f"OpenSSL refused the suites: {exc}", path=src, key=key) from None


def _curves(ctx: ssl.SSLContext, names: list[str], src: str) -> None:
    if not names:
        return
    key = "tls_server_config.curve_preferences"
    if len(names) > 1 or names[0] not in _CURVES:
        raise ConfigError(
            f"list exactly one of {', '.join(_CURVES)}: Python's ssl module can restrict the "
            "key exchange to one group only, and a preference it cannot apply is refused",
            path=src,
            key=key,
        )
    ctx.set_ecdh_curve(_CURVES[names[0]])
