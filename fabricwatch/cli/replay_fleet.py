"""``fabricwatch replay --fleet``: which node stalled the job, from existing telemetry.

Several nodes' history (OpenMetrics files, one per node or mixed, or one
Prometheus holding many nodes) is split by node (``--node-label``, default
``instance``, ports stripped); each node's engine runs over its own samples,
then the fleet grouping runs offline over all their incidents: the same code
and settings (``[fleet]`` of ``--config``) as the live aggregator, so the same
job incidents, origins and waiting nodes come out.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.cli._common import (
    err,
    parse_time,
    print_json,
)
from fabricwatch.defaults import FLEET_NODE_LABEL
from fabricwatch.errors import ConfigError, ExitCode, ParseError, StoreError
from fabricwatch.settings import build, parse_duration

if TYPE_CHECKING:
    from fabricwatch.fleet.settings import FleetSettings


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``--fleet``, ``--node-label``, ``--job`` and ``--cluster`` (the rest is replay's)."""
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="several nodes: each node's engine, then the fleet grouping (job incidents)",
    )
    parser.add_argument(
        "--node-label",
        default=FLEET_NODE_LABEL,
        help="with --fleet: the label naming a sample's node (default: %(default)s)",
    )
    parser.add_argument(
        "--job",
        default="",
        help="with --fleet: job of node incidents whose telemetry names none (slurm:8812)",
    )
    parser.add_argument("--cluster", default="default", help="with --fleet: cluster name")


def _fleet_settings(path: Path | None) -> FleetSettings:
    from fabricwatch.config import read_section
    from fabricwatch.fleet.settings import FleetSettings

    if path is None:
        return build(FleetSettings, {}, prefix="fleet")
    table = read_section(path, "fleet")
    return build(FleetSettings, table, prefix="fleet", source=str(path))


def run(args: argparse.Namespace) -> int:
    """Fleet replay; 0 on success, 2 on bad usage or config, 1 on unusable input."""
    # Imported when the command runs, not when its parser is built (--help).
    from fabricwatch.cli.replay import _open_text, _settings, usage_error
    from fabricwatch.engine.replay_mapping import ReplayError
    from fabricwatch.fleet.jobwork import WINDOW, reports_by_node
    from fabricwatch.fleet.ledger import ledger_lines, ledger_of
    from fabricwatch.fleet.replay import (
        NodeStreams,
        job_incident_json,
        job_lines,
        prometheus_samples,
        replay_nodes,
        samples_from_streams,
    )
    from fabricwatch.outputs.mqtt import topic_segment

    problem = usage_error(args)
    if problem:
        err(problem)
        return ExitCode.USAGE
    try:
        engine = _settings(args.config)
        fleet = _fleet_settings(args.config)
        if args.prometheus:
            start, end = parse_time(args.start), parse_time(args.end)
            by_node = prometheus_samples(
                args.prometheus,
                start,
                end,
                args.match,
                node_label=args.node_label,
                chunk=parse_duration(args.chunk),
                timeout=parse_duration(args.timeout),
            )
        else:
            streams = NodeStreams({})
            with ExitStack() as stack:
                for path in args.files:
                    default = "" if path == "-" else Path(path).stem
                    streams.add(
                        _open_text(path, stack), node_label=args.node_label, default=default
                    )
            by_node = samples_from_streams(streams)
        by_node = {n: s for n, s in by_node.items() if s}
        if not by_node:
            err(f"no usable samples for any node (node label {args.node_label!r})")
            return ExitCode.FAILURE
        result = replay_nodes(
            by_node, engine, fleet, cluster=args.cluster, job=args.job, jobs=args.jobs
        )
    except (ConfigError, ValueError) as exc:
        err(str(exc))
        return ExitCode.USAGE
    except (ParseError, ReplayError, StoreError) as exc:
        err(str(exc))
        return ExitCode.FAILURE
    node_incidents = sum(len(r.incidents()) for r in result.nodes.values())
    jobs = result.fleet.jobs()
    sys.stderr.write(
        f"replayed {len(result.nodes)} nodes: {node_incidents} node incident(s), "
        f"{len(result.fleet.incidents)} cluster incident(s), {len(jobs)} job incident(s)\n"
    )
    if args.json:
        out: list[dict[str, Any]] = [job_incident_json(d) for d in jobs]
        print_json(out, sys.stdout)
    else:
        lines = list(job_lines(result.fleet)) or ["no cluster incidents"]
        seg = topic_segment(args.cluster)
        reports = [(seg, r) for rs in reports_by_node(by_node, WINDOW).values() for r in rs]
        ledger = ledger_of(result.fleet.incidents, reports=reports)
        lines += ["", *ledger_lines(ledger.entries())]
        sys.stdout.write("\n".join(lines) + "\n")
    return ExitCode.OK
