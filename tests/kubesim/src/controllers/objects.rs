//! The ReplicaSets and pods the simulated controllers keep, served as API
//! objects (apps/v1 `replicasets`, core/v1 `pods`), so that `kubectl get
//! pods`, `get rs`, `rollout history` and `describe` see what the
//! Deployment status was computed from.
//!
//! The controllers' state ([`State`]) stays the source of truth; after each
//! sync this writes what changed of it into the store, as the upstream
//! controllers and the kubelet write it: a ReplicaSet as
//! `getNewReplicaSet` makes one (labels and selector with
//! `pod-template-hash`, the Deployment's annotations as
//! `copyDeploymentAnnotationsToReplicaSet` copies them, `revision`,
//! `desired-replicas`, `max-replicas`, a controller reference), its status
//! as `calculateStatus` in `pkg/controller/replicaset` counts it; a pod as
//! `GetPodFromTemplate` makes one, its status as the kubelet's
//! `generateAPIPodStatus` reports it. An object deleted through the API is
//! forgotten by the state ([`State::forget`]), so the next sync replaces
//! it, as `manageReplicas` does.

use crate::apiserver::time::rfc3339;
use crate::controllers::deployment::{Pod, ReplicaSet, State, REVISION};
use crate::registry::kinds::FieldValidation;
use crate::registry::resources::ResourceDef;
use crate::registry::store::{EvKind, Preconditions, Store};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
/// The node every simulated pod runs on.
pub const NODE: &str = "kubesim-node";
/// What a pod's preload variable resolved to when it started (the value
/// that decides whether its model loads): kubesim's own annotation, since
/// a real pod does not show resolved env.
pub const PRELOAD_ANNOTATION: &str = "kubesim.openmed.ai/preload";

/// How a pod's containers started, decided once, when it starts (env is
/// resolved then, as on a node).
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// The preload variable's value, if the pod has one that resolved.
    pub preload: Option<String>,
    /// Why its containers could not be created (`CreateContainerConfigError`).
    pub config_error: Option<String>,
}

/// The API objects of the simulated ReplicaSets and pods.
#[derive(Default)]
pub struct Objects {
    /// What was last written of each object, by (kind, namespace, name):
    /// the main part and the status, so an unchanged one is not written.
    written: HashMap<(&'static str, String, String), (Value, Value)>,
    /// Each Deployment's objects at the last projection, by its uid.
    owned: HashMap<String, Owned>,
    /// How each pod started, by (namespace, name).
    starts: HashMap<(String, String), Start>,
    /// The store's resourceVersion up to which deletions were looked at.
    cursor: u64,
}

#[derive(Default)]
struct Owned {
    namespace: String,
    sets: Vec<String>,
    pods: Vec<String>,
}

/// One Deployment's inputs to [`Objects::project`].
pub struct Source<'a> {
    pub deployment: &'a Value,
    pub state: &'a State,
    pub now: Instant,
    pub wall: SystemTime,
    /// How a pod of a template starts, given the store then.
    pub start: &'a dyn Fn(&Store, &Value) -> Start,
}

