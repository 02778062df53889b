//! Compact views of what was observed: the OpenMedModel, its target
//! Deployment and its manifest ConfigMap. Caches hold these rather than whole
//! objects (no managedFields, no unrelated fields), and the core judges them.
//! Parsing is lenient: a field of the wrong shape reads as absent.

use crate::foreign::bounded;
use crate::memory::pack::{pack, unpack, Dictionary};
use crate::model::status::{Phase, StatusDoc, MAX_ROLLBACK_TARGET};
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
    parsed_spec: Parsed<Option<Value>>,
    parsed_status: Parsed<std::sync::Arc<StatusDoc>>,
}

/// A value worked out from a view on first use and kept with it: a pass
/// reads a model's spec and status several times and should parse each
/// once. A copy starts without it (the cache hands out copies, so what it
/// holds stays packed), and it takes no part in comparisons.
#[derive(Default)]
pub struct Parsed<T>(std::sync::OnceLock<T>);

impl<T> Parsed<T> {
    fn get(&self, f: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(f)
    }
}

impl<T> Clone for Parsed<T> {
    fn clone(&self) -> Self {
        Parsed(std::sync::OnceLock::new())
    }
}

impl<T> PartialEq for Parsed<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> std::fmt::Debug for Parsed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parsed")
    }
}

/// A JSON value kept as its text, packed ([`crate::memory::pack`]). Every
/// model is held in the cache all the time but its spec and status are
/// read only when a pass runs: packed text is a small fraction of a parsed
/// value, at the cost of unpacking and parsing it then (docs/performance.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Box<[u8]>);

/// What the text of a model's spec and status usually holds, in the order
/// serde_json writes it (keys sorted): the packer's preset dictionary, so
/// even the first occurrence of a key in a model costs a few bytes.
const MODEL_TEXT: &str = concat!(
    r#"{"family":"PII","manifestConfigMapName":"-model-manifest","replicas":1,"#,
    r#""rolloutStrategy":{"maxSurge":1,"maxUnavailable":0,"progressDeadlineSeconds":600,"#,
    r#""rollbackOnFailure":true,"type":"RollingUpdate"},"targetRef":{"containerName":"#,
    r#""openmed-service","name":""},"tier":"Small","version":"OpenMed/OpenMed-"}"#,
    r#"{"activeVersion":"OpenMed/OpenMed-","appliedSpecHash":"sha256:","#,
    r#""conditions":[{"lastTransitionTime":"2026-01-01T00:00:00Z","message":"#,
    r#"" is serving","observedGeneration":1,"reason":"RolloutSucceeded","status":"True","#,
    r#""type":"Ready"},{"lastTransitionTime":"","message":"rollout of  complete","#,
    r#""observedGeneration":1,"reason":"RolloutComplete","status":"False","#,
    r#""type":"Progressing"},{"lastTransitionTime":"","message":"no failure","#,
    r#""observedGeneration":1,"reason":"Healthy","status":"False","type":"Degraded"},"#,
    r#"{"lastTransitionTime":"","message":"no rollback requested","observedGeneration":1,"#,
    r#""reason":"NotRequested","status":"False","type":"RolledBack"}],"#,
    r#""desiredSpecHash":"sha256:","desiredVersion":"OpenMed/OpenMed-","#,
    r#""lastEvents":[{"generation":1,"message":"Deployment  is serving ","#,
    r#""reason":"RolloutSucceeded"}],"lastSuccessfulSpec":{"family":"PII","#,
    r#""manifestConfigMapName":"-model-manifest","previousSuccessfulSpec":{"#,
    r#""manifestHash":"sha256:","observedGeneration":1,"phase":"Ready","rollbackCount":0,"#,
    r#""targetDeploymentGeneration":2,"targetDeploymentUID":"}"#,
);

/// [`MODEL_TEXT`], hashed once.
fn model_dictionary() -> &'static Dictionary {
    static DICT: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
    DICT.get_or_init(|| Dictionary::new(MODEL_TEXT))
}

impl RawJson {
    fn of(v: Option<&Value>) -> Option<RawJson> {
        v.filter(|v| !v.is_null())
            .map(|v| RawJson(pack(&v.to_string(), model_dictionary())))
    }

