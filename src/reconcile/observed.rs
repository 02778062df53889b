//! Compact views of what was observed: the OpenMedModel, its target
//! Deployment and its manifest ConfigMap. Caches hold these rather than whole
//! objects (no managedFields, no unrelated fields), and the core judges them.
//! Parsing is lenient: a field of the wrong shape reads as absent.

use crate::model::status::{bounded, Phase, MAX_ROLLBACK_TARGET};
use crate::model::{
    AUTOSCALED_ANNOTATION, CLAIM_LABEL, MANAGED_BY_LABEL, MANIFEST_KEY, OWNER_ANNOTATION,
    PRELOAD_ENV, ROLLBACK_ANNOTATION,
};
use crate::model::{FAMILY_LABEL, HASH_ANNOTATION, OPT_IN_LABEL};
use serde_json::Value;

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn meta_str(obj: &Value, key: &str) -> String {
    obj["metadata"][key].as_str().unwrap_or("").to_string()
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    s(&obj["metadata"]["annotations"][key])
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub resource_version: String,
    /// `openmed.ai/rollback-to`, trimmed and cut to 256 characters (9.15);
    /// None when absent or blank.
    pub rollback_to: Option<String>,
    /// `openmed.ai/autoscaled: "true"`: the target's replicas belong to an
    /// autoscaler (one the operator may not see, such as KEDA's).
    pub autoscaled: bool,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `status.phase`, read once: the metrics count phases at every scrape.
    pub phase: Option<Phase>,
    spec: Option<RawJson>,
    status: Option<RawJson>,
}

/// A JSON value kept as its text. Every model is held in the cache all the
/// time but its spec and status are read only when a pass runs: as text
/// they take a fifth of the memory (a model with a full status: 2.7 KB of
/// text, 13.4 KB as a parsed value), for a parse of some microseconds a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Box<str>);

impl RawJson {
    fn of(v: Option<&Value>) -> Option<RawJson> {
        v.filter(|v| !v.is_null())
            .map(|v| RawJson(v.to_string().into_boxed_str()))
    }

    /// The value again (it was serialized by us, so it parses).
    fn value(&self) -> Option<Value> {
        serde_json::from_str(&self.0).ok()
    }
}

