"""Independent trace generator for cross-checking the correlation engine.

Written from issue #16 and the published stall literature only, on
purpose without reading the engine or its own simulator, so that its
assumptions are not the engine's. It writes what a new user would scrape from
an 8-GPU node: dcgm-exporter and node_exporter (plus snmp_exporter for the
leaf switch on some traces) as OpenMetrics text with timestamps, and the
ground truth of every stall: onset, end, cause and the culprit keys in
fabricwatch's documented forms (``docs/incident-schema.md``).

The physical model is a fine time grid (0.1 s) per job: a compute phase
(SM busy, little traffic) then a communication phase (SM low, NVLink and RoCE
busy), period 0.7-12 s. A fault starts first; the job's GPUs go idle at the
next communication phase, 0.5-1.5 iterations later. Exporters then sample the
grid: dcgm-exporter's profiling fields and NVLink bandwidth are averages over
their collection interval, power a 1 s average, node_exporter counters are
exact integrals. Sampling artefacts (missing samples, swapped or duplicated
samples, a collector gap, a counter reset, a 32-bit wrap) are applied to the
sampled series, as a scraper would produce them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FArray = npt.NDArray[np.float64]

DT = 0.1
"""Fine grid step in seconds."""

CAUSE_OF: dict[str, str] = {
    "checkpoint_nvme": "checkpoint_write",
    "checkpoint_nfs": "checkpoint_write",
    "slowstore_nvme": "storage_latency",
    "slowstore_nfs": "storage_latency",
    "pfc_nic_tx": "pfc_storm",
    "pfc_nic_rx": "pfc_storm",
    "pfc_switch": "pfc_storm",
    "ecn_stall": "ecn_congestion",
    "ecn_slow": "ecn_congestion",
    "nvlink_crc": "nvlink_degraded",
    "xid": "gpu_fault",
    "link_down": "link_down",
    "link_flap": "link_down",
    "hang": "unknown",
    "none": "",
}
"""Scenario -> the cause fabricwatch should report ('' = no incident)."""

SCENARIOS: tuple[str, ...] = tuple(CAUSE_OF)
SPACINGS: tuple[float, ...] = (1.0, 5.0, 10.0, 15.0, 30.0)
VARIANTS: tuple[str, ...] = (
    "standard",
    "two_jobs",
    "concurrent",
    "ramp",
    "missing_family",
    "noisy",
)
PORT_SPEEDS_G: tuple[int, ...] = (25, 100, 200, 400)
NFS_PATH = "/mnt/ckpt-nfs"


@dataclass(frozen=True, slots=True)
class Truth:
    """One injected episode and what the engine should say about it."""

    onset: float
    end: float
    cause: str
    culprits: tuple[str, ...]
    gpus: tuple[int, ...]
    kind: str = "stall"
    fault_onset: float = 0.0
    note: str = ""


@dataclass(frozen=True, slots=True)
class Confounder:
    """A background event that must not open an incident."""

    start: float
    end: float
    what: str


@dataclass(slots=True)
class Trace:
    """A generated trace: OpenMetrics text, truth and the parameters used."""

    seed: int
    scenario: str
    variant: str
    spacing: float
    start: float
    end: float
    text: str
    truth: list[Truth]
    confounders: list[Confounder]
    params: dict[str, object]
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Sampled series after artefacts, by ``name{labels}`` (for the naive rule)."""


@dataclass(slots=True)
class _Job:
    gpus: tuple[int, ...]
    period: float
    compute_frac: float
    phase: float
    # Fine-grid state, 0 compute, 1 comm, 2 idle-hung (kernels spin), 3 idle-no-kernel,
    # 4 slowed comm (stretched).
    state: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, np.int8))


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _next_comm(job: _Job, t: float) -> float:
    """The first start of a communication phase at or after ``t``."""
    k = math.ceil((t - job.phase - job.compute_frac * job.period) / job.period)
    return job.phase + job.compute_frac * job.period + k * job.period


