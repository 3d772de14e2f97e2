"""Switch collector over SNMP: per-priority PFC pause, queue drops, link state, uplinks.

Polls the switches in ``[[collectors.switch.targets]]``. In the default
``node`` mode a node polls only the ports whose LLDP neighbour is itself
(matched by host name or NIC MAC), with plain GETs; ``switch`` mode walks
every port (for a dedicated poller). Vendor tables come from data files in
``collectors/switch/profiles/``. See ``docs/signals.md`` for the exported families.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorEnv, CollectorFactory

from ._collector import SwitchCollector
from ._settings import SwitchSettings


def _create(settings: SwitchSettings, env: CollectorEnv) -> SwitchCollector:
    return SwitchCollector(settings, env)


FACTORY: CollectorFactory[SwitchSettings] = CollectorFactory(
    name="switch",
    settings=SwitchSettings,
    create=_create,
    description="Switch PFC pause, queue drops, link state and traffic over SNMP (LLDP uplinks).",
    default_enabled=True,
)