impl Objects {
    /// Pods and ReplicaSets deleted through the API since the last look
    /// are forgotten by their Deployment's state; returns the uids of the
    /// Deployments that lost any, to be synced again.
    pub fn forget_deleted(
        &mut self,
        store: &Store,
        sims: &mut HashMap<String, State>,
    ) -> Vec<String> {
        let mut gone = self.deleted_since(store);
        self.cursor = store.rv;
        // What the projection deleted itself it has forgotten already
        // ([`Objects::remove_missing`]): only a delete through the API is
        // news, and the states are walked only then.
        gone.retain(|key| self.written.contains_key(key));
        if gone.is_empty() {
            return Vec::new();
        }
        let mut touched = Vec::new();
        for (uid, state) in sims.iter_mut() {
            let Some(ns) = self.owned.get(uid).map(|o| o.namespace.clone()) else {
                continue;
            };
            let is_gone = |kind: &'static str| {
                let (ns, gone) = (ns.clone(), &gone);
                move |name: &str| gone.contains(&(kind, ns.clone(), name.to_string()))
            };
            if state.forget(&is_gone("replicasets"), &is_gone("pods")) {
                touched.push(uid.clone());
            }
        }
        touched
    }

    /// (kind, namespace, name) of every pod and ReplicaSet deleted since
    /// [`Objects::cursor`]; when that history is gone, every one of ours
    /// missing from the store.
    fn deleted_since(&self, store: &Store) -> HashSet<(&'static str, String, String)> {
        let kinds = [("/pods", "pods"), ("apps/replicasets", "replicasets")];
        if let Some(events) = store.events_after(self.cursor) {
            return events
                .iter()
                .filter(|e| e.kind == EvKind::Deleted)
                .filter_map(|e| {
                    let kind = kinds.iter().find(|(k, _)| *k == e.res)?.1;
                    let name = e.obj["metadata"]["name"].as_str()?;
                    Some((kind, e.ns.clone(), name.to_string()))
                })
                .collect();
        }
        let present = |key: &str, ns: &str, name: &str| {
            store
                .objects
                .contains_key(&(key.to_string(), ns.to_string(), name.to_string()))
        };
        let mut gone = HashSet::new();
        for o in self.owned.values() {
            for (key, kind, names) in [
                ("apps/replicasets", "replicasets", &o.sets),
                ("/pods", "pods", &o.pods),
            ] {
                for n in names.iter().filter(|n| !present(key, &o.namespace, n)) {
                    gone.insert((kind, o.namespace.clone(), n.clone()));
                }
            }
        }
        gone
    }

    /// Forget what was kept of Deployments that are gone (the garbage
    /// collector removes their objects through the owner references).
    pub fn retain(&mut self, live: &HashSet<String>) {
        let mut dropped = Vec::new();
        self.owned.retain(|uid, o| {
            let keep = live.contains(uid);
            if !keep {
                dropped.push(std::mem::take(o));
            }
            keep
        });
        for o in dropped {
            self.forget_names(&o.namespace, &o.sets, &o.pods);
        }
    }

    fn forget_names(&mut self, ns: &str, sets: &[String], pods: &[String]) {
        for n in sets {
            self.written
                .remove(&("replicasets", ns.to_string(), n.clone()));
        }
        for n in pods {
            self.written.remove(&("pods", ns.to_string(), n.clone()));
            self.starts.remove(&(ns.to_string(), n.clone()));
        }
    }

    /// Write what changed of one Deployment's sets and pods; delete those
    /// its state no longer has.
    pub fn project(&mut self, store: &mut Store, src: &Source) {
        let d = src.deployment;
        let (Some(uid), Some(ns)) = (
            d["metadata"]["uid"].as_str(),
            d["metadata"]["namespace"].as_str(),
        ) else {
            return;
        };
        let (Some(rs_def), Some(pod_def)) = (
            store.registry.find("apps", "v1", "replicasets").cloned(),
            store.registry.find("", "v1", "pods").cloned(),
        ) else {
            return;
        };
        let mut now_owned = Owned {
            namespace: ns.to_string(),
            ..Owned::default()
        };
        for rs in &src.state.sets {
            let (main, status) = replica_set(d, rs, src);
            let Some(rs_uid) = self.write(store, &rs_def, ns, &rs.name, main, status, src.wall)
            else {
                continue;
            };
            now_owned.sets.push(rs.name.clone());
            for pod in rs.pods() {
                let key = (ns.to_string(), pod.name.clone());
                let start = self
                    .starts
                    .entry(key)
                    .or_insert_with(|| (src.start)(store, rs.template()))
                    .clone();
                let (main, status) = pod_object(rs, &rs_uid, pod, &start, src);
                self.write(store, &pod_def, ns, &pod.name, main, status, src.wall);
                now_owned.pods.push(pod.name.clone());
            }
        }
        let before = self.owned.insert(uid.to_string(), now_owned);
        if let Some(before) = before {
            self.remove_missing(store, &rs_def, &pod_def, &before, uid, src.wall);
        }
    }

    /// Delete the objects `before` named that the Deployment's state no
    /// longer has (scaled away, or cleaned up past the history limit).
    fn remove_missing(
        &mut self,
        store: &mut Store,
        rs_def: &ResourceDef,
        pod_def: &ResourceDef,
        before: &Owned,
        uid: &str,
        wall: SystemTime,
    ) {
        let Some(now) = self.owned.get(uid) else {
            return;
        };
        let ns = &before.namespace;
        let sets: Vec<String> = (before.sets.iter())
            .filter(|n| !now.sets.contains(n))
            .cloned()
            .collect();
        let pods: Vec<String> = (before.pods.iter())
            .filter(|n| !now.pods.contains(n))
            .cloned()
            .collect();
        for n in &pods {
            let _ = store.delete(pod_def, ns, n, &Preconditions::default(), wall);
        }
        for n in &sets {
            let _ = store.delete(rs_def, ns, n, &Preconditions::default(), wall);
        }
        self.forget_names(ns, &sets, &pods);
    }

    /// Create or update one object, main part and status, each only when
    /// it differs from what was last written. Returns its uid.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        store: &mut Store,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        main: Value,
        status: Value,
        wall: SystemTime,
    ) -> Option<String> {
        let kind: &'static str = if def.plural == "pods" {
            "pods"
        } else {
            "replicasets"
        };
        let key = (kind, ns.to_string(), name.to_string());
        let stored = store.get(def, ns, name);
        let last = self.written.get(&key).filter(|_| stored.is_some());
        let fv = FieldValidation::Ignore;
        if stored.is_none() {
            store.create(def, ns, main.clone(), fv, wall).ok()?;
        } else if last.map(|l| &l.0) != Some(&main) {
            let _ = store.update(def, ns, name, main.clone(), false, fv, false, wall);
        }
        let obj = store.get(def, ns, name)?;
        let mut status = status;
        if let (Some(g), Some(m)) = (
            obj["metadata"]["generation"].as_i64(),
            status.as_object_mut(),
        ) {
            // The controller has seen the spec it just wrote.
            m.insert("observedGeneration".into(), json!(g));
        }
        if stored.is_none() || last.map(|l| &l.1) != Some(&status) {
            let mut body = (*obj).clone();
            body["status"] = status.clone();
            if let Some(m) = body["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            let _ = store.update(def, ns, name, body, true, fv, false, wall);
        }
        self.written.insert(key, (main, status));
        let obj = store.get(def, ns, name)?;
        obj["metadata"]["uid"].as_str().map(str::to_string)
    }
}

