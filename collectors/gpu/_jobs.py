"""Job attribution: which job owns a GPU process, with the same key on every node.

Read from ``<proc_root>/<pid>/cgroup`` (and ``environ`` where readable, usually
only as root or the same user). Used for the ``fabricwatch_gpu_job_info`` info
metric and carried on incidents; never a label on every series. The fleet
groups the node incidents of one job by this key, so it must be the same on
every node of a multi-node job:

- a configured label: the first of ``env_names`` (default ``FABRICWATCH_JOB``)
  set in the process environment (``label:<value>``);
- Slurm: ``SLURM_JOB_ID`` from the cgroup path (v1 ``/slurm/uid_N/job_N/...``,
  v2 ``.../slurmstepd.scope/job_N/...``) or the environment (``slurm:<id>``);
- Kubernetes: the pod UID from the cgroup path (cgroupfs and systemd drivers,
  v1 and v2), then the pod's namespace and name from the kubelet's pod log
  directory (``/var/log/pods/<namespace>_<pod>_<uid>``, next to procfs: a
  container mounting the host's ``/proc`` as ``/host/proc`` mounts
  ``/host/var/log/pods``), and the owning workload from the pod name
  (``k8s:<namespace>/<owner>``, see :func:`pod_owner`); the pod UID alone
  (``k8s:<uid>``, one key per pod, not per job) when the name is unknown;
- systemd: the innermost service (``systemd:<unit>``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.jobkeys import pod_owner

_CGROUP_MAX = 64 * 1024
_ENVIRON_MAX = 256 * 1024

# Slurm cgroup v1: /slurm/uid_1000/job_123/step_0/task_0;
# v2: /system.slice/slurmstepd.scope/job_123/step_0/user/task_0.
_SLURM = re.compile(r"/job_(\d+)(?=/|$)")
# cgroupfs driver: /kubepods/burstable/pod<uid>/<ctr>; systemd driver:
# /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/...
_K8S = re.compile(
    r"kubepods.*?pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_]"
    r"[0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})"
)
_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.(service|scope)$")
_SLURM_ENV = (b"SLURM_JOB_ID=", b"SLURM_JOBID=")
DEFAULT_ENV_NAMES = ("FABRICWATCH_JOB",)
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@=+-]{0,127}$")
_DNS = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_PODS_MAX = 100_000


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job: ``kind`` is ``slurm``, ``k8s`` or ``systemd``; ``str()`` gives ``kind:id``."""

    kind: str
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


def _cgroup_paths(text: str) -> list[str]:
    paths: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            paths.append(parts[2].strip())
    return paths


def job_from_cgroup(text: str) -> JobRef | None:
    """The job a ``/proc/<pid>/cgroup`` text (v1 or v2) names; None when it names none."""
    paths = _cgroup_paths(text)
    for p in paths:
        m = _SLURM.search(p)
        if m:
            return JobRef("slurm", m.group(1))
    for p in paths:
        m = _K8S.search(p)
        if m:
            return JobRef("k8s", m.group(1).replace("_", "-").lower())
    for p in paths:
        unit = _systemd_unit(p)
        if unit:
            return JobRef("systemd", unit)
    return None


def _systemd_unit(path: str) -> str | None:
    services: list[str] = []
    scopes: list[str] = []
    for comp in path.split("/"):
        m = _UNIT.match(comp)
        if not m:
            continue
        (services if m.group(1) == "service" else scopes).append(comp)
    # The innermost service is the unit that started the work; a scope only
    # when no service is on the path (e.g. ``systemd-run --scope``).
    if services:
        return services[-1]
    if scopes and scopes[-1] != "init.scope":
        return scopes[-1]
    return None


def job_from_environ(data: bytes) -> JobRef | None:
    """A Slurm job ID from a NUL-separated ``environ`` block; None when absent or malformed."""
    for entry in data.split(b"\x00"):
        for prefix in _SLURM_ENV:
            if entry.startswith(prefix):
                value = entry[len(prefix) :]
                if value.isdigit() and len(value) <= 20:
                    return JobRef("slurm", value.decode("ascii"))
    return None


