"""``fabricwatch fleet``: run one replica of the fleet aggregator.

Reads the same TOML file as the node daemon: ``[mqtt]`` (the broker),
``[alerting]`` (the sinks that page), ``[web]`` (``config_file`` for TLS and
basic auth), ``[daemon]`` (``state_dir``) and ``[fleet]`` (this role's own
table). Runs until SIGTERM/SIGINT; exit codes as the node daemon's.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.errors import ConfigError, ExitCode, FabricwatchError

if TYPE_CHECKING:
    from fabricwatch.config import Config
    from fabricwatch.fleet.settings import FleetSettings
    from fabricwatch.webconfig import WebConfig


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``fabricwatch fleet``."""
    # SUPPRESS: when wired under the main parser, do not clobber its --config.
    parser.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="config file ([mqtt], [alerting], [fleet] ...)",
    )
    parser.add_argument("--replica-id", metavar="ID", help="override fleet.replica_id")
    parser.add_argument("--listen", metavar="HOST:PORT", help="override fleet.listen")
    parser.add_argument("--state-dir", type=Path, metavar="DIR", help="override fleet.state_dir")
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], default=argparse.SUPPRESS
    )
    parser.add_argument("--log-format", choices=["json", "console"], default=argparse.SUPPRESS)


def _fleet_settings(cfg: Config, args: argparse.Namespace) -> FleetSettings:
    fleet = cfg.fleet
    if args.replica_id:
        fleet.replica_id = args.replica_id
    if args.listen:
        fleet.listen = args.listen
    if args.state_dir:
        fleet.state_dir = str(args.state_dir)
    try:
        fleet.validate()
    except ValueError as exc:
        raise ConfigError(str(exc), key="fleet") from None
    return fleet


async def serve(
    cfg: Config, fleet: FleetSettings, web_config: WebConfig, stop: asyncio.Event
) -> int:
    """Run one replica until ``stop`` is set; returns the exit code."""
    import structlog

    from fabricwatch.fleet.service import FleetAggregator, listen_address

    log = structlog.get_logger("fabricwatch.fleet")
    if not cfg.mqtt.enabled:
        log.error("fleet_needs_mqtt", hint="set [mqtt] enabled = true and the broker host")
        return ExitCode.USAGE
    state_dir = fleet.state_path(cfg.daemon.state_dir)
    try:
        agg = FleetAggregator(
            fleet, cfg.mqtt, cfg.alerting, state_dir=state_dir, web_config=web_config
        )
    except ConfigError:
        raise
    except FabricwatchError as exc:
        log.error("fleet_unusable", error=str(exc))
        return ExitCode.CANNOT_START
    try:
        await agg.start(listen_address(fleet.listen))
    except OSError as exc:
        log.error("listen_failed", address=fleet.listen, error=exc.strerror)
        await agg.close()
        return ExitCode.CANNOT_START
    port = agg.web.port if agg.web is not None else 0
    log.info("fleet_listening", replica=agg.replica, port=port, state_dir=str(state_dir))
    try:
        await stop.wait()
    finally:
        await agg.close()
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fabricwatch fleet``."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.config import load_config
    from fabricwatch.logs import configure_logging
    from fabricwatch.webconfig import WebConfig, load_web_config

    cfg = load_config(getattr(args, "config", None), builtin_registry())
    fleet = _fleet_settings(cfg, args)
    configure_logging(
        getattr(args, "log_level", None) or cfg.log.level,
        getattr(args, "log_format", None) or cfg.log.format,
    )
    web_config = load_web_config(Path(cfg.web.config_file)) if cfg.web.config_file else WebConfig()

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(cfg, fleet, web_config, stop)

    return asyncio.run(main())
