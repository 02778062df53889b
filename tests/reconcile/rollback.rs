//! Rollbacks (docs/contract.md §6.5, §6.8, §6.12, 9.3, 9.21-9.24;
//! `src/reconcile/rollback.rs`): automatic after a missed deadline, manual
//! through `openmed.ai/rollback-to`, rejected and cleared annotations, and
//! the state machine held to 9.21-9.24.

use crate::common::*;
use crate::world::*;
use openmed_operator::model::EventReason;
use serde_json::{json, Value};

#[test]
fn v2_misses_its_deadline_rolls_back_automatically() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = World::new(s1.clone());
    w.converge();
    v2_starts_rolling_out(&mut w, &s1, &s2);
    the_missed_deadline_rolls_back_to_v1(&mut w, &s1, &s2);
    the_rollback_succeeds_and_v2_is_not_retried(&mut w, &s1, &s2);
    a_fixed_spec_rolls_out_anew(&mut w, &s1);
}

fn v2_starts_rolling_out(w: &mut World, s1: &Value, s2: &Value) {
    w.set_spec(s2.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s2),
            last: Some(s1),
            ..Want::new("RollingOut", s2, started("T:SpecChanged"))
        },
    );
}

fn the_missed_deadline_rolls_back_to_v1(w: &mut World, s1: &Value, s2: &Value) {
    let auto = format!("automatic:{V2}");
    w.rollout_misses_deadline();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(
        ev,
        [EventReason::RolloutFailed, EventReason::RollbackStarted]
    );
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s1),
            failed: Some(s2),
            last: Some(s1),
            rollback: Some(s1),
            request: Some(auto.as_str()),
            count: 1,
            ..Want::new(
                "RolledBack",
                s2,
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
}

fn the_rollback_succeeds_and_v2_is_not_retried(w: &mut World, s1: &Value, s2: &Value) {
    let auto = format!("automatic:{V2}");
    w.rollout_completes();
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s1),
            failed: Some(s2),
            last: Some(s1),
            rollback: Some(s1),
            request: Some(auto.as_str()),
            count: 1,
            ..Want::new("RolledBack", s2, ROLLBACK_SUCCEEDED)
        },
    );
    // The failed spec is not retried by itself.
    assert!(w.plan().is_noop());
}

fn a_fixed_spec_rolls_out_anew(w: &mut World, s1: &Value) {
    // The user fixes the spec: a new rollout.
    let s3 = spec(V3);
    w.set_spec(s3.clone());
    let (tags, _) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(&s3),
            last: Some(s1),
            count: 1,
            ..Want::new("RollingOut", &s3, started("T:SpecChanged"))
        },
    );
    w.rollout_completes();
    w.step();
    assert_status(
        w,
        Want {
            active: Some(V3),
            applied: Some(&s3),
            last: Some(&s3),
            prev: Some(s1),
            count: 1,
            ..Want::new("Ready", &s3, READY)
        },
    );
}

#[test]
fn rollback_also_fails_terminal_failed_no_retry() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = rolling_back();
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

/// 9.23: a failed rollback is still watched; when its rollout completes
/// after all, the resource is RolledBack.
#[test]
fn a_failed_rollback_that_completes_later_is_rolled_back() {
    let mut w = rolling_back();
    w.rollout_misses_deadline();
    w.step();
    assert_eq!(w.status()["phase"], "Failed");
    w.rollout_completes();
    let (tags, ev) = w.step();
    assert_eq!(w.status()["phase"], "RolledBack", "{tags:?} {ev:?}");
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
}

