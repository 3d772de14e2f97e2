"""Host RDMA NIC collector: congestion, pause and link signals of ConnectX-class ports.

Sources, all under injectable roots:

* ``/sys/class/infiniband/<dev>/ports/<p>/{counters,hw_counters}`` — traffic
  (4-byte words, exported as bytes), ``port_xmit_wait``, link state and flaps,
  ECN marks and CNPs (``np_*``/``rp_*``, present only when the firmware allows
  congestion queries), RDMA transport errors (32-bit Q-counters).
* the ethtool ioctl on the port's netdev (each member of a RoCE LAG bond) —
  per-priority PFC pause frames and durations, pause storms, discards.
* sysfs PCI links — netdev, PCI address, NUMA node and the GPUs near the NIC.

Counters are exported raw (the pipeline makes rates); the pause-time and
transmit-wait fractions are derived here with the collector's own
:class:`~fabricwatch.counters.CounterTracker`.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorEnv, CollectorFactory

from ._collector import NicCollector
from ._metrics import NAME
from ._settings import NicSettings

__all__ = ["FACTORY"]


def _create(settings: NicSettings, env: CollectorEnv) -> NicCollector:
    return NicCollector(settings, env)


FACTORY: CollectorFactory[NicSettings] = CollectorFactory(
    name=NAME,
    settings=NicSettings,
    create=_create,
    description="Host RDMA NIC: ECN marks, CNPs, per-priority PFC pause, xmit_wait, link flaps.",
)
