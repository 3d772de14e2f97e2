"""NCCL RAS collector: unresponsive and missing ranks, from NCCL's own health network.

NCCL >= 2.24 runs a RAS thread in every process; any of them answers clients on
``NCCL_RAS_ADDR`` (default ``localhost:28028``) with the job-wide view (what
``ncclras`` prints). This collector speaks that line protocol (``CLIENT
PROTOCOL``, ``SET FORMAT json``, ``TIMEOUT``, ``STATUS``), reads the JSON
status document (``communicators`` with ``ranks`` and ``missing_ranks``, each
missing rank ``unresponsive`` and/or ``considered_dead``) and exports counts and,
while a rank is missing, which host and GPU it was. Off by default.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorEnv, CollectorFactory

from ._collector import RasCollector
from ._metrics import NAME
from ._settings import RasSettings


def _create(settings: RasSettings, env: CollectorEnv) -> RasCollector:
    return RasCollector(settings, env)


FACTORY: CollectorFactory[RasSettings] = CollectorFactory(
    name=NAME,
    settings=RasSettings,
    create=_create,
    description="NCCL RAS status: communicators, missing and unresponsive ranks.",
    default_enabled=False,
)
