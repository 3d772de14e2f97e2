"""gNMI messages, paths and values.

The gNMI protobuf classes come from pygnmi's compiled ``gnmi_pb2`` (gNMI
0.8.0) and the service stubs from its ``gnmi_pb2_grpc``; we use them with
``grpc.aio`` directly rather than pygnmi's blocking client, so every target
is one coroutine on the daemon's event loop instead of a thread. pygnmi has
no type information, so this module is the one place that touches its
modules and hands typed helpers to the rest of the package.

Paths are handled in a canonical text form, ``/name[k=v][k2=v2]/name2``,
keys sorted, with ``]`` and ``\\`` escaped in key values (as in the gNMI path
string convention). Profiles match leaves on that form.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from pygnmi.spec.v080 import gnmi_pb2 as _pb  # type: ignore[import-untyped]
from pygnmi.spec.v080 import gnmi_pb2_grpc as _pb_grpc

from fabricwatch.errors import ParseError

pb: Any = _pb
"""The ``gnmi`` protobuf module (messages and enums)."""
pb_grpc: Any = _pb_grpc
"""The ``gnmi`` gRPC module (``gNMIStub``, ``gNMIServicer``, ``add_gNMIServicer_to_server``)."""

Scalar = int | float | str | bool
"""A decoded leaf value."""

_ELEM = re.compile(r"([^/\[\]]+)((?:\[[^=\]]+=(?:[^\]\\]|\\.)*\])*)")
_KEY = re.compile(r"\[([^=\]]+)=((?:[^\]\\]|\\.)*)\]")
_YANG_MODULE = re.compile(r"^[a-z][a-z\-_.]*:")


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("]", "\\]")


def _unesc(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def split_path(text: str) -> list[tuple[str, dict[str, str]]]:
    """``/a[k=v]/b`` -> ``[("a", {"k": "v"}), ("b", {})]``; raises ParseError if malformed.

    Slashes inside ``[...]`` belong to the key value (``interface[name=Ethernet1/1]``).
    """
    out: list[tuple[str, dict[str, str]]] = []
    pos = 1 if text.startswith("/") else 0
    n = len(text)
    while pos < n:
        m = _ELEM.match(text, pos)
        if m is None:
            raise ParseError(f"bad gNMI path {text!r} at offset {pos}")
        name = m.group(1)
        keys = {k: _unesc(v) for k, v in _KEY.findall(m.group(2))}
        out.append((name, keys))
        pos = m.end()
        if pos < n:
            if text[pos] != "/":
                raise ParseError(f"bad gNMI path {text!r} at offset {pos}")
            pos += 1
    return out


def make_path(text: str, *, origin: str = "", target: str = "") -> Any:
    """A ``gnmi.Path`` from its text form."""
    elems = [pb.PathElem(name=name, key=keys) for name, keys in split_path(text)]
    return pb.Path(elem=elems, origin=origin, target=target)


def path_text(path: Any) -> str:
    """Canonical text of a ``gnmi.Path`` (elems; deprecated ``element`` strings too)."""
    parts: list[str] = []
    for e in path.elem:
        if e.key:
            keys = "".join(f"[{k}={_esc(e.key[k])}]" for k in sorted(e.key))
            parts.append(e.name + keys)
        else:
            parts.append(e.name)
    if not parts and path.element:
        parts = list(path.element)
    return "/" + "/".join(parts) if parts else ""


def join(prefix: str, path: str) -> str:
    """Prefix text + path text."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path


def _number(text: str) -> Scalar:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        return text
    return f if math.isfinite(f) else text


def typed_value(val: Any) -> Scalar | dict[str, Any] | list[Any] | None:
    """Decode a ``gnmi.TypedValue``: scalars, decoded JSON, or None if unsupported."""
    kind = val.WhichOneof("value")
    if kind == "uint_val":
        return int(val.uint_val)
    if kind == "int_val":
        return int(val.int_val)
    if kind == "string_val":
        return _number(val.string_val)
    if kind == "ascii_val":
        return _number(val.ascii_val)
    if kind == "double_val":
        return float(val.double_val)
    if kind == "float_val":
        return float(val.float_val)
    if kind == "bool_val":
        return bool(val.bool_val)
    if kind == "decimal_val":
        return float(int(val.decimal_val.digits) / (10 ** int(val.decimal_val.precision)))
    if kind in ("json_val", "json_ietf_val"):
        raw = getattr(val, kind)
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"undecodable JSON value: {exc}") from None
        if isinstance(doc, str):
            return _number(doc)
        if isinstance(doc, bool | int | float | dict | list):
            return doc
        return None
    return None


def flatten(path: str, value: object) -> Iterator[tuple[str, Scalar]]:
    """Leaves of a decoded value: JSON objects become child paths.

    RFC 7951 module prefixes (``openconfig-qos:``) are dropped from member
    names. A wildcard last element (SONiC ``COUNTERS/Ethernet*``) is replaced
    by the object's first-level keys, which name what the wildcard matched.
    Lists carry no keys we could name without the YANG schema: skipped.
    """
    if isinstance(value, dict):
        base = path
        head, _, last = path.rpartition("/")
        if "*" in last and "[" not in last:
            base = head
        for k, v in value.items():
            if not isinstance(k, str) or not k:
                continue
            name = _YANG_MODULE.sub("", k)
            yield from flatten(f"{base}/{name}", v)
    elif isinstance(value, bool | int | float):
        yield path, value
    elif isinstance(value, str):
        yield path, _number(value)
