"""Job attribution from /proc/<pid>/cgroup and environ (fixture proc trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.collectors.gpu._jobs import (
    JobRef,
    JobResolver,
    job_from_cgroup,
    job_from_environ,
    resolve_job,
)


@pytest.mark.parametrize(
    ("text", "job"),
    [
        # Slurm, cgroup v1 (several controllers) and v2.
        (
            "12:memory:/slurm/uid_1000/job_4711/step_0/task_0\n"
            "11:cpuset:/slurm/uid_1000/job_4711/step_0\n",
            "slurm:4711",
        ),
        ("0::/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0\n", "slurm:123"),
        ("0::/system.slice/slurmstepd.scope/job_123\n", "slurm:123"),
        # Kubernetes, cgroupfs driver and systemd driver (underscores in the UID).
        (
            "0::/kubepods/burstable/pod5f1e9c3a-2b4d-4c6e-8f00-112233445566/abcdef\n",
            "k8s:5f1e9c3a-2b4d-4c6e-8f00-112233445566",
        ),
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            "kubepods-besteffort-pod5F1E9C3A_2B4D_4C6E_8F00_112233445566.slice/"
            "cri-containerd-0123.scope\n",
            "k8s:5f1e9c3a-2b4d-4c6e-8f00-112233445566",
        ),
        # systemd: the innermost service; a scope only when no service.
        ("0::/system.slice/train-llm.service\n", "systemd:train-llm.service"),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n",
            "systemd:user@1000.service",
        ),
        ("0::/system.slice/run-r1234.scope\n", "systemd:run-r1234.scope"),
        ("0::/init.scope\n", None),
        ("0::/\n", None),
    ],
)
def test_cgroup_forms(text: str, job: str | None) -> None:
    got = job_from_cgroup(text)
    assert (None if got is None else str(got)) == job


@pytest.mark.parametrize(
    "text",
    ["", "garbage without colons", "1:cpu", "0::relative/job_1", "\x00\xff::\n", "::::\n" * 100],
)
def test_cgroup_garbage(text: str) -> None:
    assert job_from_cgroup(text) is None


def test_cgroup_job_id_must_end_the_component() -> None:
    assert job_from_cgroup("0::/slurm/job_12x/step_0\n") is None
    assert str(job_from_cgroup("0::/a/job_12/b\n")) == "slurm:12"


def test_environ() -> None:
    assert job_from_environ(b"PATH=/bin\x00SLURM_JOB_ID=991\x00HOME=/root\x00") == JobRef(
        "slurm", "991"
    )
    assert job_from_environ(b"SLURM_JOBID=5") == JobRef("slurm", "5")
    assert job_from_environ(b"SLURM_JOB_ID=12abc\x00") is None  # malformed
    assert job_from_environ(b"SLURM_JOB_ID=" + b"9" * 40) is None  # absurd length
    assert job_from_environ(b"\xff\xfe\x00garbage") is None
    assert job_from_environ(b"SLURM_JOB_I") is None  # truncated


def _proc(root: Path, pid: int, cgroup: str | None = None, environ: bytes | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)
    if environ is not None:
        (d / "environ").write_bytes(environ)


def test_resolve_precedence(tmp_path: Path) -> None:
    # Slurm in cgroup beats everything.
    _proc(tmp_path, 10, "0::/system.slice/slurmstepd.scope/job_7/step_0\n", b"SLURM_JOB_ID=8\x00")
    # A systemd unit cgroup loses to a Slurm job ID in the environment (srun without cgroups).
    _proc(tmp_path, 11, "0::/system.slice/sshd.service\n", b"SLURM_JOB_ID=9\x00")
    # Environment unreadable (a directory here; EACCES on a real host) -> the cgroup's answer.
    _proc(tmp_path, 12, "0::/system.slice/train.service\n")
    (tmp_path / "12" / "environ").mkdir()
    # Neither file: a process that exited.
    assert str(resolve_job(tmp_path, 10)) == "slurm:7"
    assert str(resolve_job(tmp_path, 11)) == "slurm:9"
    assert str(resolve_job(tmp_path, 12)) == "systemd:train.service"
    assert resolve_job(tmp_path, 13) is None


def test_truncated_and_binary_files(tmp_path: Path) -> None:
    big = "0::/" + "x/" * 40000 + "job_5\n"  # longer than the read limit: cut, no job
    _proc(tmp_path, 20, big)
    _proc(tmp_path, 21, "\x00\x01\x02binary\n0::/system.slice/a.service")
    assert resolve_job(tmp_path, 20) is None
    assert str(resolve_job(tmp_path, 21)) == "systemd:a.service"


def test_resolver_cache_and_retain(tmp_path: Path) -> None:
    _proc(tmp_path, 30, "0::/slurm/uid_0/job_1/step_0\n")
    r = JobResolver(tmp_path)
    assert r.jobs([30, 30, 31]) == ["slurm:1"]
    # Cached while the PID keeps running ...
    (tmp_path / "30" / "cgroup").write_text("0::/slurm/uid_0/job_2/step_0\n")
    assert r.jobs([30]) == ["slurm:1"]
    # ... looked up afresh once it disappeared from the GPUs (PID reuse).
    r.retain([])
    assert r.jobs([30]) == ["slurm:2"]
