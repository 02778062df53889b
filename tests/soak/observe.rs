//! What the checks and the driver read: values derived from the API's
//! objects (the desired spec, the manifest and its digest, owners, what a
//! user owns in a Deployment), helpers over kubesim's request log, and a
//! snapshot of the cluster taken at one moment.

use crate::{CLAIM, CONTAINER, OWNER, PRELOAD, ROLLBACK_TO};
use kubesim::faults::RequestRecord;
use kubesim::Sim;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

// ------------------------------------------------------- derived values ----

pub fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The desired spec of §2.2: the spec with every default filled in.
pub fn desired(m: &Value) -> Value {
    let sp = &m["spec"];
    let name = s(&m["metadata"]["name"]);
    let rs = &sp["rolloutStrategy"];
    let or = |v: &Value, d: Value| if v.is_null() { d } else { v.clone() };
    let trimmed = |v: &Value| json!(s(v).trim());
    json!({
        "family": trimmed(&sp["family"]),
        "version": trimmed(&sp["version"]),
        "tier": trimmed(&sp["tier"]),
        "replicas": sp["replicas"],
        "rolloutStrategy": {
            "type": trimmed(&rs["type"]),
            "maxUnavailable": or(&rs["maxUnavailable"], json!(0)),
            "maxSurge": or(&rs["maxSurge"], json!(1)),
            "rollbackOnFailure": or(&rs["rollbackOnFailure"], json!(true)),
            "progressDeadlineSeconds": or(&rs["progressDeadlineSeconds"], json!(600)),
        },
        "targetRef": {
            "name": or(&sp["targetRef"]["name"], json!(name)),
            "containerName": or(&sp["targetRef"]["containerName"], json!(CONTAINER)),
        },
        "manifestConfigMapName": or(&sp["manifestConfigMapName"], json!(format!("{name}-model-manifest"))),
    })
}

/// The CRD's CEL rule: a RollingUpdate with both maxSurge and
/// maxUnavailable zero cannot progress.
pub fn valid(d: &Value) -> bool {
    let zero = |v: &Value| *v == json!(0) || *v == json!("0%");
    let rs = &d["rolloutStrategy"];
    !(rs["type"] == "RollingUpdate" && zero(&rs["maxSurge"]) && zero(&rs["maxUnavailable"]))
}

pub fn unloadable(version: &str) -> bool {
    version.contains("unloadable")
}

/// The canonical manifest of §2.4 (keys written in sorted order).
pub fn manifest_json(spec: &Value) -> String {
    format!(
        "{{\"apiVersion\":\"openmed.ai/v1alpha1\",\"kind\":\"OpenMedModelManifest\",\"models\":[{{\"family\":{},\"tier\":{},\"version\":{}}}]}}",
        spec["family"], spec["tier"], spec["version"]
    )
}

pub fn digest(text: &str) -> String {
    format!("sha256:{:x}", Sha256::digest(text.as_bytes()))
}

pub fn rollback_to(m: &Value) -> Option<String> {
    let v = s(&m["metadata"]["annotations"][ROLLBACK_TO]).trim();
    (!v.is_empty()).then(|| v.to_string())
}

pub fn cond(st: &Value, i: usize) -> (&str, &str) {
    let c = &st["conditions"][i];
    (s(&c["status"]), s(&c["reason"]))
}

