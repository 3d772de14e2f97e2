"""gNMI path profiles: what to subscribe to and which leaf feeds which signal.

Profiles are data (``collectors/gnmi/profiles/*.toml``), validated strictly
with :func:`fabricwatch.settings.build`. A profile has subscriptions (paths
with a ``{port}`` placeholder, SAMPLE or ON_CHANGE) and leaf rules. A leaf
rule is a path pattern over the canonical leaf path (see :mod:`._proto`):
``*`` matches within one element name or key value, and ``{port}``,
``{queue}``, ``{priority}`` capture. Example (SONiC COUNTERS_DB)::

    COUNTERS/{port}/SAI_PORT_STAT_PFC_{priority}_RX_PKTS

Profiles are chosen per target: by name, or ``auto`` from the models the
target lists in its Capabilities reply (``[[match]] model = "regex"``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fabricwatch.collectors.switchcommon.profiles import read_profile_texts
from fabricwatch.errors import ConfigError, ParseError
from fabricwatch.settings import build, option

from ._proto import split_path

Signal = Literal[
    "ecn_marks",
    "ecn_marked_bytes",
    "queue_drops",
    "queue_tx_packets",
    "pfc_frames",
    "pfc_duration",
    "link_pause_frames",
    "rx_bytes",
    "tx_bytes",
    "discards",
    "errors",
    "oper_status",
    "speed",
    "lldp_sys_name",
    "lldp_port_id",
    "lldp_chassis_id",
    "boot_time",
]
_NEEDS: dict[str, tuple[str, ...]] = {
    "ecn_marks": ("port", "queue"),
    "ecn_marked_bytes": ("port", "queue"),
    "queue_drops": ("port", "queue"),
    "queue_tx_packets": ("port", "queue"),
    "pfc_frames": ("port", "priority"),
    "pfc_duration": ("port", "priority"),
    "boot_time": (),
}
_DIRECTED = ("pfc_frames", "pfc_duration", "link_pause_frames", "discards", "errors")
CAPTURES = ("port", "queue", "priority")


@dataclass(kw_only=True)
class MatchRule:
    """Select the profile when a model the target supports matches."""

    model: str = option("", "Regular expression searched in each supported model's name.")

    def validate(self) -> None:
        """A valid regex."""
        try:
            re.compile(self.model)
        except re.error as exc:
            msg = f"bad model regex: {exc}"
            raise ValueError(msg) from None


@dataclass(kw_only=True)
class SubscriptionRule:
    """One subscription; ``{port}`` is replaced per uplink (node mode) or by the wildcard."""

    path: str = option("", "Path with an optional {port} placeholder.")
    mode: Literal["sample", "on_change"] = option("sample", "SAMPLE at the interval, or ON_CHANGE.")
    target: str = option("", "Prefix target of this subscription (default: the profile's).")

    def validate(self) -> None:
        """A parsable path."""
        if not self.path:
            msg = "subscription needs a path"
            raise ValueError(msg)
        try:
            split_path(self.path.replace("{port}", "x"))
        except ParseError as exc:
            raise ValueError(str(exc)) from None


@dataclass(kw_only=True)
class LeafRule:
    """One leaf pattern and the signal its values feed."""

    path: str = option("", "Leaf path pattern with {port}, {queue}, {priority} captures.")
    signal: Signal = option("ecn_marks", "What the leaf counts.")
    direction: Literal["", "rx", "tx"] = option("", "rx or tx for directed signals.")
    unit: float = option(
        1.0, "Multiplier to base units (pfc_duration: seconds per unit; speed: bit/s per unit)."
    )

    def validate(self) -> None:
        """Captures and direction fit the signal."""
        if not self.path:
            msg = "leaf rule needs a path"
            raise ValueError(msg)
        caps = set(re.findall(r"\{(\w+)\}", self.path))
        unknown = caps - set(CAPTURES)
        if unknown:
            msg = f"unknown capture(s) {sorted(unknown)} (known: port, queue, priority)"
            raise ValueError(msg)
        need = set(_NEEDS.get(self.signal, ("port",)))
        if not need <= caps:
            msg = f"{self.signal} needs captures {sorted(need)} in the path"
            raise ValueError(msg)
        if self.signal in _DIRECTED and not self.direction:
            msg = f"{self.signal} needs a direction"
            raise ValueError(msg)
        if self.unit <= 0:
            msg = "unit must be > 0"
            raise ValueError(msg)


@dataclass(kw_only=True)
class ProfileFile:
    """The schema of one gNMI profile file."""

    name: str = option("", "Profile name (the file stem by convention).")
    description: str = option("", "Which targets this covers and where the paths come from.")
    rank: int = option(0, "Higher wins when several profiles match.")
    origin: str = option("", "Origin of subscription paths (e.g. openconfig).")
    target: str = option("", "Prefix target (SONiC: COUNTERS_DB).")
    encoding: Literal["json", "json_ietf", "proto", "ascii", "bytes"] = option(
        "proto", "Encoding requested in the subscription."
    )
    port_wildcard: str = option("*", "What replaces {port} when subscribing to every port.")
    match: list[MatchRule] = option([], "Capabilities model rules that select this profile.")
    subscription: list[SubscriptionRule] = option([], "Subscriptions.")
    leaf: list[LeafRule] = option([], "Leaf rules, first match wins.")

    def validate(self) -> None:
        """A name and at least one subscription."""
        if not self.name:
            msg = "profile needs a name"
            raise ValueError(msg)
        if not self.subscription:
            msg = "profile needs at least one subscription"
            raise ValueError(msg)


def _pattern(text: str) -> re.Pattern[str]:
    """Compile a leaf pattern into a regex over canonical leaf paths."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            j = text.index("}", i)
            name = text[i + 1 : j]
            # Inside [...] a capture may hold '/' (Ethernet1/1); outside, one element.
            if name == "priority":
                body = r"\d+"
            elif depth:
                body = r"(?:[^\]\\]|\\.)+?"
            else:
                body = r"[^/\[\]]+?"
            out.append(f"(?P<{name}>{body})")
            i = j + 1
            continue
        if c == "*":
            out.append(r"(?:[^\]\\]|\\.)*?" if depth else r"[^/\[\]]*?")
        elif c == "[":
            depth += 1
            out.append(re.escape(c))
        elif c == "]":
            depth -= 1
            out.append(re.escape(c))
        else:
            out.append(re.escape(c))
        i += 1
    body = "".join(out)
    if not body.startswith("/"):
        body = "/" + body
    return re.compile(body)


