"""Built-in collectors, one module per source, and their registry.

Installed as :mod:`fabricwatch.collectors`. The daemon core never imports a
collector module directly; it asks :func:`builtin_registry` for the factories.
Adding a collector is adding a module that defines a ``FACTORY``
(:class:`~fabricwatch.collector.CollectorFactory`) and naming it below.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorFactory, Registry
from fabricwatch.collectors.gnmi import FACTORY as GNMI
from fabricwatch.collectors.gpu import FACTORY as GPU
from fabricwatch.collectors.nccl_inspector import FACTORY as NCCL_INSPECTOR
from fabricwatch.collectors.nccl_ras import FACTORY as NCCL_RAS
from fabricwatch.collectors.nic import FACTORY as NIC
from fabricwatch.collectors.storage import FACTORY as STORAGE
from fabricwatch.collectors.switch import FACTORY as SWITCH


def builtin_registry() -> Registry:
    """A fresh name -> factory mapping of every built-in collector."""
    factories: list[CollectorFactory[object]] = [GPU, NIC, STORAGE, SWITCH, GNMI]  # type: ignore[type-var,list-item]
    factories += [NCCL_INSPECTOR, NCCL_RAS]  # type: ignore[list-item]
    return {f.name: f for f in factories}
