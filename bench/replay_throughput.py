"""Replay throughput: node-hours of 1 Hz telemetry analysed per CPU-second.

    .venv/bin/python bench/replay_throughput.py [--hours 2]

Generates N node-hours of one simulated node (8 GPUs, 1 NVLink each, 1 RoCE
NIC, 1 switch uplink, 1 storage path: ~75 series at 1 Hz, 10 % missing) with
a few incidents, writes it as OpenMetrics text (not timed), then times in
this process, on CPU time:

* reference: splitting every line into fields (the least any text parser does);
* reference: the live path (same readings straight into store + engine);
* replay: parse + map + sort, then store + engine.

Budget (DESIGN.md): >= 10 node-hours per CPU-second.
"""

from __future__ import annotations

import argparse
import io
import time

from fabricwatch.engine.replay import Mapper, parse_openmetrics, run_replay, write_openmetrics
from fabricwatch.engine.scenarios import Injection, Scenario, flatten, run_live

BUDGET = 10.0


def cpu(fn: object) -> float:
    t0 = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
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
    live_holder: list[int] = []
    live_s = cpu(lambda: live_holder.append(len(run_live(sc))))
    # the live figure includes generating the scenario; time generation alone too
    gen_s = cpu(lambda: sum(1 for _ in flatten(sc)))
    mapper = Mapper()
    parse_s = cpu(lambda: parse_openmetrics(iter(lines), mapper, source="bench"))
    samples: list[tuple[float, str, tuple[str, ...], float]] = []
    sort_s = cpu(lambda: samples.extend(mapper.finish()))
    result_holder: list[int] = []
    engine_s = cpu(lambda: result_holder.append(len(run_replay(samples).transitions)))
    replay_s = parse_s + sort_s + engine_s
    assert result_holder == live_holder, "replay and live disagree"

    def rate(seconds: float) -> float:
        return hours / seconds if seconds > 0 else float("inf")

    print(
        f"{hours:.1f} node-hours, {n:,} samples ({n / duration:.0f}/s), "
        f"{len(text) / 1e6:.0f} MB text"
    )
    print(f"{'stage':38} {'CPU s':>7} {'node-h/CPU-s':>13} {'x line split':>13}")
    for name, sec in (
        ("reference: split lines into fields", split_s),
        ("reference: live path (minus generation)", max(live_s - gen_s, 1e-9)),
        ("replay: parse + map", parse_s),
        ("replay: sort", sort_s),
        ("replay: store + engine", engine_s),
        ("replay: total", replay_s),
    ):
        print(f"{name:38} {sec:7.2f} {rate(sec):13.2f} {sec / split_s:13.1f}")
    print(
        f"\nreplay total: {rate(replay_s):.2f} node-hours per CPU-second; budget >= {BUDGET:g} "
        f"({'met' if rate(replay_s) >= BUDGET else 'NOT met'}; "
        f"{rate(replay_s) / BUDGET:.2f}x of budget)"
    )


if __name__ == "__main__":
    main()