/// The wall-clock time of an instant, given both clocks now.
fn wall_of(t: Instant, now: Instant, wall: SystemTime) -> SystemTime {
    if t <= now {
        wall - now.duration_since(t)
    } else {
        wall + t.duration_since(now)
    }
}

/// `labels` with `pod-template-hash` added (`CloneAndAddLabel`).
fn with_hash(labels: &Value, hash: &str) -> Value {
    let mut m = labels.as_object().cloned().unwrap_or_default();
    m.insert(TEMPLATE_HASH_LABEL.into(), json!(hash));
    Value::Object(m)
}

/// The Deployment's annotations a ReplicaSet carries
/// (`skipCopyAnnotation`: not kubectl's last-applied, not the revision
/// bookkeeping), then its own three.
fn set_annotations(d: &Value, rs: &ReplicaSet) -> Value {
    let mut m: Map<String, Value> = Map::new();
    for (k, v) in d["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let skip = k == "kubectl.kubernetes.io/last-applied-configuration"
            || k == REVISION
            || k == "deployment.kubernetes.io/revision-history"
            || k == DESIRED
            || k == MAX;
        if !skip {
            m.insert(k.clone(), v.clone());
        }
    }
    m.insert(REVISION.into(), json!(rs.revision.to_string()));
    if let Some(n) = rs.desired_annotation {
        m.insert(DESIRED.into(), json!(n.to_string()));
    }
    if let Some(n) = rs.max_annotation {
        m.insert(MAX.into(), json!(n.to_string()));
    }
    Value::Object(m)
}

fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true}])
}

/// A ReplicaSet's main part and status.
fn replica_set(d: &Value, rs: &ReplicaSet, src: &Source) -> (Value, Value) {
    let mut template = rs.template().clone();
    if template.is_object() {
        template["metadata"]["labels"] = with_hash(&template["metadata"]["labels"], &rs.hash);
    }
    let mut selector = d["spec"]["selector"].clone();
    if selector.is_object() {
        selector["matchLabels"] = with_hash(&selector["matchLabels"], &rs.hash);
    }
    let meta = &d["metadata"];
    let main = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": rs.name,
            "labels": template["metadata"]["labels"],
            "annotations": set_annotations(d, rs),
            "ownerReferences": controller_ref("apps/v1", "Deployment",
                meta["name"].as_str().unwrap_or(""), meta["uid"].as_str().unwrap_or("")),
        },
        "spec": {
            "replicas": rs.replicas,
            "minReadySeconds": d["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
            "selector": selector,
            "template": template,
        },
    });
    let st = rs.status(src.now, min_ready(d));
    let mut status = json!({"replicas": st.replicas, "fullyLabeledReplicas": st.replicas,
        "readyReplicas": st.ready, "availableReplicas": st.available});
    // Counts of zero are omitted but `replicas` (`omitempty` in the type).
    if let Some(m) = status.as_object_mut() {
        m.retain(|k, v| k == "replicas" || v.as_i64() != Some(0));
    }
    (main, status)
}

