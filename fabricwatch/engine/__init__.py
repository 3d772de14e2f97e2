"""The correlation engine: GPU stalls of running jobs, their causes, incidents, replay.

The daemon builds one :class:`Engine` per node over its snapshot store and
calls :meth:`Engine.tick` every engine tick; ``fabricwatch replay`` runs the
same engine over recorded telemetry.
"""

from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import Incident, IncidentTransition, to_json, transition_json
from fabricwatch.engine.settings import EngineSettings

__all__ = [
    "Engine",
    "EngineSettings",
    "Incident",
    "IncidentDB",
    "IncidentTransition",
    "to_json",
    "transition_json",
]
