//! The pure core against the contract: a row test for each case of sections
//! 6, 7 and 9, and the walk-throughs, asserting the full status and the
//! planned writes at every step. A small in-memory "world" carries plans out
//! with the simulated API server's merge implementations, as the controller
//! would against a real server.

mod common;

use common::*;
use kubesim::patch::{merge_patch, strategic_merge};
use openmed_operator::model::names::event_name;
use openmed_operator::model::spec::empty_manifest_hash;
use openmed_operator::model::status::{states, CondSet, Reason};
use openmed_operator::model::{validate, EventReason};
use openmed_operator::reconcile::{
    execute, lookups, note_autoscaled, plan, plan_refused, Cluster, ConfigMapView, DeploymentView,
    EventSpec, Executed, ModelView, Observed, Plan, Refused, TargetPolicy, Write,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What a step wrote, in order, as short tags: F+ finalizer added, CM+
/// ConfigMap created, CM~ ConfigMap patched, D~ Deployment patched, CM-
/// ConfigMap deleted, F- finalizer released, S status patched.
type Tags = Vec<&'static str>;

struct World {
    model: Value,
    deployment: Option<Value>,
    /// Other Deployments in the namespace (a previous target, say).
    others: BTreeMap<String, Value>,
    /// Owners the shell has confirmed gone (9.16).
    orphans: Vec<String>,
    config_maps: BTreeMap<String, Value>,
    /// Event names posted, with reasons, in order.
    events: Vec<(String, EventReason)>,
    clock: u64,
    rv: u64,
    uid_seq: u64,
    /// What the current step wrote and posted.
    tags: Tags,
    posted: Vec<EventReason>,
    /// Which Deployments may become targets (9.8).
    targets: TargetPolicy,
}

impl World {
    fn new(spec: Value) -> World {
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

    fn now(&self) -> String {
        format!(
            "2026-11-30T00:{:02}:{:02}Z",
            self.clock / 60,
            self.clock % 60
        )
    }

    fn bump_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// What the shell would observe: the objects the lookups name, and
    /// every other Deployment or ConfigMap naming this owner.
    fn view(&self) -> (ModelView, Vec<DeploymentView>, Vec<ConfigMapView>) {
        let m = ModelView::from_json(&self.model).unwrap();
        let l = lookups(&m);
        let owner = m.owner();
        let mut ds: Vec<DeploymentView> = self
            .deployment
            .iter()
            .chain(self.others.values())
            .map(|d| DeploymentView::from_json(d).unwrap())
            .filter(|d| {
                l.deployments.contains(&d.name)
                    || d.owner.as_deref() == Some(owner.as_str())
                    || d.template_owner.as_deref() == Some(owner.as_str())
            })
            .collect();
        note_autoscaled(&m, &mut ds);
        let cms = self
            .config_maps
            .values()
            .map(|c| ConfigMapView::from_json(c).unwrap())
            .filter(|c| {
                l.config_maps.contains(&c.name) || c.owner.as_deref() == Some(owner.as_str())
            })
            .collect();
        (m, ds, cms)
    }

    /// The Deployment of that name, wherever it is kept.
    fn deployment_named(&mut self, name: &str) -> &mut Value {
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

    fn plan(&self) -> Plan {
        let (m, ds, cms) = self.view();
        let now = self.now();
        plan(Observed {
            model: &m,
            deployments: &ds,
            config_maps: &cms,
            orphans: &self.orphans,
            now: &now,
            targets: &self.targets,
        })
    }

    /// One pass: plan, then carry it out as the controller would.
    fn step(&mut self) -> (Tags, Vec<EventReason>) {
        self.clock += 1;
        let p = self.plan();
        self.tags.clear();
        self.posted.clear();
        let rv = self.model["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        // The shell's executor, against this in-memory cluster.
        match execute(self, &p, &rv) {
            Ok(Executed::Done) => {}
            Ok(Executed::Replan(cm)) => panic!("the world has no unknown ConfigMap: {cm:?}"),
            Err(never) => match never {},
        }
        (
            std::mem::take(&mut self.tags),
            std::mem::take(&mut self.posted),
        )
    }

    fn status(&self) -> &Value {
        &self.model["status"]
    }

    fn conds(&self) -> Vec<String> {
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

    fn set_spec(&mut self, spec: Value) {
        self.model["spec"] = spec;
        let g = self.model["metadata"]["generation"].as_i64().unwrap() + 1;
        self.model["metadata"]["generation"] = json!(g);
    }

    fn annotate(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(v) => self.model["metadata"]["annotations"][key] = json!(v),
            None => {
                if let Some(a) = self.model["metadata"]["annotations"].as_object_mut() {
                    a.remove(key);
                }
            }
        }
    }

    fn dep(&mut self) -> &mut Value {
        self.deployment.as_mut().unwrap()
    }

    /// The Deployment controller finishes the rollout of the current spec.
    fn rollout_completes(&mut self) {
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
    fn rollout_progressing(&mut self) {
        let d = self.dep();
        let g = d["metadata"]["generation"].clone();
        let r = d["spec"]["replicas"].as_i64().unwrap();
        d["status"] = json!({
            "observedGeneration": g, "replicas": r + 1, "updatedReplicas": 1, "readyReplicas": r, "availableReplicas": r,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}],
        });
    }

    /// The rollout of the current generation misses its deadline.
    fn rollout_misses_deadline(&mut self) {
        let d = self.dep();
        let g = d["metadata"]["generation"].clone();
        let r = d["spec"]["replicas"].as_i64().unwrap();
        d["status"] = json!({
            "observedGeneration": g, "replicas": r + 1, "updatedReplicas": 1, "readyReplicas": r, "availableReplicas": r,
            "unavailableReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
        });
    }

    fn delete(&mut self) {
        self.model["metadata"]["deletionTimestamp"] = json!(self.now());
        let g = self.model["metadata"]["generation"].as_i64().unwrap() + 1;
        self.model["metadata"]["generation"] = json!(g);
    }

    fn preload_env(&self) -> Value {
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
    fn converge(&mut self) {
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
        assert!(
            !self.config_maps.contains_key(&name),
            "create of an existing ConfigMap"
        );
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

    fn patch_status(&mut self, body: &Value) -> Result<(), Self::Error> {
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
        let name = event_name(NAME, e.reason.as_str(), generation);
        if !self.events.iter().any(|(n, _)| *n == name) {
            self.events.push((name, e.reason));
        }
        self.posted.push(e.reason);
        Ok(())
    }
}

fn hash_of(spec: &Value) -> String {
    validate(NAME, Some(spec)).unwrap().hash()
}

fn manifest_hash_of(spec: &Value) -> String {
    validate(NAME, Some(spec)).unwrap().manifest_hash()
}

/// The whole expected status (docs/contract.md §5); a field left unset must
/// be absent from the status.
struct Want<'a> {
    phase: &'a str,
    desired: &'a Value,
    conds: [String; 4],
    active: Option<&'a str>,
    applied: Option<&'a Value>,
    failed: Option<&'a Value>,
    last: Option<&'a Value>,
    prev: Option<&'a Value>,
    rollback: Option<&'a Value>,
    request: Option<&'a str>,
    count: i64,
}

impl<'a> Want<'a> {
    fn new(phase: &'a str, desired: &'a Value, conds: impl Labels) -> Self {
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
fn assert_status(w: &World, want: Want) {
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
trait Labels {
    fn labels4(self) -> [String; 4];
}

impl Labels for [&str; 4] {
    fn labels4(self) -> [String; 4] {
        self.map(str::to_string)
    }
}

impl Labels for CondSet {
    fn labels4(self) -> [String; 4] {
        self.labels()
    }
}

// The states named once, in the status vocabulary (docs/contract.md §6.14).
const READY: CondSet = states::READY;
/// Back on the retained spec by hand: an override, not a failure (9.22).
const MANUAL_ROLLBACK_SUCCEEDED: CondSet = states::rolled_back(true);
/// Back on the retained spec after a failed rollout.
const ROLLBACK_SUCCEEDED: CondSet = states::rolled_back(false);
/// Missed its deadline with automatic rollback turned off.
const FAILED_NO_ROLLBACK: CondSet = states::FAILED_NO_ROLLBACK;

/// Started for this reason, written `T:SpecChanged`.
fn started(reason: &str) -> CondSet {
    let r = reason.trim_start_matches("T:");
    states::started(Reason::parse(r).unwrap_or_else(|| panic!("no reason {r}")))
}

/// Ready on the only spec it has ever had: nothing previous, no rollback.
fn assert_ready_on_first(w: &World, s: &Value) {
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
fn assert_first_pass_starts_rollout(w: &mut World, s: &Value) {
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
fn assert_drift_corrected(w: &World, s: &Value) {
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

// ---------------------------------------------------------------- walk-throughs

#[test]
fn first_rollout_to_ready_then_a_pass_that_plans_nothing() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    assert_first_pass_starts_rollout(&mut w, &s1);
    assert_eq!(
        w.model["metadata"]["finalizers"],
        json!(["openmed.ai/finalizer"])
    );
    assert_eq!(
        w.preload_env()["valueFrom"]["configMapKeyRef"]["name"],
        "openmed-service-model-manifest"
    );
    let cm = &w.config_maps["openmed-service-model-manifest"];
    assert_eq!(cm["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], V1);

    // The controller has seen it, pods not ready: still rolling out, no write.
    w.rollout_progressing();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty());
    assert_status(
        &w,
        Want {
            applied: Some(&s1),
            ..Want::new(
                "RollingOut",
                &s1,
                [
                    "F:RolloutInProgress",
                    "T:DeploymentProgressing",
                    "F:Healthy",
                    "F:NotRequested",
                ],
            )
        },
    );
    let (tags, _) = w.step();
    assert!(tags.is_empty(), "{tags:?}");

    w.rollout_completes();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RolloutSucceeded]);
    assert_ready_on_first(&w, &s1);

    // Converged: a pass plans no write, no status patch, no Event.
    let p = w.plan();
    assert!(p.is_noop(), "{p:?}");
    assert!(p.events_to_post(None).is_empty());
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty());
    let before = w.status().clone();
    w.clock += 100;
    w.step();
    assert_eq!(
        w.status(),
        &before,
        "lastTransitionTime must not move without a change"
    );
}

#[test]
fn configmap_tampered_then_drift_corrected() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    w.converge();
    w.config_maps
        .get_mut("openmed-service-model-manifest")
        .unwrap()["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] = json!("evil/model");
    let gen_before = w.deployment.as_ref().unwrap()["metadata"]["generation"].clone();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "S"], "only the ConfigMap needs fixing");
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_drift_corrected(&w, &s1);
    assert_eq!(
        w.config_maps["openmed-service-model-manifest"]["data"]["OPENMED_SERVICE_PRELOAD_MODELS"],
        V1
    );
    assert_eq!(
        w.deployment.as_ref().unwrap()["metadata"]["generation"],
        gen_before
    );
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_ready_on_first(&w, &s1);

    // Deleted outright: recreated.
    w.config_maps.clear();
    let (tags, _) = w.step();
    assert_eq!(tags, ["CM+", "S"]);
}

#[test]
fn deployment_tampered_then_drift_corrected() {
    let s1 = spec(V1);
    for tamper in ["replicas", "env", "hash"] {
        let mut w = World::new(s1.clone());
        w.converge();
        match tamper {
            "replicas" => w.dep()["spec"]["replicas"] = json!(7),
            "env" => {
                w.dep()["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .remove(1);
            }
            _ => {
                w.dep()["spec"]["template"]["metadata"]["annotations"]
                    ["openmed.ai/model-manifest-hash"] = json!("sha256:0")
            }
        }
        let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
        w.dep()["metadata"]["generation"] = json!(g);
        let (tags, ev) = w.step();
        assert_eq!(tags, ["D~", "S"], "{tamper}");
        assert_eq!(ev, [EventReason::RolloutStarted]);
        assert_drift_corrected(&w, &s1);
        assert_eq!(w.dep()["spec"]["replicas"], 2);
        assert_eq!(
            w.preload_env()["valueFrom"]["configMapKeyRef"]["key"],
            "OPENMED_SERVICE_PRELOAD_MODELS"
        );
        w.rollout_completes();
        w.step();
        assert_ready_on_first(&w, &s1);
    }
}

#[test]
fn v2_misses_its_deadline_rolls_back_automatically() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s2),
            last: Some(&s1),
            ..Want::new("RollingOut", &s2, started("T:SpecChanged"))
        },
    );

    w.rollout_misses_deadline();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(
        ev,
        [EventReason::RolloutFailed, EventReason::RollbackStarted]
    );
    let auto = format!("automatic:{V2}");
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            failed: Some(&s2),
            last: Some(&s1),
            rollback: Some(&s1),
            request: Some(auto.as_str()),
            count: 1,
            ..Want::new(
                "RolledBack",
                &s2,
                [
                    "F:RolledBack",
                    "T:RollbackInProgress",
                    "T:RolloutFailed",
                    "F:RollbackInProgress",
                ],
            )
        },
    );
    assert_eq!(
        w.config_maps["openmed-service-model-manifest"]["data"]["OPENMED_SERVICE_PRELOAD_MODELS"],
        V1
    );

    w.rollout_completes();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            failed: Some(&s2),
            last: Some(&s1),
            rollback: Some(&s1),
            request: Some(auto.as_str()),
            count: 1,
            ..Want::new("RolledBack", &s2, ROLLBACK_SUCCEEDED)
        },
    );
    // The failed spec is not retried by itself.
    assert!(w.plan().is_noop());

    // The user fixes the spec: a new rollout.
    let s3 = spec(V3);
    w.set_spec(s3.clone());
    let (tags, _) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s3),
            last: Some(&s1),
            count: 1,
            ..Want::new("RollingOut", &s3, started("T:SpecChanged"))
        },
    );
    w.rollout_completes();
    w.step();
    assert_status(
        &w,
        Want {
            active: Some(V3),
            applied: Some(&s3),
            last: Some(&s3),
            prev: Some(&s1),
            count: 1,
            ..Want::new("Ready", &s3, READY)
        },
    );
}

