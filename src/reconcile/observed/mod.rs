//! Compact views of what was observed: the OpenMedModel, its target
//! Deployment and its manifest ConfigMap. Caches hold these rather than whole
//! objects (no managedFields, no unrelated fields), and the core judges them.
//! Parsing is lenient: a field of the wrong shape reads as absent.

use crate::kube::key::ObjectKey;
use crate::model::{
    AUTOSCALED_ANNOTATION, CLAIM_LABEL, MANAGED_BY_LABEL, MANIFEST_KEY, OWNER_ANNOTATION,
    PRELOAD_ENV, ROLLBACK_ANNOTATION,
};
use crate::model::{FAMILY_LABEL, HASH_ANNOTATION, OPT_IN_LABEL};
use serde_json::Value;

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// A string of a small vocabulary: condition types, statuses and reasons,
/// strategy types, an owner's kind. A known word is borrowed from
/// [`WORDS`], not copied into each of thousands of views that hold the same
/// few (docs/performance.md, memory per resource); any other is kept.
pub type Word = std::borrow::Cow<'static, str>;

/// The words views hold most: the Deployment controller's condition types,
/// statuses and reasons (upstream `deploymentutil`), the strategy types,
/// and what the operator itself writes.
const WORDS: &[&str] = &[
    "Available",
    "Progressing",
    "ReplicaFailure",
    "True",
    "False",
    "Unknown",
    "NewReplicaSetAvailable",
    "MinimumReplicasAvailable",
    "MinimumReplicasUnavailable",
    "ReplicaSetUpdated",
    "NewReplicaSetCreated",
    "FoundNewReplicaSet",
    "ProgressDeadlineExceeded",
    "DeploymentPaused",
    "DeploymentResumed",
    "FailedCreate",
    "FailedDelete",
    "RollingUpdate",
    "Recreate",
    crate::model::API_VERSION,
    crate::model::KIND,
    MANAGED_BY_LABEL.1,
];

/// `text` as a [`Word`]: borrowed if it is one of [`WORDS`].
pub fn word(text: &str) -> Word {
    match WORDS.iter().find(|w| **w == text) {
        Some(w) => Word::Borrowed(w),
        None => Word::Owned(text.to_string()),
    }
}

fn word_of(v: &Value) -> Word {
    word(v.as_str().unwrap_or(""))
}

/// Where a view's object lives, read from the one key it holds (shared
/// with the caches): its namespace, its name, and a copy of the key.
macro_rules! keyed_view {
    ($($view:ty),*) => {$(
        impl $view {
            pub fn namespace(&self) -> &str {
                self.key.namespace()
            }

            pub fn name(&self) -> &str {
                self.key.name()
            }

            /// Its key in the caches: a copy of the one it holds.
            pub fn key(&self) -> ObjectKey {
                self.key.clone()
            }
        }
    )*};
}
pub(crate) use keyed_view;
keyed_view!(DeploymentView, ConfigMapView);

fn meta_str(obj: &Value, key: &str) -> String {
    obj["metadata"][key].as_str().unwrap_or("").to_string()
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    s(&obj["metadata"]["annotations"][key])
}

