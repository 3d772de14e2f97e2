"""Cross-check the correlation engine on independently generated traces.

Generates traces with ``bench/crosscheck_traces.py`` (written from issue #16
and the reference notes, not from the engine), replays each through the real
CLI (``python -m fabricwatch replay FILE --json``, so whatever ``fabricwatch``
is importable is the one measured: prefix ``PYTHONPATH=`` to measure another
checkout), and scores the incidents against the ground truth, next to a
deliberately naive reference rule (idle detector on power plus "the counter
family that jumped most around the onset").

    python bench/engine_crosscheck.py [--quick] [--seed N] [--out results.json]

``--scenarios ecn_slow --allreduce-loss 0.3 0.7`` runs the slowdowns alone,
at the depth issue 16 names (30-70 % of all-reduce throughput lost, the
compute phase unchanged: 8-50 % of the mean traffic where compute is 60-80 %
of the iteration), shallower than the generator's default stretch.

Prints, per sample spacing, per variant and per scenario: stall recall
(stalls >= 3 samples), precision, attribution, culprit accuracy, false alarms
per node-day and median detection latency in samples.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench import crosscheck_traces as ct


@dataclass(slots=True)
class Verdict:
    """What one detector said about one truth episode."""

    detected: bool = False
    cause: str = ""
    culprit: str = ""
    latency_samples: float = math.nan
    kind: str = ""
    gpus: tuple[str, ...] = ()


@dataclass(slots=True)
class Result:
    """Everything scored for one trace."""

    seed: int
    scenario: str
    variant: str
    spacing: float
    hours: float
    params: dict[str, Any]
    truth: list[dict[str, Any]]
    engine: list[Verdict] = field(default_factory=list)
    naive: list[Verdict] = field(default_factory=list)
    engine_fa: list[dict[str, Any]] = field(default_factory=list)
    naive_fa: int = 0
    engine_incidents: int = 0
    naive_incidents: int = 0
    unmapped: dict[str, int] = field(default_factory=dict)
    confounders: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def _ts(text: str | None) -> float:
    if not text:
        return math.nan
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def culprit_ok(got: str, accepted: Sequence[str], strict: bool = True) -> bool:
    """Whether ``got`` names one of the accepted keys (lenient: prefix either way)."""
    if not accepted:
        return True
    if strict:
        return got in set(accepted)
    return any(got == a or got.startswith(a + ":") or a.startswith(got + ":") for a in accepted)


def _match(inc_on: float, inc_end: float, tr: ct.Truth, spacing: float) -> bool:
    slack = max(2 * spacing, 5.0)
    return inc_on <= tr.end + slack and inc_end >= tr.onset - slack


def run_engine(path: Path, timeout: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Replay one file through the CLI; (incidents, summary)."""
    proc = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "replay", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=path.parent,  # a checkout in the cwd would shadow PYTHONPATH
    )
    if proc.returncode != 0:
        raise RuntimeError(f"replay rc={proc.returncode}: {proc.stderr[-400:]}")
    docs: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    summary: dict[str, Any] = {}
    for line in reversed(proc.stderr.splitlines()):
        if line.startswith("{"):
            summary = json.loads(line)
            break
    return docs, summary


def score_engine(
    tr: ct.Trace, docs: list[dict[str, Any]]
) -> tuple[list[Verdict], list[dict[str, Any]]]:
    """Match incidents to truth; (verdict per truth, false-alarm incidents)."""
    used: set[int] = set()
    verdicts: list[Verdict] = []
    spans = []
    for d in docs:
        on = float(d.get("onset_unix") or _ts(d.get("onset")))
        end = on + float(d.get("duration_seconds") or 0.0)
        spans.append((on, end))
    for truth in tr.truth:
        best: int | None = None
        for i, (on, end) in enumerate(spans):
            if _match(on, end, truth, tr.spacing) and (best is None or on < spans[best][0]):
                best = i
        v = Verdict()
        if best is not None:
            for i, (on, end) in enumerate(spans):
                if _match(on, end, truth, tr.spacing):
                    used.add(i)
            d = docs[best]
            v.detected = True
            v.cause = str(d.get("cause", ""))
            cul = d.get("culprit") or {}
            v.culprit = str(cul.get("key", "")) if isinstance(cul, dict) else str(cul)
            opened = _ts(d.get("opened_at"))
            v.latency_samples = (opened - truth.onset) / tr.spacing
            v.kind = str(d.get("kind", ""))
            v.gpus = tuple(str(g) for g in d.get("gpus", []))
        verdicts.append(v)
    fa = [
        {
            "cause": d.get("cause"),
            "kind": d.get("kind"),
            "onset_rel": round(spans[i][0] - tr.start, 1),
            "duration": d.get("duration_seconds"),
            "culprit": (d.get("culprit") or {}).get("key", ""),
            "gpus": d.get("gpus"),
            "summary": str(d.get("summary", ""))[:240],
        }
        for i, d in enumerate(docs)
        if i not in used
    ]
    return verdicts, fa