/// Found by the soak (seed 972815721): a resource blocked by a conflict
/// after its first apply, whose rival then rolled out a version that failed
/// and went away. The failed rollout was the rival's template, not ours:
/// the drift is put right, nothing is recorded as failed.
#[test]
fn a_failure_of_a_template_someone_else_wrote_is_not_ours() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    // The rival writes its own template, fails its deadline, and is gone.
    let ann = &mut w.dep()["spec"]["template"]["metadata"]["annotations"];
    ann["openmed.ai/model-manifest-hash"] = json!("sha256:rival");
    ann["openmed.ai/model-resource"] = json!("openmed/rival");
    let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
    w.dep()["metadata"]["generation"] = json!(g);
    w.rollout_misses_deadline();
    w.orphans.push("openmed/rival".into());
    let (tags, ev) = w.step();
    assert!(!ev.contains(&EventReason::RolloutFailed), "{ev:?}");
    assert!(tags.contains(&"D~"), "{tags:?}");
    assert_eq!(w.status()["phase"], "RollingOut");
    assert!(w.status()["failedSpecHash"].is_null());
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready", "{:#}", w.status());
}

#[test]
fn rollback_also_fails_terminal_failed_no_retry() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.step();
    w.rollout_misses_deadline();
    w.step();
    w.rollout_misses_deadline();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RollbackFailed]);
    let auto = format!("automatic:{V2}");
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            failed: Some(&s2),
            last: Some(&s1),
            rollback: Some(&s1),
            request: Some(auto.as_str()),
            count: 1,
            ..Want::new(
                "Failed",
                &s2,
                [
                    "F:RollbackFailed",
                    "F:ProgressDeadlineExceeded",
                    "T:RollbackFailed",
                    "F:RollbackFailed",
                ],
            )
        },
    );
    for _ in 0..3 {
        let (tags, ev) = w.step();
        assert!(tags.is_empty() && ev.is_empty(), "{tags:?} {ev:?}");
    }
}

