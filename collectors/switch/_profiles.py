"""Vendor profiles: which SNMP tables carry PFC, pause time and queue drops.

Profiles are data (``collectors/switch/profiles/*.toml``), validated strictly with
:func:`fabricwatch.settings.build`. A profile is chosen by ``sysObjectID``
prefix and/or a ``sysDescr`` regular expression; the highest ``rank`` among
matching profiles wins, and ``generic`` (IEEE8021-PFC + EtherLike pause) is
the fallback. IF-MIB columns are common to every switch and live in code.

A counter table is either one column indexed by ``(ifIndex, <index...>)``
(``oid`` + ``index`` tokens) or one column per priority/queue indexed by
ifIndex alone (``columns``). Index tokens: ``p`` priority, ``q`` queue,
``*`` any value (rows summed), digits a literal that must match.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fabricwatch.collectors.switchcommon.profiles import read_profile_texts
from fabricwatch.errors import ConfigError
from fabricwatch.settings import build, option

from ._ber import Oid, parse_oid

Signal = Literal[
    "pfc_frames", "pfc_duration", "pfc_total_frames", "link_pause_frames", "queue_drops"
]
_PER_PRIORITY = ("pfc_frames", "pfc_duration")
_PER_PORT = ("pfc_total_frames", "link_pause_frames")


@dataclass(kw_only=True)
class MatchRule:
    """One way to recognise the vendor; every given condition must hold."""

    sys_object_id: str = option("", "sysObjectID prefix (numeric OID).")
    sys_descr: str = option("", "Regular expression searched in sysDescr.")

    def validate(self) -> None:
        """At least one condition; a valid OID and regex."""
        if not self.sys_object_id and not self.sys_descr:
            msg = "a match rule needs sys_object_id and/or sys_descr"
            raise ValueError(msg)
        if self.sys_object_id:
            parse_oid(self.sys_object_id)
        if self.sys_descr:
            try:
                re.compile(self.sys_descr)
            except re.error as exc:
                msg = f"bad sys_descr regex: {exc}"
                raise ValueError(msg) from None


@dataclass(kw_only=True)
class CounterTable:
    """One source of one signal."""

    signal: Signal = option("pfc_frames", "What the column counts.")
    direction: Literal["rx", "tx", ""] = option("", "rx (received) or tx (sent); queues: empty.")
    oid: str = option("", "Column OID; rows indexed by ifIndex then `index`.")
    index: list[str] = option([], "Index parts after ifIndex: p, q, * or a literal number.")
    columns: list[str] = option([], "One column per priority/queue, indexed by ifIndex only.")
    base: int = option(0, "Number of the first priority/queue (Dell numbers priorities 1..8).")
    unit: float = option(1.0, "Seconds per unit for pfc_duration (1e-6 for microseconds).")
    bits: int = option(64, "Counter width.", min=32, max=64)
    multicast_from: int = option(
        -1,
        "queue_drops: queues numbered from this value up (after base) are multicast queues, "
        "labelled mc0, mc1, ... (-1: none).",
        min=-1,
        max=255,
    )

    def validate(self) -> None:
        """Consistent layout for the signal."""
        if bool(self.oid) == bool(self.columns):
            msg = "give exactly one of oid or columns"
            raise ValueError(msg)
        if self.bits not in (32, 64):
            msg = "bits must be 32 or 64"
            raise ValueError(msg)
        for t in self.index:
            if t not in ("p", "q", "*") and not t.isdigit():
                msg = f"bad index token {t!r} (expected p, q, * or a number)"
                raise ValueError(msg)
        if self.columns and self.index:
            msg = "columns are indexed by ifIndex only: drop index"
            raise ValueError(msg)
        for o in (self.oid, *self.columns):
            if o:
                parse_oid(o)
        need = "p" if self.signal in _PER_PRIORITY else "q" if self.signal == "queue_drops" else ""
        if self.signal != "queue_drops" and not self.direction:
            msg = f"{self.signal} needs a direction"
            raise ValueError(msg)
        if self.oid:
            if need and self.index.count(need) != 1:
                msg = f"{self.signal} needs exactly one {need!r} in index"
                raise ValueError(msg)
            if not need and any(not t.isdigit() for t in self.index):
                msg = f"{self.signal} is per port: index may hold literals only"
                raise ValueError(msg)
        if self.signal in _PER_PORT and self.columns:
            msg = f"{self.signal} is per port: use oid"
            raise ValueError(msg)


@dataclass(kw_only=True)
class ProfileFile:
    """The schema of one profile file."""

    name: str = option("", "Profile name (the file stem by convention).")
    description: str = option("", "What devices this covers and where the OIDs come from.")
    rank: int = option(0, "Higher wins when several profiles match.")
    include_generic: bool = option(True, "Also poll the generic profile's tables.")
    priority_count: int = option(8, "Priorities per port.", min=1, max=8)
    cbqos_ecn: bool = option(
        False, "Poll Cisco CBQoS cbQosREDECNMarkPkt64 (ECN marks per output class-map)."
    )
    match: list[MatchRule] = option([], "Rules that select this profile.")
    counter: list[CounterTable] = option([], "Counter tables.")

    def validate(self) -> None:
        """A name is required."""
        if not self.name:
            msg = "profile needs a name"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Table:
    """A compiled :class:`CounterTable`."""

    signal: str
    direction: str
    column: Oid | None
    index: tuple[int | str, ...]  # "p", "q", "*" or a literal int
    columns: tuple[Oid, ...]
    base: int
    unit: float
    bits: int
    multicast_from: int = -1

    def key(self) -> tuple[str, str]:
        """(signal, direction)."""
        return self.signal, self.direction

    def queue_label(self, sub: int) -> str:
        """The ``queue`` label of 0-based queue ``sub`` (multicast queues: ``mc<n>``)."""
        mc = self.multicast_from
        return f"mc{sub - mc}" if 0 <= mc <= sub else str(sub)

    def probe_oid(self) -> Oid:
        """An OID whose GETNEXT tells whether the table exists."""
        return self.column if self.column is not None else self.columns[0]

    def match_suffix(self, rest: tuple[int, ...], count: int) -> int | None:
        """Sub-index (priority/queue, 0-based; -1 for per-port) of an index tail, or None."""
        if len(rest) != len(self.index):
            return None
        sub = -1
        for tok, v in zip(self.index, rest, strict=True):
            if isinstance(tok, int):
                if v != tok:
                    return None
            elif tok in ("p", "q"):
                sub = v - self.base
                if sub < 0 or (tok == "p" and sub >= count):
                    return None
        return sub


@dataclass(frozen=True, slots=True)
class Profile:
    """A compiled profile: match rules and the tables to poll."""

    name: str
    description: str
    rank: int
    rules: tuple[tuple[Oid | None, re.Pattern[str] | None], ...]
    tables: tuple[Table, ...]
    priority_count: int = 8
    source: str = field(default="", compare=False)
    cbqos_ecn: bool = False

    def matches(self, sys_object_id: Oid | None, sys_descr: str) -> bool:
        """Whether any rule matches the device."""
        for prefix, regex in self.rules:
            if prefix is not None and (
                sys_object_id is None or sys_object_id[: len(prefix)] != prefix
            ):
                continue
            if regex is not None and not regex.search(sys_descr):
                continue
            return True
        return False


def _compile(pf: ProfileFile, generic: tuple[Table, ...], source: str) -> Profile:
    tables: list[Table] = []
    for c in pf.counter:
        tables.append(
            Table(
                signal=c.signal,
                direction=c.direction,
                column=parse_oid(c.oid) if c.oid else None,
                index=tuple(int(t) if t.isdigit() else t for t in c.index),
                columns=tuple(parse_oid(o) for o in c.columns),
                base=c.base,
                unit=c.unit,
                bits=c.bits,
                multicast_from=c.multicast_from,
            )
        )
    if pf.include_generic:
        tables.extend(t for t in generic if t not in tables)
    rules = tuple(
        (
            parse_oid(r.sys_object_id) if r.sys_object_id else None,
            re.compile(r.sys_descr) if r.sys_descr else None,
        )
        for r in pf.match
    )
    return Profile(
        pf.name,
        pf.description,
        pf.rank,
        rules,
        tuple(tables),
        pf.priority_count,
        source,
        pf.cbqos_ecn,
    )


def parse_profile(text: str, source: str) -> ProfileFile:
    """Parse and validate one profile file's text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=source) from None
    return build(ProfileFile, data, source=source)


