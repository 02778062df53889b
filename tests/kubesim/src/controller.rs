//! The simulated Deployment controller and kubelet: pods are not API
//! objects, but rollouts progress over them as the real controller rolls
//! them (maxSurge/maxUnavailable, Recreate, progress deadlines), and a pod
//! only becomes ready if its preload model resolves and is loadable.

use crate::kinds::FieldValidation;
use crate::store::Store;
use crate::time::rfc3339;
use regex::Regex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

const PRELOAD_ENV: &str = "OPENMED_SERVICE_PRELOAD_MODELS";

#[derive(Debug, Clone)]
struct Pod {
    /// When it becomes ready; None: never (bad config or unloadable model).
    ready_at: Option<Instant>,
    ready: bool,
}

#[derive(Debug, Clone)]
struct ReplicaSet {
    hash: String,
    pods: Vec<Pod>,
}

#[derive(Debug)]
struct Sim {
    /// Oldest first; the last is the current ("new") ReplicaSet.
    sets: Vec<ReplicaSet>,
    last_progress: Instant,
    generation: i64,
    /// Progressing reason while the rollout is under way.
    reason: &'static str,
}

pub struct Controller {
    sims: HashMap<String, Sim>,
    pub warmup: Duration,
    pub unloadable: Option<Regex>,
}

/// `25%` of 10 rounds up for surge and down for unavailable, as Kubernetes does.
fn resolve(v: &Value, total: i64, round_up: bool) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let x = pct * total;
            if round_up {
                (x + 99) / 100
            } else {
                x / 100
            }
        }
        _ => 0,
    }
}