#[test]
fn rollback_disabled_gives_failed() {
    let s1 = spec(V1);
    let mut s2 = spec(V2);
    s2["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.step();
    w.rollout_misses_deadline();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RolloutFailed]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s2),
            failed: Some(&s2),
            last: Some(&s1),
            ..Want::new("Failed", &s2, FAILED_NO_ROLLBACK)
        },
    );
    assert!(w.plan().is_noop());
}

#[test]
fn first_rollout_failing_has_nothing_to_roll_back_to() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    w.step();
    w.rollout_misses_deadline();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RolloutFailed]);
    assert_status(
        &w,
        Want {
            applied: Some(&s1),
            failed: Some(&s1),
            ..Want::new("Failed", &s1, FAILED_NO_ROLLBACK)
        },
    );
}

#[test]
fn manual_rollback_then_spec_set_to_it_and_annotation_removed() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.converge();
    assert_status(
        &w,
        Want {
            active: Some(V2),
            applied: Some(&s2),
            last: Some(&s2),
            prev: Some(&s1),
            ..Want::new("Ready", &s2, READY)
        },
    );

    w.annotate("openmed.ai/rollback-to", Some(&format!(" {V1} ")));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RollbackStarted]);
    let manual = format!("manual:{V1}");
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            // 9.22: an override, not a verdict: v2 served, it is not failed.
            failed: None,
            last: Some(&s2),
            prev: Some(&s1),
            rollback: Some(&s1),
            request: Some(manual.as_str()),
            count: 1,
            ..Want::new(
                "RolledBack",
                &s2,
                [
                    "F:ManualRollback",
                    "T:RollbackInProgress",
                    "T:ManualRollback",
                    "F:RollbackInProgress",
                ],
            )
        },
    );

    w.rollout_completes();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            failed: None,
            last: Some(&s2),
            prev: Some(&s1),
            rollback: Some(&s1),
            request: Some(manual.as_str()),
            count: 1,
            ..Want::new("RolledBack", &s2, MANUAL_ROLLBACK_SUCCEEDED)
        },
    );
    assert!(w.plan().is_noop(), "a completed manual rollback is stable");

    // The user makes it permanent: the Deployment already serves v1, so it
    // is judged at once (9.11): Ready in this pass, no rollout started.
    w.set_spec(s1.clone());
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "the Deployment already serves v1");
    assert_eq!(ev, [EventReason::RolloutSucceeded]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            last: Some(&s1),
            prev: Some(&s2),
            count: 1,
            ..Want::new("Ready", &s1, READY)
        },
    );
}

#[test]
fn manual_rollback_to_an_unretained_version_is_rejected_then_cleared() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.converge();
    let ready_status = w.status().clone();

    w.annotate("openmed.ai/rollback-to", Some("OpenMed/never-deployed"));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "a rejected rollback writes nothing but status");
    assert_eq!(ev, [EventReason::RollbackRejected]);
    assert_status(
        &w,
        Want {
            active: Some(V2),
            applied: Some(&s2),
            last: Some(&s2),
            prev: Some(&s1),
            request: Some("manual:OpenMed/never-deployed"),
            ..Want::new(
                "Failed",
                &s2,
                [
                    "F:RollbackTargetUnavailable",
                    "F:Blocked",
                    "T:RollbackTargetUnavailable",
                    "F:RollbackRejected",
                ],
            )
        },
    );
    let (tags, _) = w.step();
    assert!(tags.is_empty());

    // 9.3: removing the annotation returns the resource to where it was.
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.conds(), READY.labels());
    assert!(w.status()["rollbackRequest"].is_null());
    assert_eq!(
        w.status()["lastSuccessfulSpec"],
        ready_status["lastSuccessfulSpec"]
    );
    assert_eq!(
        w.status()["previousSuccessfulSpec"],
        ready_status["previousSuccessfulSpec"]
    );

    // Correcting it to a retained version is a manual rollback.
    w.annotate("openmed.ai/rollback-to", Some("OpenMed/never-deployed"));
    w.step();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackStarted]);
    assert_eq!(w.status()["phase"], "RolledBack");
}

