"""Job keys that are the same on every node of a multi-node job.

The GPU collector computes a job key per compute process (``slurm:<id>``,
``k8s:<namespace>/<owner>``, ``label:<value>``, ``systemd:<unit>``); fleet
replay derives the same keys from exporter labels. Both use these functions,
so a job joins across nodes and across live and replay.
"""

from __future__ import annotations

import re

# generateName suffixes: 5 characters of the apimachinery alphabet (no vowels,
# no 0/1/3 that read as letters), so real words ("bench", "train") never match.
_GENERATED = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5}$")
_ROLES = frozenset({"master", "worker", "launcher", "chief", "ps", "evaluator", "driver", "leader"})


def pod_owner(pod: str) -> str:
    """The workload a pod name belongs to, the same for every pod of a multi-node job.

    Strips what differs between the pods of one workload, from the end: a
    ``generateName`` suffix (Job, JobSet pods), indices (indexed Job, JobSet job
    and pod index, StatefulSet, Kubeflow replica index) and a Kubeflow replica
    role (``master``, ``worker``, ``launcher``...). ``llama-worker-12`` and
    ``llama-master-0`` -> ``llama`` (PyTorchJob); ``run7-workers-0-3-x7k2p`` ->
    ``run7-workers`` (JobSet replicated job); ``train-4-bq2zk`` -> ``train``
    (indexed Job). A name that would strip to nothing is kept whole.
    """
    parts = pod.split("-")
    if len(parts) > 1 and _GENERATED.match(parts[-1]):
        parts.pop()
    while len(parts) > 1 and parts[-1].isdigit():
        parts.pop()
    if len(parts) > 1 and parts[-1] in _ROLES:
        parts.pop()
    return "-".join(parts) or pod
