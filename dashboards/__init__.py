"""Grafana dashboards as code, and the tooling that checks them against the exporter.

``python -m dashboards.build`` writes the dashboard JSON users import
(``dashboards/*.json``); ``--check`` fails when the committed JSON is stale.
:mod:`dashboards.catalogue` builds the exporter's real metric catalogue,
:mod:`dashboards.telemetry` simulated telemetry rendered by the real exporter,
and :mod:`dashboards.promserver` a real Prometheus loaded with it.
"""
