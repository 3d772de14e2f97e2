"""Client CPU of the switch collector vs net-snmp ``snmpbulkwalk`` on the same agent and walk.

Starts snmpsim on 127.0.0.1 serving ``tests/data/switch/sonic-sim64.snmprec``
(64 ports, community SONiC layout) and walks the same 10 columns with every
client: 4 ifTable discard/error columns, 4 ifXTable HC columns and
cpfcIfPriorityRequests/Indications (x 8 priorities) = 1,536 varbinds.
Client CPU is ``time.process_time`` for in-process clients and
``RUSAGE_CHILDREN`` user+sys for ``snmpbulkwalk`` (one process per column,
as people run it). The agent is a separate process: its CPU is not counted.

Debian's ``prometheus-snmp-exporter`` (0.21, Go) runs as a long-lived server
with a module generated here into the temp dir (numeric OIDs, one metric per
column, ifIndex / priority index labels, v2c, max_repetitions 50). Its CPU is
the utime+stime delta of the exporter process (all threads, so Go's GC too)
from ``/proc/<pid>/stat`` across ``EXPORTER_SCRAPES`` scrapes of
``/snmp?target=...&module=...`` per round, divided by the scrapes; that
includes the HTTP request and rendering the exposition text, which is the
exporter's job. The row is skipped with a note when the binary is absent.

Budgets (DESIGN.md): full walk within 2x of snmpbulkwalk CPU per varbind;
a node-mode poll of 4 uplinks under 5 ms CPU.

Run: ``.venv/bin/python bench/snmp_walk.py [--results FILE]``
"""

from __future__ import annotations