/// Issue 9 and 9.15: a 200 KB `rollback-to` is cut to 256 characters
/// before it is copied anywhere (status, condition messages, Events).
#[test]
fn a_huge_rollback_annotation_is_cut_before_it_is_copied() {
    let mut w = World::new(spec(V1));
    w.converge();
    let huge = "x".repeat(200_000);
    w.annotate("openmed.ai/rollback-to", Some(&huge));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RollbackRejected]);
    let request = w.status()["rollbackRequest"].as_str().unwrap().to_string();
    assert_eq!(request.chars().count(), "manual:".len() + 256, "{request}");
    assert!(request.ends_with("..."));
    for c in w.status()["conditions"].as_array().unwrap() {
        assert!(c["message"].as_str().unwrap().chars().count() <= 1024);
    }
    assert!(w.status().to_string().len() < 8_000);
    let (tags, _) = w.step();
    assert!(tags.is_empty(), "the cut value is stable: {tags:?}");
}

#[test]
fn target_not_found_then_the_deployment_appears() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    let d = w.deployment.take();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "nothing acted on: no finalizer, no ConfigMap");
    assert_eq!(ev, [EventReason::TargetNotFound]);
    let s = w.status();
    assert_eq!(s["phase"], "Pending");
    assert_eq!(s["desiredSpecHash"], hash_of(&s1).as_str());
    assert!(s["appliedSpecHash"].is_null());
    assert_eq!(
        w.conds(),
        [
            "F:TargetNotFound",
            "F:Blocked",
            "T:TargetNotFound",
            "F:NotRequested"
        ]
    );
    assert!(w.model["metadata"]["finalizers"].is_null());
    let (tags, ev) = w.step();
    assert!(
        tags.is_empty() && ev.is_empty(),
        "a repeated block writes nothing"
    );

    w.deployment = d;
    assert_first_pass_starts_rollout(&mut w, &s1);
}

#[test]
fn container_not_found_and_target_conflict_clear_by_themselves() {
    let s1 = spec(V1);
    // Container missing at first.
    let mut w = World::new(s1.clone());
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::ContainerNotFound]);
    assert_eq!(w.status()["phase"], "Failed");
    assert!(
        w.status()["failedSpecHash"].is_null(),
        "a block is not a failed spec"
    );
    assert_eq!(
        w.conds(),
        [
            "F:ContainerNotFound",
            "F:Blocked",
            "T:ContainerNotFound",
            "F:NotRequested"
        ]
    );
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("openmed-service");
    w.converge();

    // Another resource claims the Deployment: conflict, then it lets go.
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/other");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::TargetConflict]);
    assert_eq!(w.status()["phase"], "Failed");
    assert_eq!(
        w.conds(),
        [
            "F:TargetConflict",
            "F:Blocked",
            "T:TargetConflict",
            "F:NotRequested"
        ]
    );
    assert!(w.status()["failedSpecHash"].is_null());
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] =
        json!("openmed/openmed-service");
    let (tags, _) = w.step();
    assert_eq!(
        tags,
        ["S"],
        "judged as it stands: still ours, still serving"
    );
    assert_ready_on_first(&w, &s1);
}

#[test]
fn a_block_over_a_failed_spec_shows_the_failure_again_when_it_clears() {
    let s1 = spec(V1);
    let mut s2 = spec(V2);
    s2["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.step();
    w.rollout_misses_deadline();
    w.step();
    let failed = w.status().clone();
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed");
    w.step();
    assert_eq!(w.conds()[0], "F:ContainerNotFound");
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("openmed-service");
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(
        w.status()["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["reason"])
            .collect::<Vec<_>>(),
        failed["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["reason"])
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_foreign_configmap_is_reported_and_never_written() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "openmed-service-model-manifest", "namespace": NS, "uid": "foreign"}, "data": {"x": "y"}});
    w.config_maps
        .insert("openmed-service-model-manifest".into(), foreign.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::ConfigMapConflict]);
    assert_eq!(w.status()["phase"], "Failed");
    assert_eq!(
        w.conds(),
        [
            "F:ConfigMapConflict",
            "F:Blocked",
            "T:ConfigMapConflict",
            "F:NotRequested"
        ]
    );
    assert_eq!(w.config_maps["openmed-service-model-manifest"], foreign);
    assert_eq!(
        w.dep()["metadata"]["generation"],
        1,
        "the Deployment is not touched either"
    );
    // Deleting it clears the block.
    w.config_maps.clear();
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
}

#[test]
fn invalid_spec_touches_nothing_and_names_the_field() {
    let v: Value = serde_json::from_str(include_str!("fixtures/vectors.json")).unwrap();
    for (label, case) in v["invalid"].as_object().unwrap() {
        let mut w = World::new(case["resource"]["spec"].clone());
        let (tags, ev) = w.step();
        assert_eq!(tags, ["S"], "{label}");
        assert!(ev.is_empty(), "{label}");
        assert_eq!(w.status()["phase"], "Failed", "{label}");
        assert_eq!(
            w.conds(),
            [
                "F:InvalidSpec",
                "F:Blocked",
                "T:InvalidSpec",
                "F:NotRequested"
            ],
            "{label}"
        );
        let msg = w.status()["conditions"][0]["message"].as_str().unwrap();
        assert!(
            msg.contains(case["field_hint"].as_str().unwrap()),
            "{label}: {msg}"
        );
        assert!(w.config_maps.is_empty());
        assert_eq!(w.dep()["metadata"]["generation"], 1);
    }
}

#[test]
fn an_invalid_edit_then_a_fix_resumes() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    w.converge();
    let mut bad = spec(V2);
    bad["replicas"] = json!(0);
    w.set_spec(bad);
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(w.status()["phase"], "Failed");
    assert_eq!(
        w.status()["activeVersion"],
        V1,
        "what is serving is still reported"
    );
    w.set_spec(s1.clone());
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_ready_on_first(&w, &s1);
}

// ---------------------------------------------------------------- deletion (section 7, 9.4)

fn delete_pass(w: &mut World) -> (Tags, Vec<EventReason>) {
    w.delete();
    w.step()
}

#[test]
fn delete_of_an_owned_target() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["other.io/keep", "openmed.ai/finalizer"]);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
    assert_eq!(w.model["metadata"]["finalizers"], json!(["other.io/keep"]));
    assert!(w.config_maps.is_empty());
    let d = w.deployment.as_ref().unwrap();
    assert!(d["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-manifest-hash"],
        empty_manifest_hash().as_str()
    );
    assert_eq!(
        w.preload_env(),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""})
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][1]["env"][0]["value"],
        "not-mine"
    );
    // Again (a retry after a partial failure): nothing of ours is left to do.
    w.model["metadata"]["finalizers"] = json!(["openmed.ai/finalizer"]);
    let (tags, _) = w.step();
    assert_eq!(tags, ["F-"]);
}

#[test]
fn delete_with_foreign_ownership_leaves_things_untouched() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/other");
    w.dep()["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-resource"] =
        json!("openmed/other");
    let cm = w
        .config_maps
        .get_mut("openmed-service-model-manifest")
        .unwrap();
    cm["metadata"]["ownerReferences"] = json!([]);
    let before_dep = w.deployment.clone();
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["F-"]);
    assert_eq!(ev, [EventReason::ModelRemovalSkipped]);
    assert_eq!(w.deployment, before_dep);
    assert!(w.config_maps.contains_key("openmed-service-model-manifest"));
}

