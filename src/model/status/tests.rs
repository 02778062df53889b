use super::*;

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

fn four(msg: &str) -> [Cond; 4] {
    [
        cond(true, Reason::RolloutSucceeded, msg),
        cond(false, Reason::RolloutComplete, "x"),
        cond(false, Reason::Healthy, "x"),
        cond(false, Reason::NotRequested, "x"),
    ]
}

#[test]
fn transition_time_moves_only_on_change() {
    let mut s = StatusDoc::default();
    s.set_conditions(four("a"), 1, "2026-01-01T00:00:00Z");
    s.set_conditions(four("a"), 2, "2026-01-02T00:00:00Z");
    let c = s.get(Field::Conditions).unwrap();
    assert_eq!(c[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    assert_eq!(c[0]["observedGeneration"], 2);
    s.set_conditions(four("b"), 2, "2026-01-03T00:00:00Z");
    let c = s.get(Field::Conditions).unwrap();
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
    let mut first = StatusDoc::default();
    first.set_conditions(four("a"), 3, "2026-01-01T00:00:00Z");
    let stored = json!({"conditions": first.get(Field::Conditions).unwrap().clone()});
    let old = StatusDoc::from_value(Some(&stored));
    let mut again = StatusDoc::from_value(Some(&stored));
    again.set_conditions(four("a"), 3, "2026-01-09T00:00:00Z");
    assert!(again.diff(&old).is_empty(), "nothing to write");
    // A key no condition of ours has, or another generation: written anew.
    for (key, generation) in [("extra", 3), ("", 4)] {
        let mut foreign = stored.clone();
        if !key.is_empty() {
            foreign["conditions"][2][key] = json!("x");
        }
        let old = StatusDoc::from_value(Some(&foreign));
        let mut s = StatusDoc::from_value(Some(&foreign));
        s.set_conditions(four("a"), generation, "2026-01-09T00:00:00Z");
        let c = s.get(Field::Conditions).unwrap();
        assert_eq!(c[2].as_object().unwrap().len(), 6, "{c}");
        assert_eq!(c[2]["observedGeneration"], generation);
        assert_eq!(c[2]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert!(!s.diff(&old).is_empty());
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
    let got: Vec<&str> = c.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(got, ["r", "p", "d", "b"]);
    let one = states::READY.with(Messages {
        rolled_back: "b".into(),
        ..Messages::all("m")
    });
    let got: Vec<&str> = one.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(got, ["m", "m", "m", "b"]);
}

#[test]
fn diff_reports_changes_and_removals() {
    let old = StatusDoc::from_value(Some(
        &json!({"phase": "Ready", "rollbackSpec": {"a": 1}, "x": 1}),
    ));
    let mut new = old.clone();
    assert!(new.diff(&old).is_empty());
    assert!(!new.differs(&old, None));
    new.set_phase(Phase::RollingOut);
    assert!(new.differs(&old, None) && !new.differs(&old, Some("phase")));
    new.clear(Field::RollbackSpec);
    assert!(new.differs(&old, Some("phase")));
    let d: Map<String, Value> = new
        .diff(&old)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_owned()))
        .collect();
    assert_eq!(
        Value::Object(d),
        json!({"phase": "RollingOut", "rollbackSpec": null})
    );
}

/// docs/reference.md describes every status field the operator writes.
#[test]
fn the_reference_lists_every_status_field() {
    let reference = include_str!("../../../docs/reference.md");
    // Exhaustive: a new field fails to compile here until it is listed.
    let listed = |f: Field| match f {
        Field::ObservedGeneration
        | Field::Phase
        | Field::DesiredVersion
        | Field::ActiveVersion
        | Field::DesiredSpecHash
        | Field::ManifestHash
        | Field::AppliedSpecHash
        | Field::TargetDeploymentGeneration
        | Field::TargetDeploymentUid
        | Field::ReplicasManagedBy
        | Field::FailedSpecHash
        | Field::LastSuccessfulSpec
        | Field::PreviousSuccessfulSpec
        | Field::RollbackSpec
        | Field::RollbackRequest
        | Field::RollbackCount
        | Field::Conditions
        | Field::BeforeRejection
        | Field::LastEvents => f.key(),
    };
    let all = [
        Field::ObservedGeneration,
        Field::Phase,
        Field::DesiredVersion,
        Field::ActiveVersion,
        Field::DesiredSpecHash,
        Field::ManifestHash,
        Field::AppliedSpecHash,
        Field::TargetDeploymentGeneration,
        Field::TargetDeploymentUid,
        Field::ReplicasManagedBy,
        Field::FailedSpecHash,
        Field::LastSuccessfulSpec,
        Field::PreviousSuccessfulSpec,
        Field::RollbackSpec,
        Field::RollbackRequest,
        Field::RollbackCount,
        Field::Conditions,
        Field::BeforeRejection,
        Field::LastEvents,
    ];
    for f in all {
        let key = listed(f);
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
    let mut first = StatusDoc::default();
    first.set_conditions(four("a"), 3, "2026-01-01T00:00:00Z");
    let written = first.get(Field::Conditions).unwrap().clone();
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
        let mut s = StatusDoc::from_value(Some(&json!({ "conditions": stale })));
        s.set_conditions(four("a"), 3, "2026-01-09T00:00:00Z");
        let got = s.get(Field::Conditions).unwrap();
        for (g, w) in got
            .as_array()
            .unwrap()
            .iter()
            .zip(written.as_array().unwrap())
        {
            assert_eq!(g[key], w[key], "a stale {key} stayed: {got}");
        }
    }
}

/// The comparison every decoding test relies on tells apart two statuses
/// that read differently: another value, another key, `null` and absent.
#[test]
fn statuses_are_equal_only_when_every_field_reads_the_same() {
    let doc = |v: Value| StatusDoc::from_value(Some(&v));
    let a = doc(json!({"phase": "Ready", "x": 1}));
    assert_eq!(a, doc(json!({"x": 1, "phase": "Ready"})));
    for other in [
        json!({"phase": "Failed", "x": 1}),
        json!({"phase": "Ready"}),
        json!({"phase": "Ready", "x": 1, "y": 2}),
        json!({"phase": "Ready", "x": null}),
    ] {
        assert_ne!(a, doc(other.clone()), "{other}");
        assert_ne!(doc(other.clone()), a, "{other}");
    }
}

/// An edited status reads its stored fields and its edits, against any
/// other status too (the status before a rejected annotation, §9.24).
#[test]
fn an_edited_status_reads_its_stored_fields_and_its_edits() {
    let mut s = StatusDoc::from_value(Some(&json!({"phase": "Ready", "x": 1})));
    s.set_phase(Phase::RollingOut);
    assert_eq!(s.normalized(), json!({"phase": "RollingOut", "x": 1}));
    let other = StatusDoc::from_value(Some(&json!({"phase": "Ready", "x": 1, "y": 2})));
    let d: Map<String, Value> = s
        .diff(&other)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_owned()))
        .collect();
    assert_eq!(Value::Object(d), json!({"phase": "RollingOut", "y": null}));
}

/// A status whose condition strings arrive escaped (as another client may
/// write them) reads the same transitions as one written plainly.
#[test]
fn escaped_condition_strings_read_as_plain_ones() {
    let plain = r#"{"conditions":[{"type":"Ready","status":"True","reason":"RolloutSucceeded"}]}"#;
    let escaped = r#"{"conditions":[{"type":"Re\u0061dy","status":"Tru\u0065","reason":"Rollout\u0053ucceeded"}]}"#;
    let read = |t: &str| {
        StatusDoc::from_text(t.to_string())
            .transitions()
            .iter()
            .map(|t| t.clone().map(|s| s.into_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(read(escaped), read(plain));
    assert_eq!(
        read(plain),
        [["Ready", "True", "RolloutSucceeded"].map(String::from)]
    );
}
