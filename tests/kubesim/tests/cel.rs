//! `x-kubernetes-validations` as apiextensions-apiserver applies them
//! (`pkg/apiserver/schema/cel`: `Compile` when the CRD is written,
//! `Validator.Validate` on create, update and status update, with
//! `CRDValidationRatcheting`), evaluated by a real CEL interpreter.

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const MODELS: &str = "/apis/openmed.ai/v1alpha1/namespaces/default/openmedmodels";
const THINGS: &str = "/apis/example.com/v1/namespaces/default/things";
const MERGE: &str = "application/merge-patch+json";

fn start() -> (Sim, Api) {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    (sim, a)
}

fn model(strategy: Value) -> Value {
    json!({"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel",
        "metadata": {"name": "m"},
        "spec": {"family": "PII", "version": "v1", "tier": "Small", "replicas": 2,
            "rolloutStrategy": strategy, "targetRef": {"name": "svc"}}})
}

const STALLED: &str = "OpenMedModel.openmed.ai \"m\" is invalid: spec.rolloutStrategy: Invalid value: \"object\": RollingUpdate with both maxUnavailable and maxSurge zero cannot make progress";

/// The shipped CRD's rule: a RollingUpdate that can make no progress is
/// refused on create and on patch, and the stored spec stays.
#[test]
fn the_shipped_rule_refuses_a_rolling_update_that_cannot_progress() {
    let (_sim, a) = start();
    let crd: Value =
        serde_json::from_str(include_str!("../../../manifests/base/crd.json")).unwrap();
    assert_eq!(a.post(CRDS, crd).code, 201);
    std::thread::sleep(std::time::Duration::from_millis(200));

    let zero = json!({"type": "RollingUpdate", "maxUnavailable": 0, "maxSurge": "0%"});
    let r = a.post(MODELS, model(zero));
    assert_eq!(
        (r.code, r.body["message"].as_str()),
        (422, Some(STALLED)),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["details"]["causes"][0]["field"],
        "spec.rolloutStrategy"
    );
    // maxUnavailable defaults to 0: maxSurge "0%" alone stalls too.
    let r = a.post(
        MODELS,
        model(json!({"type": "RollingUpdate", "maxSurge": "0%"})),
    );
    assert_eq!(r.code, 422, "{}", r.body);

    let ok = json!({"type": "RollingUpdate", "maxUnavailable": "0%", "maxSurge": 1});
    assert_eq!(a.post(MODELS, model(ok)).code, 201);
    let patch = json!({"spec": {"rolloutStrategy": {"maxSurge": 0}}});
    let r = a.patch(&format!("{MODELS}/m"), MERGE, patch);
    assert_eq!(
        (r.code, r.body["message"].as_str()),
        (422, Some(STALLED)),
        "{}",
        r.body
    );
    let stored = a.get(&format!("{MODELS}/m")).body;
    assert_eq!(stored["spec"]["rolloutStrategy"]["maxSurge"], 1);
    // Recreate is not a RollingUpdate: the same numbers pass.
    let patch = json!({"spec": {"rolloutStrategy": {"type": "Recreate", "maxSurge": 0}}});
    assert_eq!(a.patch(&format!("{MODELS}/m"), MERGE, patch).code, 200);
}

fn things_crd(rules: Value, status_rules: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-validations": rules, "properties": {
                        "count": {"type": "integer"}, "max": {"type": "integer"},
                        "name": {"type": "string"}, "note": {"type": "string"}}},
                    "status": {"type": "object", "x-kubernetes-validations": status_rules,
                        "properties": {"phase": {"type": "string"}}}}}}}]}})
}

fn put_crd(a: &Api, crd: Value) {
    let path = format!("{CRDS}/things.example.com");
    let r = match a.get(&path) {
        r if r.code == 200 => {
            let mut crd = crd;
            crd["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"].clone();
            a.put(&path, crd)
        }
        _ => a.post(CRDS, crd),
    };
    assert!(r.code == 200 || r.code == 201, "{}", r.body);
    std::thread::sleep(std::time::Duration::from_millis(200));
}