#[test]
fn delete_of_a_resource_with_an_invalid_spec_falls_back_to_what_was_applied() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut bad = spec(V1);
    bad["tier"] = json!("Huge");
    w.set_spec(bad);
    w.step();
    assert_eq!(w.status()["phase"], "Failed");
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
}

#[test]
fn delete_with_nothing_applied_just_releases() {
    let mut w = World::new(json!({"family": "PII"}));
    w.model["metadata"]["finalizers"] = json!(["openmed.ai/finalizer"]);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["F-"]);
    assert!(ev.is_empty());
    assert_eq!(w.model["metadata"]["finalizers"], json!([]));
}

#[test]
fn delete_recognises_the_kopf_finalizer() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["kopf.zalando.org/KopfFinalizerMarker"]);
    let (tags, _) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(w.model["metadata"]["finalizers"], json!([]));
}

#[test]
fn delete_without_our_finalizer_does_nothing() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["other.io/keep"]);
    let (tags, ev) = delete_pass(&mut w);
    assert!(tags.is_empty() && ev.is_empty());
}

#[test]
fn no_finalizer_is_added_once_deletion_has_begun() {
    let mut w = World::new(spec(V1));
    w.delete();
    let p = w.plan();
    assert!(p
        .writes
        .iter()
        .all(|x| !matches!(x, Write::AddFinalizer { .. })));
    assert!(p.is_noop());
}

// ---------------------------------------------------------------- 9.1 and migration

#[test]
fn a_resource_adopted_from_the_reference_operator_is_not_restarted() {
    // Status, ConfigMap and Deployment as the reference operator leaves them.
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["kopf.zalando.org/KopfFinalizerMarker"]);
    if let Some(l) = w.dep()["metadata"]["labels"].as_object_mut() {
        l.remove("openmed.ai/managed");
    }
    // Nor has it the opt-in label: it names this resource, which is enough (9.8).
    let labels = w.dep()["metadata"]["labels"].as_object_mut().unwrap();
    labels.remove("openmed.ai/managed-target");
    let gen = w.dep()["metadata"]["generation"].clone();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["D~"], "only the claim label is added");
    assert!(ev.is_empty());
    assert_eq!(w.dep()["metadata"]["generation"], gen, "no pod restart");
    assert!(w.plan().is_noop());
}

fn without_opt_in(w: &mut World) {
    let labels = w.dep()["metadata"]["labels"].as_object_mut().unwrap();
    labels.remove("openmed.ai/managed-target");
}

/// 9.8 (issue 9, the confused deputy): a Deployment that has not opted in
/// is never written; the block says how to opt in and clears by itself.
#[test]
fn a_deployment_that_has_not_opted_in_is_never_written() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    without_opt_in(&mut w);
    let before = w.dep().clone();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "no finalizer, no ConfigMap, no patch");
    assert_eq!(ev, [EventReason::TargetNotOptedIn]);
    assert!(EventReason::TargetNotOptedIn.is_warning());
    assert_eq!(w.status()["phase"], "Pending");
    assert_eq!(
        w.conds(),
        [
            "F:TargetNotOptedIn",
            "F:Blocked",
            "T:TargetNotOptedIn",
            "F:NotRequested"
        ]
    );
    let msg = w.status()["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("openmed.ai/managed-target=true"), "{msg}");
    assert!(msg.contains("kubectl label deployment"), "{msg}");
    assert!(w.config_maps.is_empty());
    assert_eq!(*w.dep(), before);
    let (tags, ev) = w.step();
    assert!(
        tags.is_empty() && ev.is_empty(),
        "a repeated block writes nothing"
    );
    // The label appears: the block clears and the rollout starts.
    w.dep()["metadata"]["labels"]["openmed.ai/managed-target"] = json!("true");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    w.rollout_completes();
    w.step();
    assert_ready_on_first(&w, &s1);
    // Once ours, removing the label does not orphan it: it names us.
    without_opt_in(&mut w);
    assert!(w.plan().is_noop());
}

/// 9.8: `--allow-any-target` restores the reference's rule; the operator's
/// own Deployment is never a target, labelled or not.
#[test]
fn allow_any_target_and_the_operators_own_deployment() {
    let mut w = World::new(spec(V1));
    without_opt_in(&mut w);
    w.targets.allow_any = true;
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);

    for allow_any in [false, true] {
        let mut w = World::new(spec(V1));
        w.targets = TargetPolicy {
            allow_any,
            own: Some((NS.to_string(), NAME.to_string())),
        };
        let (tags, ev) = w.step();
        assert_eq!(tags, ["S"], "allow_any: {allow_any}");
        assert_eq!(ev, [EventReason::TargetNotOptedIn]);
        let msg = w.status()["conditions"][0]["message"].as_str().unwrap();
        assert!(msg.contains("runs the operator itself"), "{msg}");
    }
}

#[test]
fn a_lost_finalizer_is_put_back() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!([]);
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+"]);
}

// ---------------------------------------------------------------- more rows of section 6

#[test]
fn recreate_strategy_is_applied_without_rolling_update() {
    let mut s = spec(V1);
    s["rolloutStrategy"] = json!({"type": "Recreate", "progressDeadlineSeconds": 120});
    let mut w = World::new(s.clone());
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    assert_eq!(w.dep()["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(w.dep()["spec"]["progressDeadlineSeconds"], 120);
    // The switch from RollingUpdate goes before the resize from 1 to 2.
    assert_eq!(w.dep()["spec"]["replicas"], 1);
    w.rollout_progressing();
    let (tags, _) = w.step();
    assert_eq!(tags, ["D~", "S"]);
    assert_eq!(w.dep()["spec"]["replicas"], 2);
    w.rollout_completes();
    w.step();
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s),
            last: Some(&s),
            ..Want::new("Ready", &s, READY)
        },
    );
    assert!(w.plan().is_noop());
}

