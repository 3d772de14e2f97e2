"""Client CPU of the switch collector vs net-snmp ``snmpbulkwalk`` on the same agent and walk.

Starts snmpsim on 127.0.0.1 serving ``tests/data/switch/sonic-sim64.snmprec``
(64 ports, community SONiC layout) and walks the same 10 columns with every
client: 4 ifTable discard/error columns, 4 ifXTable HC columns and
cpfcIfPriorityRequests/Indications (x 8 priorities) = 1,536 varbinds.
Client CPU is ``time.process_time`` for in-process clients and
``RUSAGE_CHILDREN`` user+sys for ``snmpbulkwalk`` (one process per column,
as people run it). The agent is a separate process: its CPU is not counted.

Budgets (DESIGN.md): full walk within 2x of snmpbulkwalk CPU per varbind;
a node-mode poll of 4 uplinks under 5 ms CPU.

Run: ``.venv/bin/python bench/snmp_walk.py``
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "switch"
COMMUNITY = "sonic-sim64"
IFT = "1.3.6.1.2.1.2.2.1"
IFX = "1.3.6.1.2.1.31.1.1.1"
COLUMNS = [
    *(f"{IFT}.{c}" for c in (13, 14, 19, 20)),
    *(f"{IFX}.{c}" for c in (6, 7, 10, 11)),
    "1.3.6.1.4.1.9.9.813.1.2.1.2",
    "1.3.6.1.4.1.9.9.813.1.2.1.3",
]
REPEATS = 5


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_snmpsim(port: int, work: Path) -> subprocess.Popen[bytes]:
    exe = REPO / ".venv" / "bin" / "snmpsim-command-responder"
    return subprocess.Popen(
        [
            str(exe),
            f"--data-dir={DATA}",
            f"--cache-dir={work}",
            f"--agent-udpv4-endpoint=127.0.0.1:{port}",
            "--logging-method=null",
        ],
        env={**os.environ, "SNMPSIM_ALLOW_ROOT": "true"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_snmpbulkwalk(port: int) -> tuple[float, int]:
    """CPU seconds and varbinds of one snmpbulkwalk per column (-Cr50, numeric OIDs)."""
    exe = shutil.which("snmpbulkwalk")
    if exe is None:
        sys.exit("snmpbulkwalk not found (Debian package snmp)")
    before = _children_cpu()
    count = 0
    for col in COLUMNS:
        out = subprocess.run(
            [exe, "-v2c", "-c", COMMUNITY, "-On", "-Cr50", "-t", "5", f"127.0.0.1:{port}", col],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
        # The file's last subtree ends in repeated endOfMibView lines: not varbinds.
        count += sum(
            1
            for line in out.splitlines()
            if line.startswith("." + col + ".") and "No more variables" not in line
        )
    return _children_cpu() - before, count


async def _cpu(fn: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    t0 = time.process_time()
    n = await fn()
    return time.process_time() - t0, n


async def main() -> None:
    from fabricwatch.collector import CollectorEnv
    from fabricwatch.collectors.switch import SwitchCollector, SwitchSettings, TargetSettings
    from fabricwatch.collectors.switch._ber import parse_oid
    from fabricwatch.collectors.switch._client import NativeV2cSession, PysnmpSession, walk

    port = _free_udp_port()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        agent = _start_snmpsim(port, work)
        try:
            native = NativeV2cSession("127.0.0.1", port, COMMUNITY, timeout=5.0)
            deadline = time.monotonic() + 60
            while True:
                try:
                    await native.get([(1, 3, 6, 1, 2, 1, 1, 5, 0)])
                    break
                except Exception:  # noqa: BLE001 - waiting for the agent to index its data
                    if time.monotonic() > deadline:
                        sys.exit("snmpsim did not start")
                    await asyncio.sleep(0.3)
            cols = [parse_oid(c) for c in COLUMNS]
            pysnmp_s = PysnmpSession("127.0.0.1", port, community=COMMUNITY, timeout=5.0)

            async def native_walk() -> int:
                r = await walk(native, cols, max_repetitions=50)
                return sum(len(v) for v in r.values())

            async def pysnmp_walk() -> int:
                r = await walk(pysnmp_s, cols, max_repetitions=50)
                return sum(len(v) for v in r.values())

            async def pysnmp_bulk_walk_cmd() -> int:
                # The reference approach: hlapi bulk_walk_cmd, one column per walk.
                from pysnmp.hlapi.v3arch import asyncio as hl

                n = 0
                engine = pysnmp_s._engine
                for c in COLUMNS:
                    async for e, _s, _i, vbs in hl.bulk_walk_cmd(
                        engine,
                        pysnmp_s._auth,
                        pysnmp_s._target,
                        hl.ContextData(),
                        0,
                        50,
                        hl.ObjectType(hl.ObjectIdentity(c)),
                        lexicographicMode=False,
                        lookupMib=False,
                    ):
                        if e:
                            raise RuntimeError(str(e))
                        n += len(vbs)
                return n

            settings = SwitchSettings(
                targets=[
                    TargetSettings(
                        name="leaf", host="127.0.0.1", port=port, mode="switch", timeout=5.0
                    )
                ],
            )
            os.environ["FABRICWATCH_SNMP_COMMUNITY"] = COMMUNITY
            env = CollectorEnv(node="bench-node", sys_root=work / "nosys", state_dir=work)
            full = SwitchCollector(settings, env)
            await full.start()
            await full.collect()  # discovery (not part of the per-poll cost)

            async def collector_full_poll() -> int:
                await full.collect()
                return 0  # readings, not varbinds: reported as CPU per poll only

            node_settings = SwitchSettings(
                targets=[
                    TargetSettings(
                        name="leaf",
                        host="127.0.0.1",
                        port=port,
                        timeout=5.0,
                        uplinks=["Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"],
                    )
                ],
            )
            node = SwitchCollector(node_settings, env)
            await node.start()
            await node.collect()
            await pysnmp_walk()  # warm up imports and the engine

            results: dict[str, list[tuple[float, int]]] = {}
            for _ in range(REPEATS):
                results.setdefault("snmpbulkwalk", []).append(bench_snmpbulkwalk(port))
                for name, fn in (
                    ("native walk", native_walk),
                    ("pysnmp walk (multi-column bulk_cmd)", pysnmp_walk),
                    ("pysnmp bulk_walk_cmd per column", pysnmp_bulk_walk_cmd),
                    ("collector poll, switch mode", collector_full_poll),
                ):
                    results.setdefault(name, []).append(await _cpu(fn))
            node_cpu = []
            node_vbs = len(node.target_state("leaf").get_oids)
            for _ in range(50):
                t0 = time.process_time()
                await node.collect()
                node_cpu.append(time.process_time() - t0)
            for c in (full, node):
                await c.close()
            await native.close()
            await pysnmp_s.close()
        finally:
            agent.terminate()
            agent.wait(10)

    ref_cpu = statistics.median(c for c, _ in results["snmpbulkwalk"])
    ref_n = results["snmpbulkwalk"][0][1]
    ref_per_vb = ref_cpu / ref_n
    print(
        f"walk: {len(COLUMNS)} columns, 64 ports, agent snmpsim on loopback; "
        f"median of {REPEATS} runs; client CPU only"
    )
    print(f"{'client':42} {'varbinds':>9} {'CPU ms':>8} {'us/varbind':>11} {'x snmpbulkwalk':>15}")
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        n = runs[0][1]
        if not n:
            print(
                f"{name:42} {'-':>9} {cpu * 1e3:8.1f} {'-':>11} {cpu / ref_cpu:15.2f}"
                "  (whole poll: 9 IF-MIB + PFC + queue columns, readings and rates)"
            )
            continue
        per = cpu / n
        print(f"{name:42} {n:9d} {cpu * 1e3:8.1f} {per * 1e6:11.2f} {per / ref_per_vb:15.2f}")
    print("budget: full walk within 2.00x of snmpbulkwalk CPU per varbind")
    med = statistics.median(node_cpu)
    print(
        f"node-mode poll of 4 uplinks ({node_vbs} GET varbinds incl. sysUpTime): "
        f"median {med * 1e3:.2f} ms CPU per poll (p90 "
        f"{sorted(node_cpu)[int(len(node_cpu) * 0.9)] * 1e3:.2f} ms); "
        f"budget 5 ms -> {med / 5e-3:.2f}x of budget"
    )


if __name__ == "__main__":
    asyncio.run(main())
