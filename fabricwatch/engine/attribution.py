"""Attribution: the cause with the strongest evidence wins, with a confidence.

Weak evidence gives ``unknown``, never a guess. Missing evidence groups lower
the confidence of whatever wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fabricwatch.engine.causes import Cause
from fabricwatch.engine.evidence import NO_CULPRIT, TIMED_FAMILIES, Culprit, Evidence
from fabricwatch.engine.signals import FAMILY_GROUPS

_EVIDENCE_GROUPS = len(FAMILY_GROUPS) - 1  # gpu_work is the stall signal itself


@dataclass(frozen=True, slots=True)
class Attribution:
    """The verdict on one stall."""

    cause: Cause
    confidence: float
    culprit: Culprit
    score: float
    evidence: tuple[Evidence, ...]
    # Causes with evidence strong enough to explain the stall that was present
    # at its onset (not secondary): what a re-score may still name.
    primary: frozenset[Cause] = frozenset()


def attribute(
    evidence: Sequence[Evidence],
    missing: Sequence[str],
    *,
    min_evidence: float,
    late_after: float = math.inf,
    first_by: float = math.inf,
    decides_by: float = math.inf,
    events_by: float = math.inf,
) -> Attribution:
    """Pick the cause from scored evidence (strongest first or not).

    Evidence that first showed after ``late_after`` (the stall onset plus
    half a sample) came after the GPUs were already waiting: a second fault
    (a pause storm in the middle of a checkpoint) is secondary evidence,
    listed with its time, and decides only where nothing present at the
    onset explains the stall.

    ``first_by`` (finite where the onset itself is not sharp: a slowdown is
    found over a throughput window and dated only roughly) replaces that
    rule by causes: a cause whose evidence first showed more than
    ``first_by`` seconds after the earliest cause's came second, and is
    secondary the same way (all evidence of the first cause stays: its
    culprit port may show a sample after the other ports' rate cuts).

    ``decides_by`` (a stall: its onset plus what the sampling may lag a
    fault present at the onset by) bounds that fallback: an event or link
    state change (:data:`TIMED_FAMILIES`) that first showed after it began
    while the GPUs were already waiting (a link that flapped a minute into a
    hang) is secondary even where nothing else explains the stall, which is
    then ``unknown``.

    ``events_by`` (a stall seen on window averages: its onset, by when the
    GPUs were already waiting a whole sample) is the same bound, sharper,
    for every event and link state change: one first seen after it happened
    inside that sample or later, while the GPUs waited.
    """
    evidence, candidates = _by_time(
        evidence,
        min_evidence,
        late_after=late_after,
        first_by=first_by,
        decides_by=decides_by,
        events_by=events_by,
    )
    best: dict[Cause, Evidence] = {}
    support: dict[Cause, int] = {}
    for e in candidates:
        cur = best.get(e.cause)
        if cur is None or e.score > cur.score:
            best[e.cause] = e
        if e.score >= min_evidence:
            support[e.cause] = support.get(e.cause, 0) + 1
    scores: dict[Cause, float] = {}
    for cause, e in best.items():
        # Independent corroboration (a second family agreeing) adds a little.
        bonus = 0.03 if support.get(cause, 0) >= 2 else 0.0
        scores[cause] = min(0.99, e.score + bonus)
    primary = frozenset(c for c, n in support.items() if n)
    ranked = sorted(scores, key=lambda c: (-scores[c], c.precedence))
    ranked_ev = tuple(e for e in evidence if e.score >= 0.3)
    if not ranked or scores[ranked[0]] < min_evidence:
        return Attribution(
            Cause.UNKNOWN, 0.0, NO_CULPRIT, scores[ranked[0]] if ranked else 0.0, ranked_ev, primary
        )
    winner = ranked[0]
    # Slow storage explains a checkpoint that takes too long: latency beats volume.
    if winner is Cause.CHECKPOINT_WRITE and scores.get(Cause.STORAGE_LATENCY, 0.0) >= min_evidence:
        winner = Cause.STORAGE_LATENCY
    top = scores[winner]
    runner = max((scores[c] for c in ranked if c != winner), default=0.0)
    coverage = 1.0 - len(missing) / _EVIDENCE_GROUPS
    confidence = top * (0.75 + 0.25 * coverage) * (1.0 - 0.25 * min(1.0, runner / top))
    ordered = tuple(sorted(ranked_ev, key=lambda e: (e.cause != winner, -e.score)))
    return Attribution(winner, round(confidence, 3), best[winner].culprit, top, ordered, primary)


def _by_time(
    evidence: Sequence[Evidence],
    min_evidence: float,
    *,
    late_after: float,
    first_by: float,
    decides_by: float,
    events_by: float,
) -> tuple[list[Evidence], Sequence[Evidence]]:
    """(all evidence, late evidence marked ``after the onset``; the evidence
    that may decide the cause), by the time rules of :func:`attribute`."""

    def late_event(e: Evidence, by: float) -> bool:
        return e.family in TIMED_FAMILIES and e.since is not None and e.since > by

    if math.isfinite(first_by):
        first = _first_shown(evidence, min_evidence)
        t0 = min(first.values(), default=math.inf)

        def is_late(e: Evidence) -> bool:
            shown = first.get(e.cause, math.inf if e.since is None else e.since)
            return shown > t0 + first_by
    else:

        def is_late(e: Evidence) -> bool:
            return (e.since is not None and e.since > late_after) or late_event(e, events_by)

    timely = [e for e in evidence if not is_late(e)]
    if not any(e.score >= min_evidence for e in timely):

        def is_late(e: Evidence) -> bool:
            return late_event(e, min(decides_by, events_by))

        timely = [e for e in evidence if not is_late(e)]
    late = [replace(e, text=f"after the onset: {e.text}") for e in evidence if is_late(e)]
    if not late:
        return list(evidence), evidence
    return [*timely, *late], timely


def _first_shown(evidence: Sequence[Evidence], min_evidence: float) -> dict[Cause, float]:
    """When each cause's earliest evidence that could explain a stall on its
    own first showed (causes with such evidence of a known time)."""
    first: dict[Cause, float] = {}
    for e in evidence:
        if e.since is not None and e.score >= min_evidence:
            first[e.cause] = min(first.get(e.cause, math.inf), e.since)
    return first
