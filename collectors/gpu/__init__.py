"""GPU collector over NVML: activity, power, clocks, NVLink per link, XIDs, fabric clique, jobs.

Only :mod:`._facade` imports ``pynvml``. With no driver the collector starts,
logs the reason once and reports itself absent until NVML appears.
:class:`fabricwatch.testing.sim_gpu.SimulatedGPUs` stands in for NVML in tests, in
``fabricwatch demo`` and with ``backend = "simulated"``.
"""

from __future__ import annotations

from typing import Any

from fabricwatch.collector import Collector, CollectorEnv, CollectorFactory

from ._collector import GpuCollector
from ._facade import PynvmlBackend
from ._settings import GpuSettings
from ._types import GpuBackend


def _create(settings: GpuSettings, env: CollectorEnv) -> Collector:
    """Build the collector over NVML, or over idle simulated GPUs when configured."""
    backend: GpuBackend
    if settings.backend == "simulated":
        from fabricwatch.testing.sim_gpu import SimulatedGPUs

        backend = SimulatedGPUs(settings.simulated_model, settings.simulated_count, env.monotonic)
    else:
        backend = PynvmlBackend(monotonic=env.monotonic)
    return GpuCollector(settings, env, backend)


# Typed loosely so the registry's list accepts it next to other collectors' factories.
FACTORY: CollectorFactory[Any] = CollectorFactory(
    name="gpu",
    settings=GpuSettings,
    create=_create,
    description="NVIDIA GPUs over NVML: activity, power, NVLink, XIDs, fabric clique, jobs.",
    default_enabled=True,
)
