"""Build ``fabricwatch_<version>_<arch>.deb`` with dpkg-deb (run by ``scripts/build-deb``).

The package is a self-contained virtual environment under
``/opt/fabricwatch/venv`` on Debian's own ``/usr/bin/python3`` (so it tracks
the distribution's security updates of the interpreter), with every Python
dependency pinned inside it (so an upgrade never depends on which
python3-* packages the node happens to have). Around it: the unit, the
conffile, dashboards, rules, the man page and the copyright file. See
docs/deploy.md for why this and not dh-virtualenv or system packages.

Only the standard library is used here; the dependencies come either from
the package index (default: PyPI wheels, ``pip install`` at build time) or,
for an offline build such as the test suite's, from a wheel directory
(``--wheelhouse``) or an existing environment (``--deps-from``).
"""

from __future__ import annotations

import argparse
import email.parser
import gzip
import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PREFIX = Path("/opt/fabricwatch/venv")
UNIT_DIR = Path("/lib/systemd/system")  # Debian 12 packages still ship units here
SHARE = Path("/usr/share/fabricwatch")
DOC = Path("/usr/share/doc/fabricwatch")
CONFFILE = Path("/etc/fabricwatch/fabricwatch.toml")
MAINTAINER = "fabricwatch developers <fabricwatch@localhost>"


@dataclass(frozen=True)
class Options:
    """What to build and from where."""

    out: Path
    python: Path
    wheelhouse: Path | None
    deps_from: Path | None
    wheel: Path | None
    compression: str
    revision: str


def _run(argv: list[str], **kwargs: object) -> None:
    subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_version() -> str:
    """``[project].version`` of pyproject.toml, the one version of everything."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return str(data["project"]["version"])


def debian_arch() -> str:
    """dpkg's name of this machine's architecture (the venv holds compiled wheels)."""
    return subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()


def build_wheel(work: Path) -> Path:
    """The project's own wheel (no dependencies)."""
    out = work / "wheel"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        stdout=subprocess.DEVNULL,
    )
    (wheel,) = out.glob("fabricwatch-*.whl")
    return wheel


def _site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


def _requirement_names(requires: Iterable[str]) -> Iterator[str]:
    for req in requires:
        if "extra ==" in req.replace('"', "").replace("'", ""):
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if m:
            yield m.group(1)


def copy_dependencies(source_site: Path, target_site: Path, roots: Iterable[str]) -> list[str]:
    """Copy the installed closure of ``roots`` from one site-packages to another.

    Files come from each distribution's RECORD, so exactly what pip
    installed travels (console scripts and bytecode excepted: the scripts
    are not the package's, the bytecode is compiled again for its paths).
    A requirement not installed in the source is one whose marker was false
    there, and is left out.
    """
    dists = {_norm(d.metadata["Name"]): d for d in md.distributions(path=[str(source_site)])}
    todo = list(roots)
    done: list[str] = []
    while todo:
        name = _norm(todo.pop())
        if name in done or name not in dists:
            continue
        dist = dists[name]
        done.append(name)
        todo.extend(_requirement_names(dist.requires or []))
        for f in dist.files or []:
            rel = Path(str(f))
            if rel.parts[0] == ".." or "__pycache__" in rel.parts:
                continue
            src = source_site / rel
            if not src.is_file():
                continue
            dst = target_site / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return sorted(done)


