"""Render every dashboard's panels as PNG plots from a real, backfilled Prometheus.

No Grafana server can run here (none in Debian, PyPI or npm), so this is the
stand-in for screenshots: the same PromQL the committed dashboard JSON holds
is run against a real ``prometheus`` loaded (``promtool tsdb
create-blocks-from openmetrics``) with simulated fleet telemetry rendered by
the real exporter, and each panel is drawn with matplotlib.

Usage: ``.venv/bin/python bench/render_dashboards.py [--out docs/img] [--hours 3]``

Prints timings as ratios against reference runs in the same process: backfill
against simulation, and each panel's query against a trivial ``vector(1)``
query over the same range.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dashboards.build import DASHBOARDS  # noqa: E402
from dashboards.promserver import PrometheusServer, Series, backfill  # noqa: E402
from dashboards.queries import concrete, constants  # noqa: E402
from dashboards.telemetry import simulate  # noqa: E402

# Image name suffix -> variables, per dashboard. The node dashboard is drawn for
# the node with the PFC storm and for the one with checkpoint stalls.
VARIABLES: dict[str, dict[str, dict[str, str]]] = {
    "fabricwatch-node.json": {
        "": {"node": "gpu-node-01:9477"},
        "-checkpoint": {"node": "gpu-node-02:9477"},
    },
}
UNIT_SCALE = {"percentunit": (100.0, "%"), "Bps": (1e-9, "GB/s"), "s": (1.0, "s")}


def _legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def _unit(panel: dict[str, Any]) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))


def _plot_panel(
    ax: Axes,
    panel: dict[str, Any],
    results: list[tuple[dict[str, Any], list[Series]]],
    step: float,
    start: float,
) -> None:
    t0 = start / 60.0
    unit = _unit(panel)
    scale, label = UNIT_SCALE.get(unit, (1.0, unit if unit not in ("none", "short") else ""))
    ax.set_title(str(panel.get("title")), fontsize=9)
    ax.tick_params(labelsize=7)
    kind = panel["type"]
    if kind in ("stat", "bargauge", "table"):
        names: list[str] = []
        values: list[float] = []
        for target, series in results:
            for s in series:
                fmt = str(target.get("legendFormat", ""))
                words = [fmt] if fmt != "__auto" else []
                text = (
                    _legend(fmt, s.labels)
                    if "{{" in fmt
                    else " ".join([*words, *s.labels.values()])
                )
                names.append(text[:40])
                values.append(s.points[-1][1] * scale)
        if kind == "stat" and len(values) == 1:
            ax.text(0.5, 0.5, f"{values[0]:.4g} {label}", ha="center", va="center", fontsize=20)
            ax.set_axis_off()
            return
        ax.barh(range(len(values)), values, color="tab:blue")
        ax.set_yticks(range(len(values)), names, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel(label, fontsize=7)
        return
    if kind == "heatmap":
        series = [s for _, ss in results for s in ss]
        if not series:
            return
        key = "le" if any("le" in s.labels for s in series) else None
        if key:
            series.sort(key=lambda s: float(s.labels.get("le", "inf").replace("+Inf", "inf")))
        times = [t / 60.0 for t, _ in series[0].points]
        grid = [[v for _, v in s.points][: len(times)] for s in series]
        if key:
            # Prometheus buckets are cumulative; Grafana's heatmap format de-accumulates.
            grid = [grid[0]] + [
                [hi - lo for hi, lo in zip(upper, lower, strict=False)]
                for upper, lower in itertools.pairwise(grid)
            ]
        width = min(len(r) for r in grid)
        ax.imshow(
            [r[:width] for r in grid],
            aspect="auto",
            origin="lower",
            cmap="viridis",
            extent=(times[0] - t0, times[width - 1] - t0, -0.5, len(grid) - 0.5),
        )
        ticks = [_legend(str(results[0][0].get("legendFormat", "")), s.labels) for s in series]
        ax.set_yticks(range(len(ticks)), ticks, fontsize=6)
        ax.set_xlabel("minutes", fontsize=7)
        return
    for target, series in results:
        for s in series:
            xs: list[float] = []
            ys: list[float] = []
            prev = None
            for t, v in s.points:
                if prev is not None and t - prev > 1.5 * step:
                    # A gap in the series: break the line as Grafana does.
                    xs.append((prev + step) / 60.0 - t0)
                    ys.append(float("nan"))
                xs.append(t / 60.0 - t0)
                ys.append(v * scale if math.isfinite(v) else float("nan"))
                prev = t
            style = "--" if target.get("legendFormat") == "budget" else "-"
            ax.plot(
                xs,
                ys,
                style,
                linewidth=1,
                label=_legend(str(target.get("legendFormat", "")), s.labels),
            )
    ax.set_xlabel("minutes", fontsize=7)
    ax.set_ylabel(label, fontsize=7)
    handles, _ = ax.get_legend_handles_labels()
    if 0 < len(handles) <= 12:
        ax.legend(fontsize=5, loc="upper left")


def render(
    doc: dict[str, Any],
    server: PrometheusServer,
    window: tuple[float, float, float],
    out: Path,
    variables: dict[str, str],
) -> list[float]:
    """Draw one dashboard into ``out``; return each query's latency in seconds."""
    start, end, step = window
    consts = {**constants(doc), **variables}
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 6, rows * 3.2), squeeze=False)
    latencies: list[float] = []
    for ax, panel in zip(axes.flat, panels, strict=False):
        results = []
        for target in panel.get("targets", []):
            expr = concrete(str(target["expr"]), {**consts, "__range": f"{int(end - start)}s"})
            t0 = time.perf_counter()
            if target.get("instant"):
                series = server.query(expr, end)
            else:
                series = server.query_range(expr, start, end, step)
            latencies.append(time.perf_counter() - t0)
            results.append((target, series))
        _plot_panel(ax, panel, results, step, start)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_axis_off()
    chosen = ", ".join(f"{k}={v}" for k, v in variables.items()) or "all"
    fig.suptitle(f"{doc['title']} ({chosen}; simulated telemetry, real Prometheus)", fontsize=12)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return latencies


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--step", type=float, default=30.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    duration = args.hours * 3600.0
    start = float(int(time.time() // 3600 * 3600 - duration))
    end = start + duration

    t0 = time.perf_counter()
    text = simulate(start, duration, args.step, gpus=8, links=4)
    sim = time.perf_counter() - t0
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    steps = int(duration // args.step) + 1
    print(f"simulated {samples:,} samples ({steps} scrapes x 3 nodes) in {sim:.2f} s")
    with tempfile.TemporaryDirectory(prefix="fw-render-") as tmp:
        work = Path(tmp)
        om = work / "telemetry.om"
        om.write_text(text, encoding="utf-8")
        t0 = time.perf_counter()
        backfill(om, work / "tsdb")
        fill = time.perf_counter() - t0
        print(f"backfill (promtool): {fill:.2f} s = {fill / sim:.2f}x the simulation time")
        with PrometheusServer(work / "tsdb", work) as server:
            base = []
            for _ in range(20):
                t0 = time.perf_counter()
                server.query_range("vector(1)", start, end, args.step)
                base.append(time.perf_counter() - t0)
            ref_q = statistics.median(base)
            for name in DASHBOARDS:
                doc = json.loads((REPO / "dashboards" / name).read_text(encoding="utf-8"))
                for suffix, variables in VARIABLES.get(name, {"": {}}).items():
                    png = args.out / name.replace(".json", f"{suffix}.png")
                    lat = render(doc, server, (start, end, args.step), png, variables)
                    med = statistics.median(lat)
                    print(
                        f"{name}: {len(lat)} queries, median {med * 1e3:.1f} ms "
                        f"= {med / ref_q:.1f}x vector(1), "
                        f"max {max(lat) / ref_q:.1f}x -> {png.relative_to(REPO)}"
                    )
    print("budget: DESIGN.md sets none for dashboards (panels are checked for data, not speed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
