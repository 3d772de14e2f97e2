"""Replay throughput: node-hours of 1 Hz telemetry analysed per CPU-second.

    .venv/bin/python bench/replay_throughput.py [--hours 2]

Generates N node-hours of one simulated node (8 GPUs, 1 NVLink each, 1 RoCE
NIC, 1 switch uplink, 1 storage path: ~75 series at 1 Hz, 10 % missing) with
a few incidents, writes it as OpenMetrics text (not timed), then times in
this process, on CPU time:

* reference: splitting every line into fields;
* reference: ``float()`` of the value and timestamp of every line, already
  split (the least any text replay in CPython does);
* reference: the strict parser alone (every line through the full regex);
* reference: the live path (same readings straight into store + engine);
* replay: parse + map + sort, then store + engine (and, separately, the
  store's share: the same per-tick batches into a store without engine; and
  the replay's set-up: tick plan, store rows, the spacing it reports; the
  rest is the engine tick);
* ``--jobs N`` (default 2): the same replay with the engine part split over N
  worker processes (:mod:`fabricwatch.engine.replay_jobs`), on wall-clock time
  against the single process, checked to give the same transitions, and the
  speed-up projected for N free cores from the workers' own CPU time, and
  the CPU all processes took over what one process took (by time and by node);
* side by side: ``promtool tsdb create-blocks-from openmetrics`` backfilling
  the same file (its CPU from ``getrusage`` of children, and wall time).

Budget (DESIGN.md): >= 10 node-hours per CPU-second. The machine is shared:
compare the figures as ratios within one run.
"""

from __future__ import annotations

import argparse
import io
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fabricwatch.engine.replay import (
    plan_replay,
    replay_store,
    run_replay,
    sample_spacing,
    store_rows,
)
from fabricwatch.engine.replay_jobs import run_nodes, run_parallel
from fabricwatch.engine.replay_mapping import Mapper, Sample
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.signals import ENGINE_FAMILIES
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

BUDGET = 10.0

T = TypeVar("T")


def cpu(fn: object) -> float:
    t0 = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - t0


def children_cpu() -> float:
    """CPU seconds of this process's waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()``, its wall seconds, and the CPU seconds of this process and the
    children it waited for meanwhile (the workers of --jobs)."""
    k0, w0, c0 = children_cpu(), time.monotonic(), time.process_time()
    result = fn()
    wall = time.monotonic() - w0
    return result, wall, time.process_time() - c0 + children_cpu() - k0


