"""(b) Node: GPU activity, NVLink, host NIC congestion, checkpoint storage, incidents."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, heatmap
from grafana_foundation_sdk.models import prometheus as pm

from dashboards._common import (
    DATASOURCE,
    base,
    cluster_variable,
    node_variable,
    table_panel,
    target,
    timeseries_panel,
    to_json,
)

UID = "fabricwatch-node"
N = 'cluster=~"$cluster", instance=~"$node"'
BUDGET_DEFAULT = "1"
"""Checkpoint budget line (seconds); the FabricwatchStorageProbeLatencyOverBudget threshold."""


def _gpu_heatmap() -> heatmap.Panel:
    return (
        heatmap.Panel()
        .title("GPU activity (SM active, per GPU)")
        .description(
            "SM activity per GPU (GPM, Hopper+); a column going dark across all GPUs is a "
            "job-wide stall. NVML utilization is not used: hung collectives keep it at 100 %."
        )
        .datasource(DATASOURCE)
        .span(24)
        .height(8)
        .calculate(False)
        .with_target(
            target(
                f"max by (gpu) (fabricwatch_gpu_sm_active_ratio{{{N}}})",
                "GPU {{gpu}}",
            )
        )
    )


def _probe_heatmap() -> heatmap.Panel:
    q = target(
        f"sum by (le) (rate(fabricwatch_storage_probe_latency_seconds_bucket{{{N}}}"
        "[$__rate_interval]))",
        "{{le}}",
    ).format(pm.PromQueryFormat.HEATMAP)
    return (
        heatmap.Panel()
        .title("Storage probe latency histogram")
        .description("Write+fsync probe latency distribution of the checkpoint paths.")
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
        .calculate(False)
        .with_target(q)
    )


def _budget_variable() -> dashboard.ConstantVariable:
    return (
        dashboard.ConstantVariable("budget")
        .label("Checkpoint latency budget (s)")
        .value(BUDGET_DEFAULT)
    )


def build() -> dashboard.Dashboard:
    """The per-node dashboard."""
    return (
        base(
            "fabricwatch / Node",
            UID,
            "One GPU node: GPU activity, NVLink, RDMA NIC congestion, checkpoint storage.",
        )
        .with_variable(cluster_variable())
        .with_variable(node_variable())
        .with_variable(_budget_variable())
        .with_row(dashboard.Row("GPUs"))
        .with_panel(_gpu_heatmap())
        .with_panel(
            timeseries_panel(
                "GPU power",
                [(f"max by (gpu) (fabricwatch_gpu_power_watts{{{N}}})", "GPU {{gpu}}")],
                unit="watt",
                description="Power per GPU: near-idle power in a stall is a cheap, robust signal.",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPUs stalled",
                [
                    (
                        f'sum by (cause) (fabricwatch_gpu_stalled{{{N}, cause!="none"}})',
                        "{{cause}}",
                    )
                ],
                unit="none",
                stack=True,
                description="GPUs of this node inside an open stall incident, by cause.",
            )
        )
        .with_row(dashboard.Row("NVLink"))
        .with_panel(
            timeseries_panel(
                "NVLink TX per link",
                [
                    (
                        "sum by (gpu, link) (rate(fabricwatch_gpu_nvlink_transmit_bytes_total"
                        f"{{{N}}}[$__rate_interval]))",
                        "GPU {{gpu}} link {{link}}",
                    )
                ],
                unit="Bps",
                description="Bytes per second sent on each NVLink.",
            )
        )
        .with_panel(
            timeseries_panel(
                "NVLink RX per link",
                [
                    (
                        "sum by (gpu, link) (rate(fabricwatch_gpu_nvlink_receive_bytes_total"
                        f"{{{N}}}[$__rate_interval]))",
                        "GPU {{gpu}} link {{link}}",
                    )
                ],
                unit="Bps",
                description="Bytes per second received on each NVLink.",
            )
        )
        .with_panel(
            timeseries_panel(
                "NVLink errors",
                [
                    (
                        "sum by (gpu, link, type) (rate(fabricwatch_gpu_nvlink_errors_total"
                        f"{{{N}}}[$__rate_interval]))",
                        "GPU {{gpu}} link {{link}} {{type}}",
                    )
                ],
                unit="short",
                description="NVLink CRC, replay and recovery errors per second.",
                width=24,
                height=6,
            )
        )
        .with_row(dashboard.Row("RDMA NICs"))
        .with_panel(
            timeseries_panel(
                "NIC PFC pause fraction per priority",
                [
                    (
                        "max by (device, port, priority, direction) "
                        f"(fabricwatch_nic_pfc_pause_ratio{{{N}}})",
                        "{{device}}/{{port}} p{{priority}} {{direction}}",
                    )
                ],
                unit="percentunit",
                max_value=1,
                description="Share of time each priority was paused; rx = we were paused, "
                "tx = we paused the switch. > 80 % is a storm.",
            )
        )
        .with_panel(
            timeseries_panel(
                "NIC PFC pause frames per priority",
                [
                    (
                        "sum by (device, port, priority, direction) (rate("
                        f"fabricwatch_nic_pfc_pause_frames_total{{{N}}}[$__rate_interval]))",
                        "{{device}}/{{port}} p{{priority}} {{direction}}",
                    )
                ],
                unit="short",
                description="PFC pause frames per second; ~5,960/s holds a 200G priority paused.",
            )
        )
        .with_panel(
            timeseries_panel(
                "ECN marks per priority",
                [
                    (
                        "sum by (device, port, priority) (rate("
                        f"fabricwatch_nic_priority_ecn_marked_packets_total{{{N}}}[$__rate_interval]))",
                        "{{device}}/{{port}} p{{priority}}",
                    ),
                    (
                        "sum by (device, port) (rate("
                        f"fabricwatch_nic_ecn_marked_packets_total{{{N}}}[$__rate_interval]))",
                        "{{device}}/{{port}} RoCE total",
                    ),
                ],
                unit="pps",
                description="ECN-marked packets per second: per priority from the device, "
                "and RoCE packets received with CE (np_ecn_marked_roce_packets).",
            )
        )
        .with_panel(
            timeseries_panel(
                "CNPs sent and handled",
                [
                    (
                        "sum by (device, port) (rate("
                        f"fabricwatch_nic_cnp_sent_packets_total{{{N}}}[$__rate_interval]))",
                        "{{device}}/{{port}} sent",
                    ),
                    (
                        "sum by (device, port) (rate("
                        f"fabricwatch_nic_cnp_handled_packets_total{{{N}}}[$__rate_interval]))",
                        "{{device}}/{{port}} handled",
                    ),
                ],
                unit="pps",
                description="Congestion notification packets: sent as notification point, "
                "handled (send rate cut) as reaction point.",
            )
        )
        .with_row(dashboard.Row("Checkpoint storage"))
        .with_panel(
            timeseries_panel(
                "Storage write latency",
                [
                    (
                        f"max by (path) (fabricwatch_storage_write_latency_seconds{{{N}}})",
                        "{{path}} write",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (path, le) (rate("
                        f"fabricwatch_storage_probe_latency_seconds_bucket{{{N}}}[$__rate_interval])))",
                        "{{path}} probe p99",
                    ),
                    ("vector($budget)", "budget"),
                ],
                unit="s",
                description="Average device/NFS write latency and the probe's p99 against the "
                "checkpoint latency budget ($budget s).",
            )
        )
        .with_panel(_probe_heatmap())
        .with_row(dashboard.Row("Incidents"))
        .with_panel(
            table_panel(
                "Incidents by cause (range)",
                [
                    (
                        "sum by (cause) (increase("
                        f"fabricwatch_incidents_opened_total{{{N}}}[$__range]))",
                        "opened",
                    ),
                    (
                        "sum by (cause) (increase("
                        f"fabricwatch_stall_gpu_seconds_total{{{N}}}[$__range])) / 3600",
                        "GPU-hours lost",
                    ),
                    (
                        f"sum by (cause) (increase(fabricwatch_stall_cost_total{{{N}}}[$__range]))",
                        "cost",
                    ),
                ],
                description="Incidents opened, GPU-hours and money lost per cause on this node.",
                width=24,
            )
        )
    )


def render() -> str:
    """The dashboard JSON users import."""
    return to_json(build())


__all__ = ["BUDGET_DEFAULT", "UID", "build", "render"]
