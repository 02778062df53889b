//! The operator's story as a user lives it, written once over [`Cluster`]:
//! the same steps run on kubesim and on the real control plane. Each step
//! ends at a checkpoint that records what a user sees there (phase,
//! conditions, Events, the Deployment fields the operator writes), which the
//! differential compares (`diff.rs`).

use crate::cluster::Cluster;
use crate::harness::wait_for;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const V1: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1";
pub const V2: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2";
pub const BAD: &str = "OpenMed/OpenMed-PII-unloadable-v3";
pub const MODEL: (&str, &str) = ("openmed.ai/v1alpha1", "OpenMedModel");
pub const PRELOAD: &str = "OPENMED_SERVICE_PRELOAD_MODELS";

/// What a user sees at one checkpoint, field by field.
pub type Seen = BTreeMap<String, String>;

/// One run of the story in namespace `ns` of a cluster.
pub struct Story<'a> {
    pub c: &'a dyn Cluster,
    pub ns: String,
    /// Checkpoint name → what was seen there, in the order reached.
    pub checkpoints: Vec<(String, Seen)>,
}

impl<'a> Story<'a> {
    /// A story in a new namespace `ns`, which it creates.
    pub fn new(c: &'a dyn Cluster, ns: &str) -> Story<'a> {
        c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap_or_else(|e| panic!("creating namespace {ns} on {}: {e}", c.name()));
        Story {
            c,
            ns: ns.to_string(),
            checkpoints: Vec::new(),
        }
    }

    /// A Deployment in the story's namespace, opted in (or not), `replicas`
    /// pods: the end-to-end harness's own.
    pub fn deployment(&self, name: &str, replicas: i64, opted_in: bool) {
        let mut d = crate::harness::deployment(name, replicas);
        d["metadata"]["namespace"] = json!(self.ns);
        if !opted_in {
            d["metadata"]["labels"] = json!({"app": name});
        }
        self.c
            .create(d)
            .unwrap_or_else(|e| panic!("creating Deployment {name}: {e}"));
    }

    /// An OpenMedModel `name` on Deployment `target`.
    pub fn model(&self, name: &str, target: &str, version: &str, deadline: i64) {
        let m = json!({
            "apiVersion": MODEL.0, "kind": MODEL.1,
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "family": "PII", "version": version, "tier": "Small", "replicas": 2,
                "rolloutStrategy": {"type": "RollingUpdate", "progressDeadlineSeconds": deadline},
                "targetRef": {"name": target},
            },
        });
        self.c
            .create(m)
            .unwrap_or_else(|e| panic!("creating OpenMedModel {name}: {e}"));
    }

    pub fn patch_model(&self, name: &str, patch: Value) {
        self.c
            .merge_patch(MODEL.0, MODEL.1, &self.ns, name, &patch)
            .unwrap_or_else(|e| panic!("patching OpenMedModel {name}: {e}"));
    }

    pub fn status(&self, name: &str) -> Value {
        self.c
            .object("openmed.ai", "openmedmodels", &self.ns, name)
            .map(|m| m["status"].clone())
            .unwrap_or(Value::Null)
    }

    pub fn deploy(&self, name: &str) -> Value {
        self.c
            .object("apps", "deployments", &self.ns, name)
            .unwrap_or_else(|| panic!("Deployment {}/{name} is gone", self.ns))
    }

    /// Waits until `done` holds of the model's status, and returns it.
    pub fn wait_status(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        wait_for(
            &format!("{what} on {}", self.c.name()),
            || self.status(name),
            done,
        )
    }

    /// Ready and serving `version`.
    pub fn wait_serving(&self, name: &str, version: &str) -> Value {
        self.wait_status(name, &format!("{name} to serve {version}"), |s| {
            s["phase"] == "Ready" && s["desiredVersion"] == version && s["activeVersion"] == version
        })
    }

    /// The model's Events: reason → the sum of their counts.
    pub fn events(&self, name: &str) -> BTreeMap<String, i64> {
        let mut by_reason = BTreeMap::new();
        for e in self.c.objects("", "events", Some(&self.ns)) {
            if e["involvedObject"]["name"] != name || e["involvedObject"]["kind"] != MODEL.1 {
                continue;
            }
            let reason = e["reason"].as_str().unwrap_or("").to_string();
            *by_reason.entry(reason).or_insert(0) += e["count"].as_i64().unwrap_or(1);
        }
        by_reason
    }

    /// Waits for an Event of `reason` on the model: Events follow the status
    /// patch that announces them.
    pub fn wait_event(&self, name: &str, reason: &str) {
        self.wait_events(name, &[(reason, 1)]);
    }

    /// Waits until the model's Events of each reason count at least so many,
    /// so that a checkpoint never races the Events its step posts.
    pub fn wait_events(&self, name: &str, want: &[(&str, i64)]) {
        wait_for(
            &format!("Events {want:?} for {name} on {}", self.c.name()),
            || self.events(name),
            |evs| {
                want.iter()
                    .all(|(r, n)| evs.get(*r).copied().unwrap_or(0) >= *n)
            },
        );
    }

    /// Records what a user sees of model `name` and its Deployment `target`.
    pub fn checkpoint(&mut self, step: &str, name: &str, target: &str) {
        let seen = self.seen(name, target);
        self.checkpoints.push((step.to_string(), seen));
    }

    /// What a user sees of model `name` and its Deployment `target`: the
    /// phase, each condition, the versions, the Events by reason, the
    /// Deployment fields the operator writes.
    pub fn seen(&self, name: &str, target: &str) -> Seen {
        let mut seen = Seen::new();
        let s = self.status(name);
        seen.insert("phase".into(), text(&s["phase"]));
        for c in s["conditions"].as_array().into_iter().flatten() {
            let ty = text(&c["type"]);
            seen.insert(
                format!("condition {ty}"),
                format!("{} {}", text(&c["status"]), text(&c["reason"])),
            );
        }
        for f in [
            "desiredVersion",
            "activeVersion",
            "rollbackRequest",
            "rollbackCount",
        ] {
            seen.insert(f.into(), text(&s[f]));
        }
        for (reason, count) in self.events(name) {
            seen.insert(format!("events {reason}"), count.to_string());
        }
        if let Some(d) = self.c.object("apps", "deployments", &self.ns, target) {
            for (k, v) in written_fields(&d) {
                seen.insert(k, v);
            }
        }
        seen
    }
}

/// The Deployment fields the operator writes (§3): the preload variable, the
/// template's and the Deployment's annotations and labels of ours, replicas.
pub fn written_fields(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &containers {
        for e in c["env"].as_array().into_iter().flatten() {
            if e["name"] == PRELOAD {
                out.push((
                    format!("deployment env {}", text(&c["name"])),
                    e.to_string(),
                ));
            }
        }
    }
    for (at, map) in [
        ("deployment annotation", &d["metadata"]["annotations"]),
        ("deployment label", &d["metadata"]["labels"]),
        (
            "template annotation",
            &d["spec"]["template"]["metadata"]["annotations"],
        ),
    ] {
        for (k, v) in map.as_object().into_iter().flatten() {
            if k.starts_with("openmed.ai/") {
                // The hash is the same on both clusters only if the manifest is: compare it whole.
                out.push((format!("{at} {k}"), text(v)));
            }
        }
    }
    out.push(("deployment replicas".into(), text(&d["spec"]["replicas"])));
    out.push((
        "deployment progressDeadlineSeconds".into(),
        text(&d["spec"]["progressDeadlineSeconds"]),
    ));
    out
}

/// A JSON value as a table cell: strings bare, absent as "-".
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