def promtool_backfill(text: str) -> tuple[float, float] | None:
    """(CPU s, wall s) of ``promtool tsdb create-blocks-from openmetrics`` on ``text``."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="fw-replay-bench-") as tmp:
        src = Path(tmp) / "node.om"
        src.write_text(text)
        c0, w0 = children_cpu(), time.monotonic()
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(src), str(Path(tmp) / "b")],
            check=True,
            capture_output=True,
            timeout=600,
        )
        return children_cpu() - c0, time.monotonic() - w0


def tick_batches(samples: list[Sample]) -> list[tuple[float, list[Reading]]]:
    """Samples grouped by engine tick as run_replay ingests them (its store rows)."""
    out: list[tuple[float, list[Sample]]] = []
    for sm in samples:
        ts = sm[0]
        t = math.floor(ts) + 0.5 if ts <= math.floor(ts) + 0.5 else math.floor(ts) + 1.5
        if not out or out[-1][0] != t:
            out.append((t, []))
        out[-1][1].append(sm)
    return [(t, store_rows(batch)) for t, batch in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for the parallel run")
    add_results_option(ap)
    args = ap.parse_args()
    duration = int(args.hours * 3600)
    inj = [Injection("pfc_storm", t, 40) for t in range(600, duration - 300, 1800)]
    inj += [Injection("checkpoint_write", t, 30) for t in range(1500, duration - 300, 1800)]
    sc = Scenario(duration=duration, injections=inj, seed=5)
    buf = io.StringIO()
    n = write_openmetrics(flatten(sc), buf.write)
    text = buf.getvalue()
    lines = text.splitlines()
    hours = duration / 3600

    split_s = cpu(lambda: [ln.split() for ln in lines])
    numbers = [x for ln in lines if ln[0] != "#" for x in ln.rsplit(" ", 2)[1:]]
    float_s = cpu(lambda: list(map(float, numbers)))
    strict_s = cpu(lambda: parse_openmetrics(iter(lines), Mapper(), source="bench", fast=False))
    live_holder: list[int] = []
    live_s = cpu(lambda: live_holder.append(len(run_live(sc))))
    # the live figure includes generating the scenario; time generation alone too
    gen_s = cpu(lambda: sum(1 for _ in flatten(sc)))
    mapper = Mapper()
    parse_s = cpu(lambda: parse_openmetrics(iter(lines), mapper, source="bench"))
    samples: list[Sample] = []
    sort_s = cpu(lambda: samples.extend(mapper.finish()))
    result_holder: list[int] = []
    engine_s = cpu(lambda: result_holder.append(len(run_replay(samples).transitions)))
    replay_s = parse_s + sort_s + engine_s
    assert result_holder == live_holder, "replay and live disagree"
    # The store's share of "store + engine": the same per-tick batches (of the
    # families the engine reads) into a store with no engine (the store
    # belongs to the daemon core).
    batches = tick_batches([sm for sm in samples if sm[1] in ENGINE_FAMILIES])
    store = replay_store()
    ingest_s = cpu(lambda: [store.ingest("replay", b, now=t) for t, b in batches])
    # And the replay's own set-up inside "store + engine" (what run_replay
    # does besides ingest and ticks): the tick plan, the store rows, the
    # spacing it reports. The rest of "store + engine" is the engine tick.
    setup_s = cpu(
        lambda: (
            store_rows(plan_replay(samples, EngineSettings()).samples),
            sample_spacing(samples),
        )
    )

    def rate(seconds: float) -> float:
        return hours / seconds if seconds > 0 else float("inf")

    # Wall clock: one process vs --jobs N over the same sorted samples (the
    # parse is the same serial step in both and is added to both).
    one, one_wall, one_cpu = timed(lambda: run_replay(samples))
    par, par_wall, par_cpu = timed(lambda: run_parallel(samples, jobs=args.jobs))
    assert par.transitions == one.transitions, "--jobs and one process disagree"
    serial = parse_s + sort_s
    speedup = (serial + one_wall) / (serial + par_wall)
    # N free cores: the parent's own part plus the slowest span (spans are equal).
    projected = (serial + engine_s) / (serial + par_cpu / max(par.spans, 1))
    # By node: the same hours as two nodes' input (what replay --fleet reads),
    # one process per node against both nodes in one process.
    two = {"node-a": samples, "node-b": samples}
    seq_nodes, nodes_one_wall, nodes_one_cpu = timed(lambda: run_nodes(two, jobs=1))
    par_nodes, nodes_par_wall, nodes_par_cpu = timed(lambda: run_nodes(two, jobs=args.jobs))
    for node in two:
        assert par_nodes[node].transitions == seq_nodes[node].transitions, "by node disagrees"
    nodes_speedup = nodes_one_wall / nodes_par_wall
    backfill = promtool_backfill(text)

    print(
        f"{hours:.1f} node-hours, {n:,} samples ({n / duration:.0f}/s), "
        f"{len(text) / 1e6:.0f} MB text"
    )
    print(f"{'stage':38} {'CPU s':>7} {'node-h/CPU-s':>13} {'x line split':>13}")
    for name, sec in (
        ("reference: split lines into fields", split_s),
        ("reference: float() of every number", float_s),
        ("reference: strict parser (no fast path)", strict_s),
        ("reference: live path (minus generation)", max(live_s - gen_s, 1e-9)),
        ("replay: parse + map", parse_s),
        ("replay: sort", sort_s),
        ("replay: store + engine", engine_s),
        ("  of which store ingest alone", ingest_s),
        ("  of which tick plan, rows, spacing", setup_s),
        ("  so the engine tick is about", max(engine_s - ingest_s - setup_s, 1e-9)),
        ("replay: total", replay_s),
    ):
        print(f"{name:38} {sec:7.2f} {rate(sec):13.2f} {sec / split_s:13.1f}")
    tick_s = max(engine_s - ingest_s - setup_s, 0.0)
    print(
        f"\nparse: fast path {strict_s / parse_s:.1f}x the strict parser; "
        f"store ingest is {ingest_s / replay_s:.0%} of the replay, the engine tick "
        f"{tick_s / replay_s:.0%}, parse + map + sort {(parse_s + sort_s) / replay_s:.0%}"
    )
    print(
        f"float() of the numbers alone reaches {rate(float_s):.2f} node-hours per CPU-second "
        f"({rate(float_s) / BUDGET:.2f}x of budget): a floor for any text replay in CPython"
    )
    print(
        f"replay total: {rate(replay_s):.2f} node-hours per CPU-second; budget >= {BUDGET:g} "
        f"({'met' if rate(replay_s) >= BUDGET else 'NOT met'}; "
        f"{rate(replay_s) / BUDGET:.2f}x of budget)"
    )
    print(
        f"--jobs {args.jobs}: {par.spans} span(s) of {par.planned} cut ({par.spans - 1} of "
        f"{par.planned - 1} cut(s) verified), same transitions as one process; wall "
        f"{serial + par_wall:.2f} s vs {serial + one_wall:.2f} s = {speedup:.2f}x speed-up on "
        f"this machine; {par_cpu:.2f} CPU s in all (one process: {engine_s:.2f}); projected "
        f"with {args.jobs} free cores: {projected:.2f}x ({rate(replay_s) * projected:.2f} "
        "node-hours per wall-second)"
    )
    print(
        f"--jobs {args.jobs} by node (2 nodes of {hours:.1f} h each): same transitions per node; "
        f"wall {nodes_par_wall:.2f} s vs {nodes_one_wall:.2f} s in one process = "
        f"{nodes_speedup:.2f}x speed-up on this machine"
    )
    print(
        f"CPU of --jobs {args.jobs} over one process (forks, warm-up and verification "
        f"overlap): by time {par_cpu / one_cpu:.2f}x, by node {nodes_par_cpu / nodes_one_cpu:.2f}x"
    )
    figures: dict[str, float | None] = {
        "hours": hours,
        "node_hours_per_cpu_s": rate(replay_s),
        "budget_ratio": rate(replay_s) / BUDGET,
        "engine_tick_share": tick_s / replay_s,
        "parse_sort_share": (parse_s + sort_s) / replay_s,
        "jobs": float(args.jobs),
        "spans": float(par.spans),
        "spans_planned": float(par.planned),
        "wall_speedup": speedup,
        "projected_speedup": projected,
        "nodes_wall_speedup": nodes_speedup,
        "jobs_cpu_ratio": par_cpu / one_cpu,
        "nodes_cpu_ratio": nodes_par_cpu / nodes_one_cpu,
        "promtool_node_hours_per_cpu_s": None,
    }
    if backfill is None:
        print("promtool not found: no side-by-side backfill figure")
    else:
        b_cpu, b_wall = backfill
        figures["promtool_node_hours_per_cpu_s"] = rate(b_cpu)
        figures["promtool_ratio"] = rate(replay_s) / rate(b_cpu)
        print(
            f"promtool tsdb create-blocks-from openmetrics, same file: {b_cpu:.2f} CPU s "
            f"({rate(b_cpu):.2f} node-hours per CPU-second), {b_wall:.2f} s wall; replay is "
            f"{rate(replay_s) / rate(b_cpu):.2f}x its throughput per CPU-second"
        )
    write_results(args.results, figures)


if __name__ == "__main__":
    main()
