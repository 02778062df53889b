//! What a scenario does to a cluster and reads back, the same on kubesim and
//! on the real control plane, so that one scenario runs on both and the
//! differential compares what a user sees.

use kubesim::Sim;
use serde_json::Value;

/// The kinds the scenarios touch: apiVersion, kind, group, plural, namespaced.
const KINDS: &[(&str, &str, &str, &str, bool)] = &[
    ("v1", "Namespace", "", "namespaces", false),
    ("v1", "ConfigMap", "", "configmaps", true),
    ("v1", "Event", "", "events", true),
    ("v1", "Pod", "", "pods", true),
    ("v1", "ServiceAccount", "", "serviceaccounts", true),
    ("apps/v1", "Deployment", "apps", "deployments", true),
    ("apps/v1", "ReplicaSet", "apps", "replicasets", true),
    (
        "coordination.k8s.io/v1",
        "Lease",
        "coordination.k8s.io",
        "leases",
        true,
    ),
    (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "autoscaling",
        "horizontalpodautoscalers",
        true,
    ),
    (
        "openmed.ai/v1alpha1",
        "OpenMedModel",
        "openmed.ai",
        "openmedmodels",
        true,
    ),
];

/// A cluster as a scenario sees it.
pub trait Cluster {
    /// Which one, for the differential's table.
    fn name(&self) -> &'static str;
    fn create(&self, obj: Value) -> Result<Value, String>;
    /// A JSON merge patch of the main resource.
    fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, String>;
    fn delete(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Result<(), String>;
    fn object(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value>;
    fn objects(&self, group: &str, plural: &str, ns: Option<&str>) -> Vec<Value>;
    /// The requests user agent `agent` made so far in namespace `ns`, as (verb, resource).
    fn requests_of(&self, agent: &str, ns: &str) -> Vec<(String, String)>;
}

impl Cluster for Sim {
    fn name(&self) -> &'static str {
        "kubesim"
    }
    fn create(&self, obj: Value) -> Result<Value, String> {
        Sim::create(self, obj)
    }
    fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, String> {
        Sim::merge_patch(self, api_version, kind, ns, name, patch)
    }
    fn delete(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Result<(), String> {
        Sim::delete(self, api_version, kind, ns, name)
    }
    fn object(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        Sim::object(self, group, plural, ns, name)
    }
    fn objects(&self, group: &str, plural: &str, ns: Option<&str>) -> Vec<Value> {
        Sim::objects(self, group, plural, ns)
    }
    fn requests_of(&self, agent: &str, ns: &str) -> Vec<(String, String)> {
        let within = format!("/namespaces/{ns}/");
        self.requests()
            .into_iter()
            .filter(|r| r.user_agent.starts_with(agent) && r.path.contains(&within))
            .map(|r| (r.verb, r.resource))
            .collect()
    }
}

/// The REST path of a collection, or of one object when `name` is given.
pub fn path(group: &str, plural: &str, ns: Option<&str>, name: Option<&str>) -> String {
    let (_, _, _, _, namespaced) = KINDS
        .iter()
        .find(|k| k.2 == group && k.3 == plural)
        .copied()
        .unwrap_or(("", "", group, plural, true));
    let version = KINDS
        .iter()
        .find(|k| k.2 == group && k.3 == plural)
        .map(|k| k.0.rsplit('/').next().unwrap_or("v1"))
        .unwrap_or("v1");
    let mut p = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    if let (true, Some(ns)) = (namespaced, ns) {
        p += &format!("/namespaces/{ns}");
    }
    p += &format!("/{plural}");
    if let Some(n) = name {
        p += &format!("/{n}");
    }
    p
}

/// The group and plural of a kind.
pub fn resource_of(api_version: &str, kind: &str) -> Result<(&'static str, &'static str), String> {
    KINDS
        .iter()
        .find(|k| k.0 == api_version && k.1 == kind)
        .map(|k| (k.2, k.3))
        .ok_or_else(|| format!("the scenarios know no kind {kind} in {api_version}"))
}

/// The message of a Status the server answered with.
pub fn refusal(code: u16, body: &Value) -> String {
    format!(
        "{code}: {}",
        body["message"].as_str().unwrap_or(&body.to_string())
    )
}
