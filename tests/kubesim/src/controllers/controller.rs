//! The simulated control plane's Deployment side: `deployment` computes
//! what the upstream Deployment and ReplicaSet controllers compute; this
//! runs it over the store, decides from a pod template whether its pods could
//! start and load their model, and writes each Deployment's status (and its
//! `deployment.kubernetes.io/revision` annotation) back.

use crate::controllers::deployment::{
    deployment_complete, template_hash, Ctx, PodOutcome, Spec, State, REVISION,
};
use crate::controllers::objects::{Objects, Source, Start};
use crate::registry::kinds::FieldValidation;
use crate::registry::store::Store;
use regex::Regex;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const PRELOAD_ENV: &str = "OPENMED_SERVICE_PRELOAD_MODELS";
/// How long a Deployment still rolling out, untouched and with no pod event
/// due, goes without a sync: what it waits on besides (a ConfigMap its pods
/// need, its progress deadline, `requeueStuckDeployment`) is seen within it.
const RECHECK: Duration = Duration::from_secs(1);

pub struct Controller {
    sims: HashMap<String, State>,
    /// Deployments whose last sync changed nothing, as stored then, with
    /// when one not yet complete is due again (its next pod event, or
    /// [`RECHECK`]): skipped until the stored object changes or that time
    /// comes. Keyed by the stored object's address, which a write replaces
    /// (the entry holds the object, so the address is not reused while it
    /// stands): a tick tells a changed one from the rest without reading
    /// 10,000 Deployments' metadata. The upstream controller is
    /// event-driven (`syncDeployment` runs on a Deployment, ReplicaSet or
    /// pod event, or a requeue for a progress check); a Deployment nobody
    /// touches gets no sync. Syncing all of them every tick under the
    /// store's lock made kubesim, not the operator, the bound at 1,000
    /// Deployments rolling out and more.
    quiet: HashMap<usize, (Arc<Value>, Option<Instant>)>,
    /// The sets and pods above, as API objects.
    objects: Objects,
    /// The store's resourceVersion when the states of deleted Deployments
    /// were last dropped.
    cursor: u64,
    pub warmup: Duration,
    pub unloadable: Option<Regex>,
}

impl Controller {
    pub fn new(warmup: Duration, unloadable: Option<Regex>) -> Controller {
        Controller {
            sims: HashMap::new(),
            quiet: HashMap::new(),
            objects: Objects::default(),
            cursor: 0,
            warmup,
            unloadable,
        }
    }