/// kubernetes#125568: a switch to Recreate and a resize in one write can
/// wedge a Deployment mid-rollout, so the resize follows once the
/// controller has seen the switch, within the same rollout.
#[test]
fn a_switch_to_recreate_goes_before_the_resize_that_came_with_it() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut s2 = spec(V2);
    s2["replicas"] = json!(4);
    s2["rolloutStrategy"] = json!({"type": "Recreate"});
    w.set_spec(s2.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_eq!(w.dep()["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(w.dep()["spec"]["replicas"], 2, "the resize waits");
    assert_eq!(w.status()["phase"], "RollingOut");
    // The controller has not seen the switch: nothing more is written.
    let (tags, ev) = w.step();
    assert!(!tags.contains(&"D~"), "{tags:?}");
    assert!(ev.is_empty(), "{ev:?}");
    assert!(w.plan().is_noop());
    // Once it has, the resize goes, as part of the same rollout.
    w.rollout_progressing();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["D~", "S"]);
    assert!(ev.is_empty(), "no second RolloutStarted, no drift: {ev:?}");
    assert_eq!(w.dep()["spec"]["replicas"], 4);
    let resized = w.dep()["metadata"]["generation"].clone();
    assert_eq!(
        w.status()["targetDeploymentGeneration"],
        resized,
        "readiness waits for the resize"
    );
    assert!(
        !w.conds().iter().any(|c| c.contains("DriftCorrected")),
        "{:?}",
        w.conds()
    );
    assert_eq!(w.status()["phase"], "RollingOut");
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready", "{:#}", w.status());
    assert!(w.plan().is_noop());
    // Without a switch, a resize under Recreate goes in the same write.
    let mut s3 = s2.clone();
    s3["replicas"] = json!(1);
    s3["version"] = json!(V1);
    w.set_spec(s3);
    let (tags, _) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(w.dep()["spec"]["replicas"], 1);
}

#[test]
fn a_foreign_owner_on_the_pod_template_alone_is_a_conflict() {
    let mut w = World::new(spec(V1));
    w.dep()["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-resource"] =
        json!("other/model");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::TargetConflict]);
    assert!(w.status()["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .contains("other/model"));
}

#[test]
fn manual_rollback_first_match_wins() {
    // Two retained specs with the same version: the last successful one is used.
    let s1 = spec(V1);
    let mut s1b = spec(V1);
    s1b["replicas"] = json!(3);
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s1b.clone());
    w.converge();
    assert_eq!(w.status()["lastSuccessfulSpec"]["replicas"], 3);
    assert_eq!(w.status()["previousSuccessfulSpec"]["replicas"], 2);
    let s2 = spec(V2);
    w.set_spec(s2.clone());
    w.step();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    assert_eq!(w.status()["rollbackSpec"]["replicas"], 3);
    assert_eq!(w.dep()["spec"]["replicas"], 3);
}

#[test]
fn drift_during_a_rollback_is_corrected_back_to_the_rollback_spec() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.step();
    w.rollout_misses_deadline();
    w.step();
    assert_eq!(w.status()["phase"], "RolledBack");
    w.config_maps
        .get_mut("openmed-service-model-manifest")
        .unwrap()["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] = json!(V2);
    let (tags, ev) = w.step();
    // The ConfigMap is restored; status moves from "rollback started" to
    // "rollback in progress" (step 12's conditions).
    assert_eq!(tags, ["CM~", "S"]);
    assert_eq!(
        w.conds(),
        [
            "F:RolledBack",
            "T:RollbackInProgress",
            "T:DesiredVersionFailed",
            "F:RollbackInProgress"
        ]
    );
    assert!(ev.is_empty());
    assert_eq!(
        w.config_maps["openmed-service-model-manifest"]["data"]["OPENMED_SERVICE_PRELOAD_MODELS"],
        V1
    );
    assert_eq!(w.status()["phase"], "RolledBack");
    assert_eq!(
        w.status()["rollbackCount"],
        1,
        "not counted as another rollback"
    );
}

#[test]
fn lookups_cover_the_desired_and_every_retained_target() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut moved = spec(V2);
    moved["targetRef"] = json!({"name": "elsewhere"});
    moved["manifestConfigMapName"] = json!("other-cm");
    w.set_spec(moved);
    let (m, _, _) = w.view();
    let l = lookups(&m);
    assert_eq!(l.deployments, ["elsewhere", "openmed-service"]);
    assert_eq!(
        l.config_maps,
        ["other-cm", "openmed-service-model-manifest"]
    );
}

#[test]
fn a_rejected_rollback_over_a_rolled_back_resource_returns_to_rolled_back() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    w.set_spec(s2.clone());
    w.step();
    w.rollout_misses_deadline();
    w.step();
    w.rollout_completes();
    w.step();
    let rolled_back = w.conds();
    assert_eq!(rolled_back, ROLLBACK_SUCCEEDED.labels());
    w.annotate("openmed.ai/rollback-to", Some("OpenMed/never"));
    w.step();
    assert_eq!(w.conds()[0], "F:RollbackTargetUnavailable");
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(w.status()["phase"], "RolledBack");
    assert_eq!(w.conds(), rolled_back);
    assert_eq!(w.status()["activeVersion"], V1);
}

// ------------------------------------ targets, pauses and refusals (9.16-9.20)

fn retargeted(version: &str, target: &str) -> Value {
    let mut s = spec(version);
    s["targetRef"] = json!({"name": target});
    s
}

/// A second Deployment like the first, under another name.
fn other_deployment(name: &str) -> Value {
    let mut d = deployment();
    d["metadata"]["name"] = json!(name);
    d["metadata"]["uid"] = json!(format!("{name}-uid"));
    d
}

#[test]
fn a_new_target_is_applied_then_the_old_one_released() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.others.insert("dep-b".into(), other_deployment("dep-b"));
    let s2 = retargeted(V1, "dep-b");
    w.set_spec(s2.clone());
    let (tags, ev) = w.step();
    // New target first, then the old one handed back (section 7's release).
    assert_eq!(tags, ["D~", "D~", "S"], "{:#}", w.status());
    assert_eq!(
        ev,
        [EventReason::RolloutStarted, EventReason::TargetReleased]
    );
    let b = &w.others["dep-b"];
    assert_eq!(
        b["metadata"]["annotations"]["openmed.ai/model-resource"],
        "openmed/openmed-service"
    );
    assert_eq!(w.status()["targetDeploymentUID"], "dep-b-uid");
    let a = w.deployment.as_ref().unwrap();
    assert!(a["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert!(a["metadata"]["labels"].get("openmed.ai/managed").is_none());
    assert_eq!(
        w.preload_env(),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""})
    );
    // The shared ConfigMap still serves dep-b: kept. Nothing more to release.
    assert!(w.config_maps.contains_key("openmed-service-model-manifest"));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "judging dep-b; nothing more to release");
    assert!(ev.is_empty());
    assert_eq!(w.status()["conditions"][0]["reason"], "RolloutInProgress");
}

#[test]
fn a_renamed_configmap_is_deleted_once_nothing_refers_to_it() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut s2 = spec(V1);
    s2["manifestConfigMapName"] = json!("renamed-manifest");
    w.set_spec(s2);
    let (tags, _) = w.step();
    // The new ConfigMap, the Deployment now pointing at it, then the old one goes.
    assert_eq!(tags, ["CM+", "D~", "CM-", "S"]);
    assert!(!w.config_maps.contains_key("openmed-service-model-manifest"));
    assert_eq!(
        w.preload_env()["valueFrom"]["configMapKeyRef"]["name"],
        "renamed-manifest"
    );
}