pub fn container<'a>(dep: &'a Value, name: &str) -> Option<&'a Value> {
    dep["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

pub fn preload_env(c: &Value) -> Option<&Value> {
    c["env"].as_array()?.iter().find(|e| e["name"] == PRELOAD)
}

/// Owners named by a Deployment's metadata and pod template annotations.
pub fn owners(dep: &Value) -> Vec<&str> {
    [
        &dep["metadata"]["annotations"][OWNER],
        &dep["spec"]["template"]["metadata"]["annotations"][OWNER],
    ]
    .into_iter()
    .filter_map(|v| v.as_str())
    .filter(|o| !o.is_empty())
    .collect()
}

/// What a user owns in a Deployment: containers without the preload env
/// var, labels and annotations without the operator's keys.
pub fn user_view(dep: &Value) -> Value {
    let mut containers = dep["spec"]["template"]["spec"]["containers"].clone();
    if let Some(cs) = containers.as_array_mut() {
        for c in cs {
            if let Some(env) = c["env"].as_array_mut() {
                env.retain(|e| e["name"] != PRELOAD);
            }
        }
    }
    let strip = |v: &Value, prefixes: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        if let Some(o) = v.as_object() {
            for (k, x) in o {
                if !prefixes.iter().any(|p| k.starts_with(p)) {
                    out.insert(k.clone(), x.clone());
                }
            }
        }
        Value::Object(out)
    };
    let meta = &dep["metadata"];
    let tmeta = &dep["spec"]["template"]["metadata"];
    json!({
        "containers": containers,
        "labels": strip(&meta["labels"], &[CLAIM]),
        "annotations": strip(&meta["annotations"], &["openmed.ai/", "deployment.kubernetes.io/"]),
        "templateLabels": strip(&tmeta["labels"], &[]),
        "templateAnnotations": strip(&tmeta["annotations"], &["openmed.ai/"]),
    })
}

pub fn is_write(r: &RequestRecord) -> bool {
    matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
}

pub fn on_object(r: &RequestRecord, collection: &str, ns: &str, name: &str) -> bool {
    let p = format!("/namespaces/{ns}/{collection}/{name}");
    r.path.ends_with(&p) || r.path.contains(&format!("{p}/"))
}

pub fn describe(r: &RequestRecord) -> String {
    format!("{} {} -> {} at {} ms", r.method, r.path, r.status, r.at_ms)
}

/// The operator's watch streams seen in the request log, each named by
/// resource, label selector and metadata-only; each stream's latest
/// successful watch must be at or after `since_ms`. Ok(when the last one
/// came back), or Err(the streams not back yet).
pub fn watches_back_at(requests: &[RequestRecord], since_ms: u64) -> Result<u64, Vec<String>> {
    let mut latest: BTreeMap<String, u64> = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.verb == "watch" && r.status == 200)
    {
        let selector = r
            .query
            .split('&')
            .find_map(|kv| kv.strip_prefix("labelSelector="))
            .unwrap_or("");
        let key = format!(
            "{}{}{}",
            r.resource,
            if selector.is_empty() {
                String::new()
            } else {
                format!("?{selector}")
            },
            if r.accept.contains("PartialObjectMetadata") {
                " (metadata)"
            } else {
                ""
            }
        );
        let e = latest.entry(key).or_insert(0);
        *e = (*e).max(r.at_ms);
    }
    let missing: Vec<String> = latest
        .iter()
        .filter(|(_, at)| **at < since_ms)
        .map(|(k, _)| k.clone())
        .collect();
    if missing.is_empty() {
        Ok(latest.values().copied().max().unwrap_or(0))
    } else {
        Err(missing)
    }
}

/// What a read-modify-write as `kubectl edit` does came to.
pub enum Edit {
    Done(Value),
    /// Nothing to edit.
    Absent,
    Refused(String),
    /// Eight conflicts running.
    GaveUp,
}

/// A read-modify-write of a Deployment as `kubectl edit` does: `read` it,
/// `edit` it, send its annotations and template with the resourceVersion
/// read as a precondition through `patch`, again on a conflict.
pub fn edit_deployment(
    read: impl Fn() -> Option<Value>,
    patch: impl Fn(&Value) -> Result<Value, String>,
    edit: impl Fn(&mut Value),
) -> Edit {
    for _ in 0..8 {
        let Some(mut obj) = read() else {
            return Edit::Absent;
        };
        let rv = obj["metadata"]["resourceVersion"].clone();
        edit(&mut obj);
        let body = json!({
            "metadata": {"resourceVersion": rv, "annotations": obj["metadata"]["annotations"]},
            "spec": {"template": obj["spec"]["template"]},
        });
        match patch(&body) {
            Ok(after) => return Edit::Done(after),
            Err(e) if e.contains("modified") || e.contains("onflict") => continue,
            Err(e) => return Edit::Refused(e),
        }
    }
    Edit::GaveUp
}

