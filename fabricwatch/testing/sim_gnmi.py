"""A simulated gNMI target: a real ``grpc.aio`` server driven by a Python scenario.

Used by the tests, the benchmark and ``fabricwatch demo``. :class:`SimTarget`
holds the scenario (ports, queues, link state, LLDP neighbours, counter
*rates* integrated on an injectable clock, boot time); :class:`SimGnmiServer`
serves it over gRPC (TLS or plain text, optional username/password
metadata) implementing ``Capabilities`` and ``Subscribe`` (STREAM: SAMPLE and
ON_CHANGE) in one of two path layouts:

- ``openconfig``: typed (PROTO) leaves under ``/interfaces``, ``/qos``,
  ``/lldp`` and ``/system``, one notification per container;
- ``sonic``: SONiC telemetry's DB paths (``COUNTERS_DB`` ``COUNTERS/Ethernet*``
  and ``COUNTERS/Ethernet*/Queues``, ``APPL_DB`` ``PORT_TABLE`` and
  ``LLDP_ENTRY_TABLE``) with JSON values whose numbers are strings.

Faults for tests: :meth:`SimGnmiServer.restart` (streams cut, every counter
and the boot time restart), ``stalled`` (streams stay open, nothing sent),
``flood`` (each sample sent that many times back to back), ``inject``
(extra raw notifications sent with every sample: malformed values, unknown
paths).

Run standalone: ``python -m fabricwatch.testing.sim_gnmi --port 50051 --insecure``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
import grpc.aio

from fabricwatch.collectors.gnmi._proto import make_path, path_text, pb, pb_grpc, split_path
from fabricwatch.testing.sim_snmp import PAUSE_QUANTUM_BITS, RateCounter, SimPort

Layout = Literal["openconfig", "sonic"]
Value = int | str


@dataclass
class SimTarget:
    """The scenario of one switch, on an injectable clock.

    Counter names per port: ``rx_bytes``, ``tx_bytes``, ``in_discards``,
    ``out_discards``, ``in_errors``, ``out_errors``, ``pause_rx``,
    ``pause_tx`` (802.3x), ``pfc_rx<p>``, ``pfc_tx<p>`` (frames),
    ``pfc_rx_us<p>``, ``pfc_tx_us<p>`` (microseconds paused; SONiC layout
    only), and per queue ``txq<q>``, ``drops<q>``, ``ecn<q>``,
    ``ecn_bytes<q>``.
    """

    ports: list[SimPort]
    layout: Layout = "openconfig"
    queues: int = 8
    clock: Callable[[], float] = time.monotonic
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())
    """Target wall time = clock() + wall_offset (notification timestamps, boot time)."""
    pfc_durations: bool = True
    """Serve SAI PFC pause-duration counters (SONiC with PFC watchdog flex counters)."""
    stalled: bool = False
    flood: int = 1
    inject: list[Any] = field(default_factory=list)
    boot_time_ns: int = 0
    version: int = 0
    """Bumped on every ON_CHANGE-relevant change (oper status, LLDP, restart)."""
    _counters: dict[tuple[str, str], RateCounter] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.boot_time_ns = self.stamp_ns()

    def stamp_ns(self) -> int:
        """Target time now in ns since the epoch."""
        return int((self.clock() + self.wall_offset) * 1e9)

    def port(self, name: str) -> SimPort:
        """A port by name."""
        for p in self.ports:
            if p.name == name:
                return p
        raise KeyError(name)

    def _counter(self, port: str, name: str) -> RateCounter:
        c = self._counters.get((port, name))
        if c is None:
            c = self._counters[(port, name)] = RateCounter(self.clock())
        return c

    def set_rate(self, port: str, counter: str, per_second: float) -> None:
        """Make a counter grow at ``per_second`` from now on."""
        self.port(port)
        self._counter(port, counter).set_rate(per_second, self.clock())

    def value(self, port: str, counter: str) -> int:
        """A counter's current value."""
        c = self._counters.get((port, counter))
        return 0 if c is None else int(c.value(self.clock()))

    def pfc_storm(
        self, port: str, priority: int = 3, direction: str = "rx", fraction: float = 1.0
    ) -> float:
        """Pause ``fraction`` of the time: frames at the matching rate and, where served,
        the duration counter at ``fraction`` s/s. Returns the frame rate."""
        p = self.port(port)
        rate = fraction * p.speed_mbps * 1e6 / PAUSE_QUANTUM_BITS
        self.set_rate(port, f"pfc_{direction}{priority}", rate)
        self.set_rate(port, f"pfc_{direction}_us{priority}", fraction * 1e6)
        return rate

    def ecn_surge(self, port: str, queue: int, per_second: float) -> None:
        """ECN marks on one egress queue at ``per_second`` (and ~1 KiB per marked packet)."""
        self.set_rate(port, f"ecn{queue}", per_second)
        self.set_rate(port, f"ecn_bytes{queue}", per_second * 1024)

    def set_up(self, port: str, up: bool) -> None:
        """Set a port's oper status (streamed ON_CHANGE)."""
        self.port(port).up = up
        self.version += 1

    def restart(self) -> None:
        """Model a reboot: every counter restarts at 0 (rates kept), new boot time."""
        now = self.clock()
        for c in self._counters.values():
            c.v0 = 0.0
            c.t0 = now
        self.boot_time_ns = self.stamp_ns()
        self.version += 1

    # -- the data model -----------------------------------------------------

    def containers(self) -> list[tuple[str, dict[str, Value]]]:
        """OpenConfig layout: (container path, leaves) with current values."""
        v = self.value
        out: list[tuple[str, dict[str, Value]]] = []
        speed = {
            100_000: "SPEED_100GB",
            200_000: "SPEED_200GB",
            400_000: "SPEED_400GB",
            800_000: "SPEED_800GB",
        }
        for p in self.ports:
            n = p.name
            base = f"/interfaces/interface[name={n}]"
            out.append((f"{base}/state", {"oper-status": "UP" if p.up else "DOWN"}))
            out.append(
                (
                    f"{base}/state/counters",
                    {
                        "in-octets": v(n, "rx_bytes"),
                        "out-octets": v(n, "tx_bytes"),
                        "in-discards": v(n, "in_discards"),
                        "out-discards": v(n, "out_discards"),
                        "in-errors": v(n, "in_errors"),
                        "out-errors": v(n, "out_errors"),
                    },
                )
            )
            sp = speed.get(p.speed_mbps, f"SPEED_{p.speed_mbps // 1000}GB")
            out.append((f"{base}/ethernet/state", {"port-speed": f"openconfig-if-ethernet:{sp}"}))
            out.append(
                (
                    f"{base}/ethernet/state/counters",
                    {
                        "in-mac-pause-frames": v(n, "pause_rx"),
                        "out-mac-pause-frames": v(n, "pause_tx"),
                    },
                )
            )
            qbase = f"/qos/interfaces/interface[interface-id={n}]/output/queues"
            for q in range(self.queues):
                out.append(
                    (
                        f"{qbase}/queue[name={q}]/state",
                        {
                            "transmit-pkts": v(n, f"txq{q}"),
                            "dropped-pkts": v(n, f"drops{q}"),
                            "ecn-marked-pkts": v(n, f"ecn{q}"),
                            "ecn-marked-octets": v(n, f"ecn_bytes{q}"),
                        },
                    )
                )
            if p.neighbour_name or p.neighbour_mac:
                out.append(
                    (
                        f"/lldp/interfaces/interface[name={n}]/neighbors/neighbor[id=1]/state",
                        {
                            "system-name": p.neighbour_name,
                            "port-id": p.neighbour_port or p.neighbour_mac,
                            "chassis-id": p.neighbour_mac or "00:00:00:00:00:00",
                        },
                    )
                )
        out.append(("/system/state", {"boot-time": self.boot_time_ns}))
        return out

    def sonic_table(self, db: str, table: str, sub: str | None) -> dict[str, dict[str, str]]:
        """SONiC layout: rows of a DB table (``sub`` = "Queues" for queue stats)."""
        v = self.value
        rows: dict[str, dict[str, str]] = {}
        for p in self.ports:
            n = p.name
            if db == "COUNTERS_DB" and table == "COUNTERS" and sub is None:
                row = {
                    "SAI_PORT_STAT_IF_IN_OCTETS": v(n, "rx_bytes"),
                    "SAI_PORT_STAT_IF_OUT_OCTETS": v(n, "tx_bytes"),
                    "SAI_PORT_STAT_IF_IN_DISCARDS": v(n, "in_discards"),
                    "SAI_PORT_STAT_IF_OUT_DISCARDS": v(n, "out_discards"),
                    "SAI_PORT_STAT_IF_IN_ERRORS": v(n, "in_errors"),
                    "SAI_PORT_STAT_IF_OUT_ERRORS": v(n, "out_errors"),
                }
                for prio in range(8):
                    row[f"SAI_PORT_STAT_PFC_{prio}_RX_PKTS"] = v(n, f"pfc_rx{prio}")
                    row[f"SAI_PORT_STAT_PFC_{prio}_TX_PKTS"] = v(n, f"pfc_tx{prio}")
                    row[f"SAI_PORT_STAT_PFC_{prio}_ON2OFF_RX_PKTS"] = 0
                    if self.pfc_durations:
                        row[f"SAI_PORT_STAT_PFC_{prio}_RX_PAUSE_DURATION_US"] = v(
                            n, f"pfc_rx_us{prio}"
                        )
                        row[f"SAI_PORT_STAT_PFC_{prio}_TX_PAUSE_DURATION_US"] = v(
                            n, f"pfc_tx_us{prio}"
                        )
                rows[n] = {k: str(x) for k, x in row.items()}
            elif db == "COUNTERS_DB" and table == "COUNTERS" and sub == "Queues":
                for q in range(self.queues):
                    rows[f"{n}:{q}"] = {
                        "SAI_QUEUE_STAT_PACKETS": str(v(n, f"txq{q}")),
                        "SAI_QUEUE_STAT_BYTES": str(v(n, f"txq{q}") * 1024),
                        "SAI_QUEUE_STAT_DROPPED_PACKETS": str(v(n, f"drops{q}")),
                        "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": str(v(n, f"ecn{q}")),
                        "SAI_QUEUE_STAT_WRED_ECN_MARKED_BYTES": str(v(n, f"ecn_bytes{q}")),
                    }
            elif db == "APPL_DB" and table == "PORT_TABLE" and sub is None:
                rows[n] = {
                    "oper_status": "up" if p.up else "down",
                    "admin_status": "up",
                    "speed": str(p.speed_mbps),
                }
            elif db == "APPL_DB" and table == "LLDP_ENTRY_TABLE" and sub is None:
                if p.neighbour_name or p.neighbour_mac:
                    rows[n] = {
                        "lldp_rem_sys_name": p.neighbour_name,
                        "lldp_rem_port_id": p.neighbour_port or p.neighbour_mac,
                        "lldp_rem_chassis_id": p.neighbour_mac or "00:00:00:00:00:00",
                    }
            else:
                raise KeyError(f"{db}:{table}")
        return rows


