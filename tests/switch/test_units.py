"""Codec, profiles, LLDP matching and settings: no network."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.switch import FACTORY
from fabricwatch.collectors.switch._ber import (
    GET,
    GETBULK,
    REQUEST_IDS,
    RESPONSE,
    EncodedOids,
    Names,
    Special,
    Value,
    _decode_header,
    decode_oid,
    decode_request,
    decode_response,
    enc_oid_body,
    enc_unsigned,
    encode_oid,
    encode_request,
    encode_response,
    encode_varbind_list,
    names_of,
    parse_oid,
    request_template,
)
from fabricwatch.collectors.switch._lldp import map_local_ports
from fabricwatch.collectors.switch._profiles import load_profiles, parse_profile
from fabricwatch.collectors.switch._settings import SwitchSettings
from fabricwatch.collectors.switchcommon.uplinks import (
    Neighbour,
    find_uplinks,
    local_macs,
    normalize_mac,
)
from fabricwatch.errors import ConfigError, ParseError
from fabricwatch.settings import build

oids = st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=12).flatmap(
    lambda rest: st.tuples(st.integers(0, 1), st.integers(0, 39)).map(lambda h: (*h, *rest))
)


@given(oids)
def test_oid_roundtrip(oid: tuple[int, ...]) -> None:
    enc = encode_oid(oid)
    assert decode_oid(enc[2:] if enc[1] < 0x80 else enc[2 + (enc[1] & 0x7F) :]) == oid


def test_decode_matches_pysnmp_encoder() -> None:
    """Our decoder reads what pysnmp (pyasn1) encodes, for every value type."""
    from pyasn1.codec.ber import encoder
    from pysnmp.proto import api, rfc1902, rfc1905

    p = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    pdu = p.GetResponsePDU()
    p.apiPDU.set_defaults(pdu)
    p.apiPDU.set_request_id(pdu, 4242)
    vbs = [
        ((1, 3, 6, 1, 2, 1, 1, 3, 0), rfc1902.TimeTicks(123456)),
        ((1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6, 5), rfc1902.Counter64(2**64 - 1)),
        ((1, 3, 6, 1, 2, 1, 2, 2, 1, 13, 5), rfc1902.Counter32(2**32 - 1)),
        ((1, 3, 6, 1, 2, 1, 2, 2, 1, 8, 5), rfc1902.Integer32(-7)),
        ((1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 15, 5), rfc1902.Gauge32(400000)),
        ((1, 3, 6, 1, 2, 1, 1, 5, 0), rfc1902.OctetString(b"leaf\x00x")),
        ((1, 3, 6, 1, 2, 1, 1, 2, 0), rfc1902.ObjectIdentifier((1, 3, 6, 1, 4, 1, 30065))),
        ((1, 3, 6, 1, 2, 1, 4, 20, 1, 1), rfc1902.IpAddress("10.0.0.1")),
        ((1, 3, 6, 1, 9), rfc1905.noSuchInstance),
        ((1, 3, 6, 1, 10), rfc1905.endOfMibView),
    ]
    p.apiPDU.set_varbinds(pdu, vbs)
    msg = p.Message()
    p.apiMessage.set_defaults(msg)
    p.apiMessage.set_community(msg, "c")
    p.apiMessage.set_pdu(msg, pdu)
    resp = decode_response(encoder.encode(msg))
    assert resp.request_id == 4242 and resp.error_status == 0
    values = [v for _, v in resp.varbinds]
    assert values == [
        123456,
        2**64 - 1,
        2**32 - 1,
        -7,
        400000,
        b"leaf\x00x",
        (1, 3, 6, 1, 4, 1, 30065),
        b"\x0a\x00\x00\x01",
        Special.NO_SUCH_INSTANCE,
        Special.END_OF_MIB_VIEW,
    ]
    assert [o for o, _ in resp.varbinds] == [o for o, _ in vbs]
    # By name (what a GET's response is decoded with): the same values, names checked.
    names = names_of([o for o, _ in vbs])
    by_name = decode_response(encoder.encode(msg), names=lambda rid: names if rid == 4242 else None)
    assert by_name.values == values and by_name.varbinds == []


def _response() -> bytes:
    return encode_response(
        b"public",
        7,
        [
            ((1, 3, 6, 1, 2, 1, 1, 3, 0), 0x43, enc_unsigned(99)),
            ((1, 3, 6, 1, 2, 1, 1, 2, 0), 0x06, enc_oid_body((1, 3, 6, 1, 4, 1))),
        ],
    )


@given(st.lists(oids.filter(lambda o: len(o) >= 2), max_size=12))
def test_names_keep_each_encoding(batch: list[tuple[int, ...]]) -> None:
    """Names keep one blob, not a bytes object per name: the names come back out of it."""
    names = names_of(batch)
    assert names.tlvs == [encode_oid(o) for o in batch]
    assert len(names) == len(batch)


@given(st.lists(oids.filter(lambda o: len(o) >= 2), max_size=12), st.integers(-14, 14))
def test_encoded_oids_read_as_the_oids(batch: list[tuple[int, ...]], k: int) -> None:
    """EncodedOids (what a poll GETs, kept as encodings) reads as the tuple of its OIDs."""
    kept, plain = EncodedOids(batch), tuple(batch)
    assert len(kept) == len(plain) and list(kept) == list(plain)
    assert kept[k:] == list(plain[k:]) and kept[:k] == list(plain[:k])
    if -len(plain) <= k < len(plain):
        assert kept[k] == plain[k]
    else:
        with pytest.raises(IndexError):
            kept[k]
    start = abs(k) % (len(plain) + 1)
    assert kept.tlvs(start, start + 3) == [encode_oid(o) for o in plain[start : start + 3]]


_NAMES = names_of([(1, 3, 6, 1, 2, 1, 1, 3, 0), (1, 3, 6, 1, 2, 1, 1, 2, 0)])


def _by_name(data: bytes, names: Names | list[bytes] = _NAMES) -> list[Value]:
    asked = names if isinstance(names, Names) else Names(names)
    return decode_response(data, names=lambda _rid: asked).values


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            oids.filter(lambda o: len(o) >= 2),
            st.sampled_from([0x41, 0x42, 0x43, 0x46, 0x02, 0x04, 0x80, 0x81]),
            st.integers(0, 2**32 - 1),
        ),
        max_size=12,
    )
)
def test_by_name_decodes_the_values_the_plain_decoder_does(
    vbs: list[tuple[tuple[int, ...], int, int]],
) -> None:
    body = {0x02: lambda v: enc_unsigned(v >> 1), 0x04: lambda v: str(v).encode()}
    wire = encode_response(
        b"c",
        9,
        [(o, t, b"" if t >= 0x80 else body.get(t, enc_unsigned)(v)) for o, t, v in vbs],
    )
    plain = decode_response(wire)
    asked = names_of([o for o, _, _ in vbs])
    assert _by_name(wire, asked) == [v for _, v in plain.varbinds]
    # Another request's names (or none known for the request-id): decoded as usual.
    assert decode_response(wire, names=lambda _rid: None).varbinds == plain.varbinds


def test_by_name_rejects_other_names_and_extra_varbinds() -> None:
    data = _response()
    assert _by_name(data) == [99, (1, 3, 6, 1, 4, 1)]
    with pytest.raises(ParseError, match="varbind 1 of the response is not the name asked"):
        _by_name(data, names_of([(1, 3, 6, 1, 2, 1, 1, 4, 0), (1, 3, 6, 1, 2, 1, 1, 2, 0)]))
    with pytest.raises(ParseError, match="varbind 2 of the response is not the name asked"):
        # A longer name that starts like the one asked is not it.
        _by_name(data, [_NAMES.tlvs[0], encode_oid((1, 3, 6, 1, 2, 1, 1))])
    with pytest.raises(ParseError, match="more varbinds in the response than the 1 asked"):
        _by_name(data, _NAMES.tlvs[:1])
    # Fewer varbinds than asked decode; the session tells the caller (SnmpError).
    assert _by_name(data, [*_NAMES.tlvs, encode_oid((1, 3, 6, 1))]) == [99, (1, 3, 6, 1, 4, 1)]
    # An error response's varbinds are not checked against the names.
    err = encode_response(b"public", 7, [((1, 3, 6, 1), 0x05, b"")], error_status=1)
    resp = decode_response(err, names=lambda _rid: _NAMES)
    assert resp.error_status == 1 and resp.values == []


_EDGES = [
    (0x41, b"\x00\xff\xff\xff\xff"),  # Counter32 2^32-1: five bytes, leading zero
    (0x46, b"\x00" + b"\xff" * 8),  # Counter64 2^64-1: nine bytes
    (0x46, b"\x01"),
    (0x42, b"\x00\x00\x01"),  # not minimal, in range
    (0x02, b"\x7f"),
    (0x02, b"\xff"),  # a negative INTEGER
    (0x43, b"\x12\x34\x56\x78"),
    (0x41, b"\x01\x00\x00\x00\x00"),  # out of range for Counter32
    (0x80, b""),  # noSuchObject
    (0x04, b"text\n"),
    (0x46, b"\x0a" * 8),  # newline bytes in a value
    (0x02, b"\x00" * 9),
]
"""Number values in edge encodings (as agents send them), and a few others."""
_EDGE_OIDS = [(1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 100 + 20 * i) for i in range(len(_EDGES))]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, len(_EDGES) - 1), max_size=8), st.integers(0, 400), st.integers(0, 255)
)
def test_by_name_one_match_decodes_as_the_loop_does(picks: list[int], pos: int, byte: int) -> None:
    """The whole-response match (Names.pattern) gives what the varbind loop gives, or
    leaves the response to it: any mix of edge encodings, any corrupted byte."""
    oids = [_EDGE_OIDS[i] for i in picks]
    wire = encode_response(
        b"public", 3, [(o, *_EDGES[i]) for o, i in zip(oids, picks, strict=True)]
    )
    corrupt = bytearray(wire)
    corrupt[pos % len(corrupt)] = byte
    for data in (wire, bytes(corrupt)):
        matched, looped = names_of(oids), names_of(oids)
        looped.pattern = None
        assert matched.pattern is not None or not oids
        try:
            want: object = _by_name(data, looped)
        except ParseError:
            want = ParseError
        try:
            got: object = _by_name(data, matched)
        except ParseError:
            got = ParseError
        assert got == want
    # A mix of numbers in their common forms is decoded by the match alone.
    common = [i for i in picks if i in (0, 1, 2, 4, 6, 10)]
    numbers = names_of([_EDGE_OIDS[i] for i in common])
    wire = encode_response(b"public", 3, [(_EDGE_OIDS[i], *_EDGES[i]) for i in common])
    *_, start, end = _decode_header(wire)
    if common:
        assert numbers.pattern is not None
        matches = numbers.pattern.findall(wire, start, end)
        assert len(matches) == len(common)
        assert sum(2 + m[0][0] for m in matches) == end - start  # the whole list


def test_by_name_truncation_and_garbage_are_parse_errors() -> None:
    data = _response()
    for n in range(len(data)):
        with pytest.raises(ParseError):
            _by_name(data[:n])
    for pos in range(len(data)):
        for byte in (0x00, 0x7F, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[pos] = byte
            with contextlib.suppress(ParseError):
                assert len(_by_name(bytes(corrupt))) <= len(_NAMES)


@given(
    st.sampled_from([GET, GETBULK]),
    st.integers(0, 300),
    st.lists(oids.filter(lambda o: len(o) >= 2), max_size=60),
    st.integers(*REQUEST_IDS),
)
def test_request_template_is_the_encoded_request(
    pdu: int, reps: int, request: list[tuple[int, ...]], rid: int
) -> None:
    vbl = encode_varbind_list(request)
    head, tail = request_template(b"public", pdu, 0, reps, vbl)
    for r in (rid, *REQUEST_IDS):
        assert head + r.to_bytes(4, "big") + tail == encode_request(b"public", pdu, r, 0, reps, vbl)
    assert decode_request(head + rid.to_bytes(4, "big") + tail)[2] == rid


def test_every_truncation_is_a_parse_error() -> None:
    data = _response()
    assert decode_response(data).varbinds[0][1] == 99
    for n in range(len(data)):
        with pytest.raises(ParseError):
            decode_response(data[:n])
    with pytest.raises(ParseError, match="trailing"):
        decode_response(data + b"\x00")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_raises_anything_but_parse_error(blob: bytes) -> None:
    with contextlib.suppress(ParseError):
        decode_response(blob)
    with contextlib.suppress(ParseError):
        decode_request(blob)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(0, 255))
def test_corrupted_byte_is_rejected_or_decoded_cleanly(pos: int, byte: int) -> None:
    data = bytearray(_response())
    data[pos % len(data)] = byte
    try:
        resp = decode_response(bytes(data))
    except ParseError:
        return
    assert all(isinstance(o, tuple) for o, _ in resp.varbinds)


def test_unsupported_and_wrong_messages() -> None:
    good = _response()
    with pytest.raises(ParseError, match="Response-PDU"):
        decode_response(good.replace(bytes((RESPONSE,)), b"\xa0", 1))
    with pytest.raises(ParseError, match="length form"):
        decode_response(b"\x30\x85\x00\x00\x00\x00\x01")
    with pytest.raises(ValueError, match="numeric OID"):
        parse_oid("1.3.x")


def test_profiles_load_and_select() -> None:
    ps = load_profiles()
    names = {p.name for p in ps.profiles}
    assert names == {"arista", "cumulus", "dell-os9", "junos", "nxos", "onyx", "sonic"}
    cases = {
        ((1, 3, 6, 1, 4, 1, 30065, 1, 3011, 7150), ""): "arista",
        ((1, 3, 6, 1, 4, 1, 9, 12, 3, 1, 3, 1084), "Cisco NX-OS(tm) n5000"): "nxos",
        ((1, 3, 6, 1, 4, 1, 8072, 3, 2, 10), "SONiC Software Version: SONiC.x"): "sonic",
        ((1, 3, 6, 1, 4, 1, 8072, 3, 2, 10), "Linux sw #1 SMP Cumulus 4.19"): "cumulus",
        ((1, 3, 6, 1, 4, 1, 8072, 3, 2, 10), "Linux box"): "generic",
        ((1, 3, 6, 1, 4, 1, 6027, 1, 5, 2), ""): "dell-os9",
        ((1, 3, 6, 1, 4, 1, 33049, 1, 1, 1, 2700), ""): "onyx",
        ((1, 3, 6, 1, 4, 1, 2636, 1, 1, 1, 4, 82, 5), ""): "junos",
        (None, ""): "generic",
    }
    for (oid, descr), want in cases.items():
        assert ps.select(oid, descr).name == want, (oid, descr)
    dell = ps.by_name("dell-os9")
    t = next(t for t in dell.tables if t.signal == "pfc_frames")
    assert t.match_suffix((1,), 8) == 0 and t.match_suffix((8,), 8) == 7
    assert t.match_suffix((0,), 8) is None and t.match_suffix((9,), 8) is None
    # Every vendor profile also polls the generic IEEE/802.3x tables.
    assert any(t.signal == "pfc_total_frames" for t in ps.by_name("junos").tables)
    with pytest.raises(ConfigError, match="unknown switch profile"):
        ps.by_name("nope")


def test_adding_a_vendor_is_adding_a_file(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text(
        'name = "acme"\nrank = 10\n[[match]]\nsys_object_id = "1.3.6.1.4.1.99999"\n'
        '[[counter]]\nsignal = "pfc_frames"\ndirection = "rx"\n'
        'oid = "1.3.6.1.4.1.99999.1.1"\nindex = ["p"]\n'
    )
    ps = load_profiles((tmp_path,))
    assert ps.select((1, 3, 6, 1, 4, 1, 99999, 7), "").name == "acme"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('name = "x"\nbogus = 1\n', "bogus"),
        (
            'name = "x"\n[[counter]]\nsignal = "pfc_frames"\ndirection = "rx"\n'
            'oid = "1.3.6"\nindex = ["q"]\n',
            "exactly one 'p'",
        ),
        ('name = "x"\n[[counter]]\nsignal = "pfc_frames"\ndirection = "rx"\n', "exactly one"),
        (
            'name = "x"\n[[counter]]\nsignal = "queue_drops"\noid = "1.3.x"\nindex = ["q"]\n',
            "numeric OID",
        ),
        ('name = "x"\n[[match]]\n', "match rule"),
        ('name = "x"\n[[counter]]\nsignal = "pfc_frame"\n', "counter\\[0\\].signal"),
        ("name = \n", "invalid TOML"),
    ],
)
def test_bad_profiles_are_rejected_with_the_key(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_profile(text, "bad.toml")


def test_committed_recordings_match_generator() -> None:
    from tests.switch import recgen

    for name, fn in recgen.RECORDINGS.items():
        path = recgen.OUT / f"{name}.snmprec"
        assert path.read_text(encoding="ascii") == fn(), f"regenerate {path} (recgen.py)"


def test_mac_normalisation() -> None:
    want = "3c:2c:30:16:74:80"
    for form in (
        bytes.fromhex("3c2c30167480"),
        "3c 2c 30 16 74 80",
        "3C-2C-30-16-74-80",
        "3c2c.3016.7480",
        b"3c:2c:30:16:74:80",
    ):
        assert normalize_mac(form) == want, form
    assert normalize_mac("Ethernet1/1") is None
    assert normalize_mac(b"\x01\x02") is None


def test_local_port_mapping_and_matching() -> None:
    loc = (1, 0, 8802, 1, 1, 2, 1, 3, 7, 1)
    cols: dict[Any, Any] = {
        (*loc, 2): [((*loc, 2, 1), 5), ((*loc, 2, 2), 7), ((*loc, 2, 3), 3)],
        (*loc, 3): [
            ((*loc, 3, 1), b"ethernet1/1/1"),
            ((*loc, 3, 2), b"17"),
            ((*loc, 3, 3), b"8c:60:4f:19:16:21"),
        ],
        (*loc, 4): [((*loc, 4, 3), b"Ethernet1/9")],
    }
    names = {17: "Ethernet1/5", 1001: "ethernet1/1/1", 3: "mgmt0", 41: "Ethernet1/9"}
    m = map_local_ports(cols, names, {})
    # by name; by "local" subtype id; by description when the id is a MAC
    assert m == {1: 1001, 2: 17, 3: 41}
    nbs = [
        Neighbour(5, 1, 1, 4, b"\xaa" * 6, 5, b"eth0", "GPU-Node-1.cluster.local"),
        Neighbour(5, 2, 1, 4, bytes.fromhex("0c42a1000007"), 3, b"x", ""),
        Neighbour(5, 3, 2, 4, b"\x01" * 6, 5, b"eth9", "other"),
        Neighbour(5, 9, 1, 4, b"\x02" * 6, 5, b"eth1", "gpu-node-1"),
    ]
    found, unmapped = find_uplinks(nbs, m, ["gpu-node-1"], {"0c:42:a1:00:00:07"})
    assert {i: u.matched_by for i, u in found.items()} == {1001: "sys_name", 17: "chassis_mac"}
    assert [n.local_port for n in unmapped] == [9]


def test_local_macs_reads_sysfs_tree(tmp_path: Path) -> None:
    net = tmp_path / "class" / "net"
    for nic, mac in (
        ("lo", "00:00:00:00:00:00"),
        ("eth0", "52:54:00:AB:cd:01"),
        ("ib0", "00:00:10:29:fe:80:00:00:00:00:00:00:ec:0d:9a:03:00:1a:2b:3c"),
    ):
        (net / nic).mkdir(parents=True)
        (net / nic / "address").write_text(mac + "\n")
    (net / "broken").mkdir()
    assert local_macs(tmp_path) == {"52:54:00:ab:cd:01"}
    assert local_macs(tmp_path / "missing") == set()


def test_registered_and_settings_are_strict() -> None:
    assert builtin_registry()["switch"] is FACTORY
    s = build(
        SwitchSettings,
        {
            "mode": "switch",
            "targets": [
                {
                    "name": "a",
                    "host": "10.0.0.1",
                    "timeout": "500ms",
                    "v3": {"user": "u"},
                    "version": "3",
                }
            ],
        },
        prefix="collectors.switch",
    )
    assert s.targets[0].timeout == 0.5 and s.targets[0].v3.auth_protocol == "sha"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"targets": [{"name": "a", "host": "h", "comunity": "x"}]}, "targets\\[0\\].comunity"),
        ({"targets": [{"name": "a"}]}, "needs a host"),
        ({"targets": [{"name": "a", "host": "h", "version": "1"}]}, "version"),
        (
            {"targets": [{"name": "a", "host": "h", "v3": {"auth_protocol": "sha1"}}]},
            "auth_protocol",
        ),
        ({"targets": [{"name": "a", "host": "h"}, {"name": "a", "host": "i"}]}, "duplicate"),
        ({"targets": [{"name": "a", "host": "h", "version": "3"}]}, "v3.user"),
        ({"mode": "all"}, "mode"),
    ]
    for data, match in bad:
        with pytest.raises(ConfigError, match=match):
            build(SwitchSettings, data, prefix="collectors.switch")


def _ber_len(n: int) -> bytes:
    return bytes((n,)) if n < 0x80 else bytes((0x82, n >> 8, n & 0xFF))


def _tlv(tag: int, body: bytes, *, long_form: bool = False) -> bytes:
    """A TLV; ``long_form``: its length as 0x81 n (legal BER, off the decoder's fast path)."""
    if long_form:
        return bytes((tag, 0x81, len(body))) + body
    return bytes((tag,)) + _ber_len(len(body)) + body


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            oids.filter(lambda o: len(o) >= 2),
            st.sampled_from([0x41, 0x42, 0x43, 0x46]),
            st.integers(0, (1 << 64) - 1),
            st.sampled_from(["varbind", "oid", "value", "none"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_varbinds_decode_alike_with_short_and_long_length_forms(
    vbs: list[tuple[tuple[int, ...], int, int, str]],
) -> None:
    """The decoder's inline path (short lengths, numeric values) and its general one
    (any BER) give the same varbinds."""
    want = [(o, v if tag == 0x46 else v & 0xFFFFFFFF) for o, tag, v, _ in vbs]
    short = encode_response(
        b"c",
        7,
        [(o, tag, enc_unsigned(v)) for (o, tag, _, _), (_, v) in zip(vbs, want, strict=True)],
    )
    assert decode_response(short).varbinds == want
    vbl = b""
    for (o, tag, _, where), (_, v) in zip(vbs, want, strict=True):
        oid = _tlv(0x06, encode_oid(o)[2:], long_form=where == "oid")
        value = _tlv(tag, enc_unsigned(v), long_form=where == "value")
        vbl += _tlv(0x30, oid + value, long_form=where == "varbind")
    head = b"\x02\x01\x07\x02\x01\x00\x02\x01\x00"  # request-id 7, no error
    pdu = _tlv(RESPONSE, head + _tlv(0x30, vbl))
    mixed = _tlv(0x30, b"\x02\x01\x01" + _tlv(0x04, b"c") + pdu)
    assert decode_response(mixed).varbinds == want
