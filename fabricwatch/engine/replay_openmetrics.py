"""Replay's OpenMetrics text: the strict parser with its fast path, and the writer."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Mapper, map_series
from fabricwatch.errors import ParseError
from fabricwatch.readings import MetricKind, Reading

_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)(?:[ \t]+(\S+))?'
    r"(?:[ \t]+#.*)?[ \t]*$"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPES = re.compile(r"\\(.)")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPES.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_labels(block: str) -> dict[str, str]:
    """``a="1",b="x\\"y"`` -> {"a": "1", "b": 'x"y'}; ValueError on garbage."""
    out: dict[str, str] = {}
    pos = 0
    block = block.strip()
    while pos < len(block):
        m = _LABEL.match(block, pos)
        if m is None or m.end() == pos:
            msg = f"bad label set near {block[pos : pos + 30]!r}"
            raise ValueError(msg)
        if m.group(1) in out:
            msg = f"duplicate label {m.group(1)!r}"
            raise ValueError(msg)
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def parse_number(text: str) -> float:
    """An OpenMetrics sample value (``NaN``, ``+Inf``, ``-Inf`` in any case); ValueError else."""
    low = text.lower()
    if low in ("nan", "+inf", "inf", "-inf"):
        return float(low)
    return float(text)


MAX_LINE_CHARS = 1 << 20
"""Longest OpenMetrics line accepted (1 Mi characters; real ones are under 1 KiB)."""
MAX_SPAN_DAYS = 92.0
"""Widest time span one input may cover: the engine ticks every second of it."""


def read_lines(stream: IO[str]) -> Iterator[str]:
    """Lines of a text stream, none read past :data:`MAX_LINE_CHARS` (+1, so the
    parser can say so): one 50 MB line costs 1 MiB, not gigabytes. Open files
    with ``errors="surrogateescape"``: the parser then names the line of bad UTF-8."""
    return iter(partial(stream.readline, MAX_LINE_CHARS + 1), "")


def _check_line(line: str, source: str, lineno: int) -> None:
    """Raise for an over-long line or one that was not UTF-8 (surrogate escapes)."""
    if len(line) > MAX_LINE_CHARS:
        raise ParseError(
            f"line longer than {MAX_LINE_CHARS} characters: not OpenMetrics text",
            source=source,
            line=lineno,
        )
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ParseError(
            f"not UTF-8 text (character {exc.start + 1} of the line)", source=source, line=lineno
        ) from None


def check_span(lo: float, hi: float, source: str, line: int | None = None) -> None:
    """Refuse inputs whose samples span more than :data:`MAX_SPAN_DAYS`."""
    days = (hi - lo) / 86400.0
    if days > MAX_SPAN_DAYS:
        raise ParseError(
            f"samples span {days:.0f} days (timestamps {lo:.0f} to {hi:.0f}), more than "
            f"{MAX_SPAN_DAYS:.0f}: a timestamp is far from the others (the earliest is on "
            "the line given); fix or drop it, or split the input",
            source=source,
            line=line,
        )


@dataclass(slots=True)
class _Seen:
    """What one parse has seen, shared by the fast and the strict path."""

    # series text -> [target, last timestamp, source name]
    known: dict[str, list[Any]] = field(default_factory=dict)
    eof: bool = False
    lo: float = math.inf  # earliest sample: the first of some series (time never goes back)
    lo_line: int = 0


def _comment(line: str, source: str, lineno: int) -> bool:
    """Check a ``#`` line; True for ``# EOF``."""
    if line.strip() == "# EOF":
        return True
    if line.split(None, 2)[1:2] in (["TYPE"], ["HELP"], ["UNIT"]):
        parts = line.split(None, 3)
        if len(parts) < 3 or not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", parts[2]):
            raise ParseError(f"malformed {parts[1]} line", source=source, line=lineno)
    return False


def _strict(line: str, lineno: int, seen: _Seen, mapper: Mapper, source: str) -> bool:
    """One line through the strict parser; True when it registered a new series."""
    if seen.eof:
        if line.strip():
            raise ParseError("content after '# EOF'", source=source, line=lineno)
        return False
    if not line or line.isspace():
        return False
    if line[0] == "#":
        seen.eof = _comment(line, source, lineno)
        return False
    m = _LINE.match(line)
    if m is None:
        raise ParseError(f"not a sample line: {line[:60]!r}", source=source, line=lineno)
    name, block, value_text, ts_text = m.groups()
    if ts_text is None:
        raise ParseError(
            f"sample of {name} has no timestamp (replay needs timestamps)",
            source=source,
            line=lineno,
        )
    try:
        value = parse_number(value_text)
        ts = float(ts_text)
    except ValueError:
        raise ParseError(f"bad number in {line[:60]!r}", source=source, line=lineno) from None
    if not math.isfinite(ts):
        raise ParseError("timestamp is not finite", source=source, line=lineno)
    if ts > 1e11:
        ts /= 1000.0  # Prometheus text format: milliseconds
    key = name + (block or "")
    st = seen.known.get(key)
    new = st is None
    if st is None:
        try:
            labels = parse_labels(block[1:-1]) if block else {}
        except ValueError as exc:
            raise ParseError(str(exc), source=source, line=lineno) from None
        st = seen.known[key] = [map_series(name, labels), -math.inf, name]
        if ts < seen.lo:
            seen.lo, seen.lo_line = ts, lineno
    if ts < st[1]:
        raise ParseError(
            f"timestamp of {name} goes back in time ({ts} < {st[1]})",
            source=source,
            line=lineno,
        )
    st[1] = ts
    mapper.add(st[0], name, ts, value)
    return new