fn thing(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec})
}

/// A rule that does not compile refuses the CRD, at the rule's path.
#[test]
fn a_rule_that_does_not_compile_refuses_the_crd() {
    let (_sim, a) = start();
    let r = a.post(
        CRDS,
        things_crd(json!([{"rule": "self.count <"}]), json!([])),
    );
    assert_eq!(r.code, 422, "{}", r.body);
    let cause = &r.body["details"]["causes"][0];
    assert_eq!(
        cause["field"],
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    let msg = cause["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Invalid value: apiextensions.ValidationRule{Rule:\"self.count <\""),
        "{msg}"
    );
    assert!(
        msg.contains("compilation failed: ERROR: <input>:1:"),
        "{msg}"
    );
    assert_eq!(a.get(&format!("{CRDS}/things.example.com")).code, 404);
}

/// Messages, reasons, transition rules and status: `fieldErrorForReason`,
/// `ruleMessageOrDefault`, a messageExpression's string, `oldSelf` only on
/// update.
#[test]
fn rules_report_their_message_reason_and_path_and_transition_rules_need_an_old_value() {
    let (_sim, a) = start();
    let rules = json!([
        {"rule": "!has(self.count) || !has(self.max) || self.count <= self.max",
            "messageExpression": "'count ' + string(self.count) + ' is over ' + string(self.max)",
            "reason": "FieldValueForbidden", "fieldPath": ".count"},
        {"rule": "!has(oldSelf.name) || self.name == oldSelf.name"},
    ]);
    put_crd(
        &a,
        things_crd(
            rules,
            json!([{"rule": "self.phase != 'Lost'", "message": "never lost"}]),
        ),
    );

    let r = a.post(THINGS, thing(json!({"count": 5, "max": 3})));
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(
        r.body["message"],
        "Thing.example.com \"t\" is invalid: spec.count: Forbidden: count 5 is over 3"
    );
    // No old value on create: the transition rule is not evaluated.
    assert_eq!(
        a.post(THINGS, thing(json!({"count": 1, "max": 3, "name": "a"})))
            .code,
        201
    );
    let r = a.patch(
        &format!("{THINGS}/t"),
        MERGE,
        json!({"spec": {"name": "b"}}),
    );
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(
        r.body["message"],
        "Thing.example.com \"t\" is invalid: spec: Invalid value: \"object\": failed rule: !has(oldSelf.name) || self.name == oldSelf.name"
    );
    let status = format!("{THINGS}/t/status");
    let r = a.patch(&status, MERGE, json!({"status": {"phase": "Lost"}}));
    assert_eq!(r.code, 422, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .ends_with("status: Invalid value: \"object\": never lost"),
        "{}",
        r.body
    );
    assert_eq!(
        a.patch(&status, MERGE, json!({"status": {"phase": "Found"}}))
            .code,
        200
    );
}

/// Ratcheting: an object stored before a rule existed can still be
/// updated, as long as the value the rule judges is unchanged.
#[test]
fn values_left_as_they_were_are_ratcheted_on_update() {
    let (_sim, a) = start();
    put_crd(&a, things_crd(json!([]), json!([])));
    assert_eq!(
        a.post(THINGS, thing(json!({"count": 9, "max": 3}))).code,
        201
    );
    let rule = json!([{"rule": "self.count <= self.max", "message": "over"}]);
    put_crd(&a, things_crd(rule, json!([])));

    let path = format!("{THINGS}/t");
    // Labels only: spec is unchanged, so its rule is not judged.
    let r = a.patch(&path, MERGE, json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(r.code, 200, "{}", r.body);
    // A change inside spec is judged, and refused.
    let r = a.patch(&path, MERGE, json!({"spec": {"note": "x"}}));
    assert_eq!(r.code, 422, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .ends_with("spec: Invalid value: \"object\": over"),
        "{}",
        r.body
    );
    assert_eq!(
        a.patch(&path, MERGE, json!({"spec": {"count": 2}})).code,
        200
    );
}