mod decode;
mod model;
pub use model::{ModelData, ModelObject, ModelView};

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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployCondition {
    pub type_: Word,
    pub status: Word,
    pub reason: Word,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentView {
    /// Namespace and name, the one allocation the caches key it by.
    key: ObjectKey,
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
    pub strategy_type: Option<Word>,
    pub max_unavailable: Option<Value>,
    pub max_surge: Option<Value>,
    pub has_rolling_update: bool,
    pub template_owner: Option<String>,
    /// The pod template's manifest hash as its raw SHA-256
    /// ([`crate::model::canonical::parse_digest`]): only compared with the
    /// desired one (§6.9); none when absent or not a digest of ours.
    pub template_hash: Option<[u8; 32]>,
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
        let key = ObjectKey::of(v).filter(|k| !k.name().is_empty())?;
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
            key,
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
            strategy_type: spec["strategy"]["type"].as_str().map(word),
            max_unavailable: spec["strategy"]["rollingUpdate"]
                .get("maxUnavailable")
                .cloned(),
            max_surge: spec["strategy"]["rollingUpdate"].get("maxSurge").cloned(),
            has_rolling_update: !spec["strategy"]["rollingUpdate"].is_null(),
            template_owner: s(&tmpl_ann[OWNER_ANNOTATION]),
            template_hash: tmpl_ann[HASH_ANNOTATION]
                .as_str()
                .and_then(crate::model::canonical::parse_digest),
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
                            type_: word_of(&c["type"]),
                            status: word_of(&c["status"]),
                            reason: word_of(&c["reason"]),
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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: Word,
    pub kind: Word,
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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigMapView {
    /// Namespace and name, the one allocation the caches key it by.
    key: ObjectKey,
    pub uid: String,
    pub resource_version: String,
    pub owner: Option<String>,
    pub managed_by: Option<Word>,
    pub family: Option<String>,
    pub owner_refs: Vec<OwnerRef>,
    /// What [`manifest_digest`] keeps of `manifest.json`: the text is only
    /// compared with the desired one (§6.9), so its ~150 bytes a model are
    /// not kept (docs/performance.md, memory per resource).
    pub manifest: Option<[u8; 32]>,
    pub preload: Option<String>,
}

/// What [`ConfigMapView::manifest`] keeps of a `manifest.json` text: the
/// SHA-256 of the text before its final newline, which the desired text
/// always ends with, so that it compares with the manifest hash the pass
/// has already made (`DesiredSpec::manifest_hash`); none without it, as
/// no desired text is then equal.
pub fn manifest_digest(text: &str) -> Option<[u8; 32]> {
    let canonical = text.strip_suffix('\n')?;
    Some(crate::model::canonical::sha256(canonical.as_bytes()))
}

impl ConfigMapView {
    pub fn from_json(v: &Value) -> Option<ConfigMapView> {
        let key = ObjectKey::of(v).filter(|k| !k.name().is_empty())?;
        let labels = &v["metadata"]["labels"];
        Some(ConfigMapView {
            key,
            uid: meta_str(v, "uid"),
            resource_version: meta_str(v, "resourceVersion"),
            owner: annotation(v, OWNER_ANNOTATION),
            managed_by: labels[MANAGED_BY_LABEL.0].as_str().map(word),
            family: s(&labels[FAMILY_LABEL]),
            owner_refs: v["metadata"]["ownerReferences"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .map(|r| OwnerRef {
                            api_version: word_of(&r["apiVersion"]),
                            kind: word_of(&r["kind"]),
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
            manifest: v["data"][MANIFEST_KEY].as_str().and_then(manifest_digest),
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
pub(super) mod tests {
    use super::model::tests::converged;
    use super::*;
    use crate::model::status::{ModelStatus, Phase};
    use serde_json::json;

    /// `v` as the client decodes it for a resource of `shape`.
    fn pruned(v: &Value, shape: &'static crate::kube::shape::Shape) -> Value {
        let text = v.to_string();
        crate::kube::shape::decode(text.as_bytes(), crate::kube::shape::Pruned::object(shape))
            .unwrap()
    }

    /// A Deployment as an API server returns it: managedFields, a
    /// last-applied annotation, a pod template with more than we read.
    pub(super) fn full_deployment() -> Value {
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
                   {"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": "hand-set", "valueFrom": {"configMapKeyRef":
                     {"name": "m-model-manifest", "key": "OPENMED_SERVICE_PRELOAD_MODELS"}}}]}]}}},
          "status": {"observedGeneration": 5, "replicas": 4, "updatedReplicas": 3, "readyReplicas": 3,
            "availableReplicas": 3, "unavailableReplicas": 1, "collisionCount": 0, "conditions": [
              {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
               "message": "ok", "lastUpdateTime": "2026-01-01T00:00:00Z"},
              {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
    }

    /// One of our ConfigMaps as an API server returns it.
    pub(super) fn full_config_map() -> Value {
        json!({"metadata": {"name": "m-model-manifest", "namespace": "ns", "uid": "c-1",
            "resourceVersion": "9", "annotations": {"openmed.ai/model-resource": "ns/m"},
            "labels": {"app.kubernetes.io/managed-by": "openmed-operator", "openmed.ai/model-family": "PII"},
            "ownerReferences": [{"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel", "name": "m",
              "uid": "u", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "openmed-operator"}]},
          "data": {"manifest.json": "{}\n", "OPENMED_SERVICE_PRELOAD_MODELS": "OpenMed/v1", "x": "y"}})
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
        assert_eq!(
            decoded.status(),
            &ModelStatus::from_value(Some(&m["status"]))
        );
        assert!(pm["metadata"].get("managedFields").is_none());
        let cm = full_config_map();
        let pc = pruned(&cm, &shapes::CONFIG_MAP);
        assert_eq!(ConfigMapView::from_json(&pc), ConfigMapView::from_json(&cm));
        assert!(pc["data"].get("x").is_none());
    }
}
