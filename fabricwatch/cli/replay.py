"""``fabricwatch replay``: run the engine over recorded telemetry.

Sources: OpenMetrics files with timestamps, or a Prometheus server
(``--prometheus URL --from --to --match node=...``). Metric names may be
fabricwatch's own or dcgm-exporter / node_exporter / snmp_exporter ones
(``--list-mappings`` prints the table).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.cli._common import (
    err,
    parse_time,
    print_json,
    print_table,
)
from fabricwatch.errors import ConfigError, ExitCode, ParseError, StoreError
from fabricwatch.settings import build, parse_duration

if TYPE_CHECKING:
    from fabricwatch.engine.incidents import Incident
    from fabricwatch.engine.replay import ReplayResult
    from fabricwatch.engine.replay_mapping import Mapper
    from fabricwatch.engine.settings import EngineSettings


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
    parser.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,  # keeps a --config given before the command
        help="fabricwatch.toml whose [engine] table to use (also before the command)",
    )
    parser.add_argument("--db", type=Path, help="also persist incidents into this SQLite file")
    parser.add_argument("--json", action="store_true", help="fabricwatch.incident/v1 JSON array")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes, split by time window; same result as one (default: the "
        "usable cores; with --db one process)",
    )
    parser.add_argument("--list-mappings", action="store_true", help="print the name mapping table")
    parser.add_argument(
        "--nic-map",
        action="append",
        default=[],
        metavar="NETDEV=RDMA_DEVICE[:PORT]",
        help="name node_ethtool devices by their RDMA port, as the live collector does "
        "(repeatable; fabricwatch_nic_info series in the input do it automatically)",
    )
    # Imported here: the fleet replay module imports this one.
    from fabricwatch.cli import replay_fleet as fleet_replay

    fleet_replay.configure_parser(parser)


# The engine is imported inside the functions that use it, so that building
# this command's parser (fabricwatch --help, replay --help) stays cheap.


def _settings(path: Path | None) -> EngineSettings:
    from fabricwatch.config import read_section
    from fabricwatch.engine.settings import EngineSettings

    if path is None:
        return EngineSettings()
    table = read_section(path, "engine")
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
    from fabricwatch.engine.replay_mapping import ReplayError
    from fabricwatch.engine.replay_openmetrics import read_lines

    # surrogateescape + read_lines: bad UTF-8 and endless lines are reported by
    # the parser with the file and line, and no line is read past the cap.
    if path == "-":
        return read_lines(io.TextIOWrapper(sys.stdin.buffer, "utf-8", "surrogateescape"))
    try:
        return read_lines(
            stack.enter_context(Path(path).open(encoding="utf-8", errors="surrogateescape"))
        )
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror}") from None


def final_state(inc: Incident, end: float) -> Incident:
    """An incident still open when the data ended, as of the last sample.

    The last transition is often the opening one (a 2 s stall, a few GPU-s);
    the engine kept counting after it, so report what it saw at the end.
    """
    from fabricwatch.engine.incidents import summarize

    stopped = inc.ended_at if inc.ended_at is not None else end
    seconds = max(0.0, stopped - inc.onset)
    what = "stalled" if inc.kind == "stall" else "slowed down"
    summary = summarize(
        kind=inc.kind,
        gpus=inc.gpus,
        seconds=seconds,
        cause=inc.cause,
        confidence=inc.confidence,
        evidence=inc.evidence,
    )
    return replace(
        inc,
        updated_at=max(inc.updated_at, end),
        ended_at=stopped,
        summary=f"open at end of data, {what} {seconds:.0f} s so far: {summary}",
    )


def incident_docs(result: ReplayResult) -> list[dict[str, Any]]:
    """One document per incident: its last transition, or its state at the end of data."""
    from fabricwatch.engine.incidents import to_json

    still_open = {inc.key: inc for inc in result.open_at_end}
    docs: list[dict[str, Any]] = []
    for tr in result.incidents():
        inc = tr.incident
        if inc.state == "open" and inc.key in still_open:
            inc = final_state(still_open[inc.key], result.end)
        docs.append(to_json(inc))
    return docs


def usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line's sources and --jobs, or None (node and fleet replay)."""
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs must be 1 or more, got {args.jobs}"
    if args.prometheus:
        if args.files:
            return "give OpenMetrics files or --prometheus, not both"
        if not args.start:
            return "--prometheus needs --from"
    elif not args.files:
        return "nothing to replay: give OpenMetrics files or --prometheus URL"
    return None