# --------------------------------------------------------------------- naive rule

_FAMILY_CAUSE = (
    ("pause", "pfc_storm"),
    ("cpfcIfPriority", "pfc_storm"),
    ("ecn", "ecn_congestion"),
    ("cnp", "ecn_congestion"),
    ("link_downed", "link_down"),
    ("state_id", "link_down"),
    ("ifOperStatus", "link_down"),
    ("CRC", "nvlink_degraded"),
    ("XID", "gpu_fault"),
    ("write_time", "storage_latency"),
    ("write_latency", "storage_latency"),
    ("written_bytes", "checkpoint_write"),
    ("write_bytes", "checkpoint_write"),
)


def _labels_of(key: str) -> dict[str, str]:
    body = key[key.index("{") + 1 : -1] if "{" in key else ""
    out = {}
    for part in body.split('",'):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v.strip('"')
    return out


def _naive_key(key: str, rdma: dict[str, str]) -> str:
    lab = _labels_of(key)
    if "gpu" in lab:
        return f"gpu:{lab['gpu']}"
    if "ifName" in lab:
        prio = lab.get("cpfcIfPriorityValue") or lab.get("cpfcIfPriorityWaitCoS")
        return f"switch:{lab.get('switch', '')}:{lab['ifName']}" + (f":{prio}" if prio else "")
    if "path" in lab:
        return f"storage:{lab['path']}"
    if key.startswith("node_disk"):
        return f"storage:{lab.get('device', '')}"
    dev = lab.get("device", "")
    if key.startswith("node_ethtool"):
        dev = rdma.get(dev, dev)
        name = key.split("{", 1)[0]
        prio = name.split("prio")[1].split("_")[0] if "prio" in name else ""
        return f"nic:{dev}:1:{prio}"
    return f"nic:{dev}:{lab.get('port', '1')}"


def _rate(samp: list[tuple[float, float]], a: float, e: float, counter: bool) -> float:
    pts = [(t, v) for t, v in samp if a <= t <= e]
    if len(pts) < 2:
        return math.nan
    if not counter:
        return statistics.fmean(v for _, v in pts)
    inc = sum(max(0.0, v2 - v1) for (_, v1), (_, v2) in itertools.pairwise(pts))
    return inc / max(1e-9, pts[-1][0] - pts[0][0])


def naive_detect(tr: ct.Trace) -> list[tuple[float, float]]:
    """Idle episodes: >= 3 job GPUs' power under 40 % of their own p90 for 2 samples."""
    power = {k: v for k, v in tr.series.items() if k.startswith("DCGM_FI_DEV_POWER_USAGE")}
    if not power:
        return []
    ref = {k: sorted(v for _, v in s)[int(0.9 * (len(s) - 1))] for k, s in power.items() if s}
    times = sorted({t for s in power.values() for t, _ in s})
    last: dict[str, float] = {}
    idx = dict.fromkeys(power, 0)
    idle_run: list[float] = []
    out: list[tuple[float, float]] = []
    for t in times:
        for k, s in power.items():
            i = idx[k]
            while i < len(s) and s[i][0] <= t:
                last[k] = s[i][1]
                i += 1
            idx[k] = i
        n_idle = sum(1 for k, v in last.items() if ref.get(k, 0) > 0 and v < 0.4 * ref[k])
        if n_idle >= 3:
            idle_run.append(t)
        else:
            if len(idle_run) >= 2:
                out.append((idle_run[0], idle_run[-1]))
            idle_run = []
    if len(idle_run) >= 2:
        out.append((idle_run[0], idle_run[-1]))
    return out