    /// How a pod of this template starts, judged now (env is resolved
    /// when a container starts, as on a node): the preload value it
    /// loads, or the kubelet's `CreateContainerConfigError` message for a
    /// reference that does not resolve (`makeEnvironmentVariables`).
    fn start(store: &Store, ns: &str, template: &Value) -> Start {
        let cm_def = store.registry.find("", "v1", "configmaps").cloned();
        let mut start = Start {
            preload: None,
            config_error: None,
        };
        let envs = (template["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten())
        .flat_map(|c| c["env"].as_array().into_iter().flatten());
        for e in envs {
            let resolved = if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                let (name, key) = (
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or(""),
                );
                let optional = r["optional"].as_bool().unwrap_or(false);
                let cm = cm_def.as_ref().and_then(|d| store.get(d, ns, name));
                let data = cm
                    .as_ref()
                    .and_then(|cm| cm["data"][key].as_str().map(str::to_string));
                if data.is_none() && !optional && start.config_error.is_none() {
                    start.config_error = Some(match cm {
                        None => format!("configmap {name:?} not found"),
                        Some(_) => format!("couldn't find key {key} in ConfigMap {ns}/{name}"),
                    });
                }
                data
            } else {
                e["value"].as_str().map(str::to_string)
            };
            if e["name"] == PRELOAD_ENV {
                start.preload = resolved;
            }
        }
        start
    }

    /// Whether a pod that starts so could become ready.
    fn outcome(&self, start: &Start) -> PodOutcome {
        let unloadable = match (&start.preload, &self.unloadable) {
            (Some(v), Some(re)) => re.is_match(v),
            _ => false,
        };
        if start.config_error.is_none() && !unloadable {
            PodOutcome::ReadyAfter(self.warmup)
        } else {
            PodOutcome::NeverReady
        }
    }

    /// One pass over every Deployment. Returns whether anything was written.
    pub fn tick(&mut self, store: &mut Store, now: Instant, wall: SystemTime) -> bool {
        let Some(def) = store.registry.find("apps", "v1", "deployments").cloned() else {
            return false;
        };
        let deployments = store.list(&def, None);
        if deployment_deleted_since(store, self.cursor) {
            let live: HashSet<String> = deployments
                .iter()
                .filter_map(|d| d["metadata"]["uid"].as_str().map(str::to_string))
                .collect();
            self.sims.retain(|uid, _| live.contains(uid));
            self.objects.retain(&live);
        }
        self.cursor = store.rv;
        // Those that lost a pod or a set through the API sync, quiet or not.
        let touched: HashSet<String> = (self.objects.forget_deleted(store, &mut self.sims))
            .into_iter()
            .collect();
        let mut was_quiet = std::mem::take(&mut self.quiet);
        let mut wrote = false;
        for d in deployments {
            let due = |until: &Option<Instant>| until.is_none_or(|t| now < t);
            let key = Arc::as_ptr(&d) as usize;
            if let Some(q) = was_quiet.remove(&key).filter(|(_, until)| due(until)) {
                let uid = || d["metadata"]["uid"].as_str().unwrap_or("");
                if touched.is_empty() || !touched.contains(uid()) {
                    self.quiet.insert(key, q);
                    continue;
                }
            }
            let Some(uid) = d["metadata"]["uid"].as_str().map(str::to_string) else {
                continue;
            };
            let ns = d["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = d["metadata"]["name"].as_str().unwrap_or("").to_string();
            let mut state = self.sims.remove(&uid).unwrap_or_default();
            let outcome = |t: &Value| self.outcome(&Controller::start(store, &ns, t));
            let ctx = Ctx {
                deployment: &d,
                spec: Spec::from_deployment(&d),
                name: name.clone(),
                hash: template_hash(&d["spec"]["template"]),
                now,
                wall,
                outcome: &outcome,
            };
            let synced = state.sync(&ctx);
            let pod_event = state.next_change(now, ctx.spec.min_ready);
            let start = |st: &Store, t: &Value| Controller::start(st, &ns, t);
            let src = Source {
                deployment: &d,
                state: &state,
                now,
                wall,
                start: &start,
            };
            self.objects.project(store, &src);
            let wake = pod_event.map_or(now + RECHECK, |t| t.min(now + RECHECK));
            self.sims.insert(uid.clone(), state);
            // The real controller writes the revision annotation with the
            // status (`UpdateStatus`), which keeps metadata: no generation bump.
            let mut next = (*d).clone();
            if let Some(r) = synced.revision.map(|r| json!(r.to_string())) {
                next["metadata"]["annotations"][REVISION] = r;
            }
            next["status"] = synced.status;
            if next != *d {
                wrote |= write(store, &def, &ns, &name, next, wall);
            } else if deployment_complete(&Spec::from_deployment(&d), &next["status"]) {
                self.quiet.insert(key, (d.clone(), None));
            } else {
                self.quiet.insert(key, (d.clone(), Some(wake)));
            }
        }
        wrote
    }
}

/// Whether a Deployment was deleted after resourceVersion `cursor` (or the
/// history that would say is gone): only then are the states of the
/// Deployments no longer there dropped, not at every tick.
fn deployment_deleted_since(store: &Store, cursor: u64) -> bool {
    let deleted = |e: &crate::registry::store::HistEvent| {
        e.kind == crate::registry::store::EvKind::Deleted && e.res == "apps/deployments"
    };
    store
        .events_after(cursor)
        .is_none_or(|events| events.iter().any(deleted))
}

/// A status update of the Deployment, as its controller makes it.
fn write(
    store: &mut Store,
    def: &crate::registry::resources::ResourceDef,
    ns: &str,
    name: &str,
    mut obj: Value,
    wall: SystemTime,
) -> bool {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    store
        .update(
            def,
            ns,
            name,
            obj,
            true,
            FieldValidation::Ignore,
            false,
            wall,
        )
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    }

    /// A store holding `d`, and the Deployments' definition.
    fn store_with(d: Value) -> (Store, crate::registry::resources::ResourceDef) {
        let mut store = Store::new(1000);
        let def = store
            .registry
            .find("apps", "v1", "deployments")
            .cloned()
            .unwrap();
        let now = SystemTime::now();
        store
            .create(&def, "default", d, FieldValidation::Ignore, now)
            .unwrap();
        (store, def)
    }

    /// When the Deployment of `uid` is due again if quiet (None inside:
    /// when it changes).
    fn quiet_until(ctl: &Controller, uid: &str) -> Option<Option<Instant>> {
        (ctl.quiet.values())
            .find(|(d, _)| d["metadata"]["uid"] == uid)
            .map(|(_, until)| *until)
    }

    /// Ticks until one writes nothing; the status then.
    fn settle(
        ctl: &mut Controller,
        store: &mut Store,
        def: &crate::registry::resources::ResourceDef,
    ) -> Value {
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            if !ctl.tick(store, Instant::now(), SystemTime::now()) {
                break;
            }
        }
        store.get(def, "default", "d").unwrap()["status"].clone()
    }

