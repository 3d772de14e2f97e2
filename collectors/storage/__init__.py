"""Storage collector: what checkpoint writers (and the GPUs waiting on them) feel.

Sources, all under the injectable procfs/sysfs roots of
:class:`~fabricwatch.collector.CollectorEnv`:

* ``/proc/diskstats`` — per block device writes, bytes, average write and
  flush latency per interval, in-flight I/Os, utilisation, write bursts;
* ``/proc/self/mountstats`` — per NFS mount and op (WRITE, COMMIT, READ):
  ops, bytes, average RTT and execute time per interval, retransmissions,
  timeouts;
* ``/proc/self/mountinfo`` — which mount, file system and device or NFS
  server each configured checkpoint path lives on;
* an active probe per configured path (write + fsync + delete in a thread of
  its own, with a timeout) and write-burst detection against a baseline.

``fabricwatch probe-storage`` (:mod:`fabricwatch.cli.probe_storage`) is the on-demand
checkpoint rehearsal.
"""

from __future__ import annotations

from fabricwatch.collector import CollectorEnv, CollectorFactory

from ._collector import StorageCollector
from ._metrics import NAME
from ._settings import StorageSettings


def _create(settings: StorageSettings, env: CollectorEnv) -> StorageCollector:
    return StorageCollector(settings, env)


FACTORY: CollectorFactory[StorageSettings] = CollectorFactory(
    name=NAME,
    settings=StorageSettings,
    create=_create,
    description="Block devices, NFS mounts, checkpoint-path probes and write bursts.",
    default_enabled=True,
)
