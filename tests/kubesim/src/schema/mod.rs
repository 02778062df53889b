//! Structural-schema handling for custom resources, in the order the real
//! server applies it: prune unknown fields (or refuse them under strict field
//! validation), apply defaults, then validate, the CRD's CEL rules
//! (`x-kubernetes-validations`) among them ([`cel`]).
//! `structural` holds the rules a CRD's schema must meet before the CRD is
//! accepted.

pub mod cel;
pub mod structural;

use crate::apiserver::errors::{show, Cause};
use regex::Regex;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::HashMap;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

fn int_or_string(schema: &Value) -> bool {
    schema["x-kubernetes-int-or-string"].as_bool() == Some(true)
}

/// Drop fields the schema does not declare, recording their paths, and drop
/// nulls in fields that are not `nullable`.
pub fn prune(obj: &mut Value, schema: &Value, path: &str, root: bool, unknown: &mut Vec<String>) {
    if int_or_string(schema) {
        return;
    }
    match obj {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                if root && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                let child_schema = props.and_then(|p| p.get(&k)).or(additional);
                match child_schema {
                    Some(cs) => {
                        let nullable = cs["nullable"].as_bool() == Some(true);
                        if map.get(&k).map(Value::is_null).unwrap_or(false) && !nullable {
                            map.remove(&k);
                            continue;
                        }
                        if let Some(child) = map.get_mut(&k) {
                            prune(child, cs, &child_path, false, unknown);
                        }
                    }
                    None if preserves(schema) => {}
                    None => {
                        map.remove(&k);
                        unknown.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, is, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Fill in `default`s for absent properties of objects that are present.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    match obj {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if !map.contains_key(k) {
                        if let Some(d) = ps.get("default") {
                            map.insert(k.clone(), d.clone());
                        }
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_defaults(child, ps);
                    }
                }
            }
            if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (_, v) in map.iter_mut() {
                    apply_defaults(v, add);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for item in items {
                    apply_defaults(item, is);
                }
            }
        }
        _ => {}
    }
}

thread_local! {
    static PATTERNS: RefCell<HashMap<String, Option<Regex>>> = RefCell::new(HashMap::new());
}

fn pattern_matches(pattern: &str, s: &str) -> bool {
    PATTERNS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let re = cache
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).ok());
        re.as_ref().map(|r| r.is_match(s)).unwrap_or(true)
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validate `v` at `path` against `schema`, collecting every violation.
pub fn validate(v: &Value, schema: &Value, path: &str, root: bool, causes: &mut Vec<Cause>) {
    if v.is_null() {
        return;
    }
    let shown_path = if path.is_empty() { "<root>" } else { path };
    if int_or_string(schema) && !validate_int_or_string(v, schema, path, shown_path, causes) {
        return;
    }
    if !validate_type(v, schema, path, shown_path, causes) {
        return;
    }
    validate_enum(v, schema, path, causes);
    match v {
        Value::String(s) => validate_string(v, s, schema, path, shown_path, causes),
        Value::Number(n) => validate_number(v, n, schema, path, shown_path, causes),
        Value::Array(items) => validate_array(v, items, schema, path, shown_path, causes),
        Value::Object(map) => validate_object(map, schema, path, root, causes),
        _ => {}
    }
}

/// An `x-kubernetes-int-or-string` value: a string or an integer, checked
/// against the `anyOf` branch of its type. False when it is neither (then
/// nothing else is checked).
fn validate_int_or_string(
    v: &Value,
    schema: &Value,
    path: &str,
    shown_path: &str,
    causes: &mut Vec<Cause>,
) -> bool {
    let ty = type_name(v);
    if ty != "string" && ty != "integer" {
        causes.push(Cause::invalid(
            path,
            &Value::from(ty),
            &format!("{shown_path} in body must be of type integer,string: {ty:?}"),
        ));
        return false;
    }
    // The usual int-or-string form: `anyOf: [{type: integer, ...}, {type: string, ...}]`.
    for branch in schema
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if branch["type"] == ty {
            validate(v, branch, path, false, causes);
        }
    }
    // Value validation beside the bare `anyOf` (the structural form)
    // follows: `pattern` binds strings only, bounds bind numbers only.
    true
}

/// The schema's `type` (an integer is a number too). False on a mismatch,
/// which stops the checks of this value.
fn validate_type(
    v: &Value,
    schema: &Value,
    path: &str,
    shown_path: &str,
    causes: &mut Vec<Cause>,
) -> bool {
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        let ok = got == want || (want == "number" && got == "integer");
        if !ok {
            causes.push(Cause::invalid(
                path,
                &Value::from(got),
                &format!("{shown_path} in body must be of type {want}: {got:?}"),
            ));
            return false;
        }
    }
    true
}

