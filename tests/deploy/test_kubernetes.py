"""Kubernetes manifests: OpenAPI-valid, generated parts in sync with their sources."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import referencing
import referencing.jsonschema
import yaml
from kubernetes_validate.utils import (  # type: ignore[import-untyped]
    ValidationError,
    validate,
)

from fabricwatch.collectors import builtin_registry
from fabricwatch.config import parse_config
from tests.deploy.conftest import K8S, RULES

K8S_VERSION = "1.30.0"
CORE_FILES = (
    "namespace.yaml",
    "serviceaccount.yaml",
    "configmap.yaml",
    "daemonset.yaml",
    "service.yaml",
)
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def load_generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fw_k8s_generate", K8S / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if d]


@pytest.mark.parametrize("name", CORE_FILES)
def test_manifest_is_valid_against_kubernetes_openapi_strict(name: str) -> None:
    for doc in docs(name):
        validate(doc, K8S_VERSION, strict=True)


def test_strict_validation_rejects_an_unknown_field() -> None:
    ds = docs("daemonset.yaml")[0]
    ds["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(ValidationError):
        validate(ds, K8S_VERSION, strict=True)


def test_strict_validation_rejects_a_wrong_type() -> None:
    ds = docs("daemonset.yaml")[0]
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "metrics"
    with pytest.raises(ValidationError):
        validate(ds, K8S_VERSION, strict=True)


def test_daemonset_follows_the_gpu_node_conventions() -> None:
    ds = docs("daemonset.yaml")[0]
    pod = ds["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    assert "nvidia.com/gpu" not in c.get("resources", {}).get("limits", {})
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/host/proc"]["readOnly"] and mounts["/host/sys"]["readOnly"]
    assert c["args"][-1] == "run"


def test_configmap_config_is_accepted_by_the_daemon() -> None:
    import tomllib

    cm = docs("configmap.yaml")[0]
    text = cm["data"]["fabricwatch.toml"]
    cfg = parse_config(tomllib.loads(text), builtin_registry(), source="configmap")
    ds = docs("daemonset.yaml")[0]
    mounts = {
        m["mountPath"] for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert str(cfg.daemon.proc_root) in mounts
    assert str(cfg.daemon.sys_root) in mounts
    assert str(cfg.daemon.state_dir) in mounts


def test_generated_manifests_are_up_to_date(tmp_path: Path) -> None:
    gen = load_generate()
    assert gen.main(["--check"]) == 0
    for name in ("prometheusrule.yaml", "configmap.yaml"):
        (tmp_path / name).write_text("stale\n", encoding="utf-8")
    assert gen.main(["--check", "--out", str(tmp_path)]) == 1


def test_prometheus_rule_is_identical_in_content_to_rules_file() -> None:
    (rule,) = docs("prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))


def test_generator_rejects_a_rules_file_without_groups() -> None:
    gen = load_generate()
    with pytest.raises(ValueError, match="groups"):
        gen.prometheus_rule("rules: []\n")


# The prometheus-operator CRDs' OpenAPI schemas ship with no PyPI package we can
# use (cloudcoil's models register a pytest plugin that breaks the suite), so
# ServiceMonitor and PrometheusRule are checked against the subset of the v1
# CRD schema they use, strict like kubeconform -strict, with the Kubernetes
# ObjectMeta/LabelSelector schemas from kubernetes-validate.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
        "targetLabel": {"type": "string"},
        "action": {
            "enum": [
                "replace",
                "keep",
                "drop",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "hashmod",
                "keepequal",
                "dropequal",
                "lowercase",
                "uppercase",
            ]
        },
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "modulus": {"type": "integer"},
    },
}
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"type": ["string", "integer"]},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": {"$ref": "objectmeta-meta-v1.json"},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector"],
                "properties": {
                    "selector": {"$ref": "labelselector-meta-v1.json"},
                    "jobLabel": {"type": "string"},
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "attachMetadata": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"node": {"type": "boolean"}},
                    },
                    "endpoints": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "scheme": {"enum": ["http", "https"]},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "honorLabels": {"type": "boolean"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                                "metricRelabelings": {"type": "array", "items": _RELABEL},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": {"$ref": "objectmeta-meta-v1.json"},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "limit": {"type": "integer"},
                                "partial_response_strategy": {"type": "string"},
                                "rules": {"type": "array", "items": _RULE},
                            },
                        },
                    }
                },
            },
        },
    },
}


def crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    base = SCHEMAS / f"v{K8S_VERSION}-local-strict"
    spec = referencing.jsonschema.DRAFT202012

    def retrieve(uri: str) -> referencing.Resource[Any]:
        name = uri.rsplit("/", 1)[-1]
        return referencing.Resource.from_contents(
            json.loads((base / name).read_text(encoding="utf-8")), default_specification=spec
        )

    registry: referencing.Registry[Any] = referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]
    return jsonschema.Draft202012Validator(CRD_SCHEMAS[kind], registry=registry)


@pytest.mark.parametrize("name", ["servicemonitor.yaml", "prometheusrule.yaml"])
def test_custom_resources_match_the_operator_schema(name: str) -> None:
    for doc in docs(name):
        crd_validator(doc["kind"]).validate(doc)


def test_crd_check_rejects_unknown_fields_and_bad_durations() -> None:
    sm = docs("servicemonitor.yaml")[0]
    sm["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("ServiceMonitor").validate(sm)
    (rule,) = docs("prometheusrule.yaml")
    rule["spec"]["groups"][1]["rules"][0]["for"] = "five minutes"
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("PrometheusRule").validate(rule)
    rule = docs("prometheusrule.yaml")[0]
    rule["metadata"]["labels"] = {"x": 1}
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("PrometheusRule").validate(rule)


def test_service_monitor_selects_the_service_and_labels_cliques() -> None:
    sm = docs("servicemonitor.yaml")[0]
    svc = docs("service.yaml")[0]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    ports = {p["name"] for p in svc["spec"]["ports"]}
    relabel = sm["spec"]["endpoints"][0]["relabelings"]
    assert sm["spec"]["endpoints"][0]["port"] in ports
    assert any(
        r["sourceLabels"] == ["__meta_kubernetes_node_label_nvidia_com_gpu_clique"] for r in relabel
    )
    # The job label the rules' FabricwatchDown selects on is the Service name.
    assert svc["metadata"]["name"] == "fabricwatch"
    assert 'job="fabricwatch"' in RULES.read_text(encoding="utf-8")
