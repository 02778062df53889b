//! Environmental blocks (docs/contract.md §6.2-§6.4, 9.2, 9.8, 9.19;
//! `src/reconcile/block.rs`): a missing target or container, a conflict, a
//! foreign ConfigMap, an invalid spec, a Deployment that has not opted in, a
//! patch the API would refuse. Reported, never a failed spec, and cleared by
//! themselves.

use crate::common::*;
use crate::world::*;
use openmed_operator::model::EventReason;
use openmed_operator::reconcile::{plan_refused, RefusedWrite, TargetPolicy, Write};
use serde_json::{json, Value};

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
    // Each condition says what it means: the block on three, and on
    // RolledBack that no rollback was asked for (§5.2).
    let messages: Vec<&str> = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(messages[3], "no rollback requested", "{messages:?}");
    assert!(
        messages[..3].iter().all(|m| m.contains("openmed-service")),
        "{messages:?}"
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
    // The message names the containers the Deployment has.
    let msg = w.status()["conditions"][0]["message"].as_str().unwrap();
    assert!(
        msg.ends_with(
            "has no container \"openmed-service\" (its containers: \"renamed\", \"proxy\")"
        ),
        "{msg}"
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
    // The caches hold only our ConfigMaps, so the first pass plans the
    // create: the finalizer goes first (§3), the create meets the foreign
    // one (AlreadyExists), and the pass is planned again with it.
    let (tags, ev) = w.step();
    assert_eq!(tags, ["F+", "S"]);
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
    assert_eq!(tags, ["CM+", "D~", "S"], "the finalizer is there already");
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
fn invalid_spec_touches_nothing_and_names_the_field() {
    let v: Value = serde_json::from_str(include_str!("../fixtures/vectors.json")).unwrap();
    for (label, case) in v["invalid"].as_object().unwrap() {
        let mut w = World::new(case["resource"]["spec"].clone());
        let (tags, ev) = w.step();
        assert_eq!(tags, ["S"], "{label}");
        assert_eq!(ev, [EventReason::InvalidSpec], "{label}");
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
        // §9.D18: once per generation; another invalid edit is posted again.
        let (tags, ev) = w.step();
        assert!(tags.is_empty() && ev.is_empty(), "{label}: {tags:?} {ev:?}");
        let mut again = case["resource"]["spec"].clone();
        again["replicas"] = json!(0);
        w.set_spec(again);
        let (_, ev) = w.step();
        assert_eq!(ev, [EventReason::InvalidSpec], "{label}");
        let msg = &w.events.last().unwrap().0;
        assert!(msg.contains("invalidspec-2-"), "{label}: {msg}");
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

fn without_opt_in(w: &mut World) {
    let labels = w.dep()["metadata"]["labels"].as_object_mut().unwrap();
    labels.remove("openmed.ai/managed-target");
}

/// 9.8 (the confused deputy): a Deployment that has not opted in
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
    // Only that one Deployment: the same name in another namespace, or
    // another name in the operator's namespace, is a target like any other.
    for own in [("operators-ns", NAME), (NS, "openmed-operator")] {
        let mut w = World::new(spec(V1));
        w.targets = TargetPolicy {
            allow_any: false,
            own: Some((own.0.to_string(), own.1.to_string())),
        };
        let (tags, ev) = w.step();
        assert_eq!(tags, ["F+", "CM+", "D~", "S"], "own: {own:?}");
        assert_eq!(ev, [EventReason::RolloutStarted], "own: {own:?}");
    }
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
    let seen = w.observe(&[]);
    let why = format!(
        "API error 403 Forbidden: admission webhook denied the request: {}",
        "x".repeat(2000)
    );
    let p = plan_refused(
        seen.observed(&TargetPolicy::default()),
        RefusedWrite::Deployment,
        &why,
    );
    assert!(p
        .writes
        .iter()
        .all(|w| !matches!(w, Write::PatchDeployment { .. })));
    let st = p.status(None).to_value();
    let ready = &st["conditions"][0];
    assert_eq!(ready["reason"], "TargetPatchRejected");
    assert_eq!(st["conditions"][2]["status"], "True");
    let msg = ready["message"].as_str().unwrap();
    assert!(msg.starts_with("API error 403 Forbidden: admission webhook denied"));
    assert_eq!(msg.chars().count(), 1024, "bounded");
    assert!(msg.ends_with("..."));
    assert_eq!(
        p.events_to_post()[0].reason,
        EventReason::TargetPatchRejected
    );
    // The next pass, with the cause gone, rolls out as usual.
    w.model["status"] = st;
    assert_first_pass_starts_rollout(&mut w, &spec(V1));
}
