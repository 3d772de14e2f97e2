"""The Debian package: built by deploy/debian/build.py (= scripts/build-deb), installed
into a throwaway root with the real dpkg, and checked as an operator would.

The build is offline and bounded: the project's wheel plus the dependencies
already installed in this test venv (``--deps-from``), on Debian's own
/usr/bin/python3, so the test needs no index. ``scripts/build-deb`` without
options installs the same dependencies as wheels from PyPI instead.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import source_tree_build
from tests.deploy.conftest import REPO, need
from tests.deploy.test_systemd import MAX_EXPOSURE

# The package build (a venv, bytecode, dpkg-deb) takes a minute on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUILD = REPO / "deploy" / "debian" / "build.py"
UNIT = "lib/systemd/system/fabricwatch.service"
CONFFILE = "etc/fabricwatch/fabricwatch.toml"
EXPECTED_FILES = (
    "usr/bin/fabricwatch",
    "opt/fabricwatch/venv/bin/fabricwatch",
    "opt/fabricwatch/venv/pyvenv.cfg",
    UNIT,
    CONFFILE,
    "etc/fabricwatch/credentials",
    "usr/share/fabricwatch/dashboards/fabricwatch-node.json",
    "usr/share/fabricwatch/dashboards/fabricwatch-fleet.json",
    "usr/share/fabricwatch/dashboards/fabricwatch-switch.json",
    "usr/share/fabricwatch/prometheus/rules.yml",
    "usr/share/fabricwatch/alertmanager/alertmanager.yml",
    "usr/share/fabricwatch/grafana/provisioning/dashboards/fabricwatch.yml",
    "usr/share/man/man8/fabricwatch.8.gz",
    "usr/share/doc/fabricwatch/copyright",
    "usr/share/doc/fabricwatch/LICENSE",
    "usr/share/doc/fabricwatch/runbook.md",
)


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, capture_output=True, text=True, timeout=300, check=False, **kw
    )


@dataclass(frozen=True)
class Built:
    deb: Path
    work: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need("dpkg-deb", "dpkg")
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("needs Debian's /usr/bin/python3 (the package's interpreter)")
    if run(["/usr/bin/python3", "-c", "import ensurepip"]).returncode != 0:
        pytest.skip("needs python3-venv (Debian package) for /usr/bin/python3")
    work = tmp_path_factory.mktemp("deb")
    with source_tree_build(tmp_path_factory):  # it builds the wheel from the source tree
        proc = run(
            [
                sys.executable,
                str(BUILD),
                "--deps-from",
                sys.prefix,
                "--compression",
                "none",
                "--out",
                str(work / "out"),
            ]
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deb = Path(proc.stdout.strip().splitlines()[-1])
    assert deb.is_file() and deb.name.startswith("fabricwatch_")
    return Built(deb, work)


def contents(deb: Path) -> dict[str, str]:
    """Path (no leading ./) -> the mode column of ``dpkg-deb --contents``."""
    proc = run(["dpkg-deb", "--contents", str(deb)])
    assert proc.returncode == 0, proc.stderr
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        fields = line.split(maxsplit=5)
        name = fields[5].split(" -> ")[0].removeprefix("./").rstrip("/")
        out[name] = fields[0]
    return out


def test_file_list(built: Built) -> None:
    files = contents(built.deb)
    missing = [f for f in EXPECTED_FILES if f not in files]
    assert not missing, missing
    assert files["usr/bin/fabricwatch"].startswith("l")  # symlink into the venv
    assert files["etc/fabricwatch/credentials"] == "drwx------"
    fields = run(["dpkg-deb", "--field", str(built.deb)]).stdout
    assert "Package: fabricwatch" in fields
    assert "Depends: python3 (>= 3.11), python3 (<< 3.12)" in fields
    conffiles = run(["dpkg-deb", "--info", str(built.deb), "conffiles"]).stdout
    assert conffiles.split() == [f"/{CONFFILE}"]


def test_shipped_files_are_the_repository_files(built: Built, tmp_path: Path) -> None:
    root = tmp_path / "x"
    assert run(["dpkg-deb", "-x", str(built.deb), str(root)]).returncode == 0
    assert (root / UNIT).read_text() == (REPO / "deploy/fabricwatch.service").read_text()
    assert (root / CONFFILE).read_text() == (REPO / "deploy/fabricwatch.toml").read_text()
    assert (root / "usr/share/doc/fabricwatch/LICENSE").read_text() == (
        REPO / "LICENSE"
    ).read_text()
    copyright_ = (root / "usr/share/doc/fabricwatch/copyright").read_text()
    assert copyright_.startswith("Format: https://www.debian.org/doc/packaging-manuals/")
    assert "License: Apache-2.0" in copyright_ and "Files: opt/fabricwatch/venv/" in copyright_
    man = gzip.decompress((root / "usr/share/man/man8/fabricwatch.8.gz").read_bytes()).decode()
    for command in ("run", "check-config", "incidents", "replay", "probe-storage", "fleet"):
        assert f".SS fabricwatch {command}" in man.replace("\\-", "-")
    assert "\\-\\-listen" in man and ".SH EXIT STATUS" in man
    # (groff lints the same generator's output in tests/core/test_manpage.py)
    cfg = (root / "opt/fabricwatch/venv/pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg and "fabricwatch-deb-" not in cfg  # no build path
    shebang = (root / "opt/fabricwatch/venv/bin/fabricwatch").read_text().splitlines()[0]
    assert shebang == "#!/opt/fabricwatch/venv/bin/python"
    # No build tools in the runtime venv.
    site = next((root / "opt/fabricwatch/venv/lib").glob("python3*/site-packages"))
    assert not list(site.glob("pip-*.dist-info")) and not list(site.glob("setuptools-*"))


class Dpkg:
    """The real dpkg, on an instance root and admin dir under tmp (no host side effects).

    Maintainer scripts run chroot-less with DPKG_ROOT set, as in a bootstrap.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        admin = root / "var/lib/dpkg"
        (admin / "updates").mkdir(parents=True)
        (admin / "info").mkdir()
        (admin / "status").touch()
        (admin / "available").touch()
        self.base = [
            "dpkg",
            f"--instdir={root}",
            f"--admindir={admin}",
            "--force-script-chrootless",
            "--force-depends",  # python3 is on the host, not in this root's database
            f"--log={root / 'dpkg.log'}",
        ]
        if os.geteuid() != 0:
            self.base.append("--force-not-root")

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([*self.base, *args], stdin=subprocess.DEVNULL)

    def status(self) -> str:
        proc = run(
            [
                "dpkg-query",
                f"--admindir={self.root / 'var/lib/dpkg'}",
                "-W",
                "-f",
                "${Status} ${Version}",
                "fabricwatch",
            ]
        )
        return proc.stdout.strip()


