"""SNMPv3 authPriv against net-snmp's snmpd (a real agent on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from fabricwatch.collectors.switch._settings import TargetSettings, V3Settings

from .conftest import Harness, Snmpd

pytestmark = pytest.mark.integration


def _v3_target(
    tmp_path: Path,
    snmpd: Snmpd,
    user: str,
    *,
    auth_key: str | None = None,
    priv_key: str | None = None,
) -> TargetSettings:
    auth, ak, priv, pk = snmpd.users[user]
    (tmp_path / f"{user}.auth").write_text((auth_key or ak) + "\n")
    (tmp_path / f"{user}.priv").write_text((priv_key or pk) + "\n")
    return TargetSettings(
        name=f"v3-{user}",
        host="127.0.0.1",
        port=snmpd.port,
        version="3",
        v3=V3Settings(
            user=user,
            auth_protocol=auth,
            auth_key_file=str(tmp_path / f"{user}.auth"),
            priv_protocol=priv,
            priv_key_file=str(tmp_path / f"{user}.priv"),
        ),
        timeout=1.0,
        retries=0,
        mode="switch",
    )


@pytest.mark.parametrize("user", ["fwsha", "fwsha256"])
async def test_v3_authpriv_polls_interfaces(
    user: str, snmpd: Snmpd, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    h = make_harness([_v3_target(tmp_path, snmpd, user)])
    await h.collector.start()
    await h.poll()
    st = h.collector.target_state(f"v3-{user}")
    assert st.up, st.last_error
    assert st.sys_name == "v3-switch"
    assert st.profile is not None and st.profile.name == "generic"
    # snmpd serves this machine's own interfaces: at least loopback.
    assert "lo" in st.ports.values()
    assert h.value("fabricwatch_switch_port_up", f"v3-{user}", "lo") == 1.0
    rx = h.value("fabricwatch_switch_port_receive_bytes", f"v3-{user}", "lo")
    assert rx is not None and rx > 0


async def test_v3_wrong_key_is_an_auth_failure(
    snmpd: Snmpd, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    h = make_harness([_v3_target(tmp_path, snmpd, "fwsha", auth_key="not-the-key-123")])
    await h.collector.start()
    with structlog.testing.capture_logs() as logs:
        await h.poll()
    assert h.value("fabricwatch_switch_target_up", "v3-fwsha") == 0.0
    (event,) = [e for e in logs if e["event"] in ("switch_auth_failed", "switch_poll_failed")]
    assert event["event"] == "switch_auth_failed", event
    assert "authentication" in event["error"].lower()
    assert h.value("fabricwatch_switch_poll_errors", "v3-fwsha", "auth") == 1.0


async def test_v3_unknown_user_is_an_auth_failure(
    snmpd: Snmpd, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    t = _v3_target(tmp_path, snmpd, "fwsha")
    t.v3.user = "nobody"
    h = make_harness([t])
    await h.collector.start()
    with structlog.testing.capture_logs() as logs:
        await h.poll()
    assert h.value("fabricwatch_switch_target_up", "v3-fwsha") == 0.0
    assert any(e["event"] == "switch_auth_failed" for e in logs), logs
