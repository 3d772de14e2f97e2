"""The shipped sample config, and the watchdog's notion of a live pipeline."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fabricwatch.clock import Clock
from fabricwatch.collectors import builtin_registry
from fabricwatch.config import load_config, parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.sample import render_sample
from fabricwatch.sdnotify import Notifier

SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "fabricwatch.toml"


def test_sample_is_generated_from_the_schema() -> None:
    assert SAMPLE.read_text() == render_sample(builtin_registry()), (
        "deploy/fabricwatch.toml drifted: regenerate with `fabricwatch sample-config`"
    )


def test_sample_validates_and_equals_the_embedded_defaults() -> None:
    reg = builtin_registry()
    cfg = load_config(SAMPLE, reg)
    defaults = parse_config({}, reg)
    assert cfg.daemon == defaults.daemon
    assert cfg.collectors == defaults.collectors
    # Every collector of the registry is documented in the sample.
    assert set(tomllib.loads(SAMPLE.read_text()).get("collectors", {})) == set(reg)


def test_watchdog_withheld_when_ticks_stop() -> None:
    now = [100.0]
    notifier = Notifier({"NOTIFY_SOCKET": "", "WATCHDOG_USEC": "2000000"})
    d = Daemon(
        parse_config({}, {}),
        {},
        config_path=None,
        notifier=notifier,
        clock=Clock(monotonic=lambda: now[0]),
    )
    d._heartbeat = 100.0
    assert d.pipeline_alive()
    now[0] = 101.5
    assert d.pipeline_alive()
    now[0] = 103.0  # no tick for longer than WATCHDOG_USEC
    assert not d.pipeline_alive()


def test_state_dir_default_falls_back_explicit_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabricwatch.config import DaemonSettings
    from fabricwatch.daemon import resolve_state_dir
    from fabricwatch.errors import ConfigError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    unusable = DaemonSettings(state_dir=blocker / "state")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert resolve_state_dir(unusable, explicit=False) == tmp_path / "xdg" / "fabricwatch"
    with pytest.raises(ConfigError, match=r"daemon\.state_dir"):
        resolve_state_dir(unusable, explicit=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "xdg"))
    with pytest.raises(ConfigError, match="fallback"):
        resolve_state_dir(unusable, explicit=False)
