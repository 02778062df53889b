use super::*;
use crate::model::canonical::canonical_json;

fn base() -> Value {
    json!({"family": "PII", "version": "v1", "tier": "Small", "replicas": 2, "rolloutStrategy": {"type": "RollingUpdate"}})
}

fn with(path: &[&str], v: Value) -> Value {
    let mut s = base();
    let mut cur = &mut s;
    for p in &path[..path.len() - 1] {
        cur = &mut cur[*p];
    }
    cur[path[path.len() - 1]] = v;
    s
}

#[test]
fn strings_are_trimmed_before_use() {
    let s = validate(
        "m",
        Some(&with(&["version"], json!("  OpenMed/x@sha256:ab \n"))),
    )
    .unwrap();
    assert_eq!(s.version, "OpenMed/x@sha256:ab");
    let s = validate("m", Some(&with(&["tier"], json!(" Large ")))).unwrap();
    assert_eq!(s.tier, Tier::Large);
    let s = validate(
        "m",
        Some(&with(&["rolloutStrategy", "maxSurge"], json!(" 25% "))),
    )
    .unwrap();
    assert_eq!(s.rollout.max_surge, IntOrPercent::Percent(25));
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        (with(&["family"], json!("")), "spec.family"),
        (with(&["family"], json!("a-")), "spec.family"),
        (with(&["family"], json!(7)), "spec.family"),
        (with(&["version"], json!("-x")), "spec.version"),
        (with(&["tier"], json!("small")), "spec.tier"),
        (with(&["replicas"], json!(2.5)), "spec.replicas"),
        (with(&["replicas"], json!("2")), "spec.replicas"),
        (
            with(&["rolloutStrategy", "maxUnavailable"], json!("5")),
            "spec.rolloutStrategy.maxUnavailable",
        ),
        (
            with(&["rolloutStrategy", "maxUnavailable"], json!("050%")),
            "spec.rolloutStrategy.maxUnavailable",
        ),
        (
            with(&["rolloutStrategy", "maxSurge"], json!(true)),
            "spec.rolloutStrategy.maxSurge",
        ),
        (
            with(&["rolloutStrategy", "bogus"], json!(1)),
            "spec.rolloutStrategy.bogus",
        ),
        (with(&["bogus"], json!(1)), "spec.bogus"),
        (
            with(&["targetRef"], json!({"nam": "x"})),
            "spec.targetRef.nam",
        ),
        (with(&["targetRef"], json!("x")), "spec.targetRef"),
        (
            with(&["manifestConfigMapName"], json!("Bad")),
            "spec.manifestConfigMapName",
        ),
        (
            with(
                &["rolloutStrategy", "progressDeadlineSeconds"],
                json!(2_147_483_648i64),
            ),
            "spec.rolloutStrategy.progressDeadlineSeconds",
        ),
    ];
    for (spec, field) in cases {
        let e = validate("m", Some(&spec)).unwrap_err();
        assert_eq!(e.field, field, "{spec}: {e}");
    }
    assert_eq!(validate("m", None).unwrap_err().field, "spec");
}

/// A missing required block is named itself, not its first field (§1.2, §1.3).
#[test]
fn a_missing_rollout_strategy_is_named_as_the_block() {
    let mut absent = base();
    absent.as_object_mut().map(|o| o.remove("rolloutStrategy"));
    for s in [absent, with(&["rolloutStrategy"], Value::Null)] {
        let e = validate("m", Some(&s)).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.rule.as_str()),
            ("spec.rolloutStrategy", "required"),
            "{s}"
        );
    }
}

/// A value of the wrong JSON type says which type the field takes (§1.2, §1.3).
#[test]
fn a_value_of_the_wrong_type_says_which_type() {
    let cases = [
        (with(&["family"], json!(7)), "must be a string"),
        (with(&["tier"], json!(["Small"])), "must be a string"),
        (
            with(&["replicas"], json!("2")),
            "must be an integer from 1 to 1000",
        ),
    ];
    for (spec, rule) in cases {
        let e = validate("m", Some(&spec)).unwrap_err();
        assert_eq!(e.rule, rule, "{spec}: {e}");
    }
}

#[test]
fn recreate_ignores_zero_zero_and_percent_bounds() {
    let s = with(
        &["rolloutStrategy"],
        json!({"type": "Recreate", "maxSurge": 0, "maxUnavailable": "0%"}),
    );
    assert!(validate("m", Some(&s)).is_ok());
    let s = with(
        &["rolloutStrategy"],
        json!({"type": "RollingUpdate", "maxSurge": "100%", "maxUnavailable": "0%"}),
    );
    assert!(validate("m", Some(&s)).is_ok());
}

#[test]
fn defaults_come_from_the_resource_name() {
    let s = validate("svc.a", Some(&base())).unwrap();
    assert_eq!(s.target.name, "svc.a");
    assert_eq!(s.target.container_name, "openmed-service");
    assert_eq!(s.manifest_config_map_name, "svc.a-model-manifest");
    assert_eq!(DesiredSpec::from_snapshot("other", &s.to_json()), Some(s));
}

#[test]
fn hashes_are_those_of_the_canonical_values() {
    let specs = [
        base(),
        with(&["version"], json!("OpenMed/a_b+c~d:e@sha256:ab")),
        with(
            &["rolloutStrategy"],
            json!({"type": "RollingUpdate", "maxSurge": "25%", "maxUnavailable": 3,
                   "rollbackOnFailure": false, "progressDeadlineSeconds": 900}),
        ),
        with(&["rolloutStrategy"], json!({"type": "Recreate"})),
        with(
            &["targetRef"],
            json!({"name": "t.x-1", "containerName": "c"}),
        ),
    ];
    for v in specs {
        let s = validate("svc", Some(&v)).unwrap();
        assert_eq!(s.canonical().text(), canonical_json(&s.to_json()));
        assert_eq!(s.hash(), digest(&s.to_json()));
        assert_eq!(s.manifest_canonical().text(), canonical_json(&s.manifest()));
        assert_eq!(s.manifest_hash(), digest(&s.manifest()));
    }
}
