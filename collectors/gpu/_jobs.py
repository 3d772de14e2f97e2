"""Job attribution: which Slurm job, Kubernetes pod or systemd unit owns a GPU process.

Read from ``<proc_root>/<pid>/cgroup`` (and ``environ`` where readable, usually
only as root or the same user). Used for the ``fabricwatch_gpu_job_info`` info
metric and carried on incidents; never a label on every series.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with path.open("rb") as f:
            return f.read(limit)
    except OSError:
        # Gone (process exited), no permission (another user's environ), not procfs.
        return None


def resolve_job(proc_root: Path, pid: int) -> JobRef | None:
    """The job of one PID: Slurm (cgroup, then environ), then Kubernetes pod, then systemd unit."""
    base = proc_root / str(pid)
    raw = _read(base / "cgroup", _CGROUP_MAX)
    from_cgroup = job_from_cgroup(raw.decode("utf-8", "replace")) if raw is not None else None
    if from_cgroup is not None and from_cgroup.kind == "slurm":
        return from_cgroup
    env = _read(base / "environ", _ENVIRON_MAX)
    if env is not None:
        from_env = job_from_environ(env)
        if from_env is not None:
            return from_env
    return from_cgroup


class JobResolver:
    """Caches :func:`resolve_job` per PID for as long as the PID keeps showing up."""

    def __init__(self, proc_root: Path) -> None:
        self._proc_root = proc_root
        self._cache: dict[int, JobRef | None] = {}

    def resolve(self, pid: int) -> JobRef | None:
        """The job of ``pid`` (cached)."""
        if pid in self._cache:
            return self._cache[pid]
        job = resolve_job(self._proc_root, pid)
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