def make_venv(opts: Options, root: Path, wheel: Path) -> None:
    """The virtual environment at ``root/opt/fabricwatch/venv``, fixed up for /opt."""
    venv = root / PREFIX.relative_to("/")
    _run([str(opts.python), "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    if opts.deps_from is not None:
        _run([*pip, "install", "--no-deps", "--no-index", "--no-compile", str(wheel)])
        roots = _wheel_requires(wheel)
        copy_dependencies(_site_packages(opts.deps_from), _site_packages(venv), roots)
    elif opts.wheelhouse is not None:
        _run(
            [
                *pip,
                "install",
                "--no-compile",
                "--no-index",
                "--find-links",
                str(opts.wheelhouse),
                "--only-binary",
                ":all:",
                str(wheel),
            ]
        )
    else:
        # Wheels from the package index only: nothing compiled on the build machine.
        _run([*pip, "install", "--no-compile", "--only-binary", ":all:", str(wheel)])
    # pip and setuptools are build tools, not the daemon's: leave them out.
    _run([*pip, "uninstall", "-y", "pip", "setuptools"])
    for leftover in venv.glob("lib/python3*/site-packages/_distutils_hack"):
        shutil.rmtree(leftover)
    for pth in venv.glob("lib/python3*/site-packages/distutils-precedence.pth"):
        pth.unlink()
    _relocate(venv)
    # Bytecode with the installed paths in it (tracebacks name /opt/..., not the build dir).
    _run(
        [
            str(opts.python),
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "-s",
            str(root),
            "-p",
            "/",
            str(venv / "lib"),
        ],
        stdout=subprocess.DEVNULL,
    )


def _wheel_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode("utf-8"))
    return list(_requirement_names(meta.get_all("Requires-Dist") or []))


def _relocate(venv: Path) -> None:
    """Rewrite the build path to /opt/fabricwatch/venv in scripts and pyvenv.cfg."""
    built = str(venv).encode()
    final = str(PREFIX).encode()
    for f in [*sorted((venv / "bin").iterdir()), venv / "pyvenv.cfg"]:
        if f.is_symlink() or not f.is_file():
            continue
        data = f.read_bytes()
        if built in data:
            f.write_bytes(data.replace(built, final))


def _license_of(dist: md.Distribution) -> str:
    meta = dist.metadata
    expr = meta["License-Expression"]
    if expr:
        return str(expr)
    classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    if classifiers:
        return "; ".join(c.split(" :: ")[-1] for c in classifiers)
    text = (meta["License"] or "").strip().splitlines()
    return text[0][:80] if text else "see its dist-info in /opt/fabricwatch/venv"


def copyright_text(venv_site: Path) -> str:
    """debian/copyright (DEP-5): fabricwatch itself and every bundled distribution."""
    out = [
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
        "Upstream-Name: fabricwatch",
        "Comment: The package bundles its Python dependencies in a virtual environment",
        " under /opt/fabricwatch/venv; each one's own license text is in its",
        " *.dist-info directory there. They are listed below.",
        "",
        "Files: *",
        "Copyright: fabricwatch developers",
        "License: Apache-2.0",
        "",
    ]
    for dist in sorted(md.distributions(path=[str(venv_site)]), key=lambda d: _norm(d.name)):
        if _norm(dist.name) == "fabricwatch":
            continue
        where = f"opt/fabricwatch/venv/lib/*/site-packages/{dist.name}-{dist.version}*"
        lic = _license_of(dist)
        out += [
            f"Files: {where}",
            f"Copyright: the {dist.name} {dist.version} authors",
            f"License: {lic}",
            f" {dist.name} {dist.version}, bundled from PyPI; license text in its dist-info.",
            "",
        ]
    out += [
        "License: Apache-2.0",
        " On Debian systems the full text of the Apache License 2.0 is in",
        " /usr/share/common-licenses/Apache-2.0 (and in LICENSE beside this file).",
    ]
    return "\n".join(out) + "\n"


def _install(src: Path, root: Path, dest: Path, mode: int = 0o644) -> None:
    target = root / dest.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, target)
    target.chmod(mode)


def _gzip(src: Path, root: Path, dest: Path) -> None:
    target = root / dest.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(src.read_bytes())
    target.chmod(0o644)


def lay_out(opts: Options, root: Path, work: Path) -> None:
    """Everything outside the venv: unit, conffile, data, docs, man page."""
    _install(REPO / "deploy" / "fabricwatch.service", root, UNIT_DIR / "fabricwatch.service")
    _install(REPO / "deploy" / "fabricwatch.toml", root, CONFFILE)
    creds = root / "etc/fabricwatch/credentials"
    creds.mkdir(parents=True)
    creds.chmod(0o700)
    link = root / "usr/bin/fabricwatch"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(PREFIX / "bin" / "fabricwatch")
    for dash in sorted((REPO / "dashboards").glob("*.json")):
        _install(dash, root, SHARE / "dashboards" / dash.name)
    for name in ("rules.yml", "rules_test.yml"):
        _install(REPO / "deploy" / "prometheus" / name, root, SHARE / "prometheus" / name)
    _install(REPO / "deploy" / "web-config.yml", root, SHARE / "web-config.yml")
    for extra in ("alertmanager", "grafana"):
        base = REPO / "deploy" / extra
        for f in sorted(p for p in base.rglob("*") if p.is_file()):
            _install(f, root, SHARE / extra / f.relative_to(base))
    _install(REPO / "LICENSE", root, DOC / "LICENSE")
    for doc in ("deploy.md", "runbook.md", "switches.md", "alerting.md"):
        _install(REPO / "docs" / doc, root, DOC / doc)
    _install(REPO / "README.md", root, DOC / "README.md")
    _gzip(REPO / "CHANGELOG.md", root, DOC / "changelog.gz")
    site = _site_packages(root / PREFIX.relative_to("/"))
    (root / DOC.relative_to("/") / "copyright").write_text(copyright_text(site), encoding="utf-8")
    page = work / "fabricwatch.8"
    with page.open("w", encoding="utf-8") as out:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        _run(
            [str(root / PREFIX.relative_to("/") / "bin/python"), "-m", "fabricwatch.manpage"],
            stdout=out,
            env=env,
        )
    _gzip(page, root, Path("/usr/share/man/man8/fabricwatch.8.gz"))


