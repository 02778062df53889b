//! Every figure in the contract's vectors.json, reproduced byte for byte:
//! the guarantee that a cluster can move from the reference operator to
//! this one without a pod restart.

use openmed_operator::model::canonical::canonical_json;
use openmed_operator::model::names::{default_config_map_name, event_name};
use openmed_operator::model::spec::empty_manifest_hash;
use openmed_operator::model::validate;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("fixtures/vectors.json")).expect("vectors.json is JSON")
}

#[test]
fn every_valid_case_reproduces_its_figures() {
    let v = vectors();
    let cases = v["cases"].as_object().unwrap();
    assert!(cases.len() >= 7);
    for (label, case) in cases {
        let res = &case["resource"];
        let name = res["metadata"]["name"].as_str().unwrap();
        let spec = validate(name, res.get("spec")).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(
            canonical_json(&spec.to_json()),
            case["desired_status_json"].as_str().unwrap(),
            "{label}"
        );
        assert_eq!(spec.hash(), case["spec_hash"].as_str().unwrap(), "{label}");
        assert_eq!(
            spec.manifest_json(),
            case["manifest_json"].as_str().unwrap(),
            "{label}"
        );
        assert_eq!(
            spec.manifest_hash(),
            case["manifest_hash"].as_str().unwrap(),
            "{label}"
        );
        assert_eq!(
            spec.manifest_config_map_name,
            case["manifest_config_map_name"].as_str().unwrap(),
            "{label}"
        );
        if res["spec"].get("manifestConfigMapName").is_none() {
            assert_eq!(
                default_config_map_name(name),
                spec.manifest_config_map_name,
                "{label}"
            );
        }
    }
}

#[test]
fn empty_manifest_digest() {
    assert_eq!(
        empty_manifest_hash(),
        vectors()["empty_manifest_hash"].as_str().unwrap()
    );
}

#[test]
fn event_names() {
    let v = vectors();
    let names = v["event_names"].as_object().unwrap();
    assert!(!names.is_empty());
    for (key, want) in names {
        let parts: Vec<&str> = key.split('|').collect();
        let got = event_name(parts[0], parts[1], parts[2].parse().unwrap());
        assert_eq!(got, want.as_str().unwrap(), "{key}");
        assert!(got.len() <= 253);
    }
}

#[test]
fn every_invalid_case_is_rejected_naming_its_field() {
    let v = vectors();
    let invalid = v["invalid"].as_object().unwrap();
    assert!(invalid.len() >= 15);
    for (label, case) in invalid {
        assert_eq!(case["rejected"], true, "{label}");
        let res = &case["resource"];
        let name = res["metadata"]["name"].as_str().unwrap();
        let err = validate(name, res.get("spec"))
            .err()
            .unwrap_or_else(|| panic!("{label} was accepted"));
        let hint = case["field_hint"].as_str().unwrap();
        assert!(
            err.to_string().contains(hint),
            "{label}: {err:?} does not name {hint}"
        );
    }
}
