use super::*;
use serde_json::json;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn rendered(causes: &[Cause]) -> Vec<String> {
    causes.iter().map(Cause::render).collect()
}

/// Every rule at once, as the CRD create path runs them, from path "".
fn check(schema: Value) -> Vec<String> {
    let mut causes = vec![];
    check_crd_schema(&schema, "", false, &mut causes);
    rendered(&causes)
}

/// Only `validateStructuralCompleteness`, as upstream's table calls it.
fn complete(schema: Value) -> Vec<String> {
    let s = obj(schema);
    let mut causes = vec![];
    completeness(&s, &s, "", "", &mut causes);
    rendered(&causes)
}

fn versions(crd: &Value) -> Vec<&Value> {
    crd["spec"]["versions"]
        .as_array()
        .map(|vs| vs.iter().collect())
        .unwrap_or_default()
}

#[test]
fn the_shipped_crd_is_structural() {
    let crd: Value = serde_json::from_str(include_str!("../../../../../manifests/base/crd.json"))
        .expect("crd.json is JSON");
    assert!(!versions(&crd).is_empty());
    for (i, v) in versions(&crd).into_iter().enumerate() {
        let mut causes = vec![];
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        check_crd_schema(&v["schema"]["openAPIV3Schema"], &path, true, &mut causes);
        assert!(causes.is_empty(), "{:#?}", rendered(&causes));
    }
}

