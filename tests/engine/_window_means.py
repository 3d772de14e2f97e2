"""The reference the window readers' tests compare against: the windows of
``signals.chunk_spans`` and the plain mean of the points inside each, written
out without the readers' bisections."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from fabricwatch.engine import signals as sig


def spans(now: float, w: float, chunks: int) -> list[tuple[float, float]]:
    """The latest window, then ``chunks`` earlier ones, each ending 1 ms short of the next."""
    return [(now - w, now)] + [(now - (j + 2) * w, now - (j + 1) * w - 1e-3) for j in range(chunks)]


def means(per_span: Iterable[Sequence[float]]) -> list[float] | None:
    """The mean of each span's values, latest first: None where the latest
    has under two, NaN where an earlier one has under ``enough_points`` (a gap)."""
    out: list[float] = []
    need = 2
    for vals in per_span:
        if len(vals) < need:
            if not out:
                return None
            out.append(math.nan)
            continue
        if not out:
            need = sig.enough_points(len(vals))
        out.append(sum(vals) / len(vals))
    return out
