"""Vendor profile files: the built-in ones shipped in a package, plus the operator's."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def read_profile_texts(package: str, extra_dirs: tuple[Path, ...]) -> dict[str, tuple[str, str]]:
    """``*.toml`` texts by file name: ``package``'s ``profiles/`` folder, then each
    of ``extra_dirs`` in order (a file of the same name overrides). Values are
    (text, source) with the source named for error messages.
    """
    texts: dict[str, tuple[str, str]] = {}
    builtin = resources.files(package).joinpath("profiles")
    label = package.removeprefix("fabricwatch.collectors.").replace(".", "/")
    for entry in sorted(builtin.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            texts[entry.name] = (
                entry.read_text(encoding="utf-8"),
                f"{label}/profiles/{entry.name}",
            )
    for d in extra_dirs:
        for path in sorted(d.glob("*.toml")):
            texts[path.name] = (path.read_text(encoding="utf-8"), str(path))
    return texts