import argparse
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
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

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
# Metric names for the exporter module, in COLUMNS order.
COLUMN_NAMES = [
    "ifInDiscards",
    "ifInErrors",
    "ifOutDiscards",
    "ifOutErrors",
    "ifHCInOctets",
    "ifHCInUcastPkts",
    "ifHCOutOctets",
    "ifHCOutUcastPkts",
    "cpfcIfPriorityRequests",
    "cpfcIfPriorityIndications",
]
REPEATS = 5
EXPORTER = "prometheus-snmp-exporter"
EXPORTER_MODULE = "fabricwatch_bench"
# /proc/<pid>/stat counts in clock ticks (10 ms): enough scrapes per round
# that one tick is a few percent of the round's CPU.
EXPORTER_SCRAPES = 12
BUDGET_PER_VARBIND = 2.0  # x snmpbulkwalk CPU per varbind (DESIGN.md)
BUDGET_NODE_POLL_S = 5e-3  # CPU of a node-mode poll of 4 uplinks


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_snmpsim(port: int, work: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "snmpsim-command-responder"
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


def _free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exporter_config() -> str:
    """snmp.yml for snmp_exporter 0.21: walk the bench columns by numeric OID.

    0.21 reads a top-level map of modules with ``auth`` inside each module
    (the ``modules:`` / ``auths:`` split came in 0.23), and rejects unknown keys.
    """
    import yaml

    metrics = []
    for oid, name in zip(COLUMNS, COLUMN_NAMES, strict=True):
        indexes = [{"labelname": "ifIndex", "type": "gauge"}]
        if oid.startswith("1.3.6.1.4.1.9.9.813."):
            indexes.append({"labelname": "cpfcIfPriorityValue", "type": "gauge"})
        metrics.append({"name": name, "oid": oid, "type": "counter", "indexes": indexes})
    module = {
        "version": 2,
        "auth": {"community": COMMUNITY},
        "max_repetitions": 50,
        "retries": 0,
        "timeout": "10s",
        "walk": list(COLUMNS),
        "metrics": metrics,
    }
    return yaml.safe_dump({EXPORTER_MODULE: module}, sort_keys=False)


def _proc_cpu(pid: int) -> float:
    """User+system CPU seconds of a running process (all its threads)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SnmpExporter:
    """A prometheus-snmp-exporter process on a free 127.0.0.1 port."""

    def __init__(self, exe: str, agent_port: int, work: Path) -> None:
        cfg = work / "snmp.yml"
        cfg.write_text(exporter_config())
        self.log = work / "snmp_exporter.log"
        self.port = _free_tcp_port()
        self.url = (
            f"http://127.0.0.1:{self.port}/snmp?target=127.0.0.1:{agent_port}"
            f"&module={EXPORTER_MODULE}"
        )
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    exe,
                    f"--config.file={cfg}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=log,
            )

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited {self.proc.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not listening after {timeout:.0f} s") from None
                time.sleep(0.1)

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=30) as r:
            body: bytes = r.read()
        text = body.decode()
        if "snmp_error" in text:
            raise RuntimeError(f"scrape failed: {text[:300]}")
        return text

    def cpu(self) -> float:
        return _proc_cpu(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-500:]


def exporter_samples(text: str) -> tuple[int, int]:
    """Samples of the bench columns, and the exporter's own count of PDUs walked."""
    names = tuple(f"{n}{{" for n in COLUMN_NAMES)
    samples = sum(1 for line in text.splitlines() if line.startswith(names))
    pdus = -1
    for line in text.splitlines():
        if line.startswith("snmp_scrape_pdus_returned "):
            pdus = int(float(line.split()[1]))
    return samples, pdus


def _exporter_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    words = (out.stdout + out.stderr).split()
    # "snmp_exporter, version 0.21.0 (branch: ...)"
    return words[words.index("version") + 1] if "version" in words else "?"


def bench_snmp_exporter(exporter: SnmpExporter) -> tuple[float, int]:
    """Exporter CPU seconds per scrape (mean of a round) and varbinds per scrape."""
    before = exporter.cpu()
    n = 0
    for _ in range(EXPORTER_SCRAPES):
        n = exporter_samples(exporter.scrape())[0]
    return (exporter.cpu() - before) / EXPORTER_SCRAPES, n


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


def bench_snmpbulkwalk_fixed(port: int) -> float:
    """CPU seconds of the same snmpbulkwalk processes walking an empty column.

    Process start, MIB loading, one GETBULK (its 50 varbinds fall outside the
    subtree) and the GET snmpwalk sends when a subtree is empty: roughly the
    part of the snmpbulkwalk row that does not scale with varbinds.
    """
    exe = shutil.which("snmpbulkwalk")
    assert exe is not None  # bench_snmpbulkwalk exits first when it is missing
    empty = f"{IFT}.99"  # no such ifEntry column
    before = _children_cpu()
    for _ in COLUMNS:
        subprocess.run(
            [exe, "-v2c", "-c", COMMUNITY, "-On", "-Cr50", "-t", "5", f"127.0.0.1:{port}", empty],
            capture_output=True,
            check=False,
        )
    return _children_cpu() - before


async def _cpu(fn: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    t0 = time.process_time()
    n = await fn()
    return time.process_time() - t0, n


async def main(results_file: Path | None) -> None:
    from fabricwatch.collector import CollectorEnv
    from fabricwatch.collectors.switch._ber import parse_oid
    from fabricwatch.collectors.switch._client import NativeV2cSession, PysnmpSession, walk
    from fabricwatch.collectors.switch._collector import SwitchCollector
    from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings

    port = _free_udp_port()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        agent = _start_snmpsim(port, work)
        exporter: SnmpExporter | None = None
        exporter_exe = shutil.which(EXPORTER)
        exporter_note = (
            f"skipped: {EXPORTER} not installed (apt-get install {EXPORTER})"
            if exporter_exe is None
            else ""
        )
        exporter_row = f"{EXPORTER} (server CPU)"
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
            if exporter_exe is not None:
                exporter_row = f"{EXPORTER} {_exporter_version(exporter_exe)} (server CPU)"
                try:
                    exporter = SnmpExporter(exporter_exe, port, work)
                    exporter.wait_ready()
                    for _ in range(2):  # first scrapes build the module's state
                        text = exporter.scrape()
                    samples, pdus = exporter_samples(text)
                    exporter_note = (
                        f"{EXPORTER}: {EXPORTER_SCRAPES} scrapes per run; last scrape walked "
                        f"{pdus} PDUs (snmp_scrape_pdus_returned) and exported {samples} "
                        "samples; CPU = its utime+stime (all threads) incl. HTTP and text "
                        "rendering"
                    )
                except (OSError, RuntimeError) as e:
                    exporter_note = f"failed: {EXPORTER}: {e}"
                    if exporter is not None:
                        exporter.stop()
                        exporter = None

            results: dict[str, list[tuple[float, int]]] = {}
            fixed_cpu: list[float] = []
            for _ in range(REPEATS):
                results.setdefault("snmpbulkwalk", []).append(bench_snmpbulkwalk(port))
                fixed_cpu.append(bench_snmpbulkwalk_fixed(port))
                for name, fn in (
                    ("native walk", native_walk),
                    ("pysnmp walk (multi-column bulk_cmd)", pysnmp_walk),
                    ("pysnmp bulk_walk_cmd per column", pysnmp_bulk_walk_cmd),
                    ("collector poll, switch mode", collector_full_poll),
                ):
                    results.setdefault(name, []).append(await _cpu(fn))
                if exporter is not None:
                    results.setdefault(exporter_row, []).append(bench_snmp_exporter(exporter))
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
            if exporter is not None:
                exporter.stop()
            agent.terminate()
            agent.wait(10)
    figures = report(results, fixed_cpu, exporter_row, exporter_note)
    figures["node_poll"] = report_node_poll(node_cpu, node_vbs)
    write_results(results_file, figures)


def report(
    results: dict[str, list[tuple[float, int]]],
    fixed_cpu: list[float],
    exporter_row: str,
    exporter_note: str,
) -> dict[str, Any]:
    """Print the walk table against snmpbulkwalk; return its figures (for ``--results``)."""
    ref_cpu = statistics.median(c for c, _ in results["snmpbulkwalk"])
    ref_n = results["snmpbulkwalk"][0][1]
    ref_per_vb = ref_cpu / ref_n
    print(
        f"walk: {len(COLUMNS)} columns, 64 ports, agent snmpsim on loopback; "
        f"median of {REPEATS} runs; client CPU only"
    )
    width = max(42, *(len(k) for k in results))
    print(
        f"{'client':{width}} {'varbinds':>9} {'CPU ms':>8} {'us/varbind':>11} "
        f"{'x snmpbulkwalk':>15}"
    )
    clients: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        n = runs[0][1]
        if not n:
            print(
                f"{name:{width}} {'-':>9} {cpu * 1e3:8.1f} {'-':>11} {cpu / ref_cpu:15.2f}"
                "  (whole poll: 9 IF-MIB + PFC + queue columns, readings and rates)"
            )
            clients[name] = {"varbinds": 0, "cpu_ms": cpu * 1e3, "ratio": cpu / ref_cpu}
            continue
        per = cpu / n
        print(f"{name:{width}} {n:9d} {cpu * 1e3:8.1f} {per * 1e6:11.2f} {per / ref_per_vb:15.2f}")
        clients[name] = {"varbinds": n, "cpu_ms": cpu * 1e3, "ratio": per / ref_per_vb}
    print(exporter_note)
    fixed = statistics.median(fixed_cpu)
    net_per_vb = (ref_cpu - fixed) / ref_n
    line = (
        f"snmpbulkwalk fixed cost ({len(COLUMNS)} processes walking an empty column: "
        f"start, MIB load, 1 GETBULK + 1 GET each): {fixed * 1e3:.1f} ms = "
        f"{fixed / ref_cpu:.0%} of its walk CPU; net of it {net_per_vb * 1e6:.2f} us/varbind"
    )
    exporter_net: float | None = None
    if exporter_row in results and net_per_vb > 0:
        runs = results[exporter_row]
        exp_per_vb = statistics.median(c for c, _ in runs) / runs[0][1]
        exporter_net = exp_per_vb / net_per_vb
        line += f" -> {EXPORTER} {exporter_net:.2f}x of that"
    print(line)
    print(f"budget: full walk within {BUDGET_PER_VARBIND:.2f}x of snmpbulkwalk CPU per varbind")
    return {
        "columns": len(COLUMNS),
        "repeats": REPEATS,
        "varbinds": ref_n,
        "clients": clients,
        "exporter_row": exporter_row if exporter_row in results else None,
        "exporter_note": exporter_note,
        "fixed_share": fixed / ref_cpu,
        "exporter_net_ratio": exporter_net,
        "budget_per_varbind": BUDGET_PER_VARBIND,
    }


def report_node_poll(node_cpu: list[float], node_vbs: int) -> dict[str, float]:
    """Print the node-mode poll against its budget; return its figures."""
    med = statistics.median(node_cpu)
    p90 = sorted(node_cpu)[int(len(node_cpu) * 0.9)]
    print(
        f"node-mode poll of 4 uplinks ({node_vbs} GET varbinds incl. sysUpTime): "
        f"median {med * 1e3:.2f} ms CPU per poll (p90 "
        f"{p90 * 1e3:.2f} ms); "
        f"budget {BUDGET_NODE_POLL_S * 1e3:g} ms -> {med / BUDGET_NODE_POLL_S:.2f}x of budget"
    )
    return {
        "varbinds": node_vbs,
        "cpu_ms": med * 1e3,
        "p90_ms": p90 * 1e3,
        "budget_ms": BUDGET_NODE_POLL_S * 1e3,
        "budget_ratio": med / BUDGET_NODE_POLL_S,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_results_option(ap)
    asyncio.run(main(ap.parse_args().results))
