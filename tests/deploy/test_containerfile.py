"""deploy/kubernetes/Containerfile agrees with the DaemonSet and the package layout.

No registry or builder is reachable here, so the image is not built: these
checks read the Containerfile, the manifests, the DaemonSet's config and the
package builder's constants, which is where they could drift apart.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import tomllib
from types import ModuleType
from typing import Any

import yaml

from fabricwatch.cli import build_parser
from fabricwatch.collectors import builtin_registry
from fabricwatch.config import parse_config
from fabricwatch.defaults import DEFAULT_CONFIG_PATH, DEFAULT_PORT
from tests.deploy.conftest import DEPLOY, K8S, REPO

CONTAINERFILE = K8S / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in CONTAINERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def one(name: str) -> str:
    (value,) = [v for k, v in instructions() if k == name]
    return value


def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fw_deb_build2", DEPLOY / "debian" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def daemonset() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((K8S / "daemonset.yaml").read_text(encoding="utf-8"))
    return doc


def container(name: str = "fabricwatch") -> dict[str, Any]:
    pod = daemonset()["spec"]["template"]["spec"]
    found: list[dict[str, Any]] = [
        c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == name
    ]
    (c,) = found
    return c


def test_installs_the_package_and_runs_its_program() -> None:
    build = build_module()
    runs = " ".join(v for k, v in instructions() if k == "RUN")
    (copy,) = [v for k, v in instructions() if k == "COPY"]
    src, dest = shlex.split(copy)
    # What scripts/build-deb writes (dist/fabricwatch_<version>-<rev>_<arch>.deb).
    assert src == "dist/fabricwatch_*.deb"
    assert "apt-get install" in runs and "/tmp/fabricwatch_*.deb" in runs
    assert dest == "/tmp/"
    assert one("FROM").startswith("docker.io/library/debian:bookworm")  # the package's Debian
    entry = json.loads(one("ENTRYPOINT"))
    assert entry == ["/usr/bin/fabricwatch"]
    # /usr/bin/fabricwatch is the package's link into the venv under /opt/fabricwatch.
    assert str(build.PREFIX) == "/opt/fabricwatch/venv"
    assert (REPO / "scripts" / "build-deb").is_file()
    cmd = json.loads(one("CMD"))
    c = container()
    assert c["args"] == cmd  # the DaemonSet repeats the image's command: same program
    args = build_parser().parse_args(cmd)
    assert args.command == "run" and args.config == DEFAULT_CONFIG_PATH


def test_runs_as_the_daemonsets_non_root_user() -> None:
    user, _, group = one("USER").partition(":")
    pod = daemonset()["spec"]["template"]["spec"]
    assert int(user) == pod["securityContext"]["runAsUser"] != 0
    assert int(group) == pod["securityContext"]["runAsGroup"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Only the init container runs as root, to hand the host's state dir to that user.
    init = container("state-dir")
    assert init["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN", "FOWNER"],
    }
    assert f"chown {user}:{group} /var/lib/fabricwatch" in " ".join(init["command"])


def test_port_and_environment_match() -> None:
    assert int(one("EXPOSE")) == DEFAULT_PORT
    (port,) = container()["ports"]
    assert port["containerPort"] == DEFAULT_PORT
    env = dict(kv.split("=", 1) for kv in shlex.split(one("ENV")))
    ds_env = {e["name"]: e.get("value") for e in container()["env"]}
    assert env["CREDENTIALS_DIRECTORY"] == ds_env["CREDENTIALS_DIRECTORY"]


def test_host_mounts_are_the_ones_the_config_expects() -> None:
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in daemonset()["spec"]["template"]["spec"]["volumes"]}
    cfg = parse_config(
        tomllib.loads((K8S / "fabricwatch.toml").read_text(encoding="utf-8")),
        builtin_registry(),
    )
    host = {p: volumes[m["name"]].get("hostPath", {}).get("path") for p, m in mounts.items()}
    assert host[str(cfg.daemon.proc_root)] == "/proc"
    assert host[str(cfg.daemon.sys_root)] == "/sys"
    assert host[str(cfg.daemon.state_dir)] == "/var/lib/fabricwatch"
    assert mounts[str(cfg.daemon.state_dir)].get("readOnly") is not True
    assert str(DEFAULT_CONFIG_PATH.parent) in mounts  # the ConfigMap replaces the conffile
    assert volumes[mounts[str(DEFAULT_CONFIG_PATH.parent)]["name"]]["configMap"]
    creds = {e["name"]: e.get("value") for e in container()["env"]}["CREDENTIALS_DIRECTORY"]
    assert creds in mounts and "secret" in volumes[mounts[creds]["name"]]
    # Every mount the Containerfile documents is one the DaemonSet makes.
    text = CONTAINERFILE.read_text(encoding="utf-8")
    documented = {
        ln.split()[1] for ln in text.splitlines() if ln.startswith("#   /") and len(ln.split()) > 2
    }
    expanded = set()
    for d in documented:
        expanded.update(d.split(","))
    assert {p.strip() for p in expanded if p.strip()} <= set(mounts) | {
        str(cfg.daemon.proc_root),
        str(cfg.daemon.sys_root),
    }


def test_image_tag_is_the_package_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    images = {container()["image"], container("state-dir")["image"]}
    assert {i.rsplit(":", 1)[1] for i in images} == {version}
