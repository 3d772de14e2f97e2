"""(a) Fleet overview: stall incidents, lost GPU-hours and money, worst pause offenders."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard, stat

from dashboards._common import (
    DATASOURCE,
    bar_panel,
    base,
    cluster_variable,
    table_panel,
    target,
    timeseries_panel,
    to_json,
)

UID = "fabricwatch-fleet"
C = 'cluster=~"$cluster"'


def _stat(title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(6)
        .height(4)
        .with_target(target(expr, instant=True))
    )


def stall_annotations() -> list[dict[str, Any]]:
    """Stall incidents as annotation regions on every time panel."""
    return [
        {
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "enable": True,
            "hide": False,
            "iconColor": "red",
            "name": "Stall incidents",
            "expr": f'sum by (instance, cause) (fabricwatch_gpu_stalled{{{C}, cause!="none"}}) > 0',
            "step": "30s",
            "titleFormat": "GPU stall: {{cause}}",
            "textFormat": "{{instance}}",
            "tagKeys": "cause,instance",
            "useValueForTime": False,
        }
    ]


def build() -> dashboard.Dashboard:
    """The fleet overview dashboard."""
    return (
        base(
            "fabricwatch / Fleet overview",
            UID,
            "Where GPU time is lost across the fleet and why.",
        )
        .with_variable(cluster_variable())
        .with_row(dashboard.Row("Now"))
        .with_panel(
            _stat(
                "GPUs stalled now",
                f'sum(fabricwatch_gpu_stalled{{{C}, cause!="none"}}) or vector(0)',
                "none",
                "GPUs of running jobs inside an open stall incident.",
            )
        )
        .with_panel(
            _stat(
                "Incidents opened (range)",
                f"sum(increase(fabricwatch_incidents_opened_total{{{C}}}[$__range]))",
                "none",
                "Stall incidents opened over the dashboard's time range.",
            )
        )
        .with_panel(
            _stat(
                "Lost GPU-hours (range)",
                f"sum(increase(fabricwatch_stall_gpu_seconds_total{{{C}}}[$__range])) / 3600",
                "none",
                "GPU-hours of work lost to stall incidents over the time range.",
            )
        )
        .with_panel(
            _stat(
                "Money lost (range)",
                f"sum(increase(fabricwatch_stall_cost_total{{{C}}}[$__range]))",
                "currencyUSD",
                "Lost GPU-hours x engine.cost_per_gpu_hour over the time range.",
            )
        )
        .with_row(dashboard.Row("Stalls by cause"))
        .with_panel(
            timeseries_panel(
                "GPUs stalled by cause",
                [
                    (
                        f'sum by (cause) (fabricwatch_gpu_stalled{{{C}, cause!="none"}})',
                        "{{cause}}",
                    )
                ],
                unit="none",
                stack=True,
                description="GPUs inside open stall incidents, stacked by attributed cause.",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU-hours lost per hour by cause",
                [
                    (
                        "sum by (cause) (rate(fabricwatch_stall_gpu_seconds_total"
                        f"{{{C}}}[$__rate_interval]))",
                        "{{cause}}",
                    )
                ],
                unit="none",
                stack=True,
                description="GPU-hours lost per hour (= GPUs idle on average), by cause.",
            )
        )
        .with_panel(
            bar_panel(
                "Lost GPU-hours by cause (range)",
                "sum by (cause) (increase(fabricwatch_stall_gpu_seconds_total"
                f"{{{C}}}[$__range])) / 3600",
                "{{cause}}",
                unit="none",
                description="GPU-hours lost to each cause over the dashboard's time range.",
            )
        )
        .with_panel(
            bar_panel(
                "Money lost by cause (range)",
                f"sum by (cause) (increase(fabricwatch_stall_cost_total{{{C}}}[$__range]))",
                "{{cause}}",
                unit="currencyUSD",
                description="Cost of lost GPU time per cause (engine.cost_per_gpu_hour).",
            )
        )
        .with_panel(
            bar_panel(
                "Incidents by cause (range)",
                f"sum by (cause) (increase(fabricwatch_incidents_opened_total{{{C}}}[$__range]))",
                "{{cause}}",
                unit="none",
                description="Stall incidents opened per cause over the time range.",
            )
        )
        .with_row(dashboard.Row("Jobs (fleet aggregator)"))
        .with_panel(
            table_panel(
                "Lost GPU-hours by job and cause (ledger)",
                [
                    (
                        "topk(20, max by (job, cause, culprit_kind) ("
                        f"fabricwatch_fleet_job_gpu_seconds_lost{{{C}}}) / 3600)",
                        "",
                    )
                ],
                unit="none",
                description="Per running job, GPU-hours lost by cause and culprit kind; the "
                "waiting nodes of a job incident are charged to its origin's cause (max over "
                "aggregator replicas; scrape the aggregator with honor_labels: true).",
            )
        )
        .with_panel(
            timeseries_panel(
                "Badput by job",
                [
                    (
                        "topk(10, sum by (job) (max by (job, cause) ("
                        f"fabricwatch_fleet_job_badput_ratio{{{C}}})))",
                        "{{job}}",
                    )
                ],
                unit="percentunit",
                description="Share of each running job's GPU wall time lost to incidents "
                "(from the nodes' job reports), the ten worst jobs.",
            )
        )
        .with_panel(
            bar_panel(
                "Fleet GPU-hours lost by cause (range)",
                "sum by (cause) (max by (cause, culprit_kind) (increase("
                f"fabricwatch_fleet_gpu_seconds_lost_total{{{C}}}[$__range]))) / 3600",
                "{{cause}}",
                unit="none",
                description="GPU-hours the fleet ledger charged to each cause over the range, "
                "job incidents charged to their origin (straggler included).",
            )
        )
        .with_panel(
            timeseries_panel(
                "Open cluster and job incidents by cause",
                [(f"sum by (cause) (fabricwatch_fleet_incidents_open{{{C}}})", "{{cause}}")],
                unit="none",
                stack=True,
                description="Open cluster incidents (switch, storage, NVLink and job "
                "incidents) summed over the aggregator replicas that own them.",
            )
        )
        .with_row(dashboard.Row("Worst offenders"))
        .with_panel(
            table_panel(
                "Top switch ports by pause fraction",
                [
                    (
                        "topk(10, max by (switch, port, priority, direction) (avg_over_time("
                        f"fabricwatch_switch_pfc_pause_ratio{{{C}}}[$__range])))",
                        "",
                    )
                ],
                unit="percentunit",
                description="Mean PFC pause-time fraction over the range; > 0.8 is a storm.",
            )
        )
        .with_panel(
            table_panel(
                "Top nodes by NIC pause fraction",
                [
                    (
                        "topk(10, max by (instance, device, priority, direction) (avg_over_time("
                        f"fabricwatch_nic_pfc_pause_ratio{{{C}}}[$__range])))",
                        "",
                    )
                ],
                unit="percentunit",
                description="Mean host NIC pause-time fraction over the range, worst first.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Collectors failing",
                [(f"sum by (collector) (1 - fabricwatch_collector_up{{{C}}})", "{{collector}}")],
                unit="none",
                description="Nodes whose collector's latest collection failed, per collector.",
                width=24,
                height=6,
            )
        )
    )


def render() -> str:
    """The dashboard JSON users import."""
    return to_json(build(), stall_annotations())


__all__ = ["UID", "build", "render", "stall_annotations"]
