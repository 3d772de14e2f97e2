"""The OpenMetrics fast path gives exactly what the strict parser gives."""

from __future__ import annotations

import io
import random
import re
from typing import Any

import pytest

from fabricwatch.engine import replay_openmetrics
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.errors import ParseError
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten

from .test_replay import exporter_names


def outcome(text: str, *, fast: bool) -> tuple[Any, ...]:
    """Everything a parse leaves behind, or the error it raised."""
    m = Mapper()
    try:
        parse_openmetrics(io.StringIO(text), m, source="t.om", fast=fast)
    except ParseError as exc:
        return ("error", str(exc), exc.line)
    return ("ok", m.finish(), m.ignored, m.samples)


def test_fast_and_strict_agree_on_a_recorded_suite() -> None:
    sc = Scenario(
        duration=120,
        injections=[Injection("pfc_storm", 40, 20), Injection("gpu_fault", 80, 20, target=2)],
        seed=8,
    )
    for rename in (None, exporter_names):
        buf = io.StringIO()
        write_openmetrics(flatten(sc), buf.write, rename=rename)
        fast = outcome(buf.getvalue(), fast=True)
        assert fast[0] == "ok" and len(fast[1]) > 5000
        assert fast == outcome(buf.getvalue(), fast=False)


class _CountingPattern:
    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, line: str) -> re.Match[str] | None:
        self.calls += 1
        return self.pattern.match(line)


def test_repeated_series_skip_the_strict_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _CountingPattern(replay_openmetrics._LINE)
    monkeypatch.setattr(replay_openmetrics, "_LINE", counting)
    lines = [f'fabricwatch_gpu_power_watts{{gpu="0"}} {100 + i} {1000 + i}\n' for i in range(500)]
    lines += [f'fabricwatch_gpu_sm_active_ratio{{gpu="0"}} 0.5 {2000 + i}\n' for i in range(500)]
    m = Mapper()
    parse_openmetrics(iter(lines), m)
    assert len(m.finish()) == 1000 and m.samples == 1000
    assert counting.calls == 2  # the first line of each series


# Building blocks of nasty documents: valid lines of a few series, odd
# spacing, tabs and other whitespace, exemplars, comments, bad numbers, ms
# timestamps, NaN/Inf, unknown names, EOF and content after it.
_SERIES = [
    'fabricwatch_gpu_power_watts{gpu="0"}',
    'fabricwatch_gpu_power_watts{gpu="1",extra="a b"}',
    'fabricwatch_nic_transmit_bytes_total{device="mlx5_0",port="1"}',
    'DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="0"}',
    'fabricwatch_storage_write_latency_seconds{path="a\\"b}"}',
    "unmapped_metric",
    'fabricwatch_gpu_power_watts{gpu="0"',
]
_VALUES = [
    "1",
    "2.5",
    "NaN",
    "+Inf",
    "-3",
    "1e3",
    "0x10",
    "1_0",
    "one",
    "",
    "\t7",
    "8\x0b",
    "9\xa0",
]
_ODD_TIMES = ["99", "1700000000000", "inf", "nan", "", '1 # {a="b"} 1', "\t1", "1\x0c", "-inf"]
_OTHER = ["# TYPE fabricwatch_gpu_power_watts gauge", "# HELP x y", "# TYPE", "", "   ", "# EOF"]


def document(r: random.Random) -> str:
    lines: list[str] = []
    t = 100
    for _ in range(r.randint(1, 30)):
        if r.random() < 0.05:
            lines.append(r.choice(_OTHER))
            continue
        t += r.choice((0, 1, 1, 1, 2))
        good = r.random() < 0.95
        lines.append(
            r.choice(_SERIES[:2] if r.random() < 0.6 else _SERIES)
            + (" " if good else r.choice([" ", "  ", "\t", " \x0b"]))
            + ("1.5" if good else r.choice(_VALUES))
            + (" " if good else r.choice([" ", "\t ", "", "\x0b"]))
            + (str(t) if good or r.random() < 0.5 else r.choice(_ODD_TIMES))
            + ("" if good else r.choice(["", "\r", " ", "\t"]))
        )
    return "\n".join(lines) + r.choice(["", "\n"])


def test_fast_and_strict_agree_on_garbage() -> None:
    r = random.Random(1234)
    errors = 0
    for _ in range(3000):
        text = document(r)
        fast = outcome(text, fast=True)
        assert fast == outcome(text, fast=False), text
        errors += fast[0] == "error"
    assert 300 < errors < 2700  # both outcomes well represented


def _run_document(r: random.Random, n: int = 400) -> list[str]:
    """A long run of one series, as exporters and promtool write them."""
    series = r.choice(_SERIES[:5])
    return [f"{series} {r.uniform(0, 1e6)!r} {1000 + i}" for i in range(n)]


_BAD_IN_RUN = [
    "{s} 0x10 {t}",
    "{s} inf {t}",
    '{s} 1 {t} # {{a="b"}} 1',  # exemplar
    "{s}  1 {t}",  # two spaces
    "{s} 1\t{t}",
    "{s} 1 {t}\r",
    "{s} 1",  # no timestamp
    "{s} 1 1e999",  # infinite timestamp
    "{s} 1 5",  # time goes back
    "{s} 1..2 {t}",
    "{s} 1-2 {t}",
    "{s} 1e {t}",
    "{s} . {t}",
    "{s} 1 {t} 3",
    "# a comment in the middle",
    "",
    "# EOF",
    "{s} 1 {t}000",  # milliseconds: still in order
    "{s} NaN {t}",
]


def test_fast_path_agrees_with_strict_on_bad_lines_inside_runs() -> None:
    r = random.Random(99)
    for case in range(400):
        lines = _run_document(r, r.randint(2, 300))
        series = lines[0].rsplit(" ", 2)[0]
        for _ in range(r.randint(1, 2)):
            at = r.randrange(len(lines))
            t = lines[at].rsplit(" ", 1)[1]
            lines.insert(at, r.choice(_BAD_IN_RUN).format(s=series, t=t))
        text = "\n".join(lines) + "\n"
        fast = outcome(text, fast=True)
        assert fast == outcome(text, fast=False), (case, text[:300])
