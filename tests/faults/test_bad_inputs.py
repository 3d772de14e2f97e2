"""Bad inputs get a clear error and nothing else (issue 17, items 9 and 11)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.switch._ber import decode_response, encode_response
from fabricwatch.config import load_config
from fabricwatch.errors import ConfigError, ParseError
from fabricwatch.outputs.mqtt import default_client_id
from fabricwatch.outputs.settings import MqttSettings
from fabricwatch.outputs.sinks import flood_defaults
from fabricwatch.secrets import read_secret
from fabricwatch.settings import build, redact_url

OID = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6, 1)


@pytest.mark.parametrize(
    ("tag", "body", "ok"),
    [
        (0x46, b"\x00" + b"\xff" * 8, True),  # 2**64 - 1: nine bytes, one leading zero
        (0x46, b"\x01" + b"\x00" * 9, False),  # 2**72
        (0x46, b"\x01" + b"\x00" * 8, False),  # 2**64
        (0x41, b"\x01" + b"\x00" * 4, False),  # Counter32 of 2**32
        (0x42, b"\x00\xff\xff\xff\xff", True),  # Gauge32 max
    ],
)
def test_out_of_range_unsigned_values_are_rejected(tag: int, body: bytes, ok: bool) -> None:
    wire = encode_response(b"public", 7, [(OID, tag, body)])
    if ok:
        assert decode_response(wire).varbinds[0][1] == int.from_bytes(body, "big")
    else:
        with pytest.raises(ParseError, match="out of range"):
            decode_response(wire)


def test_endless_config_and_secret_files_are_refused() -> None:
    with pytest.raises(ConfigError, match="larger than"):
        load_config(Path("/dev/zero"), builtin_registry())
    with pytest.raises(ConfigError, match="larger than") as info:
        read_secret("/dev/zero", key="mqtt.password_file")
    assert info.value.key == "mqtt.password_file"


def test_check_config_redacts_secrets_inside_urls(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("whsec_" + "A" * 32 + "\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"""[[alerting.sinks]]
name = "chat"
type = "slack"
url = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX"
[[alerting.sinks]]
name = "hook"
type = "webhook"
url = "https://user:hunter2@hooks.example:8443/in?token=tok3n"
secret_file = "{secret}"
[[alerting.sinks]]
name = "am"
type = "alertmanager"
url = "http://127.0.0.1:9093"
"""
    )
    out = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "check-config", str(cfg)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    for leaked in ("XXXXSECRETXXXX", "hunter2", "tok3n", "user:"):
        assert leaked not in out, out
    assert "https://hooks.slack.com/<redacted>" in out
    assert "https://hooks.example:8443/<redacted>" in out
    assert '"http://127.0.0.1:9093"' in out  # nothing secret: shown as is


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://a.example/x?y=1", "https://a.example/<redacted>"),
        ("http://[::1]:9093", "http://[::1]:9093"),
        ("not a url", "<redacted>"),
        ("http://h:99999/", "http://h"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize("prefix", ["fab\x00ric", "a\nb", "x\x7f"])
def test_control_characters_in_topic_prefix_are_rejected(prefix: str) -> None:
    with pytest.raises(ConfigError, match="control characters"):
        build(MqttSettings, {"topic_prefix": prefix}, prefix="mqtt")


def test_mqtt_client_ids_do_not_collide() -> None:
    ids = {default_client_id("prod", n) for n in ("gpu.1", "gpu:1", "gpu-1", "GPU-1")}
    assert len(ids) == 4
    assert all(i.startswith("fabricwatch-gpu-1-") for i in ids)
    assert default_client_id("prod", "gpu.1") != default_client_id("lab", "gpu.1")
    assert len(default_client_id("prod", "n" * 500)) <= 64


def test_webhook_default_batch_drains_a_20k_backlog_in_about_a_minute() -> None:
    flood = flood_defaults("webhook")
    per_second = flood.rate_per_minute / 60.0 * flood.max_batch
    assert 20_000 / per_second <= 90
