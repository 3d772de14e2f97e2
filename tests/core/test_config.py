"""Config validation: every error kind names the file, key path and expectation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricwatch.collector import CollectorEnv, CollectorFactory, CollectorSettings
from fabricwatch.config import Config, load_config, parse_config
from fabricwatch.errors import ConfigError
from fabricwatch.secrets import read_secret
from fabricwatch.settings import dumps_toml, option, parse_duration, parse_size, to_table


@dataclass(kw_only=True)
class _Target:
    host: str = option("127.0.0.1", "host")
    port: int = option(161, "port", min=1, max=65535)
    community_file: str = option("", "secret file")


@dataclass(kw_only=True)
class _DemoSettings(CollectorSettings):
    targets: list[_Target] = option([], "targets")
    mode: str = option("node", "mode", choices=("node", "switch"))
    password: str = option("", "pw", secret=True)


def _factory() -> CollectorFactory[_DemoSettings]:
    def create(_s: _DemoSettings, _e: CollectorEnv) -> object:
        raise AssertionError("not built in config tests")

    return CollectorFactory("demo", _DemoSettings, create, "demo", default_enabled=False)  # type: ignore[arg-type]


REG = {"demo": _factory()}


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "fw.toml"
    p.write_text(text)
    return p


def _error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), REG)
    return info.value


def test_no_file_at_all_is_a_valid_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fabricwatch.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")
    cfg = load_config(None, REG)
    assert isinstance(cfg, Config)
    assert cfg.web.listen.endswith(":9477")
    assert cfg.collectors["demo"].enabled is False  # default_enabled honoured


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml", REG)


def test_unknown_key_names_path(tmp_path: Path) -> None:
    err = _error(tmp_path, "[daemon]\ntick = 1\ntikc = 2\n")
    assert err.key == "daemon.tikc"
    assert str(tmp_path / "fw.toml") in str(err)
    assert "unknown key" in str(err)
    assert "tick" in str(err)  # lists what is known


def test_unknown_section_and_unknown_collector(tmp_path: Path) -> None:
    assert _error(tmp_path, "[deamon]\n").key == "deamon"
    err = _error(tmp_path, "[collectors.nvmll]\n")
    assert err.key == "collectors.nvmll"
    assert "demo" in str(err)


def test_wrong_type_names_path_and_expectation(tmp_path: Path) -> None:
    err = _error(tmp_path, '[store]\nhistory = "lots"\n')
    assert err.key == "store.history"
    assert "expected an integer" in str(err)
    assert "'lots'" in str(err)


def test_bool_is_not_an_integer(tmp_path: Path) -> None:
    assert _error(tmp_path, "[store]\nhistory = true\n").key == "store.history"


def test_out_of_range_names_path_and_range(tmp_path: Path) -> None:
    err = _error(tmp_path, "[collectors.demo]\n[[collectors.demo.targets]]\nport = 70000\n")
    assert err.key == "collectors.demo.targets[0].port"
    assert "between 1 and 65535" in str(err)


def test_choices_and_literals(tmp_path: Path) -> None:
    assert _error(tmp_path, '[collectors.demo]\nmode = "all"\n').key == "collectors.demo.mode"
    err = _error(tmp_path, '[log]\nformat = "xml"\n')
    assert err.key == "log.format"
    assert "'json'" in str(err)


def test_enum_startup_policy(tmp_path: Path) -> None:
    err = _error(tmp_path, '[collectors.demo]\nstartup = "panic"\n')
    assert err.key == "collectors.demo.startup"
    assert "'retry'" in str(err)


def test_invalid_toml_says_where(tmp_path: Path) -> None:
    err = _error(tmp_path, "[daemon\n")
    assert "invalid TOML" in str(err)
    assert "line 1" in str(err)


def test_listen_validation(tmp_path: Path) -> None:
    err = _error(tmp_path, '[web]\nlisten = "localhost"\n')
    assert err.key == "web"
    assert "host:port" in str(err)


def test_durations_and_sizes() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration("5m") == 300.0
    assert parse_duration("2") == 2.0
    assert parse_size("1MiB") == 1 << 20
    assert parse_size("10GB") == 10 * 1000**3
    assert parse_size("4k") == 4096
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="size"):
        parse_size("big")


def test_duration_strings_accepted_in_config(tmp_path: Path) -> None:
    cfg = load_config(
        _write(tmp_path, '[daemon]\ntick = "500ms"\n[store]\nstale_after = "2m"\n'), REG
    )
    assert cfg.daemon.tick == 0.5
    assert cfg.store.stale_after == 120.0
    err = _error(tmp_path, '[daemon]\ntick = "fast"\n')
    assert err.key == "daemon.tick"


def test_secrets_are_redacted_when_printed() -> None:
    cfg = parse_config({"collectors": {"demo": {"password": "hunter2"}}}, REG)
    text = dumps_toml(to_table(cfg))
    assert "hunter2" not in text
    assert "<redacted>" in text


def test_read_secret_from_file_env_and_credentials_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tok").write_text("s3cret\n")
    assert read_secret(str(tmp_path / "tok"), key="x") == "s3cret"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert read_secret("tok", key="x") == "s3cret"
    monkeypatch.setenv("FW_TOKEN", "from-env")
    assert read_secret("", key="x", env="FW_TOKEN") == "from-env"
    with pytest.raises(ConfigError, match="cannot read secret file"):
        read_secret(str(tmp_path / "missing"), key="collectors.demo.password_file")


def test_dump_round_trips_through_the_validator(tmp_path: Path) -> None:
    cfg = parse_config(
        {"collectors": {"demo": {"targets": [{"host": "10.0.0.1", "port": 1161}]}}}, REG
    )
    table = to_table(cfg, redact=False)
    table.pop("source", None)
    text = dumps_toml(table)
    again = load_config(_write(tmp_path, text), REG)
    assert again.collectors == cfg.collectors
    assert again.daemon == cfg.daemon


def test_node_name_from_config_then_environment_then_hostname(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from fabricwatch.config import DaemonSettings

    monkeypatch.delenv("FABRICWATCH_NODE", raising=False)
    assert DaemonSettings().node_name() == socket.gethostname()
    monkeypatch.setenv("FABRICWATCH_NODE", "gpu-node-17")
    assert DaemonSettings().node_name() == "gpu-node-17"
    assert DaemonSettings(node="explicit").node_name() == "explicit"


def test_one_switch_in_two_collectors_is_an_error(tmp_path: Path) -> None:
    from fabricwatch.collectors import builtin_registry

    both = """
[collectors.switch]
enabled = true
[[collectors.switch.targets]]
name = "leaf1"
host = "127.0.0.1"
[collectors.gnmi]
enabled = true
[[collectors.gnmi.targets]]
name = "{name}"
host = "127.0.0.1"
insecure = true
"""
    registry = builtin_registry()
    clash = r"switch 'leaf1' is configured in collectors\.switch too"
    with pytest.raises(ConfigError, match=clash):
        load_config(_write(tmp_path, both.format(name="leaf1")), registry)
    # Different switches, or the same one with one collector disabled, are fine.
    load_config(_write(tmp_path, both.format(name="leaf2")), registry)
    one_off = both.format(name="leaf1").replace(
        "[collectors.gnmi]\nenabled = true", "[collectors.gnmi]\nenabled = false"
    )
    assert not load_config(_write(tmp_path, one_off), registry).collectors["gnmi"].enabled
