"""Replay input bounds: spans, line length, UTF-8 errors with file and line, and
a fuzzed parser that only ever raises ParseError (issue 17, item 10)."""

from __future__ import annotations

import io
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import (
    MAX_LINE_CHARS,
    MAX_SPAN_DAYS,
    parse_openmetrics,
    read_files,
    read_lines,
)
from fabricwatch.errors import ParseError

NAME = 'DCGM_FI_PROF_SM_ACTIVE{gpu="0",Hostname="n1"}'


def _parse(text: str, source: str = "t.om") -> tuple[float, float] | None:
    return parse_openmetrics(io.StringIO(text), Mapper(), source=source)


def test_a_span_far_beyond_the_data_is_refused_with_the_line() -> None:
    text = f"{NAME} 0.5 1\n{NAME} 0.5 99999999999\n# EOF\n"
    with pytest.raises(ParseError, match=r"t\.om:1: samples span \d+ days") as info:
        _parse(text)
    assert info.value.line == 1


def test_spans_within_the_limit_are_fine_and_reported() -> None:
    hi = 1_700_000_000 + (MAX_SPAN_DAYS - 1) * 86400
    assert _parse(f"{NAME} 0.5 1700000000\n{NAME} 0.5 {hi:.0f}\n") == (1_700_000_000, hi)


def test_the_span_counts_across_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.om", tmp_path / "b.om"
    a.write_text(f"{NAME} 0.5 1700000000\n")
    b.write_text(f"{NAME.replace('0', '1', 1)} 0.5 1900000000\n")
    with pytest.raises(ParseError, match="samples span"):
        read_files([str(a), str(b)], Mapper(), lambda p: read_lines(Path(p).open()))  # noqa: SIM115


def test_an_endless_line_is_cut_at_the_cap_with_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "big.om"
    with p.open("w") as f:
        f.write(f"{NAME} 0.5 1700000000\n")
        f.write("x" * (8 * MAX_LINE_CHARS) + " 1 1700000001\n")
    tracemalloc.start()
    try:
        with (
            p.open(encoding="utf-8", errors="surrogateescape") as f,
            pytest.raises(ParseError, match=rf"{p}:2: line longer than"),
        ):
            parse_openmetrics(read_lines(f), Mapper(), source=str(p))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MAX_LINE_CHARS  # the 8 MiB line was never held whole (x chars, utf-8)


def test_bad_utf8_names_the_file_and_line_through_the_cli(tmp_path: Path) -> None:
    p = tmp_path / "bad.om"
    p.write_bytes(f"{NAME} 0.5 1700000000\n".encode() * 3 + b'x{a="\xff\xfe"} 1 1700000005\n')
    res = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "replay", str(p)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr  # unusable input: ExitCode.FAILURE
    assert f"{p}:4: not UTF-8 text" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("fleet", [False, True])
def test_an_endless_config_file_is_a_clear_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet: bool
) -> None:
    from fabricwatch.cli import main

    p = tmp_path / "ok.om"
    p.write_text(f"{NAME} 0.5 1700000000\n")
    args = ["replay", *(["--fleet"] if fleet else []), "--config", "/dev/zero", str(p)]
    tracemalloc.start()
    try:
        assert main(args) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "larger than" in capsys.readouterr().err
    assert peak < 64 * 1024 * 1024  # read up to the cap, not until memory runs out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=120), max_size=20))
def test_fuzzed_input_only_ever_raises_parse_error(lines: list[bytes]) -> None:
    text = b"\n".join(lines).decode("utf-8", "surrogateescape")
    try:
        span = _parse(text)
    except ParseError as exc:
        assert str(exc).startswith("t.om")
    else:
        assert span is None or span[1] - span[0] <= MAX_SPAN_DAYS * 86400


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0, 4e9, allow_nan=False), min_size=1, max_size=30),
    st.sampled_from(["0.5", "NaN", "+Inf", "1e3"]),
)
def test_span_rule_holds_for_any_timestamps(stamps: list[float], value: str) -> None:
    stamps = sorted(stamps)
    text = "".join(f"{NAME} {value} {t!r}\n" for t in stamps)
    wide = stamps[-1] - stamps[0] > MAX_SPAN_DAYS * 86400
    try:
        span = _parse(text)
    except ParseError as exc:
        assert wide and "samples span" in str(exc)
    else:
        assert not wide and span == (stamps[0], stamps[-1])