fn template_hash(template: &Value) -> String {
    let h = Sha256::digest(template.to_string().as_bytes());
    h.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

/// Remove `n` pods, unready ones first (as the controller prefers).
fn remove_pods(rs: &mut ReplicaSet, n: usize) -> usize {
    let mut removed = 0;
    while removed < n && !rs.pods.is_empty() {
        let idx = rs
            .pods
            .iter()
            .position(|p| !p.ready)
            .unwrap_or(rs.pods.len() - 1);
        rs.pods.remove(idx);
        removed += 1;
    }
    removed
}

impl Controller {
    pub fn new(warmup: Duration, unloadable: Option<Regex>) -> Controller {
        Controller {
            sims: HashMap::new(),
            warmup,
            unloadable,
        }
    }

    /// Whether a pod of this template could start and become ready, judged
    /// now (env is resolved when a container starts, as on a node).
    fn pod_for(&self, store: &Store, ns: &str, template: &Value, now: Instant) -> Pod {
        let cm_def = store.registry.find("", "v1", "configmaps").cloned();
        let mut can_start = true;
        let mut loadable = true;
        for c in template["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for e in c["env"].as_array().into_iter().flatten() {
                let resolved = if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                    let optional = r["optional"].as_bool().unwrap_or(false);
                    let data = cm_def
                        .as_ref()
                        .and_then(|d| store.get(d, ns, r["name"].as_str().unwrap_or("")))
                        .and_then(|cm| {
                            cm["data"][r["key"].as_str().unwrap_or("")]
                                .as_str()
                                .map(str::to_string)
                        });
                    if data.is_none() && !optional {
                        can_start = false;
                    }
                    data
                } else {
                    e["value"].as_str().map(str::to_string)
                };
                if e["name"] == PRELOAD_ENV {
                    if let (Some(v), Some(re)) = (&resolved, &self.unloadable) {
                        if re.is_match(v) {
                            loadable = false;
                        }
                    }
                }
            }
        }
        Pod {
            ready_at: (can_start && loadable).then_some(now + self.warmup),
            ready: false,
        }
    }

    /// One pass over every Deployment. Returns whether anything was written.
    pub fn tick(&mut self, store: &mut Store, now: Instant, wall: SystemTime) -> bool {
        let Some(def) = store.registry.find("apps", "v1", "deployments").cloned() else {
            return false;
        };
        let deployments = store.list(&def, None);
        let live: HashSet<String> = deployments
            .iter()
            .filter_map(|d| d["metadata"]["uid"].as_str().map(str::to_string))
            .collect();
        self.sims.retain(|uid, _| live.contains(uid));
        let mut wrote = false;
        for d in deployments {
            let Some(uid) = d["metadata"]["uid"].as_str().map(str::to_string) else {
                continue;
            };
            let ns = d["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = d["metadata"]["name"].as_str().unwrap_or("").to_string();
            let status = self.step(store, &uid, &d, &ns, now, wall);
            if d.get("status") != Some(&status) {
                let mut next = (*d).clone();
                next["status"] = status;
                if store
                    .update(
                        &def,
                        &ns,
                        &name,
                        next,
                        true,
                        FieldValidation::Ignore,
                        false,
                        wall,
                    )
                    .is_ok()
                {
                    wrote = true;
                }
            }
        }
        wrote
    }

    fn step(
        &mut self,
        store: &Store,
        uid: &str,
        d: &Value,
        ns: &str,
        now: Instant,
        wall: SystemTime,
    ) -> Value {
        let spec = &d["spec"];
        let desired = spec["replicas"].as_i64().unwrap_or(1).max(0);
        let generation = d["metadata"]["generation"].as_i64().unwrap_or(0);
        let template = &spec["template"];
        let hash = template_hash(template);
        let mut sim = self.sims.remove(uid).unwrap_or(Sim {
            sets: Vec::new(),
            last_progress: now,
            generation,
            reason: "ReplicaSetUpdated",
        });
        let mut progressed = false;
        let mut created = false;
        if sim.generation != generation {
            sim.generation = generation;
            sim.last_progress = now;
        }
        if sim.sets.last().map(|rs| rs.hash != hash).unwrap_or(true) {
            match sim.sets.iter().position(|rs| rs.hash == hash) {
                Some(i) => {
                    let rs = sim.sets.remove(i);
                    sim.sets.push(rs);
                }
                None => {
                    sim.sets.push(ReplicaSet {
                        hash: hash.clone(),
                        pods: Vec::new(),
                    });
                    created = true;
                }
            }
            progressed = true;
        }
        for rs in &mut sim.sets {
            for p in &mut rs.pods {
                if !p.ready && p.ready_at.map(|t| t <= now).unwrap_or(false) {
                    p.ready = true;
                    progressed = true;
                }
            }
        }
        let n_sets = sim.sets.len();
        let recreate = spec["strategy"]["type"] == "Recreate";
        let ru = &spec["strategy"]["rollingUpdate"];
        let mut surge = resolve(&ru["maxSurge"], desired, true);
        let mut unavailable = resolve(&ru["maxUnavailable"], desired, false);
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        if recreate {
            surge = 0;
        }
        let (old_sets, new_set) = sim.sets.split_at_mut(n_sets - 1);
        let new_rs = &mut new_set[0];
        let old_count: i64 = old_sets.iter().map(|r| r.pods.len() as i64).sum();
        if recreate {
            if old_count > 0 {
                for rs in old_sets.iter_mut() {
                    rs.pods.clear();
                }
                progressed = true;
            } else {
                let have = new_rs.pods.len() as i64;
                if have < desired {
                    for _ in have..desired {
                        new_rs.pods.push(self.pod_for(store, ns, template, now));
                    }
                    progressed = true;
                } else if have > desired {
                    remove_pods(new_rs, (have - desired) as usize);
                    progressed = true;
                }
            }
        } else {
            let total = old_count + new_rs.pods.len() as i64;
            let have = new_rs.pods.len() as i64;
            if have < desired {
                let room = desired + surge - total;
                let add = room.min(desired - have);
                for _ in 0..add.max(0) {
                    new_rs.pods.push(self.pod_for(store, ns, template, now));
                    progressed = true;
                }
            } else if have > desired {
                remove_pods(new_rs, (have - desired) as usize);
                progressed = true;
            }
            let total = old_count + new_rs.pods.len() as i64;
            let min_available = (desired - unavailable).max(0);
            let new_unavailable = new_rs.pods.iter().filter(|p| !p.ready).count() as i64;
            // Unhealthy old pods go first, then healthy ones while availability allows.
            let mut cleanup = (total - min_available - new_unavailable).max(0);
            for rs in old_sets.iter_mut() {
                while cleanup > 0 {
                    match rs.pods.iter().position(|p| !p.ready) {
                        Some(i) => {
                            rs.pods.remove(i);
                            cleanup -= 1;
                            progressed = true;
                        }
                        None => break,
                    }
                }
            }
            let available: i64 = old_sets
                .iter()
                .chain(std::iter::once(&*new_rs))
                .map(|r| r.pods.iter().filter(|p| p.ready).count() as i64)
                .sum();
            let mut scale_down = (available - min_available).max(0);
            for rs in old_sets.iter_mut() {
                let n = (rs.pods.len() as i64).min(scale_down);
                if n > 0 {
                    remove_pods(rs, n as usize);
                    scale_down -= n;
                    progressed = true;
                }
            }
        }
        sim.sets.retain(|rs| !rs.pods.is_empty() || rs.hash == hash);
        if progressed {
            sim.last_progress = now;
            sim.reason = if created {
                "NewReplicaSetCreated"
            } else {
                "ReplicaSetUpdated"
            };
        }
        let status = self.status(&sim, d, desired, unavailable, now, wall, &hash);
        self.sims.insert(uid.to_string(), sim);
        status
    }

    #[allow(clippy::too_many_arguments)]
    fn status(
        &self,
        sim: &Sim,
        d: &Value,
        desired: i64,
        max_unavailable: i64,
        now: Instant,
        wall: SystemTime,
        hash: &str,
    ) -> Value {
        let new_rs = sim.sets.last();
        let total: i64 = sim.sets.iter().map(|r| r.pods.len() as i64).sum();
        let updated = new_rs.map(|r| r.pods.len() as i64).unwrap_or(0);
        let ready: i64 = sim
            .sets
            .iter()
            .map(|r| r.pods.iter().filter(|p| p.ready).count() as i64)
            .sum();
        let unavailable = (desired - ready).max(0);
        let complete = updated == desired && total == desired && ready == desired;
        let rs_name = format!("{}-{hash}", d["metadata"]["name"].as_str().unwrap_or(""));
        let deadline =
            Duration::from_secs(d["spec"]["progressDeadlineSeconds"].as_u64().unwrap_or(600));
        let old_conds = d["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let now_s = rfc3339(wall);
        let cond = |ty: &str, status: &str, reason: &str, message: String| {
            let prev = old_conds.iter().find(|c| c["type"] == ty);
            let same = prev
                .map(|p| {
                    p["status"] == status
                        && p["reason"] == reason
                        && p["message"] == message.as_str()
                })
                .unwrap_or(false);
            if same {
                return prev.cloned().unwrap_or(Value::Null);
            }
            let transition = prev
                .filter(|p| p["status"] == status)
                .and_then(|p| p.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now_s));
            json!({"type": ty, "status": status, "lastUpdateTime": now_s, "lastTransitionTime": transition, "reason": reason, "message": message})
        };
        let min_available = (desired - max_unavailable).max(0);
        let available_cond = if ready >= min_available {
            cond(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            cond(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        };
        let progressing = if complete {
            cond(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                format!("ReplicaSet {rs_name:?} has successfully progressed."),
            )
        } else if now.duration_since(sim.last_progress) > deadline {
            cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet {rs_name:?} has timed out progressing."),
            )
        } else if sim.reason == "NewReplicaSetCreated" {
            cond(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set {rs_name:?}"),
            )
        } else {
            cond(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                format!("ReplicaSet {rs_name:?} is progressing."),
            )
        };
        let mut s = serde_json::Map::new();
        s.insert("observedGeneration".into(), json!(sim.generation));
        // Zero counts are omitted, as the real API server does.
        for (k, v) in [
            ("replicas", total),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", ready),
            ("unavailableReplicas", unavailable),
        ] {
            if v != 0 {
                s.insert(k.into(), json!(v));
            }
        }
        s.insert("conditions".into(), json!([available_cond, progressing]));
        Value::Object(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_like_kubernetes() {
        assert_eq!(resolve(&json!("25%"), 10, true), 3);
        assert_eq!(resolve(&json!("25%"), 10, false), 2);
        assert_eq!(resolve(&json!(1), 10, true), 1);
        assert_eq!(resolve(&json!("0%"), 3, true), 0);
    }
}