def run(args: argparse.Namespace) -> int:
    """Replay; 0 on success, 1 on unusable input or an unreachable source, 2 on usage."""
    from fabricwatch.engine.db import IncidentDB
    from fabricwatch.engine.replay import run_replay
    from fabricwatch.engine.replay_jobs import run_parallel
    from fabricwatch.engine.replay_mapping import MAPPING_TABLE, Mapper, ReplayError, parse_nic_map
    from fabricwatch.engine.replay_openmetrics import read_files
    from fabricwatch.engine.replay_prometheus import fetch_prometheus

    if args.list_mappings:
        for source, target, how in MAPPING_TABLE:
            sys.stdout.write(f"{source}\n    -> {target}: {how}\n")
        return ExitCode.OK
    if getattr(args, "fleet", False):
        from fabricwatch.cli import replay_fleet as fleet_replay

        return fleet_replay.run(args)
    problem = usage_error(args)
    if problem:
        err(problem)
        return ExitCode.USAGE
    try:
        settings = _settings(getattr(args, "config", None))
        mapper = Mapper(parse_nic_map(args.nic_map))
        if args.prometheus:
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
        else:
            missing = [p for p in args.files if p != "-" and not Path(p).exists()]
            if missing:
                err(f"cannot read {missing[0]}: no such file")
                return ExitCode.USAGE
            with ExitStack() as stack:
                read_files(args.files, mapper, lambda path: _open_text(path, stack))
        samples = mapper.finish()
        if not samples:
            names = ", ".join(sorted(mapper.ignored)[:5])
            err(f"no usable samples ({mapper.samples} read; unmapped names: {names or 'none'})")
            return ExitCode.FAILURE
        node = args.node or _node_from(args.match) or "replay"
        db = IncidentDB(args.db) if args.db else None
        step, stop = _progress(len(samples), "replaying")
        try:
            if db is None and (args.jobs is None or args.jobs > 1):
                result = run_parallel(samples, settings, node=node, jobs=args.jobs)
            else:
                result = run_replay(samples, settings, node=node, db=db, progress=step)
        finally:
            stop()
            if db is not None:
                db.close()
    except (ConfigError, ValueError) as exc:
        err(str(exc))
        return ExitCode.USAGE
    except (ParseError, ReplayError, StoreError) as exc:
        err(str(exc))
        return ExitCode.FAILURE
    docs = incident_docs(result)
    summary = replay_summary(mapper, result, samples, settings, len(docs))
    sys.stderr.write(format_summary(summary))
    if args.json:
        # stdout stays the incident array (fabricwatch.incident/v1); the summary
        # follows on stderr as one JSON object on its own (last) line.
        sys.stderr.write(json.dumps(summary, sort_keys=True) + "\n")
    (print_json if args.json else print_table)(docs, sys.stdout)
    return ExitCode.OK


def replay_summary(
    mapper: Mapper,
    result: ReplayResult,
    samples: list[tuple[float, str, tuple[str, ...], float]],
    settings: EngineSettings,
    incidents: int,
) -> dict[str, Any]:
    """What was replayed and what was not used, by name, with sample counts."""
    from fabricwatch.engine.replay import sample_spacing

    spacing = sample_spacing(samples)
    return {
        "schema": "fabricwatch.replay-summary/v1",
        "hours": round((result.end - result.start) / 3600.0, 4),
        "samples_read": mapper.samples,
        "samples_replayed": result.readings,
        "rejected": result.rejected,
        "ticks": result.ticks,
        "incidents": incidents,
        "unmapped": dict(sorted(mapper.ignored.items())),
        "mapped_not_read": dict(mapper.unused),
        "dropped": dict(sorted(mapper.dropped.items())),
        "spacing_seconds": spacing.median if spacing else None,
        "gpu_spacing_seconds": (
            spacing.gpu_work if spacing and not math.isnan(spacing.gpu_work) else None
        ),
        "spacing_warning": spacing.warning(settings) if spacing else "",
    }


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())


def format_summary(s: dict[str, Any]) -> str:
    """The summary for people (stderr)."""
    skipped = sum(s["mapped_not_read"].values())
    lines = [
        f"replayed {s['hours']:.2f} h, {s['samples_replayed']} samples "
        f"(+{skipped} the engine does not read), {s['ticks']} ticks: "
        f"{s['incidents']} incident(s)"
    ]
    if s["spacing_seconds"] is not None:
        gpu = s.get("gpu_spacing_seconds")
        differs = gpu is not None and gpu != s["spacing_seconds"]
        lines.append(
            f"sample spacing: {s['spacing_seconds']:g} s"
            + (f" (GPU work: {gpu:g} s)" if differs else "")
        )
    if s["unmapped"]:
        lines.append(f"not mapped (samples): {_counts(s['unmapped'])}")
    if s["mapped_not_read"]:
        lines.append(f"mapped, read by no scorer (samples): {_counts(s['mapped_not_read'])}")
    if s["dropped"]:
        lines.append(f"dropped (samples): {_counts(s['dropped'])}")
    if s["spacing_warning"]:
        lines.append(f"warning: {s['spacing_warning']}")
    return "".join(f"{ln}\n" for ln in lines)


def _node_from(matchers: list[str]) -> str | None:
    for m in matchers:
        label, sep, value = m.partition("=")
        if sep and label.strip() == "node" and not value.startswith("~"):
            return value.strip().strip('"')
    return None
