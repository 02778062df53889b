use super::*;
use serde_json::{json, Map, Value};

#[test]
fn vocabulary_round_trips() {
    for r in Reason::ALL {
        assert_eq!(Reason::parse(r.as_str()), Some(*r));
    }
    assert_eq!(Phase::parse("RolledBack"), Some(Phase::RolledBack));
    assert_eq!(Phase::parse("Nope"), None);
    assert!(EventReason::RollbackFailed.is_warning());
    assert!(!EventReason::RollbackStarted.is_warning());
}

fn four(msg: &str) -> Conds {
    PerCondition {
        ready: cond(true, Reason::RolloutSucceeded, msg),
        progressing: cond(false, Reason::RolloutComplete, "x"),
        degraded: cond(false, Reason::Healthy, "x"),
        rolled_back: cond(false, Reason::NotRequested, "x"),
    }
}

fn conditions_of(s: &ModelStatus) -> Value {
    s.to_value()["conditions"].clone()
}

#[test]
fn transition_time_moves_only_on_change() {
    let mut s = ModelStatus::default();
    s.set_conditions(four("a"), 1, "2026-01-01T00:00:00Z");
    s.set_conditions(four("a"), 2, "2026-01-02T00:00:00Z");
    let c = conditions_of(&s);
    assert_eq!(c[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    assert_eq!(c[0]["observedGeneration"], 2);
    s.set_conditions(four("b"), 2, "2026-01-03T00:00:00Z");
    let c = conditions_of(&s);
    assert_eq!(c[0]["lastTransitionTime"], "2026-01-03T00:00:00Z");
    assert_eq!(c[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    let types: Vec<&str> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "Progressing", "Degraded", "RolledBack"]);
}

#[test]
fn conditions_written_again_as_they_stand_change_nothing_and_foreign_keys_go() {
    let mut first = ModelStatus::default();
    first.set_conditions(four("a"), 3, "2026-01-01T00:00:00Z");
    let stored = json!({"conditions": conditions_of(&first)});
    let old = ModelStatus::from_value(Some(&stored));
    let mut again = ModelStatus::from_value(Some(&stored));
    again.set_conditions(four("a"), 3, "2026-01-09T00:00:00Z");
    assert!(again.patch_from(&old).is_empty(), "nothing to write");
    // A key no condition of ours has, or another generation: written anew.
    for (key, generation) in [("extra", 3), ("", 4)] {
        let mut foreign = stored.clone();
        if !key.is_empty() {
            foreign["conditions"][2][key] = json!("x");
        }
        let old = ModelStatus::from_value(Some(&foreign));
        let mut s = ModelStatus::from_value(Some(&foreign));
        s.set_conditions(four("a"), generation, "2026-01-09T00:00:00Z");
        let c = conditions_of(&s);
        assert_eq!(c[2].as_object().unwrap().len(), 6, "{c}");
        assert_eq!(c[2]["observedGeneration"], generation);
        assert_eq!(c[2]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert!(!s.patch_from(&old).is_empty());
    }
}

#[test]
fn each_message_lands_on_its_own_condition() {
    let c = states::READY.with(Messages {
        ready: "r".into(),
        progressing: "p".into(),
        degraded: "d".into(),
        rolled_back: "b".into(),
    });
    let got: Vec<String> = c.into_each().map(|(_, c)| c.message).collect();
    assert_eq!(got, ["r", "p", "d", "b"]);
    let one = states::READY.with(Messages {
        rolled_back: "b".into(),
        ..Messages::all("m")
    });
    let got: Vec<String> = one.into_each().map(|(_, c)| c.message).collect();
    assert_eq!(got, ["m", "m", "m", "b"]);
}

#[test]
fn the_patch_names_changes_and_removals() {
    let old = ModelStatus::from_value(Some(
        &json!({"phase": "Ready", "rollbackSpec": {"a": 1}, "x": 1}),
    ));
    let mut new = old.clone();
    assert!(new.patch_from(&old).is_empty());
    new.phase = Some(Phase::RollingOut);
    new.rollback_spec = None;
    assert_eq!(
        Value::Object(new.patch_from(&old)),
        json!({"phase": "RollingOut", "rollbackSpec": null})
    );
}

/// docs/reference.md describes every status field the operator writes.
#[test]
fn the_reference_lists_every_status_field() {
    let reference = include_str!("../../../docs/reference.md");
    let cond = Condition {
        type_: ConditionType::Ready,
        status: CondStatus::True,
        reason: Reason::Healthy,
        message: String::new(),
        observed_generation: None,
        last_transition_time: None,
        foreign: Map::new(),
    };
    // No `..Default::default()`: a new field fails to compile here until
    // it is given, and then fails until it is listed.
    let every = ModelStatus {
        observed_generation: Some(1),
        phase: Some(Phase::Ready),
        desired_version: Some(String::new()),
        active_version: Some(String::new()),
        desired_spec_hash: Some(String::new()),
        manifest_hash: Some(String::new()),
        applied_spec_hash: Some(String::new()),
        target_deployment_generation: Some(1),
        target_deployment_uid: Some(String::new()),
        replicas_managed_by: Some(String::new()),
        failed_spec_hash: Some(String::new()),
        last_successful_spec: Some(Snapshot::of(&json!({}))),
        previous_successful_spec: Some(Snapshot::of(&json!({}))),
        rollback_spec: Some(Snapshot::of(&json!({}))),
        rollback_request: Some(String::new()),
        rollback_count: Some(0),
        conditions: Some(vec![cond]),
        before_rejection: Some(ModelStatus::default().rejection_snapshot()),
        last_events: Some(Vec::new()),
    };
    let Value::Object(fields) = every.to_value() else {
        panic!("a status is an object")
    };
    assert_eq!(fields.len(), 19);
    for key in fields.keys() {
        assert!(
            reference.contains(&format!("`{key}`")),
            "{key} not in docs/reference.md"
        );
    }
}

/// Stored conditions that differ from the wanted ones in any one field, in
/// all four at once, are written again: a stale type, status, reason or
/// message never stays in status (§5).
#[test]
fn conditions_that_differ_in_one_field_everywhere_are_written_again() {
    let mut first = ModelStatus::default();
    first.set_conditions(four("a"), 3, "2026-01-01T00:00:00Z");
    let written = conditions_of(&first);
    type Edit = fn(&Value) -> Value;
    let changes: [(&str, Edit); 4] = [
        ("type", |_| json!("Other")),
        ("status", |v| {
            json!(if v == "True" { "False" } else { "True" })
        }),
        ("reason", |_| json!("Stale")),
        ("message", |_| json!("stale")),
    ];
    for (key, change) in changes {
        let mut stale = written.clone();
        for c in stale.as_array_mut().unwrap() {
            c[key] = change(&c[key]);
        }
        let stored = json!({ "conditions": stale });
        let old = ModelStatus::from_value(Some(&stored));
        let mut s = old.clone();
        s.set_conditions(four("a"), 3, "2026-01-09T00:00:00Z");
        let got = conditions_of(&s);
        for (g, w) in got
            .as_array()
            .unwrap()
            .iter()
            .zip(written.as_array().unwrap())
        {
            assert_eq!(g[key], w[key], "a stale {key} stayed: {got}");
        }
        assert_eq!(s.patch_from(&old)["conditions"], got, "{key}");
    }
}

/// Two statuses are equal only when every field reads the same.
#[test]
fn statuses_are_equal_only_when_every_field_reads_the_same() {
    let doc = |v: Value| ModelStatus::from_value(Some(&v));
    let a = doc(json!({"phase": "Ready", "rollbackCount": 1}));
    assert_eq!(a, doc(json!({"rollbackCount": 1, "phase": "Ready"})));
    for other in [
        json!({"phase": "Failed", "rollbackCount": 1}),
        json!({"phase": "Ready"}),
        json!({"phase": "Ready", "rollbackCount": 1, "desiredVersion": "v"}),
        json!({"phase": "Ready", "rollbackCount": 2}),
    ] {
        assert_ne!(a, doc(other.clone()), "{other}");
        assert_ne!(doc(other.clone()), a, "{other}");
    }
}

/// A patch against another status names what that one has and this one
/// lacks (the status before a rejected annotation, §9.24).
#[test]
fn a_patch_against_another_status_clears_what_it_lacks() {
    let mut s = ModelStatus::from_value(Some(&json!({"phase": "Ready"})));
    s.phase = Some(Phase::RollingOut);
    let other = ModelStatus::from_value(Some(&json!({"phase": "Ready", "desiredVersion": "v"})));
    assert_eq!(
        Value::Object(s.patch_from(&other)),
        json!({"phase": "RollingOut", "desiredVersion": null})
    );
}

/// A status whose condition strings arrive escaped (as another client may
/// write them) reads the same transitions as one written plainly.
#[test]
fn escaped_condition_strings_read_as_plain_ones() {
    let plain = r#"{"conditions":[{"type":"Ready","status":"True","reason":"RolloutSucceeded"}]}"#;
    let escaped = r#"{"conditions":[{"type":"Re\u0061dy","status":"Tru\u0065","reason":"Rollout\u0053ucceeded"}]}"#;
    let read = |t: &str| ModelStatus::from_text(t).transitions();
    assert_eq!(read(escaped), read(plain));
    assert_eq!(
        read(plain),
        [(
            ConditionType::Ready,
            CondStatus::True,
            Reason::RolloutSucceeded
        )]
    );
}

/// A field that does not read as its type reads as absent, and only it:
/// the others are kept, so one stray value costs no other field (§5).
#[test]
fn a_field_of_the_wrong_type_costs_only_itself() {
    let text = r#"{"phase":"Sideways","rollbackCount":"three","desiredVersion":"v2","conditions":[{"type":"Ready","status":"True","reason":"Healthy"}]}"#;
    let s = ModelStatus::from_text(text);
    assert_eq!(s.phase, None);
    assert_eq!(s.rollback_count, None);
    assert_eq!(s.desired_version.as_deref(), Some("v2"));
    assert_eq!(s.ready_reason(), Some(Reason::Healthy));
    assert_eq!(ModelStatus::from_text("[1]"), ModelStatus::default());
    assert_eq!(ModelStatus::from_text(""), ModelStatus::default());
}

/// A status as the operator has always written it reads back and writes
/// again to the same JSON, key for key (the stored JSON is unchanged).
#[test]
fn a_status_written_before_reads_and_writes_the_same_json() {
    let stored = json!({
        "observedGeneration": 2, "phase": "RolledBack", "desiredVersion": "v2",
        "activeVersion": "v1", "desiredSpecHash": "sha256:b", "manifestHash": "sha256:m",
        "appliedSpecHash": "sha256:a", "targetDeploymentGeneration": 7,
        "targetDeploymentUID": "u-1", "replicasManagedBy": "HorizontalPodAutoscaler/h",
        "failedSpecHash": "sha256:b", "lastSuccessfulSpec": {"version": "v1", "replicas": 2},
        "rollbackSpec": {"version": "v1"}, "rollbackRequest": "automatic:v2", "rollbackCount": 1,
        "conditions": [{"type": "Ready", "status": "False", "reason": "RolledBack",
            "message": "m", "observedGeneration": 2, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "beforeRejection": {"phase": null, "rollbackRequest": null, "conditions": null,
            "lastEvents": null},
        "lastEvents": [{"reason": "RollbackStarted", "generation": 2, "message": "m",
            "tag": "automatic-0123456789"}, {"reason": "RolloutFailed", "generation": 2,
            "message": "f"}],
    });
    let s = ModelStatus::from_text(&stored.to_string());
    assert_eq!(s.to_value(), stored);
    assert_eq!(s.to_value().to_string(), stored.to_string());
}

/// A retained spec written again as it stands is no change, however the
/// stored one was spelled (another writer's spacing or escapes); another
/// spec is (§5.1).
#[test]
fn a_snapshot_spelled_otherwise_is_the_same_snapshot() {
    let old =
        ModelStatus::from_text(r#"{"lastSuccessfulSpec": {"version" : "v\u0031", "replicas":2}}"#);
    let mut same = old.clone();
    same.last_successful_spec = Some(Snapshot::of(&json!({"replicas": 2, "version": "v1"})));
    assert_eq!(same, old);
    assert!(same.patch_from(&old).is_empty());
    let mut other = old.clone();
    other.last_successful_spec = Some(Snapshot::of(&json!({"replicas": 3, "version": "v1"})));
    assert_ne!(other, old);
    assert_eq!(
        Value::Object(other.patch_from(&old)),
        json!({"lastSuccessfulSpec": {"replicas": 3, "version": "v1"}})
    );
}
