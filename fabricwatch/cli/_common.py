"""Helpers shared by the ``incidents`` and ``replay`` commands: times, tables, errors."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from fabricwatch.settings import parse_duration


def parse_time(text: str, *, now: float | None = None) -> float:
    """``now``, ``-2h`` / ``2h`` (ago), unix seconds or RFC 3339 -> unix seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    if t == "now":
        return now
    if re.fullmatch(r"-?[0-9.]+(ms|s|m|h|d)", t):
        return now - parse_duration(t.lstrip("-"))
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
        return float(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        msg = f"expected now, a duration ago (24h), unix seconds or RFC 3339, got {text!r}"
        raise ValueError(msg) from None
    if dt.tzinfo is None:
        msg = f"RFC 3339 time needs a zone (Z or +hh:mm): {text!r}"
        raise ValueError(msg)
    return dt.timestamp()


def print_table(docs: Sequence[dict[str, Any]], out: TextIO) -> None:
    """Incidents as a fixed-width table (newest first as given)."""
    if not docs:
        out.write("no incidents\n")
        return
    rows = [("ONSET (UTC)", "STATE", "CAUSE", "CONF", "DURATION", "GPUS", "CULPRIT", "KEY")]
    for d in docs:
        onset = (d.get("onset") or "")[:19].replace("T", " ")
        gpus = d.get("gpus") or []
        rows.append(
            (
                onset,
                str(d.get("state")),
                str(d.get("cause")),
                f"{float(d.get('confidence') or 0):.2f}",
                f"{float(d.get('duration_seconds') or 0):.0f}s",
                ",".join(gpus) if len(gpus) <= 4 else f"{len(gpus)} GPUs",
                str((d.get("culprit") or {}).get("key") or "-"),
                str(d.get("key")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    for d in docs:
        out.write(f"\n{d.get('key')}: {d.get('summary')}\n")


def print_json(docs: Sequence[dict[str, Any]], out: TextIO) -> None:
    """Incidents as a JSON array."""
    json.dump(list(docs), out, indent=2, sort_keys=True)
    out.write("\n")


def err(message: str) -> None:
    """An error line for people on stderr."""
    sys.stderr.write(f"fabricwatch: error: {message}\n")
