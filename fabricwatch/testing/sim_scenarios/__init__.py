"""Scenario simulator with ground truth, for tests, the bench and the demo.

A :class:`Scenario` describes one node's telemetry over time: healthy
training with a compute/communication duty cycle, plus :class:`Injection`\\ s
of faults (every engine cause, and a hang with no evidence, ``unknown``) and
confounders (job restart, evaluation dips and phases, stragglers, collector
gaps, counter resets), with 10 % missing samples and switch counters that
refresh every other poll by default. It produces the ``docs/signals.md``
families as :class:`~fabricwatch.readings.Reading`\\ s, so the same engine runs
on them live (:func:`run_live`) and in replay (written as OpenMetrics).

Timestamps are whole milliseconds (``int_ms / 1000``), so a round trip
through OpenMetrics text or Prometheus reproduces them bit for bit.

Where things live: the injection kinds, one handler each, in ``_kinds``
(:data:`KINDS`); the scenario and the per-second simulator in ``_sim``; the
real-episode generators in ``_episodes``; the live feed in ``_live``.
"""

from __future__ import annotations

from fabricwatch.testing.sim_scenarios._episodes import (
    CounterArtefacts,
    LlamaCheckpoints,
    ZhejiangJobStall,
    llama_checkpoint_stalls,
    zhejiang_job_stall,
)
from fabricwatch.testing.sim_scenarios._kinds import CONFOUNDERS, FAULTS, KINDS, Kind
from fabricwatch.testing.sim_scenarios._live import COLLECTOR_OF, flatten, new_store, run_live
from fabricwatch.testing.sim_scenarios._model import (
    Injection,
    NodeSpec,
    TruthIncident,
    nvlink_collapse_lead,
)
from fabricwatch.testing.sim_scenarios._sim import Scenario, Step

__all__ = [
    "COLLECTOR_OF",
    "CONFOUNDERS",
    "FAULTS",
    "KINDS",
    "CounterArtefacts",
    "Injection",
    "Kind",
    "LlamaCheckpoints",
    "NodeSpec",
    "Scenario",
    "Step",
    "TruthIncident",
    "ZhejiangJobStall",
    "flatten",
    "llama_checkpoint_stalls",
    "new_store",
    "nvlink_collapse_lead",
    "run_live",
    "zhejiang_job_stall",
]
