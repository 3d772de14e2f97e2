"""The kept-layout fast path of ``ethtool -S`` dumps gives what the line parser gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.collectors.nic import _ethtool
from fabricwatch.collectors.nic._ethtool import (
    DirEthtoolSource,
    EthtoolTextParser,
    parse_ethtool_text,
)
from fabricwatch.errors import ParseError


def _outcome(parse: Callable[[str, str], dict[str, int]], text: str) -> tuple[str, object]:
    """What parsing ``text`` gives: the statistics (in order) or the error message."""
    try:
        got = parse(text, "dump")
    except ParseError as exc:
        return "error", str(exc)
    return "ok", list(got.items())


def _dump(names: list[str], values: list[int], *, header: bool = True, eol: str = "\n") -> str:
    lines = ["NIC statistics:"] if header else []
    lines += [f"     {n}: {v}" for n, v in zip(names, values, strict=True)]
    return eol.join(lines) + eol


NAMES = ["rx_bytes", "tx_bytes", "rx_prio3_pause", "tx_prio3_pause", "rx_prio3_pause_duration"]


@pytest.mark.parametrize(
    "texts",
    [
        # same layout, values growing, changing width, reset to 0
        [_dump(NAMES, [1, 2, 3, 4, 5]), _dump(NAMES, [10, 2000, 3, 4, 5]), _dump(NAMES, [0] * 5)],
        # layout changes: a name added, removed, reordered, renamed
        [
            _dump(NAMES, [1] * 5),
            _dump([*NAMES, "rx_drops"], [2] * 6),
            _dump(NAMES[1:], [3] * 4),
            _dump(NAMES[::-1], [4] * 5),
            _dump(["rx_bytez", *NAMES[1:]], [5] * 5),
            _dump(NAMES, [6] * 5),
        ],
        # garbage, truncated mid-line and mid-value, signs, fractions, then recovery
        [
            _dump(NAMES, [1] * 5),
            _dump(NAMES, [2] * 5)[:-30],
            _dump(NAMES, [2] * 5).replace(": 2\n", ":\n", 1),
            _dump(NAMES, [3] * 5).replace(": 3", ": -3", 1),
            _dump(NAMES, [3] * 5).replace(": 3", ": 3.5", 1),
            _dump(NAMES, [3] * 5).replace(": 3", ": 3 4", 1),
            "\x00\x01garbage",
            "",
            _dump(NAMES, [4] * 5),
        ],
        # comments, blank lines, section headers, CRLF, tabs, no header
        [
            "# ethtool -S eth0\n\nNIC statistics:\n\trx_bytes:\t7  \r\nStandard stats for eth0:\n",
            "# ethtool -S eth0\n\nNIC statistics:\n\trx_bytes:\t8  \r\nStandard stats for eth0:\n",
            "# ethtool -S eth0\n\nNIC statistics:\n\trx_bytes:\t9  \nStandard stats for eth0:\n",
            _dump(NAMES, [1] * 5, header=False, eol="\r\n"),
            _dump(NAMES, [2] * 5, header=False, eol="\r\n"),
        ],
        # a name twice (the later value wins, at the first one's place); non-ASCII digits
        [
            "a: 1\nb: 2\na: 3\n",
            "a: 4\nb: 5\na: 6\n",
            "a: \u0663\nb: 5\n",
            "a: 7\nb: 5\n",
            "a: \u0664\nb: 5\n",
        ],
        # colons inside names, values after the last colon
        ["ch0:rx: 1\nport::x: 2\n", "ch0:rx: 11\nport::x: 22\n", "ch0:rx 3\nport::x: 4\n"],
    ],
)
def test_parser_equals_line_parser_over_sequences(texts: list[str]) -> None:
    parser = EthtoolTextParser()
    for text in texts:
        assert _outcome(parser.parse, text) == _outcome(parse_ethtool_text, text), text


_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789: #", min_size=0, max_size=12)
_LINE = st.one_of(
    st.tuples(_NAME, st.integers(0, 2**64 - 1)).map(lambda nv: f"  {nv[0]}: {nv[1]}"),
    st.sampled_from(["", "NIC statistics:", "# comment: 5", "garbage", "x: ", " : 3", "y: -1"]),
)


@settings(max_examples=120, deadline=None)
@given(
    layout=st.lists(_LINE, max_size=12),
    edits=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 2**64 - 1), st.booleans()), max_size=8
    ),
)
def test_parser_equals_line_parser_property(
    layout: list[str], edits: list[tuple[int, int, bool]]
) -> None:
    """Dumps that keep or break the first one's layout, value by value."""
    parser = EthtoolTextParser()
    lines = list(layout)
    texts = ["\n".join(lines) + "\n"]
    for index, value, truncate in edits:
        if not lines:
            break
        i = index % len(lines)
        name, sep, _ = lines[i].rpartition(":")
        if sep:
            lines[i] = f"{name}: {value}"
        text = "\n".join(lines) + "\n"
        texts.append(text[: len(text) // 2] if truncate else text)
    for text in texts:
        assert _outcome(parser.parse, text) == _outcome(parse_ethtool_text, text), text


def test_same_layout_skips_the_line_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = _ethtool.parse_ethtool_text

    def counted(text: str, source: str = "") -> dict[str, int]:
        calls.append(source)
        return real(text, source)

    monkeypatch.setattr(_ethtool, "parse_ethtool_text", counted)
    parser = EthtoolTextParser()
    for k in range(5):
        assert parser.parse(_dump(NAMES, [k * 1000] * 5), "eth0") == dict.fromkeys(NAMES, k * 1000)
    assert calls == ["eth0"]  # only the first dump of the layout went line by line
    parser.parse(_dump(NAMES[:2], [1, 2]), "eth0")
    parser.parse(_dump(NAMES[:2], [3, 4]), "eth0")
    assert calls == ["eth0", "eth0"]


def test_dir_source_with_crlf_and_rewrites(tmp_path: Path) -> None:
    src = DirEthtoolSource(tmp_path)
    path = tmp_path / "eth0"
    for k in range(3):
        path.write_bytes(_dump(NAMES, [k] * 5, eol="\r\n").encode())
        assert src.stats("eth0") == dict.fromkeys(NAMES, k)
    path.write_bytes(b"NIC statistics:\r\n     rx_bytes: 1\xff2\r\n")  # not UTF-8, not a number
    with pytest.raises(ParseError, match="unsigned integer"):
        src.stats("eth0")
    path.write_bytes(_dump(NAMES, [9] * 5).encode())
    assert src.stats("eth0") == dict.fromkeys(NAMES, 9)


def test_parse_vector_is_parse_by_position_and_keeps_the_names_tuple() -> None:
    """What the collector's one pass picks by position: the same statistics as
    :meth:`EthtoolTextParser.parse`, a name given twice once with its last value, and
    the kept layout's names tuple itself while the layout holds."""
    parser = EthtoolTextParser()
    twice = "NIC statistics:\n     a: 1\n     b: 2\n     a: 3\n"
    for text in (twice, twice.replace("3", "4")):
        names, values = parser.parse_vector(text, "dup")
        assert dict(zip(names, values, strict=True)) == parser.parse(text, "dup")
        assert names == ("a", "b")
    plain = "NIC statistics:\n     rx_prio3_pause: 5\n     tx_prio3_pause: 6\n"
    parser.parse_vector(plain, "one")  # line by line: the layout is kept from here
    kept, _ = parser.parse_vector(plain, "one")
    again, values = parser.parse_vector(plain.replace("5", "7"), "one")
    assert again is kept and values == (7, 6)