/// 9.23: a rollback whose Deployment is ready while what the rollback wrote
/// has drifted has not served yet: it is written again and still judged.
#[test]
fn a_ready_rollback_with_its_config_map_changed_is_written_again_not_served() {
    let mut w = rolling_back();
    w.rollout_completes();
    w.config_maps
        .get_mut("openmed-service-model-manifest")
        .unwrap()["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] = json!(V2);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "S"], "{ev:?}");
    assert!(ev.is_empty(), "served before it was written again: {ev:?}");
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
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
    a_manual_rollback_to_v1_starts(&mut w, &s1, &s2);
    the_manual_rollback_succeeds_and_holds(&mut w, &s1, &s2);
    making_it_permanent_is_judged_at_once(&mut w, &s1, &s2);
}

fn a_manual_rollback_to_v1_starts(w: &mut World, s1: &Value, s2: &Value) {
    let manual = format!("manual:{V1}");
    w.annotate("openmed.ai/rollback-to", Some(&format!(" {V1} ")));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RollbackStarted]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s1),
            // 9.22: an override, not a verdict: v2 served, it is not failed.
            failed: None,
            last: Some(s2),
            prev: Some(s1),
            rollback: Some(s1),
            request: Some(manual.as_str()),
            count: 1,
            ..Want::new(
                "RolledBack",
                s2,
                [
                    "F:ManualRollback",
                    "T:RollbackInProgress",
                    "T:ManualRollback",
                    "F:RollbackInProgress",
                ],
            )
        },
    );
}

fn the_manual_rollback_succeeds_and_holds(w: &mut World, s1: &Value, s2: &Value) {
    let manual = format!("manual:{V1}");
    w.rollout_completes();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s1),
            failed: None,
            last: Some(s2),
            prev: Some(s1),
            rollback: Some(s1),
            request: Some(manual.as_str()),
            count: 1,
            ..Want::new("RolledBack", s2, MANUAL_ROLLBACK_SUCCEEDED)
        },
    );
    assert!(w.plan().is_noop(), "a completed manual rollback is stable");
}

fn making_it_permanent_is_judged_at_once(w: &mut World, s1: &Value, s2: &Value) {
    // The user makes it permanent: the Deployment already serves v1, so it
    // is judged at once (9.11): Ready in this pass, no rollout started.
    w.set_spec(s1.clone());
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "the Deployment already serves v1");
    assert_eq!(ev, [EventReason::RolloutSucceeded]);
    assert_status(
        w,
        Want {
            active: Some(V1),
            applied: Some(s1),
            last: Some(s1),
            prev: Some(s2),
            count: 1,
            ..Want::new("Ready", s1, READY)
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
            // 9.D16: v2 still serves, so Ready and the phase stay; Degraded
            // and RolledBack name the refusal.
            ..Want::new(
                "Ready",
                &s2,
                [
                    "T:RolloutSucceeded",
                    "F:RolloutComplete",
                    "T:RollbackTargetUnavailable",
                    "F:RollbackRejected",
                ],
            )
        },
    );
    let degraded = w.status()["conditions"][2]["message"].as_str().unwrap();
    assert_eq!(
        degraded,
        format!("rollback target OpenMed/never-deployed is not a retained version (retained: {V2}, {V1})")
    );
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty(), "{tags:?} {ev:?}");

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

/// 9.15: a 200 KB `rollback-to` is cut to 256 characters
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
fn a_rejected_rollback_over_a_rolled_back_resource_returns_to_rolled_back() {
    let mut w = automatically_rolled_back();
    let rolled_back = w.conds();
    assert_eq!(rolled_back, ROLLBACK_SUCCEEDED.labels());
    w.annotate("openmed.ai/rollback-to", Some("OpenMed/never"));
    let (tags, ev) = w.step();
    assert_eq!((tags, ev), (vec!["S"], vec![EventReason::RollbackRejected]));
    // The rollback that served stays on record; the request beside it is
    // refused, and the next pass is not taken for a rollback to it.
    assert_eq!(w.status()["phase"], "RolledBack");
    assert_eq!(
        w.conds(),
        [
            rolled_back[0].as_str(),
            rolled_back[1].as_str(),
            "T:RollbackTargetUnavailable",
            "F:RollbackRejected"
        ]
    );
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty(), "{tags:?} {ev:?}");
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, _) = w.step();
    assert_eq!(tags, ["S"]);
    assert_eq!(w.status()["phase"], "RolledBack");
    assert_eq!(w.conds(), rolled_back);
    assert_eq!(w.status()["activeVersion"], V1);
}

