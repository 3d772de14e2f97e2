"""``fabricwatch replay``: run the engine over recorded telemetry.

Sources: OpenMetrics files with timestamps, or a Prometheus server
(``--prometheus URL --from --to --match node=...``). Metric names may be
fabricwatch's own or dcgm-exporter / node_exporter / snmp_exporter ones
(``--list-mappings`` prints the table).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fabricwatch.engine._cli_common import (
    EXIT_ERROR,
    EXIT_OK,
    err,
    parse_time,
    print_json,
    print_table,
)
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import to_json
from fabricwatch.engine.replay import (
    MAPPING_TABLE,
    Mapper,
    ReplayError,
    fetch_prometheus,
    parse_openmetrics,
    run_replay,
)
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.errors import ConfigError, ParseError, StoreError
from fabricwatch.settings import build, parse_duration


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser``."""
    parser.add_argument("files", nargs="*", help="OpenMetrics files with timestamps ('-' = stdin)")
    parser.add_argument("--prometheus", metavar="URL", help="Prometheus server to query")
    parser.add_argument(
        "--from", dest="start", metavar="TIME", help="start (RFC 3339, unix, 24h ago)"
    )
    parser.add_argument("--to", dest="end", metavar="TIME", default="now", help="end (default now)")
    parser.add_argument(
        "--match",
        action="append",
        default=[],
        metavar="LABEL=VALUE",
        help="label matcher for the Prometheus query (repeatable; =~, != and !~ too)",
    )
    parser.add_argument("--chunk", default="1h", help="Prometheus fetch window (default 1h)")
    parser.add_argument("--timeout", default="30s", help="Prometheus request timeout (default 30s)")
    parser.add_argument(
        "--node",
        default=None,
        help="node name in incidents (default: --match node=, else 'replay')",
    )
    parser.add_argument("--config", type=Path, help="fabricwatch.toml whose [engine] table to use")
    parser.add_argument("--db", type=Path, help="also persist incidents into this SQLite file")
    parser.add_argument("--json", action="store_true", help="fabricwatch.incident/v1 JSON array")
    parser.add_argument("--list-mappings", action="store_true", help="print the name mapping table")


def _settings(path: Path | None) -> EngineSettings:
    if path is None:
        return EngineSettings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(path)) from None
    table = data.get("engine", {})
    if not isinstance(table, dict):
        raise ConfigError("expected a table", path=str(path), key="engine")
    return build(EngineSettings, table, prefix="engine", source=str(path))


def _progress(total: float, what: str) -> tuple[Callable[[float], None], Callable[[], None]]:
    """A rich progress bar on a TTY stderr; silent otherwise."""
    if not sys.stderr.isatty():
        return (lambda _n: None), (lambda: None)
    # Imported only on a terminal: rich is slow to import.
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task(what, total=total)
    bar.start()
    return (lambda n: bar.advance(task, n)), bar.stop


def _open_text(path: str, stack: ExitStack) -> Iterator[str]:
    if path == "-":
        return iter(sys.stdin)
    try:
        return iter(stack.enter_context(Path(path).open(encoding="utf-8", errors="strict")))
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    """Replay; 0 on success, 2 on bad input or an unreachable source."""
    if args.list_mappings:
        for source, target, how in MAPPING_TABLE:
            sys.stdout.write(f"{source}\n    -> {target}: {how}\n")
        return EXIT_OK
    try:
        settings = _settings(args.config)
        mapper = Mapper()
        if args.prometheus:
            if args.files:
                err("give OpenMetrics files or --prometheus, not both")
                return EXIT_ERROR
            if not args.start:
                err("--prometheus needs --from")
                return EXIT_ERROR
            start, end = parse_time(args.start), parse_time(args.end)
            step, stop = _progress(max(end - start, 1.0), "querying Prometheus")
            try:
                fetch_prometheus(
                    args.prometheus,
                    start,
                    end,
                    args.match,
                    mapper,
                    chunk=parse_duration(args.chunk),
                    timeout=parse_duration(args.timeout),
                    progress=step,
                )
            finally:
                stop()
        elif args.files:
            with ExitStack() as stack:
                for path in args.files:
                    parse_openmetrics(_open_text(path, stack), mapper, source=path)
        else:
            err("nothing to replay: give OpenMetrics files or --prometheus URL")
            return EXIT_ERROR
        samples = mapper.finish()
        if not samples:
            names = ", ".join(sorted(mapper.ignored)[:5])
            err(f"no usable samples ({mapper.samples} read; unmapped names: {names or 'none'})")
            return EXIT_ERROR
        node = args.node or _node_from(args.match) or "replay"
        db = IncidentDB(args.db) if args.db else None
        step, stop = _progress(len(samples), "replaying")
        try:
            result = run_replay(samples, settings, node=node, db=db, progress=step)
        finally:
            stop()
            if db is not None:
                db.close()
    except (ParseError, ReplayError, ConfigError, StoreError, ValueError) as exc:
        err(str(exc))
        return EXIT_ERROR
    docs: list[dict[str, Any]] = [to_json(t.incident) for t in result.incidents()]
    hours = (result.end - result.start) / 3600.0
    sys.stderr.write(
        f"replayed {hours:.2f} h, {result.readings} samples "
        f"(+{result.skipped} the engine does not read), {result.ticks} ticks: "
        f"{len(docs)} incident(s); sample spacing seen: {result.spacing:g} s\n"
    )
    (print_json if args.json else print_table)(docs, sys.stdout)
    return EXIT_OK


def _node_from(matchers: list[str]) -> str | None:
    for m in matchers:
        label, sep, value = m.partition("=")
        if sep and label.strip() == "node" and not value.startswith("~"):
            return value.strip().strip('"')
    return None


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m fabricwatch.engine.cli_replay``)."""
    parser = argparse.ArgumentParser(prog="fabricwatch replay", description=__doc__)
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
