"""``fabricwatch sample-config``: the fully commented config with every default."""

from __future__ import annotations

import argparse

from fabricwatch.errors import ExitCode


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(_args: argparse.Namespace) -> int:
    """Print the fully commented sample config (all defaults)."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.sample import render_sample

    print(render_sample(builtin_registry()), end="")
    return ExitCode.OK
