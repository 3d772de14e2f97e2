"""``fabricwatch(8)``: the manual page, generated from the argparse definitions.

``python -m fabricwatch.manpage > fabricwatch.8`` writes roff (man macros);
the Debian package builds its page this way, so every option the parser
knows is in the page and nothing else is.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from fabricwatch import __version__
from fabricwatch.defaults import DEFAULT_CONFIG_PATH, DEFAULT_PORT
from fabricwatch.errors import EXIT_CODE_MEANING, ExitCode


def _esc(text: str) -> str:
    """Text safe in a roff line: backslashes, leading dots/quotes, hyphens in options."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    if out.startswith((".", "'")):
        out = "\\&" + out
    return out


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _option_lines(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = ""
            if action.nargs != 0:
                mv = action.metavar or action.dest.upper()
                metavar = " \\fI" + _esc(mv if isinstance(mv, str) else " ".join(mv)) + "\\fR"
            if action.choices is not None and action.nargs != 0 and action.metavar is None:
                metavar = " {" + _esc(",".join(str(c) for c in action.choices)) + "}"
            flags = ", ".join("\\fB" + _esc(o) + "\\fR" for o in action.option_strings)
            head = flags + metavar
        else:
            head = "\\fI" + _esc(str(action.metavar or action.dest)) + "\\fR"
        text = action.help or ""
        if "%(default)s" in text:
            text = text.replace("%(default)s", str(action.default))
        lines += [".TP", head, _esc(text)]
    return lines


def render(parser: argparse.ArgumentParser, *, date: str | None = None) -> str:
    """The man page (section 8) of ``parser`` and its subcommands, as roff."""
    day = date or datetime.now(UTC).strftime("%Y-%m-%d")
    prog = parser.prog
    out = [
        f'.TH {prog.upper()} 8 "{day}" "{prog} {_esc(__version__)}" "System Administration"',
        ".SH NAME",
        f"{prog} \\- {_esc('GPU fabric-health monitor and stall explainer')}",
        ".SH SYNOPSIS",
        f"\\fB{prog}\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]",
        ".SH DESCRIPTION",
        _esc(parser.description or ""),
        ".SH OPTIONS",
        *_option_lines(parser),
        ".SH COMMANDS",
    ]
    for name, sub in _subcommands(parser).items():
        out += [
            ".SS " + _esc(f"{prog} {name}"),
            _esc(_help_of(parser, name) or sub.description or ""),
        ]
        usage = sub.format_usage().removeprefix("usage: ").strip()
        out += [".PP", ".nf", _esc(" ".join(usage.split())), ".fi"]
        options = _option_lines(sub)
        if options:
            out += [".RS", *options, ".RE"]
    out += [
        ".SH FILES",
        ".TP",
        _esc(str(DEFAULT_CONFIG_PATH)),
        _esc("The configuration (optional; `fabricwatch sample-config` prints every key)."),
        ".TP",
        _esc("/etc/fabricwatch/credentials/"),
        _esc(
            "Secrets, one per file, handed to the service by systemd as "
            "$CREDENTIALS_DIRECTORY/fabricwatch_NAME."
        ),
        ".TP",
        _esc("/var/lib/fabricwatch/"),
        _esc("State: the incident database and the alert outbox."),
        ".TP",
        _esc("/usr/share/fabricwatch/"),
        _esc("Grafana dashboards, Prometheus rules and an Alertmanager example."),
        ".SH EXIT STATUS",
    ]
    for code in ExitCode:
        out += [".TP", f"\\fB{int(code)}\\fR", _esc(EXIT_CODE_MEANING[code])]
    out += [
        ".SH NOTES",
        _esc(f"The daemon serves /metrics on port {DEFAULT_PORT} by default."),
        ".SH SEE ALSO",
        "\\fBsystemctl\\fR(1), \\fBjournalctl\\fR(1), "
        + _esc("/usr/share/doc/fabricwatch/deploy.md, runbook.md, switches.md"),
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    """Print the page of the ``fabricwatch`` command."""
    from fabricwatch.cli import build_parser

    sys.stdout.write(render(build_parser()))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
