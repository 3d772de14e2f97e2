"""Reading NCCL Inspector's textfile dumps."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fabricwatch.collector import CollectorEnv
from fabricwatch.errors import ParseError
from fabricwatch.readings import MetricSpec, Reading

from ._metrics import ALGO_BW, BUS_BW, EXEC_TIME, FILES, METRICS, NAME, RANKS
from ._settings import InspectorSettings

_GLOB = "nccl_inspector_metrics_*.prom"
_FILE_MAX = 8 << 20
_LINE = re.compile(r"^(nccl_[a-z_]+)\{(.*)\}\s+(\S+)\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_GPU = re.compile(r"^GPU(\d{1,3})$")
_FAMILIES = {
    "nccl_bus_bandwidth_gbs": "bus",
    "nccl_algorithm_bandwidth_gbs": "algo",
    "nccl_collective_exec_time_microseconds": "time",
}


@dataclass(frozen=True, slots=True)
class Sample:
    """One collective of one rank, as the Inspector dumped it."""

    comm: str
    rank: int
    nranks: int
    gpu: str
    collective: str
    sn: int
    bus_gbs: float | None = None
    algo_gbs: float | None = None
    exec_us: float | None = None


def _labels(block: str, source: str, lineno: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(block):
        m = _LABEL.match(block, pos)
        if m is None:
            raise ParseError(
                f"malformed labels {block[pos : pos + 40]!r}", source=source, line=lineno
            )
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def parse_inspector(lines: Iterable[str], *, source: str = "<inspector>") -> list[Sample]:
    """Samples of a dump: one per (communicator, rank, collective, sequence number),
    merging its three lines. :class:`ParseError` on a malformed line."""
    merged: dict[tuple[str, int, str, int], dict[str, object]] = {}
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"not an Inspector sample: {line[:60]!r}", source=source, line=lineno)
        family, block, value_text = m.groups()
        field_name = _FAMILIES.get(family)
        if field_name is None:
            continue  # a family a newer Inspector adds
        labels = _labels(block, source, lineno)
        try:
            value = float(value_text)
            rank = int(labels["rank"])
            nranks = int(labels.get("nranks", "0"))
            sn = int(labels.get("coll_sn", "0"))
        except (KeyError, ValueError):
            raise ParseError(
                f"bad number or missing rank in {line[:60]!r}", source=source, line=lineno
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ParseError(f"value out of range: {value_text!r}", source=source, line=lineno)
        gm = _GPU.match(labels.get("gpu_device_id", ""))
        if gm is None:
            raise ParseError("gpu_device_id is not GPU<n>", source=source, line=lineno)
        key = (labels.get("comm_id", ""), rank, labels.get("collective", ""), sn)
        entry = merged.setdefault(
            key, {"gpu": gm.group(1), "nranks": nranks, "comm": key[0], "collective": key[2]}
        )
        entry[field_name] = value
    out: list[Sample] = []
    for (comm, rank, coll, sn), e in merged.items():
        out.append(
            Sample(
                comm=comm,
                rank=rank,
                nranks=int(e["nranks"]),  # type: ignore[call-overload]
                gpu=str(e["gpu"]),
                collective=coll,
                sn=sn,
                bus_gbs=e.get("bus"),  # type: ignore[arg-type]
                algo_gbs=e.get("algo"),  # type: ignore[arg-type]
                exec_us=e.get("time"),  # type: ignore[arg-type]
            )
        )
    return out


def latest(samples: Iterable[Sample]) -> dict[tuple[str, str], Sample]:
    """Per (GPU, collective): the latest collective of the largest communicator (the
    job-wide one; tensor-parallel sub-communicators are smaller)."""
    best: dict[tuple[str, str], Sample] = {}
    for s in samples:
        k = (s.gpu, s.collective)
        cur = best.get(k)
        if cur is None or (s.nranks, s.sn) > (cur.nranks, cur.sn):
            best[k] = s
    return best


class InspectorCollector:
    """Reads the dump directory each interval (in a thread: it may be on a slow mount)."""

    def __init__(self, settings: InspectorSettings, env: CollectorEnv) -> None:
        self._s = settings
        self._env = env

    @property
    def name(self) -> str:
        """Registry name."""
        return NAME

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return METRICS

    async def start(self) -> None:
        """Nothing to open: a missing directory reads as no jobs running with Inspector."""

    async def close(self) -> None:
        """Nothing to close."""

    async def collect(self) -> Sequence[Reading]:
        """The latest collective per GPU and collective type."""
        return await asyncio.to_thread(self._collect)

    def _collect(self) -> list[Reading]:
        now = self._env.wall()
        samples: list[Sample] = []
        ok = bad = 0
        try:
            files = sorted(self._s.dump_dir.glob(_GLOB))
        except OSError:
            files = []
        for path in files:
            try:
                st = path.stat()
                if now - st.st_mtime > self._s.max_age:
                    continue
                with path.open("r", encoding="utf-8", errors="strict") as f:
                    text = f.read(_FILE_MAX)
            except (OSError, UnicodeDecodeError):
                bad += 1
                continue
            # The Inspector appends whole lines; a file caught mid-write ends in a
            # partial line, which is dropped, not an error.
            lines = text.split("\n")
            if not text.endswith("\n"):
                lines = lines[:-1]
            try:
                samples.extend(parse_inspector(lines, source=str(path)))
                ok += 1
            except ParseError:
                bad += 1
        out: list[Reading] = []
        rank_of: dict[str, int] = {}
        for (gpu, coll), s in sorted(latest(samples).items()):
            labels = (gpu, coll)
            if s.bus_gbs is not None:
                out.append(Reading(BUS_BW.name, labels, s.bus_gbs * 1e9))
            if s.algo_gbs is not None:
                out.append(Reading(ALGO_BW.name, labels, s.algo_gbs * 1e9))
            if s.exec_us is not None:
                out.append(Reading(EXEC_TIME.name, labels, s.exec_us / 1e6))
            rank_of[gpu] = max(rank_of.get(gpu, 0), s.nranks)
        out.extend(Reading(RANKS.name, (g,), float(n)) for g, n in sorted(rank_of.items()))
        out.append(Reading(FILES.name, ("ok",), float(ok)))
        out.append(Reading(FILES.name, ("invalid",), float(bad)))
        return out
