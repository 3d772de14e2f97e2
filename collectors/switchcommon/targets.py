"""Switch targets: rules the SNMP and gNMI collectors' settings share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def check_unique_names(names: Sequence[str], kind: str) -> None:
    """Raise ValueError naming every target name used twice (``kind``: "switch", "gNMI")."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        msg = f"duplicate {kind} target names: {', '.join(dupes)}"
        raise ValueError(msg)


def switch_sources(names: Iterable[str]) -> frozenset[str]:
    """The source key of each switch (see ``CollectorSettings.sources``).

    SNMP and gNMI use the same key, so one switch polled by both is refused:
    the two would feed the same series from counters of different bases.
    """
    return frozenset(f"switch {n!r}" for n in names)
