//! The rules kube-apiserver applies to a CRD's `openAPIV3Schema` before it
//! accepts the CRD: a v1 CRD must be a *structural* schema.
//!
//! Mirrors apiextensions-apiserver `pkg/apiserver/schema/validation.go`
//! (`validateStructuralInvariants`, `validateValueValidation`,
//! `validateNestedValueValidation`, `isIntOrStringAnyOfPattern`,
//! `isIntOrStringAllOfPattern`, `validateStructuralMetadataInvariants`),
//! `complete.go` (`validateStructuralCompleteness`) and the schema checks of
//! `pkg/apis/apiextensions/validation/validation.go` that a hand-written CRD
//! can trip. Works on the JSON as sent, so a key counts as "set" when it is
//! present with a non-zero value, as the Go structs see it after decoding.

use crate::apiserver::errors::Cause;
use serde_json::{Map, Value};

/// Where a schema node stands: the messages for a missing `type` differ.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Level {
    Root,
    Item,
    Field,
}

/// Keys forbidden under a junctor, each with the message the real server
/// gives (`validateNestedValueValidation`).
const FORBIDDEN_NESTED: &[(&str, &str)] = &[
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    (
        "x-kubernetes-preserve-unknown-fields",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-embedded-resource",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-int-or-string",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-list-map-keys",
        "must be empty to be structural",
    ),
    (
        "x-kubernetes-list-type",
        "must be undefined to be structural",
    ),
    (
        "x-kubernetes-map-type",
        "must be undefined to be structural",
    ),
    ("x-kubernetes-validations", "must be empty to be structural"),
];

/// Every rule below, for the schema of one CRD version at `path`
/// (`spec.validation.openAPIV3Schema` when every version has the same
/// schema, as for a single version; else `spec.versions[i].schema.openAPIV3Schema`).
/// Structural causes come sorted by their text, as `ValidateStructural`
/// sorts them; defaults are judged only once the schema is structural.
pub fn check_crd_schema(schema: &Value, path: &str, with_status: bool, causes: &mut Vec<Cause>) {
    let Some(root) = schema.as_object() else {
        causes.push(Cause::required_because(path, "schemas are required"));
        return;
    };
    root_rules(root, path, with_status, causes);
    let mut structural = Vec::new();
    invariants(root, Level::Root, path, &mut structural);
    completeness(root, root, path, path, &mut structural);
    structural.sort_by_key(Cause::render);
    if structural.is_empty() {
        meta_defaults(root, path, &mut structural);
        defaults(root, path, &mut structural);
    }
    causes.extend(structural);
    openapi_rules(root, path, causes);
}

/// A field path below `path`, as `field.Path` prints it.
fn at(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_string()
    } else {
        format!("{path}.{seg}")
    }
}

/// Present with a value other than Go's zero value for its field.
fn set(node: &Map<String, Value>, key: &str) -> bool {
    match node.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty() || key == "x-kubernetes-validations",
        Some(_) => true,
    }
}

fn flag(node: &Map<String, Value>, key: &str) -> bool {
    node.get(key).and_then(Value::as_bool) == Some(true)
}

fn type_of(node: &Map<String, Value>) -> &str {
    node.get("type").and_then(Value::as_str).unwrap_or("")
}

fn children<'a>(node: &'a Map<String, Value>, key: &str) -> Vec<(String, &'a Map<String, Value>)> {
    node.get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_object().map(|o| (k.clone(), o)))
                .collect()
        })
        .unwrap_or_default()
}

fn list<'a>(node: &'a Map<String, Value>, key: &str) -> Vec<&'a Map<String, Value>> {
    node.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

/// `anyOf: [{type: integer}, {type: string}]` and nothing else in either
/// branch: the one place a `type` may stand under a junctor.
fn is_int_or_string_any_of(node: &Map<String, Value>) -> bool {
    let branches = list(node, "anyOf");
    branches.len() == 2
        && node.get("anyOf").and_then(Value::as_array).map(Vec::len) == Some(2)
        && branches[0].len() == 1
        && branches[1].len() == 1
        && type_of(branches[0]) == "integer"
        && type_of(branches[1]) == "string"
}

