//! Every body the operator sends, built by hand. Strategic merge patches
//! name only what they change, so other containers, env vars, volumes and
//! annotations are left alone.

use super::observed::{ConfigMapView, ContainerView, DeploymentView, ModelView, OwnerRef};
use crate::model::spec::{empty_manifest_hash, StrategyType};
use crate::model::status::EventReason;
use crate::model::{
    DesiredSpec, API_VERSION, CLAIM_LABEL, FAMILY_LABEL, HASH_ANNOTATION, KIND, MANAGED_BY_LABEL,
    MANIFEST_KEY, OWNER_ANNOTATION, PRELOAD_ENV,
};
use serde::Serialize;
use serde_json::{json, Map, Value};

pub const COMPONENT: &str = "openmed-operator";

/// The controller reference from a ConfigMap to its OpenMedModel.
pub fn owner_reference(m: &ModelView) -> OwnerRef {
    OwnerRef {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        name: m.name().to_string(),
        uid: m.uid.clone(),
        controller: true,
        block_owner_deletion: true,
    }
}

fn config_map_meta(m: &ModelView, s: &DesiredSpec) -> (Value, Value) {
    let labels = json!({MANAGED_BY_LABEL.0: MANAGED_BY_LABEL.1, FAMILY_LABEL: s.family});
    let annotations = json!({OWNER_ANNOTATION: m.qualified_name()});
    (labels, annotations)
}

fn config_map_data(s: &DesiredSpec) -> Value {
    json!({MANIFEST_KEY: s.manifest_json(), PRELOAD_ENV: s.version})
}

/// POST body for a new manifest ConfigMap.
pub fn config_map_create(m: &ModelView, s: &DesiredSpec) -> Value {
    let (labels, annotations) = config_map_meta(m, s);
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": s.manifest_config_map_name,
            "namespace": m.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(m).to_json()],
        },
        "data": config_map_data(s),
    })
}

/// Merge patch for an existing manifest ConfigMap that is ours. A merge
/// patch replaces lists whole, so other owners' references are carried over.
pub fn config_map_patch(m: &ModelView, s: &DesiredSpec, existing: &ConfigMapView) -> Value {
    let (labels, annotations) = config_map_meta(m, s);
    let mut refs: Vec<Value> = existing
        .owner_refs
        .iter()
        .filter(|r| r.uid != m.uid)
        .map(|r| {
            // Only one controller reference is allowed: ours.
            let mut r = r.clone();
            r.controller = false;
            r.to_json()
        })
        .collect();
    refs.push(owner_reference(m).to_json());
    json!({
        "metadata": {"labels": labels, "annotations": annotations, "ownerReferences": refs},
        "data": config_map_data(s),
    })
}

fn strategy(s: &DesiredSpec) -> Value {
    match s.rollout.kind {
        StrategyType::Recreate => json!({"type": "Recreate", "rollingUpdate": null}),
        StrategyType::RollingUpdate => json!({
            "type": "RollingUpdate",
            "rollingUpdate": {
                "maxUnavailable": s.rollout.max_unavailable.to_json(),
                "maxSurge": s.rollout.max_surge.to_json(),
            },
        }),
    }
}

/// Strategic merge patch pointing the Deployment at the spec (section 3).
/// Under an autoscaler (`autoscaled`) `spec.replicas` is left out: it is the
/// autoscaler's.
pub fn deployment_apply(m: &ModelView, s: &DesiredSpec, autoscaled: bool) -> Value {
    let owner = m.qualified_name();
    let mut patch = json!({
        "metadata": {
            "annotations": {OWNER_ANNOTATION: owner},
            "labels": {CLAIM_LABEL.0: CLAIM_LABEL.1},
        },
        "spec": {
            "replicas": s.replicas,
            "progressDeadlineSeconds": s.rollout.progress_deadline_seconds,
            "strategy": strategy(s),
            "template": {
                "metadata": {"annotations": {HASH_ANNOTATION: s.manifest_hash(), OWNER_ANNOTATION: owner}},
                "spec": {"containers": [{
                    "name": s.target.container_name,
                    "env": [{
                        "name": PRELOAD_ENV,
                        "value": null,
                        // Any other source is dropped: valueFrom takes exactly one.
                        "valueFrom": {
                            "configMapKeyRef": {"name": s.manifest_config_map_name, "key": PRELOAD_ENV},
                            "secretKeyRef": null,
                            "fieldRef": null,
                            "resourceFieldRef": null,
                        },
                    }],
                }]},
            },
        },
    });
    if autoscaled {
        if let Some(spec) = patch["spec"].as_object_mut() {
            spec.remove("replicas");
        }
    }
    patch
}

