"""``fabricwatch run``: the node daemon in the foreground (systemd Type=notify)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fabricwatch.defaults import DEFAULT_PORT


def listen_address(text: str) -> str:
    """argparse type of ``--listen``: host:port with a port 0-65535."""
    from fabricwatch.config import split_listen

    try:
        split_listen(text)
    except ValueError:
        msg = (
            f"expected HOST:PORT with a port 0-65535 (0.0.0.0:{DEFAULT_PORT}, "
            f"[::1]:{DEFAULT_PORT}, :{DEFAULT_PORT}), got {text!r}"
        )
        raise argparse.ArgumentTypeError(msg) from None
    return text


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``--listen`` and ``--web-config``."""
    parser.add_argument(
        "--listen", metavar="HOST:PORT", type=listen_address, help="override web.listen"
    )
    parser.add_argument(
        "--web-config",
        type=Path,
        metavar="FILE",
        help="exporter-toolkit web-config (TLS, basic auth); overrides web.config_file",
    )


def run(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground (systemd Type=notify)."""
    import asyncio

    from fabricwatch.collectors import builtin_registry
    from fabricwatch.config import load_config
    from fabricwatch.daemon import Daemon
    from fabricwatch.logs import configure_logging

    cfg = load_config(args.config, builtin_registry())
    if args.listen:
        cfg.web.listen = args.listen
    configure_logging(args.log_level or cfg.log.level, args.log_format or cfg.log.format)
    daemon = Daemon(
        cfg, builtin_registry(), config_path=args.config, web_config_path=args.web_config
    )
    return asyncio.run(daemon.run())
