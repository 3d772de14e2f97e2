"""The error hierarchy.

Every error the daemon raises on purpose derives from :class:`FabricwatchError`;
its message is written for the operator: what went wrong and what to do.
"""

from __future__ import annotations

from enum import IntEnum


class FabricwatchError(Exception):
    """Base class of every fabricwatch error."""


class ConfigError(FabricwatchError):
    """Invalid configuration: the message names the file, key path and expectation.

    Attributes:
        path: the config file the error is in, if any.
        key: the dotted key path (``collectors.snmp.targets[0].port``).
    """

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        where = ""
        if path:
            where = f"{path}: "
        if key:
            where += f"{key}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.key = key
        self.reason = message


class CollectorError(FabricwatchError):
    """A collector could not start or collect. Contained by the supervisor."""


class SourceAbsentError(CollectorError):
    """The collector's source does not exist on this node (no driver, no device).

    Not a fault: the supervisor reports the collector down with reason
    ``absent`` and logs it once instead of on every retry.
    """


class ParseError(CollectorError):
    """Input from a device, file or peer could not be parsed.

    Attributes:
        source: what was being parsed (a file path, a target name).
        line: 1-based line number where known.
    """

    def __init__(self, message: str, *, source: str = "", line: int | None = None) -> None:
        loc = source
        if line is not None:
            loc = f"{source}:{line}" if source else f"line {line}"
        super().__init__(f"{loc}: {message}" if loc else message)
        self.source = source
        self.line = line


class DeliveryError(FabricwatchError):
    """An output (webhook, MQTT, Alertmanager) could not deliver a message."""


class StoreError(FabricwatchError):
    """The state database is unusable (corrupt, too new, unwritable)."""


class ExitCode(IntEnum):
    """The exit status of every ``fabricwatch`` command (one table, in the README too).

    ``USAGE`` is for what the operator typed or configured: fix the command or
    the file and run it again. ``FAILURE`` is for what happened while doing the
    work: a source unreachable, input that is not what it claims, a check that
    did not pass. ``CANNOT_START`` is the daemon's (and the fleet aggregator's)
    own: it never served, so systemd's restart policy should not hide it.
    """

    OK = 0
    FAILURE = 1
    USAGE = 2
    CANNOT_START = 3
    INTERRUPTED = 130
    OUTPUT_CLOSED = 141  # 128 + SIGPIPE: the reader of stdout went away (`| head`)


EXIT_CODE_MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILURE: "failure: a source unreachable, unusable input, a check that did not "
    "pass (probe-storage: the checkpoint does not fit the budget)",
    ExitCode.USAGE: "invalid configuration or usage",
    ExitCode.CANNOT_START: "the daemon cannot start (port in use, a required collector failed)",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.OUTPUT_CLOSED: "standard output was closed by its reader (e.g. | head)",
}
"""Each exit status in a line, for the man page's EXIT STATUS section."""

EXIT_CODE_HELP = (
    "Exit codes: 0 ok, 1 failure (a source unreachable, unusable input, a check that did not "
    "pass), 2 invalid configuration or usage, 3 the daemon cannot start, 130 interrupted, "
    "141 output closed early."
)
"""One sentence for ``--help`` epilogs and the man page."""


class StateWriteError(StoreError):
    """The state database cannot be written right now (disk full, I/O error,
    read-only file system, locked). The file itself is fine: free space or fix
    the mount, and the daemon writes what it kept in memory."""