#[test]
fn a_missing_new_target_keeps_the_old_one_serving() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(retargeted(V1, "not-there"));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::TargetNotFound]);
    let a = w.deployment.as_ref().unwrap();
    assert_eq!(
        a["metadata"]["annotations"]["openmed.ai/model-resource"],
        "openmed/openmed-service"
    );
}

#[test]
fn delete_releases_every_deployment_still_claimed() {
    let mut w = World::new(spec(V1));
    w.converge();
    // A Deployment from an earlier target that still names this owner.
    let mut old = other_deployment("dep-old");
    old["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/openmed-service");
    old["metadata"]["labels"]["openmed.ai/managed"] = json!("true");
    w.others.insert("dep-old".into(), old);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
    let old = &w.others["dep-old"];
    assert!(old["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
}

#[test]
fn an_orphaned_owner_is_adopted_a_live_one_is_a_conflict() {
    let mut w = World::new(spec(V1));
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/gone");
    let (_, ev) = w.step();
    assert_eq!(
        ev,
        [EventReason::TargetConflict],
        "not known to be gone: a conflict"
    );
    w.orphans = vec!["openmed/gone".into()];
    let (tags, ev) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    assert_eq!(
        ev,
        [EventReason::TargetAdopted, EventReason::RolloutStarted]
    );
    assert_eq!(
        w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"],
        "openmed/openmed-service"
    );
}

#[test]
fn a_recreated_target_is_applied_and_judged_afresh() {
    let s1 = spec(V1);
    let mut w = World::new(s1.clone());
    w.converge();
    assert_eq!(w.status()["targetDeploymentUID"], "dep-uid");
    // `kubectl replace --force`: a new uid, generation 1, the team's original spec.
    let mut fresh = deployment();
    fresh["metadata"]["uid"] = json!("dep-uid-2");
    w.deployment = Some(fresh);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_eq!(w.status()["targetDeploymentUID"], "dep-uid-2");
    assert_eq!(w.conds(), started("T:TargetRecreated").labels());
    assert_eq!(w.status()["targetDeploymentGeneration"], 2);
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready");
}

#[test]
fn a_paused_target_is_reported_and_its_deadline_not_judged() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.dep()["spec"]["paused"] = json!(true);
    w.set_spec(spec(V2));
    w.step();
    // The Deployment controller reports the pause; an old timeout shows too.
    w.rollout_misses_deadline();
    let (_, ev) = w.step();
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(w.status()["phase"], "RollingOut");
    let progressing = &w.status()["conditions"][1];
    assert_eq!(progressing["status"], "Unknown");
    assert_eq!(progressing["reason"], "TargetPaused");
    assert!(progressing["message"]
        .as_str()
        .unwrap()
        .contains("kubectl rollout resume"));
    // Resumed: the rollout goes on and completes.
    w.dep()["spec"]["paused"] = json!(false);
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.status()["activeVersion"], V2);
}

#[test]
fn min_ready_seconds_not_below_the_deadline_is_refused_before_patching() {
    let mut s1 = spec(V1);
    s1["rolloutStrategy"]["progressDeadlineSeconds"] = json!(30);
    let mut w = World::new(s1.clone());
    w.dep()["spec"]["minReadySeconds"] = json!(60);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "no patch the API would refuse");
    assert_eq!(ev, [EventReason::TargetPatchRejected]);
    assert_eq!(
        w.conds(),
        [
            "F:TargetPatchRejected",
            "F:Blocked",
            "T:TargetPatchRejected",
            "F:NotRequested"
        ]
    );
    let msg = w.status()["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("minReadySeconds 60") && msg.contains("progressDeadlineSeconds 30"),
        "{msg}"
    );
    // Fixed on the Deployment: it clears by itself.
    w.dep()["spec"]["minReadySeconds"] = json!(5);
    assert_first_pass_starts_rollout(&mut w, &s1);
}

#[test]
fn a_refused_write_is_reported_with_the_api_message() {
    let mut w = World::new(spec(V1));
    let (m, ds, cms) = w.view();
    let now = w.now();
    let why = format!(
        "API error 403 Forbidden: admission webhook denied the request: {}",
        "x".repeat(2000)
    );
    let p = plan_refused(
        Observed {
            model: &m,
            deployments: &ds,
            config_maps: &cms,
            orphans: &[],
            now: &now,
            targets: &TargetPolicy::default(),
        },
        Refused::Deployment,
        &why,
    );
    assert!(p
        .writes
        .iter()
        .all(|w| !matches!(w, Write::PatchDeployment { .. })));
    let st = p.status(None).normalized();
    let ready = &st["conditions"][0];
    assert_eq!(ready["reason"], "TargetPatchRejected");
    assert_eq!(st["conditions"][2]["status"], "True");
    let msg = ready["message"].as_str().unwrap();
    assert!(msg.starts_with("API error 403 Forbidden: admission webhook denied"));
    assert_eq!(msg.chars().count(), 1024, "bounded");
    assert!(msg.ends_with("..."));
    assert_eq!(
        p.events_to_post(None)[0].reason,
        EventReason::TargetPatchRejected
    );
    // The next pass, with the cause gone, rolls out as usual.
    w.model["status"] = st;
    assert_first_pass_starts_rollout(&mut w, &spec(V1));
}

// ------------------------------------- the state machine held to 9.21-9.24

/// v1 Ready, then v2 Ready: two retained versions.
fn ready_on_v2_after_v1() -> World {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(spec(V2));
    w.converge();
    w
}

/// Someone else breaks the Deployment (an env var reading a missing
/// ConfigMap): its generation moves past ours and its deadline passes.
fn outsider_breaks_it(w: &mut World) {
    let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
    w.dep()["metadata"]["generation"] = json!(g);
    w.rollout_misses_deadline();
}

const DEGRADED: CondSet = states::target_degraded(false);