class _Builder:
    """Holds the fine grid and the sampled series of one trace."""

    def __init__(self, rng: random.Random, seed: int, spacing: float, duration: float) -> None:
        self.rng = rng
        self.seed = seed
        self.spacing = spacing
        self.t0 = 1_760_000_000.0 + rng.randrange(0, 86400)
        self.duration = duration
        self.n = int(duration / DT) + 1
        self.t = np.arange(self.n) * DT
        self.series: dict[str, tuple[str, str, list[tuple[float, float]]]] = {}
        # name{labels} -> (metric name, type, samples)

    def idx(self, t: float) -> int:
        return max(0, min(self.n - 1, round(t / DT)))

    def window_mean(self, arr: FArray, times: FArray, width: float) -> FArray:
        """Mean of ``arr`` over (t - width, t] for each sample time."""
        cs = np.concatenate(([0.0], np.cumsum(arr)))
        hi = np.clip(np.round(times / DT).astype(int) + 1, 1, self.n)
        lo = np.clip(hi - max(1, round(width / DT)), 0, self.n - 1)
        return np.asarray((cs[hi] - cs[lo]) / (hi - lo), dtype=np.float64)

    def integral(self, rate: FArray, times: FArray) -> FArray:
        cs = np.concatenate(([0.0], np.cumsum(rate) * DT))
        hi = np.clip(np.round(times / DT).astype(int) + 1, 1, self.n)
        return np.asarray(cs[hi], dtype=np.float64)

    def add(self, name: str, typ: str, labels: dict[str, str], times: FArray, vals: FArray) -> None:
        key = name + _labels(labels)
        self.series[key] = (
            name,
            typ,
            [(float(a), float(b)) for a, b in zip(times, vals, strict=True)],
        )


@dataclass(slots=True)
class _Fault:
    scenario: str
    start: float
    stall_onset: float
    stall_end: float
    culprit_idx: int
    ramp: float


def _scrape_times(b: _Builder, offset: float) -> FArray:
    s = b.spacing
    times = np.arange(offset + s, b.duration - 0.5, s)
    return np.asarray(times, dtype=np.float64)