/// `allOf: [{anyOf: [{type: integer}, {type: string}]}, ...]`.
fn is_int_or_string_all_of(node: &Map<String, Value>) -> bool {
    list(node, "allOf")
        .first()
        .is_some_and(|first| is_int_or_string_any_of(first))
}

/// `validateStructuralInvariants` for one structural node and below.
fn invariants(node: &Map<String, Value>, lvl: Level, path: &str, causes: &mut Vec<Cause>) {
    let ty = type_of(node);
    if ty == "array" && !node.contains_key("items") {
        causes.push(Cause::required_because(
            &at(path, "items"),
            "must be specified",
        ));
    }
    if let Some(items) = node.get("items").and_then(Value::as_object) {
        invariants(items, Level::Item, &at(path, "items"), causes);
    }
    for (k, child) in children(node, "properties") {
        invariants(
            child,
            Level::Field,
            &at(path, &format!("properties[{k}]")),
            causes,
        );
    }
    if let Some(additional) = node.get("additionalProperties") {
        if lvl == Level::Root {
            causes.push(Cause::forbidden(
                &at(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(a) = additional.as_object() {
            invariants(a, Level::Field, &at(path, "additionalProperties"), causes);
        }
    }
    extensions(node, path, causes);
    value_validation(
        node,
        is_int_or_string_any_of(node),
        is_int_or_string_all_of(node),
        path,
        causes,
    );
    type_rules(node, lvl, path, causes);
    let check_metadata = lvl == Level::Root || flag(node, "x-kubernetes-embedded-resource");
    for key in ["kind", "apiVersion"] {
        if let Some(p) = children(node, "properties")
            .into_iter()
            .find(|(k, _)| k == key)
        {
            if check_metadata && type_of(p.1) != "string" {
                causes.push(Cause::invalid(
                    &at(path, &format!("properties[{key}].type")),
                    &Value::from(type_of(p.1)),
                    "must be string",
                ));
            }
        }
    }
    if let Some((_, metadata)) = children(node, "properties")
        .into_iter()
        .find(|(k, _)| k == "metadata")
    {
        let p = at(path, "properties[metadata]");
        metadata_invariants(metadata, check_metadata, lvl, &p, causes);
    }
    if flag(node, "x-kubernetes-embedded-resource")
        && !flag(node, "x-kubernetes-preserve-unknown-fields")
        && children(node, "properties").is_empty()
    {
        causes.push(Cause::required_because(
            &at(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// `validateExtensions`: int-or-string excludes the other two.
fn extensions(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    if !flag(node, "x-kubernetes-int-or-string") {
        return;
    }
    for key in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
    ] {
        if flag(node, key) {
            causes.push(Cause::invalid(
                &at(path, key),
                &Value::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
    }
}

/// The `type` rules of `validateStructuralInvariants`.
fn type_rules(node: &Map<String, Value>, lvl: Level, path: &str, causes: &mut Vec<Cause>) {
    let ty = type_of(node);
    let embedded = flag(node, "x-kubernetes-embedded-resource");
    let type_path = at(path, "type");
    if embedded && ty != "object" {
        let why = "must be object if x-kubernetes-embedded-resource is true";
        causes.push(if ty.is_empty() {
            Cause::required_because(&type_path, why)
        } else {
            Cause::invalid(&type_path, &Value::from(ty), why)
        });
    } else if ty.is_empty()
        && !flag(node, "x-kubernetes-int-or-string")
        && !flag(node, "x-kubernetes-preserve-unknown-fields")
    {
        let why = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        causes.push(Cause::required_because(&type_path, why));
    }
    if embedded && node.contains_key("additionalProperties") {
        causes.push(Cause::forbidden(
            &at(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        causes.push(Cause::invalid(
            &type_path,
            &Value::from(ty),
            "must be object at the root",
        ));
    }
}

/// `validateStructuralMetadataInvariants`: at the root, `metadata` may only
/// restrict `name` and `generateName`.
fn metadata_invariants(
    m: &Map<String, Value>,
    check_metadata: bool,
    lvl: Level,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    if check_metadata && type_of(m) != "object" {
        causes.push(Cause::invalid(
            &at(path, "type"),
            &Value::from(type_of(m)),
            "must be object",
        ));
    }
    if lvl != Level::Root {
        return;
    }
    let props: Vec<String> = children(m, "properties")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let only_names = props.iter().all(|k| k == "name" || k == "generateName");
    let other = m.keys().any(|k| match k.as_str() {
        "type" | "default" => false,
        "properties" => !only_names,
        _ => set(m, k),
    });
    if other {
        causes.push(Cause::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// `validateValueValidation`: every junctor branch is nested value
/// validation, except the int-or-string `anyOf` patterns.
fn value_validation(
    node: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    if !skip_any_of {
        for (i, b) in list(node, "anyOf").into_iter().enumerate() {
            nested(b, false, &at(path, &format!("anyOf[{i}]")), causes);
        }
    }
    for (i, b) in list(node, "allOf").into_iter().enumerate() {
        let skip = skip_first_all_of_any_of && i == 0;
        nested(b, skip, &at(path, &format!("allOf[{i}]")), causes);
    }
    for (i, b) in list(node, "oneOf").into_iter().enumerate() {
        nested(b, false, &at(path, &format!("oneOf[{i}]")), causes);
    }
    if let Some(not) = node.get("not").and_then(Value::as_object) {
        nested(not, false, &at(path, "not"), causes);
    }
    if let Some(p) = node.get("pattern").and_then(Value::as_str) {
        if let Err(e) = regex::Regex::new(p) {
            let first = e
                .to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string();
            causes.push(Cause::invalid(
                &at(path, "pattern"),
                &Value::from(p),
                &format!("must be a valid regular expression, but isn't: {first}"),
            ));
        }
    }
}

/// `validateNestedValueValidation`: a schema under a junctor.
fn nested(v: &Map<String, Value>, skip_any_of: bool, path: &str, causes: &mut Vec<Cause>) {
    value_validation(v, skip_any_of, false, path, causes);
    if let Some(items) = v.get("items").and_then(Value::as_object) {
        nested(items, false, &at(path, "items"), causes);
    }
    for (k, child) in children(v, "properties") {
        nested(child, false, &at(path, &format!("properties[{k}]")), causes);
    }
    for (key, why) in FORBIDDEN_NESTED {
        if set(v, key) {
            causes.push(Cause::forbidden(&at(path, key), why));
        }
    }
    if v.get("properties")
        .and_then(|p| p.get("metadata"))
        .is_some()
    {
        causes.push(Cause::forbidden(
            &at(path, "properties[metadata]"),
            "must not be specified in a nested context",
        ));
    }
}

/// `validateStructuralCompleteness`: whatever a junctor names (a property,
/// `items`) must also be specified in the structure beside it. Upstream
/// runs it from the root's value validation, following the structure down.
fn completeness(
    v: &Map<String, Value>,
    s: &Map<String, Value>,
    s_path: &str,
    v_path: &str,
    causes: &mut Vec<Cause>,
) {
    for (key, many) in [
        ("not", false),
        ("allOf", true),
        ("anyOf", true),
        ("oneOf", true),
    ] {
        let branches: Vec<(String, &Map<String, Value>)> = if many {
            list(v, key)
                .into_iter()
                .enumerate()
                .map(|(i, b)| (at(v_path, &format!("{key}[{i}]")), b))
                .collect()
        } else {
            v.get(key)
                .and_then(Value::as_object)
                .map(|b| vec![(at(v_path, key), b)])
                .unwrap_or_default()
        };
        for (bp, b) in branches {
            nested_completeness(b, Some(s), s_path, &bp, causes);
        }
    }
}

fn nested_completeness(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
    causes: &mut Vec<Cause>,
) {
    let Some(s) = s else {
        causes.push(Cause::required_because(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness(v, s, s_path, v_path, causes);
    if let Some(items) = v.get("items").and_then(Value::as_object) {
        let s_items = s.get("items").and_then(Value::as_object);
        let (sp, vp) = (at(s_path, "items"), at(v_path, "items"));
        nested_completeness(items, s_items, &sp, &vp, causes);
    }
    let structure = children(s, "properties");
    for (k, child) in children(v, "properties") {
        let s_child = structure.iter().find(|(sk, _)| *sk == k).map(|(_, c)| *c);
        let sp = at(s_path, &format!("properties[{k}]"));
        let vp = at(v_path, &format!("properties[{k}]"));
        nested_completeness(child, s_child, &sp, &vp, causes);
    }
}

/// The six types a CRD schema may name.
const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// Keywords of JSON Schema that a CRD may not use, with the server's words.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("id", "id is not supported"),
    ("$ref", "$ref is not supported"),
    ("definitions", "definitions is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("additionalItems", "additionalItems is not supported"),
];

/// `ValidateCustomResourceDefinitionOpenAPISchema`: the checks applied to
/// every node, junctors included.
fn openapi_rules(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    node_rules(node, path, causes);
    list_and_map_rules(node, path, causes);
    let has_props = node
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    let additional = node.get("additionalProperties");
    if has_props
        && matches!(
            additional,
            Some(Value::Bool(false)) | Some(Value::Object(_))
        )
    {
        causes.push(Cause::forbidden(
            &at(path, "additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    for (k, child) in children(node, "properties") {
        openapi_rules(child, &at(path, &format!("properties[{k}]")), causes);
    }
    if let Some(a) = additional.and_then(Value::as_object) {
        openapi_rules(a, &at(path, "additionalProperties"), causes);
    }
    if let Some(items) = node.get("items").and_then(Value::as_object) {
        openapi_rules(items, &at(path, "items"), causes);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, b) in list(node, key).into_iter().enumerate() {
            openapi_rules(b, &at(path, &format!("{key}[{i}]")), causes);
        }
    }
    if let Some(not) = node.get("not").and_then(Value::as_object) {
        openapi_rules(not, &at(path, "not"), causes);
    }
}

/// Type names, unsupported keywords, `uniqueItems`, array `items`.
fn node_rules(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let ty = type_of(node);
    if !ty.is_empty() && !TYPES.contains(&ty) {
        let supported: Vec<String> = TYPES.iter().map(|t| format!("{t:?}")).collect();
        causes.push(Cause::new(
            at(path, "type"),
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {ty:?}: supported values: {}",
                supported.join(", ")
            ),
        ));
        if ty == "null" {
            causes.push(Cause::forbidden(
                &at(path, "type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
    }
    if flag(node, "uniqueItems") {
        causes.push(Cause::forbidden(
            &at(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    for (key, why) in UNSUPPORTED {
        if node.contains_key(*key) {
            causes.push(Cause::forbidden(&at(path, key), why));
        }
    }
    if node.get("items").is_some_and(Value::is_array) {
        causes.push(Cause::forbidden(
            &at(path, "items"),
            "items must be a schema object and not an array",
        ));
    }
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        causes.push(Cause::invalid(
            &at(path, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        ));
    }
}

/// `x-kubernetes-list-type` and `x-kubernetes-map-type` need the matching
/// type and one of their values; map lists need keys.
fn list_and_map_rules(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let ty = type_of(node);
    let rules = [
        (
            "x-kubernetes-map-type",
            "object",
            &["atomic", "granular"][..],
        ),
        (
            "x-kubernetes-list-type",
            "array",
            &["atomic", "set", "map"][..],
        ),
    ];
    for (key, want, values) in rules {
        let Some(v) = node.get(key).and_then(Value::as_str) else {
            continue;
        };
        let why = format!("must be {want} if {key} is specified");
        if ty.is_empty() {
            causes.push(Cause::required_because(&at(path, "type"), &why));
        } else if ty != want {
            causes.push(Cause::invalid(&at(path, "type"), &Value::from(ty), &why));
        }
        if !values.contains(&v) {
            let supported: Vec<String> = values.iter().map(|t| format!("{t:?}")).collect();
            causes.push(Cause::new(
                at(path, key),
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {v:?}: supported values: {}",
                    supported.join(", ")
                ),
            ));
        }
    }
    let list_type = node.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys = node
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array);
    if keys.is_some_and(|k| !k.is_empty()) && list_type != Some("map") {
        let why = "must be map if x-kubernetes-list-map-keys is non-empty";
        causes.push(match list_type {
            None => Cause::required_because(&at(path, "x-kubernetes-list-type"), why),
            Some(t) => Cause::invalid(&at(path, "x-kubernetes-list-type"), &Value::from(t), why),
        });
    }
    if list_type == Some("map") && keys.is_none_or(|k| k.is_empty()) {
        causes.push(Cause::required_because(
            &at(path, "x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
}

/// `validateCustomResourceDefinitionValidation`'s root-only rules.
fn root_rules(root: &Map<String, Value>, path: &str, with_status: bool, causes: &mut Vec<Cause>) {
    if flag(root, "nullable") {
        causes.push(Cause::forbidden(
            &at(path, "nullable"),
            "nullable cannot be true at the root",
        ));
    }
    if with_status {
        let allowed = [
            "description",
            "type",
            "format",
            "title",
            "maximum",
            "exclusiveMaximum",
            "minimum",
            "exclusiveMinimum",
            "maxLength",
            "minLength",
            "pattern",
            "maxItems",
            "minItems",
            "uniqueItems",
            "multipleOf",
            "required",
            "items",
            "properties",
            "externalDocs",
            "example",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-validations",
        ];
        if root
            .keys()
            .any(|k| !allowed.contains(&k.as_str()) && set(root, k))
        {
            causes.push(Cause::invalid(
                path,
                &Value::Object(root.clone()),
                "only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled",
            ));
        }
    }
}

/// `validation/defaults.go`: a default sits outside resource metadata, has no
/// field its schema would prune, and passes its own schema node.
fn defaults(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    if let Some(d) = node.get("default") {
        let schema = Value::Object(node.clone());
        let mut pruned = d.clone();
        let mut unknown = vec![];
        crate::schema::prune(&mut pruned, &schema, "", false, &mut unknown);
        if !unknown.is_empty() {
            causes.push(Cause::invalid(
                &at(path, "default"),
                d,
                "must not have unknown fields",
            ));
        }
        crate::schema::apply_defaults(&mut pruned, &schema);
        crate::schema::validate(&pruned, &schema, &at(path, "default"), false, causes);
    }
    for (k, child) in children(node, "properties") {
        defaults(child, &at(path, &format!("properties[{k}]")), causes);
    }
    if let Some(items) = node.get("items").and_then(Value::as_object) {
        defaults(items, &at(path, "items"), causes);
    }
}

/// No default anywhere under the root's metadata, kind or apiVersion.
fn meta_defaults(root: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    fn walk(node: &Map<String, Value>, path: &str, top: &str, causes: &mut Vec<Cause>) {
        if node.contains_key("default") {
            causes.push(Cause::forbidden(
                &at(path, "default"),
                &format!("must not be set in top-level {top}"),
            ));
        }
        for (k, child) in children(node, "properties") {
            walk(child, &at(path, &format!("properties[{k}]")), top, causes);
        }
    }
    for (k, child) in children(root, "properties") {
        if ["metadata", "kind", "apiVersion"].contains(&k.as_str()) {
            walk(child, &at(path, &format!("properties[{k}]")), &k, causes);
        }
    }
}

#[cfg(test)]
mod tests;