def naive_attribute(tr: ct.Trace, onset: float) -> tuple[str, str]:
    s = tr.spacing
    w0, w1 = onset - 3 * s - 12.0, onset + 2 * s
    b0, b1 = w0 - max(300.0, 20 * s), w0
    best = (0.0, "", "")
    # netdev -> RDMA device, as replay renames ethtool series (fabricwatch_nic_info).
    rdma = {
        lab["netdev"]: lab["device"]
        for lab in (_labels_of(k) for k in tr.series if k.startswith("fabricwatch_nic_info{"))
    }
    for key, samp in tr.series.items():
        name = key.split("{", 1)[0]
        cause = next((c for frag, c in _FAMILY_CAUSE if frag in name), "")
        if not cause:
            continue
        if "XID" in name:
            if any(v != 0 for t, v in samp if w0 <= t <= w1):
                jump = 1e12
            else:
                continue
        elif "state_id" in name or "ifOperStatus" in name:
            bad = 4.0 if "state_id" in name else 1.0
            if any(v != bad for t, v in samp if w0 <= t <= w1):
                jump = 1e11
            else:
                continue
        elif "write_time" in name:
            dev = key[key.index("{") :]
            ops = tr.series.get("node_disk_writes_completed_total" + dev, [])
            lw = _rate(samp, w0, w1, True) / max(1e-9, _rate(ops, w0, w1, True))
            lb = _rate(samp, b0, b1, True) / max(1e-9, _rate(ops, b0, b1, True))
            jump = lw / lb if lb > 0 and not math.isnan(lw) else 0.0
        elif "write_latency" in name:
            lw, lb = _rate(samp, w0, w1, False), _rate(samp, b0, b1, False)
            jump = lw / lb if lb > 0 and not math.isnan(lw) else 0.0
        else:
            counter = name.endswith(("_total", "_TOTAL", "pause", "duration")) or name.startswith(
                ("cpfc", "node_ethtool")
            )
            rw, rb = _rate(samp, w0, w1, counter), _rate(samp, b0, b1, counter)
            if math.isnan(rw) or math.isnan(rb):
                continue
            jump = (rw + 1.0) / (rb + 1.0)
        if jump > best[0]:
            best = (jump, cause, _naive_key(key, rdma))
    if best[0] < 5.0:
        return "unknown", ""
    return best[1], best[2]


def score_naive(tr: ct.Trace) -> tuple[list[Verdict], int, int]:
    eps = naive_detect(tr)
    used: set[int] = set()
    verdicts = []
    for truth in tr.truth:
        v = Verdict()
        for i, (on, end) in enumerate(eps):
            if _match(on, end, truth, tr.spacing):
                if not v.detected:
                    v.detected = True
                    v.cause, v.culprit = naive_attribute(tr, on)
                    v.latency_samples = (on + tr.spacing - truth.onset) / tr.spacing
                used.add(i)
        verdicts.append(v)
    return verdicts, len(eps) - len(used), len(eps)


# --------------------------------------------------------------------- plan, run, tables


def plan(
    seed: int,
    quick: bool,
    spacings: Sequence[float] | None = None,
    scenarios: Sequence[str] | None = None,
) -> list[tuple[int, str, str, float]]:
    """The traces of one run: every scenario at every spacing, variants
    rotating (only ``scenarios`` where given: each keeps its trace id)."""
    out = []
    only = scenarios
    if spacings is None:
        spacings = (1.0, 5.0, 15.0) if quick else ct.SPACINGS
    n = 0
    for si, sp in enumerate(spacings):
        for ci, sc in enumerate(ct.SCENARIOS):
            if quick and (ci + si) % 3:
                continue
            variant = ct.VARIANTS[(ci + 2 * si + seed) % len(ct.VARIANTS)]
            if only is None or sc in only:
                out.append((seed * 1000 + n, sc, variant, sp))
            n += 1
    return out