def repack(deb: Path, out: Path, revision: str, conffile_extra: str | None) -> Path:
    """The same package as a later revision, optionally with a changed shipped config."""
    tree = out.parent / f"tree-{revision}"
    assert run(["dpkg-deb", "-R", str(deb), str(tree)]).returncode == 0
    control = tree / "DEBIAN/control"
    text = control.read_text()
    version = next(ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith("Version:"))
    control.write_text(text.replace(f"Version: {version}", f"Version: {version}.{revision}"))
    if conffile_extra is not None:
        conf = tree / CONFFILE
        conf.write_text(conf.read_text() + conffile_extra)
        sums = tree / "DEBIAN/md5sums"
        digest = hashlib.md5(conf.read_bytes()).hexdigest()  # dpkg's md5sums format
        sums.write_text(
            "".join(
                f"{digest}  {CONFFILE}\n" if ln.endswith(f"  {CONFFILE}") else ln + "\n"
                for ln in sums.read_text().splitlines()
            )
        )
    assert run(["dpkg-deb", "-Znone", "-b", str(tree), str(out)]).returncode == 0
    shutil.rmtree(tree)
    return out


@pytest.fixture
def installed(built: Built, tmp_path: Path) -> Iterator[Dpkg]:
    dpkg = Dpkg(tmp_path / "root")
    proc = dpkg("-i", str(built.deb))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield dpkg