def generate(
    seed: int,
    scenario: str,
    variant: str,
    spacing: float,
    *,
    allreduce_loss: tuple[float, float] | None = None,
) -> Trace:
    """Generate one trace; deterministic in its arguments.

    ``allreduce_loss`` (ecn_slow only): draw the slowdown as a loss of
    all-reduce throughput in that range (issue 16 names 30-70 %), the
    compute phase unchanged, instead of stretching the whole iteration
    1.4-3x (which loses 47-95 % of it). The rest of the trace is the same."""
    rng = random.Random(f"{seed}:{scenario}:{variant}:{spacing}")
    s = spacing
    two_jobs = variant == "two_jobs" or (variant == "noisy" and rng.random() < 0.3)
    jobs: list[_Job] = []
    groups = [tuple(range(4)), tuple(range(4, 8))] if two_jobs else [tuple(range(8))]
    for members in groups:
        period = math.exp(rng.uniform(math.log(0.7), math.log(12.0)))
        jobs.append(_Job(members, period, rng.uniform(0.55, 0.85), rng.uniform(0, period)))
    job = jobs[0]
    warm = max(420.0, 30 * s) + rng.uniform(0, 60)
    stall_len = rng.uniform(max(15.0, 4 * s), max(120.0, 8 * s))
    if scenario == "hang":
        stall_len = rng.uniform(max(90.0, 4 * s), max(400.0, 10 * s))
    ramp = rng.uniform(20.0, 60.0) if variant == "ramp" else 0.0
    fault_start = warm + ramp
    lead = rng.uniform(0.5, 1.5) * job.period
    stall_onset = _next_comm(job, fault_start + lead - 0.5 * job.period)
    if scenario in ("checkpoint_nvme", "checkpoint_nfs"):
        # The job itself starts writing: the GPUs go idle when the write starts.
        stall_onset = _next_comm(job, fault_start)
        fault_start = stall_onset
    stall_end = stall_onset + stall_len
    tail = max(240.0, 12 * s)
    duration = stall_end + tail + rng.uniform(0, 60)
    if scenario == "none":
        duration = warm + rng.uniform(900.0, 1500.0) + 40 * s
    b = _Builder(rng, seed, s, duration)
    n = b.n
    t = b.t
    speed_g = rng.choice(PORT_SPEEDS_G)
    speed_bps = speed_g * 1e9
    prio = rng.choice((3, 4, 5))
    culprit_idx = rng.choice(job.gpus)
    params: dict[str, object] = {
        "periods": [round(j.period, 3) for j in jobs],
        "compute_frac": [round(j.compute_frac, 3) for j in jobs],
        "port_speed_g": speed_g,
        "priority": prio,
        "culprit_idx": culprit_idx,
        "fault_start": round(fault_start, 2),
        "stall_onset": round(stall_onset, 2),
        "stall_len": round(stall_len, 2),
        "ramp_s": round(ramp, 1),
    }
    fault = _Fault(scenario, fault_start, stall_onset, stall_end, culprit_idx, ramp)
    has_fault = scenario != "none"

    # Job states on the fine grid.
    for j in jobs:
        ph = np.mod((t - j.phase) / j.period, 1.0)
        j.state = np.where(ph < j.compute_frac, 0, 1).astype(np.int8)
    i0, i1 = b.idx(stall_onset), b.idx(stall_end)
    idle_state = 3 if scenario.startswith(("checkpoint", "slowstore")) else 2
    slowdown = scenario == "ecn_slow"
    comm_scale = 1.0  # traffic rate of a stretched comm phase (same bytes per iteration)
    if has_fault and not slowdown:
        job.state[i0:i1] = idle_state
    if slowdown:
        # Congestion stretches the communication phase: the iteration takes
        # 1.4-3x as long, all-reduce throughput drops 30-70 %.
        stretch = rng.uniform(1.4, 3.0)
        if allreduce_loss is not None:
            lo, hi = allreduce_loss
            loss = lo + (stretch - 1.4) / 1.6 * (hi - lo)  # the same draw, mapped
            params["allreduce_loss"] = round(loss, 3)
            stretch = job.compute_frac + (1 - job.compute_frac) / (1 - loss)
        params["stretch"] = round(stretch, 2)
        p2 = job.period * stretch
        comm2 = p2 - job.compute_frac * job.period
        ph = np.mod((t - stall_onset) / p2, 1.0)
        seg = np.where(ph * p2 < job.compute_frac * job.period, 0, 4).astype(np.int8)
        job.state[i0:i1] = seg[i0:i1]
        params["comm_stretched_s"] = round(comm2, 2)
        comm_scale = (1 - job.compute_frac) * job.period / comm2

    # Confounders: evaluation pauses (< 2 samples, < 8 s), and bursts with no stall.
    confounders: list[Confounder] = []
    n_conf = rng.randint(1, 3)
    busy = [(fault_start - ramp - 90.0, stall_end + 150.0)] if has_fault else []
    for _ in range(n_conf * 4):
        if len(confounders) >= n_conf:
            break
        c0 = rng.uniform(max(200.0, 8 * s), duration - max(120.0, 4 * s))
        clen = rng.uniform(1.0, min(7.5, max(1.2, 1.8 * s) if s > 1 else 1.9))
        if any(a - 60 < c0 < e + 60 for a, e in busy) or any(
            c.start - 60 < c0 < c.end + 60 for c in confounders
        ):
            continue
        what = rng.choice(("eval_pause", "eval_pause+disk_burst", "ecn_burst_other", "disk_burst"))
        if what == "ecn_burst_other" and not two_jobs:
            what = "eval_pause"
        confounders.append(Confounder(c0, c0 + clen, what))
        if what.startswith("eval_pause"):
            for j in jobs[:1] if two_jobs else jobs:
                a, e = b.idx(c0), b.idx(c0 + clen)
                j.state[a:e] = 3

    # Concurrent second cause while the GPUs already wait.
    second = ""
    second_at = 0.0
    if variant == "concurrent" and has_fault and not slowdown:
        second = rng.choice(("pfc", "link_flap", "ecn"))
        second_at = stall_onset + rng.uniform(0.25, 0.6) * stall_len
        params["second_cause"] = second
        params["second_at"] = round(second_at, 2)
    second_idx = rng.choice([g for g in job.gpus if g != culprit_idx])

    # Missing families.
    missing: set[str] = set()
    if variant == "missing_family":
        pool = ["sm_active", "nvlink_bw", "gr_engine"]
        cause_family = {
            "pfc_nic_tx": "ethtool",
            "pfc_nic_rx": "ethtool",
            "ecn_stall": "ib_ecn",
            "ecn_slow": "ib_ecn",
        }.get(scenario)
        if cause_family is not None and rng.random() < 0.5:
            missing.add(cause_family)
        else:
            pool += ["ethtool", "ib_ecn"]
            for fam, scen in (("ethtool", "pfc_nic"), ("ib_ecn", "ecn_")):
                if scenario.startswith(scen):
                    pool.remove(fam)
        missing.add(rng.choice(pool))
        if "sm_active" in missing and rng.random() < 0.5:
            missing.add("gr_engine")
    elif rng.random() < 0.4:
        missing.add("sm_active")  # dcgm-exporter's default CSV has no SM_ACTIVE
    switch_data = scenario == "pfc_switch" or rng.random() < 0.3
    nic_info = rng.random() < 0.8
    nvlink_kind = rng.choice(("bw_total", "prof_bytes"))
    params.update(
        missing=sorted(missing),
        switch_data=switch_data,
        nic_info=nic_info,
        nvlink_kind=nvlink_kind,
        two_jobs=two_jobs,
    )

    dcgm_off = rng.uniform(0.0, s)
    node_off = rng.uniform(0.0, s)
    snmp_off = rng.uniform(0.0, s)
    dts = _scrape_times(b, dcgm_off)
    nts = _scrape_times(b, node_off)
    sts = _scrape_times(b, snmp_off)
    host = f"gpu-node-{rng.randrange(10, 99)}"

    # ---------------------------------------------------------------- GPUs
    gpu_state = np.zeros((8, n), np.int8) + 3
    job_of = [-1] * 8
    for ji, j in enumerate(jobs):
        for g in j.gpus:
            gpu_state[g] = j.state
            job_of[g] = ji
    xid_value = 0
    fell_off = False
    if scenario == "xid":
        xid_value = rng.choice((48, 63, 64, 79, 92, 94, 95, 119))
        fell_off = xid_value == 79 and rng.random() < 0.6
        gpu_state[culprit_idx, b.idx(fault_start) : i1] = 3
        params["xid"] = xid_value
    limit = rng.choice((400.0, 700.0))
    idle_w = limit * rng.uniform(0.12, 0.2)
    for g in range(8):
        st = gpu_state[g]
        jit = rng.uniform(-0.03, 0.03)
        sm = np.choose(st, (0.9 + jit, 0.22, 0.02, 0.0, 0.22))
        sm = np.clip(sm + np.asarray(np.random.default_rng(seed + g).normal(0, 0.02, n)), 0, 1)
        util = np.choose(st, (1.0, 1.0, 1.0, 0.0, 1.0))
        power = np.choose(st, (0.86 * limit, 0.5 * limit, idle_w * 1.25, idle_w, 0.55 * limit))
        power = power * (1 + jit)
        nvl = np.choose(st, (4000.0, 240000.0, 0.0, 0.0, 240000.0 * comm_scale)) * (1 + jit)
        if job_of[g] < 0:
            sm, util, power, nvl = sm * 0, util * 0, power * 0 + idle_w * 0.8, nvl * 0
        if scenario == "nvlink_crc" and g == culprit_idx:
            nvl[b.idx(fault_start) :] *= rng.uniform(0.0, 0.4)
        fb = 72000.0 + 300 * g if job_of[g] >= 0 else 500.0
        times = dts
        if fell_off and g == culprit_idx:
            times = dts[dts < fault_start + 2 * s]
        lab = {
            "gpu": str(g),
            "UUID": f"GPU-{seed % 9999:04d}{g:02d}-aaaa-bbbb",
            "device": f"nvidia{g}",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": host,
        }
        if "sm_active" not in missing:
            b.add("DCGM_FI_PROF_SM_ACTIVE", "gauge", lab, times, b.window_mean(sm, times, s))
        if "gr_engine" not in missing:
            gr = np.clip(sm * 1.05 + 0.02, 0, 1)
            b.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", lab, times, b.window_mean(gr, times, s))
        b.add(
            "DCGM_FI_DEV_GPU_UTIL",
            "gauge",
            lab,
            times,
            np.round(100 * b.window_mean(util, times, s)),
        )
        b.add("DCGM_FI_DEV_POWER_USAGE", "gauge", lab, times, b.window_mean(power, times, 1.0))
        b.add("DCGM_FI_DEV_FB_USED", "gauge", lab, times, np.full(len(times), fb))
        if "nvlink_bw" not in missing:
            if nvlink_kind == "bw_total":
                b.add(
                    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                    "counter",
                    lab,
                    times,
                    np.round(b.window_mean(nvl, times, s)),
                )
            else:
                v = b.window_mean(nvl * 5e5, times, s)
                b.add("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", lab, times, np.round(v))
                b.add("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", lab, times, np.round(v))
        xid = np.zeros(len(times))
        if scenario == "xid" and g == culprit_idx:
            xid[times >= fault_start + rng.uniform(0.0, 0.5)] = xid_value
        b.add("DCGM_FI_DEV_XID_ERRORS", "gauge", lab, times, xid)
        crc_rate = np.full(n, 0.0)
        if scenario == "nvlink_crc" and g == culprit_idx:
            crc_rate[b.idx(fault_start) :] = rng.uniform(800.0, 20000.0)
        b.add(
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "counter",
            lab,
            times,
            np.round(b.integral(crc_rate, times)),
        )

    # ---------------------------------------------------------------- NICs
    rate_b = speed_bps / 8
    pause_full = speed_bps / (65535 * 512)  # frames/s that hold a priority paused
    i_fault = b.idx(fault_start)
    ramp_w = np.ones(n)
    if ramp > 0:
        ramp_w[: b.idx(fault_start - ramp)] = 0
        k0, k1 = b.idx(fault_start - ramp), i_fault
        ramp_w[k0:k1] = np.linspace(0, 1, k1 - k0)
    else:
        ramp_w[:i_fault] = 0
    active = np.zeros(n)
    active[b.idx(fault_start - ramp) : i1] = 1
    fault_w = ramp_w * active
    for k in range(8):
        dev = f"mlx5_{k}"
        netdev = f"ens{k + 1}f0np0"
        st = gpu_state[k]
        jb = job_of[k]
        traffic = np.choose(st, (0.01, 0.75, 0.0, 0.0, 0.75 * comm_scale)) * rate_b
        if jb < 0:
            traffic = traffic * 0
        link_up = np.ones(n)
        downed = np.zeros(n)
        if scenario in ("link_down", "link_flap") and k == culprit_idx:
            if scenario == "link_down":
                link_up[i_fault:i1] = 0
            else:
                tt = fault_start
                for _ in range(rng.randint(2, 4)):
                    d = rng.uniform(1.0, max(2.0, 1.5 * s))
                    link_up[b.idx(tt) : b.idx(tt + d)] = 0
                    tt += d + rng.uniform(2.0, max(4.0, 2 * s))
        if second == "link_flap" and k == second_idx:
            link_up[b.idx(second_at) : b.idx(second_at + rng.uniform(2.0, 8.0))] = 0
        downed[1:] = np.maximum(0, link_up[:-1] - link_up[1:])
        traffic = traffic * link_up
        ecn_rate = np.where(st == 1, rng.uniform(0.0, 3.0), 0.2)
        cnp_handled = ecn_rate * 0.8
        if scenario in ("ecn_stall", "ecn_slow") and jb == 0:
            # One congested port sees the marks; every job port handles CNPs.
            cnp_handled = cnp_handled + fault_w * rng.uniform(2e3, 2e4)
            if k == culprit_idx:
                ecn_rate = ecn_rate + fault_w * rng.uniform(2e4, 2e5)
            else:
                ecn_rate = ecn_rate + fault_w * rng.uniform(5.0, 60.0)
        if second == "ecn" and k == second_idx:
            w = np.zeros(n)
            w[b.idx(second_at) : i1] = 1
            ecn_rate = ecn_rate + w * 5e4
        for c in confounders:
            if c.what == "ecn_burst_other" and job_of[k] == 1 and k == 5:
                ecn_rate = ecn_rate.copy()
                ecn_rate[b.idx(c.start) : b.idx(c.end + 0.5 * s)] += 3e4
        rx_pause = np.zeros(n)
        tx_pause = np.zeros(n)
        if scenario == "pfc_nic_tx":
            frac = rng.uniform(0.85, 1.0) * fault_w
            if k == culprit_idx:
                tx_pause = frac
            elif jb == 0:
                rx_pause = frac * rng.uniform(0.05, 0.3)
        if scenario == "pfc_nic_rx" and k == culprit_idx:
            rx_pause = rng.uniform(0.85, 1.0) * fault_w
        if second == "pfc" and k == second_idx:
            w = np.zeros(n)
            w[b.idx(second_at) : i1] = 0.95
            rx_pause = np.maximum(rx_pause, w)
        # A background trickle of pause frames on every port.
        base_pause = np.where(st == 1, 0.002, 0.0)
        rx_pause = np.maximum(rx_pause, base_pause)
        lab = {"device": dev, "port": "1"}
        b.add(
            "node_infiniband_port_data_transmitted_bytes_total",
            "counter",
            lab,
            nts,
            np.round(b.integral(traffic, nts)),
        )
        b.add(
            "node_infiniband_port_data_received_bytes_total",
            "counter",
            lab,
            nts,
            np.round(b.integral(traffic, nts)),
        )
        if "ib_ecn" not in missing:
            b.add(
                "node_infiniband_np_ecn_marked_roce_packets_received_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(ecn_rate, nts)),
            )
            b.add(
                "node_infiniband_np_cnp_packets_sent_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(ecn_rate * 0.9, nts)),
            )
            b.add(
                "node_infiniband_rp_cnp_packets_handled_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(cnp_handled, nts)),
            )
        b.add(
            "node_infiniband_state_id",
            "gauge",
            lab,
            nts,
            np.where(b.window_mean(link_up, nts, DT) > 0.5, 4.0, 1.0),
        )
        b.add(
            "node_infiniband_link_downed_total",
            "counter",
            lab,
            nts,
            b.integral(downed / DT, nts),
        )
        b.add("node_infiniband_rate_bytes_per_second", "gauge", lab, nts, np.full(len(nts), rate_b))
        if nic_info:
            b.add(
                "fabricwatch_nic_info",
                "gauge",
                {"device": dev, "port": "1", "netdev": netdev},
                nts,
                np.ones(len(nts)),
            )
        if "ethtool" not in missing:
            elab = {"device": netdev}
            for direction, frac in (("received", rx_pause), ("transmitted", tx_pause)):
                for p in sorted({0, prio}):
                    f = frac if p == prio else frac * 0
                    b.add(
                        f"node_ethtool_{direction}_prio{p}_pause",
                        "untyped",
                        elab,
                        nts,
                        np.round(b.integral(f * pause_full, nts)),
                    )
                    b.add(
                        f"node_ethtool_{direction}_prio{p}_pause_duration",
                        "untyped",
                        elab,
                        nts,
                        np.round(b.integral(f * 1e6, nts)),
                    )
        if switch_data:
            port = f"Ethernet{8 * k}"
            slab = {"switch": "leaf1", "ifName": port}
            sw_rx = tx_pause.copy()  # the switch receives what the NIC sends
            if scenario == "pfc_switch" and k == culprit_idx:
                sw_rx = np.maximum(sw_rx, rng.uniform(0.85, 1.0) * fault_w)
            b.add(
                "cpfcIfPriorityIndications",
                "counter",
                {**slab, "cpfcIfPriorityValue": str(prio)},
                sts,
                np.round(b.integral(sw_rx * pause_full, sts)),
            )
            b.add(
                "cpfcIfPriorityWaitRx",
                "counter",
                {**slab, "cpfcIfPriorityWaitCoS": str(prio)},
                sts,
                np.round(b.integral(sw_rx * 1e6, sts)),
            )
            b.add(
                "ifOperStatus",
                "gauge",
                slab,
                sts,
                np.where(b.window_mean(link_up, sts, DT) > 0.5, 1.0, 2.0),
            )
            b.add("ifHighSpeed", "gauge", slab, sts, np.full(len(sts), speed_g * 1000.0))

    # ---------------------------------------------------------------- storage
    nvme_base = rng.uniform(0.1e-3, 0.3e-3)
    nfs_base = rng.uniform(2e-3, 10e-3)
    lat_mult = rng.uniform(10.0, 100.0)
    params.update(nvme_base_ms=round(nvme_base * 1e3, 3), nfs_base_ms=round(nfs_base * 1e3, 2))
    for dev in ("nvme0n1", "nvme1n1", NFS_PATH):
        nfs = dev == NFS_PATH
        base_lat = nfs_base if nfs else nvme_base * (1.2 if dev == "nvme1n1" else 1.0)
        bw = np.full(n, rng.uniform(5e6, 40e6))  # background logging, bytes/s
        req = np.full(n, rng.uniform(16e3, 64e3))
        lat = np.full(n, base_lat)
        target = {"checkpoint_nvme": "nvme0n1", "checkpoint_nfs": NFS_PATH}.get(scenario)
        slow_t = {"slowstore_nvme": "nvme0n1", "slowstore_nfs": NFS_PATH}.get(scenario)
        if target == dev:
            a, e = b.idx(stall_onset), i1
            bw[a:e] = rng.uniform(1.5e9, 6e9) if not nfs else rng.uniform(0.4e9, 2e9)
            req[a:e] = rng.uniform(512e3, 1024e3)
            lat[a:e] = base_lat * rng.uniform(1.5, 4.0)
            params["ckpt_gbps"] = round(float(bw[a]) / 1e9, 2)
        if slow_t == dev:
            mult = fault_w * (lat_mult - 1) + 1
            lat = lat * mult
            bw = bw * np.where(fault_w > 0, rng.uniform(0.2, 1.0), 1.0)
            req = req * np.where(fault_w > 0, 0.25, 1.0)
            params["lat_mult"] = round(lat_mult, 1)
        for c in confounders:
            if "disk_burst" in c.what and dev == "nvme1n1":
                bw[b.idx(c.start) : b.idx(c.end)] = 2.5e9
                req[b.idx(c.start) : b.idx(c.end)] = 1e6
        ops = bw / req
        if nfs:
            lab = {"path": dev}
            b.add(
                "fabricwatch_storage_write_bytes_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(bw, nts)),
            )
            # The storage collector's gauge: the average over its interval.
            wl = b.integral(ops * lat, nts)
            wc = b.integral(ops, nts)
            avg = np.diff(np.concatenate(([0.0], wl))) / np.maximum(
                np.diff(np.concatenate(([0.0], wc))), 1e-9
            )
            b.add("fabricwatch_storage_write_latency_seconds", "gauge", lab, nts, avg)
        else:
            lab = {"device": dev}
            b.add(
                "node_disk_written_bytes_total", "counter", lab, nts, np.round(b.integral(bw, nts))
            )
            b.add(
                "node_disk_writes_completed_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(ops, nts)),
            )
            b.add(
                "node_disk_write_time_seconds_total",
                "counter",
                lab,
                nts,
                np.round(b.integral(ops * lat, nts), 3),
            )

    truth = _truth(fault, scenario, variant, jobs, missing, switch_data, nic_info, prio, b)
    # Its own stream: the traces without slow refresh stay as they were.
    refresh_rng = random.Random(f"{seed}:{scenario}:{variant}:{spacing}:refresh")
    if refresh_rng.random() < 0.3:
        _slow_refresh(b, refresh_rng, params)
    noise = variant == "noisy" or rng.random() < 0.25
    params["noise"] = noise
    if noise:
        _artefacts(b, rng, params, busy)
    text = _render(b)
    start, end = b.t0, b.t0 + duration
    shifted = [
        Truth(
            tr.onset + b.t0,
            tr.end + b.t0,
            tr.cause,
            tr.culprits,
            tr.gpus,
            tr.kind,
            tr.fault_onset + b.t0,
            tr.note,
        )
        for tr in truth
    ]
    conf = [Confounder(c.start + b.t0, c.end + b.t0, c.what) for c in confounders]
    series = {k: [(ts + b.t0, v) for ts, v in samp] for k, (_, _, samp) in b.series.items()}
    return Trace(seed, scenario, variant, s, start, end, text, shifted, conf, params, series)