def evaluate(
    item: tuple[int, str, str, float],
    tmp: Path,
    timeout: float,
    allreduce_loss: tuple[float, float] | None = None,
) -> Result:
    seed, scenario, variant, spacing = item
    tr = ct.generate(seed, scenario, variant, spacing, allreduce_loss=allreduce_loss)
    res = Result(
        seed,
        scenario,
        variant,
        spacing,
        (tr.end - tr.start) / 3600,
        tr.params,
        [
            {
                **asdict(t),
                "onset_rel": round(t.onset - tr.start, 2),
                "end_rel": round(t.end - tr.start, 2),
            }
            for t in tr.truth
        ],
    )
    res.confounders = [
        {
            "start_rel": round(c.start - tr.start, 1),
            "len": round(c.end - c.start, 1),
            "what": c.what,
        }
        for c in tr.confounders
    ]
    path = tmp / f"t{seed}_{scenario}_{variant}_{int(spacing)}.om"
    path.write_text(tr.text)
    try:
        docs, summary = run_engine(path, timeout)
        res.engine, res.engine_fa = score_engine(tr, docs)
        res.engine_incidents = len(docs)
        res.unmapped = dict(summary.get("unmapped", {}))
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        res.error = str(exc)[-300:]
        res.engine = [Verdict() for _ in tr.truth]
    finally:
        path.unlink(missing_ok=True)
    res.naive, res.naive_fa, res.naive_incidents = score_naive(tr)
    return res


def _fmt(x: float) -> str:
    return "  -  " if math.isnan(x) else f"{x:5.2f}"


def _stats(rows: list[Result], who: str) -> dict[str, float]:
    stalls = det = attr = cul_n = cul = cul_l = 0
    lat: list[float] = []
    fa = incidents = 0
    hours = 0.0
    for r in rows:
        hours += r.hours
        verdicts = r.engine if who == "engine" else r.naive
        fa += len(r.engine_fa) if who == "engine" else r.naive_fa
        incidents += r.engine_incidents if who == "engine" else r.naive_incidents
        for t, v in zip(r.truth, verdicts, strict=True):
            if t["kind"] != "stall":
                continue
            stalls += 1
            if not v.detected:
                continue
            det += 1
            if not math.isnan(v.latency_samples):
                lat.append(v.latency_samples)
            if v.cause == t["cause"]:
                attr += 1
                if t["culprits"]:
                    cul_n += 1
                    cul += culprit_ok(v.culprit, t["culprits"])
                    cul_l += culprit_ok(v.culprit, t["culprits"], strict=False)
    nan = math.nan
    return {
        "stalls": stalls,
        "recall": det / stalls if stalls else nan,
        "precision": (incidents - fa) / incidents if incidents else nan,
        "attribution": attr / det if det else nan,
        "attr_all": attr / stalls if stalls else nan,
        "culprit": cul / cul_n if cul_n else nan,
        "culprit_lenient": cul_l / cul_n if cul_n else nan,
        "fa_per_node_day": fa / (hours / 24) if hours else nan,
        "latency_med": statistics.median(lat) if lat else nan,
    }


def table(results: list[Result], by: str) -> str:
    head = (
        f"{by:<16} {'n':>3} | engine: recall  prec  attr attr*  cul  culL  FA/nd  lat"
        " | naive: recall  prec  attr   cul  FA/nd  lat"
    )
    lines = [head, "-" * len(head)]
    keys = sorted({str(getattr(r, by)) for r in results}, key=lambda x: (len(x), x))
    for k in [*keys, "ALL"]:
        rows = [r for r in results if k == "ALL" or str(getattr(r, by)) == k]
        e, n = _stats(rows, "engine"), _stats(rows, "naive")
        lines.append(
            f"{k:<16} {len(rows):>3} |        {_fmt(e['recall'])} {_fmt(e['precision'])}"
            f" {_fmt(e['attribution'])} {_fmt(e['attr_all'])} {_fmt(e['culprit'])}"
            f" {_fmt(e['culprit_lenient'])} {e['fa_per_node_day']:6.1f} {_fmt(e['latency_med'])}"
            f" |       {_fmt(n['recall'])} {_fmt(n['precision'])} {_fmt(n['attribution'])}"
            f" {_fmt(n['culprit'])} {n['fa_per_node_day']:6.1f} {_fmt(n['latency_med'])}"
        )
    return "\n".join(lines)