    /// The value again (it was packed and serialized by us, so it parses).
    fn value(&self) -> Option<Value> {
        let text = unpack(&self.0, model_dictionary())?;
        serde_json::from_str(&text).ok()
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
            parsed_spec: Parsed::default(),
            parsed_status: Parsed::default(),
        })
    }

    /// `spec`, parsed (once per copy).
    pub fn spec(&self) -> Option<&Value> {
        self.parsed_spec
            .get(|| self.spec.as_ref().and_then(RawJson::value))
            .as_ref()
    }

    /// `status`, parsed (once per copy).
    pub fn status(&self) -> &StatusDoc {
        self.shared_status()
    }

    /// `status`, parsed, to share with a plan (which never edits it).
    pub fn shared_status(&self) -> &std::sync::Arc<StatusDoc> {
        self.parsed_status.get(|| {
            let text = self.status.as_ref().and_then(RawJson::value);
            std::sync::Arc::new(StatusDoc::from_owned(text))
        })
    }

    /// `<namespace>/<name>`: the value of the owner annotation.
    pub fn qualified_name(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A converged model as the operator leaves it (values unlike the
    /// dictionary's: another version, real-looking hashes and uids).
    fn converged() -> Value {
        let v = "OpenMed/OpenMed-NER-Oncology-Base-220M-v3";
        let spec = json!({"family": "NER", "manifestConfigMapName": "onc-model-manifest",
            "replicas": 3, "rolloutStrategy": {"maxSurge": 1, "maxUnavailable": 0,
            "progressDeadlineSeconds": 900, "rollbackOnFailure": true, "type": "RollingUpdate"},
            "targetRef": {"containerName": "openmed-service", "name": "onc-api"},
            "tier": "Base", "version": v});
        let hash = "sha256:9c1185a5c5e9fc54612808977ee8f548b2258d31a6b4f5e0f6a1a5c3e1d2b3c4";
        let cond = |t: &str, s: &str, r: &str, m: String| {
            json!({"lastTransitionTime":
            "2026-11-30T21:04:17Z", "message": m, "observedGeneration": 4, "reason": r,
            "status": s, "type": t})
        };
        json!({"metadata": {"name": "onc", "namespace": "clinic-7", "uid": "u", "generation": 4},
            "spec": spec.clone(),
            "status": {"activeVersion": v, "appliedSpecHash": hash, "conditions": [
                cond("Ready", "True", "RolloutSucceeded", format!("{v} is serving")),
                cond("Progressing", "False", "RolloutComplete", format!("rollout of {v} complete")),
                cond("Degraded", "False", "Healthy", "no failure".into()),
                cond("RolledBack", "False", "NotRequested", "no rollback requested".into())],
              "desiredSpecHash": hash, "desiredVersion": v, "lastEvents": [{"generation": 4,
                "message": format!("Deployment onc-api is serving {v}"), "reason": "RolloutSucceeded"}],
              "lastSuccessfulSpec": spec,
              "manifestHash": "sha256:1ecb6f1b4e1beae6703ed08f7d73ff5bfc0cadd43420314e7d416279ac7f30b1",
              "observedGeneration": 4, "phase": "Ready", "rollbackCount": 0,
              "targetDeploymentGeneration": 7,
              "targetDeploymentUID": "fe039636-6598-4d64-a52c-bb15d180ed57"}})
    }

    #[test]
    fn a_cached_model_gives_back_its_spec_and_status_in_a_fraction_of_the_text() {
        let m = converged();
        let view = ModelView::from_json(&m).unwrap();
        assert_eq!(view.spec(), Some(&m["spec"]));
        assert_eq!(view.status(), &StatusDoc::from_value(Some(&m["status"])));
        let text = m["spec"].to_string().len() + m["status"].to_string().len();
        let held = view.spec.as_ref().map_or(0, |r| r.0.len())
            + view.status.as_ref().map_or(0, |r| r.0.len());
        assert!(held * 3 < text, "{text} bytes of text held in {held}");
    }
}