fn min_ready(d: &Value) -> Duration {
    Duration::from_secs(d["spec"]["minReadySeconds"].as_u64().unwrap_or(0))
}

/// A pod's main part (`GetPodFromTemplate`, scheduled on [`NODE`]) and the
/// status its kubelet reports.
fn pod_object(
    rs: &ReplicaSet,
    rs_uid: &str,
    pod: &Pod,
    start: &Start,
    src: &Source,
) -> (Value, Value) {
    let template = rs.template();
    let mut annotations = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(p) = &start.preload {
        annotations.insert(PRELOAD_ANNOTATION.into(), json!(p));
    }
    let mut spec = template["spec"].clone();
    if spec.is_object() {
        spec["nodeName"] = json!(NODE);
    }
    let main = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "generateName": format!("{}-", rs.name),
            "labels": with_hash(&template["metadata"]["labels"], &rs.hash),
            "annotations": annotations,
            "ownerReferences": controller_ref("apps/v1", "ReplicaSet", &rs.name, rs_uid),
        },
        "spec": spec,
    });
    (main, pod_status(template, pod, start, src))
}

/// `generateAPIPodStatus`: phase, the four conditions, one status per
/// container. A container whose env did not resolve waits with
/// `CreateContainerConfigError` and the pod stays Pending; one whose model
/// never loads runs and is never ready.
fn pod_status(template: &Value, pod: &Pod, start: &Start, src: &Source) -> Value {
    let at = |t: Instant| rfc3339(wall_of(t, src.now, src.wall));
    let created = at(pod.created);
    let ready = pod.ready(src.now);
    let running = start.config_error.is_none();
    let names: Vec<&str> = (template["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten())
    .filter_map(|c| c["name"].as_str())
    .collect();
    let since = pod
        .ready_at
        .filter(|_| ready)
        .map(at)
        .unwrap_or(created.clone());
    let cond = |ty: &str, ok: bool, when: &str| {
        let mut c = json!({"type": ty, "status": if ok { "True" } else { "False" },
            "lastProbeTime": null, "lastTransitionTime": when});
        if !ok && (ty == "Ready" || ty == "ContainersReady") {
            c["reason"] = json!("ContainersNotReady");
            c["message"] = json!(format!(
                "containers with unready status: [{}]",
                names.join(" ")
            ));
        }
        c
    };
    let containers: Vec<Value> = (template["spec"]["containers"].as_array().into_iter().flatten())
        .map(|c| {
            let name = c["name"].as_str().unwrap_or("");
            let state = match &start.config_error {
                Some(msg) => json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}}),
                None => json!({"running": {"startedAt": created}}),
            };
            json!({"name": name, "image": c["image"], "imageID": "",
                "containerID": if running { json!(format!("kubesim://{}/{name}", pod.name)) } else { Value::Null },
                "ready": ready, "started": running, "restartCount": 0, "state": state})
        })
        .collect();
    let mut status = json!({
        "phase": if running { "Running" } else { "Pending" },
        "conditions": [
            cond("PodReadyToStartContainers", true, &created),
            cond("Initialized", true, &created),
            cond("Ready", ready, &since),
            cond("ContainersReady", ready, &since),
            cond("PodScheduled", true, &created),
        ],
        "hostIP": "127.0.0.1",
        "startTime": created,
        "containerStatuses": containers,
        "qosClass": "BestEffort",
    });
    if running {
        let ip = pod_ip(&pod.name);
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    status
}

/// A stable address in 10.244.0.0/16 for a pod's name.
fn pod_ip(name: &str) -> String {
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!("10.244.{}.{}", (h >> 8) % 256, h % 254 + 1)
}
