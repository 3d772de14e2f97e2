"""fabricwatch(8) is generated from the parser: every command and option is in it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabricwatch.cli import build_parser
from fabricwatch.errors import ExitCode
from fabricwatch.manpage import render


def _roff(text: str) -> str:
    return text.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")


def test_every_command_and_option_is_documented() -> None:
    parser = build_parser()
    page = _roff(render(parser, date="2026-01-01"))
    assert page.startswith('.TH FABRICWATCH 8 "2026-01-01"')
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f".SS fabricwatch {name}\n" in page, name
        for action in p._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in page, f"{name} {flag}"
    for code in ExitCode:
        assert f".TP\n{int(code)}\n" in page
    assert "--version" in page


def test_groff_renders_it_without_warnings(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fabricwatch.manpage"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.startswith(".TH FABRICWATCH 8")
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed (Debian package groff-base)")
    page = tmp_path / "fabricwatch.8"
    page.write_text(out)
    lint = subprocess.run(
        ["groff", "-man", "-ww", "-z", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert lint.returncode == 0 and lint.stderr == "", lint.stderr
