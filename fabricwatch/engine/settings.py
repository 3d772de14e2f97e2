"""``[engine]``: thresholds of stall detection, evidence and incidents.

Defaults follow the published detectors and operator practice (NVIDIA NVRx's
180 s hang rule, SONiC's PFC watchdog, the Zhejiang Lab cluster traces'
``github.com/zhejianglab/Zhejiang-Lab-Cluster-Traces`` stall runs): a 10 s
job-level minimum for stalls without strong evidence (the literature says 5 s;
evaluation dips next to straggler waits make 5 s too eager), 2 polls with
strong evidence, PFC storm at a
pause fraction >= 0.8, flapping conditions merged into one incident.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fabricwatch.settings import option


@dataclass(kw_only=True)
class EngineSettings:
    """Settings of the correlation engine (the ``[engine]`` config table)."""

    enabled: bool = option(True, "Run the correlation engine.")
    tick: float = option(
        1.0,
        "Seconds between steps of `fabricwatch replay` (the daemon's engine ticks at daemon.tick).",
        min=0.05,
        max=60.0,
        duration=True,
    )
    min_duration: float = option(
        10.0,
        "A stall without strong evidence opens an incident after this long; shorter idle "
        "periods are dips (evaluation, logging, straggler waits).",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    min_duration_with_evidence: float = option(
        1.0,
        "A stall with strong evidence opens an incident after this long (1 s = 2 polls).",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    checkpoint_min_samples: int = option(
        3,
        "A stall whose cause is a write burst opens before min_duration only once seen idle "
        "on this many samples: the burst begins with the stall, as the log write of an "
        "evaluation pause does, and a pause shorter than two samples can read idle on two.",
        min=2,
        max=100,
    )
    strong_evidence: float = option(
        0.8, "Evidence score that allows the shorter minimum duration.", min=0.0, max=1.0
    )
    min_evidence: float = option(
        0.5, "Below this best score the cause is 'unknown'.", min=0.0, max=1.0
    )
    sample_max_age: float = option(
        3.5,
        "A sample older than this (seconds) is not current.",
        min=0.1,
        max=600.0,
        duration=True,
    )
    idle_sm_ratio: float = option(0.05, "SM activity below this is idle.", min=0.0, max=1.0)
    idle_util_ratio: float = option(
        0.05,
        "Utilization below this is idle (only when SM and power are absent).",
        min=0.0,
        max=1.0,
    )
    idle_power_ratio: float = option(
        0.25, "Power below this share of the limit (or observed peak) is idle.", min=0.0, max=1.0
    )
    idle_power_above_idle: float = option(
        0.15,
        "Once a GPU of the node was seen idle (its draw is the node's idle draw), power that "
        "is above that draw by less than this share of (limit or peak - idle draw) is idle: "
        "a hung collective's kernels draw a little above idle, which against an observed "
        "peak below the limit can read above idle_power_ratio.",
        min=0.0,
        max=1.0,
    )
    hysteresis: float = option(
        0.05,
        "An idle GPU must rise this much above the idle threshold to be active again.",
        min=0.0,
        max=1.0,
    )
    job_memory_bytes: float = option(
        1024.0**3, "Memory in use above this marks a GPU as part of a job.", min=0.0, size=True
    )
    activity_window: float = option(
        60.0,
        "Without process/memory data, a GPU active this recently belongs to a job.",
        min=1.0,
        max=86400.0,
        duration=True,
    )
    arm_after: float = option(
        10.0,
        "A GPU must work this long in a job before its idleness counts (job start).",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    stall_gpus_ratio: float = option(
        0.5,
        "Share of the node's job GPUs that must be idle for a node stall (jobs stall "
        "job-wide; one idle GPU among busy ones is noise or a missing sample).",
        min=0.0,
        max=1.0,
    )
    slow_ratio: float = option(
        0.75, "Work below this share of its baseline is a slowdown.", min=0.0, max=1.0
    )
    slow_gpus_ratio: float = option(
        0.5, "Share of job GPUs that must be slow for a node slowdown.", min=0.0, max=1.0
    )
    baseline_window: float = option(
        120.0,
        "Evidence baseline: seconds before the onset.",
        min=5.0,
        max=86400.0,
        duration=True,
    )
    onset_lead: float = option(
        3.0,
        "Evidence window starts this long before the stall onset.",
        min=0.0,
        max=600.0,
        duration=True,
    )
    end_after: float = option(
        2.0,
        "A stall ends after its GPUs worked this long.",
        min=0.0,
        max=600.0,
        duration=True,
    )
    resolve_hold: float = option(
        60.0,
        "An ended incident resolves after this long; a recurrence within it is the same incident.",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    rescore_every: float = option(
        5.0,
        "Seconds between evidence re-scores of an open incident.",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    pfc_storm_ratio: float = option(
        0.8, "Pause-time fraction that is a PFC storm.", min=0.0, max=1.0
    )
    pfc_continuous_frames: float = option(
        745.0,
        "Pause frames/s that hold a priority paused on a port of unknown speed (25G: 745; "
        "a port's speed series, where present, gives speed / (65535 x 512)); frames against "
        "this guess count as a storm only at >= 10x their own baseline.",
        min=1.0,
    )
    ecn_min_rate: float = option(
        500.0, "ECN marks/CNPs per second below this are no evidence.", min=0.0
    )
    nvlink_collapse_ratio: float = option(
        0.5,
        "NVLink traffic at or below this share of its own baseline just before a stall, while "
        "the other GPUs' links keep theirs, is a collapsed link.",
        min=0.0,
        max=1.0,
    )
    nvlink_min_bytes: float = option(
        100e6,
        "NVLink links with a baseline below this (bytes/s) are never a collapsed link.",
        min=0.0,
        size=True,
    )
    storage_latency_ratio: float = option(
        10.0, "Write latency this many times its baseline is slow storage.", min=1.0
    )
    storage_latency_min: float = option(
        0.01,
        "Write latency (seconds) below this is never slow storage on NFS, remote or "
        "unclassified paths (a healthy NFS write takes 1-10 ms).",
        min=0.0,
        duration=True,
    )
    storage_latency_min_nvme: float = option(
        0.001,
        "Write latency (seconds) below this is never slow storage on an NVMe device (nvme*).",
        min=0.0,
        duration=True,
    )
    storage_latency_min_disk: float = option(
        0.02,
        "Write latency (seconds) below this is never slow storage on a SAS/SATA/virtio disk "
        "(sd*, vd*, xvd*, hd*).",
        min=0.0,
        duration=True,
    )
    burst_factor: float = option(
        5.0, "Write throughput this many times its baseline is a checkpoint burst.", min=1.0
    )
    burst_min_bytes: float = option(
        50e6, "Write throughput (bytes/s) below this is never a burst.", min=0.0, size=True
    )
    storage_large_request_bytes: float = option(
        256 * 1024,
        "Bytes per write request from which writes are a bulk writer's (a checkpoint's "
        "sequential buffers, merged to ~1 MiB), whatever the path's usual request size.",
        min=1.0,
        size=True,
    )
    storage_request_ratio: float = option(
        4.0,
        "Bytes per write request this many times the path's usual request size are a bulk "
        "writer's (a checkpoint) too.",
        min=1.0,
    )
    cost_per_gpu_hour: float = option(
        0.0, "Money per GPU-hour; > 0 exports fabricwatch_stall_cost_total.", min=0.0
    )
    retention_days: float = option(
        30.0, "Resolved incidents older than this are deleted.", min=0.0, max=3650.0
    )
    max_incidents: int = option(
        100_000, "At most this many incidents are kept.", min=10, max=100_000_000
    )

    def at_spacing(self, spacing: float, tick: float = 1.0) -> EngineSettings:
        """These settings scaled to an observed sample spacing (seconds).

        The defaults are written for 1 s samples; Prometheus data comes at
        15-30 s. Every time-based rule keeps its meaning in samples: a
        sample is current for 3.5 samples, the baseline spans at least 20
        samples, a stall ends after 1.5 samples of work, a job is "recently
        active" for 4 samples, an incident is re-scored at most once a
        sample. Durations in samples (``min_duration_with_evidence`` = 2
        polls) follow from the sample times themselves. At 1 s (or faster)
        the settings are returned unchanged (``tick``: the engine's tick, the
        fastest spacing it can see).
        """
        if not spacing > tick:
            return self
        return replace(
            self,
            sample_max_age=max(self.sample_max_age, 3.5 * spacing),
            baseline_window=max(self.baseline_window, 20.0 * spacing),
            end_after=max(self.end_after, 1.5 * spacing),
            activity_window=max(self.activity_window, 4.0 * spacing),
            rescore_every=max(self.rescore_every, spacing),
            onset_lead=max(self.onset_lead, 2.0 * spacing),
        )

    def validate(self) -> None:
        """Cross-field checks."""
        if self.min_duration_with_evidence > self.min_duration:
            msg = "min_duration_with_evidence must not exceed min_duration"
            raise ValueError(msg)
