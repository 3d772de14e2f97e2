"""(c) Switch: PFC per port and priority, drops, utilisation of the polled uplinks."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, statetimeline

from dashboards._common import (
    DATASOURCE,
    base,
    cluster_variable,
    query_variable,
    target,
    timeseries_panel,
    to_json,
)

UID = "fabricwatch-switch"
S = 'cluster=~"$cluster", switch=~"$switch", port=~"$port"'


def _switch_variable() -> dashboard.QueryVariable:
    return query_variable(
        "switch",
        "Switch",
        'label_values(fabricwatch_switch_port_up{cluster=~"$cluster"}, switch)',
    )


def _port_variable() -> dashboard.QueryVariable:
    return query_variable(
        "port",
        "Port",
        'label_values(fabricwatch_switch_port_up{cluster=~"$cluster", switch=~"$switch"}, port)',
    )


def _port_state() -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title("Port oper status")
        .description("1 up, 0 down, per polled port.")
        .datasource(DATASOURCE)
        .span(24)
        .height(6)
        .with_target(
            target(
                f"max by (switch, port) (fabricwatch_switch_port_up{{{S}}})", "{{switch}} {{port}}"
            )
        )
    )


def _targets_up() -> statetimeline.Panel:
    # Not filtered by $switch: a switch that never answered has no port series,
    # so the variable (built from them) would not list the failing target.
    return (
        statetimeline.Panel()
        .title("SNMP targets up (failing targets)")
        .description(
            "fabricwatch_switch_target_up per switch and polling node: 0 = every poll failing "
            "(unreachable, or SNMPv3 credentials rejected: see poll errors by reason). "
            "Alert: FabricwatchSwitchTargetDown."
        )
        .datasource(DATASOURCE)
        .span(12)
        .height(6)
        .with_target(
            target(
                'min by (switch, instance) (fabricwatch_switch_target_up{cluster=~"$cluster"})',
                "{{switch}} from {{instance}}",
            )
        )
    )


def _tables_present() -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title("Switch tables served")
        .description(
            "fabricwatch_switch_table_present: 1 when the switch serves the table (pfc, queue, "
            "ecn, lldp, ifxtable), 0 when absent or empty: an absent pfc table means no PFC "
            "evidence from that switch."
        )
        .datasource(DATASOURCE)
        .span(12)
        .height(6)
        .with_target(
            target(
                "min by (switch, table) "
                '(fabricwatch_switch_table_present{cluster=~"$cluster", switch=~"$switch"})',
                "{{switch}} {{table}}",
            )
        )
    )


def build() -> dashboard.Dashboard:
    """The per-switch dashboard (ports polled by the nodes they uplink)."""
    return (
        base(
            "fabricwatch / Switch",
            UID,
            "Switch uplinks polled by fabricwatch nodes: PFC, drops, utilisation.",
        )
        .with_variable(cluster_variable())
        .with_variable(_switch_variable())
        .with_variable(_port_variable())
        .with_row(dashboard.Row("Targets"))
        .with_panel(_targets_up())
        .with_panel(_tables_present())
        .with_row(dashboard.Row("PFC"))
        .with_panel(
            timeseries_panel(
                "PFC pause fraction per port and priority",
                [
                    (
                        "max by (switch, port, priority, direction) "
                        f"(fabricwatch_switch_pfc_pause_ratio{{{S}}})",
                        "{{switch}} {{port}} p{{priority}} {{direction}}",
                    )
                ],
                unit="percentunit",
                max_value=1,
                description="Share of time each port/priority was paused (0-1); > 0.8 is a storm.",
            )
        )
        .with_panel(
            timeseries_panel(
                "PFC pause frames per port and priority",
                [
                    (
                        "max by (switch, port, priority, direction) (rate("
                        f"fabricwatch_switch_pfc_pause_frames_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} p{{priority}} {{direction}}",
                    )
                ],
                unit="short",
                description="PFC pause frames per second, per port, priority and direction.",
            )
        )
        .with_row(dashboard.Row("Drops and congestion"))
        .with_panel(
            timeseries_panel(
                "Port discards",
                [
                    (
                        "max by (switch, port, direction) (rate("
                        f"fabricwatch_switch_port_discards_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} {{direction}}",
                    )
                ],
                unit="pps",
                description="IF-MIB discards per second.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Queue drops and ECN marks",
                [
                    (
                        "max by (switch, port, queue) (rate("
                        f"fabricwatch_switch_queue_dropped_packets_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} q{{queue}} dropped",
                    ),
                    (
                        "max by (switch, port, queue) (rate("
                        f"fabricwatch_switch_ecn_marked_packets_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} q{{queue}} ECN",
                    ),
                ],
                unit="pps",
                description="Egress queue drops and ECN-marked packets per second.",
            )
        )
        .with_row(dashboard.Row("Utilisation"))
        .with_panel(
            timeseries_panel(
                "Port utilisation",
                [
                    (
                        "max by (switch, port, direction) "
                        f"(fabricwatch_switch_port_utilization_ratio{{{S}}})",
                        "{{switch}} {{port}} {{direction}}",
                    )
                ],
                unit="percentunit",
                max_value=1,
                description="Octet rate x 8 / port speed.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Port throughput",
                [
                    (
                        "max by (switch, port) (rate("
                        f"fabricwatch_switch_port_receive_bytes_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} rx",
                    ),
                    (
                        "max by (switch, port) (rate("
                        f"fabricwatch_switch_port_transmit_bytes_total{{{S}}}[$__rate_interval]))",
                        "{{switch}} {{port}} tx",
                    ),
                ],
                unit="Bps",
                description="IF-MIB HC octets per second.",
            )
        )
        .with_panel(_port_state())
    )


def render() -> str:
    """The dashboard JSON users import."""
    return to_json(build())


__all__ = ["UID", "build", "render"]
