"""A small, strict BER codec for SNMPv2c messages (RFC 3416 PDUs).

pyasn1 (what pysnmp decodes with) spends ~0.15 ms per varbind on the 2-core
reference box, which alone would blow the node-mode budget (``DESIGN.md``:
a poll of 4 uplinks under 5 ms CPU). SNMPv2c messages use a handful of
universal and application types, so a direct decoder of exactly those is both
small and fast. Anything else is rejected with :class:`ParseError`, never
guessed at: a malformed or truncated datagram must not crash the daemon.
"""

from __future__ import annotations

import enum
import operator
import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import overload

from fabricwatch.errors import ParseError

Oid = tuple[int, ...]


class Special(enum.Enum):
    """The three SNMPv2 exception values that take a varbind's value position."""

    NO_SUCH_OBJECT = 0x80
    NO_SUCH_INSTANCE = 0x81
    END_OF_MIB_VIEW = 0x82


Value = int | bytes | Oid | Special | None
"""A decoded value: numbers (Integer, Counter32/64, Gauge32, TimeTicks) as int,
OCTET STRING / IpAddress / Opaque as bytes, OIDs as tuples, NULL as None."""

VarBind = tuple[Oid, Value]

GET = 0xA0
GETNEXT = 0xA1
RESPONSE = 0xA2
GETBULK = 0xA5

_INTEGER = 0x02
_OCTETS = 0x04
_NULL = 0x05
_OID = 0x06
_SEQUENCE = 0x30
_NUMERIC_APP = frozenset((0x41, 0x42, 0x43, 0x46))  # Counter32, Gauge32, TimeTicks, Counter64
_BYTES_APP = frozenset((0x40, 0x44))  # IpAddress, Opaque
_SPECIALS = {s.value: s for s in Special}


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def _tlv(tag: int, body: bytes) -> bytes:
    return bytes((tag,)) + _length(len(body)) + body


def _enc_int(value: int) -> bytes:
    return _tlv(_INTEGER, value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True))


def encode_oid(oid: Oid) -> bytes:
    """BER encoding (tag, length, body) of an OBJECT IDENTIFIER."""
    if len(oid) < 2 or oid[0] > 2 or (oid[0] < 2 and oid[1] >= 40):
        msg = f"not an encodable OID: {oid!r}"
        raise ValueError(msg)
    out = bytearray()
    for arc in (oid[0] * 40 + oid[1], *oid[2:]):
        if arc < 0:
            msg = f"negative sub-identifier in {oid!r}"
            raise ValueError(msg)
        chunk = [arc & 0x7F]
        rest = arc >> 7
        while rest:
            chunk.append(0x80 | (rest & 0x7F))
            rest >>= 7
        out.extend(reversed(chunk))
    return _tlv(_OID, bytes(out))


def encode_varbind_list(oids: Sequence[Oid]) -> bytes:
    """The VarBindList of a request (each value NULL), encoded once and reused."""
    return varbind_list([encode_oid(o) for o in oids])


def varbind_list(tlvs: Iterable[bytes]) -> bytes:
    """:func:`encode_varbind_list` of names already encoded (:func:`encode_oid`)."""
    return _tlv(_SEQUENCE, b"".join(_tlv(_SEQUENCE, t + b"\x05\x00") for t in tlvs))


class EncodedOids(Sequence[Oid]):
    """An immutable sequence of OIDs kept as their BER encodings, in one bytes object.

    What a poller GETs every cycle: ~21 000 OIDs for a 512-port switch, ~16 bytes
    each here instead of ~150 as tuples of ints. An item is decoded when read;
    :meth:`tlvs` hands out the encodings themselves (what a request is made of).
    """

    __slots__ = ("_blob", "_ends")

    def __init__(self, oids: Iterable[Oid] = ()) -> None:
        tlvs = [encode_oid(o) for o in oids]
        self._blob = b"".join(tlvs)
        self._ends = array("I", accumulate(map(len, tlvs)))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> Oid: ...
    @overload
    def __getitem__(self, index: slice) -> list[Oid]: ...
    def __getitem__(self, index: int | slice) -> Oid | list[Oid]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._ends)))]
        ends = self._ends
        if index < 0:
            index += len(ends)
        if not 0 <= index < len(ends):
            msg = "EncodedOids index out of range"
            raise IndexError(msg)
        start = ends[index - 1] if index else 0
        _, s, e = _header(self._blob, start, ends[index])
        return decode_oid(self._blob[s:e])

    def tlvs(self, start: int, stop: int) -> list[bytes]:
        """The encodings (tag, length, body) of items ``start`` to ``stop``."""
        ends = self._ends
        stop = min(stop, len(ends))
        if start >= stop:
            return []
        blob = self._blob
        begins = (ends[start - 1] if start else 0, *ends[start : stop - 1])
        return [blob[b:e] for b, e in zip(begins, ends[start:stop], strict=True)]


