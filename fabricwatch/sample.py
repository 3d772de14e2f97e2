"""Render the fully commented sample config from the settings classes themselves.

``deploy/fabricwatch.toml`` is this output, committed; a test keeps them equal,
so the sample documents every key with its real default and never drifts.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from fabricwatch.collector import Registry
from fabricwatch.config import _SECTIONS
from fabricwatch.settings import _toml_value, to_table

_HEADER = """\
# fabricwatch configuration: /etc/fabricwatch/fabricwatch.toml
#
# Every key is optional: the values below are the built-in defaults, so an
# empty file (or none at all) behaves exactly like this one. Unknown keys and
# wrong types are rejected with the key path; check a file with
#   fabricwatch check-config /etc/fabricwatch/fabricwatch.toml
# Durations accept "500ms", "30s", "5m", "1h"; sizes accept "1MiB", "10GiB".
# Secrets never go here: *_file keys name files (e.g. systemd credentials).
# Regenerate this file with `fabricwatch sample-config`.
"""


def _constraints(meta: typing.Mapping[str, Any]) -> str:
    parts = []
    if "min" in meta and "max" in meta:
        parts.append(f"{meta['min']} to {meta['max']}")
    elif "min" in meta:
        parts.append(f">= {meta['min']}")
    elif "max" in meta:
        parts.append(f"<= {meta['max']}")
    if "choices" in meta:
        parts.append("one of " + ", ".join(meta["choices"]))
    return f" ({'; '.join(parts)})" if parts else ""


def _item_type(cls: type[Any], name: str) -> Any:
    tp = typing.get_type_hints(cls)[name]
    if typing.get_origin(tp) in (list, tuple):
        inner = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(inner):
            return inner
    return None


def _render_table(
    obj: Any, name: str, out: list[str], comment_prefix: str = "", *, array: bool = False
) -> None:
    p = comment_prefix
    out.append(f"{p}[[{name}]]" if array else f"{p}[{name}]")
    cls = type(obj)
    later: list[tuple[str, Any]] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        item = _item_type(cls, f.name)
        if dataclasses.is_dataclass(value):
            later.append((f.name, value))
            continue
        helptext = f.metadata.get("help", "")
        out.append(f"{p}# {helptext}{_constraints(f.metadata)}")
        if item is not None and not value:
            later.append((f.name, item))
            continue
        rendered = to_table(value)
        out.append(
            f"{p}{f.name} = {_toml_value(rendered)}"
            if rendered is not None
            else f"{p}# {f.name} = (unset)"
        )
    for fname, value in later:
        out.append("")
        if isinstance(value, type):
            out.append(f"{p}# Example entry (repeat the table for more):")
            _render_table(value(), f"{name}.{fname}", out, comment_prefix="# ", array=True)
        else:
            _render_table(value, f"{name}.{fname}", out, comment_prefix=p)


def render_sample(registry: Registry) -> str:
    """The sample config text."""
    out: list[str] = [_HEADER]
    for section, cls in _SECTIONS.items():
        _render_table(cls(), section, out)
        out.append("")
    out.append("# Collectors: one table each; `enabled = false` turns one off.")
    out.append("")
    for name in sorted(registry):
        factory = registry[name]
        out.append(f"# {factory.description}")
        settings = factory.settings(enabled=factory.default_enabled)
        _render_table(settings, f"collectors.{name}", out)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
