//! The OpenMedModel resource: validation into a desired spec, the derived
//! values of the contract (canonical JSON, digests, names, the manifest),
//! and the status vocabulary.

pub mod canonical;
pub mod names;
pub mod spec;
pub mod status;

pub use spec::{validate, DesiredSpec, SpecError};
pub use status::{EventReason, ModelStatus, Phase, Reason};

pub const GROUP: &str = "openmed.ai";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "OpenMedModel";
pub const API_VERSION: &str = "openmed.ai/v1alpha1";

/// The finalizer this operator keeps on resources it has acted on.
pub const FINALIZER: &str = "openmed.ai/finalizer";
/// The reference (Kopf) operator's finalizer, treated as ours.
pub const KOPF_FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
/// Annotation naming the owning OpenMedModel (`<namespace>/<name>`).
pub const OWNER_ANNOTATION: &str = "openmed.ai/model-resource";
/// Pod-template annotation carrying the manifest hash.
pub const HASH_ANNOTATION: &str = "openmed.ai/model-manifest-hash";
/// OpenMedModel annotation (`"true"`): the target's replicas belong to an
/// autoscaler, so the operator never sets them.
pub const AUTOSCALED_ANNOTATION: &str = "openmed.ai/autoscaled";
/// Annotation asking for a manual rollback.
pub const ROLLBACK_ANNOTATION: &str = "openmed.ai/rollback-to";
/// Label on managed ConfigMaps (and the value).
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "openmed-operator");
/// Label on managed ConfigMaps naming the model family.
pub const FAMILY_LABEL: &str = "openmed.ai/model-family";
/// Label the operator puts on a Deployment it has claimed, so that claimed
/// Deployments can be watched with a label selector.
pub const CLAIM_LABEL: (&str, &str) = ("openmed.ai/managed", "true");
/// The label by which a Deployment opts in to being a target (9.8).
pub const OPT_IN_LABEL: (&str, &str) = ("openmed.ai/managed-target", "true");
/// The env var pointing the service at its model.
pub const PRELOAD_ENV: &str = "OPENMED_SERVICE_PRELOAD_MODELS";
/// The ConfigMap key holding the manifest.
pub const MANIFEST_KEY: &str = "manifest.json";

/// The OpenMedModel kind, for request paths.
pub const RESOURCE: crate::kube::ResourceType = crate::kube::ResourceType {
    group: GROUP,
    version: VERSION,
    plural: "openmedmodels",
    kind: KIND,
    namespaced: true,
};
