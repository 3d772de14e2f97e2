"""NCCL Inspector and NCCL RAS collectors against recorded output in the documented
formats (tests/data/nccl), with garbage, truncation, timeouts and recovery; RAS over
a real loopback TCP server speaking its line protocol."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.nccl_inspector._collector import InspectorCollector, parse_inspector
from fabricwatch.collectors.nccl_inspector._settings import InspectorSettings
from fabricwatch.collectors.nccl_ras._collector import RasCollector, parse_status
from fabricwatch.collectors.nccl_ras._settings import RasSettings
from fabricwatch.errors import CollectorError, ParseError
from fabricwatch.readings import Reading
from fabricwatch.settings import build

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl"


def values(
    readings: Sequence[Reading],
) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(r.name, r.labels): r.value for r in readings}


def test_both_are_registered_and_off_by_default() -> None:
    reg = builtin_registry()
    assert not reg["nccl_inspector"].default_enabled and not reg["nccl_ras"].default_enabled


# -- NCCL Inspector --------------------------------------------------------------


def fresh_copy(dump: Path) -> None:
    """The recordings as a job writing them now (their files' times are the commit's)."""
    shutil.copytree(DATA, dump)
    for p in dump.iterdir():
        os.utime(p, None)


def test_inspector_dump_parses_and_merges_its_three_families() -> None:
    path = next(DATA.glob("nccl_inspector_metrics_GPU-3c*.prom"))
    samples = parse_inspector(path.read_text().splitlines(), source=str(path))
    assert len(samples) == 4
    s = next(x for x in samples if x.sn == 4411)
    assert (s.comm, s.rank, s.nranks, s.gpu, s.collective) == (
        "0x7f3a9c2e11d04b21",
        131,
        512,
        "3",
        "AllReduce",
    )
    assert (s.bus_gbs, s.algo_gbs, s.exec_us) == (24.9, 12.5, 86000.0)


async def test_inspector_collector_latest_collective_of_the_job_communicator(
    tmp_path: Path,
) -> None:
    dump = tmp_path / "dump"
    fresh_copy(dump)
    (dump / "inspector_garbage.prom").rename(dump / "nccl_inspector_metrics_GPU-bad.prom")
    settings = build(InspectorSettings, {"dump_dir": str(dump)}, prefix="collectors.nccl_inspector")
    c = InspectorCollector(settings, CollectorEnv(node="n", wall=time.time))
    await c.start()
    v = values(await c.collect())
    # GPU 3: the 512-rank communicator's latest AllReduce (sn 4411: it collapsed to 24.9 GB/s),
    # not the 8-rank tensor-parallel one.
    assert v[("fabricwatch_nccl_bus_bandwidth_bytes_per_second", ("3", "AllReduce"))] == 24.9e9
    assert v[("fabricwatch_nccl_collective_seconds", ("3", "AllReduce"))] == pytest.approx(0.086)
    assert v[("fabricwatch_nccl_communicator_ranks", ("3",))] == 512.0
    # GPU 0's file was caught mid-write: its whole lines count, the cut one is dropped.
    assert v[("fabricwatch_nccl_bus_bandwidth_bytes_per_second", ("0", "AllReduce"))] == 361.8e9
    assert v[("fabricwatch_nccl_inspector_files", ("ok",))] == 2.0
    assert v[("fabricwatch_nccl_inspector_files", ("invalid",))] == 1.0
    # Stale dumps (the job ended) say nothing about now.
    old = time.time() - 3600
    for p in dump.glob("*.prom"):
        os.utime(p, (old, old))
    v = values(await c.collect())
    assert not any(k[0].startswith("fabricwatch_nccl_bus") for k in v)
    # A missing directory is no job running, not an error; it recovers when it appears.
    shutil.rmtree(dump)
    v = values(await c.collect())
    assert v[("fabricwatch_nccl_inspector_files", ("ok",))] == 0.0
    fresh_copy(dump)
    assert values(await c.collect())[("fabricwatch_nccl_inspector_files", ("ok",))] == 2.0
    await c.close()


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        'nccl_bus_bandwidth_gbs{rank="x",gpu_device_id="GPU0"} 1',
        'nccl_bus_bandwidth_gbs{rank="1",gpu_device_id="GPU0"} nan',
        'nccl_bus_bandwidth_gbs{rank="1",gpu_device_id="GPU0"} -3',
        'nccl_bus_bandwidth_gbs{rank="1",gpu_device_id="cuda:0"} 1',
        'nccl_bus_bandwidth_gbs{rank="1",gpu_device_id="GPU0" 1',
        'nccl_bus_bandwidth_gbs{rank="1",gpu_device_id="GPU0",bad label} 1',
    ],
)
def test_inspector_garbage(line: str) -> None:
    with pytest.raises(ParseError):
        parse_inspector([line])


def test_inspector_unknown_families_and_comments_are_skipped() -> None:
    text = ["# HELP x", 'nccl_future_metric{rank="1",gpu_device_id="GPU0"} 5', ""]
    assert parse_inspector(text) == []


# -- NCCL RAS --------------------------------------------------------------------


def test_ras_status_parses_missing_ranks() -> None:
    st = parse_status((DATA / "ras_status_missing.json").read_text())
    assert (st.communicators, st.responding, len(st.missing)) == (2, 22, 2)
    assert [(m.rank, m.host, m.cuda_dev, m.unresponsive, m.dead) for m in st.missing] == [
        (14, "10.0.1.17", 6, True, False),
        (15, "10.0.1.17", 7, True, True),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        (DATA / "ras_status_missing.json").read_text()[:500],  # truncated
        '{"communicators": {}}',
        '{"communicators": [1]}',
        '{"communicators": [{"ranks": [], "missing_ranks": [{"rank": "x"}]}]}',
        '{"communicators": [{"ranks": {}, "missing_ranks": []}]}',
        "ERROR: Unknown command STATUS",
    ],
)
def test_ras_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_status(text)


@dataclass
class RasServer:
    """A loopback server speaking the RAS client line protocol."""

    reply: str
    mode: str = "ok"  # ok | hang | refuse-format | close
    port: int = 0
    sessions: list[list[str]] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got: list[str] = []
        self.sessions.append(got)
        try:
            while True:
                line = (await reader.readline()).decode().strip()
                if not line:
                    return
                got.append(line)
                if self.mode == "close":
                    return
                cmd = line.upper()
                if cmd.startswith("CLIENT PROTOCOL"):
                    writer.write(b"SERVER PROTOCOL 2\n")
                elif cmd.startswith("SET FORMAT"):
                    writer.write(
                        b"ERROR: Invalid format json\n" if self.mode == "refuse-format" else b"OK\n"
                    )
                elif cmd.startswith("TIMEOUT"):
                    writer.write(b"OK\n")
                elif cmd == "STATUS":
                    if self.mode == "hang":
                        await asyncio.sleep(30)
                    # Sent in pieces, as a large document arrives.
                    body = self.reply.encode()
                    for i in range(0, len(body), 1000):
                        writer.write(body[i : i + 1000])
                        await writer.drain()
                    return
                await writer.drain()
        finally:
            writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def ras() -> AsyncIterator[RasServer]:
    s = RasServer((DATA / "ras_status_missing.json").read_text())
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


def collector(port: int, **kw: object) -> RasCollector:
    settings = build(
        RasSettings, {"address": f"127.0.0.1:{port}", "timeout": "3s", **kw}, prefix="c"
    )
    return RasCollector(settings, CollectorEnv(node="n"))


async def test_ras_collector_reports_missing_ranks(ras: RasServer) -> None:
    c = collector(ras.port)
    await c.start()
    v = values(await c.collect())
    assert ras.sessions[0] == ["CLIENT PROTOCOL 2", "SET FORMAT json", "TIMEOUT 5", "STATUS"]
    assert v[("fabricwatch_nccl_ras_up", ())] == 1.0
    assert v[("fabricwatch_nccl_ras_communicators", ())] == 2.0
    assert v[("fabricwatch_nccl_ras_ranks", ("missing",))] == 2.0
    assert v[("fabricwatch_nccl_ras_ranks", ("dead",))] == 1.0
    assert v[("fabricwatch_nccl_ras_missing_rank", ("10.0.1.17", "7", "15"))] == 2.0
    assert v[("fabricwatch_nccl_ras_missing_rank", ("10.0.1.17", "6", "14"))] == 1.0
    # Healthy again: no missing-rank series at all.
    ras.reply = (DATA / "ras_status_healthy.json").read_text()
    v = values(await c.collect())
    assert v[("fabricwatch_nccl_ras_ranks", ("missing",))] == 0.0
    assert not any(k[0] == "fabricwatch_nccl_ras_missing_rank" for k in v)
    await c.close()


async def test_ras_timeout_garbage_refusal_and_recovery(ras: RasServer) -> None:
    c = collector(ras.port, timeout="1.5s")
    ras.mode = "hang"
    with pytest.raises(CollectorError, match="did not answer within"):
        await c.collect()
    ras.mode = "refuse-format"
    with pytest.raises(CollectorError, match="Invalid format"):
        await c.collect()
    ras.mode = "close"
    with pytest.raises(CollectorError):
        await c.collect()
    ras.mode = "ok"
    ras.reply = "NCCL version 2.29.1\nJob summary\n"  # a text answer: an old NCCL
    with pytest.raises(ParseError):
        await c.collect()
    ras.reply = (DATA / "ras_status_missing.json").read_text()[:300]  # cut off
    with pytest.raises(ParseError):
        await c.collect()
    ras.reply = (DATA / "ras_status_healthy.json").read_text()
    assert values(await c.collect())[("fabricwatch_nccl_ras_up", ())] == 1.0


async def test_ras_nothing_listening_is_no_job_not_an_error(ras: RasServer) -> None:
    port = ras.port
    await ras.stop()
    c = collector(port)
    assert values(await c.collect()) == {("fabricwatch_nccl_ras_up", ()): 0.0}


def test_ras_address_is_validated() -> None:
    with pytest.raises(Exception, match="host:port"):
        build(RasSettings, {"address": "localhost"}, prefix="collectors.nccl_ras")
