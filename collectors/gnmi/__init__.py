"""Switch collector over gNMI streaming telemetry: ECN marks, PFC, queue drops, link state.

Subscribes (SAMPLE at the collector interval, ON_CHANGE for oper status and
LLDP) to the targets in ``[[collectors.gnmi.targets]]`` over ``grpc.aio``
with TLS, and reconnects with backoff. Path profiles are data files in
``collectors/gnmi/profiles/`` (OpenConfig, SONiC COUNTERS_DB). Port
selection follows the SNMP switch collector: in ``node`` mode only the ports
whose LLDP neighbour is this host (or static ``uplinks``), in ``switch`` mode
every port. Exports the switch families of ``docs/signals.md``
(``fabricwatch_switch_ecn_marked_packets``, PFC frames and pause ratio, ...)
with the SNMP collector's own specs.
"""

from __future__ import annotations

from fabricwatch.collector import Collector, CollectorEnv, CollectorFactory

from ._settings import GnmiSettings


def _create(settings: GnmiSettings, env: CollectorEnv) -> Collector:
    # grpc and the gNMI protos load only when a gNMI collector is built: the
    # registry (and `fabricwatch --help`) stays light without them.
    from ._collector import GnmiCollector

    return GnmiCollector(settings, env)


FACTORY: CollectorFactory[GnmiSettings] = CollectorFactory(
    name="gnmi",
    settings=GnmiSettings,
    create=_create,
    description="Switch ECN marks, PFC, queue drops and link state over gNMI streaming telemetry.",
    default_enabled=True,
)