def _installed_size_kib(root: Path) -> int:
    total = 0
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.parts[len(root.parts)] != "DEBIAN":
            total += (p.stat().st_size + 1023) // 1024
    return total


def control(opts: Options, root: Path, version: str) -> None:
    """DEBIAN/: control, conffiles, md5sums and the maintainer scripts."""
    deb = root / "DEBIAN"
    deb.mkdir()
    pyver = subprocess.run(
        [str(opts.python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    major, minor = (int(x) for x in pyver.split("."))
    fields = {
        "Package": "fabricwatch",
        "Version": f"{version}-{opts.revision}",
        "Architecture": debian_arch(),
        "Maintainer": MAINTAINER,
        "Installed-Size": str(_installed_size_kib(root)),
        # The venv's site-packages is python3.X: the same minor version, from Debian.
        "Depends": f"python3 (>= {major}.{minor}), python3 (<< {major}.{minor + 1})",
        "Recommends": "lldpd",
        "Section": "admin",
        "Priority": "optional",
        "Description": "fabric-health monitor for GPU training clusters\n"
        " fabricwatch watches the RoCE/InfiniBand fabric (switch PFC and ECN over SNMP\n"
        " or gNMI, host RDMA NIC counters), NVLink and the GPUs (NVML) and checkpoint\n"
        " storage, and explains why the GPUs of a running job went idle.\n"
        " .\n"
        " The service is installed but not enabled: systemctl enable --now fabricwatch.",
    }
    text = "".join(f"{k}: {v}\n" for k, v in fields.items())
    (deb / "control").write_text(text, encoding="utf-8")
    (deb / "conffiles").write_text(f"{CONFFILE}\n", encoding="utf-8")
    for script in ("postinst", "prerm", "postrm"):
        _install(HERE / script, root, Path("/DEBIAN") / script, 0o755)
    sums: list[str] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] == "DEBIAN" or p.is_symlink() or not p.is_file():
            continue
        sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {rel.as_posix()}")  # noqa: S324
    (deb / "md5sums").write_text("\n".join(sums) + "\n", encoding="utf-8")


def build(opts: Options) -> Path:
    """Build the package; return its path."""
    version = project_version()
    with tempfile.TemporaryDirectory(prefix="fabricwatch-deb-") as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        root.chmod(0o755)
        wheel = opts.wheel or build_wheel(work)
        make_venv(opts, root, wheel)
        lay_out(opts, root, work)
        control(opts, root, version)
        for d in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
            if d != root / "etc/fabricwatch/credentials":
                d.chmod(0o755)
        opts.out.mkdir(parents=True, exist_ok=True)
        deb = opts.out / f"fabricwatch_{version}-{opts.revision}_{debian_arch()}.deb"
        _run(
            [
                "dpkg-deb",
                "--root-owner-group",
                f"-Z{opts.compression}",
                "--build",
                str(root),
                str(deb),
            ],
            stdout=subprocess.DEVNULL,
        )
    return deb


def main(argv: list[str] | None = None) -> int:
    """Command line of ``scripts/build-deb``."""
    p = argparse.ArgumentParser(prog="build-deb", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "dist", help="output dir (dist/)")
    p.add_argument(
        "--python",
        type=Path,
        default=Path("/usr/bin/python3"),
        help="the target's interpreter the venv is made from (/usr/bin/python3)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--wheelhouse", type=Path, help="install dependencies from these wheels only")
    src.add_argument(
        "--deps-from",
        type=Path,
        metavar="VENV",
        help="copy the installed dependencies of an existing venv (offline; the tests use it)",
    )
    p.add_argument("--wheel", type=Path, help="a prebuilt fabricwatch wheel (default: build one)")
    p.add_argument("--compression", choices=("xz", "gzip", "zstd", "none"), default="xz")
    p.add_argument("--revision", default="1", help="Debian revision (default 1)")
    a = p.parse_args(argv)
    deb = build(
        Options(
            out=a.out,
            python=a.python,
            wheelhouse=a.wheelhouse,
            deps_from=a.deps_from,
            wheel=a.wheel,
            compression=a.compression,
            revision=a.revision,
        )
    )
    sys.stdout.write(f"{deb}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