def _truth(  # noqa: PLR0917 - internal, one call site
    f: _Fault,
    scenario: str,
    variant: str,
    jobs: list[_Job],
    missing: set[str],
    switch_data: bool,
    nic_info: bool,
    prio: int,
    b: _Builder,
) -> list[Truth]:
    if scenario == "none":
        return []
    cause = CAUSE_OF[scenario]
    k = f.culprit_idx
    nic = f"mlx5_{k}" if nic_info else f"ens{k + 1}f0np0"
    culprits: tuple[str, ...] = ()
    note = ""
    if scenario.startswith("pfc_nic"):
        culprits = (f"nic:{nic}:1:{prio}",)
        if switch_data and scenario == "pfc_nic_tx":
            culprits += (f"switch:leaf1:Ethernet{8 * k}:{prio}",)
        if "ethtool" in missing and not (switch_data and scenario == "pfc_nic_tx"):
            cause, culprits, note = "unknown", (), "no host PFC counters"
    elif scenario == "pfc_switch":
        culprits = (f"switch:leaf1:Ethernet{8 * k}:{prio}",)
    elif scenario.startswith("ecn"):
        culprits = (f"nic:mlx5_{k}:1",)
        if "ib_ecn" in missing:
            cause, culprits, note = "unknown", (), "no ECN/CNP counters"
    elif scenario in ("link_down", "link_flap"):
        culprits = (f"nic:mlx5_{k}:1",)
        if switch_data:
            culprits += (f"switch:leaf1:Ethernet{8 * k}",)
    elif scenario in ("nvlink_crc", "xid"):
        culprits = (f"gpu:{k}",)
    elif scenario.endswith("_nvme"):
        culprits = ("storage:nvme0n1",)
    elif scenario.endswith("_nfs"):
        culprits = (f"storage:{NFS_PATH}",)
    kind = "slowdown" if scenario == "ecn_slow" else "stall"
    return [
        Truth(
            f.stall_onset,
            f.stall_end,
            cause,
            culprits,
            jobs[0].gpus,
            kind,
            f.start - f.ramp,
            note,
        )
    ]


