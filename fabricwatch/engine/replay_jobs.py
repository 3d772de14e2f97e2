"""``fabricwatch replay --jobs N``: a replay split over processes, by node and by time window.

Input of several nodes is split by node (:func:`run_nodes`): each node's
engine is independent of the others', so each node is one task and the
result is exactly each node's single pass. One node's input is split by
time (:func:`run_parallel`): span *k* owns ticks
``[a_k, a_k+1)``, starts with a fresh store and engine ``warmup`` seconds
before ``a_k`` and runs ``verify`` seconds past its end. The spans run in
forked worker processes and, the last one, in this process (the samples are
inherited, not pickled).

The output must be exactly what one pass gives. The engine's memory is
mostly bounded by construction: windows of minutes over the store, work
baselines that remember two epochs
(:data:`~fabricwatch.engine.stall.BASELINE_EPOCH`), settings and job groups
re-derived on the absolute clock, the slowdown check run once a sample slot
and its job rhythm measured once a minute, both on the absolute clock; the
power references (observed peaks, the node's idle draw) are not bounded.
So every cut is checked: at the cut, the
span before it and the span after it (which started fresh ``warmup``
earlier) must hold the same open incidents and the same engine state (see
``replay._gpu_state``: the unbounded parts where they are in use), and must
emit the same transitions over the ``verify`` seconds after the cut. A cut that
fails is removed (its two spans run again as one) until every remaining cut
agrees; with no cut left this is a single pass.
"""

from __future__ import annotations

import gc
import itertools
import math
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TypeVar

from fabricwatch.engine.replay import (
    ReplayResult,
    SpanRun,
    TickPlan,
    plan_replay,
    run_replay,
    run_span,
    sample_spacing,
)
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.stall import BASELINE_EPOCH

T = TypeVar("T")