/// The data a hand edit of the operator's ConfigMap `cm` writes (its
/// preload, its manifest, or a key of its own, by `kind`), or why it is
/// skipped.
pub fn config_map_edit(cm: Option<&Value>, kind: u64) -> Result<Value, &'static str> {
    let cm = cm.ok_or("skipped: no ConfigMap")?;
    if cm["metadata"]["labels"][crate::MANAGED_BY] != "openmed-operator" {
        return Err("skipped: not the operator's");
    }
    Ok(match kind {
        0 => json!({ PRELOAD: "OpenMed/hand-edited" }),
        1 => json!({"manifest.json": "{}"}),
        _ => json!({"note": "added by hand"}),
    })
}

// ----------------------------------------------------------- snapshots ----

/// Everything the checks read, taken at one moment.
pub struct Snap {
    pub models: Vec<Value>,
    pub deps: Vec<Value>,
    pub cms: Vec<Value>,
    pub events: Vec<Value>,
}

pub fn find<'a>(list: &'a [Value], ns: &str, name: &str) -> Option<&'a Value> {
    list.iter()
        .find(|o| o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name)
}

impl Snap {
    pub fn take(sim: &Sim) -> Snap {
        Snap {
            models: sim.objects("openmed.ai", "openmedmodels", None),
            deps: sim.objects("apps", "deployments", None),
            cms: sim.objects("", "configmaps", None),
            events: sim.objects("", "events", None),
        }
    }
    pub fn model(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.models, ns, name)
    }
    pub fn live(&self, ns: &str, name: &str) -> Option<&Value> {
        self.model(ns, name)
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
    }
    pub fn dep(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.deps, ns, name)
    }
    pub fn cm(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.cms, ns, name)
    }
}

/// Why a model is not settled yet, if it is not.
pub fn busy(m: &Value) -> Option<String> {
    let st = &m["status"];
    if !m["metadata"]["deletionTimestamp"].is_null() {
        return Some("being deleted".into());
    }
    if st.is_null() {
        return Some("no status yet".into());
    }
    if st["observedGeneration"] != m["metadata"]["generation"] {
        return Some(format!(
            "observedGeneration {} of generation {}",
            st["observedGeneration"], m["metadata"]["generation"]
        ));
    }
    if st["phase"] == "RollingOut" {
        return Some("RollingOut".into());
    }
    let (status, reason) = cond(st, 1);
    if status != "False" {
        return Some(format!("Progressing={status}/{reason}"));
    }
    None
}

/// A Deployment's rollout state in one line, naming the Deployment
/// controller's Recreate wedge when it looks like one: a replica change
/// while two or more ReplicaSets are active (an old rollout still under way)
/// is a "scaling event" on every sync (upstream `isScalingEvent`), `scale`
/// does nothing for Recreate with several active sets unless the new one is
/// saturated, and the deadline (`syncRolloutStatus`) is never judged.
pub fn deployment_diagnosis(dep: &Value) -> String {
    let (sp, st) = (&dep["spec"], &dep["status"]);
    let progressing = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .unwrap_or_default();
    // Called after a minute without progress: a deadline (at most 6 s here)
    // would have fired long ago if `syncRolloutStatus` still ran.
    let wedged = sp["strategy"]["type"] == "Recreate"
        && st["observedGeneration"] == dep["metadata"]["generation"]
        && (st["replicas"] != sp["replicas"] || st["updatedReplicas"] != sp["replicas"])
        && progressing["status"] == "True";
    format!(
        "{}generation {} observed {}, spec replicas {} strategy {}, status replicas {} updated {} available {}, Progressing {}/{} since {}",
        if wedged {
            "WEDGED (Recreate with a replica change while several ReplicaSets are active: upstream isScalingEvent/scale never roll it out nor judge its deadline): "
        } else {
            ""
        },
        dep["metadata"]["generation"],
        st["observedGeneration"],
        sp["replicas"],
        sp["strategy"]["type"],
        st["replicas"],
        st["updatedReplicas"],
        st["availableReplicas"],
        s(&progressing["status"]),
        s(&progressing["reason"]),
        s(&progressing["lastUpdateTime"]),
    )
}