def _hold(samp: list[tuple[float, float]], refreshed: list[bool]) -> list[tuple[float, float]]:
    """Each scrape reads the value of the exporter's latest refresh."""
    out: list[tuple[float, float]] = []
    last = samp[0][1] if samp else 0.0
    for (ts, v), fresh in zip(samp, refreshed, strict=True):
        if fresh:
            last = v
        out.append((ts, last))
    return out


def _slow_refresh(b: _Builder, rng: random.Random, params: dict[str, object]) -> None:
    """Exporters that refresh slower than they are scraped.

    dcgm-exporter collects on its own interval (30 s by default) and a
    faster scrape re-reads the last collection; node_exporter's disk
    counters can refresh in different cycles (write time one scrape, write
    count the next), so one interval's write-time delta arrives with a zero
    write-count delta.
    """
    s = b.spacing
    kind = rng.choice(("dcgm", "disk")) if s < 30 else "disk"
    if kind == "dcgm":
        k = rng.choice((2, 3))
        phase = rng.randrange(k)
        params["slow_refresh"] = f"dcgm every {k} scrapes"
        for key in sorted(b.series):
            name, typ, samp = b.series[key]
            if name.startswith("DCGM_"):
                fresh = [(i + phase) % k == 0 for i in range(len(samp))]
                b.series[key] = (name, typ, _hold(samp, fresh))
        return
    params["slow_refresh"] = "disk write time and count in alternate scrapes"
    for key in sorted(b.series):
        name, typ, samp = b.series[key]
        if name == "node_disk_write_time_seconds_total":
            b.series[key] = (name, typ, _hold(samp, [i % 2 == 0 for i in range(len(samp))]))
        elif name == "node_disk_writes_completed_total":
            b.series[key] = (name, typ, _hold(samp, [i % 2 == 1 for i in range(len(samp))]))


