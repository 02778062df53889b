//! Custom resource schemas as apiextensions-apiserver applies them:
//! `ValidateListSetsAndMaps` (`pkg/apiserver/schema/listtype`), `format:
//! date-time` (kube-openapi `strfmt.IsDateTime`), and printer columns as
//! the CRD table convertor makes them (`cellForJSONValue`).

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const THINGS: &str = "/apis/example.com/v1/namespaces/default/things";

fn things_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Seen", "type": "date", "jsonPath": ".spec.seen"},
                    {"name": "Count", "type": "integer", "jsonPath": ".spec.count"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "seen": {"type": "string", "format": "date-time"},
                        "count": {"type": "integer"},
                        "tags": {"type": "array", "x-kubernetes-list-type": "set",
                            "items": {"type": "string"}},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name", "protocol"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "protocol": {"type": "string"},
                                "port": {"type": "integer"}}}},
                        "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["type"],
                            "items": {"type": "object", "properties": {
                                "type": {"type": "string"}, "status": {"type": "string"}}}}}}}}}}]}
    })
}

fn sim_with_things() -> (Sim, Api) {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let r = a.post(CRDS, things_crd());
    assert_eq!(r.code, 201, "{}", r.body);
    (sim, a)
}

fn thing(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec})
}

/// (field, reason, message) of each cause of a 422.
fn causes(r: &Value) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    r["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (s(&c["field"]), s(&c["reason"]), s(&c["message"])))
        .collect()
}

#[test]
fn list_sets_and_maps_refuse_duplicates_as_upstream() {
    let (_sim, a) = sim_with_things();
    let r = a.post(
        THINGS,
        thing(json!({
            "tags": ["a", "b", "a", "a"],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80},
                {"name": "http", "protocol": "UDP", "port": 80},
                {"name": "http", "protocol": "TCP", "port": 81}],
        })),
    );
    assert_eq!(r.code, 422, "{}", r.body);
    let dup = "FieldValueDuplicate".to_string();
    let mut got = causes(&r.body);
    got.sort();
    assert_eq!(
        got,
        [
            (
                "spec.conditions[1]".into(),
                dup.clone(),
                r#"Duplicate value: map[string]interface {}{"type":"Ready"}"#.into()
            ),
            (
                "spec.ports[2]".into(),
                dup.clone(),
                r#"Duplicate value: map[string]interface {}{"name":"http", "protocol":"TCP"}"#
                    .into()
            ),
            // Only the second appearance of a value is reported.
            ("spec.tags[2]".into(), dup, r#"Duplicate value: "a""#.into()),
        ]
    );
    let r = a.post(
        THINGS,
        thing(
            json!({"tags": ["a", "b"], "conditions": [{"type": "Ready"}, {"type": "Available"}],
            "ports": [{"name": "http", "protocol": "TCP"}, {"name": "http", "protocol": "UDP"}]}),
        ),
    );
    assert_eq!(r.code, 201, "{}", r.body);
}

#[test]
fn date_time_strings_are_checked_as_strfmt_checks_them() {
    let (_sim, a) = sim_with_things();
    for bad in [
        "yesterday",
        "2026-02-30T10:00:00Z",
        "2026-12-03T24:00:00Z",
        "2026-12-03T10:00:00",
    ] {
        let r = a.post(THINGS, thing(json!({"seen": bad})));
        assert_eq!(r.code, 422, "{bad}: {}", r.body);
        let expect = format!("spec.seen in body must be of type date-time: {bad:?}");
        assert!(
            causes(&r.body)
                .iter()
                .any(|c| c.0 == "spec.seen" && c.2.ends_with(&expect)),
            "{}",
            r.body
        );
    }
    for (i, good) in ["2026-12-03T10:00:00Z", "2026-12-03t10:00:00.5+01:00"]
        .iter()
        .enumerate()
    {
        let mut t = thing(json!({"seen": good}));
        t["metadata"]["name"] = json!(format!("t{i}"));
        assert_eq!(a.post(THINGS, t).code, 201, "{good}");
    }
}

#[test]
fn printer_columns_keep_their_type_and_cells_follow_it() {
    let (_sim, a) = sim_with_things();
    a.post(
        THINGS,
        thing(json!({"seen": "2020-01-01T00:00:00Z", "count": 3})),
    );
    let t = a
        .get_as(
            THINGS,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body;
    let cols = t["columnDefinitions"].as_array().unwrap();
    assert_eq!(
        (&cols[1]["name"], &cols[1]["type"]),
        (&json!("Seen"), &json!("date"))
    );
    assert_eq!(
        cols[1]["description"],
        "Custom resource definition column (in JSONPath format): .spec.seen"
    );
    let cells = &t["rows"][0]["cells"];
    // `HumanDuration`: years and days past two years.
    let seen = cells[1].as_str().unwrap();
    assert!(seen.contains('y') && seen.ends_with('d'), "{cells}");
    assert_eq!(cells[2], 3);
    // A value that is missing is a null cell, not text.
    let mut bare = thing(json!({}));
    bare["metadata"]["name"] = json!("bare");
    assert_eq!(a.post(THINGS, bare).code, 201);
    let t = a
        .get_as(
            &format!("{THINGS}?fieldSelector=metadata.name%3Dbare"),
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body;
    assert_eq!(t["rows"][0]["cells"][1], Value::Null);
    assert_eq!(t["rows"][0]["cells"][2], Value::Null);
}

/// The custom resource storage decoder prunes and defaults every object it
/// reads (`customresource_handler`: `schemaCoercingDecoder`,
/// `unstructuredDefaulter`): a default added to the CRD shows on objects
/// stored before it, and a field dropped from the schema no longer shows,
/// on GET and list, with no write.
#[test]
fn a_new_default_shows_on_objects_stored_before_it() {
    let (_sim, a) = sim_with_things();
    let stored = a
        .post(
            THINGS,
            thing(json!({"seen": "2026-12-03T10:00:00Z", "count": 1})),
        )
        .body;
    let mut crd = a.get(&format!("{CRDS}/things.example.com")).body;
    let props = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    props["mode"] = json!({"type": "string", "default": "fast"});
    props.as_object_mut().unwrap().remove("count");
    let r = a.put(&format!("{CRDS}/things.example.com"), crd);
    assert_eq!(r.code, 200, "{}", r.body);
    let got = a.get(&format!("{THINGS}/t")).body;
    assert_eq!(got["spec"]["mode"], "fast");
    assert!(got["spec"].get("count").is_none(), "{got}");
    assert_eq!(
        got["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );
    let listed = a.get(THINGS).body;
    assert_eq!(listed["items"][0]["spec"]["mode"], "fast");
}