/// The schema the issue found refused: bounds inside the int-or-string
/// branches make them nested value validation, where `type` is forbidden.
#[test]
fn int_or_string_branches_with_bounds_are_not_structural() {
    let branchy = json!({"x-kubernetes-int-or-string": true, "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 2147483647},
        {"type": "string", "pattern": "^(?:0|[1-9][0-9]?|100)%$"}
    ]});
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "rolloutStrategy": {"type": "object", "properties": {"maxUnavailable": branchy, "maxSurge": branchy}}
    }}}});
    let base = "spec.versions[0].schema.openAPIV3Schema";
    let mut causes = vec![];
    check_crd_schema(&schema, base, false, &mut causes);
    let field = |f: &str, i: usize| {
        format!("{base}.properties[spec].properties[rolloutStrategy].properties[{f}].anyOf[{i}].type: Forbidden: must be empty to be structural")
    };
    assert_eq!(
        rendered(&causes),
        vec![
            field("maxSurge", 0),
            field("maxSurge", 1),
            field("maxUnavailable", 0),
            field("maxUnavailable", 1),
        ]
    );
    // The structural form: bounds and pattern beside the bare anyOf.
    let bare = json!({"x-kubernetes-int-or-string": true, "minimum": 0, "pattern": "^[0-9]+%$",
        "anyOf": [{"type": "integer"}, {"type": "string"}]});
    assert!(check(json!({"type": "object", "properties": {"m": bare}})).is_empty());
    // The allOf form: allOf[0] is the bare anyOf, more value validation may follow.
    let all_of = json!({"x-kubernetes-int-or-string": true, "allOf": [
        {"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"minimum": 0}]});
    assert!(check(json!({"type": "object", "properties": {"m": all_of}})).is_empty());
    // Anything more in a branch (even a description) breaks the pattern.
    let described = json!({"x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer", "description": "n"}, {"type": "string"}]});
    assert_eq!(
        check(json!({"type": "object", "properties": {"m": described}})),
        vec![
            "properties[m].anyOf[0].description: Forbidden: must be empty to be structural",
            "properties[m].anyOf[0].type: Forbidden: must be empty to be structural",
            "properties[m].anyOf[1].type: Forbidden: must be empty to be structural",
        ]
    );
}

/// `TestValidateStructuralCompleteness` (complete_test / validation_test.go),
/// with the options a CRD gets (every `Allow*` false).
#[test]
fn completeness_table() {
    let min_len = json!({"minLength": 2});
    let cases = [
        (
            "disallowed properties valuevalidation, additional properties structure",
            json!({"additionalProperties": {"type": "object", "properties": {"bar": {"type": "string"}}},
                   "allOf": [{"properties": {"foo": min_len}}]}),
            Some("properties[foo]: Required value: because it is defined in allOf[0].properties[foo]"),
        ),
        (
            "allowed property in valuevalidation, and in structure",
            json!({"properties": {"foo": {"type": "string"}}, "allOf": [{"properties": {"foo": min_len}}]}),
            None,
        ),
        (
            "disallowed property in valuevalidation, and in structure",
            json!({"properties": {"foo": {"type": "string"}}, "allOf": [{"properties": {"notfoo": min_len}}]}),
            Some("properties[notfoo]: Required value: because it is defined in allOf[0].properties[notfoo]"),
        ),
        (
            "allowed items in valuevalidation, and in structure",
            json!({"type": "array", "items": {"type": "string"}, "allOf": [{"items": min_len}]}),
            None,
        ),
        (
            "disallowed items in valuevalidation, and not in structure",
            json!({"type": "object", "properties": {"foo": {"type": "string"}}, "allOf": [{"items": min_len}]}),
            Some("items: Required value: because it is defined in allOf[0].items"),
        ),
    ];
    for (name, schema, want) in cases {
        let got = complete(schema);
        match want {
            None => assert!(got.is_empty(), "{name}: {got:?}"),
            Some(w) => assert!(got.iter().any(|g| g == w), "{name}: {got:?}"),
        }
    }
    // Upstream's "disallowed additionalproperties valuevalidation" row runs
    // with AllowNestedAdditionalProperties, which CRDs never get: there the
    // invariants refuse the nested additionalProperties outright.
    let got = check(
        json!({"type": "object", "properties": {"bar": {"type": "string"}},
        "allOf": [{"additionalProperties": {"minLength": 2}}]}),
    );
    assert_eq!(
        got,
        vec!["allOf[0].additionalProperties: Forbidden: must be undefined to be structural"]
    );
}

/// `TestValidateNestedValueValidationComplete`: every generic field and
/// every extension is refused under a junctor once it is non-zero.
#[test]
fn every_forbidden_key_is_refused_under_a_junctor() {
    let values = [
        ("type", json!("string")),
        ("additionalProperties", json!({})),
        ("default", json!(42.0)),
        ("title", json!("t")),
        ("description", json!("d")),
        ("nullable", json!(true)),
        ("externalDocs", json!({"url": "x"})),
        ("x-kubernetes-preserve-unknown-fields", json!(true)),
        ("x-kubernetes-embedded-resource", json!(true)),
        ("x-kubernetes-int-or-string", json!(true)),
        ("x-kubernetes-list-map-keys", json!(["k"])),
        ("x-kubernetes-list-type", json!("atomic")),
        ("x-kubernetes-map-type", json!("atomic")),
        ("x-kubernetes-validations", json!([{"rule": "true"}])),
    ];
    assert_eq!(values.len(), FORBIDDEN_NESTED.len());
    for (key, value) in values {
        for junctor in ["allOf", "anyOf", "oneOf"] {
            let got = check(json!({"type": "object", junctor: [{key: value}]}));
            let want = format!("{junctor}[0].{key}: Forbidden:");
            assert!(
                got.iter().any(|g| g.starts_with(&want)),
                "{key} in {junctor}: {got:?}"
            );
        }
        let got = check(json!({"type": "object", "not": {key: value}}));
        assert!(
            got.iter()
                .any(|g| g.starts_with(&format!("not.{key}: Forbidden:"))),
            "{got:?}"
        );
    }
    // Zero values are no value: `nullable: false` under a junctor is fine.
    assert!(
        check(json!({"type": "object", "anyOf": [{"nullable": false, "minimum": 1}]})).is_empty()
    );
    assert_eq!(
        check(
            json!({"type": "object", "properties": {"metadata": {"type": "object"}},
            "anyOf": [{"properties": {"metadata": {"minProperties": 1}}}]})
        ),
        vec!["anyOf[0].properties[metadata]: Forbidden: must not be specified in a nested context"]
    );
}

/// `TestValidateStructuralMetadataInvariants`: root metadata is an
/// object that may restrict name and generateName, nothing else.
#[test]
fn root_metadata_restricts_only_name_and_generate_name() {
    let with_meta = |m: Value| check(json!({"type": "object", "properties": {"metadata": m}}));
    for t in ["array", "number", "integer", "boolean", "string"] {
        let got = with_meta(json!({"type": t}));
        assert!(
            got.contains(&format!(
                "properties[metadata].type: Invalid value: \"{t}\": must be object"
            )),
            "{got:?}"
        );
    }
    assert!(with_meta(json!({"type": "object"})).is_empty());
    assert!(with_meta(json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 63}, "generateName": {"type": "string"}}}))
    .is_empty());
    let forbidden = "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified";
    for field in ["namespace", "labels", "annotations", "uid", "finalizers"] {
        let got = with_meta(json!({"type": "object", "properties": {field: {"type": "string"}}}));
        assert_eq!(got, vec![forbidden], "{field}");
    }
    for extra in [
        json!({"description": "m"}),
        json!({"required": ["name"]}),
        json!({"nullable": true}),
    ] {
        let mut m = obj(json!({"type": "object"}));
        m.extend(obj(extra));
        assert_eq!(with_meta(Value::Object(m)), vec![forbidden]);
    }
}