def label_from_environ(data: bytes, names: Iterable[str]) -> JobRef | None:
    """The configured job label: the first of ``names`` set to a valid value."""
    env: dict[bytes, bytes] = {}
    for entry in data.split(b"\x00"):
        key, sep, value = entry.partition(b"=")
        if sep and key not in env:
            env[key] = value
    for name in names:
        raw = env.get(name.encode("ascii", "replace"))
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace")
        if _LABEL.match(text):
            return JobRef("label", text)
    return None


def pod_from_logs(pod_logs: Path, uid: str) -> tuple[str, str] | None:
    """(namespace, pod name) of a pod UID from the kubelet's ``/var/log/pods``
    (``<namespace>_<pod>_<uid>`` directories); None when not there or malformed."""
    try:
        with os.scandir(pod_logs) as it:
            for n, entry in enumerate(it):
                if n >= _PODS_MAX:
                    break
                parts = entry.name.split("_")
                if len(parts) != 3 or parts[2].lower() != uid:
                    continue
                ns, pod = parts[0], parts[1]
                if _DNS.match(ns) and _DNS.match(pod):
                    return ns, pod
    except OSError:
        return None  # not a kubelet node, not mounted, no permission
    return None


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with path.open("rb") as f:
            return f.read(limit)
    except OSError:
        # Gone (process exited), no permission (another user's environ), not procfs.
        return None


def default_pod_logs(proc_root: Path) -> Path:
    """The kubelet's pod log directory next to procfs (``/proc`` -> ``/var/log/pods``,
    ``/host/proc`` -> ``/host/var/log/pods``)."""
    return proc_root.parent / "var" / "log" / "pods"


def resolve_job(
    proc_root: Path,
    pid: int,
    *,
    env_names: Iterable[str] = DEFAULT_ENV_NAMES,
    pod_logs: Path | None = None,
) -> JobRef | None:
    """The job of one PID: configured label, Slurm (cgroup, then environ),
    Kubernetes owner (else pod UID), then systemd unit."""
    base = proc_root / str(pid)
    raw = _read(base / "cgroup", _CGROUP_MAX)
    from_cgroup = job_from_cgroup(raw.decode("utf-8", "replace")) if raw is not None else None
    env = _read(base / "environ", _ENVIRON_MAX)
    if env is not None:
        label = label_from_environ(env, env_names)
        if label is not None:
            return label
    if from_cgroup is not None and from_cgroup.kind == "slurm":
        return from_cgroup
    if env is not None:
        from_env = job_from_environ(env)
        if from_env is not None:
            return from_env
    if from_cgroup is not None and from_cgroup.kind == "k8s":
        found = pod_from_logs(pod_logs or default_pod_logs(proc_root), from_cgroup.id)
        if found is not None:
            return JobRef("k8s", f"{found[0]}/{pod_owner(found[1])}")
    return from_cgroup


class JobResolver:
    """Caches :func:`resolve_job` per PID for as long as the PID keeps showing up."""

    def __init__(
        self,
        proc_root: Path,
        *,
        env_names: Iterable[str] = DEFAULT_ENV_NAMES,
        pod_logs: Path | None = None,
    ) -> None:
        self._proc_root = proc_root
        self._env_names = tuple(env_names)
        self._pod_logs = pod_logs
        self._cache: dict[int, JobRef | None] = {}

    def resolve(self, pid: int) -> JobRef | None:
        """The job of ``pid`` (cached)."""
        if pid in self._cache:
            return self._cache[pid]
        job = resolve_job(self._proc_root, pid, env_names=self._env_names, pod_logs=self._pod_logs)
        self._cache[pid] = job
        return job

    def retain(self, pids: Iterable[int]) -> None:
        """Forget PIDs no longer running on any GPU (a reused PID is then looked up afresh)."""
        keep = set(pids)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]

    def jobs(self, pids: Iterable[int]) -> list[str]:
        """Distinct jobs of some PIDs as ``kind:id`` strings, sorted."""
        out = {str(j) for p in pids if (j := self.resolve(p)) is not None}
        return sorted(out)
