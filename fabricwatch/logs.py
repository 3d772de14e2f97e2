"""Structured logging: JSON lines for journald, a console renderer for people.

Context (``collector``, ``incident``) is bound with
``structlog.contextvars.bind_contextvars`` and merged into every event.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    level: Literal["debug", "info", "warning", "error"] = "info",
    fmt: Literal["auto", "json", "console"] = "json",
    stream: TextIO | None = None,
) -> None:
    """(Re)configure structlog; safe to call again on SIGHUP.

    ``auto`` is console on a terminal (a person is reading) and JSON lines
    otherwise (journald, a pipe, a container log).
    """
    out = stream if stream is not None else sys.stdout
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=out.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # Third-party libraries (pysnmp, aiohttp) log through stdlib logging: keep
    # their warnings, on stderr, without their debug chatter.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)
