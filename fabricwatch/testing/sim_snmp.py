"""A simulated switch: a real SNMPv2c agent on UDP driven by a Python scenario.

Used by the tests and by ``fabricwatch demo``: :class:`SimSwitch` holds the
scenario (ports, link state, LLDP neighbours, counter *rates*), and
:class:`SimAgent` answers GET / GETNEXT / GETBULK for it on a UDP socket,
computing every counter as ``value at the last rate change + rate x time``
from the scenario's clock. It serves the tables community SONiC serves
(IF-MIB, LLDP-MIB, CISCO-PFC-EXT per-priority, CISCO-SWITCH-QOS queue
stats), so the real collector selects the ``sonic`` profile for it.

Faults for tests: ``fault = "silent"`` (no answers), ``"garbage"`` (random
bytes), ``"truncated"`` (a valid response cut short); a wrong community is
ignored, as real agents do. :meth:`SimSwitch.restart` models a reboot:
sysUpTime and every counter start again from zero.

Run standalone: ``python -m fabricwatch.testing.sim_snmp --port 1161``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from fabricwatch.collectors.switch._ber import (
    GET,
    GETBULK,
    GETNEXT,
    Oid,
    decode_request,
    enc_oid_body,
    enc_signed,
    enc_unsigned,
    encode_response,
)
from fabricwatch.errors import ParseError

PAUSE_QUANTUM_BITS = 65535 * 512

_INT, _OCTETS, _OID_T = 0x02, 0x04, 0x06
_C32, _GAUGE, _TICKS, _C64 = 0x41, 0x42, 0x43, 0x46
_END_OF_MIB = 0x82
_NO_SUCH_OBJECT = 0x80

_IFT = (1, 3, 6, 1, 2, 1, 2, 2, 1)
_IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
_PFC_PRIO = (1, 3, 6, 1, 4, 1, 9, 9, 813, 1, 2, 1)
_CSQ = (1, 3, 6, 1, 4, 1, 9, 9, 580, 1, 5, 5, 1, 4)
_LLDP_LOC = (1, 0, 8802, 1, 1, 2, 1, 3, 7, 1)
_LLDP_REM = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)

Fault = Literal["none", "silent", "garbage", "truncated"]


class RateCounter:
    """A counter driven by a rate: exact under rate changes, never goes back.

    Shared by the simulated switches (SNMP here, gNMI in ``sim_gnmi``).
    """

    __slots__ = ("rate", "t0", "v0")

    def __init__(self, now: float) -> None:
        self.v0 = 0.0
        self.t0 = now
        self.rate = 0.0

    def value(self, now: float) -> float:
        return self.v0 + self.rate * max(0.0, now - self.t0)

    def set_rate(self, rate: float, now: float) -> None:
        self.v0 = self.value(now)
        self.t0 = now
        self.rate = rate


@dataclass
class SimPort:
    """One simulated switch port and, optionally, the host LLDP sees on it."""

    if_index: int
    name: str
    speed_mbps: int = 200_000
    up: bool = True
    neighbour_name: str = ""
    neighbour_port: str = ""
    neighbour_mac: str = ""


@dataclass
class SimSwitch:
    """The scenario: ports, neighbours and counter rates, on an injectable clock.

    Counter names: ``rx_bytes``, ``tx_bytes``, ``in_discards``,
    ``out_discards``, ``in_errors``, ``out_errors``, ``pfc_rx<p>``,
    ``pfc_tx<p>`` (p = 0..7) and ``drops<q>`` (queue q = 0..7).
    """

    ports: list[SimPort]
    sys_name: str = "sim-leaf1"
    clock: Callable[[], float] = time.monotonic
    lldp_time_mark: int = 0
    lldp_port_offset: int = 0
    """lldpLocPortNum = ifIndex + offset (non-zero models Dell OS10 numbering)."""
    _start: float = field(init=False)
    _counters: dict[tuple[int, str], RateCounter] = field(init=False, default_factory=dict)
    _disc: dict[int, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._start = self.clock()

    def port(self, name_or_index: str | int) -> SimPort:
        """A port by ifName or ifIndex."""
        for p in self.ports:
            if name_or_index in (p.name, p.if_index):
                return p
        raise KeyError(name_or_index)

    def _counter(self, if_index: int, name: str) -> RateCounter:
        c = self._counters.get((if_index, name))
        if c is None:
            c = self._counters[(if_index, name)] = RateCounter(self.clock())
        return c

    def set_rate(self, port: str | int, counter: str, per_second: float) -> None:
        """Make a counter grow at ``per_second`` from now on."""
        p = self.port(port)
        self._counter(p.if_index, counter).set_rate(per_second, self.clock())

    def value(self, port: str | int, counter: str) -> int:
        """A counter's current value."""
        p = self.port(port)
        c = self._counters.get((p.if_index, counter))
        return 0 if c is None else int(c.value(self.clock()))

    def pfc_storm(
        self, port: str | int, priority: int = 3, direction: str = "rx", fraction: float = 1.0
    ) -> float:
        """Pause frames at the rate that keeps ``fraction`` of the time paused; returns it."""
        p = self.port(port)
        rate = fraction * p.speed_mbps * 1e6 / PAUSE_QUANTUM_BITS
        self.set_rate(port, f"pfc_{direction}{priority}", rate)
        return rate

    def set_up(self, port: str | int, up: bool) -> None:
        """Set a port's oper status."""
        self.port(port).up = up

    def uptime_ticks(self) -> int:
        """sysUpTime in hundredths of a second."""
        return int((self.clock() - self._start) * 100) & 0xFFFFFFFF

    def restart(self) -> None:
        """Model an agent reboot: sysUpTime and all counters restart at 0, rates kept."""
        now = self.clock()
        self._start = now
        for c in self._counters.values():
            c.v0 = 0.0
            c.t0 = now

    def clear_port_counters(self, port: str | int) -> None:
        """Zero one port's counters and stamp ifCounterDiscontinuityTime (RFC 2863)."""
        p = self.port(port)
        now = self.clock()
        for (idx, _), c in self._counters.items():
            if idx == p.if_index:
                c.v0 = 0.0
                c.t0 = now
        self._disc[p.if_index] = max(1, self.uptime_ticks())

    # -- the MIB view -----------------------------------------------------

    def build_mib(self) -> tuple[list[Oid], dict[Oid, Callable[[], tuple[int, bytes]]]]:
        """Sorted OIDs and, per OID, a function giving (tag, encoded value) now."""
        entries: dict[Oid, Callable[[], tuple[int, bytes]]] = {}

        def const(tag: int, body: bytes) -> Callable[[], tuple[int, bytes]]:
            return lambda: (tag, body)

        def counter(idx: int, name: str, tag: int) -> Callable[[], tuple[int, bytes]]:
            mask = 0xFFFFFFFF if tag == _C32 else 0xFFFFFFFFFFFFFFFF
            key = (idx, name)

            def read() -> tuple[int, bytes]:
                c = self._counters.get(key)
                v = 0 if c is None else int(c.value(self.clock()))
                return tag, enc_unsigned(v & mask)

            return read

        entries[(1, 3, 6, 1, 2, 1, 1, 1, 0)] = const(
            _OCTETS, b"SONiC Software Version: SONiC.fabricwatch-sim - HwSku: sim"
        )
        entries[(1, 3, 6, 1, 2, 1, 1, 2, 0)] = const(
            _OID_T, enc_oid_body((1, 3, 6, 1, 4, 1, 8072, 3, 2, 10))
        )
        entries[(1, 3, 6, 1, 2, 1, 1, 3, 0)] = lambda: (_TICKS, enc_unsigned(self.uptime_ticks()))
        entries[(1, 3, 6, 1, 2, 1, 1, 5, 0)] = const(_OCTETS, self.sys_name.encode())
        for p in self.ports:
            i = p.if_index
            entries[(*_IFT, 1, i)] = const(_INT, enc_signed(i))
            entries[(*_IFT, 2, i)] = const(_OCTETS, p.name.encode())
            entries[(*_IFT, 8, i)] = lambda q=p: (_INT, enc_signed(1 if q.up else 2))  # type: ignore[misc]
            for col, name in (
                (13, "in_discards"),
                (14, "in_errors"),
                (19, "out_discards"),
                (20, "out_errors"),
            ):
                entries[(*_IFT, col, i)] = counter(i, name, _C32)
            entries[(*_IFX, 1, i)] = const(_OCTETS, p.name.encode())
            entries[(*_IFX, 6, i)] = counter(i, "rx_bytes", _C64)
            entries[(*_IFX, 10, i)] = counter(i, "tx_bytes", _C64)
            entries[(*_IFX, 15, i)] = lambda q=p: (_GAUGE, enc_unsigned(q.speed_mbps))  # type: ignore[misc]
            entries[(*_IFX, 19, i)] = lambda k=i: (_TICKS, enc_unsigned(self._disc.get(k, 0)))  # type: ignore[misc]
            for prio in range(8):
                entries[(*_PFC_PRIO, 2, i, prio)] = counter(i, f"pfc_tx{prio}", _C64)
                entries[(*_PFC_PRIO, 3, i, prio)] = counter(i, f"pfc_rx{prio}", _C64)
            for q in range(8):
                # SONiC answers every stat type per group; only type 5 is drops.
                entries[(*_CSQ, i, 2, q + 1, 1)] = counter(i, f"sent{q}", _C64)
                entries[(*_CSQ, i, 2, q + 1, 5)] = counter(i, f"drops{q}", _C64)
            num = i + self.lldp_port_offset
            entries[(*_LLDP_LOC, 2, num)] = const(_INT, enc_signed(5))  # interfaceName
            entries[(*_LLDP_LOC, 3, num)] = const(_OCTETS, p.name.encode())
            entries[(*_LLDP_LOC, 4, num)] = const(_OCTETS, p.name.encode())
            if p.neighbour_name or p.neighbour_mac:
                rem = (self.lldp_time_mark, num, 1)
                mac = bytes.fromhex(p.neighbour_mac.replace(":", "")) if p.neighbour_mac else b""
                entries[(*_LLDP_REM, 4, *rem)] = const(_INT, enc_signed(4))
                entries[(*_LLDP_REM, 5, *rem)] = const(_OCTETS, mac)
                entries[(*_LLDP_REM, 6, *rem)] = const(
                    _INT, enc_signed(5 if p.neighbour_port else 3)
                )
                entries[(*_LLDP_REM, 7, *rem)] = const(
                    _OCTETS, p.neighbour_port.encode() if p.neighbour_port else mac
                )
                entries[(*_LLDP_REM, 9, *rem)] = const(_OCTETS, p.neighbour_name.encode())
        oids = sorted(entries)
        return oids, entries


