"""Typed, strict conversion of TOML tables into settings dataclasses.

Every settings class is a dataclass whose fields carry their help text and
constraints in ``metadata``:

``help``       one line for the sample config and the README.
``min``/``max`` numeric range, inclusive.
``duration``   also accept strings like ``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"``.
``size``       also accept strings like ``"1MiB"``, ``"10GiB"``, ``"4k"``.
``secret``     redacted when the effective config is printed.

Unknown keys, wrong types and out-of-range values raise
:class:`~fabricwatch.errors.ConfigError` naming the key path and what was
expected. Collectors use this module for their own settings; there is no
second validator.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from fabricwatch.errors import ConfigError

T = TypeVar("T")

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtTpP]?)(i?)[bB]?\s*$")
_SIZE_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(text: str) -> float:
    """``"500ms"`` -> 0.5, ``"5m"`` -> 300.0; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        msg = f"expected a duration like 500ms, 30s, 5m or 1h, got {text!r}"
        raise ValueError(msg)
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def parse_size(text: str) -> int:
    """``"1MiB"`` -> 1048576, ``"10GB"`` -> 10**10, ``"4k"`` -> 4096 (bare suffix is binary)."""
    m = _SIZE.match(text)
    if not m:
        msg = f"expected a size like 4096, 1MiB or 10GiB, got {text!r}"
        raise ValueError(msg)
    number, prefix, binary = float(m.group(1)), m.group(2).lower(), m.group(3)
    explicit_decimal = bool(prefix) and not binary and text.strip()[-1] in "bB"
    base = 1000 if explicit_decimal else 1024
    return int(number * base ** _SIZE_POW[prefix])


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "nothing"
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"a table of {_type_name(typing.get_args(tp)[1])}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(e.value) for e in tp)
    if dataclasses.is_dataclass(tp):
        return "a table"
    names = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        Path: "a path string",
    }
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _describe(value: Any) -> str:
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "table",
    }.get(type(value), type(value).__name__)
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{kind} {shown}"


def _convert(value: Any, tp: Any, key: str, meta: Mapping[str, Any], source: str | None) -> Any:
    def fail(expected: str | None = None) -> ConfigError:
        exp = expected or _type_name(tp)
        return ConfigError(f"expected {exp}, got {_describe(value)}", path=source, key=key)

    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors: list[ConfigError] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key, meta, source)
            except ConfigError as exc:
                errors.append(exc)
        raise fail()
    if origin is typing.Literal:
        if value in typing.get_args(tp):
            return value
        raise fail()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if value == member.value:
                return member
        raise fail()
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise fail()
        (item_tp, *_rest) = typing.get_args(tp)
        items = [_convert(v, item_tp, f"{key}[{i}]", meta, source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise fail()
        _, val_tp = typing.get_args(tp)
        return {str(k): _convert(v, val_tp, f"{key}.{k}", meta, source) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise fail()
        return build(tp, value, prefix=key, source=source)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise fail()
    if tp is int or tp is float:
        number: float
        if isinstance(value, str) and (meta.get("duration") or meta.get("size")):
            try:
                number = parse_duration(value) if meta.get("duration") else parse_size(value)
            except ValueError as exc:
                raise ConfigError(str(exc), path=source, key=key) from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise fail()
        else:
            number = value
        if tp is int:
            if isinstance(number, float):
                if not number.is_integer():
                    raise fail()
                number = int(number)
        elif not math.isfinite(number):
            raise fail("a finite number")
        lo, hi = meta.get("min"), meta.get("max")
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            rng = (
                f"between {lo} and {hi}"
                if lo is not None and hi is not None
                else (f">= {lo}" if lo is not None else f"<= {hi}")
            )
            raise ConfigError(f"expected a value {rng}, got {number}", path=source, key=key)
        return float(number) if tp is float else number
    if tp is str:
        if isinstance(value, str):
            choices = meta.get("choices")
            if choices and value not in choices:
                raise fail("one of " + ", ".join(map(repr, choices)))
            return value
        raise fail()
    if tp is Path:
        if isinstance(value, str) and value:
            return Path(value)
        raise fail()
    msg = f"unsupported settings type {tp!r} at {key}"
    raise TypeError(msg)


def build(
    cls: type[T],
    data: Mapping[str, Any],
    *,
    prefix: str = "",
    source: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """Build settings dataclass ``cls`` from a TOML table, strictly.

    Args:
        cls: the dataclass to build.
        data: the parsed TOML table.
        prefix: the key path of ``data`` (for messages).
        source: the file the table came from (for messages).
        defaults: overrides of the class defaults for keys absent from ``data``.
    """
    if not dataclasses.is_dataclass(cls):
        msg = f"{cls!r} is not a dataclass"
        raise TypeError(msg)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for k in data:
        if k not in fields:
            path = f"{prefix}.{k}" if prefix else k
            known = ", ".join(sorted(fields)) or "none"
            raise ConfigError(f"unknown key (known keys here: {known})", path=source, key=path)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        path = f"{prefix}.{name}" if prefix else name
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], path, f.metadata, source)
        elif defaults and name in defaults:
            kwargs[name] = defaults[name]
    try:
        obj = cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc), path=source, key=prefix or None) from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(str(exc), path=source, key=prefix or None) from None
    return obj


