"""``fabricwatch version``: print the version."""

from __future__ import annotations

import argparse
import platform

from fabricwatch import __version__
from fabricwatch.errors import ExitCode


def version_text() -> str:
    """``fabricwatch X.Y.Z (Python A.B.C)``."""
    return f"fabricwatch {__version__} (Python {platform.python_version()})"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(_args: argparse.Namespace) -> int:
    """Print the version."""
    print(version_text())
    return ExitCode.OK