def in_namespace(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` where /opt/fabricwatch and /usr/bin/fabricwatch are the installed
    ones: a private mount namespace (root only) with the instance root laid over them."""
    mounts = (
        f"mount -t tmpfs none /opt && mkdir /opt/fabricwatch && "
        f"mount --bind {root}/opt/fabricwatch /opt/fabricwatch && "
        f"mount -t overlay overlay -o lowerdir={root}/usr/bin:/usr/bin /usr/bin"
    )
    return run(["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts} && {script}"])


def test_installed_program_unit_and_sandbox(installed: Dpkg) -> None:
    root = installed.root
    assert installed.status().startswith("install ok installed")
    # The installed interpreter path, even without the namespace below.
    venv_py = root / "opt/fabricwatch/venv/bin/python"
    proc = run([str(venv_py), str(root / "opt/fabricwatch/venv/bin/fabricwatch"), "version"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fabricwatch ") and "Python 3.11" in proc.stdout
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the unit checks need root and unshare(1) to mount the package at /opt")
    need("systemd-analyze")
    unit = root / UNIT
    proc = in_namespace(
        root,
        f"/usr/bin/fabricwatch version && systemd-analyze verify --man=no {unit} && "
        f"systemd-analyze security --offline=true --threshold=25 {unit}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("fabricwatch 0.")
    assert proc.stderr == "", proc.stderr  # verify is silent: ExecStart exists and runs
    score = float(proc.stdout.split("Overall exposure level for fabricwatch.service: ")[1][:3])
    print(f"installed unit exposure: {score}")
    assert score < MAX_EXPOSURE


def test_no_service_started_on_install(installed: Dpkg) -> None:
    log = (installed.root / "dpkg.log").read_text()
    assert "status installed fabricwatch" in log
    # Nothing enabled: no wants symlink anywhere under the root.
    wants = list(installed.root.glob("etc/systemd/system/*.wants/fabricwatch.service"))
    assert wants == []  # what the scripts tell systemd: test_maintainer_scripts_...


def test_conffile_kept_on_upgrade(installed: Dpkg, built: Built, tmp_path: Path) -> None:
    root = installed.root
    conf = root / CONFFILE
    shipped = conf.read_text()
    # 1. Unmodified locally, changed upstream: dpkg installs the new one silently.
    v2 = repack(built.deb, tmp_path / "v2.deb", "2", "\n# upstream 2\n")
    proc = installed("-i", str(v2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert conf.read_text() == shipped + "\n# upstream 2\n"
    # 2. The operator edits it; an upgrade with the same shipped file keeps the edit, no prompt.
    edited = conf.read_text() + '\n[daemon]\ncluster = "site-a"\n'
    conf.write_text(edited)
    v3 = repack(v2, tmp_path / "v3.deb", "3", None)
    proc = installed("-i", str(v3))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert conf.read_text() == edited
    assert not (root / f"{CONFFILE}.dpkg-dist").exists()
    # 3. Edited and changed upstream: dpkg would ask; non-interactively (as apt with
    # --force-confold) the operator's file stays and the new one lands beside it.
    v4 = repack(v3, tmp_path / "v4.deb", "4", "\n# upstream 4\n")
    proc = installed("--force-confold", "-i", str(v4))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert conf.read_text() == edited
    assert (root / f"{CONFFILE}.dpkg-dist").read_text().endswith("\n# upstream 4\n")
    assert installed.status().endswith("-1.2.3.4")  # the last revision is installed


def test_remove_keeps_state_and_config_purge_deletes_them(installed: Dpkg) -> None:
    root = installed.root
    # What systemd's StateDirectory= with DynamicUser= leaves after the service ran.
    state = root / "var/lib/private/fabricwatch"
    state.mkdir(parents=True)
    (state / "incidents.sqlite3").write_bytes(b"incidents")
    (root / "var/lib/fabricwatch").symlink_to("private/fabricwatch")
    secret = root / "etc/fabricwatch/credentials/mqtt-password"
    secret.write_text("s3cret")
    proc = installed("-r", "fabricwatch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed.status().startswith("deinstall ok config-files")
    assert (state / "incidents.sqlite3").read_bytes() == b"incidents"
    assert (root / CONFFILE).is_file()
    assert not (root / "opt/fabricwatch/venv/bin/fabricwatch").exists()
    proc = installed("-P", "fabricwatch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not state.exists() and not (root / "var/lib/fabricwatch").is_symlink()
    assert not (root / CONFFILE).exists()
    assert secret.read_text() == "s3cret"  # the operator's secrets are not ours to delete
    assert not (root / "opt/fabricwatch").exists()


def maintainer_script(tmp_path: Path, script: str, *args: str) -> list[str]:
    """Run a maintainer script as on a systemd host, with systemctl and
    deb-systemd-helper replaced by recorders; returns the calls they got and,
    last, whether the state directory survived.

    /run/systemd/system (how the scripts tell systemd is running) and a state
    directory exist only in a private mount namespace with its own /run and
    /var/lib, so the host is untouched.
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /run")
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    for tool in ("systemctl", "deb-systemd-helper", "deb-systemd-invoke"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        (fake / tool).chmod(0o755)
    path = REPO / "deploy" / "debian" / script
    # A private /var/lib too: purge deletes /var/lib/fabricwatch, and must not here.
    inner = (
        "mount -t tmpfs none /run && mkdir -p /run/systemd/system && "
        "mount -t tmpfs none /var/lib && mkdir -p /var/lib/private/fabricwatch && "
        f'sh {path} "$@" && if [ -e /var/lib/private/fabricwatch ]; then echo state-kept; '
        f"else echo state-deleted; fi >> {log}"
    )
    env = {k: v for k, v in os.environ.items() if k != "DPKG_ROOT"}
    env["PATH"] = f"{fake}:{env.get('PATH', '/usr/bin:/bin')}"
    proc = run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", *args], env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return log.read_text().splitlines()


def test_maintainer_scripts_never_start_or_enable(tmp_path: Path) -> None:
    # Fresh install: systemd learns the unit, nothing starts, nothing is enabled.
    calls = maintainer_script(tmp_path, "postinst", "configure", "")
    assert calls == [
        "systemctl --system daemon-reload",
        "deb-systemd-helper update-state fabricwatch.service",
        "state-kept",
    ]
    # Upgrade: only a service that was running is restarted (try-restart).
    calls = maintainer_script(tmp_path, "postinst", "configure", "0.1.0-1")
    assert "systemctl try-restart fabricwatch.service" in calls
    assert not [c for c in calls if " start " in f" {c} " or " enable" in c]
    # Removal stops it; an upgrade's prerm leaves it to postinst's try-restart.
    stop = ["systemctl stop fabricwatch.service", "state-kept"]
    assert maintainer_script(tmp_path, "prerm", "remove") == stop
    assert maintainer_script(tmp_path, "prerm", "upgrade", "0.1.0-2") == ["state-kept"]
    # remove keeps the incidents; purge is the request to delete them.
    assert maintainer_script(tmp_path, "postrm", "remove")[-1] == "state-kept"
    calls = maintainer_script(tmp_path, "postrm", "purge")
    assert "deb-systemd-helper purge fabricwatch.service" in calls
    assert calls[-1] == "state-deleted"
