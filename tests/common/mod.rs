//! Shared fixtures for the core's tests: realistic objects as an API server
//! would return them. Beside it, included by path where used: `world.rs`
//! (the contract tests' in-memory cluster) and `operator.rs` (the
//! end-to-end harness).
#![allow(dead_code)]

use serde_json::{json, Value};

pub const NS: &str = "openmed";
pub const NAME: &str = "openmed-service";
pub const V1: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1";
pub const V2: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2";
pub const V3: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3";

pub fn spec(version: &str) -> Value {
    json!({
        "family": "PII",
        "version": version,
        "tier": "Small",
        "replicas": 2,
        "rolloutStrategy": {"type": "RollingUpdate", "maxUnavailable": 0, "maxSurge": 1, "progressDeadlineSeconds": 600},
    })
}

pub fn model(spec: Value) -> Value {
    json!({
        "apiVersion": "openmed.ai/v1alpha1",
        "kind": "OpenMedModel",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1, "resourceVersion": "100"},
        "spec": spec,
    })
}

/// A Deployment the way a team would have written it before adopting the
/// operator: a sidecar, other env vars, volumes, annotations of its own,
/// and the label that lets an OpenMedModel target it (9.8).
pub fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": NAME, "namespace": NS, "uid": "dep-uid", "generation": 1, "resourceVersion": "50",
            "labels": {"app": NAME, "openmed.ai/managed-target": "true"},
            "annotations": {"team": "ml-platform"},
        },
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": NAME}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "template": {
                "metadata": {"labels": {"app": NAME}, "annotations": {"prometheus.io/scrape": "true"}},
                "spec": {
                    "containers": [
                        {
                            "name": "openmed-service",
                            "image": "ghcr.io/openmed/openmed-service:1.4",
                            "ports": [{"containerPort": 8080}],
                            "env": [
                                {"name": "LOG_LEVEL", "value": "info"},
                                {"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": "hand-set"},
                            ],
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        },
                        {
                            "name": "proxy",
                            "image": "envoy:1.30",
                            "env": [{"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": "not-mine"}],
                        },
                    ],
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                },
            },
        },
        "status": {
            "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        },
    })
}
