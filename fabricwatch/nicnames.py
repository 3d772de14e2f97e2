"""What driver statistics (``ethtool -S`` names) mean: shared by the NIC collector and replay.

Pure name logic, no I/O: the live collector classifies the names the ioctl
returns; replay classifies node_exporter's ``node_ethtool_*`` names, which
are the same names lowercased, with ``.`` and ``-`` turned into ``_`` and
``rx``/``tx`` spelt ``received``/``transmitted`` (:func:`classify_exported`).
Both therefore see every driver the same way (mlx5, bnxt_en, ice, i40e
in-tree and out-of-tree, sfc, tg3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PAUSE_FRAMES = "pause_frames"
PAUSE_DURATION_US = "pause_duration_us"
LINK_PAUSE_FRAMES = "link_pause_frames"
LINK_PAUSE_DURATION_US = "link_pause_duration_us"
STORM = "pause_storm"
DROPS = "drops"
PRIORITY_DISCARDS = "priority_discards"
PRIORITY_MARKED = "priority_ecn_marked"
LINK_DOWN = "link_down_events"


@dataclass(frozen=True, slots=True)
class StatKey:
    """What a driver statistic means.

    Attributes:
        kind: one of the module's kind constants.
        priority: ``"0"``-``"7"`` for per-priority statistics, else ``""``.
        qualifier: direction (``rx``/``tx``), storm level or drop/discard reason.
    """

    kind: str
    priority: str = ""
    qualifier: str = ""


_DISCARD_REASON = {"buf_discard": "buffer", "cong_discard": "congestion", "discards": "other"}


# Order matters: where two names of one driver mean the same thing (mlx5's
# rx_global_pause and rx_pause_ctrl_phy), the earlier pattern wins and the
# later name is ignored, so the signal is never counted twice.
_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], StatKey]], ...] = (
    # mlx5: rx_prio3_pause / rx_prio3_pause_duration (microseconds)
    (re.compile(r"^(rx|tx)_prio([0-7])_pause$"), lambda m: StatKey(PAUSE_FRAMES, m[2], m[1])),
    (
        re.compile(r"^(rx|tx)_prio([0-7])_pause_duration$"),
        lambda m: StatKey(PAUSE_DURATION_US, m[2], m[1]),
    ),
    # i40e (newer in-tree I40E_PFC_STAT names, out-of-tree 2.x): port.rx_priority_3_xoff_rx
    (
        re.compile(r"^port\.(rx|tx)_priority_([0-7])_xoff_\1$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # ice: rx_priority_3_xoff.nic; older i40e: port.rx_priority_3_xoff
    (
        re.compile(r"^(?:port\.)?(rx|tx)_priority_([0-7])_xoff(?:\.nic)?$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # ice out-of-tree with unified statistic names: port-rx-xoff_prio-3_events
    (
        re.compile(r"^port\-(rx|tx)\-xoff_prio\-([0-7])_events$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    # bnxt_en: rx_pfc_ena_frames_pri3, pfc_pri3_rx_duration_us (port_stats_ext)
    (
        re.compile(r"^(rx|tx)_pfc_ena_frames_pri([0-7])$"),
        lambda m: StatKey(PAUSE_FRAMES, m[2], m[1]),
    ),
    (
        re.compile(r"^pfc_pri([0-7])_(rx|tx)_duration_us$"),
        lambda m: StatKey(PAUSE_DURATION_US, m[1], m[2]),
    ),
    # 802.3x link-level pause. mlx5: rx_global_pause (global pause mode), else
    # rx_pause_ctrl_phy (PHY MAC-control PAUSE frames; PFC uses another opcode).
    (re.compile(r"^(rx|tx)_global_pause$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (re.compile(r"^(rx|tx)_pause_ctrl_phy$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (
        re.compile(r"^(rx|tx)_global_pause_duration$"),
        lambda m: StatKey(LINK_PAUSE_DURATION_US, "", m[1]),
    ),
    # ice link_xoff_rx.nic / port-rx-xoff_events; i40e port.link_xoff_rx
    (
        re.compile(
            r"^(?:link_xoff_(rx|tx)\.nic|port\.link_xoff_(rx|tx)|port\-(rx|tx)\-xoff_events)$"
        ),
        lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1] or m[2] or m[3]),
    ),
    # bnxt_en rx_pause_frames; sfc port_rx_pause; tg3 rx_xoff_pause_rcvd / tx_xoff_sent
    (re.compile(r"^(rx|tx)_pause_frames$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (re.compile(r"^port_(rx|tx)_pause$"), lambda m: StatKey(LINK_PAUSE_FRAMES, "", m[1])),
    (
        re.compile(r"^(?:rx_xoff_pause_(rcvd)|(tx)_xoff_sent)$"),
        lambda m: StatKey(LINK_PAUSE_FRAMES, "", "rx" if m[1] else "tx"),
    ),
    (re.compile(r"^tx_pause_storm_(warning|error)_events$"), lambda m: StatKey(STORM, "", m[1])),
    (
        re.compile(r"^rx_prio([0-7])_(buf_discard|cong_discard|discards)$"),
        lambda m: StatKey(PRIORITY_DISCARDS, m[1], _DISCARD_REASON[m[2]]),
    ),
    (re.compile(r"^rx_prio([0-7])_marked$"), lambda m: StatKey(PRIORITY_MARKED, m[1])),
    (
        re.compile(r"^((?:rx|tx)_discards_phy|rx_out_of_buffer|dev_out_of_buffer)$"),
        lambda m: StatKey(DROPS, "", m[1]),
    ),
    (re.compile(r"^link_down_events_phy$"), lambda m: StatKey(LINK_DOWN)),
)

SATURATED_VALUES = frozenset({2**32 - 1, 2**64 - 1})
"""Values a counter pinned at its maximum shows (32-bit hardware counters that
saturate instead of wrapping, behind a 64-bit ethtool or sysfs field)."""
_RATE_KINDS = frozenset(
    {PAUSE_FRAMES, PAUSE_DURATION_US, LINK_PAUSE_FRAMES, LINK_PAUSE_DURATION_US}
)


# node_exporter's spelling of the same names: "." and "-" become "_".
_EXPORTED = tuple(
    (re.compile(p.pattern.replace(r"\.", "[._]").replace(r"\-", "[-_]")), make)
    for p, make in _PATTERNS
)
_RECEIVED = re.compile(r"(^|_)received(?=_|$)")
_TRANSMITTED = re.compile(r"(^|_)transmitted(?=_|$)")


def _rank(
    name: str,
    patterns: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], StatKey]], ...] = _PATTERNS,
) -> tuple[StatKey, int] | None:
    for rank, (pattern, make) in enumerate(patterns):
        m = pattern.match(name)
        if m:
            return make(m), rank
    return None


def classify(name: str) -> StatKey | None:
    """What ``name`` means, or None for statistics we do not export."""
    hit = _rank(name)
    return None if hit is None else hit[0]


def classify_exported(name: str) -> tuple[StatKey, int] | None:
    """Meaning and precedence rank of a node_exporter ethtool statistic (after ``node_ethtool_``).

    The rank orders names of one meaning the way :class:`Classifier` does
    (lower wins), so replay can keep the same one the live collector keeps.
    """
    raw = _TRANSMITTED.sub(r"\1tx", _RECEIVED.sub(r"\1rx", name))
    return _rank(raw, _EXPORTED)


def saturated(key: StatKey, value: int) -> bool:
    """A pause counter pinned at its maximum: its rate is unknown, not zero."""
    return key.kind in _RATE_KINDS and value in SATURATED_VALUES


class Classifier:
    """:func:`classify` with a per-name cache (names repeat every cycle)."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[str, tuple[StatKey, int] | None] = {}

    def select_named(self, stats: Mapping[str, int]) -> list[tuple[StatKey, int, str]]:
        """The statistics we export with their meaning and driver name, one per meaning."""
        best: dict[StatKey, tuple[int, int, str]] = {}
        cache = self._cache
        for name, value in stats.items():
            try:
                hit = cache[name]
            except KeyError:
                hit = cache[name] = _rank(name)
            if hit is None:
                continue
            key, rank = hit
            prev = best.get(key)
            if prev is None or rank < prev[0]:
                best[key] = (rank, value, name)
        if len(cache) > 65536:  # a driver renaming stats forever must not grow us forever
            cache.clear()
        return [(key, value, name) for key, (_, value, name) in best.items()]

    def select(self, stats: Mapping[str, int]) -> list[tuple[StatKey, int]]:
        """The statistics we export, with their meaning."""
        return [(key, value) for key, value, _ in self.select_named(stats)]