def encode_request(  # noqa: PLR0917 - mirrors the PDU fields
    community: bytes, pdu_type: int, request_id: int, a: int, b: int, varbind_list: bytes
) -> bytes:
    """A complete SNMPv2c message.

    ``a``/``b`` are error-status/error-index for GET and GETNEXT, and
    non-repeaters/max-repetitions for GETBULK.
    """
    pdu = _tlv(pdu_type, _enc_int(request_id) + _enc_int(a) + _enc_int(b) + varbind_list)
    return _tlv(_SEQUENCE, _enc_int(1) + _tlv(_OCTETS, community) + pdu)


REQUEST_IDS = (0x0080_0000, 0x7FFF_FFFF)
"""Request-ids a :func:`request_template` takes: every one of them is four bytes in BER."""


def request_template(
    community: bytes, pdu_type: int, a: int, b: int, varbind_list: bytes
) -> tuple[bytes, bytes]:
    """(head, tail) with ``head + rid.to_bytes(4, "big") + tail`` equal to
    :func:`encode_request` for each ``rid`` in :data:`REQUEST_IDS` (a poll sends the
    same requests every cycle: only their request-ids differ)."""
    msg = encode_request(community, pdu_type, REQUEST_IDS[0], a, b, varbind_list)
    at = len(msg) - len(varbind_list) - len(_enc_int(a)) - len(_enc_int(b)) - 4
    return msg[:at], msg[at + 4 :]


