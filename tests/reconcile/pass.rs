//! One reconcile pass (docs/contract.md §6, `src/reconcile/pass.rs`): the
//! first rollout to Ready, drift put right, the Recreate switch, judging a
//! change at once (9.11), a paused target (9.20), an outside failure (9.21),
//! the finalizer, and a resource adopted from the reference operator (9.1).

use crate::common::*;
use crate::world::*;
use openmed_operator::model::status::{states, CondSet};
use openmed_operator::model::EventReason;
use serde_json::{json, Value};

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
    assert!(p.events_to_post().is_empty());
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

/// The Deployment's preload variable.
fn preload_var(d: &mut Value) -> &mut Value {
    let env = d["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut();
    let env = env.expect("an env list");
    let e = env
        .iter_mut()
        .find(|e| e["name"] == "OPENMED_SERVICE_PRELOAD_MODELS");
    e.expect("the preload variable")
}

/// A converged world whose Deployment `tamper` then changed by hand, and
/// the Deployment as it was.
fn converged_then(what: &str, tamper: fn(&mut Value)) -> (World, Value) {
    let mut w = World::new(spec(V1));
    w.converge();
    let before = w.dep().clone();
    tamper(w.dep());
    assert_ne!(*w.dep(), before, "{what}: changed nothing");
    (w, before)
}

/// Each field §4.1 judges, and the claim label, changed by hand on its own
/// while Ready, is put back by a Deployment write (§3.2, §6.11): none is
/// left out of the judgement.
#[test]
fn each_field_the_apply_writes_is_put_back_when_changed_by_hand() {
    type Tamper = fn(&mut Value);
    let tampers: [(&str, Tamper); 7] = [
        ("progressDeadlineSeconds", |d| {
            d["spec"]["progressDeadlineSeconds"] = json!(9);
        }),
        ("strategy type", |d| {
            d["spec"]["strategy"] = json!({"type": "Recreate"});
        }),
        ("maxUnavailable", |d| {
            d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!(3);
        }),
        ("maxSurge", |d| {
            d["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("50%");
        }),
        ("claim label", |d| {
            let l = d["metadata"]["labels"].as_object_mut();
            l.map(|l| l.remove("openmed.ai/managed"));
        }),
        ("ConfigMap name", |d| {
            preload_var(d)["valueFrom"]["configMapKeyRef"]["name"] = json!("other");
        }),
        ("ConfigMap key", |d| {
            preload_var(d)["valueFrom"]["configMapKeyRef"]["key"] = json!("other");
        }),
    ];
    for (what, tamper) in tampers {
        let (mut w, before) = converged_then(what, tamper);
        let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
        w.dep()["metadata"]["generation"] = json!(g);
        let (tags, _) = w.step();
        assert!(
            tags.contains(&"D~"),
            "{what}: no Deployment write: {tags:?}"
        );
        let after = w.dep().clone();
        for path in [
            "/spec/progressDeadlineSeconds",
            "/spec/strategy",
            "/metadata/labels",
            "/spec/template/metadata/annotations/openmed.ai~1model-resource",
            "/spec/template/spec/containers/0/env",
        ] {
            assert_eq!(after.pointer(path), before.pointer(path), "{what}: {path}");
        }
    }
}

/// A spec change that leaves the Deployment matching still writes what the
/// apply owns and §4.1 does not judge, when a hand changed it: the pod
/// template's owner, a value beside valueFrom, the claim label (§3.2, §3.3).
#[test]
fn an_apply_puts_back_what_the_judgement_does_not_read() {
    type Tamper = fn(&mut Value);
    let tampers: [(&str, Tamper); 3] = [
        ("template owner", |d| {
            let a = d["spec"]["template"]["metadata"]["annotations"].as_object_mut();
            a.map(|a| a.remove("openmed.ai/model-resource"));
        }),
        ("a value beside valueFrom", |d| {
            preload_var(d)["value"] = json!("x");
        }),
        ("claim label", |d| {
            let l = d["metadata"]["labels"].as_object_mut();
            l.map(|l| l.remove("openmed.ai/managed"));
        }),
    ];
    for (what, tamper) in tampers {
        let (mut w, _) = converged_then(what, tamper);
        let mut s = spec(V1);
        s["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
        w.set_spec(s);
        let (tags, _) = w.step();
        assert!(tags.contains(&"D~"), "{what}: not put back: {tags:?}");
    }
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

/// v1 Ready, then its spec changed in what no Deployment write serves
/// (`rollbackOnFailure: false`): the world and that spec, not yet passed.
fn ready_then_rollback_turned_off() -> (World, Value) {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut s = spec(V1);
    s["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
    w.set_spec(s.clone());
    (w, s)
}

#[test]
fn a_change_that_needs_no_deployment_write_is_judged_at_once() {
    let (mut w, s) = ready_then_rollback_turned_off();
    // Only status changes, with the target generation as recorded: still
    // a status write, not a pass with nothing to do.
    let p = w.plan();
    assert!(p.writes.is_empty() && !p.is_noop(), "{p:?}");
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

/// Someone else breaks the Deployment (an env var reading a missing
/// ConfigMap): its generation moves past ours and its deadline passes.
fn outsider_breaks_it(w: &mut World) {
    let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
    w.dep()["metadata"]["generation"] = json!(g);
    w.rollout_misses_deadline();
}

const DEGRADED: CondSet = states::target_degraded(false);

/// 9.21: the report of an outside failure names the condition that shows
/// it: a ReplicaFailure among conditions that are True for other reasons.
#[test]
fn an_outside_failure_names_the_condition_that_shows_it() {
    let mut w = World::new(spec(V1));
    w.converge();
    let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
    w.dep()["metadata"]["generation"] = json!(g);
    w.dep()["status"]["observedGeneration"] = json!(g);
    w.dep()["status"]["conditions"] = json!([
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"},
    ]);
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::TargetDegraded]);
    let msg = w.status()["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("reports ReplicaFailure=True (FailedCreate)"),
        "{msg}"
    );
    assert_eq!(
        w.status()["conditions"][3]["message"],
        "no rollback requested"
    );
}

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

#[test]
fn a_lost_finalizer_is_put_back() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!([]);
    let (tags, _) = w.step();
    assert_eq!(tags, ["F+"]);
}

/// §6.13: a rollout started while the previous one still shows its
/// "started" conditions (its pods slow to warm, no pass between) is
/// announced too: one RolloutStarted per version, none twice.
#[test]
fn a_new_version_before_the_last_rollout_moved_is_announced() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(spec(V2));
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RolloutStarted]);
    let started = w.conds();
    w.set_spec(spec(V3));
    let (tags, ev) = w.step();
    assert_eq!(
        w.conds(),
        started,
        "the same started state, for another version"
    );
    assert!(tags.contains(&"S"), "{tags:?}");
    assert_eq!(ev, [EventReason::RolloutStarted]);
    let (_, ev) = w.step();
    assert!(ev.is_empty(), "announced once: {ev:?}");
    let names = w
        .events
        .iter()
        .filter(|(_, r)| *r == EventReason::RolloutStarted)
        .count();
    assert_eq!(names, 3);
}

