"""Writes the snmpsim recordings in tests/data/switch/ (no public walk exists for these MIBs).

The OIDs follow the vendor MIBs the profiles in collectors/switch/profiles/ name
(CISCO-PFC-EXT, ARISTA-PFC, MELLANOX-QOS, IF-MIB, LLDP-MIB). Counters use
snmpsim's ``numeric`` variation so they move while a test runs. Run
``.venv/bin/python tests/switch/recgen.py`` to regenerate; a test checks the
committed files match.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "switch"

IFT = "1.3.6.1.2.1.2.2.1"
IFX = "1.3.6.1.2.1.31.1.1.1"
LLOC = "1.0.8802.1.1.2.1.3.7.1"
LREM = "1.0.8802.1.1.2.1.4.1.1"


def _hex(s: str) -> str:
    return s.encode().hex()


def _oid_key(line: str) -> tuple[int, ...]:
    return tuple(int(x) for x in line.split("|", 1)[0].split("."))


def _rec(lines: Iterator[str]) -> str:
    return "\n".join(sorted(lines, key=_oid_key)) + "\n"


def _system(descr: str, object_id: str, name: str) -> Iterator[str]:
    yield f"1.3.6.1.2.1.1.1.0|4x|{_hex(descr)}"
    yield f"1.3.6.1.2.1.1.2.0|6|{object_id}"
    yield "1.3.6.1.2.1.1.3.0|67:numeric|rate=100,initial=4200000"
    yield f"1.3.6.1.2.1.1.5.0|4|{name}"


def _if_rows(
    ports: list[tuple[int, str]], speed: int = 200000, skip_speed: frozenset[int] = frozenset()
) -> Iterator[str]:
    for i, name in ports:
        yield f"{IFT}.1.{i}|2|{i}"
        yield f"{IFT}.2.{i}|4|{name}"
        yield f"{IFT}.8.{i}|2|1"
        for col in (13, 14, 19, 20):
            yield f"{IFT}.{col}.{i}|65|0"
        yield f"{IFX}.1.{i}|4|{name}"
        yield f"{IFX}.6.{i}|70:numeric|rate=2500000000,initial=1000000000000"
        yield f"{IFX}.7.{i}|70:numeric|rate=300000,initial=100000000"
        yield f"{IFX}.10.{i}|70:numeric|rate=2400000000,initial=900000000000"
        yield f"{IFX}.11.{i}|70:numeric|rate=290000,initial=90000000"
        if i not in skip_speed:
            yield f"{IFX}.15.{i}|66|{speed}"
        yield f"{IFX}.19.{i}|67|0"


def _lldp(
    ports: list[tuple[int, str]],
    neighbours: dict[int, tuple[str, str]],
    *,
    time_mark: int = 0,
    port_num: dict[int, int] | None = None,
) -> Iterator[str]:
    nums = port_num or {i: i for i, _ in ports}
    for i, name in ports:
        yield f"{LLOC}.2.{nums[i]}|2|5"
        yield f"{LLOC}.3.{nums[i]}|4|{name}"
        yield f"{LLOC}.4.{nums[i]}|4|{name}"
    for k, (i, (host, port)) in enumerate(sorted(neighbours.items())):
        idx = f"{time_mark}.{nums[i]}.{k + 1}"
        mac = f"b8cef6{k:06x}"
        yield f"{LREM}.4.{idx}|2|4"
        yield f"{LREM}.5.{idx}|4x|{mac}"
        yield f"{LREM}.6.{idx}|2|5"
        yield f"{LREM}.7.{idx}|4|{port}"
        yield f"{LREM}.9.{idx}|4|{host}"


def sonic64() -> str:
    """Community SONiC, 64 x 200G ports: CISCO-PFC-EXT per priority, CSQ queue stats."""
    ports = [(n * 4 + 1, f"Ethernet{n * 4}") for n in range(64)]

    def lines() -> Iterator[str]:
        yield from _system(
            "SONiC Software Version: SONiC.202311.fabricwatch-fixture - HwSku: Mellanox-SN4600C",
            "1.3.6.1.4.1.8072.3.2.10",
            "leaf-sonic-1",
        )
        yield from _if_rows(ports)
        yield from _lldp(
            ports, {1: ("gpu-node-7", "eth0"), 5: ("gpu-node-7", "eth1"), 9: ("gpu-node-8", "eth0")}
        )
        pfc = "1.3.6.1.4.1.9.9.813.1"
        for i, _ in ports:
            # Interface totals: SONiC fills them from priority 3 only (not used).
            yield f"{pfc}.1.1.1.{i}|70|0"
            yield f"{pfc}.1.1.2.{i}|70|0"
            for p in range(8):
                rate = 50 if (i == 1 and p == 3) else 0
                yield f"{pfc}.2.1.2.{i}.{p}|70:numeric|rate={rate},initial=0"
                yield f"{pfc}.2.1.3.{i}.{p}|70:numeric|rate={rate},initial=0"
            for g in range(1, 9):
                for typ in (1, 2, 5, 6):
                    rate = 3 if (typ == 5 and g == 4 and i == 1) else 0
                    yield f"1.3.6.1.4.1.9.9.580.1.5.5.1.4.{i}.2.{g}.{typ}|70:numeric|rate={rate}"

    return _rec(lines())


def onyx() -> str:
    """Onyx: MELLANOX-QOS PFC frames + ms durations; LLDP port numbers != ifIndex, time mark."""
    ports = [(151 + n, f"Eth1/{n + 1}") for n in range(4)]
    nums = {i: n + 1 for n, (i, _) in enumerate(ports)}  # lldpLocPortNum 1..4

    def lines() -> Iterator[str]:
        yield from _system(
            "Mellanox SN2700,Onyx,SWv3.9.3124", "1.3.6.1.4.1.33049.1.1.1.2700", "leaf-onyx-1"
        )
        yield from _if_rows(ports, speed=100000)
        yield from _lldp(ports, {152: ("gpu-node-3", "enp1s0f0")}, time_mark=73412, port_num=nums)
        q = "1.3.6.1.4.1.33049.15.1"
        for i, _ in ports:
            for p in range(8):
                storm = i == 152 and p == 3
                yield f"{q}.2.1.3.{i}.{p}|70:numeric|rate={2980 if storm else 0}"
                yield f"{q}.2.1.4.{i}.{p}|70:numeric|rate={500 if storm else 0}"
                yield f"{q}.2.1.5.{i}.{p}|70|0"
                yield f"{q}.2.1.6.{i}.{p}|70|0"
                yield f"{q}.4.1.8.{i}.{p}|70|0"
                yield f"{q}.4.1.9.{i}.{p}|70|0"

    return _rec(lines())


def arista_pfc() -> str:
    """EOS 4.33-like: ARISTA-PFC + ARISTA-QUEUE, breakout rows absent from ifTable, holes."""
    ports = [(n, f"Ethernet{n}") for n in (1, 2, 3, 4)]

    def lines() -> Iterator[str]:
        yield from _system(
            "Arista Networks EOS version 4.33.1F running on an Arista Networks DCS-7060X6",
            "1.3.6.1.4.1.30065.1.3011.7060.3913.64",
            "leaf-arista-1",
        )
        # Hole: Ethernet3 has no ifHighSpeed row.
        yield from _if_rows(ports, speed=400000, skip_speed=frozenset({3}))
        yield from _lldp(ports, {2: ("gpu-node-5.example.net", "eth2")})
        pfc = "1.3.6.1.4.1.30065.3.11.1.1.1"
        # Hole: Ethernet4 has no PFC rows; 49001 is an unused breakout lane.
        for i in (1, 2, 3, 49001):
            for p in range(8):
                yield f"{pfc}.3.{i}.{p}|70|0"
                yield f"{pfc}.4.{i}.{p}|70:numeric|rate={10 if p == 3 else 0}"
        qd = "1.3.6.1.4.1.30065.3.6.1.2.1.6"
        for i, _ in ports:
            for q in range(8):
                for typ in (0, 1):
                    yield f"{qd}.{i}.{q}.{typ}|70|0"

    return _rec(lines())


def cumulus_counters() -> str:
    """Cumulus with CUMULUS-COUNTERS-MIB: one column per priority / TC."""
    ports = [(3, "swp1"), (4, "swp2")]

    def lines() -> Iterator[str]:
        yield from _system(
            "Linux leaf01 5.10.0-cl-1-amd64 #1 SMP Debian 5.10.162-1+cl5.4.0u1 Cumulus",
            "1.3.6.1.4.1.8072.3.2.10",
            "leaf-cumulus-1",
        )
        yield from _if_rows(ports, speed=100000)
        pfc = "1.3.6.1.4.1.40310.2.2.3.1"
        tc = "1.3.6.1.4.1.40310.2.2.4.1"
        for i, name in ports:
            yield f"{pfc}.1.{i}|4|{name}"
            for p in range(8):
                yield f"{pfc}.{4 + 2 * p}.{i}|70:numeric|rate={7 if p == 3 else 0}"
                yield f"{pfc}.{5 + 2 * p}.{i}|70|0"
            for t in range(8):
                for off in (2, 3, 4):
                    yield f"{tc}.{off + 3 * t}.{i}|70|0"

    return _rec(lines())


def dell_fpstats() -> str:
    """Dell OS9 with DELL-NETWORKING-FPSTATS dellNetPfcPerPrioTable (priorities 1..8)."""
    ports = [(2113038, "hundredGigE 1/32"), (2113166, "hundredGigE 1/33")]

    def lines() -> Iterator[str]:
        yield from _system(
            "Dell EMC Networking OS Application Software Version: 9.14(2.4)",
            "1.3.6.1.4.1.6027.1.5.2",
            "leaf-dell-1",
        )
        yield from _if_rows(ports, speed=100000)
        t = "1.3.6.1.4.1.6027.3.27.1.11.1"
        for i, _ in ports:
            for p in range(1, 9):
                yield f"{t}.2.{i}.{p}|70|0"
                yield f"{t}.3.{i}.{p}|70:numeric|rate={5 if p == 4 else 0}"

    return _rec(lines())


def nxos_pfc() -> str:
    """NX-OS with CISCO-PFC-EXT per-priority frames and cpfcIfPriorityWait (us)."""
    ports = [(436207616, "Ethernet1/1"), (436211712, "Ethernet1/2")]

    def lines() -> Iterator[str]:
        yield from _system(
            "Cisco NX-OS(tm) Nexus9000 C9336C-FX2, Version 10.3(4a)",
            "1.3.6.1.4.1.9.12.3.1.3.1812",
            "spine-nxos-1",
        )
        yield from _if_rows(ports, speed=100000)
        pfc = "1.3.6.1.4.1.9.9.813.1"
        for i, _ in ports:
            for p in range(8):
                yield f"{pfc}.2.1.2.{i}.{p}|70|0"
                yield f"{pfc}.2.1.3.{i}.{p}|70:numeric|rate={100 if p == 3 else 0}"
                wait = 250000 if (p == 3 and i == 436207616) else 0
                yield f"{pfc}.4.1.2.{i}.{p}|70:numeric|rate={wait}"
                yield f"{pfc}.4.1.3.{i}.{p}|70|0"
        yield from _cbqos_ecn(ports)

    return _rec(lines())


def _cbqos_ecn(ports: list[tuple[int, str]]) -> Iterator[str]:
    """CISCO-CLASS-BASED-QOS: an output and an input policy per port, class-maps with RED.

    ECN marks (cbQosREDECNMarkPkt64) on the first port's class c-out-q3: 500/s
    at RED value 0 plus 300/s at RED value 1; the input policy's marks must be
    ignored (ECN is marked at egress).
    """
    cb = "1.3.6.1.4.1.9.9.166.1"
    for k, (i, _) in enumerate(ports):
        for policy, direction in ((1000 + k, 2), (2000 + k, 1)):
            yield f"{cb}.1.1.1.3.{policy}|2|{direction}"
            yield f"{cb}.1.1.1.4.{policy}|2|{i}"
            yield f"{cb}.5.1.1.2.{policy}.1|66|7000"
            yield f"{cb}.5.1.1.3.{policy}.1|2|1"
            yield f"{cb}.5.1.1.4.{policy}.1|66|0"
            for q in (0, 3):
                yield f"{cb}.5.1.1.2.{policy}.{10 + q}|66|{5000 + q}"
                yield f"{cb}.5.1.1.3.{policy}.{10 + q}|2|2"
                yield f"{cb}.5.1.1.4.{policy}.{10 + q}|66|1"
                yield f"{cb}.5.1.1.2.{policy}.{20 + q}|66|{6000 + q}"
                yield f"{cb}.5.1.1.3.{policy}.{20 + q}|2|5"
                yield f"{cb}.5.1.1.4.{policy}.{20 + q}|66|{10 + q}"
                for red, part in ((0, 500), (1, 300)):
                    rate = part if (k == 0 and q == 3 and direction == 2) else 0
                    if direction == 1 and q == 3:
                        rate = 999
                    yield f"{cb}.20.1.1.21.{policy}.{20 + q}.{red}|70:numeric|rate={rate}"
    yield f"{cb}.7.1.1.1.5000|4|c-out-q-default"
    yield f"{cb}.7.1.1.1.5003|4|c-out-q3"


def _if_table_only(ports: list[tuple[int, str, int]]) -> Iterator[str]:
    """ifTable rows alone (no ifXTable): name in ifDescr, ifSpeed in bit/s (pinned at 2^32-1)."""
    for i, name, bps in ports:
        yield f"{IFT}.1.{i}|2|{i}"
        yield f"{IFT}.2.{i}|4|{name}"
        yield f"{IFT}.5.{i}|66|{min(bps, 2**32 - 1)}"
        yield f"{IFT}.8.{i}|2|1"
        yield f"{IFT}.10.{i}|65:numeric|rate=1000000,initial=1000"
        for col in (13, 14, 19, 20):
            yield f"{IFT}.{col}.{i}|65|0"
        yield f"{IFT}.16.{i}|65:numeric|rate=1000000,initial=1000"


def arista_7280r() -> str:
    """EOS 4.33 on a 7280R-like box: ARISTA-PFC per COS, no ifXTable, unused breakout lanes.

    Ethernet1/1 (ifIndex 1001, 100G) is in a PFC storm on COS 3: 2980
    frames/s hold a 100G priority paused (100e9 / (65535 x 512)). Its ifSpeed
    pins at 2^32-1, so only a configured speed gives a ratio. Lanes 1002-1004
    of the same cage have PFC rows but no ifTable row. Ethernet53 (1G,
    ifSpeed 1e9) receives 10 frames/s: 33.6 % paused from ifSpeed alone.
    ARISTA-QUEUE egress drops: queues 0-7 unicast (type 0), 8-15 multicast
    (type 1); multicast queue 8 (MC0) drops 4/s on Ethernet1/1.
    """
    ports = [
        (1001, "Ethernet1/1", 100_000_000_000),
        (2001, "Ethernet2/1", 100_000_000_000),
        (53, "Ethernet53", 1_000_000_000),
        (999001, "Management1", 1_000_000_000),
    ]
    named = [(i, n) for i, n, _ in ports]

    def lines() -> Iterator[str]:
        yield from _system(
            "Arista Networks EOS version 4.33.2F running on an Arista Networks DCS-7280CR3-32P4",
            "1.3.6.1.4.1.30065.1.3011.7280.1334.32",
            "spine-7280r-1",
        )
        yield from _if_table_only(ports)
        yield from _lldp(named[:2], {1001: ("gpu-node-9", "ens1f0np0")})
        pfc = "1.3.6.1.4.1.30065.3.11.1.1.1"
        for i in (1001, 1002, 1003, 1004, 2001, 53):
            for p in range(8):
                rx = 2980 if (i == 1001 and p == 3) else 10 if (i == 53 and p == 3) else 0
                yield f"{pfc}.3.{i}.{p}|70|0"
                yield f"{pfc}.4.{i}.{p}|70:numeric|rate={rx},initial=0"
        qd = "1.3.6.1.4.1.30065.3.6.1.2.1.6"
        for i in (1001, 2001):
            for q in range(16):
                rate = 4 if (i == 1001 and q == 8) else 0
                yield f"{qd}.{i}.{q}.{0 if q < 8 else 1}|70:numeric|rate={rate},initial=0"

    return _rec(lines())


def sonic_no_pfc() -> str:
    """Community SONiC whose agent serves no CISCO-PFC-EXT rows (PFC counters absent)."""
    ports = [(n * 4 + 1, f"Ethernet{n * 4}") for n in range(4)]

    def lines() -> Iterator[str]:
        yield from _system(
            "SONiC Software Version: SONiC.202405.fabricwatch-fixture - HwSku: Arista-7060X6",
            "1.3.6.1.4.1.8072.3.2.10",
            "leaf-sonic-nopfc",
        )
        yield from _if_rows(ports, speed=400000)
        yield from _lldp(ports, {1: ("gpu-node-2", "eth0")})
        for i, _ in ports:
            for g in range(1, 9):
                yield f"1.3.6.1.4.1.9.9.580.1.5.5.1.4.{i}.2.{g}.5|70|0"

    return _rec(lines())


def cumulus_by_oid() -> str:
    """Cumulus whose sysDescr is plain "Linux ..." (sysObjectID under enterprise 40310)."""
    ports = [(11, "swp1"), (12, "swp2")]

    def lines() -> Iterator[str]:
        yield from _system(
            "Linux leaf02 5.10.0-cl-1-amd64 #1 SMP Debian 5.10.189-1+cl5.9.1u5 x86_64",
            "1.3.6.1.4.1.40310.1.1",
            "leaf-cumulus-2",
        )
        yield from _if_rows(ports, speed=100000)
        pfc = "1.3.6.1.4.1.40310.2.2.3.1"
        for i, name in ports:
            yield f"{pfc}.1.{i}|4|{name}"
            for p in range(8):
                yield f"{pfc}.{4 + 2 * p}.{i}|70:numeric|rate={3 if p == 3 else 0}"
                yield f"{pfc}.{5 + 2 * p}.{i}|70|0"

    return _rec(lines())


def storm_25g_100g() -> str:
    """SONiC with a 25G and a 100G port, each receiving PFC on priority 3 at the rate
    that holds it paused all the time: speed / (65535 x 512) = 745/s and 2980/s."""
    ports = [(1, "Ethernet0"), (5, "Ethernet4")]

    def lines() -> Iterator[str]:
        yield from _system(
            "SONiC Software Version: SONiC.202311.fabricwatch-fixture - HwSku: Mellanox-SN2410",
            "1.3.6.1.4.1.8072.3.2.10",
            "leaf-storm-1",
        )
        rows = list(_if_rows(ports[:1], speed=25000)) + list(_if_rows(ports[1:], speed=100000))
        yield from rows
        pfc = "1.3.6.1.4.1.9.9.813.1"
        for i, _ in ports:
            for p in range(8):
                rate = (745 if i == 1 else 2980) if p == 3 else 0
                yield f"{pfc}.2.1.2.{i}.{p}|70|0"
                yield f"{pfc}.2.1.3.{i}.{p}|70:numeric|rate={rate},initial=0"

    return _rec(lines())


RECORDINGS = {
    "sonic-sim64": sonic64,
    "onyx-sim": onyx,
    "arista-pfc-sim": arista_pfc,
    "cumulus-counters-sim": cumulus_counters,
    "dell-os9-fpstats-sim": dell_fpstats,
    "nxos-pfc-sim": nxos_pfc,
    "arista-7280r-sim": arista_7280r,
    "sonic-nopfc-sim": sonic_no_pfc,
    "cumulus-oid-sim": cumulus_by_oid,
    "storm-25g-100g-sim": storm_25g_100g,
}


def main() -> None:
    """Write every recording."""
    OUT.mkdir(parents=True, exist_ok=True)
    for name, fn in RECORDINGS.items():
        (OUT / f"{name}.snmprec").write_text(fn(), encoding="ascii")


if __name__ == "__main__":
    main()