/// `validateStructuralInvariants`: types, items, the root.
#[test]
fn structure_needs_types_items_and_an_object_root() {
    assert_eq!(
        check(
            json!({"properties": {"a": {}, "l": {"type": "array", "items": {}}, "m": {"type": "array"}}})
        ),
        vec![
            "properties[a].type: Required value: must not be empty for specified object fields",
            "properties[l].items.type: Required value: must not be empty for specified array items",
            "properties[m].items: Required value: must be specified",
            "type: Required value: must not be empty at the root",
        ]
    );
    assert_eq!(
        check(json!({"type": "array", "items": {"type": "string"}})),
        vec!["type: Invalid value: \"array\": must be object at the root"]
    );
    assert_eq!(
        check(json!({"type": "object", "additionalProperties": {"type": "string"}})),
        vec!["additionalProperties: Forbidden: must not be used at the root"]
    );
    // Type may be omitted with int-or-string or preserve-unknown-fields.
    assert!(check(json!({"type": "object", "properties": {
        "free": {"x-kubernetes-preserve-unknown-fields": true},
        "n": {"x-kubernetes-int-or-string": true}}}))
    .is_empty());
    assert_eq!(
        check(json!({"type": "object", "properties": {"n": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true}}})),
        vec!["properties[n].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"]
    );
    assert_eq!(
        check(json!({"type": "object", "properties": {"kind": {"type": "integer"}}})),
        vec!["properties[kind].type: Invalid value: \"integer\": must be string"]
    );
    assert_eq!(
        check(json!({"type": "object", "properties": {"e": {"x-kubernetes-embedded-resource": true}}})),
        vec![
            "properties[e].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            "properties[e].type: Required value: must be object if x-kubernetes-embedded-resource is true",
        ]
    );
    let got = check(
        json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "(unclosed"}}}),
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("properties[p].pattern: Invalid value: \"(unclosed\": must be a valid regular expression, but isn't:"), "{got:?}");
}

/// `ValidateCustomResourceDefinitionOpenAPISchema` on every node.
#[test]
fn additional_properties_beside_properties_is_refused() {
    let mutual = "properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive";
    for additional in [json!(false), json!({"type": "string"})] {
        let got = check(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "additionalProperties": additional, "properties": {"a": {"type": "string"}}}}}),
        );
        assert_eq!(got, vec![mutual]);
    }
    // A map, `true` beside properties, and `false` alone below the root are accepted.
    for node in [
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        json!({"type": "object", "additionalProperties": true, "properties": {"a": {"type": "string"}}}),
        json!({"type": "object", "additionalProperties": false}),
    ] {
        assert!(check(json!({"type": "object", "properties": {"m": node}})).is_empty());
    }
}

#[test]
fn unsupported_keywords_types_and_list_extensions_are_refused() {
    let got = check(json!({"type": "object", "properties": {
        "a": {"type": "null"},
        "b": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
        "c": {"type": "string", "$ref": "#/x"},
        "d": {"type": "array", "items": [{"type": "string"}]},
        "e": {"type": "object", "x-kubernetes-preserve-unknown-fields": false},
        "f": {"type": "string", "x-kubernetes-list-type": "set"},
        "g": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "map"},
    }}));
    for want in [
        "properties[a].type: Unsupported value: \"null\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
        "properties[a].type: Forbidden: type cannot be set to null, use nullable as an alternative",
        "properties[b].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        "properties[c].$ref: Forbidden: $ref is not supported",
        "properties[d].items: Forbidden: items must be a schema object and not an array",
        "properties[e].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined",
        "properties[f].type: Invalid value: \"string\": must be array if x-kubernetes-list-type is specified",
        "properties[g].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
    ] {
        assert!(got.iter().any(|g| g == want), "missing {want}\nin {got:#?}");
    }
    assert_eq!(
        check(json!({"type": "object", "nullable": true})),
        vec!["nullable: Forbidden: nullable cannot be true at the root"]
    );
}

/// `validation/defaults.go`: defaults are pruned, valid and off metadata.
#[test]
fn defaults_must_fit_their_schema() {
    let got = check(json!({"type": "object", "properties": {
        "r": {"type": "integer", "minimum": 1, "default": 0},
        "o": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"b": "x"}},
        "s": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
              "pattern": "^[0-9]+%$", "default": "ten"},
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "default": "n"}}},
    }}));
    assert_eq!(
        got,
        vec![
            "properties[metadata].properties[name].default: Forbidden: must not be set in top-level metadata",
            "properties[o].default: Invalid value: \"object\": must not have unknown fields",
            "properties[r].default: Invalid value: 0: properties[r].default in body should be greater than or equal to 1",
            "properties[s].default: Invalid value: \"ten\": properties[s].default in body should match '^[0-9]+%$'",
        ]
    );
}

#[test]
fn status_subresource_limits_the_root() {
    let schema = json!({"type": "object", "x-kubernetes-int-or-string": true, "properties": {}});
    let mut causes = vec![];
    check_crd_schema(&schema, "p", true, &mut causes);
    assert!(rendered(&causes)
        .iter()
        .any(|c| c.starts_with("p: Invalid value: \"object\": only [Description Type")));
    let mut causes = vec![];
    check_crd_schema(&schema, "p", false, &mut causes);
    assert!(causes.is_empty(), "{:?}", rendered(&causes));
}