def redact_url(url: str) -> str:
    """A URL with what may be a credential removed: user info, path and query
    (Slack and many webhooks carry the token in the path, others in ``?token=``).
    Scheme, host and port stay, so the operator still sees where it points."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    if not (parts.username or parts.password or parts.path.strip("/") or parts.query):
        return f"{parts.scheme}://{host}{port}" if parts.scheme else "<redacted>"
    return f"{parts.scheme}://{host}{port}/<redacted>" if parts.scheme else "<redacted>"


def to_table(obj: Any, *, redact: bool = True) -> Any:
    """The inverse of :func:`build` for printing: plain TOML-able values, secrets redacted."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if redact and f.metadata.get("secret") == "url" and value:
                out[f.name] = redact_url(str(value))
            elif redact and f.metadata.get("secret") and value:
                out[f.name] = "<redacted>"
            elif value is not None:
                out[f.name] = to_table(value, redact=redact)
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, list | tuple):
        return [to_table(v, redact=redact) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_table(v, redact=redact) for k, v in obj.items()}
    return obj


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    msg = f"cannot write {type(v).__name__} as TOML"
    raise TypeError(msg)


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def dumps_toml(table: Mapping[str, Any], _prefix: str = "") -> str:
    """Write a nested mapping as TOML (tables of tables as sections)."""
    lines: list[str] = []
    subtables: list[tuple[str, Mapping[str, Any]]] = []
    for k, v in table.items():
        if isinstance(v, dict):
            subtables.append((k, v))
        else:
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    out = "\n".join(lines)
    for k, v in subtables:
        name = f"{_prefix}.{_toml_key(k)}" if _prefix else _toml_key(k)
        body = dumps_toml(v, name)
        out += ("\n\n" if out else "") + f"[{name}]\n" + body
    return out.strip("\n") + "\n" if out else ""


def option(
    default: T,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    duration: bool = False,
    size: bool = False,
    secret: bool = False,
    secret_url: bool = False,
    choices: tuple[str, ...] | None = None,
) -> T:
    """A settings field with its help text and constraints (see the module docstring).

    ``secret_url`` redacts only a URL's user info, path and query when printed.
    """
    meta: dict[str, Any] = {"help": help}
    for k, v in (("min", min), ("max", max), ("choices", choices)):
        if v is not None:
            meta[k] = v
    for k, flag in (("duration", duration), ("size", size)):
        if flag:
            meta[k] = True
    if secret or secret_url:
        meta["secret"] = "url" if secret_url else True
    if isinstance(default, list | dict | set):
        template = default
        return dataclasses.field(default_factory=lambda: type(template)(template), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
