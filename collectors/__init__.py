"""Built-in collectors, one folder per source, and their registry.

Installed as :mod:`fabricwatch.collectors`. The daemon core never imports a
collector module directly; it asks :func:`builtin_registry` for the factories.
Adding a collector is copying a collector's folder and adding its folder name
to :data:`BUILTIN` (``docs/collectors.md``).
"""

from __future__ import annotations

import importlib
from typing import Any

from fabricwatch.collector import CollectorFactory, Registry

BUILTIN: tuple[str, ...] = (
    "gpu",
    "nic",
    "storage",
    "switch",
    "gnmi",
    "nccl_inspector",
    "nccl_ras",
)
"""Folder names of the built-in collectors, each a package whose ``__init__``
defines ``FACTORY``; the order is the order of ``--help`` and the sample config."""


def builtin_registry() -> Registry:
    """A fresh name -> factory mapping of every built-in collector."""
    factories: list[CollectorFactory[Any]] = []
    for folder in BUILTIN:
        factory = importlib.import_module(f"{__name__}.{folder}").FACTORY
        if not isinstance(factory, CollectorFactory):
            msg = f"collectors/{folder}: FACTORY must be a CollectorFactory"
            raise TypeError(msg)
        factories.append(factory)
    return {f.name: f for f in factories}