@dataclass(frozen=True, slots=True)
class ProfileSet:
    """Every known profile; :meth:`select` picks one for a device."""

    profiles: tuple[Profile, ...]
    generic: Profile

    def select(self, sys_object_id: Oid | None, sys_descr: str) -> Profile:
        """The highest-ranked matching profile, else ``generic``."""
        best: Profile | None = None
        for p in self.profiles:
            if p.matches(sys_object_id, sys_descr) and (best is None or p.rank > best.rank):
                best = p
        return best or self.generic

    def by_name(self, name: str) -> Profile:
        """A profile by name (for a target's ``profile`` override)."""
        if name == self.generic.name:
            return self.generic
        for p in self.profiles:
            if p.name == name:
                return p
        known = ", ".join(sorted([self.generic.name, *(p.name for p in self.profiles)]))
        msg = f"unknown switch profile {name!r} (known: {known})"
        raise ConfigError(msg)


def load_profiles(extra_dirs: tuple[Path, ...] = ()) -> ProfileSet:
    """Load the built-in profiles plus ``*.toml`` from ``extra_dirs`` (same name overrides)."""
    texts = read_profile_texts("fabricwatch.collectors.switch", extra_dirs)
    files = {name: (parse_profile(text, src), src) for name, (text, src) in texts.items()}
    generic_entry = next((v for v in files.values() if v[0].name == "generic"), None)
    if generic_entry is None:
        raise ConfigError("no 'generic' switch profile found")
    gen_file, gen_src = generic_entry
    generic = _compile(gen_file, (), gen_src)
    profiles = tuple(
        _compile(pf, generic.tables, src) for pf, src in files.values() if pf.name != "generic"
    )
    names = [p.name for p in profiles]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ConfigError(f"duplicate switch profile names: {', '.join(sorted(dupes))}")
    return ProfileSet(profiles, generic)