def _header(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """Return (tag, body start, body end) of the TLV at ``pos``, checked against ``end``."""
    if pos + 2 > end:
        raise ParseError("truncated: TLV header past the end")
    tag = data[pos]
    n = data[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4:
            raise ParseError(f"unsupported BER length form 0x{n:02x}")
        if pos + k > end:
            raise ParseError("truncated: length octets past the end")
        n = int.from_bytes(data[pos : pos + k], "big")
        pos += k
    if pos + n > end:
        raise ParseError(f"truncated: element of {n} bytes overruns its container")
    return tag, pos, pos + n


def _dec_int(data: bytes, start: int, end: int) -> int:
    if start == end:
        raise ParseError("empty INTEGER")
    return int.from_bytes(data[start:end], "big", signed=True)


def decode_oid(body: bytes) -> Oid:
    """Decode an OID body (without tag and length)."""
    if not body:
        raise ParseError("empty OBJECT IDENTIFIER")
    subs: list[int] = []
    acc = 0
    for byte in body:
        acc = (acc << 7) | (byte & 0x7F)
        if not byte & 0x80:
            subs.append(acc)
            acc = 0
    if body[-1] & 0x80:
        raise ParseError("truncated OBJECT IDENTIFIER")
    first = subs[0]
    head = (0, first) if first < 40 else (1, first - 40) if first < 80 else (2, first - 80)
    return (*head, *subs[1:])


def _dec_value(data: bytes, tag: int, start: int, end: int) -> Value:
    if tag in _NUMERIC_APP:
        if start == end:
            raise ParseError(f"empty numeric value (tag 0x{tag:02x})")
        value = int.from_bytes(data[start:end], "big")
        # Unsigned 32/64-bit types: BER may add one leading zero byte, never more
        # value (a 9-byte Counter64 of 2**72 is an agent bug, not a counter).
        if value.bit_length() > (64 if tag == 0x46 else 32):
            raise ParseError(f"value out of range for its type (tag 0x{tag:02x}): {value}")
        return value
    if tag == _INTEGER:
        return _dec_int(data, start, end)
    if tag == _OCTETS or tag in _BYTES_APP:
        return data[start:end]
    if tag == _OID:
        return decode_oid(data[start:end])
    if tag == _NULL:
        return None
    special = _SPECIALS.get(tag)
    if special is not None:
        return special
    raise ParseError(f"unsupported value type tag 0x{tag:02x}")


class Response:
    """A decoded Response-PDU: ``varbinds`` (names decoded), or for a request whose
    names were given, ``values`` in the request's order (names checked, not decoded)."""

    __slots__ = ("error_index", "error_status", "request_id", "values", "varbinds")

    def __init__(
        self,
        request_id: int,
        error_status: int,
        error_index: int,
        varbinds: list[VarBind],
        values: list[Value] | None = None,
    ) -> None:
        self.request_id = request_id
        self.error_status = error_status
        self.error_index = error_index
        self.varbinds = varbinds
        self.values: list[Value] = [] if values is None else values


# A varbind's number value in a common form, one decode_varbinds' loop takes and
# decodes to the same int: Counter32, Gauge32 or TimeTicks of up to 4 bytes (5 with
# a leading zero), Counter64 of up to 8 (9), a non-negative INTEGER of up to 8
# bytes (so unsigned and signed read the same); its length byte and bytes captured.
_NUMBER = (
    rb"(?:[\x41\x42\x43](?=[\x01-\x04]|\x05\x00)|\x46(?=[\x01-\x08]|\x09\x00)"
    rb"|\x02(?=[\x01-\x08][\x00-\x7f]))("
    + b"|".join(b"\\x%02x.{%d}" % (n, n) for n in range(1, 10))
    + b")"
)
_VALUE_BYTES = operator.itemgetter(slice(1, None))
_PATTERN_CAP = 64
"""Compiled varbind patterns a names cache keeps (one per set of name lengths)."""


class Names:
    """A request's names as their BER encodings (tag, length, body), in request order,
    and what a response echoing them is checked with.

    ``pattern`` matches one varbind with a name of one of these lengths and a number
    in its common form: all of a VarBindList's matches (one ``findall``, in C) give
    each varbind's length, name and value bytes, checked against ``blob`` and
    ``heads`` as a whole, and that the matches cover the list with no gap. One
    pattern per set of name lengths (not per sequence: compiling a pattern costs
    ~3 ms a varbind in it). None where a name is too long for a short-form length.

    The encodings are kept as one ``blob`` and each name's length (``heads``), not
    as a bytes object per name: a 512-port switch's poll asks ~21 000 names, and
    only a response the pattern leaves to the varbind loop needs them one by one
    (:attr:`tlvs`).
    """

    __slots__ = ("blob", "heads", "pattern")

    def __init__(
        self,
        tlvs: Sequence[bytes],
        patterns: dict[tuple[int, ...], re.Pattern[bytes]] | None = None,
    ) -> None:
        self.blob = b"".join(tlvs)
        # A varbind's length less its value's length byte and value (tag, length, name, tag).
        self.heads = array("I", [len(t) + 1 for t in tlvs])
        self.pattern: re.Pattern[bytes] | None = None
        if tlvs and all(len(t) < 0x80 + 2 and t[1] == len(t) - 2 for t in tlvs):
            lengths = tuple(sorted({len(t) - 2 for t in tlvs}))
            pattern = None if patterns is None else patterns.get(lengths)
            if pattern is None:
                names = b"|".join(b"\\x%02x.{%d}" % (n, n) for n in lengths)
                text = b"\\x30([\\x00-\\x7f])(\\x06(?:" + names + b"))" + _NUMBER
                pattern = re.compile(text, re.DOTALL)
                if patterns is not None and len(patterns) < _PATTERN_CAP:
                    patterns[lengths] = pattern
            self.pattern = pattern

    @property
    def tlvs(self) -> list[bytes]:
        """Each name's encoding, in request order (made from ``blob`` on each access)."""
        blob = self.blob
        ends = accumulate(h - 1 for h in self.heads)
        return [blob[end - h + 1 : end] for h, end in zip(self.heads, ends, strict=True)]

    def __len__(self) -> int:
        return len(self.heads)


def names_of(
    oids: Sequence[Oid], patterns: dict[tuple[int, ...], re.Pattern[bytes]] | None = None
) -> Names:
    """The :class:`Names` of ``oids`` (what a GET response must echo); ``patterns``: a
    cache of compiled patterns, owned by the caller (one per session)."""
    return Names([encode_oid(o) for o in oids], patterns)


def decode_response(data: bytes, names: Callable[[int], Names | None] | None = None) -> Response:
    """Decode an SNMPv2c Response message; raise :class:`ParseError` on anything else.

    ``names``: the names of the request a request-id answers, where the caller
    knows them (a GET: RFC 3416 4.2.1 answers each name as asked, in order).
    Then each varbind's name is compared with the request's, as bytes, and only
    the values are decoded (:attr:`Response.values`); a name that differs, or
    more varbinds than names, is a :class:`ParseError`. Other names (a GETBULK's,
    at discovery) are decoded each time: a walk meets each name once, and a cache
    of them by encoding outlived its use by the ~10 minutes to the next discovery
    (~3 MiB a 512-port switch).
    """
    request_id, error_status, error_index, pos, vbl_end = _decode_header(data)
    asked = None if names is None or error_status else names(request_id)
    bodies, values = decode_varbinds(data, pos, vbl_end, asked)
    if asked is not None:
        return Response(request_id, error_status, error_index, [], values)
    decoded = list(map(decode_oid, bodies))
    return Response(request_id, error_status, error_index, list(zip(decoded, values, strict=True)))


def _decode_header(data: bytes) -> tuple[int, int, int, int, int]:
    """(request-id, error-status, error-index, VarBindList start, end) of a Response."""
    end = len(data)
    tag, pos, msg_end = _header(data, 0, end)
    if tag != _SEQUENCE:
        raise ParseError(f"not an SNMP message (outer tag 0x{tag:02x})")
    if msg_end != end:
        raise ParseError(f"{end - msg_end} trailing bytes after the message")
    tag, s, e = _header(data, pos, msg_end)
    if tag != _INTEGER:
        raise ParseError("missing version")
    version = _dec_int(data, s, e)
    if version != 1:
        raise ParseError(f"not SNMPv2c (version field {version})")
    tag, s, pos = _header(data, e, msg_end)
    if tag != _OCTETS:
        raise ParseError("missing community")
    tag, pos, pdu_end = _header(data, pos, msg_end)
    if tag != RESPONSE:
        raise ParseError(f"not a Response-PDU (tag 0x{tag:02x})")
    fields: list[int] = []
    for _ in range(3):
        tag, s, pos = _header(data, pos, pdu_end)
        if tag != _INTEGER:
            raise ParseError("malformed PDU header")
        fields.append(_dec_int(data, s, pos))
    tag, pos, vbl_end = _header(data, pos, pdu_end)
    if tag != _SEQUENCE:
        raise ParseError("missing VarBindList")
    return fields[0], fields[1], fields[2], pos, vbl_end


def decode_varbinds(
    data: bytes, pos: int, vbl_end: int, names: Names | None = None
) -> tuple[list[bytes], list[Value]]:
    """The varbinds of a VarBindList body ``data[pos:vbl_end]``: their names' encoded
    bodies and their values (with ``names``: each name checked against the
    request's, no bodies returned)."""
    if names is not None and names.pattern is not None:
        got = names.pattern.findall(data, pos, vbl_end)
        if len(got) == len(names.heads):
            lengths, asked, raw = zip(*got, strict=True)  # raw: each value's length byte and bytes
            head = b"".join(lengths)
            # The names asked, each varbind's length its parts', and the matches as long
            # as the list: they cover it with no gap, and are the loop's varbinds.
            if (
                b"".join(asked) == names.blob
                and head == bytes(map(operator.add, names.heads, map(len, raw)))
                and sum(head) + 2 * len(got) == vbl_end - pos
            ):
                return [], list(map(int.from_bytes, map(_VALUE_BYTES, raw)))
    bodies: list[bytes] = []
    values: list[Value] = []
    take_body = bodies.append
    push = values.append
    numeric = _NUMERIC_APP
    count = -1 if names is None else len(names)
    tlvs = [] if names is None else names.tlvs
    i = 0
    while pos < vbl_end:
        if i == count:
            raise ParseError(f"more varbinds in the response than the {count} asked for")
        # The common varbind inline: short-form lengths throughout, an OID and a
        # counter or gauge; the same checks and results as the general path below
        # (which everything else, malformed input included, takes).
        if pos + 4 <= vbl_end and data[pos] == _SEQUENCE and data[pos + 2] == _OID:
            n, k = data[pos + 1], data[pos + 3]
            vb_end = pos + 2 + n
            oe = pos + 4 + k
            if n < 0x80 and 0 < k < 0x80 and vb_end <= vbl_end and oe + 2 <= vb_end:
                vtag, vl = data[oe], data[oe + 1]
                ve = oe + 2 + vl
                if vtag in numeric and 0 < vl < 0x80 and ve <= vb_end:
                    if names is None:
                        take_body(data[pos + 4 : oe])
                    elif oe - pos - 2 != len(tlvs[i]) or not data.startswith(tlvs[i], pos + 2):
                        raise ParseError(f"varbind {i + 1} of the response is not the name asked")
                    value = int.from_bytes(data[oe + 2 : ve], "big")
                    # Up to 4 bytes fit every type: the range check only for longer ones.
                    if vl > 4 and value.bit_length() > (64 if vtag == 0x46 else 32):
                        msg = f"value out of range for its type (tag 0x{vtag:02x}): {value}"
                        raise ParseError(msg)
                    push(value)
                    pos = vb_end
                    i += 1
                    continue
        tag, s, vb_end = _header(data, pos, vbl_end)
        if tag != _SEQUENCE:
            raise ParseError("malformed VarBind")
        tag, os_, oe = _header(data, s, vb_end)
        if tag != _OID:
            raise ParseError("VarBind without an OID")
        if names is None:
            take_body(data[os_:oe])
        elif data[s:oe] != tlvs[i]:
            raise ParseError(f"varbind {i + 1} of the response is not the name asked")
        tag, vs, ve = _header(data, oe, vb_end)
        push(_dec_value(data, tag, vs, ve))
        pos = vb_end
        i += 1
    return bodies, values


def encode_response(
    community: bytes,
    request_id: int,
    varbinds: Sequence[tuple[Oid, int, bytes]],
    *,
    error_status: int = 0,
    error_index: int = 0,
) -> bytes:
    """A Response message; each varbind is (oid, value tag, encoded value body).

    Used by the simulated agent; kept here so encoder and decoder share one
    definition of the wire format.
    """
    vbl = b"".join(_tlv(_SEQUENCE, encode_oid(o) + _tlv(t, body)) for o, t, body in varbinds)
    head = _enc_int(request_id) + _enc_int(error_status) + _enc_int(error_index)
    pdu = _tlv(RESPONSE, head + _tlv(_SEQUENCE, vbl))
    return _tlv(_SEQUENCE, _enc_int(1) + _tlv(_OCTETS, community) + pdu)


def decode_request(data: bytes) -> tuple[bytes, int, int, int, int, list[Oid]]:
    """Decode a v2c request: (community, pdu type, request id, a, b, oids)."""
    end = len(data)
    tag, pos, msg_end = _header(data, 0, end)
    if tag != _SEQUENCE:
        raise ParseError("not an SNMP message")
    tag, s, e = _header(data, pos, msg_end)
    if tag != _INTEGER or _dec_int(data, s, e) != 1:
        raise ParseError("not SNMPv2c")
    tag, s, pos = _header(data, e, msg_end)
    if tag != _OCTETS:
        raise ParseError("missing community")
    community = data[s:pos]
    pdu_type, pos, pdu_end = _header(data, pos, msg_end)
    fields: list[int] = []
    for _ in range(3):
        tag, s, pos = _header(data, pos, pdu_end)
        if tag != _INTEGER:
            raise ParseError("malformed PDU header")
        fields.append(_dec_int(data, s, pos))
    tag, pos, vbl_end = _header(data, pos, pdu_end)
    oids: list[Oid] = []
    while pos < vbl_end:
        tag, s, vb_end = _header(data, pos, vbl_end)
        tag, os_, oe = _header(data, s, vb_end)
        if tag != _OID:
            raise ParseError("VarBind without an OID")
        oids.append(decode_oid(data[os_:oe]))
        pos = vb_end
    return community, pdu_type, fields[0], fields[1], fields[2], oids


def enc_unsigned(value: int) -> bytes:
    """Body of an unsigned application value (Counter32/64, Gauge32, TimeTicks)."""
    return value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big")


def enc_signed(value: int) -> bytes:
    """Body of an INTEGER."""
    return value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True)


def enc_oid_body(oid: Oid) -> bytes:
    """Body (no tag/length) of an OID value."""
    full = encode_oid(oid)
    _, s, _ = _header(full, 0, len(full))
    return full[s:]


def parse_oid(text: str) -> Oid:
    """``"1.3.6.1"`` or ``".1.3.6.1"`` -> (1, 3, 6, 1); ValueError on anything else."""
    parts = text.strip().lstrip(".").split(".")
    try:
        oid = tuple(int(p) for p in parts)
    except ValueError:
        msg = f"not a numeric OID: {text!r}"
        raise ValueError(msg) from None
    if len(oid) < 2 or any(p < 0 for p in oid):
        msg = f"not a numeric OID: {text!r}"
        raise ValueError(msg)
    return oid