def usable_cores() -> int:
    """CPUs this process may run on (the default of ``--jobs``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class Split:
    """How a replay is cut into spans (seconds of replayed time)."""

    warmup: float
    verify: float

    @classmethod
    def for_settings(cls, settings: EngineSettings) -> Split:
        """Margins that cover the engine's look-back several times over, and
        the two epochs its work baselines remember (after the GPUs armed)."""
        reach = settings.baseline_window + settings.activity_window + settings.resolve_hold
        epochs = 2 * BASELINE_EPOCH + settings.arm_after + settings.activity_window
        return cls(warmup=max(600.0, 2 * reach, epochs), verify=settings.resolve_hold + reach)


@dataclass(frozen=True, slots=True)
class _Span:
    own_from: int
    own_to: int


@dataclass(frozen=True, slots=True)
class _Job:
    """What every worker shares (inherited through fork)."""

    plan: TickPlan
    settings: EngineSettings
    node: str
    warm: int
    verify: int


def _span_call(job: _Job, span: _Span) -> Callable[[], SpanRun]:
    def call() -> SpanRun:
        n = len(job.plan.ticks)
        return run_span(
            job.plan,
            job.settings,
            job.node,
            begin=max(0, span.own_from - job.warm),
            own_from=span.own_from,
            own_to=span.own_to,
            end=min(n, span.own_to + job.verify),
            head=job.verify,
        )

    return call


def _work(call: Callable[[], object], conn: Connection) -> None:
    try:
        conn.send(("ok", call()))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which re-raises
        conn.send(("error", repr(exc)))
    finally:
        conn.close()


def _run_all(job: _Job, spans: Sequence[_Span], jobs: int) -> list[SpanRun]:
    """Run ``spans`` in at most ``jobs`` forked processes at a time, results in order."""
    return _run_forked([_span_call(job, span) for span in spans], jobs)


def _run_forked(calls: Sequence[Callable[[], T]], jobs: int) -> list[T]:
    """Each of ``calls`` in a forked process, at most ``jobs`` at a time; results in order.

    When they all fit at once, the last runs in this process (see :func:`_spawn`)."""
    ctx = multiprocessing.get_context("fork")
    # The workers inherit millions of sample tuples: frozen, a collection in a
    # worker does not walk them (and copy every page they live on).
    gc.freeze()
    try:
        return _spawn(ctx, calls, jobs)
    finally:
        gc.unfreeze()


def _spawn(
    ctx: multiprocessing.context.ForkContext, calls: Sequence[Callable[[], T]], jobs: int
) -> list[T]:
    results: list[T | None] = [None] * len(calls)
    pending = list(enumerate(calls))
    # When every call fits at once, this process runs the last one itself
    # instead of waiting idle: one fork fewer, and one share of the input
    # whose pages no worker copies.
    own = pending.pop() if 1 < len(calls) <= jobs else None
    running: list[tuple[int, multiprocessing.process.BaseProcess, Connection]] = []
    try:
        while pending or running or own is not None:
            while pending and len(running) < jobs:
                idx, call = pending.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_work, args=(call, send), daemon=True)
                proc.start()
                send.close()
                running.append((idx, proc, receive))
            if own is not None:
                idx, call = own
                own = None
                results[idx] = call()
                continue
            idx, done, receive = running.pop(0)
            try:
                status, payload = receive.recv()
            except EOFError:
                status, payload = "error", f"worker exited with code {done.exitcode}"
            finally:
                receive.close()
                done.join()
            if status != "ok":
                msg = f"replay worker failed: {payload}"
                raise RuntimeError(msg)
            results[idx] = payload
    finally:
        for _, left, pipe in running:  # only left after an error
            left.kill()
            left.join()
            pipe.close()
    return [r for r in results if r is not None]


def _agree(before: SpanRun, after: SpanRun) -> bool:
    """Whether the fresh span ``after`` starts where ``before`` left off."""
    if before.open_at_own_end != after.open_at_own_start:
        return False
    if before.gpus_at_own_end != after.gpus_at_own_start:
        return False
    # Both ran the same ticks after the cut (the span after may be shorter
    # than the verification window; then the span before ran only those too).
    return before.tail == after.head


def _cuts(n: int, count: int, warm: int, verify: int) -> list[int]:
    """Tick indices that cut ``n`` ticks into ``count`` spans of equal work.

    Every span but the first also runs ``warm`` ticks before its own, every
    span but the last ``verify`` ticks after them, so the inner spans own
    fewer ticks: each worker then runs as many ticks as the others, and none
    waits for a longer last span."""
    total = (n + (count - 1) * (warm + verify)) / count
    cuts = [0]
    for k in range(1, count):
        cuts.append(round(k * total - verify - (k - 1) * (warm + verify)))
    return [*cuts, n]


def run_parallel(
    samples: Sequence[Sample],
    settings: EngineSettings | None = None,
    *,
    node: str = "replay",
    jobs: int | None = None,
    split: Split | None = None,
) -> ReplayResult:
    """:func:`~fabricwatch.engine.replay.run_replay` over ``jobs`` processes; same result."""
    settings = settings or EngineSettings()
    jobs = usable_cores() if jobs is None else max(1, jobs)
    split = split or Split.for_settings(settings)
    if jobs == 1 or not samples:
        return run_replay(samples, settings, node=node)
    plan = plan_replay(samples, settings)
    n = len(plan.ticks)
    warm = math.ceil(split.warmup / settings.tick)
    verify = math.ceil(split.verify / settings.tick)
    # A span shorter than its margins would mostly repeat its neighbours' work.
    count = min(jobs, n // (2 * (warm + verify)))
    if count < 2:
        return run_replay(samples, settings, node=node)
    spans = [_Span(a, b) for a, b in itertools.pairwise(_cuts(n, count, warm, verify))]
    job = _Job(plan, settings, node, warm, verify)
    runs = _run_all(job, spans, jobs)
    # Remove failed cuts (merging their spans) until every remaining cut agrees.
    for _ in range(len(spans)):
        bad = {k for k in range(len(spans) - 1) if not _agree(runs[k], runs[k + 1])}
        if not bad:
            break
        merged: list[_Span] = []
        kept: list[SpanRun | None] = []
        k = 0
        while k < len(spans):
            if k in bad:
                merged.append(_Span(spans[k].own_from, spans[k + 1].own_to))
                kept.append(None)
                k += 2
            else:
                merged.append(spans[k])
                kept.append(runs[k])
                k += 1
        redo = [i for i, r in enumerate(kept) if r is None]
        fresh = dict(zip(redo, _run_all(job, [merged[i] for i in redo], jobs), strict=True))
        runs = [r if r is not None else fresh[i] for i, r in enumerate(kept)]
        spans = merged
    result = ReplayResult(
        start=plan.start, end=plan.end, skipped=plan.skipped, spans=len(runs), planned=count
    )
    for run in runs:
        result.transitions.extend(run.transitions)
        result.ticks += run.ticks
        result.readings += run.readings
        result.rejected += run.rejected
    if runs:
        result.open_at_end = runs[-1].open_at_own_end
    sp = sample_spacing(samples)
    result.spacing = sp.median if sp is not None else math.nan
    return result


def run_nodes(
    samples_by_node: Mapping[str, Sequence[Sample]],
    settings: EngineSettings | None = None,
    *,
    jobs: int | None = None,
    split: Split | None = None,
) -> dict[str, ReplayResult]:
    """Each node's :func:`~fabricwatch.engine.replay.run_replay` over ``jobs`` processes.

    Several nodes: one task per node (largest first, so the longest node does
    not start last), each exactly that node's single pass. One node: split by
    time window with :func:`run_parallel`. Results are keyed and ordered by node.
    """
    settings = settings or EngineSettings()
    jobs = usable_cores() if jobs is None else max(1, jobs)
    nodes = sorted(samples_by_node)
    if len(nodes) == 1:
        (node,) = nodes
        return {
            node: run_parallel(samples_by_node[node], settings, node=node, jobs=jobs, split=split)
        }
    if jobs == 1 or not nodes:
        return {n: run_replay(samples_by_node[n], settings, node=n) for n in nodes}
    order = sorted(nodes, key=lambda n: -len(samples_by_node[n]))
    calls = [_node_call(samples_by_node[n], settings, n) for n in order]
    results = dict(zip(order, _run_forked(calls, min(jobs, len(order))), strict=True))
    return {n: results[n] for n in nodes}


def _node_call(
    samples: Sequence[Sample], settings: EngineSettings, node: str
) -> Callable[[], ReplayResult]:
    def call() -> ReplayResult:
        return run_replay(samples, settings, node=node)

    return call