class SimAgent(asyncio.DatagramProtocol):
    """An SNMPv2c agent for a :class:`SimSwitch` on a UDP socket."""

    def __init__(
        self, switch: SimSwitch, *, community: str = "public", max_varbinds: int = 64
    ) -> None:
        self.switch = switch
        self.community = community.encode()
        self.max_varbinds = max_varbinds
        self.fault: Fault = "none"
        self.requests = 0
        self._transport: asyncio.DatagramTransport | None = None
        self._oids: list[Oid] = []
        self._values: dict[Oid, Callable[[], tuple[int, bytes]]] = {}
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the MIB view after adding or removing ports / neighbours."""
        self._oids, self._values = self.switch.build_mib()

    @property
    def port(self) -> int:
        """The UDP port the agent listens on."""
        assert self._transport is not None
        return int(self._transport.get_extra_info("sockname")[1])

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> SimAgent:
        """Bind and start answering; port 0 picks a free one."""
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))
        return self

    def close(self) -> None:
        """Stop answering and release the socket."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self.fault == "silent" or self._transport is None:
            return
        try:
            community, pdu, rid, a, b, oids = decode_request(data)
        except ParseError:
            return
        if community != self.community:
            return  # what real agents do: no answer, the manager times out
        self.requests += 1
        if self.fault == "garbage":
            self._transport.sendto(os.urandom(48), addr)
            return
        reply = encode_response(community, rid, self._answer(pdu, a, b, oids))
        if self.fault == "truncated":
            reply = reply[: len(reply) // 2]
        self._transport.sendto(reply, addr)

    def _lookup(self, oid: Oid) -> tuple[int, bytes]:
        fn = self._values.get(oid)
        return fn() if fn is not None else (_NO_SUCH_OBJECT, b"")

    def _next(self, oid: Oid) -> tuple[Oid, int, bytes]:
        pos = bisect.bisect_right(self._oids, oid)
        if pos >= len(self._oids):
            return oid, _END_OF_MIB, b""
        nxt = self._oids[pos]
        return (nxt, *self._values[nxt]())

    def _answer(
        self, pdu: int, a: int, b: int, oids: Iterable[Oid]
    ) -> list[tuple[Oid, int, bytes]]:
        if pdu == GET:
            return [(o, *self._lookup(o)) for o in oids]
        if pdu == GETNEXT:
            return [self._next(o) for o in oids]
        if pdu != GETBULK:
            return []
        cols = list(oids)
        out: list[tuple[Oid, int, bytes]] = []
        for o in cols[:a]:
            out.append(self._next(o))
        rest = cols[a:]
        cursor = list(rest)
        for _ in range(max(0, b)):
            if not rest or len(out) + len(rest) > self.max_varbinds:
                break
            for k, o in enumerate(cursor):
                vb = self._next(o)
                cursor[k] = vb[0]
                out.append(vb)
        return out


def demo_switch(
    ports: int = 4, *, node: str = "gpu-node-1", clock: Callable[[], float] = time.monotonic
) -> SimSwitch:
    """A leaf with ``ports`` 200G ports, the first two facing ``node``, light traffic."""
    sw = SimSwitch(
        [
            SimPort(
                i * 4 + 1,
                f"Ethernet{i * 4}",
                neighbour_name=node if i < 2 else f"other-node-{i}",
                neighbour_port=f"eth{i}",
            )
            for i in range(ports)
        ],
        clock=clock,
    )
    for p in sw.ports:
        sw.set_rate(p.if_index, "rx_bytes", 2.5e9)
        sw.set_rate(p.if_index, "tx_bytes", 2.4e9)
    return sw


async def _serve(args: argparse.Namespace) -> None:
    sw = demo_switch(args.ports, node=args.node)
    agent = await SimAgent(sw, community=args.community).start(args.host, args.port)
    print(f"simulated switch on {args.host}:{agent.port} community={args.community}")  # noqa: T201
    try:
        if args.storm_after is not None:
            await asyncio.sleep(args.storm_after)
            sw.pfc_storm(sw.ports[0].if_index, priority=3)
            print(f"PFC storm on {sw.ports[0].name} priority 3")  # noqa: T201
        await asyncio.Event().wait()
    finally:
        agent.close()


def main(argv: list[str] | None = None) -> None:
    """Serve :func:`demo_switch` until interrupted."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1161)
    ap.add_argument("--ports", type=int, default=4)
    ap.add_argument("--node", default="gpu-node-1")
    ap.add_argument("--community", default="public")
    ap.add_argument("--storm-after", type=float, default=None)
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
