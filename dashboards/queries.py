"""PromQL found in dashboards and rules, made concrete and parsed.

Grafana expressions contain template variables (``$node``, ``$__rate_interval``)
that no PromQL parser accepts. :func:`concrete` substitutes values a real
dashboard would send; :func:`metric_names` parses the result with
``promql-parser`` (GreptimeDB's Rust parser) and lists the series names the
expression selects.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import promql_parser

RANGE_DEFAULTS: Mapping[str, str] = {
    "__rate_interval": "2m",
    "__interval": "30s",
    "__range": "1h",
}
"""Duration variables Grafana fills in, and the values used for checks."""

_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*)\)\s*$", re.DOTALL)


class QueryError(ValueError):
    """An expression does not parse."""


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression of a dashboard.

    Attributes:
        where: human-readable origin (``"Node / NVLink TX per link [A]"``).
        expr: the expression as written, with template variables.
        kind: ``range`` for panel targets and annotations, ``instant`` for
            instant targets, ``variable`` for template-variable queries.
    """

    where: str
    expr: str
    kind: str


def concrete(expr: str, variables: Mapping[str, str] | None = None) -> str:
    """``expr`` with template variables replaced.

    Durations get :data:`RANGE_DEFAULTS`; other variables get ``variables``
    or ``.*`` (they appear inside ``=~"$node"`` matchers).
    """
    values = {**RANGE_DEFAULTS, **(variables or {})}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, ".*")

    return _VAR.sub(sub, expr)


def variable_expr(query: str) -> str | None:
    """The PromQL inside ``label_values(expr, label)``; None for ``label_values(label)``."""
    m = _LABEL_VALUES.match(query)
    if m is None:
        return query
    inner = m.group(1)
    # Split at the last top-level comma: the label name follows it.
    depth = 0
    for i in range(len(inner) - 1, -1, -1):
        ch = inner[i]
        if ch in ")}]":
            depth += 1
        elif ch in "({[":
            depth -= 1
        elif ch == "," and depth == 0:
            return inner[:i].strip()
    return None


def parse(expr: str) -> promql_parser.Expr:
    """Parse concrete PromQL or raise :class:`QueryError` naming the expression."""
    try:
        return promql_parser.parse(expr)
    except (ValueError, TypeError) as exc:
        msg = f"does not parse: {expr!r}: {exc}"
        raise QueryError(msg) from exc


def metric_names(expr: str) -> set[str]:
    """Series names selected by a concrete PromQL expression."""
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal:
                    names.add(m.value)
        return True

    promql_parser.walk(parse(expr), visit)
    return names


def dashboard_queries(doc: Mapping[str, Any]) -> Iterator[Query]:
    """Every PromQL expression of a Grafana dashboard JSON document."""
    title = str(doc.get("title", "?"))
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        q = var.get("query")
        text = q.get("query", "") if isinstance(q, dict) else str(q or "")
        inner = variable_expr(text)
        if inner:
            yield Query(f"{title} / variable {var.get('name')}", inner, "variable")
    for ann in doc.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            yield Query(f"{title} / annotation {ann.get('name')}", str(ann["expr"]), "range")
    for panel in _panels(doc.get("panels", [])):
        for target in panel.get("targets", []) or []:
            expr = target.get("expr")
            if not expr:
                continue
            kind = "instant" if target.get("instant") and not target.get("range") else "range"
            where = f"{title} / {panel.get('title')} [{target.get('refId')}]"
            yield Query(where, str(expr), kind)


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []) or [])


def constants(doc: Mapping[str, Any]) -> dict[str, str]:
    """Constant and custom variables' values of a dashboard (``$budget`` -> ``"1"``)."""
    out: dict[str, str] = {}
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") in ("constant", "textbox") and isinstance(var.get("query"), str):
            out[str(var["name"])] = var["query"]
    return out
