"""Reading operator-supplied files with a size cap: secrets, passwords, certificates.

A leaf module (standard library and :mod:`fabricwatch.errors` only), so a
collector or sink that needs a credential does not import the configuration
loader and, through it, every settings class.
"""

from __future__ import annotations

import os
from pathlib import Path

from fabricwatch.errors import ConfigError

MAX_SECRET_BYTES = 64 * 1024
"""The largest secret, password or certificate file read."""


def read_capped(path: Path, limit: int) -> bytes:
    """Read at most ``limit`` bytes of ``path``; larger (or endless: ``/dev/zero``)
    raises ``ValueError`` with a clear message. OSError propagates."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        msg = f"{path} is larger than {limit // 1024} KiB; point the setting at the right file"
        raise ValueError(msg)
    return data


def read_secret(path_value: str, *, key: str, env: str | None = None) -> str | None:
    """Read a secret from a ``*_file`` key's file, or from an environment variable.

    systemd's ``LoadCredential=`` puts files under ``$CREDENTIALS_DIRECTORY``;
    a relative ``path_value`` is looked up there first. Trailing newlines are
    stripped. Returns None when neither source is set.
    """
    if path_value:
        p = Path(path_value)
        creds = os.environ.get("CREDENTIALS_DIRECTORY")
        if not p.is_absolute() and creds:
            p = Path(creds) / p
        try:
            return read_capped(p, MAX_SECRET_BYTES).decode("utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read secret file {p}: {exc.strerror}", key=key) from None
        except ValueError as exc:  # too large, or not UTF-8
            raise ConfigError(f"secret file {p}: {exc}", key=key) from None
    if env:
        return os.environ.get(env)
    return None