def _slowdown_line(results: list[Result]) -> str:
    """Slowdown truths (the tables score stalls only): found, cause, culprit."""
    slow = [
        (t, v)
        for r in results
        for t, v in zip(r.truth, r.engine, strict=True)
        if t["kind"] == "slowdown"
    ]
    found = [(t, v) for t, v in slow if v.detected]
    right = [(t, v) for t, v in found if v.cause == t["cause"]]
    culprit = sum(culprit_ok(v.culprit, t["culprits"]) for t, v in right)
    return (
        f"slowdowns (engine): found {len(found)} of {len(slow)}, cause right {len(right)}"
        f" of {len(found)}, culprit right {culprit} of {len(right)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="a small plan (< 1 CPU-minute)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2, help="parallel replays")
    ap.add_argument("--out", type=Path, help="write per-trace results as JSON")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument(
        "--spacings",
        type=float,
        nargs="+",
        help=f"sample spacings in seconds (default {' '.join(f'{x:g}' for x in ct.SPACINGS)};"
        " live collectors go up to 60)",
    )
    ap.add_argument(
        "--scenarios",
        nargs="+",
        choices=ct.SCENARIOS,
        metavar="SCENARIO",
        help="only these scenarios (each keeps its trace id); default all",
    )
    ap.add_argument(
        "--allreduce-loss",
        type=float,
        nargs=2,
        metavar=("LO", "HI"),
        help="ecn_slow as a loss of all-reduce throughput in [LO, HI) (issue 16: 0.3 0.7),"
        " the compute phase unchanged; default: the iteration stretched 1.4-3x",
    )
    ap.add_argument(
        "--dump",
        metavar="SEED:SCENARIO:VARIANT:SPACING",
        help="write that one trace and its truth to DIR/trace.om, DIR/truth.json (--out DIR)",
    )
    args = ap.parse_args(argv)
    loss: tuple[float, float] | None = None
    if args.allreduce_loss is not None:
        lo, hi = args.allreduce_loss
        if not 0.0 <= lo <= hi < 1.0:
            ap.error("--allreduce-loss: need 0 <= LO <= HI < 1")
        loss = (lo, hi)
    if args.dump:
        seed, scenario, variant, spacing = args.dump.split(":")
        tr = ct.generate(int(seed), scenario, variant, float(spacing), allreduce_loss=loss)
        out = args.out or Path()
        out.mkdir(parents=True, exist_ok=True)
        (out / "trace.om").write_text(tr.text)
        doc = {
            "truth": [asdict(t) for t in tr.truth],
            "confounders": [asdict(c) for c in tr.confounders],
            "params": tr.params,
            "start": tr.start,
        }
        (out / "truth.json").write_text(json.dumps(doc, indent=1, default=str))
        print(f"wrote {out / 'trace.om'} and {out / 'truth.json'}")
        return 0
    import fabricwatch  # the checkout under test, as the replays import it

    print(f"fabricwatch under test: {Path(fabricwatch.__file__).parent}")
    items = plan(args.seed, args.quick, args.spacings, args.scenarios)
    t0 = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="fw-crosscheck-") as d,
        ThreadPoolExecutor(args.jobs) as ex,
    ):
        results = list(ex.map(lambda it: evaluate(it, Path(d), args.timeout, loss), items))
    wall = time.perf_counter() - t0
    errors = [r for r in results if r.error]
    print(
        f"{len(results)} traces, {sum(r.hours for r in results) / 24:.2f} node-days,"
        f" {wall:.0f} s wall"
    )
    for by in ("spacing", "variant", "scenario"):
        print()
        print(table(results, by))
    print(
        "\nattr = cause right among detected stalls; attr* = among all stalls; cul = culprit key"
        " exact among right causes, culL = prefix match; FA/nd = false alarms per node-day;"
        " lat = median samples from stall onset to open."
    )
    pairs = [
        (t, v)
        for r in results
        for t, v in zip(r.truth, r.engine, strict=True)
        if t["kind"] == "stall" and v.detected
    ]
    as_slow = sum(v.kind == "slowdown" for _, v in pairs)
    print(f"detected stalls the engine reported as kind=slowdown: {as_slow} of {len(pairs)}")
    print(_slowdown_line(results))
    unm: dict[str, int] = {}
    for r in results:
        for k, v in r.unmapped.items():
            unm[k] = unm.get(k, 0) + v
    if unm:
        print(f"unmapped families seen by replay: {unm}")
    for r in errors:
        print(f"ERROR seed={r.seed} {r.scenario}/{r.variant}/{r.spacing}: {r.error}")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=1, default=str))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