fn validate_enum(v: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(show).collect();
            causes.push(Cause::new(
                path,
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {}: supported values: {}",
                    show(v),
                    list.join(", ")
                ),
            ));
        }
    }
}

/// `maxLength`, `minLength` (in characters) and `pattern`.
fn validate_string(
    v: &Value,
    s: &str,
    schema: &Value,
    path: &str,
    shown_path: &str,
    causes: &mut Vec<Cause>,
) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if len > max {
            causes.push(Cause::new(
                path,
                "FieldValueTooLong",
                format!("Too long: may not be more than {max} bytes"),
            ));
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if len < min {
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{shown_path} in body should be at least {min} chars long"),
            ));
        }
    }
    if schema["format"] == "date-time" && !is_date_time(s) {
        causes.push(Cause::invalid(
            path,
            v,
            &format!("{shown_path} in body must be of type date-time: {s:?}"),
        ));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        if !pattern_matches(p, s) {
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{shown_path} in body should match '{p}'"),
            ));
        }
    }
}

/// `minimum` and `maximum`, exclusive or not.
fn validate_number(
    v: &Value,
    n: &serde_json::Number,
    schema: &Value,
    path: &str,
    shown_path: &str,
    causes: &mut Vec<Cause>,
) {
    let x = n.as_f64().unwrap_or(0.0);
    let excl_min = schema["exclusiveMinimum"].as_bool() == Some(true);
    let excl_max = schema["exclusiveMaximum"].as_bool() == Some(true);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if x < min || (excl_min && x == min) {
            let rel = if excl_min {
                "greater than"
            } else {
                "greater than or equal to"
            };
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{shown_path} in body should be {rel} {}", schema["minimum"]),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if x > max || (excl_max && x == max) {
            let rel = if excl_max {
                "less than"
            } else {
                "less than or equal to"
            };
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{shown_path} in body should be {rel} {}", schema["maximum"]),
            ));
        }
    }
}

/// `maxItems`, `minItems`, then every item against `items`.
fn validate_array(
    v: &Value,
    items: &[Value],
    schema: &Value,
    path: &str,
    shown_path: &str,
    causes: &mut Vec<Cause>,
) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if items.len() as u64 > max {
            causes.push(Cause::new(
                path,
                "FieldValueTooMany",
                format!("Too many: {}: must have at most {max} items", items.len()),
            ));
        }
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if (items.len() as u64) < min {
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{shown_path} in body should have at least {min} items"),
            ));
        }
    }
    if let Some(is) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate(item, is, &format!("{path}[{i}]"), false, causes);
        }
    }
    validate_list_type(items, schema, path, causes);
}

/// `format: date-time` as kube-openapi's `strfmt.IsDateTime` checks it: a
/// date (`2006-01-02`), a `T` (either case), then
/// `HH:MM:SS[.fraction](Z|±HH:MM)` with hours to 23 and minutes and
/// seconds to 59.
pub fn is_date_time(s: &str) -> bool {
    static TIME: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if s.len() < 4 || parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let re = TIME.get_or_init(|| {
        regex::Regex::new(
            r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
        )
        .expect("a fixed pattern")
    });
    re.captures(parts[1])
        .is_some_and(|m| &m[1] <= "23" && &m[2] <= "59" && &m[3] <= "59")
}

/// `time.Parse("2006-01-02", s)`: a real calendar day.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// `x-kubernetes-list-type` `set` and `map` as `ValidateListSetsAndMaps`
/// (apiextensions-apiserver `pkg/apiserver/schema/listtype`) checks them:
/// the second appearance of an item (a set) or of a key (a map, keyed by
/// `x-kubernetes-list-map-keys`) is a Duplicate value; an item of a map that
/// is not an object is Invalid.
fn validate_list_type(items: &[Value], schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let keys: Vec<Value> = match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => items.to_vec(),
        Some("map") => {
            if let Some(i) = items.iter().position(|x| !x.is_null() && !x.is_object()) {
                let why = "must be an object for an array of list-type map";
                causes.push(Cause::invalid(&format!("{path}[{i}]"), &items[i], why));
                return;
            }
            let names =
                crate::registry::resources::str_list(schema.get("x-kubernetes-list-map-keys"));
            items
                .iter()
                .map(|x| {
                    let key = names
                        .iter()
                        .filter_map(|k| Some((k.clone(), x.get(k)?.clone())));
                    Value::Object(key.collect())
                })
                .collect()
        }
        _ => return,
    };
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        let n = seen.entry(k.to_string()).or_insert(0);
        *n += 1;
        if *n == 2 {
            let msg = format!("Duplicate value: {}", go_syntax(k));
            causes.push(Cause::new(
                format!("{path}[{i}]"),
                "FieldValueDuplicate",
                msg,
            ));
        }
    }
}

