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
    parsed: Parsed<std::sync::Arc<Parts>>,
}

/// A model's spec and status, each parsed when first read.
#[derive(Debug, Default)]
pub struct Parts {
    spec: std::sync::OnceLock<Option<Value>>,
    status: std::sync::OnceLock<std::sync::Arc<StatusDoc>>,
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

    /// Of a field the client kept as its JSON text ([`shapes::MODEL`]); a
    /// field given as a value is taken as [`RawJson::of`] takes it.
    fn of_text(v: Option<&Value>) -> Option<RawJson> {
        match v {
            Some(Value::String(text)) if text != "null" => {
                Some(RawJson(pack(text, model_dictionary())))
            }
            Some(Value::String(_)) => None,
            other => RawJson::of(other),
        }
    }

    /// The value again (it was packed and serialized by us, so it parses).
    fn value(&self) -> Option<Value> {
        let text = unpack(&self.0, model_dictionary())?;
        serde_json::from_str(&text).ok()
    }
}

/// How many parsed models [`recent_parts`] keeps: a few passes' worth.
const RECENT_PARTS: usize = 32;

/// Where the spec and status of the packed texts given are parsed: one of
/// the last [`RECENT_PARTS`] used, or a new one. One pass reads a model
/// through several copies (observation, plan, Events), and consecutive
/// passes mostly see the same text: each copy would unpack and parse it
/// again (docs/performance.md). The texts themselves are the key, so a
/// hit is exact.
fn recent_parts(spec: Option<&RawJson>, status: Option<&RawJson>) -> std::sync::Arc<Parts> {
    type Entry = (Option<RawJson>, Option<RawJson>, std::sync::Arc<Parts>);
    static RECENT: std::sync::Mutex<std::collections::VecDeque<Entry>> =
        std::sync::Mutex::new(std::collections::VecDeque::new());
    let same = |e: &&Entry| e.0.as_ref() == spec && e.1.as_ref() == status;
    if let Some(hit) = crate::lock::lock(&RECENT).iter().find(same) {
        return hit.2.clone();
    }
    let parts = std::sync::Arc::new(Parts::default());
    let mut recent = crate::lock::lock(&RECENT);
    if recent.len() >= RECENT_PARTS {
        recent.pop_front();
    }
    recent.push_back((spec.cloned(), status.cloned(), parts.clone()));
    parts
}

/// `status.phase` of a status kept as text, read without a tree.
fn phase_of_text(status: &str) -> Option<Phase> {
    #[derive(serde::Deserialize)]
    struct PhaseOnly<'a> {
        #[serde(borrow, default)]
        phase: Option<std::borrow::Cow<'a, str>>,
    }
    let p: PhaseOnly = serde_json::from_str(status).ok()?;
    Phase::parse(p.phase.as_deref()?)
}

impl ModelView {
    /// A model as the API client decodes it ([`shapes::MODEL`]): spec and
    /// status as their JSON text.
    pub fn from_decoded(v: &Value) -> Option<ModelView> {
        let mut m = ModelView::from_meta(v)?;
        if let Some(Value::String(status)) = v.get("status") {
            m.phase = phase_of_text(status);
        } else {
            m.phase = v["status"]["phase"].as_str().and_then(Phase::parse);
        }
        m.spec = RawJson::of_text(v.get("spec"));
        m.status = RawJson::of_text(v.get("status"));
        Some(m)
    }

    /// A model given whole.
    pub fn from_json(v: &Value) -> Option<ModelView> {
        let mut m = ModelView::from_meta(v)?;
        m.phase = v["status"]["phase"].as_str().and_then(Phase::parse);
        m.spec = RawJson::of(v.get("spec"));
        m.status = RawJson::of(v.get("status"));
        Some(m)
    }