impl ModelView {
    pub fn from_json(v: &Value) -> Option<ModelView> {
        let name = meta_str(v, "name");
        let namespace = meta_str(v, "namespace");
        if name.is_empty() || namespace.is_empty() {
            return None;
        }
        Some(ModelView {
            name,
            namespace,
            uid: meta_str(v, "uid"),
            generation: v["metadata"]["generation"].as_i64().unwrap_or(0),
            resource_version: meta_str(v, "resourceVersion"),
            rollback_to: annotation(v, ROLLBACK_ANNOTATION)
                .map(|a| bounded(a.trim(), MAX_ROLLBACK_TARGET))
                .filter(|a| !a.is_empty()),
            autoscaled: annotation(v, AUTOSCALED_ANNOTATION).as_deref() == Some("true"),
            finalizers: v["metadata"]["finalizers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            deleting: v["metadata"]["deletionTimestamp"].is_string(),
            phase: v["status"]["phase"].as_str().and_then(Phase::parse),
            spec: RawJson::of(v.get("spec")),
            status: RawJson::of(v.get("status")),
        })
    }

    /// `spec`, parsed.
    pub fn spec(&self) -> Option<Value> {
        self.spec.as_ref().and_then(RawJson::value)
    }

    /// `status`, parsed.
    pub fn status(&self) -> Option<Value> {
        self.status.as_ref().and_then(RawJson::value)
    }

    /// `<namespace>/<name>`: the value of the owner annotation.
    pub fn owner(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvView {
    pub value: Option<String>,
    pub config_map_ref: Option<(String, String)>,
    pub has_value_from: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub name: String,
    /// The preload env var, if the container has it.
    pub preload: Option<EnvView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub generation: i64,
    /// Carries the operator's claim label.
    pub claimed: bool,
    /// Carries the opt-in label `openmed.ai/managed-target: "true"` (9.8).
    pub opted_in: bool,
    /// The owner annotation on the Deployment's metadata.
    pub owner: Option<String>,
    pub replicas: Option<i64>,
    pub progress_deadline_seconds: Option<i64>,
    pub min_ready_seconds: i64,
    /// `spec.paused`: Kubernetes neither rolls out nor judges the deadline.
    pub paused: bool,
    pub strategy_type: Option<String>,
    pub max_unavailable: Option<Value>,
    pub max_surge: Option<Value>,
    pub has_rolling_update: bool,
    pub template_owner: Option<String>,
    pub template_hash: Option<String>,
    pub containers: Vec<ContainerView>,
    pub observed_generation: i64,
    /// `status.replicas`: pods of every ReplicaSet, old ones included.
    pub status_replicas: i64,
    pub updated_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub unavailable_replicas: i64,
    pub conditions: Vec<DeployCondition>,
    /// Who sets `spec.replicas` instead of the operator, if anyone: the
    /// HorizontalPodAutoscaler targeting this Deployment, or the
    /// OpenMedModel's own annotation `openmed.ai/autoscaled: "true"` (an
    /// autoscaler the operator cannot see). Filled in by the shell.
    pub autoscaler: Option<String>,
}

impl DeploymentView {
    pub fn from_json(v: &Value) -> Option<DeploymentView> {
        let name = meta_str(v, "name");
        if name.is_empty() {
            return None;
        }
        let spec = &v["spec"];
        let tmpl_ann = &spec["template"]["metadata"]["annotations"];
        let containers = spec["template"]["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| {
                        let name = c["name"].as_str()?.to_string();
                        let preload = c["env"]
                            .as_array()
                            .and_then(|env| env.iter().find(|e| e["name"] == PRELOAD_ENV))
                            .map(|e| EnvView {
                                value: s(&e["value"]),
                                config_map_ref: e
                                    .pointer("/valueFrom/configMapKeyRef")
                                    .and_then(|r| Some((s(&r["name"])?, s(&r["key"])?))),
                                has_value_from: e
                                    .get("valueFrom")
                                    .map(|x| !x.is_null())
                                    .unwrap_or(false),
                            });
                        Some(ContainerView { name, preload })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let st = &v["status"];
        let n = |k: &str| st[k].as_i64().unwrap_or(0);
        Some(DeploymentView {
            namespace: meta_str(v, "namespace"),
            name,
            uid: meta_str(v, "uid"),
            resource_version: meta_str(v, "resourceVersion"),
            generation: v["metadata"]["generation"].as_i64().unwrap_or(0),
            claimed: v["metadata"]["labels"][CLAIM_LABEL.0] == CLAIM_LABEL.1,
            opted_in: v["metadata"]["labels"][OPT_IN_LABEL.0] == OPT_IN_LABEL.1,
            owner: annotation(v, OWNER_ANNOTATION),
            replicas: spec["replicas"].as_i64(),
            progress_deadline_seconds: spec["progressDeadlineSeconds"].as_i64(),
            min_ready_seconds: spec["minReadySeconds"].as_i64().unwrap_or(0),
            paused: spec["paused"].as_bool().unwrap_or(false),
            strategy_type: s(&spec["strategy"]["type"]),
            max_unavailable: spec["strategy"]["rollingUpdate"]
                .get("maxUnavailable")
                .cloned(),
            max_surge: spec["strategy"]["rollingUpdate"].get("maxSurge").cloned(),
            has_rolling_update: !spec["strategy"]["rollingUpdate"].is_null(),
            template_owner: s(&tmpl_ann[OWNER_ANNOTATION]),
            template_hash: s(&tmpl_ann[HASH_ANNOTATION]),
            containers,
            observed_generation: n("observedGeneration"),
            status_replicas: n("replicas"),
            updated_replicas: n("updatedReplicas"),
            ready_replicas: n("readyReplicas"),
            available_replicas: n("availableReplicas"),
            unavailable_replicas: n("unavailableReplicas"),
            autoscaler: None,
            conditions: st["conditions"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| DeployCondition {
                            type_: c["type"].as_str().unwrap_or("").into(),
                            status: c["status"].as_str().unwrap_or("").into(),
                            reason: c["reason"].as_str().unwrap_or("").into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    pub fn container(&self, name: &str) -> Option<&ContainerView> {
        self.containers.iter().find(|c| c.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
            "controller": self.controller, "blockOwnerDeletion": self.block_owner_deletion,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigMapView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub owner: Option<String>,
    pub managed_by: Option<String>,
    pub family: Option<String>,
    pub owner_refs: Vec<OwnerRef>,
    pub manifest: Option<String>,
    pub preload: Option<String>,
}

impl ConfigMapView {
    pub fn from_json(v: &Value) -> Option<ConfigMapView> {
        let name = meta_str(v, "name");
        if name.is_empty() {
            return None;
        }
        let labels = &v["metadata"]["labels"];
        Some(ConfigMapView {
            namespace: meta_str(v, "namespace"),
            name,
            uid: meta_str(v, "uid"),
            resource_version: meta_str(v, "resourceVersion"),
            owner: annotation(v, OWNER_ANNOTATION),
            managed_by: s(&labels[MANAGED_BY_LABEL.0]),
            family: s(&labels[FAMILY_LABEL]),
            owner_refs: v["metadata"]["ownerReferences"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .map(|r| OwnerRef {
                            api_version: r["apiVersion"].as_str().unwrap_or("").into(),
                            kind: r["kind"].as_str().unwrap_or("").into(),
                            name: r["name"].as_str().unwrap_or("").into(),
                            uid: r["uid"].as_str().unwrap_or("").into(),
                            controller: r["controller"].as_bool().unwrap_or(false),
                            block_owner_deletion: r["blockOwnerDeletion"]
                                .as_bool()
                                .unwrap_or(false),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            manifest: s(&v["data"][MANIFEST_KEY]),
            preload: s(&v["data"][PRELOAD_ENV]),
        })
    }

    /// A controller ownerReference pointing at `uid`.
    pub fn controlled_by(&self, uid: &str) -> bool {
        !uid.is_empty() && self.owner_refs.iter().any(|r| r.controller && r.uid == uid)
    }
}