@dataclass(frozen=True, slots=True)
class Leaf:
    """A compiled :class:`LeafRule`."""

    regex: re.Pattern[str]
    signal: str
    direction: str
    unit: float


@dataclass(frozen=True, slots=True)
class Subscription:
    """A compiled :class:`SubscriptionRule`."""

    path: str
    on_change: bool
    target: str

    @property
    def per_port(self) -> bool:
        """Whether the path names a port."""
        return "{port}" in self.path


@dataclass(frozen=True, slots=True)
class Profile:
    """A compiled profile."""

    name: str
    description: str
    rank: int
    origin: str
    target: str
    encoding: str
    port_wildcard: str
    models: tuple[re.Pattern[str], ...]
    subscriptions: tuple[Subscription, ...]
    leaves: tuple[Leaf, ...]
    source: str = ""

    def matches(self, models: list[str]) -> bool:
        """Whether any match rule finds one of the target's models."""
        return any(rx.search(m) for rx in self.models for m in models)

    def subscription_paths(self, ports: list[str] | None) -> list[tuple[str, bool, str]]:
        """(path, on_change, prefix target): every port (None) or the given ports."""
        out: list[tuple[str, bool, str]] = []
        for s in self.subscriptions:
            target = s.target or self.target
            if not s.per_port:
                out.append((s.path, s.on_change, target))
            elif ports is None:
                path = s.path.replace("{port}", self.port_wildcard)
                out.append((path, s.on_change, target))
            else:
                out.extend((s.path.replace("{port}", p), s.on_change, target) for p in ports)
        return out

    def classify(self, path: str) -> tuple[Leaf, dict[str, str]] | None:
        """The first leaf rule matching a canonical leaf path, and its captures."""
        for leaf in self.leaves:
            m = leaf.regex.fullmatch(path)
            if m is not None:
                caps = {k: re.sub(r"\\(.)", r"\1", v) for k, v in m.groupdict().items()}
                return leaf, caps
        return None


def compile_profile(pf: ProfileFile, source: str = "") -> Profile:
    """Compile a validated profile file."""
    return Profile(
        name=pf.name,
        description=pf.description,
        rank=pf.rank,
        origin=pf.origin,
        target=pf.target,
        encoding=pf.encoding,
        port_wildcard=pf.port_wildcard,
        models=tuple(re.compile(m.model) for m in pf.match),
        subscriptions=tuple(
            Subscription(s.path, s.mode == "on_change", s.target) for s in pf.subscription
        ),
        leaves=tuple(Leaf(_pattern(lr.path), lr.signal, lr.direction, lr.unit) for lr in pf.leaf),
        source=source,
    )


def parse_profile(text: str, source: str) -> Profile:
    """Parse, validate and compile one profile file's text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=source) from None
    return compile_profile(build(ProfileFile, data, source=source), source)


@dataclass(frozen=True, slots=True)
class ProfileSet:
    """Every known gNMI profile."""

    profiles: tuple[Profile, ...]
    default: str = "openconfig"

    def by_name(self, name: str) -> Profile:
        """A profile by name."""
        for p in self.profiles:
            if p.name == name:
                return p
        known = ", ".join(sorted(p.name for p in self.profiles))
        raise ConfigError(f"unknown gNMI profile {name!r} (known: {known})")

    def select(self, models: list[str]) -> Profile:
        """The highest-ranked profile matching the target's models, else the default."""
        best: Profile | None = None
        for p in self.profiles:
            if p.matches(models) and (best is None or p.rank > best.rank):
                best = p
        return best or self.by_name(self.default)


def load_profiles(extra_dirs: tuple[Path, ...] = ()) -> ProfileSet:
    """Built-in profiles plus ``*.toml`` from ``extra_dirs`` (same file name overrides)."""
    texts = read_profile_texts("fabricwatch.collectors.gnmi", extra_dirs)
    profiles = tuple(parse_profile(text, src) for text, src in texts.values())
    names = [p.name for p in profiles]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate gNMI profile names: {', '.join(dupes)}")
    return ProfileSet(profiles)
