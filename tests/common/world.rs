//! The contract tests' in-memory cluster: a `World` holding one
//! OpenMedModel, its Deployment (and others of the namespace) and its
//! ConfigMaps, that runs a reconcile pass (`World::step`: the shell's own
//! observer over caches filled from the world, the plan, then the shell's
//! executor against itself, with the simulated API server's merge
//! implementations) and records what each pass wrote; with the whole-status
//! assertion (`assert_status`, docs/contract.md §5) and the states the tests
//! name. Included by `tests/reconcile/main.rs` as
//! `#[path = "../common/world.rs"] mod world;`, beside `mod common;` (whose
//! fixtures it builds on).
#![allow(dead_code)]

use crate::common::{deployment, model, NAME};
use kubesim::patch::{merge_patch, strategic_merge};
use openmed_operator::controller::cache::MetaView;
use openmed_operator::controller::caches::Caches;
use openmed_operator::controller::sync::observe::{ApiReads, Observation, Observer, Observing};
use openmed_operator::kube::Error;
use openmed_operator::model::names::{event_name, name_reason};
use openmed_operator::model::status::{states, CondSet, Reason};
use openmed_operator::model::{validate, EventReason};
use openmed_operator::reconcile::patches::StatusPatch;
use openmed_operator::reconcile::{
    decide, execute, Cluster, ConfigMapView, DeploymentView, EventSpec, Executed, ModelView, Plan,
    TargetPolicy,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What a step wrote, in order, as short tags: F+ finalizer added, CM+
/// ConfigMap created, CM~ ConfigMap patched, D~ Deployment patched, CM-
/// ConfigMap deleted, F- finalizer released, S status patched.
pub type Tags = Vec<&'static str>;

pub struct World {
    pub model: Value,
    pub deployment: Option<Value>,
    /// Other Deployments in the namespace (a previous target, say).
    pub others: BTreeMap<String, Value>,
    /// Owners the shell has confirmed gone (9.16).
    pub orphans: Vec<String>,
    pub config_maps: BTreeMap<String, Value>,
    /// Event names posted, with reasons, in order.
    pub events: Vec<(String, EventReason)>,
    pub clock: u64,
    pub rv: u64,
    pub uid_seq: u64,
    /// What the current step wrote and posted.
    pub tags: Tags,
    pub posted: Vec<EventReason>,
    /// Which Deployments may become targets (9.8).
    pub targets: TargetPolicy,
}

impl World {
    pub fn new(spec: Value) -> World {
        World {
            model: model(spec),
            deployment: Some(deployment()),
            others: BTreeMap::new(),
            orphans: Vec::new(),
            config_maps: BTreeMap::new(),
            events: Vec::new(),
            clock: 0,
            rv: 200,
            uid_seq: 0,
            tags: Vec::new(),
            posted: Vec::new(),
            targets: TargetPolicy::default(),
        }
    }

    pub fn now(&self) -> String {
        format!(
            "2026-11-30T00:{:02}:{:02}Z",
            self.clock / 60,
            self.clock % 60
        )
    }

    pub fn bump_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// The Deployment of that name, wherever it is kept.
    pub fn deployment_named(&mut self, name: &str) -> &mut Value {
        if self
            .deployment
            .as_ref()
            .is_some_and(|d| d["metadata"]["name"] == name)
        {
            return self.deployment.as_mut().unwrap();
        }
        self.others
            .get_mut(name)
            .expect("patch of a missing Deployment")
    }

    /// The plan from what the shell's observer sees ([`World::observe`]).
    pub fn plan(&self) -> Plan {
        self.plan_knowing(&[])
    }

    /// [`World::plan`], with ConfigMaps a create found that no cache holds.
    fn plan_knowing(&self, known: &[ConfigMapView]) -> Plan {
        decide(self.observe(known).observed(&self.targets))
    }

    /// What the shell's observer sees: the caches as the watches would
    /// fill them (the model, every unclaimed Deployment's metadata, the claimed
    /// Deployments in full, our ConfigMaps), the rest read from this world
    /// as the API. `known`: ConfigMaps a create found.
    pub fn observe(&self, known: &[ConfigMapView]) -> Box<Observation> {
        let caches = Caches::default();
        let feed = caches.writers();
        let m = ModelView::from_json(&self.model).unwrap();
        let key = m.key();
        feed.models.replace(None, vec![(key.clone(), m)]);
        let ds: Vec<DeploymentView> = self
            .deployment
            .iter()
            .chain(self.others.values())
            .map(|d| DeploymentView::from_json(d).unwrap())
            .collect();
        let meta = ds.iter().filter(|d| !d.claimed).map(|d| {
            let v = MetaView {
                resource_version: d.resource_version.clone(),
            };
            (d.key(), v)
        });
        feed.deployment_meta.replace(None, meta.collect());
        let claimed = ds.into_iter().filter(|d| d.claimed).map(|d| (d.key(), d));
        feed.deployments.replace(None, claimed.collect());
        let ours = self
            .config_maps
            .values()
            .map(|c| ConfigMapView::from_json(c).unwrap())
            .filter(|c| c.managed_by.as_deref() == Some("openmed-operator"))
            .map(|c| (c.key(), c));
        feed.config_maps.replace(None, ours.collect());
        let observer = Observer::new(self, caches.recorder());
        let Observing::Found(mut o) = observer.observe(&key, known, |_| false).unwrap() else {
            panic!("the world's model is not observed")
        };
        o.now = self.now();
        o
    }

    /// One pass: plan, then carry it out as the controller would.
    pub fn step(&mut self) -> (Tags, Vec<EventReason>) {
        self.clock += 1;
        self.tags.clear();
        self.posted.clear();
        // The shell's executor, against this in-memory cluster; planned
        // again, as the shell does, with a ConfigMap a create found.
        let mut known = Vec::new();
        for _ in 0..4 {
            let p = self.plan_knowing(&known);
            let rv = self.model["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string();
            match execute(self, &p, &rv) {
                Ok(Executed::Done) => break,
                Ok(Executed::Replan(cm)) => known.push(*cm),
                Err(never) => match never {},
            }
        }
        (
            std::mem::take(&mut self.tags),
            std::mem::take(&mut self.posted),
        )
    }

    pub fn status(&self) -> &Value {
        &self.model["status"]
    }

    pub fn conds(&self) -> Vec<String> {
        self.status()["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        format!(
                            "{}:{}",
                            if c["status"] == "True" { "T" } else { "F" },
                            c["reason"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn set_spec(&mut self, spec: Value) {
        self.model["spec"] = spec;
        let g = self.model["metadata"]["generation"].as_i64().unwrap() + 1;
        self.model["metadata"]["generation"] = json!(g);
    }

    pub fn annotate(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(v) => self.model["metadata"]["annotations"][key] = json!(v),
            None => {
                if let Some(a) = self.model["metadata"]["annotations"].as_object_mut() {
                    a.remove(key);
                }
            }
        }
    }

    pub fn dep(&mut self) -> &mut Value {
        self.deployment.as_mut().unwrap()
    }

    /// The Deployment controller finishes the rollout of the current spec.
    pub fn rollout_completes(&mut self) {
        let d = self.dep();
        let g = d["metadata"]["generation"].clone();
        let r = d["spec"]["replicas"].clone();
        d["status"] = json!({
            "observedGeneration": g, "replicas": r, "updatedReplicas": r, "readyReplicas": r, "availableReplicas": r,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                           {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
        });
    }

    /// The Deployment controller has seen the new spec but pods are not ready yet.
    pub fn rollout_progressing(&mut self) {
        let d = self.dep();
        let g = d["metadata"]["generation"].clone();
        let r = d["spec"]["replicas"].as_i64().unwrap();
        d["status"] = json!({
            "observedGeneration": g, "replicas": r + 1, "updatedReplicas": 1, "readyReplicas": r, "availableReplicas": r,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}],
        });
    }

    /// The rollout of the current generation misses its deadline.
    pub fn rollout_misses_deadline(&mut self) {
        let d = self.dep();
        let g = d["metadata"]["generation"].clone();
        let r = d["spec"]["replicas"].as_i64().unwrap();
        d["status"] = json!({
            "observedGeneration": g, "replicas": r + 1, "updatedReplicas": 1, "readyReplicas": r, "availableReplicas": r,
            "unavailableReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
        });
    }

    pub fn delete(&mut self) {
        self.model["metadata"]["deletionTimestamp"] = json!(self.now());
        let g = self.model["metadata"]["generation"].as_i64().unwrap() + 1;
        self.model["metadata"]["generation"] = json!(g);
    }

    pub fn preload_env(&self) -> Value {
        let env =
            &self.deployment.as_ref().unwrap()["spec"]["template"]["spec"]["containers"][0]["env"];
        env.as_array()
            .and_then(|e| {
                e.iter()
                    .find(|v| v["name"] == "OPENMED_SERVICE_PRELOAD_MODELS")
            })
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Run to Ready on `version` from wherever the world is (one pass to
    /// start, the controller completes, one pass to see it).
    pub fn converge(&mut self) {
        self.step();
        self.rollout_completes();
        self.step();
        assert_eq!(self.status()["phase"], "Ready", "{:#}", self.status());
    }
}

/// The in-memory cluster the contract tests carry plans out against, with
/// the simulated API server's merge implementations.
impl Cluster for World {
    type Error = std::convert::Infallible;

    fn set_finalizers(
        &mut self,
        _rv: &str,
        finalizers: &[String],
    ) -> Result<Option<String>, Self::Error> {
        let adding = finalizers.iter().any(|f| f == "openmed.ai/finalizer");
        self.model["metadata"]["finalizers"] = json!(finalizers);
        if adding {
            self.tags.push("F+");
            let rv = self.bump_rv();
            self.model["metadata"]["resourceVersion"] = json!(rv.clone());
            return Ok(Some(rv));
        }
        self.tags.push("F-");
        // Kept for the assertions; on a real server it may be gone now.
        let gone = finalizers.is_empty() && self.model["metadata"]["deletionTimestamp"].is_string();
        let rv = self.model["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        Ok((!gone).then_some(rv))
    }

    fn create_config_map(&mut self, body: &Value) -> Result<Option<ConfigMapView>, Self::Error> {
        let name = body["metadata"]["name"].as_str().unwrap().to_string();
        if let Some(found) = self.config_maps.get(&name) {
            // AlreadyExists: the shell reads what is there and plans again.
            return Ok(Some(ConfigMapView::from_json(found).unwrap()));
        }
        self.uid_seq += 1;
        let mut cm = body.clone();
        cm["metadata"]["uid"] = json!(format!("cm-uid-{}", self.uid_seq));
        self.config_maps.insert(name, cm);
        self.tags.push("CM+");
        Ok(None)
    }

    fn patch_config_map(&mut self, name: &str, body: &Value) -> Result<(), Self::Error> {
        let cm = self
            .config_maps
            .get(name)
            .expect("patch of a missing ConfigMap");
        let next = merge_patch(cm, body);
        self.config_maps.insert(name.to_string(), next);
        self.tags.push("CM~");
        Ok(())
    }

    fn patch_deployment(&mut self, name: &str, body: &Value) -> Result<i64, Self::Error> {
        let d = self.deployment_named(name).clone();
        let mut next = strategic_merge(&d, body).unwrap();
        // A Deployment's generation follows spec and annotations (the
        // registry's PrepareForUpdate).
        if next["spec"] != d["spec"]
            || next["metadata"]["annotations"] != d["metadata"]["annotations"]
        {
            let g = d["metadata"]["generation"].as_i64().unwrap() + 1;
            next["metadata"]["generation"] = json!(g);
        }
        let generation = next["metadata"]["generation"].as_i64().unwrap();
        *self.deployment_named(name) = next;
        self.tags.push("D~");
        Ok(generation)
    }

    fn delete_config_map(&mut self, name: &str, uid: &str) -> Result<(), Self::Error> {
        let cm = self
            .config_maps
            .remove(name)
            .expect("delete of a missing ConfigMap");
        assert_eq!(cm["metadata"]["uid"], uid);
        self.tags.push("CM-");
        Ok(())
    }

    fn patch_status(&mut self, body: &StatusPatch) -> Result<(), Self::Error> {
        let body = &body.to_value();
        assert_eq!(
            body["metadata"]["resourceVersion"], self.model["metadata"]["resourceVersion"],
            "status patch must carry the resourceVersion"
        );
        let status = merge_patch(
            self.model.get("status").unwrap_or(&Value::Null),
            &body["status"],
        );
        self.model["status"] = status;
        self.model["metadata"]["resourceVersion"] = json!(self.bump_rv());
        self.tags.push("S");
        Ok(())
    }

    fn post_event(&mut self, e: &EventSpec) -> Result<(), Self::Error> {
        let generation = self.model["metadata"]["generation"].as_i64().unwrap();
        let reason = name_reason(e.reason.as_str(), e.tag.as_deref());
        let name = event_name(NAME, &reason, generation);
        if !self.events.iter().any(|(n, _)| *n == name) {
            self.events.push((name, e.reason));
        }
        self.posted.push(e.reason);
        Ok(())
    }
}

pub fn hash_of(spec: &Value) -> String {
    validate(NAME, Some(spec)).unwrap().hash()
}

pub fn manifest_hash_of(spec: &Value) -> String {
    validate(NAME, Some(spec)).unwrap().manifest_hash()
}

/// The whole expected status (docs/contract.md §5); a field left unset must
/// be absent from the status.
pub struct Want<'a> {
    pub phase: &'a str,
    pub desired: &'a Value,
    pub conds: [String; 4],
    pub active: Option<&'a str>,
    pub applied: Option<&'a Value>,
    pub failed: Option<&'a Value>,
    pub last: Option<&'a Value>,
    pub prev: Option<&'a Value>,
    pub rollback: Option<&'a Value>,
    pub request: Option<&'a str>,
    pub count: i64,
}

impl<'a> Want<'a> {
    pub fn new(phase: &'a str, desired: &'a Value, conds: impl Labels) -> Self {
        Want {
            phase,
            desired,
            conds: conds.labels4(),
            active: None,
            applied: None,
            failed: None,
            last: None,
            prev: None,
            rollback: None,
            request: None,
            count: 0,
        }
    }
}

/// Assert the whole status: every field of docs/contract.md §5.
pub fn assert_status(w: &World, want: Want) {
    let Want {
        phase,
        desired,
        conds,
        active,
        applied,
        failed,
        last,
        prev,
        rollback,
        request,
        count,
    } = want;
    let s = w.status();
    let to_json = |sp: &Value| validate(NAME, Some(sp)).unwrap().to_json();
    assert_eq!(s["phase"], phase, "{s:#}");
    assert_eq!(
        s["observedGeneration"], w.model["metadata"]["generation"],
        "{s:#}"
    );
    assert_eq!(s["desiredVersion"], desired["version"], "{s:#}");
    assert_eq!(s["desiredSpecHash"], hash_of(desired).as_str());
    assert_eq!(s["manifestHash"], manifest_hash_of(desired).as_str());
    assert_eq!(s["activeVersion"].as_str(), active, "{s:#}");
    assert_eq!(
        s["appliedSpecHash"].as_str(),
        applied.map(hash_of).as_deref(),
        "{s:#}"
    );
    assert_eq!(
        s["failedSpecHash"].as_str(),
        failed.map(hash_of).as_deref(),
        "{s:#}"
    );
    assert_eq!(
        s.get("lastSuccessfulSpec").filter(|v| !v.is_null()),
        last.map(to_json).as_ref(),
        "{s:#}"
    );
    assert_eq!(
        s.get("previousSuccessfulSpec").filter(|v| !v.is_null()),
        prev.map(to_json).as_ref(),
        "{s:#}"
    );
    assert_eq!(
        s.get("rollbackSpec").filter(|v| !v.is_null()),
        rollback.map(to_json).as_ref(),
        "{s:#}"
    );
    assert_eq!(s["rollbackRequest"].as_str(), request, "{s:#}");
    assert_eq!(s["rollbackCount"], count, "{s:#}");
    assert_eq!(w.conds(), conds, "{s:#}");
    if applied.is_some() {
        assert_eq!(
            s["targetDeploymentGeneration"],
            w.deployment.as_ref().unwrap()["metadata"]["generation"]
        );
    }
    for c in s["conditions"].as_array().unwrap() {
        assert_eq!(c["observedGeneration"], w.model["metadata"]["generation"]);
        assert!(c["lastTransitionTime"].as_str().unwrap().ends_with('Z'));
        assert!(!c["message"].as_str().unwrap().is_empty());
    }
}

/// A state's conditions as the tests spell them: a named state of the
/// vocabulary, or four `T:Reason` labels written out.
pub trait Labels {
    fn labels4(self) -> [String; 4];
}

impl Labels for [&str; 4] {
    fn labels4(self) -> [String; 4] {
        self.map(str::to_string)
    }
}

impl Labels for CondSet {
    fn labels4(self) -> [String; 4] {
        let labels = self.labels();
        labels
            .try_into()
            .unwrap_or_else(|l| panic!("the tests spell four conditions: {l:?}"))
    }
}

// The states named once, in the status vocabulary (docs/contract.md §6.14).
pub const READY: CondSet = states::READY;
/// Back on the retained spec by hand: an override, not a failure (9.22).
pub const MANUAL_ROLLBACK_SUCCEEDED: CondSet = states::rolled_back(true);
/// Back on the retained spec after a failed rollout.
pub const ROLLBACK_SUCCEEDED: CondSet = states::rolled_back(false);
/// Missed its deadline with automatic rollback turned off.
pub const FAILED_NO_ROLLBACK: CondSet = states::FAILED_NO_ROLLBACK;

/// Started for this reason, written `T:SpecChanged`.
pub fn started(reason: &str) -> CondSet {
    let r = reason.trim_start_matches("T:");
    states::started(Reason::parse(r).unwrap_or_else(|| panic!("no reason {r}")))
}

/// Ready on the only spec it has ever had: nothing previous, no rollback.
pub fn assert_ready_on_first(w: &World, s: &Value) {
    let v = s["version"].as_str().unwrap();
    assert_status(
        w,
        Want {
            active: Some(v),
            applied: Some(s),
            last: Some(s),
            ..Want::new("Ready", s, READY)
        },
    );
}

/// The first pass over a new resource: finalizer, ConfigMap, Deployment and
/// status written, one RolloutStarted, the rollout under way.
pub fn assert_first_pass_starts_rollout(w: &mut World, s: &Value) {
    let (tags, ev) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_status(
        w,
        Want {
            applied: Some(s),
            ..Want::new("RollingOut", s, started("T:InitialRollout"))
        },
    );
}

/// Ready on `s`, then drift put right: rolling out the same spec again.
pub fn assert_drift_corrected(w: &World, s: &Value) {
    let v = s["version"].as_str().unwrap();
    assert_status(
        w,
        Want {
            active: Some(v),
            applied: Some(s),
            last: Some(s),
            ..Want::new("RollingOut", s, started("T:DriftCorrected"))
        },
    );
}

/// A second Deployment like the first, under another name.
pub fn other_deployment(name: &str) -> Value {
    let mut d = deployment();
    d["metadata"]["name"] = json!(name);
    d["metadata"]["uid"] = json!(format!("{name}-uid"));
    d
}

/// The world as the API the observer reads what the caches do not hold.
impl ApiReads for World {
    fn deployment(&self, _ns: &str, name: &str) -> Result<Option<DeploymentView>, Error> {
        let named = |d: &&Value| d["metadata"]["name"] == name;
        let d = self
            .deployment
            .iter()
            .chain(self.others.values())
            .find(named);
        Ok(d.map(|d| DeploymentView::from_json(d).unwrap()))
    }

    /// Every owner the world names exists, but those it says are gone.
    fn model_exists(&self, ns: &str, name: &str) -> Result<bool, Error> {
        Ok(!self.orphans.contains(&format!("{ns}/{name}")))
    }

    fn config_map(&self, _ns: &str, name: &str) -> Result<Option<ConfigMapView>, Error> {
        let cm = self.config_maps.get(name);
        Ok(cm.map(|c| ConfigMapView::from_json(c).unwrap()))
    }
}