/// v1 served; v2's Deployment patch landed, its status and Event never did.
fn v2_patched_but_its_status_lost() -> World {
    let mut w = World::new(spec(V1));
    w.converge();
    let before = w.model["status"].clone();
    w.set_spec(spec(V2));
    let (tags, _) = w.step();
    assert!(tags.contains(&"D~"), "{tags:?}");
    w.model["status"] = before;
    w
}

/// §6.13 and §9.7: a replica that wrote a rollout's patch and died before
/// its status and Event. The next pass finds nothing to write and the
/// Deployment rolling: it judges it at once, and announces the rollout.
#[test]
fn a_rollout_whose_writer_died_before_its_status_is_announced_by_the_next() {
    let mut w = v2_patched_but_its_status_lost();
    let (tags, ev) = w.step();
    assert!(!tags.contains(&"D~"), "nothing to patch again: {tags:?}");
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_eq!(w.status()["phase"], "RollingOut");
    let (_, ev) = w.step();
    assert!(ev.is_empty(), "announced once: {ev:?}");
}

/// §6.13 and §9.7: a rollout whose writes landed but whose status write did
/// not (the writer died, or met 409 after 409 from a second writer), and
/// whose Deployment finished rolling before the next pass. That pass finds
/// nothing to write and the Deployment ready: the rollout happened, so it is
/// announced and its success too, one Event each, as any other rollout.
#[test]
fn a_rollout_that_finished_before_its_status_was_written_is_announced() {
    let mut w = v2_patched_but_its_status_lost();
    // The pods rolled meanwhile.
    w.rollout_completes();
    let (tags, ev) = w.step();
    assert!(!tags.contains(&"D~"), "nothing to patch again: {tags:?}");
    assert_eq!(
        ev,
        [EventReason::RolloutStarted, EventReason::RolloutSucceeded]
    );
    assert_eq!(w.status()["phase"], "Ready");
    assert_eq!(w.status()["activeVersion"], V2);
    let (_, ev) = w.step();
    assert!(ev.is_empty(), "announced once: {ev:?}");
}

/// A Ready model's Deployment dips at the same generation: on a real
/// cluster a replica count set and set back leaves the ReplicaSet a surplus
/// pod for a moment (upstream `manageReplicas` acts on the first count), and
/// a pod may be lost. RollingOut while it lasts, then Ready with no second
/// RolloutSucceeded: no rollout started (§9.D21).
/// The Deployment of a Ready model dips (a pod of the new template not
/// ready) with no Event, RollingOut, and comes back: the pass after.
fn dip_and_recover(w: &mut World) -> (Tags, Vec<EventReason>) {
    let d = w.dep();
    d["status"]["replicas"] = json!(3);
    d["status"]["updatedReplicas"] = json!(3);
    let (_, ev) = w.step();
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(w.status()["phase"], "RollingOut");
    w.rollout_completes();
    w.step()
}

#[test]
fn a_dip_of_a_ready_deployment_announces_no_second_success() {
    let mut w = World::new(spec(V1));
    w.converge();
    assert_eq!(w.status()["phase"], "Ready");
    let (tags, ev) = dip_and_recover(&mut w);
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty(), "a second RolloutSucceeded: {ev:?}");
    assert_eq!(w.status()["phase"], "Ready");
    // A rollout started since is announced when it succeeds.
    w.set_spec(spec(V2));
    w.converge();
    assert_eq!(w.status()["activeVersion"], V2);
}

/// §6.10, §9.D21: a dip goes unannounced only in the generation whose
/// success lastEvents holds; a generation whose success was never posted
/// posts it when its Deployment is ready again.
#[test]
fn a_dip_in_a_later_generation_announces_that_generations_success() {
    // A change that needs no Deployment write: Ready at once, no Event.
    let (mut w, _) = ready_then_rollback_turned_off();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty(), "{ev:?}");
    // The Deployment dips and comes back.
    let (tags, ev) = dip_and_recover(&mut w);
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RolloutSucceeded]);
    assert_eq!(w.status()["phase"], "Ready");
}
