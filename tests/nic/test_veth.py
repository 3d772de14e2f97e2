"""The ethtool ioctl against a real veth pair in a network namespace we create."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabricwatch.collectors.nic._ethtool import (
    EthtoolUnavailableError,
    IoctlEthtool,
    NoSuchNetdevError,
    parse_ethtool_text,
)

from .conftest import socket_in_netns

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _ethtool_binary(netns: str, ifname: str) -> dict[str, int]:
    if shutil.which("ethtool") is None:
        pytest.skip("the ethtool binary (Debian package ethtool) is missing")
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "ethtool", "-S", ifname],
        check=True,
        capture_output=True,
        text=True,
        timeout=20,
    )
    return parse_ethtool_text(out.stdout, f"ethtool -S {ifname}")


def _ifindex(netns: str, ifname: str) -> int:
    out = subprocess.run(
        ["ip", "-n", netns, "-o", "link", "show", ifname],
        check=True,
        capture_output=True,
        text=True,
        timeout=20,
    )
    return int(out.stdout.split(":", 1)[0])


def test_ioctl_reads_veth_stats_inside_the_namespace(netns: str) -> None:
    reader = IoctlEthtool(lambda: socket_in_netns(netns))
    try:
        stats = reader.stats("fwa")
        # veth reports its peer's ifindex: a value only the real driver can know.
        assert stats["peer_ifindex"] == _ifindex(netns, "fwb")
        assert reader.stats("fwb")["peer_ifindex"] == _ifindex(netns, "fwa")
        # Same names and values as the ethtool program, in the same order.
        assert list(stats.items()) == list(_ethtool_binary(netns, "fwa").items())
        # Cached names are reused, and still right on the next read.
        assert reader.stats("fwa") == stats
        with pytest.raises(NoSuchNetdevError):
            reader.stats("fwnope")
        with pytest.raises(EthtoolUnavailableError):
            reader.stats("lo")
        with pytest.raises(NoSuchNetdevError):
            reader.stats("x" * 20)
    finally:
        reader.close()


def test_interface_replaced_under_the_same_name(netns: str) -> None:
    reader = IoctlEthtool(lambda: socket_in_netns(netns))
    try:
        assert reader.stats("fwa")["peer_ifindex"] == _ifindex(netns, "fwb")
        subprocess.run(["ip", "-n", netns, "link", "del", "fwa"], check=True, timeout=20)
        with pytest.raises(NoSuchNetdevError):
            reader.stats("fwa")  # hot-unplug
        subprocess.run(
            ["ip", "-n", netns, "link", "add", "fwa", "type", "veth", "peer", "name", "fwc"],
            check=True,
            timeout=20,
        )
        # Recovered, and the new peer is seen (names re-read for the new ifindex).
        assert reader.stats("fwa")["peer_ifindex"] == _ifindex(netns, "fwc")
    finally:
        reader.close()


def test_works_without_root(netns: str) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing, cannot drop privileges")
    code = (
        "import os; from fabricwatch.collectors.nic._ethtool import IoctlEthtool;"
        "assert os.geteuid() == 65534;"
        "print(IoctlEthtool().stats('fwa')['peer_ifindex'])"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "setpriv", "--reuid=65534", "--regid=65534",
         "--clear-groups", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, env=env, check=False, cwd="/",
    )  # fmt: skip
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip(f"uid 65534 cannot read the virtualenv here: {out.stderr.strip()[-200:]}")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == _ifindex(netns, "fwb")
