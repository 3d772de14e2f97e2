"""The daemon's configuration: one TOML file, every key defaulted.

``/etc/fabricwatch/fabricwatch.toml`` is read with :mod:`tomllib` and
validated strictly by :mod:`fabricwatch.settings`. No file at all is a valid
config: the daemon then runs every default-enabled collector on embedded
defaults. Secrets never live in the file: keys ending in ``_file`` name files
(systemd credentials) whose content is read at start.
"""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fabricwatch.collector import CollectorSettings, Registry
from fabricwatch.defaults import DEFAULT_CONFIG_PATH, DEFAULT_PORT
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.errors import ConfigError
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.secrets import read_capped
from fabricwatch.settings import build, option


@dataclass(kw_only=True)
class DaemonSettings:
    """``[daemon]``: identity, file system roots and the pipeline tick."""

    node: str = option(
        "", "Node name in labels and incidents; empty = $FABRICWATCH_NODE, else the host name."
    )
    cluster: str = option("default", "Cluster name in MQTT topics and alerts.")
    state_dir: Path = option(
        Path("/var/lib/fabricwatch"), "Writable directory for the incident database and outbox."
    )
    proc_root: Path = option(Path("/proc"), "Where procfs is mounted.")
    sys_root: Path = option(Path("/sys"), "Where sysfs is mounted.")
    tick: float = option(1.0, "Engine tick in seconds.", min=0.05, max=60.0, duration=True)
    shutdown_timeout: float = option(
        10.0, "Seconds allowed for a graceful shutdown.", min=0.1, max=300.0, duration=True
    )

    def node_name(self) -> str:
        """The configured node name, else ``$FABRICWATCH_NODE``, else the host name.

        In a Kubernetes pod the host name is the pod's; the DaemonSet passes
        the node's name through the environment.
        """
        return self.node or os.environ.get("FABRICWATCH_NODE") or socket.gethostname()


def fallback_state_dir() -> Path:
    """``$XDG_STATE_HOME/fabricwatch``: where an unprivileged daemon keeps its state
    when the default ``state_dir`` cannot be created (and where ``incidents`` looks)."""
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "fabricwatch"


@dataclass(kw_only=True)
class WebSettings:
    """``[web]``: the HTTP endpoint serving /metrics, health and the API."""

    listen: str = option(
        f"0.0.0.0:{DEFAULT_PORT}",
        "host:port to listen on ([::1]:port for IPv6); port 0 picks a free one.",
    )
    config_file: str = option("", "Prometheus exporter-toolkit web-config file (TLS, basic auth).")

    def validate(self) -> None:
        """Reject listen addresses that are not host:port."""
        split_listen(self.listen)