/// v1 Ready, then v2 Ready: two retained versions.
fn ready_on_v2_after_v1() -> World {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(spec(V2));
    w.converge();
    w
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
    assert_eq!(
        w.status()["conditions"][3]["message"],
        "the rollback had completed"
    );
    w.annotate("openmed.ai/rollback-to", None);
    w.step();
    assert_eq!(w.status()["phase"], "RollingOut");
    w.annotate("openmed.ai/rollback-to", Some(V1));
    let (tags, ev) = w.step();
    assert_eq!(tags, ["CM~", "D~", "S"]);
    assert_eq!(ev, [EventReason::RollbackStarted]);
    assert_eq!(w.status()["rollbackCount"], 2);
}

/// v1 Ready, v2 misses its deadline: the automatic rollback to v1 started.
fn rolling_back() -> World {
    let mut w = World::new(spec(V1));
    w.converge();
    w.set_spec(spec(V2));
    w.step();
    w.rollout_misses_deadline();
    w.step();
    w
}

/// v1 Ready, v2 misses its deadline, rolled back automatically to v1.
fn automatically_rolled_back() -> World {
    let mut w = rolling_back();
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
fn a_message_change_alone_posts_no_event() {
    // RolledBack after an automatic rollback; the user edits the failed
    // version to another unloadable one: conditions keep their reasons.
    let mut w = automatically_rolled_back();
    let p = w.plan();
    assert!(p.is_noop());
    w.model["status"]["conditions"][2]["message"] = json!("an older wording");
    let p = w.plan();
    assert!(!p.is_noop(), "the message is put right");
    assert!(p.events_to_post().is_empty(), "{:?}", p.events_to_post());
}

/// §2.6: each rollback keeps its own Event record. An automatic rollback
/// and then a manual one in the same generation post two RollbackStarted
/// and two RollbackSucceeded Events under different names; a retried pass
/// posts none again.
#[test]
fn an_automatic_then_a_manual_rollback_in_one_generation_keep_their_own_events() {
    let mut w = automatically_rolled_back();
    assert_eq!(w.status()["phase"], "RolledBack");
    // The user asks for v1 by hand, in the same generation.
    w.annotate("openmed.ai/rollback-to", Some(V1));
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackStarted]);
    w.rollout_completes();
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::RollbackSucceeded]);
    let named = |r: EventReason| -> Vec<String> {
        w.events
            .iter()
            .filter(|(_, e)| *e == r)
            .map(|(n, _)| n.clone())
            .collect()
    };
    for r in [EventReason::RollbackStarted, EventReason::RollbackSucceeded] {
        let names = named(r);
        assert_eq!(names.len(), 2, "{r}: {names:?}");
        assert!(
            names[0].contains("-automatic-") && names[1].contains("-manual-"),
            "{names:?}"
        );
    }
    let posted = w.posted.len();
    let (tags, ev) = w.step();
    assert!(tags.is_empty() && ev.is_empty() && w.posted.len() == posted);
}