#[test]
fn an_outside_failure_is_reported_never_rolled_back_to_itself() {
    for rollback_on_failure in [true, false] {
        let (s1, s2) = (spec(V1), spec(V2));
        let mut s2 = s2;
        s2["rolloutStrategy"]["rollbackOnFailure"] = json!(rollback_on_failure);
        let mut w = World::new(s1.clone());
        w.converge();
        w.set_spec(s2.clone());
        w.converge();
        outsider_breaks_it(&mut w);
        let (tags, ev) = w.step();
        assert_eq!(tags, ["S"], "nothing rolled back, nothing written");
        assert_eq!(ev, [EventReason::TargetDegraded]);
        assert_eq!(w.conds(), DEGRADED.labels());
        let st = w.status().clone();
        assert!(
            st["failedSpecHash"].is_null() && st["rollbackSpec"].is_null(),
            "{st:#}"
        );
        assert_eq!(st["rollbackCount"], 0);
        assert!(st["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("ProgressDeadlineExceeded"));
        let (tags, ev) = w.step();
        assert!(tags.is_empty() && ev.is_empty(), "reported once");
        // The outsider's change is undone: Ready by itself, with no new Event.
        w.rollout_completes();
        let (tags, ev) = w.step();
        assert_eq!(tags, ["S"]);
        assert!(ev.is_empty(), "{ev:?}");
        let st = w.status();
        assert_eq!(st["phase"], "Ready");
        assert_eq!(st["activeVersion"], V2);
        assert_eq!(w.conds(), READY.labels());
        assert_eq!(st["lastSuccessfulSpec"]["version"], V2);
        assert_eq!(st["previousSuccessfulSpec"]["version"], V1);
    }
}

#[test]
fn removing_a_manual_rollback_rolls_the_desired_spec_out_again() {
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    w.rollout_completes();
    w.step();
    assert_eq!(w.conds(), MANUAL_ROLLBACK_SUCCEEDED.labels());
    assert!(w.status()["failedSpecHash"].is_null());
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"], "v2 is what the resource asks for");
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_eq!(w.status()["phase"], "RollingOut");
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.status()["activeVersion"], V2);
}

#[test]
fn a_manual_rollback_to_the_spec_named_is_no_rollback() {
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V2));
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty(), "{tags:?} {ev:?}");
    assert_eq!(w.status()["phase"], "Ready");
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty());
}

#[test]
fn a_failed_manual_rollback_is_judged_again_and_can_be_retried() {
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    w.rollout_misses_deadline();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackFailed]);
    assert_eq!(w.status()["phase"], "Failed");
    // The outside cause goes: the Deployment serves v1, the rollback succeeded.
    w.rollout_completes();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    assert_eq!(w.conds(), MANUAL_ROLLBACK_SUCCEEDED.labels());
    assert_eq!(w.status()["phase"], "RolledBack");
    // Once it has served, a failure is an outside one (9.21); removing and
    // re-adding the annotation is a new attempt.
    w.rollout_misses_deadline();
    w.step();
    assert_eq!(w.status()["conditions"][0]["reason"], "TargetDegraded");
    w.annotate("openmed.ai/rollback-to", None);
    w.step();
    assert_eq!(w.status()["phase"], "RollingOut");
    w.annotate("openmed.ai/rollback-to", Some(V1));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RollbackStarted]);
    assert_eq!(w.status()["rollbackCount"], 2);
}

/// v1 Ready, v2 misses its deadline, rolled back automatically to v1.
fn automatically_rolled_back() -> World {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(spec(V2));
    w.step();
    w.rollout_misses_deadline();
    w.step();
    w.rollout_completes();
    w.step();
    assert_eq!(w.conds(), ROLLBACK_SUCCEEDED.labels());
    w
}

#[test]
fn removing_a_rejected_annotation_restores_exactly_what_it_replaced() {
    let mut w = automatically_rolled_back();
    let before = w.status().clone();
    w.annotate("openmed.ai/rollback-to", Some("bogus"));
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackRejected]);
    assert_eq!(w.status()["rollbackRequest"], "manual:bogus");
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty(), "no new rollback, no Event: {ev:?}");
    assert_eq!(
        w.status(),
        &before,
        "request, count and messages as they were"
    );
}

#[test]
fn correcting_a_rejected_annotation_back_is_no_new_rollback() {
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    w.rollout_completes();
    w.step();
    let before = w.status().clone();
    assert_eq!(before["rollbackCount"], 1);
    w.annotate("openmed.ai/rollback-to", Some("bogus"));
    w.step();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "no Deployment write");
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(w.status(), &before);
}

#[test]
fn every_status_write_carries_the_current_generation_on_all_conditions() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut same = spec(V1);
    same["manifestConfigMapName"] = json!("openmed-service-model-manifest");
    w.set_spec(same);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty());
    for c in w.status()["conditions"].as_array().unwrap() {
        assert_eq!(c["observedGeneration"], 2, "{c}");
    }
}

#[test]
fn a_message_change_alone_posts_no_event() {
    // RolledBack after an automatic rollback; the user edits the failed
    // version to another unloadable one: conditions keep their reasons.
    let mut w = automatically_rolled_back();
    let p = w.plan();
    assert!(p.is_noop());
    w.model["status"]["conditions"][2]["message"] = json!("an older wording");
    let p = w.plan();
    assert!(!p.is_noop(), "the message is put right");
    assert!(
        p.events_to_post(None).is_empty(),
        "{:?}",
        p.events_to_post(None)
    );
}

#[test]
fn a_change_that_needs_no_deployment_write_is_judged_at_once() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut s = spec(V1);
    s["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
    w.set_spec(s.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(
        ev.is_empty(),
        "Ready before and after: no transition, no Event: {ev:?}"
    );
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.status()["desiredSpecHash"], hash_of(&s).as_str());
}

#[test]
fn delete_with_the_container_gone_leaves_the_template_alone() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed");
    let template = w.dep()["spec"]["template"].clone();
    let (tags, _) = delete_pass(&mut w);
    assert_eq!(
        tags,
        ["D~", "F-"],
        "the ConfigMap is still read by the renamed container"
    );
    assert_eq!(
        w.dep()["spec"]["template"],
        template,
        "no rollout that cannot finish"
    );
    assert!(w.dep()["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert!(w.config_maps.contains_key("openmed-service-model-manifest"));
}

/// Issue 16, point 3: under `openmed.ai/autoscaled: "true"` the target's
/// replicas are the autoscaler's: a resize by it is not drift, a new version
/// is applied without them, status names who owns them; without the
/// annotation the spec's replicas come back.
#[test]
fn an_autoscaled_target_keeps_the_autoscalers_replicas() {
    let mut w = World::new(spec(V1));
    w.annotate("openmed.ai/autoscaled", Some("true"));
    w.converge();
    assert_eq!(
        w.status()["replicasManagedBy"],
        "annotation openmed.ai/autoscaled"
    );
    let resize = |w: &mut World, n: i64| {
        let d = w.dep();
        d["spec"]["replicas"] = json!(n);
        let g = d["metadata"]["generation"].as_i64().unwrap() + 1;
        d["metadata"]["generation"] = json!(g);
        w.rollout_completes();
    };
    resize(&mut w, 5);
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty(), "{tags:?} {ev:?}");
    assert_eq!(w.dep()["spec"]["replicas"], 5);
    w.set_spec(spec(V2));
    w.step();
    assert_eq!(
        w.dep()["spec"]["replicas"],
        5,
        "a new version took the replicas back"
    );
    w.rollout_completes();
    w.step();
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.status()["activeVersion"], V2);
    w.annotate("openmed.ai/autoscaled", None);
    w.step();
    assert_eq!(w.dep()["spec"]["replicas"], spec(V2)["replicas"]);
    assert!(
        w.status()["replicasManagedBy"].is_null(),
        "{:#}",
        w.status()
    );
}