def _covers(sub: list[tuple[str, dict[str, str]]], path: list[tuple[str, dict[str, str]]]) -> bool:
    """Whether a subscription path (wildcards allowed) is a prefix of ``path``."""
    if len(sub) > len(path):
        return False
    for (sn, sk), (pn, pk) in zip(sub, path, strict=False):
        if sn not in ("*", pn):
            return False
        for k, want in sk.items():
            if want != "*" and pk.get(k) != want:
                return False
    return True


@dataclass
class _Plan:
    """What one subscription serves."""

    on_change: bool
    interval: float
    # openconfig: (container index, leaf name or None for all)
    picks: list[tuple[int, str | None]] = field(default_factory=list)
    # sonic: (db, table, port pattern, sub, request path text)
    sonic: tuple[str, str, str, str | None, str] | None = None
    due: float = 0.0
    sent_at: float = 0.0


@dataclass(frozen=True)
class ServerTls:
    """Server certificate and key (PEM), and a CA to require client certificates from."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None


class _Servicer(pb_grpc.gNMIServicer):  # type: ignore[misc]
    def __init__(self, server: SimGnmiServer) -> None:
        self._server = server

    def _check_auth(self, context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
        srv = self._server
        if not srv.username:
            return None
        md = dict(context.invocation_metadata() or ())
        if md.get("username") != srv.username or md.get("password") != srv.password:
            return "bad username or password"
        return None

    async def Capabilities(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        err = self._check_auth(context)
        if err:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, err)
        self._server.capabilities_calls += 1
        if self._server.sim.layout == "sonic":
            models = [pb.ModelData(name="sonic-db", organization="SONiC", version="0.1.0")]
        else:
            models = [
                pb.ModelData(name=m, organization="OpenConfig working group", version="1.0.0")
                for m in (
                    "openconfig-interfaces",
                    "openconfig-if-ethernet",
                    "openconfig-qos",
                    "openconfig-lldp",
                    "openconfig-system",
                )
            ]
        return pb.CapabilityResponse(
            supported_models=models,
            supported_encodings=[pb.JSON, pb.JSON_IETF, pb.PROTO],
            gNMI_version="0.8.0",
        )

    async def Subscribe(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        err = self._check_auth(context)
        if err:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, err)
        first = None
        async for req in request_iterator:
            first = req
            break
        if first is None or first.WhichOneof("request") != "subscribe":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "expected a subscription list")
        srv = self._server
        sim = srv.sim
        sl = first.subscribe
        if sl.mode != pb.SubscriptionList.STREAM:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "only STREAM subscriptions")
        try:
            plans = self._plans(sl)
        except (KeyError, ValueError) as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown path: {exc}")
        srv.subscriptions += 1
        origin, target = sl.prefix.origin, sl.prefix.target
        # Taken before the first yield: a change made while the initial data
        # is in flight must still be streamed.
        seen_version = sim.version
        for p in plans:
            p.sent_at = sim.clock()
            for n in self._render(p, origin, target):
                yield pb.SubscribeResponse(update=n)
        yield pb.SubscribeResponse(sync_response=True)
        tick = max(0.005, min((p.interval for p in plans if not p.on_change), default=0.05) / 4)
        while True:
            await asyncio.sleep(0 if sim.flood > 1 else tick)
            if sim.stalled:
                continue
            now_real = time.monotonic()
            changed = sim.version != seen_version
            seen_version = sim.version
            now = sim.clock()
            for p in plans:
                if p.on_change:
                    if not changed:
                        continue
                # A sample per interval, and only when the scenario's clock moved
                # (a manual test clock then gives exactly one sample per step).
                elif now_real < p.due or now == p.sent_at:
                    continue
                else:
                    p.due = now_real + p.interval
                    p.sent_at = now
                notes = self._render(p, origin, target)
                for _ in range(sim.flood if not p.on_change else 1):
                    for n in notes:
                        srv.sent += 1
                        yield pb.SubscribeResponse(update=n)
                if not p.on_change:
                    for raw in sim.inject:
                        srv.sent += 1
                        yield pb.SubscribeResponse(update=raw)

    def _plans(self, sl: Any) -> list[_Plan]:
        sim = self._server.sim
        plans: list[_Plan] = []
        containers = sim.containers() if sim.layout == "openconfig" else []
        parsed = [split_path(c) for c, _ in containers]
        for s in sl.subscription:
            on_change = s.mode == pb.ON_CHANGE
            interval = max(s.sample_interval / 1e9, 0.01) if not on_change else 0.0
            plan = _Plan(on_change, interval)
            text = path_text(s.path)
            elems = split_path(text)
            if sim.layout == "sonic":
                target = sl.prefix.target
                names = [e[0] for e in elems]
                if len(names) == 3 and names[2] == "Queues":
                    plan.sonic = (target, names[0], names[1], "Queues", text)
                elif len(names) == 2:
                    plan.sonic = (target, names[0], names[1], None, text)
                else:
                    raise ValueError(text)
                sim.sonic_table(target, names[0], plan.sonic[3])  # KeyError if unknown
            else:
                for i, c in enumerate(parsed):
                    if _covers(elems, c):
                        plan.picks.append((i, None))
                    elif len(elems) == len(c) + 1 and _covers(elems[:-1], c):
                        leaf = elems[-1][0]
                        if leaf in containers[i][1]:
                            plan.picks.append((i, leaf))
                if not plan.picks:
                    raise ValueError(text)
            plans.append(plan)
        return plans

    def _render(self, plan: _Plan, origin: str, target: str) -> list[Any]:
        sim = self._server.sim
        stamp = sim.stamp_ns()
        if plan.sonic is not None:
            db, table, pattern, sub, text = plan.sonic
            rows = sim.sonic_table(db, table, sub)
            if sub == "Queues":
                doc: dict[str, Any] = {
                    k: r for k, r in rows.items() if fnmatch.fnmatchcase(k.split(":")[0], pattern)
                }
            elif "*" in pattern:
                doc = {k: r for k, r in rows.items() if fnmatch.fnmatchcase(k, pattern)}
            else:
                doc = rows.get(pattern, {})
            val = pb.TypedValue(json_ietf_val=json.dumps(doc).encode())
            return [
                pb.Notification(
                    timestamp=stamp,
                    prefix=pb.Path(target=target),
                    update=[pb.Update(path=make_path(text), val=val)],
                )
            ]
        containers = sim.containers()
        by_container: dict[int, list[str] | None] = {}
        for i, leaf in plan.picks:
            if leaf is None:
                by_container[i] = None
            elif by_container.get(i, []) is not None:
                by_container.setdefault(i, []).append(leaf)  # type: ignore[union-attr]
        out = []
        for i, leaves in by_container.items():
            cpath, values = containers[i]
            names = list(values) if leaves is None else leaves
            updates = [
                pb.Update(
                    path=pb.Path(elem=[pb.PathElem(name=k)]),
                    val=pb.TypedValue(uint_val=values[k])
                    if isinstance(values[k], int)
                    else pb.TypedValue(string_val=str(values[k])),
                )
                for k in names
            ]
            out.append(
                pb.Notification(
                    timestamp=stamp,
                    prefix=make_path(cpath, origin=origin, target=target),
                    update=updates,
                )
            )
        return out


class SimGnmiServer:
    """Serves a :class:`SimTarget` over gRPC on loopback."""

    def __init__(
        self,
        sim: SimTarget,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ServerTls | None = None,
        username: str = "",
        password: str = "",
    ) -> None:
        self.sim = sim
        self.host = host
        self.port = port
        self.tls = tls
        self.username = username
        self.password = password
        self.subscriptions = 0
        self.capabilities_calls = 0
        self.sent = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> SimGnmiServer:
        """Bind (port 0 picks a free one, kept across restarts) and serve."""
        server = grpc.aio.server()
        pb_grpc.add_gNMIServicer_to_server(_Servicer(self), server)
        addr = f"{self.host}:{self.port}"
        if self.tls is None:
            bound = server.add_insecure_port(addr)
        else:
            creds = grpc.ssl_server_credentials(
                [(self.tls.key, self.tls.cert)],
                root_certificates=self.tls.client_ca,
                require_client_auth=self.tls.client_ca is not None,
            )
            bound = server.add_secure_port(addr, creds)
        if not bound:
            msg = f"cannot bind {addr}"
            raise OSError(msg)
        self.port = bound
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        """Stop serving; open streams are cut."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)

    async def restart(self, downtime: float = 0.0) -> None:
        """Model a target reboot: streams cut, counters and boot time restart, same port."""
        await self.stop()
        self.sim.restart()
        if downtime:
            await asyncio.sleep(downtime)
        await self.start()


