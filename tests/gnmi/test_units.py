"""Paths, values, profiles and settings of the gNMI collector (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collectors.gnmi import _metrics as gsig
from fabricwatch.collectors.gnmi._collector import _speed_bps
from fabricwatch.collectors.gnmi._profiles import load_profiles, parse_profile
from fabricwatch.collectors.gnmi._proto import (
    flatten,
    make_path,
    path_text,
    pb,
    split_path,
    typed_value,
)
from fabricwatch.collectors.gnmi._settings import GnmiSettings
from fabricwatch.collectors.switch import _metrics as sw
from fabricwatch.errors import ConfigError, ParseError
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore

# -- paths ------------------------------------------------------------------


def test_paths_round_trip_with_slashes_and_brackets_in_keys() -> None:
    text = "/interfaces/interface[name=Ethernet1/1]/state/counters/in-octets"
    assert path_text(make_path(text)) == text
    odd = r"/a[k=x\]y][j=1]/b"
    elems = split_path(odd)
    assert elems == [("a", {"k": "x]y", "j": "1"}), ("b", {})]
    assert path_text(make_path(odd)) == r"/a[j=1][k=x\]y]/b"  # keys sorted, ] escaped
    assert split_path("COUNTERS/Ethernet*") == [("COUNTERS", {}), ("Ethernet*", {})]


@pytest.mark.parametrize("bad", ["/a[k=v", "/a]b", "/a[=v]/b", "/a//b", "/a[k=v]x"])
def test_malformed_paths_raise_parse_error(bad: str) -> None:
    with pytest.raises(ParseError):
        split_path(bad)


def test_deprecated_element_paths_are_read() -> None:
    p = pb.Path(element=["COUNTERS", "Ethernet0"])
    assert path_text(p) == "/COUNTERS/Ethernet0"


# -- values -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("val", "expected"),
    [
        (pb.TypedValue(uint_val=2**64 - 1), 2**64 - 1),
        (pb.TypedValue(int_val=-3), -3),
        (pb.TypedValue(string_val="123"), 123),
        (pb.TypedValue(string_val="UP"), "UP"),
        (pb.TypedValue(string_val="nan"), "nan"),
        (pb.TypedValue(double_val=0.25), 0.25),
        (pb.TypedValue(bool_val=True), True),
        (pb.TypedValue(decimal_val=pb.Decimal64(digits=1234, precision=2)), 12.34),
        (pb.TypedValue(json_ietf_val=b'"42"'), 42),
        (pb.TypedValue(json_val=b'{"a": {"b": "7"}}'), {"a": {"b": "7"}}),
        (pb.TypedValue(), None),
        (pb.TypedValue(bytes_val=b"\x00"), None),
    ],
)
def test_typed_values(val: object, expected: object) -> None:
    assert typed_value(val) == expected


@pytest.mark.parametrize("raw", [b'{"a": ', b"\xff\xfe", b"not json", b""])
def test_truncated_or_garbage_json_raises_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError):
        typed_value(pb.TypedValue(json_ietf_val=raw))


def test_flatten_drops_module_prefixes_and_expands_sonic_wildcards() -> None:
    doc = {"openconfig-qos:state": {"ecn-marked-pkts": "5", "name": "3"}}
    assert sorted(flatten("/q[name=3]", doc)) == [
        ("/q[name=3]/state/ecn-marked-pkts", 5),
        ("/q[name=3]/state/name", 3),
    ]
    sonic = {"Ethernet0": {"SAI_PORT_STAT_PFC_3_RX_PKTS": "9"}, "Ethernet4": {}}
    assert list(flatten("/COUNTERS/Ethernet*", sonic)) == [
        ("/COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS", 9)
    ]
    # SONiC queue keys look like "Ethernet0:3": not a YANG module prefix.
    queues = {"Ethernet0:3": {"SAI_QUEUE_STAT_PACKETS": "1"}}
    assert list(flatten("/COUNTERS/Ethernet0/Queues", queues)) == [
        ("/COUNTERS/Ethernet0/Queues/Ethernet0:3/SAI_QUEUE_STAT_PACKETS", 1)
    ]
    assert list(flatten("/x", [1, 2])) == []  # lists carry no keys: skipped


def test_speed_parsing() -> None:
    assert _speed_bps("openconfig-if-ethernet:SPEED_400GB", 1.0) == 400e9
    assert _speed_bps("SPEED_2500MB", 1.0) == 2.5e9
    assert _speed_bps(100000, 1e6) == 100e9
    assert _speed_bps("SPEED_UNKNOWN", 1.0) is None
    assert _speed_bps(-1, 1e6) is None
    assert _speed_bps(True, 1.0) is None


# -- profiles ---------------------------------------------------------------


def test_builtin_profiles_load_and_classify() -> None:
    ps = load_profiles()
    assert {p.name for p in ps.profiles} >= {"openconfig", "sonic"}
    sonic = ps.by_name("sonic")
    hit = sonic.classify("/COUNTERS/Ethernet8/SAI_PORT_STAT_PFC_5_TX_PAUSE_DURATION_US")
    assert hit is not None
    assert (hit[0].signal, hit[0].direction, hit[0].unit) == ("pfc_duration", "tx", 1e-6)
    assert hit[1] == {"port": "Ethernet8", "priority": "5"}
    assert sonic.classify("/COUNTERS/Ethernet8/SAI_PORT_STAT_PFC_5_ON2OFF_RX_PKTS") is None
    oc = ps.by_name("openconfig")
    q = "/qos/interfaces/interface[interface-id=Ethernet1/1]/output/queues/queue[name=UC3]"
    hit = oc.classify(f"{q}/state/ecn-marked-pkts")
    assert hit is not None and hit[1] == {"port": "Ethernet1/1", "queue": "UC3"}
    assert oc.classify(f"{q}/state/max-queue-len") is None


def test_profile_selection_by_capabilities_models() -> None:
    ps = load_profiles()
    assert ps.select(["openconfig-interfaces", "openconfig-qos"]).name == "openconfig"
    assert ps.select(["sonic-db"]).name == "sonic"
    assert ps.select([]).name == "openconfig"  # the default
    with pytest.raises(ConfigError, match="unknown gNMI profile 'nope'"):
        ps.by_name("nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\n', "at least one subscription"),
        ('name = "x"\nbogus = 1\n[[subscription]]\npath = "/a"\n', "bogus"),
        (
            'name = "x"\n[[subscription]]\npath = "/a"\n'
            '[[leaf]]\npath = "/a/{port}/b"\nsignal = "ecn_marks"\n',
            "needs captures",
        ),
        (
            'name = "x"\n[[subscription]]\npath = "/a"\n'
            '[[leaf]]\npath = "/a/{port}/p{priority}"\nsignal = "pfc_frames"\n',
            "needs a direction",
        ),
        (
            'name = "x"\n[[subscription]]\npath = "/a"\n'
            '[[leaf]]\npath = "/a/{who}"\nsignal = "rx_bytes"\n',
            "unknown capture",
        ),
        ('name = "x"\n[[subscription]]\npath = "/a[k=v"\n', "bad gNMI path"),
        ('name = "x"\n[[match]]\nmodel = "("\n[[subscription]]\npath = "/a"\n', "regex"),
        ("name = [", "invalid TOML"),
    ],
)
def test_bad_profiles_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_profile(text, "test.toml")


def test_profile_dirs_override_builtin(tmp_path: Path) -> None:
    (tmp_path / "openconfig.toml").write_text(
        'name = "openconfig"\n[[subscription]]\npath = "/vendor/pfc"\n'
        '[[leaf]]\npath = "/vendor/pfc/{port}/p{priority}/rx"\n'
        'signal = "pfc_frames"\ndirection = "rx"\n',
        encoding="utf-8",
    )
    ps = load_profiles((tmp_path,))
    oc = ps.by_name("openconfig")
    assert oc.subscription_paths(None) == [("/vendor/pfc", False, "")]
    hit = oc.classify("/vendor/pfc/swp1/p3/rx")
    assert hit is not None and hit[1] == {"port": "swp1", "priority": "3"}


# -- settings ---------------------------------------------------------------


def test_settings_are_strict() -> None:
    ok = build(
        GnmiSettings,
        {
            "targets": [
                {
                    "name": "leaf1",
                    "host": "10.0.0.1",
                    "tls": {"ca_file": "/etc/fw/ca.pem"},
                    "username": "telemetry",
                    "password_file": "gnmi-password",
                }
            ]
        },
        prefix="collectors.gnmi",
    )
    assert ok.targets[0].port == 9339 and not ok.targets[0].insecure
    bad: list[tuple[dict[str, object], str]] = [
        ({"targets": [{"name": "a", "host": "h", "tls": {"ca_fil": "x"}}]}, "ca_fil"),
        (
            {"targets": [{"name": "a", "host": "h", "insecure": True, "tls": {"ca_file": "x"}}]},
            "exclude",
        ),
        ({"targets": [{"name": "a", "host": "h", "password_file": "p"}]}, "needs a username"),
        ({"targets": [{"name": "a", "host": "h", "tls": {"cert_file": "c"}}]}, "go together"),
        ({"targets": [{"name": "a"}]}, "needs a host"),
        ({"targets": [{"name": "a", "host": "h"}, {"name": "a", "host": "g"}]}, "duplicate"),
        ({"queue_size": 0}, "queue_size"),
        ({"targets": [{"name": "a", "host": "h", "port": 70000}]}, "port"),
    ]
    for data, message in bad:
        with pytest.raises(ConfigError, match=message):
            build(GnmiSettings, data, prefix="collectors.gnmi")


def test_stale_default_follows_the_interval() -> None:
    assert GnmiSettings(interval=1.0).stale_seconds() == 5.0
    assert GnmiSettings(interval=1.0, stale_after=30.0).stale_seconds() == 30.0


def test_switch_and_gnmi_declare_shared_families_identically() -> None:
    store = SnapshotStore()
    store.register("switch", sw.METRICS)
    store.register("gnmi", gsig.METRICS)  # raises if a shared family differed
    assert fam.SW_ECN in sw.METRICS and fam.SW_ECN in gsig.METRICS
    assert fam.SW_ECN.name == "fabricwatch_switch_ecn_marked_packets"
    assert fam.SW_ECN.labels == ("switch", "port", "queue")
    names = [s.name for s in gsig.METRICS]
    assert len(names) == len(set(names))
