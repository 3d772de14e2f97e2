"""Job identity: the same job key on every node of a multi-node job, from
constructed cgroup v1/v2 layouts of Slurm and the kubelet (tests/data/jobs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabricwatch.collectors.gpu._jobs import (
    JobResolver,
    label_from_environ,
    pod_from_logs,
    resolve_job,
)
from fabricwatch.jobkeys import pod_owner

DATA = Path(__file__).resolve().parents[1] / "data" / "jobs"


def job(node: str, pid: int) -> str | None:
    got = resolve_job(DATA / node / "proc", pid)
    return None if got is None else str(got)


def test_slurm_cgroup_v1_v2_and_environment_give_one_key() -> None:
    keys = {job("slurm-v1", 4242), job("slurm-v2", 5151), job("slurm-env", 6161)}
    assert keys == {"slurm:8812"}


def test_a_pytorchjob_across_cgroup_drivers_and_versions_gives_one_key() -> None:
    master = job("k8s-v1-cgroupfs", 700)  # cgroup v1, cgroupfs driver
    worker = job("k8s-v2-systemd", 800)  # cgroup v2, systemd driver
    assert master == worker == "k8s:training/llama"


def test_a_jobset_across_nodes_and_runtimes_gives_one_key() -> None:
    crio = job("k8s-v2-systemd", 801)  # guaranteed QoS, CRI-O scope
    containerd = job("k8s-v2-cgroupfs", 900)  # besteffort, cgroupfs
    assert crio == containerd == "k8s:research/run7-workers"


def test_without_the_pod_log_directory_the_pod_uid_is_the_key() -> None:
    assert job("k8s-nologs", 910) == "k8s:d3e4f5a6-b7c8-4d9e-8f0a-2b3c4d5e6f7a"


def test_a_configured_label_wins_and_its_names_are_configurable() -> None:
    assert job("label", 1000) == "label:exp-42"
    proc = DATA / "label" / "proc"
    assert str(resolve_job(proc, 1000, env_names=("OTHER",))) == "slurm:1"
    r = JobResolver(proc, env_names=("NOPE", "FABRICWATCH_JOB"))
    assert r.jobs([1000]) == ["label:exp-42"]


def test_the_pod_log_root_follows_a_containers_host_proc(tmp_path: Path) -> None:
    host = tmp_path / "host"
    shutil.copytree(DATA / "k8s-v1-cgroupfs", host)
    assert str(resolve_job(host / "proc", 700)) == "k8s:training/llama"
    assert str(resolve_job(host / "proc", 700, pod_logs=tmp_path / "none")).startswith("k8s:0c6d")


@pytest.mark.parametrize(
    ("pod", "owner"),
    [
        ("llama-master-0", "llama"),  # PyTorchJob
        ("llama-worker-12", "llama"),
        ("mpi-bert-launcher", "mpi-bert"),  # MPIJob
        ("mpi-bert-worker-3", "mpi-bert"),
        ("run7-workers-0-3-x7k2p", "run7-workers"),  # JobSet replicated job
        ("train-4-bq2zk", "train"),  # indexed Job
        ("train-bq2zk", "train"),  # plain Job
        ("trainer-7", "trainer"),  # StatefulSet
        ("bench", "bench"),  # "bench" is no generateName suffix (vowel)
        ("worker", "worker"),  # never strips to nothing
        ("0", "0"),
    ],
)
def test_pod_owner(pod: str, owner: str) -> None:
    assert pod_owner(pod) == owner


def test_pod_logs_garbage_and_truncation(tmp_path: Path) -> None:
    uid = "0c6d1f2e-3a4b-4c5d-8e9f-a0b1c2d3e4f5"
    logs = tmp_path / "pods"
    logs.mkdir()
    for name in (
        f"training_llama-master-0_{uid[:20]}",  # truncated UID
        f"Training_Bad Name_{uid}",  # not DNS-1123
        f"a_b_c_{uid}",  # too many parts
        "garbage",
    ):
        (logs / name).mkdir()
    (logs / f"x_{uid}").write_text("a file, two parts")
    assert pod_from_logs(logs, uid) is None
    assert pod_from_logs(tmp_path / "missing", uid) is None
    assert pod_from_logs(logs / "garbage" / "x", uid) is None
    (logs / f"ns_pod-1_{uid.upper()}").mkdir()  # kubelet writes lower case; accept either
    assert pod_from_logs(logs, uid) == ("ns", "pod-1")


def test_a_pod_log_root_that_is_a_file_falls_back_to_the_uid(tmp_path: Path) -> None:
    host = tmp_path / "host"
    shutil.copytree(DATA / "k8s-v1-cgroupfs", host)
    pods = host / "var" / "log" / "pods"
    shutil.rmtree(pods)
    pods.write_text("not a directory")
    assert str(resolve_job(host / "proc", 700)).startswith("k8s:0c6d1f2e")


def test_label_from_environ_garbage() -> None:
    names = ("FABRICWATCH_JOB",)
    assert label_from_environ(b"FABRICWATCH_JOB=exp 42\x00", names) is None  # space
    assert label_from_environ(b"FABRICWATCH_JOB=\x00", names) is None
    assert label_from_environ(b"FABRICWATCH_JOB=" + b"a" * 200, names) is None
    assert label_from_environ(b"\xff\xfe=\x00FABRICWATCH_JO", names) is None  # truncated
    assert label_from_environ(b"FABRICWATCH_JOB=a\x00FABRICWATCH_JOB=b", names) is not None
    assert str(label_from_environ(b"FABRICWATCH_JOB=a\x00FABRICWATCH_JOB=b", names)) == "label:a"