def demo_target(
    ports: int = 4,
    *,
    layout: Layout = "openconfig",
    queues: int = 8,
    node: str = "gpu-node-1",
    clock: Callable[[], float] = time.monotonic,
) -> SimTarget:
    """A leaf with ``ports`` 400G ports, the first two facing ``node``, light traffic."""
    prefix = "Ethernet" if layout == "sonic" else "Ethernet1/"
    sim = SimTarget(
        [
            SimPort(
                i + 1,
                f"Ethernet{i * 4}" if layout == "sonic" else f"{prefix}{i + 1}",
                speed_mbps=400_000,
                neighbour_name=node if i < 2 else f"other-node-{i}",
                neighbour_port=f"eth{i}",
            )
            for i in range(ports)
        ],
        layout=layout,
        queues=queues,
        clock=clock,
    )
    for p in sim.ports:
        sim.set_rate(p.name, "rx_bytes", 5e9)
        sim.set_rate(p.name, "tx_bytes", 4.8e9)
        for q in range(queues):
            sim.set_rate(p.name, f"txq{q}", 40_000)
            sim.set_rate(p.name, f"ecn{q}", 20 if q == 3 else 0)
    return sim


async def _serve(args: argparse.Namespace) -> None:
    sim = demo_target(args.ports, layout=args.layout, queues=args.queues, node=args.node)
    tls = None
    if not args.insecure:
        with open(args.cert, "rb") as c, open(args.key, "rb") as k:  # noqa: ASYNC230, PTH123
            tls = ServerTls(c.read(), k.read())
    srv = await SimGnmiServer(sim, host=args.host, port=args.port, tls=tls).start()
    print(f"simulated gNMI target ({args.layout}) on {args.host}:{srv.port}", flush=True)  # noqa: T201
    try:
        if args.surge_after is not None:
            await asyncio.sleep(args.surge_after)
            sim.ecn_surge(sim.ports[0].name, 3, 50_000)
            print(f"ECN surge on {sim.ports[0].name} queue 3", flush=True)  # noqa: T201
        await asyncio.Event().wait()
    finally:
        await srv.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve :func:`demo_target` until interrupted."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ap.add_argument("--ports", type=int, default=4)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--layout", choices=("openconfig", "sonic"), default="openconfig")
    ap.add_argument("--node", default="gpu-node-1")
    ap.add_argument("--insecure", action="store_true", help="plain text (no TLS)")
    ap.add_argument("--cert", help="server certificate (PEM)")
    ap.add_argument("--key", help="server key (PEM)")
    ap.add_argument("--surge-after", type=float, default=None)
    args = ap.parse_args(argv)
    if not args.insecure and not (args.cert and args.key):
        ap.error("give --cert and --key, or --insecure")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