def _artefacts(
    b: _Builder, rng: random.Random, params: dict[str, object], busy: list[tuple[float, float]]
) -> None:
    """Missing, swapped and duplicated samples, a gap, a reset and a 32-bit wrap."""
    s = b.spacing
    miss = rng.uniform(0.05, 0.10)
    params["missing_frac"] = round(miss, 3)
    # A collector gap of one exporter, away from the stall.
    gap_of = rng.choice(("DCGM_", "node_"))
    gap_len = rng.uniform(max(20.0, 2.5 * s), max(90.0, 5 * s))
    for _ in range(20):
        g0 = rng.uniform(120.0, b.duration - gap_len - 60.0)
        if not any(a - gap_len - 30 < g0 < e + 30 for a, e in busy):
            break
    params["gap"] = f"{gap_of} {g0:.0f}+{gap_len:.0f}s"
    keys = sorted(b.series)
    counters = [k for k in keys if b.series[k][1] == "counter" and k.startswith("node_")]
    reset_key = rng.choice(counters)
    wrap_key = rng.choice(
        [k for k in counters if "ecn" in k or "transmitted_bytes" in k] or counters
    )
    reset_at = rng.uniform(200.0, b.duration - 100.0)
    params["reset"] = f"{reset_key} at {reset_at:.0f}"
    params["wrap"] = wrap_key
    for k in keys:
        name, typ, samp = b.series[k]
        out: list[tuple[float, float]] = []
        gauge = typ == "gauge"
        for ts, v in samp:
            if k.startswith(gap_of) and g0 <= ts < g0 + gap_len:
                continue
            if name != "fabricwatch_nic_info" and rng.random() < miss:
                continue
            out.append((ts, v))
        if gauge and len(out) > 4:
            for _ in range(max(1, len(out) // 200)):
                i = rng.randrange(1, len(out) - 1)
                (ta, va), (tb, vb) = out[i], out[i + 1]
                out[i], out[i + 1] = (ta, vb), (tb, va)
        if len(out) > 4:
            for _ in range(max(1, len(out) // 300)):
                i = rng.randrange(0, len(out) - 1)
                if rng.random() < 0.5:
                    out.insert(i + 1, out[i])  # exact duplicate line
                else:
                    out[i + 1] = (out[i + 1][0], out[i][1])  # stale repeat
        if k == reset_key:
            base = next((v for ts, v in out if ts >= reset_at), None)
            if base is not None:
                out = [(ts, v - base if ts >= reset_at else v) for ts, v in out]
        if k == wrap_key and out:
            off = 2**32 - (out[len(out) // 2][1] - out[0][1]) - 1
            out = [(ts, float((v + off) % 2**32)) for ts, v in out]
        b.series[k] = (name, typ, out)


def _render(b: _Builder) -> str:
    """OpenMetrics text: each family's series grouped, each series in time order."""
    by_name: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    for key in sorted(b.series):
        name, typ, samp = b.series[key]
        types[name] = typ
        block = key[len(name) :]
        lines = by_name.setdefault(name, [])
        for ts, v in samp:
            vt = repr(v) if not float(v).is_integer() else str(int(v))
            lines.append(f"{name}{block} {vt} {ts + b.t0:.3f}")
    out: list[str] = []
    for name in sorted(by_name):
        typ = types[name]
        fam = name[: -len("_total")] if typ == "counter" and name.endswith("_total") else name
        if typ == "counter" and not name.endswith("_total"):
            typ = "gauge"  # OpenMetrics counters end in _total; exporters' others are gauges
        if typ != "untyped":
            out.append(f"# TYPE {fam} {typ}")
        out.extend(by_name[name])
    out.append("# EOF")
    return "\n".join(out) + "\n"
