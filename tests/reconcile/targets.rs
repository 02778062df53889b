//! The target Deployment and manifest ConfigMap (docs/contract.md §3, 9.16,
//! 9.18; `src/reconcile/targets.rs`): retargeting and releasing the old
//! target, a renamed ConfigMap, orphans adopted, a recreated target, the
//! lookups, and an autoscaler's replicas.

use crate::common::*;
use crate::world::*;
use openmed_operator::model::EventReason;
use openmed_operator::reconcile::lookups;
use serde_json::{json, Value};

fn retargeted(version: &str, target: &str) -> Value {
    let mut s = spec(version);
    s["targetRef"] = json!({"name": target});
    s
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

/// 9.18: a status written before the target's uid was recorded gets it on
/// the next pass, so that a target deleted and created again is told apart.
#[test]
fn a_status_without_the_targets_uid_gets_it() {
    let mut w = World::new(spec(V1));
    w.converge();
    let uid = w.dep()["metadata"]["uid"].clone();
    assert!(uid.is_string());
    assert_eq!(w.status()["targetDeploymentUID"], uid);
    let st = w.model["status"].as_object_mut().unwrap();
    st.remove("targetDeploymentUID");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(w.status()["targetDeploymentUID"], uid);
}

/// An empty owner annotation names nobody (§3.3): the Deployment is applied
/// with no adoption of a model that never was.
#[test]
fn an_empty_owner_annotation_is_no_orphan_to_adopt() {
    let mut w = World::new(spec(V1));
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("");
    w.orphans = vec!["openmed/gone".into()];
    let (tags, ev) = w.step();
    assert_eq!(tags, ["F+", "CM+", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
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
fn lookups_cover_the_desired_and_every_retained_target() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut moved = spec(V2);
    moved["targetRef"] = json!({"name": "elsewhere"});
    moved["manifestConfigMapName"] = json!("other-cm");
    w.set_spec(moved);
    let l = lookups(&w.observe(&[]).model);
    assert_eq!(l.deployments, ["elsewhere", "openmed-service"]);
    assert_eq!(
        l.config_maps,
        ["other-cm", "openmed-service-model-manifest"]
    );
}

/// Under `openmed.ai/autoscaled: "true"` the target's
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

/// 9.16, §6.15: our ConfigMap that no Deployment reads after the pass is
/// deleted: one read only by the target this pass releases, and one read
/// by nobody while a former target reads a ConfigMap of its own.
#[test]
fn a_configmap_read_by_no_deployment_after_the_pass_is_deleted() {
    type Setup = fn(&mut World);
    let cases: [(&str, Setup, Tags); 2] = [
        (
            "retargeted and renamed in one edit",
            |_| {},
            vec!["CM+", "D~", "D~", "CM-", "S"],
        ),
        (
            "renamed after the retarget, the old target reading its own",
            |w| {
                w.set_spec(retargeted(V1, "dep-b"));
                w.step();
                w.dep()["spec"]["template"]["spec"]["containers"][1]["env"] = json!([{
                    "name": "OPENMED_SERVICE_PRELOAD_MODELS",
                    "valueFrom": {"configMapKeyRef":
                        {"name": "team-models", "key": "OPENMED_SERVICE_PRELOAD_MODELS"}},
                }]);
            },
            vec!["CM+", "D~", "CM-", "S"],
        ),
    ];
    for (what, setup, writes) in cases {
        let mut w = World::new(spec(V1));
        w.converge();
        w.others.insert("dep-b".into(), other_deployment("dep-b"));
        setup(&mut w);
        let mut s = retargeted(V1, "dep-b");
        s["manifestConfigMapName"] = json!("renamed-manifest");
        w.set_spec(s);
        let (tags, _) = w.step();
        assert_eq!(tags, writes, "{what}");
        assert!(
            !w.config_maps.contains_key("openmed-service-model-manifest"),
            "{what}"
        );
        assert!(w.config_maps.contains_key("renamed-manifest"), "{what}");
    }
}