    /// The metadata; spec, status and phase are left empty.
    fn from_meta(v: &Value) -> Option<ModelView> {
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
            phase: None,
            spec: None,
            status: None,
            parsed: Parsed::default(),
        })
    }

    /// `spec`, parsed (once per copy).
    pub fn spec(&self) -> Option<&Value> {
        let spec = self.spec.as_ref();
        self.parts()
            .spec
            .get_or_init(|| spec.and_then(RawJson::value))
            .as_ref()
    }

    /// `status`, parsed (once per copy).
    pub fn status(&self) -> &StatusDoc {
        self.shared_status()
    }

    /// `status`, parsed, to share with a plan (which never edits it).
    pub fn shared_status(&self) -> &std::sync::Arc<StatusDoc> {
        let status = self.status.as_ref();
        self.parts().status.get_or_init(|| {
            std::sync::Arc::new(StatusDoc::from_owned(status.and_then(RawJson::value)))
        })
    }

    /// Where spec and status are parsed, once per copy, and shared with
    /// the other copies of the same text made lately ([`recent_parts`]).
    fn parts(&self) -> &std::sync::Arc<Parts> {
        self.parsed
            .get(|| recent_parts(self.spec.as_ref(), self.status.as_ref()))
    }

    /// The valid specs status retains (`rollbackSpec`, `lastSuccessfulSpec`,
    /// `previousSuccessfulSpec`), as [`StatusDoc::retained_specs`] reads
    /// them. Unless a pass has parsed the status already, only these three
    /// fields are: the index asks at every event of a model, and a whole
    /// status is most of a model's text (docs/performance.md).
    pub fn retained_specs(&self) -> Vec<crate::model::DesiredSpec> {
        if let Some(st) = self.parts().status.get() {
            return st.retained_specs(&self.name);
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Retained {
            rollback_spec: Option<Value>,
            last_successful_spec: Option<Value>,
            previous_successful_spec: Option<Value>,
        }
        let text = self
            .status
            .as_ref()
            .and_then(|r| unpack(&r.0, model_dictionary()));
        let Some(r) = text.and_then(|t| serde_json::from_str::<Retained>(&t).ok()) else {
            return Vec::new();
        };
        [
            r.rollback_spec,
            r.last_successful_spec,
            r.previous_successful_spec,
        ]
        .iter()
        .flatten()
        .filter_map(|v| crate::model::DesiredSpec::from_snapshot(&self.name, v))
        .collect()
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

/// What the views read of each kind ([`crate::kube::shape`]): list pages,
/// watch events and write answers are decoded into these fields only. Every
/// field a `from_json` here (or [`crate::controller`]'s metadata and
/// autoscaler views) reads must be named, but for the identity the decoder
/// always keeps (name, namespace, uid, resourceVersion); the tests below
/// check it.
pub mod shapes {
    use super::*;
    use crate::kube::shape::Shape::{self, All, Fields};

    /// A model: its identity, the two annotations, finalizers, deletion,
    /// and the whole spec and status.
    pub const MODEL: Shape = Fields(&[
        (
            "metadata",
            Fields(&[
                ("generation", All),
                ("finalizers", All),
                ("deletionTimestamp", All),
                (
                    "annotations",
                    Fields(&[(ROLLBACK_ANNOTATION, All), (AUTOSCALED_ANNOTATION, All)]),
                ),
            ]),
        ),
        ("spec", Shape::Text),
        ("status", Shape::Text),
    ]);

    /// A Deployment, claimed or not (the metadata view reads a subset):
    /// the fields of [`DeploymentView`], nothing of the pod template but
    /// its two annotations and each container's name and preload variable.
    pub const DEPLOYMENT: Shape = Fields(&[
        (
            "metadata",
            Fields(&[
                ("generation", All),
                (
                    "labels",
                    Fields(&[(CLAIM_LABEL.0, All), (OPT_IN_LABEL.0, All)]),
                ),
                ("annotations", Fields(&[(OWNER_ANNOTATION, All)])),
            ]),
        ),
        (
            "spec",
            Fields(&[
                ("replicas", All),
                ("progressDeadlineSeconds", All),
                ("minReadySeconds", All),
                ("paused", All),
                ("strategy", All),
                (
                    "template",
                    Fields(&[
                        (
                            "metadata",
                            Fields(&[(
                                "annotations",
                                Fields(&[(OWNER_ANNOTATION, All), (HASH_ANNOTATION, All)]),
                            )]),
                        ),
                        (
                            "spec",
                            Fields(&[(
                                "containers",
                                Fields(&[
                                    ("name", All),
                                    (
                                        "env",
                                        Fields(&[
                                            ("name", All),
                                            ("value", All),
                                            ("valueFrom", All),
                                        ]),
                                    ),
                                ]),
                            )]),
                        ),
                    ]),
                ),
            ]),
        ),
        (
            "status",
            Fields(&[
                ("observedGeneration", All),
                ("replicas", All),
                ("updatedReplicas", All),
                ("readyReplicas", All),
                ("availableReplicas", All),
                ("unavailableReplicas", All),
                (
                    "conditions",
                    Fields(&[("type", All), ("status", All), ("reason", All)]),
                ),
            ]),
        ),
    ]);

    /// One of our ConfigMaps: identity, owner, labels, owner references
    /// and the two data keys.
    pub const CONFIG_MAP: Shape = Fields(&[
        (
            "metadata",
            Fields(&[
                ("annotations", Fields(&[(OWNER_ANNOTATION, All)])),
                (
                    "labels",
                    Fields(&[(MANAGED_BY_LABEL.0, All), (FAMILY_LABEL, All)]),
                ),
                ("ownerReferences", All),
            ]),
        ),
        ("data", Fields(&[(MANIFEST_KEY, All), (PRELOAD_ENV, All)])),
    ]);

    /// An autoscaler: its name, version and target.
    pub const AUTOSCALER: Shape = Fields(&[
        (
            "metadata",
            Fields(&[("name", All), ("resourceVersion", All)]),
        ),
        ("spec", Fields(&[("scaleTargetRef", All)])),
    ]);
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

    /// `v` as the client decodes it for a resource of `shape`.
    fn pruned(v: &Value, shape: &'static crate::kube::shape::Shape) -> Value {
        let text = v.to_string();
        crate::kube::shape::decode(text.as_bytes(), crate::kube::shape::Pruned::object(shape))
            .unwrap()
    }

    /// A Deployment as an API server returns it: managedFields, a
    /// last-applied annotation, a pod template with more than we read.
    fn full_deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
          "metadata": {"name": "svc", "namespace": "ns", "uid": "d-1", "generation": 5,
            "resourceVersion": "42", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"openmed.ai/managed": "true", "openmed.ai/managed-target": "true", "app": "x"},
            "annotations": {"openmed.ai/model-resource": "ns/m", "deployment.kubernetes.io/revision": "3",
              "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
          "spec": {"replicas": 3, "progressDeadlineSeconds": 600, "minReadySeconds": 5, "paused": false,
            "revisionHistoryLimit": 10, "selector": {"matchLabels": {"app": "x"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "x"}, "annotations": {
                "openmed.ai/model-resource": "ns/m", "openmed.ai/model-manifest-hash": "sha256:ab", "other": "y"}},
              "spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
                {"name": "sidecar", "image": "s:1", "ports": [{"containerPort": 80}]},
                {"name": "openmed-service", "image": "o:1", "resources": {"limits": {"cpu": "1"}},
                 "env": [{"name": "A", "value": "1"},
                   {"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom": {"configMapKeyRef":
                     {"name": "m-model-manifest", "key": "OPENMED_SERVICE_PRELOAD_MODELS"}}}]}]}}},
          "status": {"observedGeneration": 5, "replicas": 4, "updatedReplicas": 3, "readyReplicas": 3,
            "availableReplicas": 3, "unavailableReplicas": 1, "collisionCount": 0, "conditions": [
              {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
               "message": "ok", "lastUpdateTime": "2026-01-01T00:00:00Z"},
              {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
    }

    #[test]
    fn every_view_reads_the_same_of_an_object_decoded_to_its_shape() {
        let d = full_deployment();
        let small = pruned(&d, &shapes::DEPLOYMENT);
        assert_eq!(
            DeploymentView::from_json(&small),
            DeploymentView::from_json(&d)
        );
        assert!(small["metadata"].get("managedFields").is_none());
        assert!(small["spec"]["template"]["spec"].get("volumes").is_none());
        let mut m = converged();
        m["metadata"]["annotations"] = json!({"openmed.ai/rollback-to": " OpenMed/v1 ",
            "openmed.ai/autoscaled": "true", "kubectl.kubernetes.io/last-applied-configuration": "{}"});
        m["metadata"]["finalizers"] = json!(["openmed.ai/finalizer"]);
        m["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        m["metadata"]["resourceVersion"] = json!("77");
        m["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        let pm = pruned(&m, &shapes::MODEL);
        let (decoded, whole) = (
            ModelView::from_decoded(&pm).unwrap(),
            ModelView::from_json(&m),
        );
        assert_eq!(Some(&decoded), whole.as_ref());
        assert_eq!(decoded.phase, Some(Phase::Ready));
        assert_eq!(decoded.spec(), Some(&m["spec"]));
        assert_eq!(decoded.status(), &StatusDoc::from_value(Some(&m["status"])));
        assert!(pm["metadata"].get("managedFields").is_none());
        let cm = json!({"metadata": {"name": "m-model-manifest", "namespace": "ns", "uid": "c-1",
            "resourceVersion": "9", "annotations": {"openmed.ai/model-resource": "ns/m"},
            "labels": {"app.kubernetes.io/managed-by": "openmed-operator", "openmed.ai/model-family": "PII"},
            "ownerReferences": [{"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel", "name": "m",
              "uid": "u", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "openmed-operator"}]},
          "data": {"manifest.json": "{}\n", "OPENMED_SERVICE_PRELOAD_MODELS": "OpenMed/v1", "x": "y"}});
        let pc = pruned(&cm, &shapes::CONFIG_MAP);
        assert_eq!(ConfigMapView::from_json(&pc), ConfigMapView::from_json(&cm));
        assert!(pc["data"].get("x").is_none());
    }

    #[test]
    fn retained_specs_read_from_the_text_are_those_of_the_parsed_status() {
        let mut m = converged();
        let mut other = m["spec"].clone();
        other["targetRef"]["name"] = json!("old-api");
        m["status"]["previousSuccessfulSpec"] = other;
        m["status"]["rollbackSpec"] = json!({"family": 7});
        // A copy of its own: nothing parsed yet (the recent parses are
        // keyed by text, and this text is new).
        let fresh = ModelView::from_json(&m).unwrap();
        let from_text = fresh.retained_specs();
        assert!(
            fresh.parts().status.get().is_none(),
            "the status was parsed"
        );
        assert_eq!(from_text.len(), 2);
        assert_eq!(from_text, fresh.status().retained_specs("onc"));
        assert_eq!(from_text[1].target.name, "old-api");
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
