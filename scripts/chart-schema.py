#!/usr/bin/env python3
"""Writes the chart's values.schema.json (JSON Schema draft-07, every $ref
local, additionalProperties: false on every object but Helm's `global`), so
that Helm refuses an unknown key or a wrong type naming it.
scripts/sync-chart.sh runs it, and with --check compares.

Usage: chart-schema.py [OUT]   (default: the chart's values.schema.json)"""
import json, os, sys

CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "openmed-operator")
OUT_PATH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(CHART, "values.schema.json")

LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
RESOURCE_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# spec.tier's enum in the CRD, the one source.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "manifests", "base", "crd.json")) as f:
    TIERS = json.load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["tier"]["enum"]
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[mkMGTPE]|[KMGTPE]i)?$"


def obj(props, required=(), desc=None):
    o = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        o["required"] = list(required)
    if desc:
        o["description"] = desc
    return o


def enabled(desc):
    return obj({"enabled": {"type": "boolean", "description": desc}}, ["enabled"])


def ref(name):
    return {"$ref": f"#/definitions/{name}"}


definitions = {
    "dnsLabel": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                 "description": "A namespace name (RFC 1123 label)."},
    "labelMap": {"type": "object", "additionalProperties": False,
                 "patternProperties": {LABEL_KEY: {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE}},
                 "description": "Kubernetes labels: a key that is not a label key is refused as an additional property."},
    "quantity": {"anyOf": [{"type": "string", "pattern": QUANTITY}, {"type": "number", "minimum": 0}],
                 "description": "A Kubernetes quantity, e.g. 10m, 32Mi."},
    "resourceList": {"type": "object", "additionalProperties": False,
                     "patternProperties": {RESOURCE_NAME: ref("quantity")}},
    "resources": obj({"requests": ref("resourceList"), "limits": ref("resourceList")},
                     desc="The operator container's resources."),
    "toleration": obj({
        "key": {"type": "string"},
        "operator": {"type": "string", "enum": ["Exists", "Equal"]},
        "value": {"type": "string"},
        "effect": {"type": "string", "enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
        "tolerationSeconds": {"type": "integer"},
    }),
    "tenantLimits": obj({
        "maxReplicas": {"type": "integer", "minimum": 1, "description": "The most spec.replicas of one model."},
        "families": {"type": "array", "minItems": 1, "uniqueItems": True,
                     "items": {"type": "string", "pattern": r"^[^,\s]+$"},
                     "description": "The spec.family values allowed."},
        "tiers": {"type": "array", "minItems": 1, "uniqueItems": True,
                  "items": {"type": "string", "enum": TIERS}, "description": "The spec.tier values allowed."},
        "maxModels": {"type": "integer", "minimum": 0,
                      "description": "A ResourceQuota on count/openmedmodels.openmed.ai."},
    }, desc="One namespace's limits; each is optional."),
    "envVar": obj({"name": {"type": "string", "pattern": r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"},
                   "value": {"type": "string"}}, ["name", "value"]),
}

props = {
    "global": {"type": "object",
               "description": "Helm's own, shared with a parent chart when this one is a subchart; not read by this chart, and the one object left open."},
    "crds": obj({"enabled": {"type": "boolean"}, "keep": {"type": "boolean"}}, ["enabled", "keep"]),
    "image": obj({
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": "string", "pattern": r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$",
                "description": "Empty: the chart's appVersion."},
        "digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
        "pullPolicy": {"type": "string", "enum": ["IfNotPresent", "Always", "Never"]},
    }, ["repository", "tag", "digest", "pullPolicy"]),
    "imagePullSecrets": {"type": "array", "items": obj({"name": {"type": "string", "minLength": 1}}, ["name"])},
    "replicas": {"type": "integer", "minimum": 1},
    "leaderElection": obj({"enabled": {"type": "boolean"}}, ["enabled"]),
    "watchNamespaces": {"type": "array", "uniqueItems": True, "items": ref("dnsLabel"),
                        "description": "Empty: every namespace. Else one Role per namespace."},
    "createWatchedNamespaces": {"type": "boolean"},
    "resources": ref("resources"),
    "logLevel": {"type": "string", "minLength": 1},
    "qps": {"type": "number", "minimum": 0, "description": "--qps; 0: no rate limit."},
    "burst": {"type": "integer", "minimum": 1, "maximum": 10000000},
    "extraArgs": {"type": "array", "items": {"type": "string"}},
    "extraEnv": {"type": "array", "items": ref("envVar")},
    "nodeSelector": ref("labelMap"),
    "tolerations": {"type": "array", "items": ref("toleration")},
    "metrics": obj({"service": enabled("The Service openmed-operator-metrics.")}, ["service"]),
    "serviceMonitor": obj({
        "enabled": {"type": "boolean"},
        "additionalLabels": ref("labelMap"),
        "interval": {"type": "string", "pattern": r"^(([0-9]+(ms|s|m|h|d|w|y))+)?$"},
        "insecureSkipVerify": {"type": "boolean"},
    }, ["enabled", "additionalLabels", "interval", "insecureSkipVerify"]),
    "prometheusRule": obj({
        "enabled": {"type": "boolean"},
        "namespace": {"anyOf": [{"type": "string", "maxLength": 0}, ref("dnsLabel")]},
        "additionalLabels": ref("labelMap"),
    }, ["enabled", "namespace", "additionalLabels"]),
    "networkPolicy": obj({
        "enabled": {"type": "boolean"},
        "prometheus": obj({
            "namespaceLabels": {"allOf": [ref("labelMap"), {"minProperties": 1}]},
            "podLabels": {"allOf": [ref("labelMap"), {"minProperties": 1}]},
        }, ["namespaceLabels", "podLabels"]),
    }, ["enabled", "prometheus"]),
    "podDisruptionBudget": obj({
        "enabled": {"type": "boolean"},
        "minAvailable": {"anyOf": [{"type": "integer", "minimum": 0},
                                   {"type": "string", "pattern": r"^(100|[1-9]?[0-9])%$"}]},
    }, ["enabled", "minAvailable"]),
    "userRoles": enabled("The aggregated ClusterRoles for OpenMedModel users."),
    "tenantPolicy": obj({
        "enabled": {"type": "boolean",
                    "description": "The ValidatingAdmissionPolicy openmed-tenant-limits (Kubernetes 1.30+)."},
        "namespaces": {"type": "object", "additionalProperties": False,
                       "propertyNames": ref("dnsLabel"),
                       "patternProperties": {"": ref("tenantLimits")},
                       "description": "Namespace name: its limits; each gets a binding."},
    }, ["enabled", "namespaces"]),
}

schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "openmed-operator chart values",
    **obj(props, ["crds", "image", "imagePullSecrets", "replicas", "leaderElection", "watchNamespaces",
                  "createWatchedNamespaces", "logLevel", "qps", "burst", "extraArgs", "extraEnv",
                  "nodeSelector", "tolerations", "metrics",
                  "serviceMonitor", "prometheusRule", "networkPolicy", "podDisruptionBudget",
                  "userRoles", "tenantPolicy"]),
    # More than one replica needs leader election (the template says so too).
    "if": {"properties": {"replicas": {"minimum": 2}}, "required": ["replicas"]},
    "then": {"properties": {"leaderElection": {"properties": {"enabled": {"const": True}}}}},
    "definitions": definitions,
}
with open(OUT_PATH, "w") as f:
    json.dump(schema, f, indent=2)
    f.write("\n")
