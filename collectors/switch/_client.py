"""SNMP sessions: a native SNMPv2c client and a pysnmp 7 (asyncio) client.

Both expose the same two primitives, :meth:`Session.get` and
:meth:`Session.bulk`; :func:`walk` builds multi-column GETBULK table walks on
top of them. Every session is created once per target and reused for every
poll: no per-poll engine, transport or request-object churn.

* :class:`NativeV2cSession` speaks SNMPv2c over one connected UDP socket per
  target with the codec in :mod:`._ber`. It is the default for v2c because it
  meets the CPU budgets (``bench/snmp_walk.py``), and it can tell a malformed
  datagram from a silent agent.
* :class:`PysnmpSession` wraps ``pysnmp.hlapi.v3arch.asyncio`` with
  ``lookupMib=False`` (raw OIDs, no MIB compilation). It is used for SNMPv3
  (USM authPriv: SHA/SHA-2 and AES) and optionally for v2c.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fabricwatch.errors import CollectorError, ParseError

from ._ber import (
    GET,
    GETBULK,
    REQUEST_IDS,
    EncodedOids,
    Names,
    Oid,
    Response,
    Special,
    Value,
    VarBind,
    decode_response,
    encode_oid,
    request_template,
    varbind_list,
)

ERROR_STATUS = {
    1: "tooBig",
    2: "noSuchName",
    3: "badValue",
    4: "readOnly",
    5: "genErr",
    6: "noAccess",
    16: "authorizationError",
}


class SnmpError(CollectorError):
    """An SNMP request failed. ``reason`` is a short label for metrics."""

    reason = "snmp_error"


class SnmpTimeout(SnmpError):
    """No (valid) response within timeout x (retries + 1)."""

    reason = "timeout"


class SnmpAuthError(SnmpError):
    """The agent rejected our credentials (SNMPv3 USM reports)."""

    reason = "auth"


class SnmpMalformed(SnmpError):
    """Only undecodable datagrams came back."""

    reason = "malformed"


class SnmpTooBig(SnmpError):
    """The agent answered tooBig: ask for fewer varbinds."""

    reason = "too_big"


@dataclass(slots=True)
class GetSize:
    """How many varbinds one GET asks of an agent, learned from its answers.

    Agents cap their response datagrams (net-snmp's ``sendMessageMaxSize``,
    Cisco's ``snmp-server packetsize``, 1.5-64 KB): a GET whose response would
    not fit is answered ``tooBig``, or not at all when even the error response
    (the request's varbinds) does not fit. Starts at ``varbinds``; doubles (up
    to ``ceiling``) while the agent answers GETs of that size, and once refused
    searches between the largest size answered and the smallest refused. Kept
    per session, across polls.
    """

    varbinds: int = 40
    ceiling: int = 256
    good: int = 0  # the largest GET the agent answered
    bad: int = 0  # the smallest it refused or did not answer (0: none yet)
    start: int = field(init=False)

    def __post_init__(self) -> None:
        self.varbinds = max(1, min(self.varbinds, self.ceiling))
        self.start = self.varbinds

    def probing(self, n: int) -> bool:
        """Whether a GET of ``n`` varbinds is larger than any the agent has answered
        (and than the first size): no answer to it may mean it is too large."""
        return n > max(self.good, self.start)

    def answered(self, n: int) -> None:
        """The agent answered a GET of ``n`` varbinds."""
        self.good = max(self.good, n)
        if n < self.varbinds:
            return  # a poll's last, shorter GET tells nothing more
        grown = 2 * n if not self.bad else (self.good + self.bad) // 2
        self.varbinds = max(self.varbinds, min(self.ceiling, grown))

    def refused(self, n: int) -> None:
        """A GET of ``n`` varbinds was answered tooBig (or, probing, not at all)."""
        self.bad = min(self.bad or n, n)
        if self.good >= self.bad:
            self.good = 0  # what it answered before no longer holds (larger values)
        self.varbinds = max(1, (self.good + self.bad) // 2)


@dataclass(slots=True)
class SessionStats:
    """Running counts of one session (exported as per-target health)."""

    requests: int = 0
    timeouts: int = 0
    malformed: int = 0
    last_malformed: str = ""


class Session(Protocol):
    """What the collector needs from an SNMP client."""

    stats: SessionStats

    async def get(self, oids: Sequence[Oid]) -> list[VarBind]:
        """GET ``oids`` (chunked by the session); one varbind per OID, in order."""
        ...

    async def get_values(self, oids: Sequence[Oid]) -> list[Value]:
        """:meth:`get`'s values alone (each the value of the OID at its position)."""
        ...

    async def bulk(self, oids: Sequence[Oid], max_repetitions: int) -> list[VarBind]:
        """One GETBULK with non-repeaters 0; the reply row-major, as the agent sent it."""
        ...

    async def close(self) -> None:
        """Release the socket / engine. Must not raise."""
        ...


class _Channel(asyncio.DatagramProtocol):
    """Matches responses to requests by request-id; counts undecodable datagrams."""

    def __init__(self, stats: SessionStats) -> None:
        self.stats = stats
        self.pending: dict[int, asyncio.Future[Any]] = {}
        # The names of the pending GETs by request-id: their responses' names are
        # checked against these, not decoded (decode_response).
        self.names: dict[int, Names] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.error: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        try:
            resp = decode_response(data, self.names.get)
        except ParseError as exc:
            self.stats.malformed += 1
            self.stats.last_malformed = str(exc)
            return
        fut = self.pending.get(resp.request_id)
        if fut is not None and not fut.done():
            fut.set_result(resp)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable arrives here on a connected socket: the agent
        # is down. Remember it; the request still ends by timeout.
        self.error = exc


_RID_LOW = REQUEST_IDS[0]
_RID_SPAN = REQUEST_IDS[1] - REQUEST_IDS[0] + 1
_Prepared = tuple[bytes, bytes, "Names"]
_IMMUTABLE = (tuple, EncodedOids)
"""Sequences of OIDs a session may keep requests of, by identity."""
"""A request: its message before and after the request-id, and its names' encodings."""


def _expire(waiter: asyncio.Future[Any]) -> None:
    """A try's timeout: wake its request with no response."""
    if not waiter.done():
        waiter.set_result(None)


class NativeV2cSession:
    """SNMPv2c over a connected UDP socket, with the :mod:`._ber` codec."""

    def __init__(
        self,
        host: str,
        port: int,
        community: str,
        *,
        timeout: float = 1.0,
        retries: int = 1,
        max_oids_per_request: int = 256,
    ) -> None:
        self._addr = (host, port)
        self._community = community.encode()
        self._timeout = timeout
        self._retries = retries
        self.size = GetSize(ceiling=max_oids_per_request)
        self.stats = SessionStats()
        self._channel: _Channel | None = None
        self._ids = itertools.count(random.randrange(1, 1 << 30))  # noqa: S311 - not security
        self._patterns: dict[tuple[int, ...], re.Pattern[bytes]] = {}  # see Names
        # The last get_values() OIDs (immutable: a tuple or EncodedOids), the GET size and their
        # requests: a poll GETs the same tuple every cycle, found by identity, not
        # by hashing it.
        self._last_get: tuple[Sequence[Oid], int, list[_Prepared]] | None = None

    async def _ensure(self) -> _Channel:
        if self._channel is None or self._channel.transport is None:
            loop = asyncio.get_running_loop()
            stats = self.stats
            _, proto = await loop.create_datagram_endpoint(
                lambda: _Channel(stats), remote_addr=self._addr
            )
            self._channel = proto
        return self._channel

    def _prepare(self, pdu: int, a: int, b: int, tlvs: Sequence[bytes]) -> _Prepared:
        """A request for the names encoded as ``tlvs``: its message around its
        request-id, and its names."""
        head, tail = request_template(self._community, pdu, a, b, varbind_list(tlvs))
        return head, tail, Names(tlvs, self._patterns)

    async def _request(
        self, request: _Prepared, *, by_name: bool = False, tries: int = 0
    ) -> Response:
        """One request, retried (``tries``: sent that many times instead); ``by_name``:
        the response's names are checked against the request's instead of decoded
        (its :attr:`Response.values` filled)."""
        chan = await self._ensure()
        transport = chan.transport
        assert transport is not None
        head, tail, names = request
        names_by_id = chan.names
        loop = asyncio.get_running_loop()
        ids: list[int] = []
        malformed_before = self.stats.malformed
        self.stats.requests += 1
        pending = chan.pending
        resp: Response | None = None
        waiter: asyncio.Future[Any] | None = None
        timer: asyncio.TimerHandle | None = None
        # One future per try, which the answer to any try so far completes (a late
        # answer to an earlier try still counts), and a timer that completes it
        # with None: two loop iterations a request, where wait_for(shield(...))
        # took four and three more futures (switch mode sends ~420 a poll).
        try:
            for _ in range(tries or self._retries + 1):
                rid = _RID_LOW + next(self._ids) % _RID_SPAN
                ids.append(rid)
                waiter = loop.create_future()
                for r in ids:
                    pending[r] = waiter
                if by_name:
                    names_by_id[rid] = names
                transport.sendto(head + rid.to_bytes(4, "big") + tail)
                timer = loop.call_later(self._timeout, _expire, waiter)
                resp = await waiter
                timer.cancel()
                if resp is not None:
                    break
            else:
                self.stats.timeouts += 1
                if self.stats.malformed > malformed_before:
                    msg = f"only malformed responses: {self.stats.last_malformed}"
                    raise SnmpMalformed(msg)
                msg = (
                    f"no response from {self._addr[0]}:{self._addr[1]} after "
                    f"{tries or self._retries + 1} tries of {self._timeout}s (agent down, "
                    "or wrong community / ACL)"
                )
                raise SnmpTimeout(msg)
        finally:
            for rid in ids:
                pending.pop(rid, None)
                names_by_id.pop(rid, None)
            if timer is not None:
                timer.cancel()
            if waiter is not None and not waiter.done():
                waiter.cancel()
        assert resp is not None
        if resp.error_status:
            name = ERROR_STATUS.get(resp.error_status, str(resp.error_status))
            if resp.error_status == 1:
                raise SnmpTooBig("agent answered tooBig")
            msg = f"agent error-status {name} at varbind {resp.error_index}"
            raise SnmpError(msg)
        return resp

    async def get(self, oids: Sequence[Oid]) -> list[VarBind]:
        """GET in chunks sized to the agent (see :class:`GetSize`)."""
        return list(zip(oids, await self.get_values(oids), strict=True))

    async def get_values(self, oids: Sequence[Oid]) -> list[Value]:
        """GET in chunks sized to the agent (see :class:`GetSize`); the responses' names
        are compared with the request's as bytes, only their values decoded.

        A chunk the agent refuses (tooBig; no answer to a chunk larger than it has
        answered before, sent once) is asked again in smaller chunks, in this poll.
        """
        size = self.size
        out: list[Value] = []
        while len(out) < len(oids):
            for request in self._get_requests(oids, len(out)):
                n = len(request[2])
                probe = size.probing(n)
                try:
                    resp = await self._request(request, by_name=True, tries=1 if probe else 0)
                except SnmpTooBig:
                    if n == 1:
                        raise
                    size.refused(n)  # the rest, this one included, in the smaller size
                except SnmpTimeout:
                    if not probe:
                        raise
                    size.refused(n)
                else:
                    if len(resp.values) != n:
                        msg = f"GET of {n} OIDs answered with {len(resp.values)} varbinds"
                        raise SnmpError(msg)
                    out.extend(resp.values)
                    before = size.varbinds
                    size.answered(n)
                    if size.varbinds == before:
                        continue
                    # The rest in the larger size.
                break
        return out

    def _get_requests(self, oids: Sequence[Oid], start: int) -> list[_Prepared]:
        """The GETs of ``oids[start:]`` in chunks of the current size."""
        n = self.size.varbinds
        last = self._last_get
        if not start and last is not None and last[0] is oids and last[1] == n:
            return last[2]
        if type(oids) is EncodedOids:
            tlvs = oids.tlvs(start, len(oids))
        else:
            tlvs = [encode_oid(o) for o in oids[start:]]
        requests = [self._prepare(GET, 0, 0, tlvs[i : i + n]) for i in range(0, len(tlvs), n)]
        if not start and type(oids) in _IMMUTABLE:
            self._last_get = (oids, n, requests)
        return requests

    async def bulk(self, oids: Sequence[Oid], max_repetitions: int) -> list[VarBind]:
        """One GETBULK request."""
        # Walks run at discovery, each request from new cursors: nothing to keep.
        request = self._prepare(GETBULK, 0, max_repetitions, [encode_oid(o) for o in oids])
        return (await self._request(request)).varbinds

    async def close(self) -> None:
        """Close the socket."""
        if self._channel is not None and self._channel.transport is not None:
            self._channel.transport.close()
        self._channel = None


@dataclass(frozen=True, slots=True)
class V3Credentials:
    """SNMPv3 USM credentials (keys already read from their files)."""

    user: str
    auth_protocol: str = "sha"
    auth_key: str | None = None
    priv_protocol: str = "aes"
    priv_key: str | None = None
    context: str = ""


_AUTH = {
    "none": "usmNoAuthProtocol",
    "md5": "usmHMACMD5AuthProtocol",
    "sha": "usmHMACSHAAuthProtocol",
    "sha224": "usmHMAC128SHA224AuthProtocol",
    "sha256": "usmHMAC192SHA256AuthProtocol",
    "sha384": "usmHMAC256SHA384AuthProtocol",
    "sha512": "usmHMAC384SHA512AuthProtocol",
}
_PRIV = {
    "none": "usmNoPrivProtocol",
    "des": "usmDESPrivProtocol",
    "aes": "usmAesCfb128Protocol",
    # Cisco / net-snmp key extension ("Reeder"), what switches implement.
    "aes192": "usmAesCfb192Protocol",
    "aes256": "usmAesCfb256Protocol",
}
AUTH_PROTOCOLS = tuple(_AUTH)
PRIV_PROTOCOLS = tuple(_PRIV)

_AUTH_HINTS = ("digest", "user", "decrypt", "authentic", "security level", "time window")


class PysnmpSession:
    """pysnmp 7 asyncio client; one engine, auth and transport object per target, reused."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        community: str | None = None,
        v3: V3Credentials | None = None,
        timeout: float = 1.0,
        retries: int = 1,
        max_oids_per_request: int = 256,
    ) -> None:
        from pysnmp.hlapi.v3arch import asyncio as hl

        self._hl = hl
        self._addr = (host, port)
        self._timeout = timeout
        self._retries = retries
        self.size = GetSize(ceiling=max_oids_per_request)
        self.stats = SessionStats()
        self._engine: Any = None
        self._target: Any = None
        if v3 is not None:
            self._auth: Any = hl.UsmUserData(
                v3.user,
                authKey=v3.auth_key,
                privKey=v3.priv_key,
                authProtocol=getattr(hl, _AUTH[v3.auth_protocol]),
                privProtocol=getattr(hl, _PRIV[v3.priv_protocol]),
            )
            self._context: Any = hl.ContextData(contextName=v3.context.encode())
        else:
            self._auth = hl.CommunityData(community or "public", mpModel=1)  # noqa: S508
            self._context = hl.ContextData()
        from pyasn1.type import univ
        from pysnmp.proto import rfc1905

        # Check the pyasn1 bases: values may arrive as univ types, not rfc1902 ones.
        self._numeric = univ.Integer
        self._octets = univ.OctetString
        self._specials = (
            (rfc1905.NoSuchObject, Special.NO_SUCH_OBJECT),
            (rfc1905.NoSuchInstance, Special.NO_SUCH_INSTANCE),
            (rfc1905.EndOfMibView, Special.END_OF_MIB_VIEW),
        )
        self._oid_type = univ.ObjectIdentifier

    async def _ensure(self) -> None:
        if self._engine is None:
            hl = self._hl
            self._engine = hl.SnmpEngine()
            self._target = await hl.UdpTransportTarget.create(
                self._addr, timeout=self._timeout, retries=self._retries
            )

    def _value(self, v: Any) -> Value:
        for cls, special in self._specials:
            if isinstance(v, cls):
                return special
        if isinstance(v, self._numeric):
            return int(v)
        if isinstance(v, self._octets):
            return bytes(v.asOctets())
        if isinstance(v, self._oid_type):
            return tuple(v)
        return None

    def _check(self, err_ind: Any, err_stat: Any, err_idx: Any) -> None:
        if err_ind:
            text = str(err_ind)
            if type(err_ind).__name__ == "RequestTimedOut" or "timeout" in text.lower():
                self.stats.timeouts += 1
                msg = f"no response from {self._addr[0]}:{self._addr[1]}: {text}"
                raise SnmpTimeout(msg)
            if any(h in text.lower() for h in _AUTH_HINTS):
                msg = f"SNMPv3 authentication failed: {text}"
                raise SnmpAuthError(msg)
            raise SnmpError(text)
        if err_stat:
            code = int(err_stat)
            if code == 1:
                raise SnmpTooBig("agent answered tooBig")
            msg = f"agent error-status {ERROR_STATUS.get(code, code)} at varbind {int(err_idx)}"
            raise SnmpError(msg)

    async def get(self, oids: Sequence[Oid]) -> list[VarBind]:
        """GET in chunks sized to the agent (see :class:`GetSize` and
        :meth:`NativeV2cSession.get_values`)."""
        await self._ensure()
        hl = self._hl
        size = self.size
        out: list[VarBind] = []
        while len(out) < len(oids):
            n = size.varbinds
            chunk = oids[len(out) : len(out) + n]
            probe = size.probing(len(chunk))
            self.stats.requests += 1
            err_ind, err_stat, err_idx, vbs = await hl.get_cmd(
                self._engine,
                self._auth,
                self._target,
                self._context,
                *(hl.ObjectType(hl.ObjectIdentity(o)) for o in chunk),
                lookupMib=False,
            )
            try:
                self._check(err_ind, err_stat, err_idx)
            except SnmpTooBig:
                if len(chunk) == 1:
                    raise
                size.refused(len(chunk))
                continue
            except SnmpTimeout:
                if not probe:
                    raise
                size.refused(len(chunk))
                continue
            out.extend((tuple(name), self._value(val)) for name, val in vbs)
            size.answered(len(chunk))
        return out

    async def get_values(self, oids: Sequence[Oid]) -> list[Value]:
        """:meth:`get`'s values."""
        return [v for _, v in await self.get(oids)]

    async def bulk(self, oids: Sequence[Oid], max_repetitions: int) -> list[VarBind]:
        """One GETBULK request."""
        await self._ensure()
        hl = self._hl
        self.stats.requests += 1
        err_ind, err_stat, err_idx, vbs = await hl.bulk_cmd(
            self._engine,
            self._auth,
            self._target,
            self._context,
            0,
            max_repetitions,
            *(hl.ObjectType(hl.ObjectIdentity(o)) for o in oids),
            lookupMib=False,
        )
        self._check(err_ind, err_stat, err_idx)
        return [(tuple(name), self._value(val)) for name, val in vbs]

    async def close(self) -> None:
        """Close the engine's dispatcher."""
        if self._engine is not None:
            with contextlib.suppress(Exception):  # close must not raise
                self._engine.close_dispatcher()
        self._engine = None


@dataclass(slots=True)
class BulkSize:
    """How many varbinds one GETBULK asks of an agent, learned from its replies.

    Starts at ``varbinds``; doubles (up to ``ceiling``) while the agent answers
    requests of that size in full; drops to what the agent answered when it cut
    a reply short (agents fit GETBULK replies to their message size), and halves
    on ``tooBig`` or a timeout. Kept per target, across polls.
    """

    varbinds: int = 64
    ceiling: int = 256
    settled: bool = False  # the agent has shown its size: grow no more

    def answered(self, asked: int, got: int, *, full: bool = True, row: int = 1) -> None:
        """A reply of ``got`` varbinds to a request for ``asked`` in rows of ``row``;
        ``full``: the request was as large as :attr:`varbinds` allowed (a smaller one
        tells nothing)."""
        if 0 < got < asked:
            # Agents cut at a whole row: their limit is short of one more row.
            self.varbinds = got + row - 1
            self.settled = True
        elif full and not self.settled:
            self.varbinds = min(self.ceiling, self.varbinds * 2)

    def shrink(self) -> None:
        """The agent refused (tooBig) or did not answer a request of this size."""
        self.varbinds = max(1, self.varbinds // 2)
        self.settled = True


async def walk(
    session: Session,
    columns: Sequence[Oid],
    *,
    max_repetitions: int = 25,
    max_varbinds: int = 64,
    max_requests: int = 10_000,
    size: BulkSize | None = None,
) -> dict[Oid, list[VarBind]]:
    """Walk table columns with multi-column GETBULK; rows per column, in OID order.

    Replies are row-major: varbind ``i`` belongs to the ``i % n``-th column
    of the request. A column ends when it leaves its prefix, hits an
    exception value, or stops increasing (an agent bug that would otherwise
    loop forever). ``tooBig`` halves the repetitions. Bounded by
    ``max_requests``. With ``size`` the varbinds per request follow what the
    agent answers (see :class:`BulkSize`) instead of ``max_varbinds``.
    """
    result: dict[Oid, list[VarBind]] = {c: [] for c in columns}
    cursor: dict[Oid, Oid] = {c: c for c in columns}
    active = list(dict.fromkeys(columns))
    reps_cap = max(1, max_repetitions)
    requests = 0
    while active:
        if size is not None:
            max_varbinds = size.varbinds
        batch = active[: max(1, max_varbinds)]
        reps = max(1, min(reps_cap, max_varbinds // len(batch)))
        requests += 1
        if requests > max_requests:
            msg = f"walk did not finish within {max_requests} requests"
            raise SnmpError(msg)
        try:
            vbs = await session.bulk([cursor[c] for c in batch], reps)
        except SnmpTooBig:
            if reps_cap == 1 and len(batch) == 1:
                raise
            reps_cap = max(1, reps // 2)
            if reps == 1:
                max_varbinds = max(1, len(batch) // 2)
            if size is not None:
                size.shrink()
            continue
        except SnmpTimeout:
            if size is not None and size.varbinds > len(batch):
                size.shrink()  # a reply too large for the path (fragments lost)?
            raise
        if size is not None:
            asked = reps * len(batch)
            full = asked + len(batch) > size.varbinds
            size.answered(asked, len(vbs), full=full, row=len(batch))
        if not vbs:
            msg = "GETBULK answered with no varbinds"
            raise SnmpError(msg)
        done: set[Oid] = set()
        progressed = False
        for j, col in enumerate(batch):
            progressed |= take_rows(col, vbs[j :: len(batch)], result[col], cursor, done)
        if not done and not progressed:
            msg = "GETBULK reply made no progress (agent answers fewer varbinds than columns)"
            raise SnmpError(msg)
        # Columns absent from a truncated reply simply continue from their cursor.
        active = [c for c in active if c not in done]
    return result


def take_rows(
    col: Oid, vbs: list[VarBind], rows: list[VarBind], cursor: dict[Oid, Oid], done: set[Oid]
) -> bool:
    """Append column ``col``'s rows of one reply (``vbs``: every n-th varbind, in C) to
    ``rows`` until the column ends (added to ``done``); whether any row was new."""
    if not vbs:
        return False
    plen = len(col)
    cur = cursor[col]
    # The common reply checked whole, in C: every row inside the column and after
    # the cursor (the first after it, the last in the column, each after the one
    # before: the column's OIDs are one contiguous range), no exception value.
    # Then every row is taken, as the loop below would take them.
    oids = list(map(_first, vbs))
    last = oids[-1]
    if (
        oids[0] > cur
        and len(last) > plen
        and last[:plen] == col
        and all(map(operator.lt, oids, oids[1:]))
        and Special not in set(map(type, map(_second, vbs)))
    ):
        rows.extend(vbs)
        cursor[col] = last
        return True
    return take_rows_each(col, vbs, rows, cursor, done)


def take_rows_each(
    col: Oid, vbs: list[VarBind], rows: list[VarBind], cursor: dict[Oid, Oid], done: set[Oid]
) -> bool:
    """:func:`take_rows` varbind by varbind (any reply: the end of a column, exception
    values, an agent that goes backwards)."""
    plen = len(col)
    cur = cursor[col]
    before = len(rows)
    for oid, value in vbs:
        if isinstance(value, Special) or oid[:plen] != col or len(oid) == plen or oid <= cur:
            done.add(col)
            break
        rows.append((oid, value))
        cur = oid
    if len(rows) == before:
        return False
    cursor[col] = cur
    return True


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
