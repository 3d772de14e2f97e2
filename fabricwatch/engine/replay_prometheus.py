"""Replay's Prometheus source: raw samples over the HTTP API.

Range-vector instant queries (``/api/v1/query`` with ``{...}[window]``),
chunk by chunk, so replay sees the samples exactly as scraped (a
``query_range`` would resample them onto a step and fill gaps from the
5-minute lookback).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from fabricwatch.engine.replay_mapping import (
    SOURCE_NAME_REGEX,
    Mapper,
    ReplayError,
    Target,
    map_series,
)
from fabricwatch.engine.replay_openmetrics import parse_number


def _prom_get(url: str, params: dict[str, str], timeout: float) -> Any:
    full = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(params)
    if not full.startswith(("http://", "https://")):
        msg = f"Prometheus URL must be http(s): {url!r}"
        raise ReplayError(msg)
    try:
        with urllib.request.urlopen(full, timeout=timeout) as resp:  # noqa: S310 - scheme checked
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        msg = f"Prometheus at {url} answered HTTP {exc.code}: {detail}"
        raise ReplayError(msg) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        msg = f"cannot query Prometheus at {url}: {reason}"
        raise ReplayError(msg) from None
    try:
        doc = json.loads(body)
    except ValueError:
        msg = f"Prometheus at {url} did not answer JSON: {body[:80]!r}"
        raise ReplayError(msg) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        msg = f"Prometheus query failed: {err or 'unexpected answer'}"
        raise ReplayError(msg)
    return doc.get("data")


def prom_query(url: str, params: dict[str, str], timeout: float) -> Any:
    """One instant query (``/api/v1/query``): its ``data``; :class:`ReplayError` on failure."""
    return _prom_get(url, params, timeout)


def selector(matchers: Sequence[str]) -> str:
    """``["node=a", "job=~dcgm.*"]`` -> ``{__name__=~"...",node="a",job=~"dcgm.*"}``."""
    parts = [f'__name__=~"{SOURCE_NAME_REGEX}"']
    for m in matchers:
        found = re.fullmatch(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*(.*?)\s*", m)
        if found is None:
            msg = f"--match expects label=value (or =~, !=, !~), got {m!r}"
            raise ReplayError(msg)
        label, op, value = found.groups()
        value = value.strip('"').replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{label}{op}"{value}"')
    return "{" + ",".join(parts) + "}"


def fetch_prometheus(
    url: str,
    start: float,
    end: float,
    matchers: Sequence[str],
    mapper: Mapper,
    *,
    chunk: float = 3600.0,
    timeout: float = 30.0,
    progress: Callable[[float], None] | None = None,
) -> None:
    """Fetch raw samples in ``[start, end]`` chunk by chunk into ``mapper``."""
    if end <= start:
        msg = f"--to ({end}) must be after --from ({start})"
        raise ReplayError(msg)
    sel = selector(matchers)
    cache: dict[tuple[str, tuple[tuple[str, str], ...]], Target | None] = {}
    lo = start - 0.001  # range vectors are left-open
    while lo < end:
        hi = min(end, lo + chunk)
        width_ms = max(1, round((hi - lo) * 1000))
        data = _prom_get(url, {"query": f"{sel}[{width_ms}ms]", "time": f"{hi:.3f}"}, timeout)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            msg = "Prometheus answered no matrix for a range-vector query"
            raise ReplayError(msg)
        for series in data.get("result", []):
            metric = dict(series.get("metric", {}))
            name = metric.pop("__name__", "")
            key = (name, tuple(sorted(metric.items())))
            if key not in cache:
                cache[key] = map_series(name, metric)
            target = cache[key]
            for ts, value in series.get("values", []):
                try:
                    mapper.add(target, name, float(ts), parse_number(value))
                except (TypeError, ValueError):
                    msg = f"Prometheus returned a malformed sample for {name}: {[ts, value]!r}"
                    raise ReplayError(msg) from None
        if progress is not None:
            progress(hi - lo)
        lo = hi
