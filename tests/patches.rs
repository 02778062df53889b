//! Every patch body the operator builds, applied with the simulated API
//! server's merge implementations to realistic objects, and the result
//! checked against the API server's own validation.

mod common;

use common::*;
use kubesim::kinds::{prepare, FieldValidation};
use kubesim::patch::{merge_patch, strategic_merge};
use kubesim::resources::Registry;
use openmed_operator::model::spec::empty_manifest_hash;
use openmed_operator::model::validate;
use openmed_operator::reconcile::patches;
use openmed_operator::reconcile::{ConfigMapView, ModelView};
use serde_json::{json, Value};

fn accepted_by_api_server(group: &str, plural: &str, obj: &Value, old: &Value) {
    let def = Registry::builtin()
        .find(group, "v1", plural)
        .cloned()
        .unwrap();
    let mut o = obj.clone();
    if let Err(e) = prepare(&def, &mut o, Some(old), FieldValidation::Strict) {
        panic!("the API server would refuse it: {}", e.message);
    }
}

fn env<'a>(d: &'a Value, container: &str) -> &'a Vec<Value> {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == container)
        .unwrap()["env"]
        .as_array()
        .unwrap()
}

fn mv() -> ModelView {
    ModelView::from_json(&model(spec(V1))).unwrap()
}