/// A JSON value as Go's `%#v` prints its unstructured form (how
/// `field.Duplicate` shows the value): `map[string]interface {}{"k":v}`
/// with sorted keys, `[]interface {}{...}`, quoted strings.
fn go_syntax(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = (entries.iter())
                .map(|(k, v)| format!("{:?}:{}", k, go_syntax(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Array(a) => {
            let inner: Vec<String> = a.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::String(s) => format!("{s:?}"),
        Value::Null => "interface {}(nil)".into(),
        other => other.to_string(),
    }
}

fn validate_object(
    map: &Map<String, Value>,
    schema: &Value,
    path: &str,
    root: bool,
    causes: &mut Vec<Cause>,
) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for k in req.iter().filter_map(Value::as_str) {
            if map.get(k).map(Value::is_null).unwrap_or(true) {
                causes.push(Cause::required(&join(path, k)));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, child) in map {
        if root && (k == "apiVersion" || k == "kind" || k == "metadata") {
            continue;
        }
        if let Some(cs) = props.and_then(|p| p.get(k)).or(additional) {
            validate(child, cs, &join(path, k), false, causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["tier", "replicas"], "properties": {
                "tier": {"type": "string", "enum": ["Small", "Large"]},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                "family": {"type": "string", "pattern": "^[A-Za-z]+$", "maxLength": 5},
                "surge": {"x-kubernetes-int-or-string": true, "default": 1, "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}]},
                "opts": {"type": "object", "default": {}, "properties": {"deadline": {"type": "integer", "default": 600}}}
            }},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }})
    }

    #[test]
    fn prunes_unknown_fields_and_reports_paths() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"tier": "Small", "bogus": 1, "opts": {"x": 2}}, "status": {"free": true}});
        let mut unknown = vec![];
        prune(&mut o, &schema(), "", true, &mut unknown);
        assert_eq!(unknown, vec!["spec.bogus", "spec.opts.x"]);
        assert_eq!(o["status"]["free"], true);
        assert_eq!(o["metadata"]["name"], "a");
    }

    #[test]
    fn defaults_nested() {
        let mut o = json!({"spec": {"tier": "Small", "replicas": 1}});
        apply_defaults(&mut o, &schema());
        assert_eq!(o["spec"]["surge"], 1);
        assert_eq!(o["spec"]["opts"]["deadline"], 600);
    }

    #[test]
    fn validation_messages_name_the_field() {
        let o = json!({"spec": {"tier": "Huge", "replicas": true, "family": "9x", "surge": 1.5}});
        let mut causes = vec![];
        validate(&o, &schema(), "", true, &mut causes);
        let text: Vec<String> = causes.iter().map(Cause::render).collect();
        let all = text.join("\n");
        assert!(
            all.contains("spec.tier: Unsupported value: \"Huge\""),
            "{all}"
        );
        assert!(
            all.contains("spec.replicas: Invalid value: \"boolean\""),
            "{all}"
        );
        assert!(
            all.contains("spec.family: Invalid value: \"9x\": spec.family in body should match"),
            "{all}"
        );
        assert!(all.contains("spec.surge"), "{all}");
        let mut causes = vec![];
        validate(
            &json!({"spec": {"tier": "Small", "replicas": 1, "surge": "x%"}}),
            &schema(),
            "",
            true,
            &mut causes,
        );
        assert!(
            causes[0]
                .render()
                .contains("spec.surge in body should match"),
            "{causes:?}"
        );
        let mut causes = vec![];
        validate(
            &json!({"spec": {"tier": "Small", "replicas": 1, "surge": -1}}),
            &schema(),
            "",
            true,
            &mut causes,
        );
        assert!(
            causes[0].render().contains("greater than or equal to 0"),
            "{causes:?}"
        );
        let mut causes = vec![];
        validate(
            &json!({"spec": {"tier": "Small"}}),
            &schema(),
            "",
            true,
            &mut causes,
        );
        assert_eq!(causes[0].render(), "spec.replicas: Required value");
        let mut causes = vec![];
        validate(
            &json!({"spec": {"tier": "Small", "replicas": 11, "family": "abcdef"}}),
            &schema(),
            "",
            true,
            &mut causes,
        );
        assert_eq!(causes.len(), 2, "{causes:?}");
    }
}
