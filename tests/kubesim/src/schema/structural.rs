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
mod tests {
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
        let crd: Value = serde_json::from_str(include_str!("../../../../manifests/base/crd.json"))
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
            check(json!({"type": "object", "anyOf": [{"nullable": false, "minimum": 1}]}))
                .is_empty()
        );
        assert_eq!(
            check(json!({"type": "object", "properties": {"metadata": {"type": "object"}},
                "anyOf": [{"properties": {"metadata": {"minProperties": 1}}}]})),
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
            let got =
                with_meta(json!({"type": "object", "properties": {field: {"type": "string"}}}));
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
            check(json!({"properties": {"a": {}, "l": {"type": "array", "items": {}}, "m": {"type": "array"}}})),
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
        let schema =
            json!({"type": "object", "x-kubernetes-int-or-string": true, "properties": {}});
        let mut causes = vec![];
        check_crd_schema(&schema, "p", true, &mut causes);
        assert!(rendered(&causes)
            .iter()
            .any(|c| c.starts_with("p: Invalid value: \"object\": only [Description Type")));
        let mut causes = vec![];
        check_crd_schema(&schema, "p", false, &mut causes);
        assert!(causes.is_empty(), "{:?}", rendered(&causes));
    }
}
