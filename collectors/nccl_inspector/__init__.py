"""NCCL Inspector collector: per-GPU collective bandwidth from NCCL's own profiler plugin.

NCCL Inspector (``ext-profiler/inspector``, NCCL >= 2.30) with
``NCCL_INSPECTOR_PROM_DUMP=1`` writes node_exporter textfile files
``<NCCL_INSPECTOR_DUMP_DIR>/nccl_inspector_metrics_<GPU UUID>.prom``: per
communicator and rank, the latest completed collective's
``nccl_algorithm_bandwidth_gbs``, ``nccl_bus_bandwidth_gbs`` and
``nccl_collective_exec_time_microseconds``, labelled with ``comm_id``,
``hostname``, ``rank``, ``nranks``, ``n_nodes``, ``gpu_device_id`` (``GPU<n>``),
``collective``, ``coll_sn`` and the Slurm job. Off by default; point
``dump_dir`` at that directory.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorEnv, CollectorFactory

from ._collector import InspectorCollector
from ._metrics import NAME
from ._settings import InspectorSettings


def _create(settings: InspectorSettings, env: CollectorEnv) -> InspectorCollector:
    return InspectorCollector(settings, env)


FACTORY: CollectorFactory[InspectorSettings] = CollectorFactory(
    name=NAME,
    settings=InspectorSettings,
    create=_create,
    description="NCCL Inspector Prometheus dumps: per-GPU collective bandwidth and time.",
    default_enabled=False,
)