/// Strategic merge patch that hands the Deployment back (section 7): owner
/// annotations and claim label removed, empty-manifest hash, blank preload.
/// The container entry is only sent if the container exists, so the patch
/// never adds a container.
pub fn deployment_decommission(container: Option<&str>) -> Value {
    let mut template = json!({
        "metadata": {"annotations": {HASH_ANNOTATION: empty_manifest_hash(), OWNER_ANNOTATION: null}},
    });
    if let Some(c) = container {
        template["spec"] = json!({"containers": [{
            "name": c,
            "env": [{"name": PRELOAD_ENV, "value": "", "valueFrom": null}],
        }]});
    }
    json!({
        "metadata": {"annotations": {OWNER_ANNOTATION: null}, "labels": {CLAIM_LABEL.0: null}},
        "spec": {"template": template},
    })
}

/// The container whose preload env reads a ConfigMap, if any.
pub fn pointed_container(d: &DeploymentView) -> Option<&ContainerView> {
    d.containers.iter().find(|c| {
        c.preload
            .as_ref()
            .is_some_and(|e| e.config_map_ref.is_some())
    })
}

/// Hand back a Deployment that is no longer the target (9.16), as section 7
/// hands one back: the container whose preload refers to a ConfigMap starts
/// cold; with no such container only the metadata is released and the pod
/// template is left exactly as it is.
pub fn deployment_release(d: &DeploymentView) -> Value {
    match pointed_container(d) {
        Some(c) => deployment_decommission(Some(&c.name)),
        None => deployment_unclaim(),
    }
}

/// Strategic merge patch removing only the owner annotation and the claim
/// label: no pod template change, so no pod restarts.
pub fn deployment_unclaim() -> Value {
    json!({"metadata": {"annotations": {OWNER_ANNOTATION: null}, "labels": {CLAIM_LABEL.0: null}}})
}

/// Strategic merge patch that only adds the claim label (a Deployment
/// adopted from the reference operator): no spec change, no pod restart.
pub fn deployment_claim() -> Value {
    json!({"metadata": {"labels": {CLAIM_LABEL.0: CLAIM_LABEL.1}}})
}

/// Merge patch for `/status`, conditional on the resourceVersion the plan
/// was computed from, so a concurrent writer causes a retry, not a lost
/// update.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusPatch<'a> {
    pub metadata: PatchMetadata<'a>,
    /// The changed fields in key order, `null` for one that goes away.
    pub status: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchMetadata<'a> {
    #[serde(rename = "resourceVersion")]
    pub resource_version: &'a str,
}

impl StatusPatch<'_> {
    /// What the patch sets `key` to, if it names it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.status.get(key)
    }

    /// The patch as a `Value`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Merge patch setting the whole finalizer list, conditional on the
/// resourceVersion, so a concurrent finalizer change is never lost.
pub fn finalizers_patch(resource_version: &str, finalizers: &[String]) -> Value {
    json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}})
}

/// A new Event (core/v1) for `m`, borrowing what it names: one is posted
/// for most passes that change something, so no JSON tree is built for it.
/// Fields in the order a `Value` would write them.
pub fn event<'a>(
    m: &'a ModelView,
    name: &'a str,
    reason: EventReason,
    message: &'a str,
    now: &'a str,
) -> EventBody<'a> {
    EventBody {
        api_version: "v1",
        count: 1,
        first_timestamp: now,
        involved_object: InvolvedObject {
            api_version: API_VERSION,
            kind: KIND,
            name: m.name(),
            namespace: m.namespace(),
            uid: &m.uid,
        },
        kind: "Event",
        last_timestamp: now,
        message,
        metadata: EventMeta {
            name,
            namespace: m.namespace(),
        },
        reason: reason.as_str(),
        reporting_component: COMPONENT,
        reporting_instance: COMPONENT,
        source: EventSource {
            component: COMPONENT,
        },
        type_: if reason.is_warning() {
            "Warning"
        } else {
            "Normal"
        },
    }
}

/// The body [`event`] writes.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventBody<'a> {
    api_version: &'static str,
    count: i64,
    first_timestamp: &'a str,
    involved_object: InvolvedObject<'a>,
    kind: &'static str,
    last_timestamp: &'a str,
    message: &'a str,
    metadata: EventMeta<'a>,
    reason: &'static str,
    reporting_component: &'static str,
    reporting_instance: &'static str,
    source: EventSource,
    #[serde(rename = "type")]
    type_: &'static str,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct InvolvedObject<'a> {
    api_version: &'static str,
    kind: &'static str,
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
}

#[derive(Debug, serde::Serialize)]
struct EventMeta<'a> {
    name: &'a str,
    namespace: &'a str,
}

#[derive(Debug, serde::Serialize)]
struct EventSource {
    component: &'static str,
}

/// Merge patch recording another occurrence of an existing Event.
pub fn event_repeat(count: i64, message: &str, now: &str) -> Value {
    json!({"count": count, "lastTimestamp": now, "message": message})
}