/// §6.7, 9.D1: a manual rollback kept spec first, its annotation removed
/// after the Deployment was edited by hand, is started again as an
/// InitialRollout: it was no block that cleared.
#[test]
fn keeping_a_manual_rollback_spec_first_restarts_it_as_an_initial_rollout() {
    let (s1, s2) = (spec(V1), spec(V2));
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    w.rollout_completes();
    w.step();
    assert_eq!(w.conds(), MANUAL_ROLLBACK_SUCCEEDED.labels());
    // The spec names the rollback's version, the annotation still set: the
    // rollback is watched, of the very spec the resource now names.
    w.set_spec(s1.clone());
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"]);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(w.status()["phase"], "RolledBack");
    assert_eq!(w.status()["appliedSpecHash"], hash_of(&s1).as_str());
    // Someone edits the Deployment; then the annotation goes.
    w.dep()["spec"]["progressDeadlineSeconds"] = json!(9);
    let g = w.dep()["metadata"]["generation"].as_i64().unwrap() + 1;
    w.dep()["metadata"]["generation"] = json!(g);
    w.annotate("openmed.ai/rollback-to", None);
    let (tags, ev) = w.step();
    assert_eq!(tags, ["D~", "S"]);
    assert_eq!(ev, [EventReason::RolloutStarted]);
    assert_status(
        &w,
        Want {
            active: Some(V1),
            applied: Some(&s1),
            last: Some(&s2),
            prev: Some(&s1),
            count: 1,
            ..Want::new("RollingOut", &s1, started("T:InitialRollout"))
        },
    );
    assert_eq!(w.dep()["spec"]["progressDeadlineSeconds"], 600);
}

/// §6.5: a manual rollback is watched again only from RolledBack, or from
/// Failed with RollbackFailed or TargetDegraded; once a block over it
/// clears, the target is found again and applied as a rollback.
#[test]
fn a_cleared_block_over_a_manual_rollback_applies_it_again() {
    let mut w = ready_on_v2_after_v1();
    w.annotate("openmed.ai/rollback-to", Some(V1));
    w.step();
    w.rollout_completes();
    w.step();
    assert_eq!(w.conds(), MANUAL_ROLLBACK_SUCCEEDED.labels());
    let container = |w: &mut World, name: &str| {
        w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!(name);
    };
    container(&mut w, "renamed");
    let (_, ev) = w.step();
    assert_eq!(ev, [EventReason::ContainerNotFound]);
    assert_eq!(w.status()["phase"], "Failed");
    container(&mut w, "openmed-service");
    let (tags, ev) = w.step();
    assert_eq!(tags, ["S"], "nothing to write: the Deployment serves v1");
    assert_eq!(ev, [EventReason::RollbackStarted]);
    assert_eq!(w.status()["rollbackCount"], 2);
    assert_eq!(
        w.conds(),
        [
            "F:ManualRollback",
            "T:RollbackInProgress",
            "T:ManualRollback",
            "F:RollbackInProgress"
        ]
    );
}

/// §6.8: a failed rollout with no rollback says on RolledBack why there was
/// none: rollback turned off, or no earlier version that served.
#[test]
fn a_failed_rollout_without_rollback_says_why_there_was_none() {
    type Failing = fn() -> World;
    let cases: [(&str, Failing, &str); 2] = [
        (
            "rollback turned off",
            || {
                let mut w = World::new(spec(V1));
                w.converge();
                let mut s2 = spec(V2);
                s2["rolloutStrategy"]["rollbackOnFailure"] = json!(false);
                w.set_spec(s2);
                w
            },
            "automatic rollback is disabled (rollbackOnFailure: false)",
        ),
        (
            "nothing served before",
            || World::new(spec(V1)),
            "no earlier successful version to roll back to",
        ),
    ];
    for (what, failing, why) in cases {
        let mut w = failing();
        w.step();
        w.rollout_misses_deadline();
        let (_, ev) = w.step();
        assert_eq!(ev, [EventReason::RolloutFailed], "{what}");
        assert_eq!(w.conds(), FAILED_NO_ROLLBACK.labels(), "{what}");
        let conditions = &w.status()["conditions"];
        assert_eq!(conditions[3]["message"], why, "{what}");
        let ready = conditions[0]["message"].as_str().unwrap();
        assert!(
            ready.ends_with("missed the progress deadline of Deployment openmed-service"),
            "{what}: {ready}"
        );
    }
}
