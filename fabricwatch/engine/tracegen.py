"""An independent trace generator for the robustness sweep (``bench/engine_eval.py``).

It shares no code with :mod:`fabricwatch.testing.sim_scenarios` (the simulator the
engine was developed against) and writes what a new user has: OpenMetrics
text with **dcgm-exporter and node_exporter names** (no fabricwatch
families, no switch, no process counts), at a chosen sample spacing, with
ground truth. The node runs one job on 8 GPUs or two jobs (GPUs 0-3 and
4-7, each with its own NICs, and in the ``two_jobs`` variant heavy ECN
marking on the other job's port around half of the faults), with a
compute/communication rhythm drawn per job (compute phases 0.5-8 s), a
checkpoint disk of a drawn device
class, and the ugliness of real exports: window-averaged gauges at 5-30 s,
missing samples, swapped and duplicated samples, collector gaps, 32-bit
counter wraps, whole families absent, and (``slow_refresh``, below 30 s)
a dcgm-exporter that refreshes every 2-3 scrapes, its scrapes in between
re-reading the last refresh.

A fault stalls a job only when the compute phase in flight ends (the
collective that needs the fabric comes next), so the fault precedes the
stall by up to one compute phase. Everything is simulated on a 0.25 s grid
and then sampled: gauges are averages over the sample interval (as
dcgm-exporter's profiling fields are), counters are cumulative.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

DT = 0.25
"""Simulation step in seconds (compute phases are >= 0.5 s)."""

CAUSES = (
    "pfc_storm",
    "ecn_congestion",
    "link_down",
    "nvlink_degraded",
    "gpu_fault",
    "checkpoint_write",
    "storage_latency",
    "unknown",
)
VARIANTS = ("standard", "two_jobs", "concurrent", "ramp", "missing", "noisy", "slow_refresh")
DEVICE_CLASSES = {
    # name: (disk device, baseline write latency range in seconds)
    "nvme": ("nvme0n1", (0.05e-3, 0.3e-3)),
    "sas": ("sdb", (2e-3, 8e-3)),
    "sata": ("sdc", (4e-3, 15e-3)),
}
SPEEDS_GBIT = (25, 100, 200, 400)
BULK_REQUEST_BYTES = float(1 << 20)
"""Bytes per write request of a bulk write (a checkpoint, a background burst)."""
T0 = 1_000_000_000.0
"""Timestamp of the trace start."""


@dataclass(frozen=True, slots=True)
class Truth:
    """One expected incident (scenario timestamps)."""

    cause: str
    onset: float
    end: float
    culprits: tuple[str, ...]
    kind: str  # "stall" or "slowdown"
    gpus: tuple[str, ...]


@dataclass(slots=True)
class _Job:
    gpus: list[int]
    nics: list[int]
    compute: float
    comm: float
    pos: float = 0.0  # seconds into the current iteration
    sm: float = 0.8
    stalled_until: float = -1.0
    stall_from: float = math.inf
    slow: float = 1.0  # communication time multiplier (a slowdown)
    active: bool = True


@dataclass(slots=True)
class _Event:
    cause: str
    job: int
    start: float  # when the fault begins (the stall follows at a phase end)
    duration: float
    target: int  # GPU or NIC index inside the job
    magnitude: float
    ramp: float = 0.0
    xid: bool = True
    onset: float = math.inf  # set when the job actually stalls


@dataclass(slots=True)
class Plan:
    """One generated node trace: its knobs and, after :func:`generate`, its truth."""

    seed: int
    spacing: float
    variant: str
    duration: float
    jobs: int
    storage: str
    nic_gbit: int
    missing: frozenset[str]
    truth: list[Truth] = field(default_factory=list)


def _loguniform(r: random.Random, lo: float, hi: float) -> float:
    return math.exp(r.uniform(math.log(lo), math.log(hi)))


class _Node:
    """One node's physical state on the simulation grid."""

    def __init__(self, plan: Plan, r: random.Random) -> None:
        self.plan = plan
        self.r = r
        self.jobs: list[_Job] = []
        per = 8 // plan.jobs
        for j in range(plan.jobs):
            compute = _loguniform(r, 0.5, 8.0)
            self.jobs.append(
                _Job(
                    gpus=list(range(j * per, (j + 1) * per)),
                    nics=list(range(j * 4 // plan.jobs, (j + 1) * 4 // plan.jobs)),
                    compute=compute,
                    comm=compute * r.uniform(0.15, 0.6),
                    pos=r.uniform(0, compute),
                    sm=r.uniform(0.6, 0.92),
                )
            )
        dev, lat = DEVICE_CLASSES[plan.storage]
        self.disk = dev
        self.lat0 = r.uniform(*lat)
        self.wbytes0 = r.uniform(1e6, 30e6)
        self.req0 = r.uniform(16e3, 128e3)  # bytes per write request
        self.nvl_bw = r.uniform(30e9, 150e9)
        self.nic_bw = plan.nic_gbit * 1e9 / 8 * r.uniform(0.3, 0.7)
        self.cont_pause = plan.nic_gbit * 1e9 / (65535 * 512)
        self.ecn0 = [r.uniform(0, 30) for _ in range(4)]


def _clear_of(events: list[_Event], start: float, duration: float) -> float:
    """A job restart's start, moved clear of every fault where it fell inside
    one: a job that released its GPUs' memory is no running job, and its
    GPUs are no stall whatever the fabric does (the truth would call them one).
    Moved to the middle of the longest stretch without a fault, so the rest
    of the trace is drawn as before."""
    spans = sorted((ev.start - ev.ramp - 120.0, ev.start + ev.duration + 400.0) for ev in events)
    if not any(lo <= start + 60.0 and start <= hi for lo, hi in spans):
        return start
    free: list[tuple[float, float]] = []
    at = 0.0
    for lo, hi in spans:
        if lo > at:
            free.append((at, lo))
        at = max(at, hi)
    if duration > at:
        free.append((at, duration))
    lo, hi = max(free, key=lambda f: f[1] - f[0], default=(0.0, duration))
    return max(0.0, (lo + hi) / 2.0 - 30.0)


def _culprits(ev: _Event, node: _Node) -> tuple[str, ...]:
    job = node.jobs[ev.job]
    if ev.cause in ("pfc_storm",):
        n = job.nics[ev.target % len(job.nics)]
        return (f"nic:eth{n}:1:3",)
    if ev.cause in ("ecn_congestion", "link_down"):
        n = job.nics[ev.target % len(job.nics)]
        return (f"nic:mlx5_{n}:1",)
    if ev.cause in ("nvlink_degraded", "gpu_fault"):
        g = job.gpus[ev.target % len(job.gpus)]
        return (f"gpu:{g}", *(f"gpu:{g}:link:{k}" for k in range(18)))
    if ev.cause in ("checkpoint_write", "storage_latency"):
        return (f"storage:{node.disk}",)
    return ("",)


def _draw_events(plan: Plan, node: _Node, r: random.Random) -> list[_Event]:
    """Faults in slots of 20 minutes-ish, each followed by quiet time."""
    out: list[_Event] = []
    slot = max(900.0, 40 * plan.spacing)
    t = r.uniform(400, 600) + 20 * plan.spacing  # a baseline first
    causes = list(CAUSES)
    r.shuffle(causes)
    k = 0
    while t + slot * 0.6 < plan.duration:
        cause = causes[k % len(causes)]
        k += 1
        job = r.randrange(plan.jobs) if plan.variant == "two_jobs" else 0
        lo = max(12.0, 3.2 * plan.spacing)
        duration = _loguniform(r, lo, max(lo * 3, 300.0))
        if cause == "ecn_congestion":
            duration = max(duration, 6 * plan.spacing, 60.0)
        ramp = r.uniform(20, 60) if plan.variant == "ramp" else 0.0
        out.append(
            _Event(
                cause,
                job,
                t,
                duration,
                target=r.randrange(8),
                magnitude=r.random(),
                ramp=ramp if cause in ("ecn_congestion", "storage_latency", "pfc_storm") else 0.0,
                xid=r.random() < 0.5,
            )
        )
        t += slot * r.uniform(0.8, 1.2)
    return out


def _cross_job_congestion(
    plan: Plan,
    node: _Node,
    events: list[_Event],
    ecn: list[list[float]],
    cnp_h: list[list[float]],
) -> None:
    """Two jobs: heavy ECN marking (and the rate cuts it causes) on a port of
    the *other* job around half of the faults, from before the fault until
    after the stall: the other job's own congestion, which DCQCN absorbs
    (it does not slow that job). Evidence on the other job's port never
    explains a stall. Drawn from a generator of its own, so every other
    draw of the trace stays the same."""
    if plan.variant != "two_jobs" or len(node.jobs) < 2:
        return
    rc = random.Random(plan.seed * 7919 + 17)  # noqa: S311 - simulation, not crypto
    for ev in events:
        if rc.random() >= 0.5:
            continue
        other = node.jobs[(ev.job + 1) % len(node.jobs)]
        port = other.nics[rc.randrange(len(other.nics))]
        lo = max(0, math.ceil((ev.start - rc.uniform(5, 30)) / DT))
        hi = min(len(ecn[port]), math.ceil((ev.start + ev.duration + 60) / DT))
        rate = rc.uniform(10_000, 60_000)
        for k in range(lo, hi):
            ecn[port][k] += rate
            cnp_h[port][k] += 0.8 * rate


def _expected(ev: _Event, plan: Plan) -> str:
    """What an honest engine can say: the cause, or unknown when its family is absent."""
    need = {
        "pfc_storm": "ethtool",
        "ecn_congestion": "congestion",
        "link_down": "",
        "checkpoint_write": "",
        "storage_latency": "",
    }.get(ev.cause, "")
    return "unknown" if need and need in plan.missing else ev.cause


def _faulted(ev: _Event, t: float) -> bool:
    """Whether the fault itself is present at ``t`` (from its start to the stall's end)."""
    if t < ev.start:
        return False
    return math.isinf(ev.onset) or t < ev.onset + ev.duration


def generate(plan: Plan, write: Callable[[str], object]) -> Plan:
    """Simulate ``plan`` and write its OpenMetrics text; fills ``plan.truth``."""
    r = random.Random(plan.seed)  # noqa: S311 - simulation, not crypto
    node = _Node(plan, r)
    events = _draw_events(plan, node, r)
    second: dict[int, _Event] = {}
    if plan.variant == "concurrent":
        # A second cause starts after the stall began: secondary evidence only.
        for i, ev in enumerate(events):
            if ev.cause == "unknown" or ev.duration < 4 * max(plan.spacing, 5):
                continue
            other = r.choice(["pfc_storm", "link_down", "checkpoint_write"])
            if other != ev.cause:
                second[i] = _Event(other, ev.job, math.inf, 0.0, r.randrange(8), r.random())
    # Confounders: evaluation dips, background write bursts, ECN bursts on a
    # port while nothing stalls, job restarts.
    n_conf = int(plan.duration / 600)
    dips = [(r.uniform(0, plan.duration), r.uniform(1, 3)) for _ in range(n_conf)]
    bursts = [(r.uniform(0, plan.duration), r.uniform(1, 4)) for _ in range(n_conf)]
    ecn_noise = [
        (r.uniform(0, plan.duration), r.uniform(1, 3), r.randrange(4)) for _ in range(n_conf)
    ]
    restarts = [
        _clear_of(events, r.uniform(0, plan.duration), plan.duration)
        for _ in range(1 if r.random() < 0.3 else 0)
    ]
    steps = int(plan.duration / DT)
    sm = [[0.0] * steps for _ in range(8)]
    util = [[0.0] * steps for _ in range(8)]
    power = [[0.0] * steps for _ in range(8)]
    nvl = [[0.0] * steps for _ in range(8)]
    mem = [[0.0] * steps for _ in range(8)]
    nvl_err = [[0.0] * steps for _ in range(8)]
    xid: list[list[tuple[float, int]]] = [[] for _ in range(8)]
    nic_tx = [[0.0] * steps for _ in range(4)]
    ecn = [[0.0] * steps for _ in range(4)]
    cnp_h = [[0.0] * steps for _ in range(4)]
    pause = [[0.0] * steps for _ in range(4)]
    pause_us = [[0.0] * steps for _ in range(4)]
    link = [[4.0] * steps for _ in range(4)]
    downed = [[0.0] * steps for _ in range(4)]
    wbytes = [0.0] * steps
    wlat = [1.0] * steps
    wops = [0.0] * steps
    gone: set[int] = set()
    for k in range(steps):
        t = k * DT
        gone.clear()
        for ji, job in enumerate(node.jobs):
            hang = False
            job.slow = 1.0
            nvl_cut: dict[int, float] = {}
            in_restart = any(rs <= t < rs + 60 for rs in restarts)
            active_events: list[_Event] = []
            for i, ev in enumerate(events):
                if ev.job != ji or t < ev.start - ev.ramp or t > ev.start + ev.duration + 400:
                    continue
                # A stall begins when the compute phase in flight ends; a
                # checkpoint at the iteration boundary, a slowdown at once.
                if (
                    math.isinf(ev.onset)
                    and t >= ev.start
                    and (
                        ev.cause in ("checkpoint_write", "ecn_congestion") or job.pos >= job.compute
                    )
                ):
                    ev.onset = t
                stalled = ev.onset <= t < ev.onset + ev.duration
                if ev.cause == "ecn_congestion":
                    if stalled:
                        job.slow = 1.0 / (1.0 - (0.3 + 0.4 * ev.magnitude))
                else:
                    hang = hang or stalled
                active_events.append(ev)
                sec = second.get(i)
                if sec is not None and stalled and t >= ev.onset + ev.duration / 3:
                    if math.isinf(sec.start):
                        sec.start = sec.onset = t
                        sec.duration = ev.onset + ev.duration - t
                    active_events.append(sec)
            for ev in active_events:
                n = job.nics[ev.target % len(job.nics)]
                g = job.gpus[ev.target % len(job.gpus)]
                on = _faulted(ev, t)
                ramp = 1.0
                if ev.ramp and t < ev.start:
                    ramp = (t - ev.start + ev.ramp) / ev.ramp
                    on = True
                if not on:
                    continue
                c = ev.cause
                if c == "pfc_storm":
                    pause[n][k] = node.cont_pause * (0.92 + 0.08 * ev.magnitude) * ramp
                    pause_us[n][k] = 1e6 * (0.92 + 0.08 * ev.magnitude) * ramp
                elif c == "ecn_congestion":
                    rate = (5000 + 95000 * ev.magnitude) * ramp
                    ecn[n][k] += rate
                    for m in job.nics:
                        cnp_h[m][k] += rate * 0.8
                        if m != n:
                            ecn[m][k] += rate * 0.05
                elif c == "link_down":
                    link[n][k] = 1.0
                    if t == ev.start or (k and link[n][k - 1] == 4.0):
                        downed[n][k] += 1 / DT
                elif c == "nvlink_degraded":
                    nvl_err[g][k] = 500 + 20000 * ev.magnitude
                    nvl_cut[g] = 0.1
                    if ev.xid and not xid[g]:
                        xid[g].append((t, 74))
                elif c == "gpu_fault":
                    if not xid[g] or xid[g][-1][0] < ev.start:
                        xid[g].append((t, r.choice((79, 48, 94))))
                    if ev.magnitude > 0.7:
                        gone.add(g)
                elif c == "checkpoint_write" and ev.onset <= t:
                    wbytes[k] = max(wbytes[k], node.wbytes0 * (20 + 280 * ev.magnitude))
                    wlat[k] = max(wlat[k], 1.5 + 4.5 * r.random())
                elif c == "storage_latency":
                    wlat[k] = max(wlat[k], (10 + 90 * ev.magnitude) * ramp)
            if hang or in_restart:
                phase_comm, active = True, 0.0
            else:
                job.pos += DT
                if job.pos >= job.compute + job.comm * job.slow:
                    job.pos -= job.compute + job.comm * job.slow
                phase_comm, active = job.pos >= job.compute, 1.0
            dip = any(d0 <= t < d0 + dl for d0, dl in dips)
            for g in job.gpus:
                if in_restart:
                    s_v, u_v = 0.0, 0.0
                elif hang:
                    s_v, u_v = 0.003 * r.random(), 1.0 if r.random() < 0.7 else 0.0
                elif dip:
                    s_v, u_v = 0.01, 0.0
                else:
                    s_v = job.sm * (0.35 if phase_comm else 1.0) * (0.95 + 0.1 * r.random())
                    u_v = 1.0
                sm[g][k] = math.nan if g in gone else s_v
                util[g][k] = u_v
                power[g][k] = 80 + 600 * s_v * (0.95 + 0.1 * r.random())
                mem[g][k] = 2e8 if in_restart else 60e9
                bw = node.nvl_bw * (1.0 / job.slow if phase_comm else 0.1) * active
                nvl[g][k] = bw * (0.9 + 0.2 * r.random()) * nvl_cut.get(g, 1.0)
            for n in job.nics:
                nic_tx[n][k] = node.nic_bw * (1.0 if phase_comm else 0.05) * active
        for n in range(4):
            ecn[n][k] += node.ecn0[n] * (0.5 + r.random())
            for e0, el, port in ecn_noise:
                if e0 <= t < e0 + el and port == n:
                    ecn[n][k] += 20000
        wbytes[k] = max(wbytes[k], node.wbytes0 * (0.5 + r.random()))
        for b0, bl in bursts:
            if b0 <= t < b0 + bl:
                wbytes[k] = max(wbytes[k], node.wbytes0 * 30)
        big = wbytes[k] > node.wbytes0 * 5
        wlat[k] = wlat[k] * node.lat0 * (0.7 + 0.6 * r.random())
        # Checkpoints (and other bulk writers) write large sequential buffers
        # the block layer merges to max_sectors_kb, ~1 MiB; the rest are small.
        wops[k] = wbytes[k] / (BULK_REQUEST_BYTES if big else node.req0)
    _cross_job_congestion(plan, node, events, ecn, cnp_h)
    for ev in events:
        if math.isinf(ev.onset):
            continue
        job = node.jobs[ev.job]
        plan.truth.append(
            Truth(
                _expected(ev, plan),
                round(T0 + ev.onset, 3),
                round(T0 + ev.onset + ev.duration, 3),
                _culprits(ev, node),
                "slowdown" if ev.cause == "ecn_congestion" else "stall",
                tuple(str(g) for g in job.gpus),
            )
        )
    _write(plan, node, write, r, locals())
    return plan


def _write(
    plan: Plan, node: _Node, write: Callable[[str], object], r: random.Random, v: dict[str, object]
) -> None:
    """Sample the simulated node at the plan's spacing and write OpenMetrics."""
    sp = plan.spacing
    per = max(1, round(sp / DT))
    steps = int(plan.duration / DT)
    noisy = plan.variant == "noisy"
    miss = 0.08 if noisy else 0.03
    gaps: list[tuple[str, float, float]] = []
    for exporter in ("dcgm", "node"):
        for _ in range(int(plan.duration / 1200)):
            g0 = r.uniform(0, plan.duration)
            gaps.append((exporter, g0, g0 + sp * r.randint(1, 4)))
    # Scrape-time jitter: one per scrape of an exporter, shared by its series
    # (one exporter's samples of one scrape carry one timestamp).
    n_scrapes = steps // per + 1
    jitter = {
        exporter: [r.uniform(-0.05, 0.05) * sp if noisy else 0.0 for _ in range(n_scrapes)]
        for exporter in ("dcgm", "node")
    }
    # dcgm-exporter collecting on its own interval: scrapes between its
    # refreshes re-read the last one. Drawn apart from ``r`` so the rest of
    # the trace is the one the plan always gave.
    hold = random.Random(plan.seed * 31 + 7)  # noqa: S311 - simulation, not crypto
    refresh = hold.choice((2, 3)) if plan.variant == "slow_refresh" and sp < 30 else 1
    phase = hold.randrange(refresh)

    def series(
        exporter: str,
        name: str,
        labels: str,
        values: list[float],
        kind: str,
        *,
        wrap32: bool = False,
    ) -> None:
        """Write one series: gauges averaged over each interval, counters cumulative."""
        offset = {"dcgm": 0.13, "node": 0.41}[exporter] * min(sp, 1.0)
        total = 0.0
        if wrap32:
            total = float(2**32 - r.uniform(1e3, 1e6))
        lines: list[tuple[float, float]] = []
        prev: list[float] = []
        held: float | None = None
        for i in range(per, steps + 1, per):
            chunk = values[i - per : i]
            if kind == "counter":
                total += sum(chunk) * DT
                value = total % 2**32 if wrap32 else total
            elif kind == "instant":
                value = chunk[-1]
            else:
                vals = [c for c in chunk if not math.isnan(c)]
                if len(vals) < len(chunk):
                    continue  # the GPU stopped reporting
                value = sum(vals) / len(vals)
            if exporter == "dcgm" and refresh > 1:
                if held is None or (i // per + phase) % refresh == 0:
                    held = value
                value = held
            ts = round(T0 + i * DT + offset + jitter[exporter][i // per], 3)
            if any(e == exporter and g0 <= ts < g1 for e, g0, g1 in gaps):
                continue
            if r.random() < miss:
                continue
            if noisy and prev and r.random() < 0.03:
                value = prev[-1]  # a duplicated (stale) sample
            prev.append(value)
            lines.append((ts, value))
        if noisy:
            for i in range(1, len(lines)):
                if r.random() < 0.02:  # two samples' values swapped
                    (t0, a), (t1, b) = lines[i - 1], lines[i]
                    lines[i - 1], lines[i] = (t0, b), (t1, a)
        for ts, value in lines:
            write(f"{name}{{{labels}}} {value!r} {ts!r}\n")

    sm = v["sm"]
    util = v["util"]
    power = v["power"]
    nvl = v["nvl"]
    mem = v["mem"]
    nvl_err = v["nvl_err"]
    xid = v["xid"]
    assert isinstance(sm, list) and isinstance(util, list) and isinstance(power, list)
    assert isinstance(nvl, list) and isinstance(mem, list) and isinstance(nvl_err, list)
    assert isinstance(xid, list)
    host = f'Hostname="node{plan.seed}"'
    for g in range(8):
        lab = f'gpu="{g}",UUID="GPU-{plan.seed:04d}-{g}",modelName="NVIDIA H100 80GB HBM3",{host}'
        if "sm" not in plan.missing:
            series("dcgm", "DCGM_FI_PROF_SM_ACTIVE", lab, sm[g], "gauge")
        series("dcgm", "DCGM_FI_DEV_GPU_UTIL", lab, [100 * u for u in util[g]], "instant")
        series("dcgm", "DCGM_FI_DEV_POWER_USAGE", lab, power[g], "gauge")
        series("dcgm", "DCGM_FI_DEV_FB_USED", lab, [m / 1048576 for m in mem[g]], "instant")
        if "nvlink" not in plan.missing:
            series("dcgm", "DCGM_FI_PROF_NVLINK_TX_BYTES", lab, nvl[g], "gauge")
            series("dcgm", "DCGM_FI_PROF_NVLINK_RX_BYTES", lab, nvl[g], "gauge")
        series("dcgm", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", lab, nvl_err[g], "counter")
        series(
            "dcgm",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            lab,
            [e * 0.01 for e in nvl_err[g]],
            "counter",
        )
        last = [0.0] * len(sm[g])
        for t0, code in xid[g]:
            for i in range(int(t0 / DT), len(last)):
                last[i] = float(code)
        series("dcgm", "DCGM_FI_DEV_XID_ERRORS", lab, last, "instant")
    for n in range(4):
        lab = f'device="mlx5_{n}",port="1"'
        for name, vals in (
            ("node_infiniband_port_data_transmitted_bytes_total", v["nic_tx"]),
            ("node_infiniband_port_data_received_bytes_total", v["nic_tx"]),
        ):
            assert isinstance(vals, list)
            series("node", name, lab, vals[n], "counter")
        if "congestion" not in plan.missing:
            ecn = v["ecn"]
            cnp_h = v["cnp_h"]
            assert isinstance(ecn, list) and isinstance(cnp_h, list)
            series(
                "node",
                "node_infiniband_np_ecn_marked_roce_packets_received_total",
                lab,
                ecn[n],
                "counter",
            )
            series(
                "node",
                "node_infiniband_np_cnp_packets_sent_total",
                lab,
                [e * 0.9 for e in ecn[n]],
                "counter",
            )
            series("node", "node_infiniband_rp_cnp_packets_handled_total", lab, cnp_h[n], "counter")
        link = v["link"]
        downed = v["downed"]
        assert isinstance(link, list) and isinstance(downed, list)
        series("node", "node_infiniband_state_id", lab, link[n], "instant")
        series("node", "node_infiniband_link_downed_total", lab, downed[n], "counter")
        if "ethtool" not in plan.missing:
            pause = v["pause"]
            pause_us = v["pause_us"]
            assert isinstance(pause, list) and isinstance(pause_us, list)
            elab = f'device="eth{n}"'
            series(
                "node",
                "node_ethtool_received_prio3_pause",
                elab,
                pause[n],
                "counter",
                wrap32=r.random() < 0.5,
            )
            series(
                "node", "node_ethtool_received_prio3_pause_duration", elab, pause_us[n], "counter"
            )
    dlab = f'device="{node.disk}"'
    wbytes = v["wbytes"]
    wlat = v["wlat"]
    wops = v["wops"]
    assert isinstance(wbytes, list) and isinstance(wlat, list) and isinstance(wops, list)
    series("node", "node_disk_written_bytes_total", dlab, wbytes, "counter")
    series("node", "node_disk_writes_completed_total", dlab, wops, "counter")
    series(
        "node",
        "node_disk_write_time_seconds_total",
        dlab,
        [o * lat for o, lat in zip(wops, wlat, strict=True)],
        "counter",
    )
    # A second, busy disk nobody waits for (its bursts are no evidence).
    series(
        "node",
        "node_disk_written_bytes_total",
        'device="sda"',
        [
            node.wbytes0 * (0.5 + r.random()) * (40 if r.random() < 0.002 else 1)
            for _ in range(steps)
        ],
        "counter",
    )
    write("# EOF\n")


def plan_for(seed: int, spacing: float, variant: str, hours: float = 2.0) -> Plan:
    """A plan drawn from ``seed``: device class, NIC speed, jobs, missing families."""
    r = random.Random(seed * 7919 + int(spacing))  # noqa: S311 - simulation, not crypto
    missing: set[str] = set()
    if variant == "missing":
        missing.add(r.choice(["ethtool", "congestion", "nvlink", "sm"]))
    if r.random() < 0.25:
        missing.add("sm")  # dcgm-exporter's default CSV has no profiling fields
    return Plan(
        seed=seed,
        spacing=spacing,
        variant=variant,
        duration=hours * 3600,
        jobs=2 if variant == "two_jobs" or (variant == "concurrent" and r.random() < 0.3) else 1,
        storage=r.choice(sorted(DEVICE_CLASSES)),
        nic_gbit=r.choice(SPEEDS_GBIT),
        missing=frozenset(missing),
    )
