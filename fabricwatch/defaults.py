"""Where fabricwatch looks when nothing says otherwise: config file, credentials, port.

A leaf module (no imports of the configuration schema) so that the command
line can name these in ``--help`` without importing every settings table.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG_PATH = Path("/etc/fabricwatch/fabricwatch.toml")
DEFAULT_PORT = 9477
"""Not yet claimed on the Prometheus default-port wiki; see README, "Port"."""
CREDENTIALS_SOURCE = Path("/etc/fabricwatch/credentials")
"""The unit's ``LoadCredential=fabricwatch:`` directory (files become ``fabricwatch_NAME``)."""
FLEET_NODE_LABEL = "instance"
"""The label naming a sample's node in fleet replay (Prometheus's scrape target label)."""