def split_listen(listen: str) -> tuple[str, int]:
    """``"0.0.0.0:9477"`` -> ("0.0.0.0", 9477); ``"[::1]:0"`` -> ("::1", 0)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        msg = f"listen must be host:port, got {listen!r}"
        raise ValueError(msg)
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - operator's choice


@dataclass(kw_only=True)
class LogSettings:
    """``[log]``: structured logging."""

    level: Literal["debug", "info", "warning", "error"] = option("info", "Minimum level logged.")
    format: Literal["auto", "json", "console"] = option(
        "auto",
        "json (journald-friendly lines), console (for people), or auto: console when "
        "standard output is a terminal, else json.",
    )


@dataclass(kw_only=True)
class StoreSettings:
    """``[store]``: bounds of the in-memory snapshot store."""

    history: int = option(600, "Points kept per series (memory bound).", min=2, max=100_000)
    stale_after: float = option(
        300.0,
        "Drop a series not refreshed for this long (seconds).",
        min=1.0,
        max=86_400.0,
        duration=True,
    )
    gap_after: float = option(
        10.0,
        "A counter interval longer than this is a gap, spread not spiked.",
        min=0.1,
        max=3600.0,
        duration=True,
    )
    max_series_per_collector: int = option(
        50_000,
        "Series one collector may create (of its families) for each source it polls (a "
        "switch or gNMI target; one for a collector without targets); beyond it new "
        "series are dropped, counted and logged (0 = no limit).",
        min=0,
        max=10_000_000,
    )


@dataclass(kw_only=True)
class Config:
    """The whole configuration. Build it with :func:`load_config`."""

    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    web: WebSettings = field(default_factory=WebSettings)
    log: LogSettings = field(default_factory=LogSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    alerting: AlertingSettings = field(default_factory=AlertingSettings)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    collectors: dict[str, CollectorSettings] = field(default_factory=dict)
    source: str | None = None


_SECTIONS: dict[str, type[Any]] = {
    "daemon": DaemonSettings,
    "web": WebSettings,
    "log": LogSettings,
    "store": StoreSettings,
    "engine": EngineSettings,
    "alerting": AlertingSettings,
    "mqtt": MqttSettings,
    "fleet": FleetSettings,
}


def parse_config(data: dict[str, Any], registry: Registry, *, source: str | None = None) -> Config:
    """Validate a parsed TOML document against the schema and the collector registry."""
    known = [*_SECTIONS, "collectors"]
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown section (known: {', '.join(known)})", path=source, key=key)
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError("expected a table", path=source, key=name)
        sections[name] = build(cls, table, prefix=name, source=source)
    raw_collectors = data.get("collectors", {})
    if not isinstance(raw_collectors, dict):
        raise ConfigError("expected a table of collector tables", path=source, key="collectors")
    for name in raw_collectors:
        if name not in registry:
            raise ConfigError(
                f"unknown collector (known: {', '.join(sorted(registry))})",
                path=source,
                key=f"collectors.{name}",
            )
    collectors: dict[str, CollectorSettings] = {}
    for name, factory in registry.items():
        table = raw_collectors.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError("expected a table", path=source, key=f"collectors.{name}")
        collectors[name] = build(
            factory.settings,
            table,
            prefix=f"collectors.{name}",
            source=source,
            defaults={"enabled": factory.default_enabled},
        )
    _check_sources(collectors, source)
    return Config(collectors=collectors, source=source, **sections)


def _check_sources(collectors: dict[str, CollectorSettings], source: str | None) -> None:
    """No switch (or other device) polled by two enabled collectors."""
    owners: dict[str, str] = {}
    for name, settings in collectors.items():
        if not settings.enabled:
            continue
        for what in sorted(settings.sources()):
            other = owners.setdefault(what, name)
            if other != name:
                raise ConfigError(
                    f"{what} is configured in collectors.{other} too: both would feed the "
                    f"same series; keep it in one of them",
                    path=source,
                    key=f"collectors.{name}",
                )


MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""The largest config or web-config file read (a real one is a few KiB)."""


def read_section(path: Path, key: str) -> dict[str, Any]:
    """The ``[key]`` table of a TOML file (empty when absent), read with the
    config-file cap; for commands that need one section, not the whole config."""
    try:
        data = tomllib.loads(read_capped(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except ValueError as exc:  # too large, or not UTF-8
        raise ConfigError(str(exc), path=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(path)) from None
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError("expected a table", path=str(path), key=key)
    return table


def load_config(path: Path | None, registry: Registry) -> Config:
    """Read and validate a config file.

    ``path=None`` means the default path, which may be absent (embedded
    defaults). An explicitly given path must exist.
    """
    explicit = path is not None
    target = path if path is not None else DEFAULT_CONFIG_PATH
    try:
        raw = read_capped(target, MAX_CONFIG_BYTES)
    except ValueError as exc:
        raise ConfigError(str(exc), path=str(target)) from None
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                "file not found; pass an existing file or omit --config", path=str(target)
            ) from None
        return parse_config({}, registry, source=None)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(target)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", path=str(target)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(target)) from None
    return parse_config(data, registry, source=str(target))