#[test]
fn deployment_apply_points_the_container_at_the_configmap_and_leaves_the_rest() {
    let m = mv();
    let s = validate(NAME, m.spec()).unwrap();
    let before = deployment();
    let after = strategic_merge(&before, &patches::deployment_apply(&m, &s, false)).unwrap();
    accepted_by_api_server("apps", "deployments", &after, &before);

    assert_eq!(after["spec"]["replicas"], 2);
    assert_eq!(after["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(
        after["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
    assert_eq!(
        after["metadata"]["annotations"],
        json!({"team": "ml-platform", "openmed.ai/model-resource": "openmed/openmed-service"})
    );
    assert_eq!(
        after["metadata"]["labels"],
        json!({"app": NAME, "openmed.ai/managed-target": "true", "openmed.ai/managed": "true"})
    );
    assert_eq!(
        after["spec"]["template"]["metadata"]["annotations"],
        json!({"prometheus.io/scrape": "true", "openmed.ai/model-manifest-hash": s.manifest_hash(), "openmed.ai/model-resource": "openmed/openmed-service"})
    );
    // The named container: `value` gone, `valueFrom` set; its other env var,
    // ports and mounts untouched.
    assert_eq!(
        env(&after, "openmed-service"),
        &vec![
            json!({"name": "LOG_LEVEL", "value": "info"}),
            json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom": {"configMapKeyRef": {"name": "openmed-service-model-manifest", "key": "OPENMED_SERVICE_PRELOAD_MODELS"}}}),
        ]
    );
    let c = &after["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["ports"], json!([{"containerPort": 8080}]));
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "cache", "mountPath": "/cache"}])
    );
    assert_eq!(c["image"], "ghcr.io/openmed/openmed-service:1.4");
    // The other container and the volumes are not touched.
    assert_eq!(
        env(&after, "proxy"),
        &vec![json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": "not-mine"})]
    );
    assert_eq!(
        after["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "cache", "emptyDir": {}}])
    );
    assert_eq!(after["spec"]["selector"], before["spec"]["selector"]);

    // Applying it again changes nothing.
    let again = strategic_merge(&after, &patches::deployment_apply(&m, &s, false)).unwrap();
    assert_eq!(again, after);
}

#[test]
fn recreate_clears_rolling_update() {
    let mut sp = spec(V1);
    sp["rolloutStrategy"] = json!({"type": "Recreate", "progressDeadlineSeconds": 30});
    let m = ModelView::from_json(&model(sp)).unwrap();
    let s = validate(NAME, m.spec()).unwrap();
    let before = deployment();
    let after = strategic_merge(&before, &patches::deployment_apply(&m, &s, false)).unwrap();
    assert_eq!(after["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(after["spec"]["progressDeadlineSeconds"], 30);
    accepted_by_api_server("apps", "deployments", &after, &before);
}

#[test]
fn percentages_stay_strings_on_the_deployment() {
    let mut sp = spec(V1);
    sp["rolloutStrategy"] =
        json!({"type": "RollingUpdate", "maxUnavailable": "25%", "maxSurge": "0%"});
    let m = ModelView::from_json(&model(sp)).unwrap();
    let s = validate(NAME, m.spec()).unwrap();
    let after = strategic_merge(&deployment(), &patches::deployment_apply(&m, &s, false)).unwrap();
    assert_eq!(
        after["spec"]["strategy"]["rollingUpdate"],
        json!({"maxUnavailable": "25%", "maxSurge": "0%"})
    );
}

#[test]
fn an_env_var_sourced_from_a_secret_is_replaced_not_merged() {
    let m = mv();
    let s = validate(NAME, m.spec()).unwrap();
    let mut before = deployment();
    before["spec"]["template"]["spec"]["containers"][0]["env"][1] = json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}});
    let after = strategic_merge(&before, &patches::deployment_apply(&m, &s, false)).unwrap();
    accepted_by_api_server("apps", "deployments", &after, &before);
    assert!(env(&after, "openmed-service")[1]["valueFrom"]
        .get("secretKeyRef")
        .is_none());
}

#[test]
fn decommission_hands_the_deployment_back() {
    let m = mv();
    let s = validate(NAME, m.spec()).unwrap();
    let before = deployment();
    let managed = strategic_merge(&before, &patches::deployment_apply(&m, &s, false)).unwrap();
    let after = strategic_merge(
        &managed,
        &patches::deployment_decommission(Some("openmed-service")),
    )
    .unwrap();
    accepted_by_api_server("apps", "deployments", &after, &managed);
    assert_eq!(
        after["metadata"]["annotations"],
        json!({"team": "ml-platform"})
    );
    assert_eq!(
        after["metadata"]["labels"],
        json!({"app": NAME, "openmed.ai/managed-target": "true"}),
        "the opt-in label is the team's: it stays"
    );
    assert_eq!(
        after["spec"]["template"]["metadata"]["annotations"],
        json!({"prometheus.io/scrape": "true", "openmed.ai/model-manifest-hash": empty_manifest_hash()})
    );
    assert_eq!(
        env(&after, "openmed-service"),
        &vec![
            json!({"name": "LOG_LEVEL", "value": "info"}),
            json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""})
        ]
    );
    assert_eq!(env(&after, "proxy"), env(&before, "proxy"));
    // Replicas and strategy stay as the operator left them; the Deployment itself is never deleted.
    assert_eq!(after["spec"]["replicas"], 2);

    // Without the container, the patch does not invent one.
    let mut no_container = managed.clone();
    no_container["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let after = strategic_merge(&no_container, &patches::deployment_decommission(None)).unwrap();
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn claim_label_only_adds_the_label() {
    let before = deployment();
    let after = strategic_merge(&before, &patches::deployment_claim()).unwrap();
    assert_eq!(after["metadata"]["labels"]["openmed.ai/managed"], "true");
    let mut b = before.clone();
    b["metadata"]["labels"]["openmed.ai/managed"] = json!("true");
    assert_eq!(after, b);
}

#[test]
fn config_map_create_and_patch() {
    let m = mv();
    let s = validate(NAME, m.spec()).unwrap();
    let created = patches::config_map_create(&m, &s);
    let empty = json!({});
    accepted_by_api_server("", "configmaps", &created, &empty);
    assert_eq!(
        created["metadata"]["name"],
        "openmed-service-model-manifest"
    );
    assert_eq!(
        created["metadata"]["annotations"],
        json!({"openmed.ai/model-resource": "openmed/openmed-service"})
    );
    assert_eq!(
        created["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "openmed-operator", "openmed.ai/model-family": "PII"})
    );
    assert_eq!(
        created["metadata"]["ownerReferences"],
        json!([{"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel", "name": NAME, "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(created["data"]["manifest.json"], s.manifest_json());
    assert_eq!(created["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], V1);

    // Tampered: someone changed the data, added a key and a label of their own.
    let mut tampered = created.clone();
    tampered["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] = json!("evil");
    tampered["data"]["extra"] = json!("keep me");
    tampered["metadata"]["labels"]["team"] = json!("ml");
    tampered["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "other-uid", "controller": false}));
    let view = ConfigMapView::from_json(&tampered).unwrap();
    let after = merge_patch(&tampered, &patches::config_map_patch(&m, &s, &view));
    accepted_by_api_server("", "configmaps", &after, &tampered);
    assert_eq!(after["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], V1);
    assert_eq!(after["data"]["extra"], "keep me");
    assert_eq!(after["metadata"]["labels"]["team"], "ml");
    // The other owner's reference is carried over as it was, and ours is
    // the one controller reference.
    let refs = after["metadata"]["ownerReferences"].as_array().unwrap();
    let uids: Vec<(&str, bool)> = refs
        .iter()
        .map(|r| (r["uid"].as_str().unwrap(), r["controller"] == true))
        .collect();
    assert_eq!(uids, [("other-uid", false), ("uid-1", true)], "{refs:?}");
}

#[test]
fn status_and_finalizer_patches_carry_the_resource_version() {
    let body = patches::StatusPatch {
        metadata: patches::PatchMetadata {
            resource_version: "123",
        },
        status: serde_json::Map::from_iter([
            ("rollbackSpec".to_string(), Value::Null),
            ("phase".to_string(), json!("Ready")),
        ]),
    };
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        r#"{"metadata":{"resourceVersion":"123"},"status":{"phase":"Ready","rollbackSpec":null}}"#
    );
    // What the Writer reads back from the patch it sends.
    assert_eq!(body.get("phase"), Some(&json!("Ready")));
    assert_eq!(body.get("rollbackSpec"), Some(&Value::Null));
    assert_eq!(body.get("conditions"), None);
    let body = body.to_value();
    let before = json!({"metadata": {"resourceVersion": "123"}, "status": {"phase": "RollingOut", "rollbackSpec": {"a": 1}, "rollbackCount": 1}});
    let after = merge_patch(&before, &body);
    assert_eq!(
        after["status"],
        json!({"phase": "Ready", "rollbackCount": 1})
    );
    assert_eq!(body["metadata"]["resourceVersion"], "123");

    let f = patches::finalizers_patch(
        "7",
        &["other/keep".to_string(), "openmed.ai/finalizer".to_string()],
    );
    assert_eq!(
        f,
        json!({"metadata": {"resourceVersion": "7", "finalizers": ["other/keep", "openmed.ai/finalizer"]}})
    );
}

#[test]
fn event_body_is_a_valid_core_event() {
    let m = mv();
    let e = serde_json::to_value(patches::event(
        &m,
        "openmed-service-rolloutstarted-1-81dead65c2",
        openmed_operator::model::EventReason::RolloutStarted,
        "Rolling out v1",
        "2026-11-30T00:00:00Z",
    ))
    .unwrap();
    accepted_by_api_server("", "events", &e, &json!({}));
    assert_eq!(e["type"], "Normal");
    // Seen again: the same record counts it, with the latest message and time.
    let again = merge_patch(
        &e,
        &patches::event_repeat(2, "Rolling out v1 again", "2026-11-30T00:01:00Z"),
    );
    accepted_by_api_server("", "events", &again, &e);
    assert_eq!(
        (&again["count"], &again["message"], &again["lastTimestamp"]),
        (
            &json!(2),
            &json!("Rolling out v1 again"),
            &json!("2026-11-30T00:01:00Z")
        )
    );
    assert_eq!(again["firstTimestamp"], e["firstTimestamp"]);
    assert_eq!(
        e["involvedObject"],
        json!({"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel", "name": NAME, "namespace": NS, "uid": "uid-1"})
    );
    let w = serde_json::to_value(patches::event(
        &m,
        "x",
        openmed_operator::model::EventReason::RollbackFailed,
        "m",
        "2026-11-30T00:00:00Z",
    ))
    .unwrap();
    assert_eq!(w["type"], "Warning");
}

/// docs/troubleshooting.md's "the same by hand" is the patch the operator
/// and `release` send, byte for byte once parsed.
#[test]
fn the_hand_back_in_the_docs_is_the_operators_own() {
    let doc = include_str!("../docs/troubleshooting.md");
    let start = doc
        .find("kubectl patch deployment -n NS DEPLOYMENT --type=strategic -p '")
        .expect("the hand-back command is in docs/troubleshooting.md");
    let body = &doc[start..];
    let body = &body[body.find('\'').unwrap() + 1..];
    let body = &body[..body.find('\'').unwrap()];
    let documented: Value = serde_json::from_str(body).expect("the documented patch is JSON");
    assert_eq!(
        documented,
        patches::deployment_decommission(Some("openmed-service"))
    );
}