    /// Upstream's `DeploymentController.syncDeployment` runs on an event
    /// (the Deployment, its ReplicaSets or pods changed) or a requeue, never
    /// on a timer: a complete Deployment nobody touches is not synced. Here
    /// it is skipped until its resourceVersion changes, and a change is
    /// still acted on at the next tick.
    #[test]
    fn a_complete_untouched_deployment_is_skipped_until_it_changes() {
        let (mut store, def) = store_with(deployment(2));
        let now = SystemTime::now();
        let mut ctl = Controller::new(Duration::ZERO, None);
        let status = settle(&mut ctl, &mut store, &def);
        assert_eq!(status["availableReplicas"], 2, "{status:#}");
        let uid = store.get(&def, "default", "d").unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            quiet_until(&ctl, &uid).is_some(),
            "a complete Deployment is quiet"
        );

        let mut scaled = (*store.get(&def, "default", "d").unwrap()).clone();
        scaled["spec"]["replicas"] = json!(3);
        store
            .update(
                &def,
                "default",
                "d",
                scaled,
                false,
                FieldValidation::Ignore,
                false,
                now,
            )
            .unwrap();
        let status = settle(&mut ctl, &mut store, &def);
        assert_eq!(
            status["availableReplicas"], 3,
            "a change is seen: {status:#}"
        );
    }

    /// A Deployment still rolling out and untouched is synced again when
    /// its pods become ready, not at every tick, and then becomes available:
    /// upstream the pod's update reaches `ReplicaSetController.updatePod`,
    /// the set's status update `DeploymentController.updateReplicaSet`,
    /// which queues `syncDeployment`.
    #[test]
    fn a_rolling_out_deployment_waits_for_its_pods_readiness() {
        let (mut store, def) = store_with(deployment(1));
        let warmup = Duration::from_millis(300);
        let mut ctl = Controller::new(warmup, None);
        let started = Instant::now();
        while ctl.tick(&mut store, Instant::now(), SystemTime::now()) {}
        let d = store.get(&def, "default", "d").unwrap();
        assert_eq!(d["status"]["availableReplicas"], json!(null), "{d:#}");
        let uid = d["metadata"]["uid"].as_str().unwrap();
        let until = quiet_until(&ctl, uid).expect("skipped while its pod warms up");
        let until = until.expect("until its pod is ready, not until it changes");
        assert!(until > started && until <= started + warmup + Duration::from_millis(2));
        std::thread::sleep(warmup);
        let status = settle(&mut ctl, &mut store, &def);
        assert_eq!(status["availableReplicas"], 1, "{status:#}");
    }
}
