"""The NCCL RAS client and its JSON status parser."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fabricwatch.collector import CollectorEnv
from fabricwatch.errors import CollectorError, ParseError
from fabricwatch.readings import MetricSpec, Reading

from ._metrics import COMMS, METRICS, MISSING, MISSING_SHOWN, NAME, RANKS, UP
from ._settings import RasSettings

_PROTOCOL = 2
_REPLY_MAX = 16 << 20


class RasUnreachableError(CollectorError):
    """Nothing listens on the RAS port: no NCCL job runs on this node now."""


@dataclass(frozen=True, slots=True)
class MissingRank:
    """One rank RAS could not reach."""

    rank: int
    host: str
    cuda_dev: int
    unresponsive: bool
    dead: bool


@dataclass(frozen=True, slots=True)
class RasStatus:
    """What one STATUS answer says."""

    communicators: int
    responding: int
    missing: tuple[MissingRank, ...]


def _int(v: Any, what: str, source: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ParseError(f"{what}: expected an integer, got {v!r}"[:120], source=source)
    return v


def parse_status(text: str, *, source: str = "<ras>") -> RasStatus:
    """The JSON status document (``SET FORMAT json`` then ``STATUS``)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}", source=source) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise ParseError("no communicators list (not a RAS JSON status)", source=source)
    responding = 0
    missing: list[MissingRank] = []
    comms = doc["communicators"]
    for c in comms:
        if not isinstance(c, dict):
            raise ParseError("a communicator is not an object", source=source)
        ranks = c.get("ranks", [])
        miss = c.get("missing_ranks", [])
        if not isinstance(ranks, list) or not isinstance(miss, list):
            raise ParseError("ranks / missing_ranks: expected lists", source=source)
        responding += len(ranks)
        for m in miss:
            if not isinstance(m, dict):
                raise ParseError("a missing rank is not an object", source=source)
            st = m.get("status") or {}
            if not isinstance(st, dict):
                raise ParseError("missing rank status: expected an object", source=source)
            missing.append(
                MissingRank(
                    rank=_int(m.get("rank"), "rank", source),
                    host=str(m.get("host") or "unknown")[:64],
                    cuda_dev=_int(m.get("cuda_dev", -1), "cuda_dev", source),
                    unresponsive=st.get("unresponsive") is True,
                    dead=st.get("considered_dead") is True,
                )
            )
    return RasStatus(len(comms), responding, tuple(missing))


async def query_status(host: str, port: int, *, query_timeout: float, limit: float) -> str:
    """One RAS client session: protocol handshake, JSON format, timeout, STATUS; the
    server sends the document and closes. :class:`CollectorError` on failure."""

    async def session() -> str:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for cmd, want in (
                (f"CLIENT PROTOCOL {_PROTOCOL}", "SERVER PROTOCOL"),
                ("SET FORMAT json", "OK"),
                (f"TIMEOUT {query_timeout:g}", "OK"),
            ):
                writer.write(f"{cmd}\n".encode())
                await writer.drain()
                line = (await reader.readline()).decode("utf-8", "replace").strip()
                if not line.upper().startswith(want):
                    msg = f"RAS at {host}:{port} answered {line[:80]!r} to {cmd.split()[0]}"
                    raise CollectorError(msg)
            writer.write(b"STATUS\n")
            await writer.drain()
            body = await reader.read(_REPLY_MAX + 1)
            buf = bytearray(body)
            while body and len(buf) <= _REPLY_MAX:
                body = await reader.read(_REPLY_MAX + 1 - len(buf))
                buf += body
            if len(buf) > _REPLY_MAX:
                msg = f"RAS status from {host}:{port} exceeds {_REPLY_MAX} bytes"
                raise CollectorError(msg)
            return buf.decode("utf-8", "replace")
        finally:
            writer.close()
            with contextlib.suppress(OSError):  # already reset by the peer
                await writer.wait_closed()

    try:
        return await asyncio.wait_for(session(), limit)
    except TimeoutError:
        msg = f"RAS at {host}:{port} did not answer within {limit:g} s"
        raise CollectorError(msg) from None
    except ConnectionRefusedError:
        msg = f"nothing listens on {host}:{port} (no NCCL job running here)"
        raise RasUnreachableError(msg) from None
    except OSError as exc:
        msg = f"cannot reach NCCL RAS at {host}:{port}: {exc.strerror or exc}"
        raise CollectorError(msg) from None


class RasCollector:
    """Queries RAS each interval; no job running reads as ``up`` 0, not as an error."""

    def __init__(self, settings: RasSettings, env: CollectorEnv) -> None:
        self._s = settings
        self._env = env
        host, _, port = settings.address.rpartition(":")
        self._host = host.strip("[]")
        self._port = int(port)

    @property
    def name(self) -> str:
        """Registry name."""
        return NAME

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return METRICS

    async def start(self) -> None:
        """Nothing to open: a session per query."""

    async def close(self) -> None:
        """Nothing to close."""

    async def collect(self) -> Sequence[Reading]:
        """Counts by state and the missing ranks."""
        try:
            text = await query_status(
                self._host,
                self._port,
                query_timeout=self._s.query_timeout,
                limit=max(0.5, self._s.timeout - 0.5),
            )
        except RasUnreachableError:
            return [Reading(UP.name, (), 0.0)]  # no NCCL process listening: no job
        st = parse_status(text, source=f"RAS {self._s.address}")
        unresponsive = sum(m.unresponsive for m in st.missing)
        dead = sum(m.dead for m in st.missing)
        out = [
            Reading(UP.name, (), 1.0),
            Reading(COMMS.name, (), float(st.communicators)),
            Reading(RANKS.name, ("responding",), float(st.responding)),
            Reading(RANKS.name, ("missing",), float(len(st.missing))),
            Reading(RANKS.name, ("unresponsive",), float(unresponsive)),
            Reading(RANKS.name, ("dead",), float(dead)),
        ]
        seen: set[tuple[str, str, str]] = set()
        for m in st.missing:
            labels = (m.host, str(m.cuda_dev), str(m.rank))
            if labels in seen or len(seen) >= MISSING_SHOWN:
                continue
            seen.add(labels)
            out.append(Reading(MISSING.name, labels, 2.0 if m.dead else 1.0))
        return out