def parse_openmetrics(
    lines: Iterable[str], mapper: Mapper, *, source: str = "<input>", fast: bool = True
) -> tuple[float, float] | None:
    """Parse OpenMetrics text with timestamps into ``mapper``.

    Most lines take a fast path: a series already validated by the strict
    parser is recognised by its exact text (``name{labels}``), and the value
    and timestamp are the last two space-separated fields. Anything else
    (comments, new series, exemplars, odd spacing, bad numbers, time going
    back) goes through the strict parser, so both accept exactly the same
    input and errors always come from the strict one.

    Args:
        fast: use the fast path (False: every line through the strict
            parser; same result, for tests and comparisons).

    Returns:
        The earliest and latest sample timestamp (None without samples).

    Raises:
        ParseError: with ``source`` and the 1-based line number, for a
            malformed line, a sample without timestamp, a series going back in
            time, content after ``# EOF``, a line over :data:`MAX_LINE_CHARS`,
            text that is not UTF-8, or samples spanning more than
            :data:`MAX_SPAN_DAYS`.
    """
    seen = _Seen()
    known = seen.known
    add = mapper.add
    out = mapper.out
    isfinite = math.isfinite
    n_fast = 0
    prev_series = ""
    entry: list[Any] | None = None
    lineno = 0
    limit = MAX_LINE_CHARS
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > limit or not raw.isascii():
            _check_line(raw.rstrip("\r\n"), source, lineno)
        line = raw.rstrip("\r\n")
        if fast and not seen.eof:
            head, _, ts_text = line.rpartition(" ")
            series, _, value_text = head.rpartition(" ")
            if series != prev_series:
                entry = known.get(series)
                prev_series = series
            if entry is not None and value_text.isprintable() and ts_text.isprintable():
                try:
                    value = float(value_text)
                    ts = float(ts_text)
                except ValueError:
                    pass
                else:
                    if ts > 1e11:
                        ts /= 1000.0
                    if ts >= entry[1] and ts != math.inf:
                        entry[1] = ts
                        target = entry[0]
                        if target is not None and target.transform == "copy":
                            n_fast += 1
                            if isfinite(value):
                                out.append((ts, target.family, target.labels, value * target.scale))
                        else:
                            add(target, entry[2], ts, value)
                        continue
        if _strict(line, lineno, seen, mapper, source):
            prev_series = ""  # the fast path's memo may hold a miss for this text
    mapper.samples += n_fast
    if lineno == 0:
        raise ParseError("empty input", source=source)
    if not known or seen.lo == math.inf:
        return None
    hi = max(e[1] for e in known.values())
    check_span(seen.lo, hi, source, seen.lo_line)
    return seen.lo, hi


def write_openmetrics(
    samples: Iterable[Reading],
    out: Callable[[str], Any],
    *,
    rename: Callable[[str, tuple[str, ...]], tuple[str, dict[str, str], float] | None]
    | None = None,
    extra_labels: dict[str, str] | None = None,
) -> int:
    """Write readings as OpenMetrics text with timestamps, grouped by family.

    ``rename`` may turn a reading into another exporter's name, labels and
    value (used by tests to produce dcgm-exporter / node_exporter names).
    Returns the number of samples written.
    """
    fams: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    kinds: dict[str, str] = {}
    extra = extra_labels or {}
    for r in samples:
        spec = sig.SIGNAL_SPECS[r.name]
        ts = r.ts if r.ts is not None else 0.0
        if rename is not None:
            renamed = rename(r.name, r.labels)
            if renamed is None:
                continue
            name, labels, factor = renamed
            value = r.value * factor
            kind = "unknown"
        else:
            labels = dict(zip(spec.labels, r.labels, strict=True))
            kind = spec.kind.value
            name = spec.name + ("_total" if spec.kind is MetricKind.COUNTER else "")
            value = r.value
        family = name[:-6] if kind == "counter" else name
        kinds[family] = kind
        key = tuple(sorted({**labels, **extra}.items()))
        fams.setdefault(family, {}).setdefault((("__name__", name), *key), []).append((ts, value))
    n = 0
    for family, series in fams.items():
        out(f"# TYPE {family} {kinds[family]}\n")
        for key, points in series.items():
            name = key[0][1]
            text = ",".join(
                f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                for k, v in key[1:]
            )
            prefix = f"{name}{{{text}}}" if text else name
            for ts, value in points:
                out(f"{prefix} {value!r} {ts!r}\n")
                n += 1
    out("# EOF\n")
    return n


def read_files(
    paths: Sequence[str], mapper: Mapper, open_text: Callable[[str], Iterator[str]]
) -> None:
    """Parse several OpenMetrics files (``-`` is standard input) into ``mapper``."""
    lo, hi = math.inf, -math.inf
    for path in paths:
        span = parse_openmetrics(open_text(path), mapper, source=path)
        if span is not None:
            lo, hi = min(lo, span[0]), max(hi, span[1])
    if hi >= lo:
        check_span(lo, hi, ", ".join(paths))
