//! `x-kubernetes-validations`: CEL rules on a custom resource's schema,
//! compiled when the CRD is written and evaluated when an object is, as
//! `apiextensions-apiserver`'s `pkg/apiserver/schema/cel` does
//! (`Compile`, `Validator.Validate`), with update ratcheting
//! (`CRDValidationRatcheting`, on since 1.30): a value equal to its old
//! value is not judged again.
//!
//! The language is the `cel` crate's. Not modelled: the type checker (an
//! unknown field is a runtime error here, a compile error upstream), the
//! cost estimates and limits, and Kubernetes' CEL libraries (`isSorted`,
//! `quantity`, `url`, `format`, ...), which fail to evaluate here.

use crate::apiserver::errors::Cause;
use cel::{Context, Program};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Compiled rules kept per thread, by source text; bounded.
const CACHE_MAX: usize = 256;

thread_local! {
    static PROGRAMS: RefCell<HashMap<String, Arc<Program>>> = RefCell::new(HashMap::new());
}

/// `rule` compiled, or cel-go's `compilation failed: ERROR: <input>:L:C: ...`.
fn compile(rule: &str) -> Result<Arc<Program>, String> {
    if let Some(p) = PROGRAMS.with(|c| c.borrow().get(rule).cloned()) {
        return Ok(p);
    }
    let program = Arc::new(Program::compile(rule).map_err(|e| format!("compilation failed: {e}"))?);
    PROGRAMS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(rule.to_string(), program.clone());
    });
    Ok(program)
}

/// How field.Invalid prints an `apiextensions.ValidationRule` (Go's `%#v`).
fn rule_as_go(r: &Map<String, Value>) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:{:?}, OptionalOldSelf:(*bool)(nil)}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath")
    )
}

fn rules(node: &Value) -> Vec<&Map<String, Value>> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

/// The schema nodes below `node`, with the field path segment
/// `ValidateCustomResourceDefinitionOpenAPISchema` names them by.
fn schema_children(node: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        out.extend(props.iter().map(|(k, v)| (format!("properties[{k}]"), v)));
    }
    for key in ["items", "additionalProperties"] {
        if node.get(key).is_some_and(Value::is_object) {
            out.push((key.to_string(), &node[key]));
        }
    }
    out
}

/// Every rule (and messageExpression) of the schema at `path` compiles;
/// each one that does not is a cause at `...x-kubernetes-validations[i].rule`.
pub fn check_rules(node: &Value, path: &str, causes: &mut Vec<Cause>) {
    for (i, r) in rules(node).into_iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        for field in ["rule", "messageExpression"] {
            let Some(src) = r.get(field).and_then(Value::as_str) else {
                continue;
            };
            if let Err(e) = compile(src) {
                let msg = format!("Invalid value: {}: {e}", rule_as_go(r));
                causes.push(Cause::new(
                    format!("{at}.{field}"),
                    "FieldValueInvalid",
                    msg,
                ));
            }
        }
    }
    for (seg, child) in schema_children(node) {
        check_rules(child, &format!("{path}.{seg}"), causes);
    }
}

/// JSON as CEL sees it: whole numbers are `int`, others `double`.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<String, cel::Value> =
                m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

/// The message of a failed rule: its messageExpression's string, else its
/// message, else `failed rule: <rule>` (`ruleMessageOrDefault`).
fn failure_message(r: &Map<String, Value>, ctx: &Context) -> String {
    let s = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let expr = s("messageExpression");
    if let Some(Ok(p)) = (!expr.is_empty()).then(|| compile(&expr)) {
        if let Ok(cel::Value::String(m)) = p.execute(ctx) {
            if !m.trim().is_empty() {
                return m.to_string();
            }
        }
    }
    match s("message") {
        m if !m.is_empty() => m,
        _ => format!("failed rule: {}", s("rule")),
    }
}

/// The cause for a failed rule, of its `reason` (`fieldErrorForReason`).
fn failure(r: &Map<String, Value>, path: &str, v: &Value, msg: String) -> Cause {
    let sub = r.get("fieldPath").and_then(Value::as_str).unwrap_or("");
    let path = format!(
        "{path}{}",
        if sub.starts_with('.') || sub.is_empty() {
            sub.to_string()
        } else {
            format!(".{sub}")
        }
    );
    let path = if path.is_empty() {
        "<root>".to_string()
    } else {
        path
    };
    match r.get("reason").and_then(Value::as_str) {
        Some("FieldValueForbidden") => {
            Cause::new(path, "FieldValueForbidden", format!("Forbidden: {msg}"))
        }
        Some("FieldValueRequired") => {
            Cause::new(path, "FieldValueRequired", format!("Required value: {msg}"))
        }
        Some("FieldValueDuplicate") => Cause::new(
            path,
            "FieldValueDuplicate",
            format!("Duplicate value: {:?}", type_name(v)),
        ),
        _ => Cause::new(
            path,
            "FieldValueInvalid",
            format!("Invalid value: {:?}: {msg}", type_name(v)),
        ),
    }
}

/// Evaluate the rules on `v` at `path`, with `old` its correlated old
/// value on update. Transition rules (those naming `oldSelf`) run only
/// when there is an old value.
fn evaluate(node: &Value, v: &Value, old: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    for r in rules(node) {
        let src = r.get("rule").and_then(Value::as_str).unwrap_or("");
        let Ok(program) = compile(src) else {
            continue;
        };
        let transition = program.references().has_variable("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let mut ctx = Context::default();
        ctx.add_variable_from_value("self", to_cel(v));
        if let Some(o) = old {
            ctx.add_variable_from_value("oldSelf", to_cel(o));
        }
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                causes.push(failure(r, path, v, failure_message(r, &ctx)))
            }
            Ok(other) => causes.push(failure(
                r,
                path,
                v,
                format!("rule did not evaluate to a bool: {:?}", other.type_of()),
            )),
            Err(e) => causes.push(failure(r, path, v, e.to_string())),
        }
    }
}

/// Every rule in `schema` on `v` and below, at `path`. With `old` (an
/// update), a value equal to its correlated old value is ratcheted: not
/// judged at all. Values correlate through properties, map values and
/// the keys of `x-kubernetes-list-type: map` lists.
pub fn validate(
    v: &Value,
    old: Option<&Value>,
    schema: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    if v.is_null() || old == Some(v) {
        return;
    }
    evaluate(schema, v, old, path, causes);
    let at = |seg: &str| {
        if path.is_empty() {
            seg.to_string()
        } else {
            format!("{path}.{seg}")
        }
    };
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            for (k, child) in m {
                let Some(s) = props.and_then(|p| p.get(k)).or(extra) else {
                    continue;
                };
                let o = old.and_then(|o| o.get(k));
                validate(child, o, s, &at(k), causes);
            }
        }
        Value::Array(items) => {
            let Some(s) = schema.get("items").filter(|s| s.is_object()) else {
                return;
            };
            let keys: Vec<&str> = match schema["x-kubernetes-list-type"].as_str() {
                Some("map") => schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            for (i, item) in items.iter().enumerate() {
                let o = correlated_item(old, &keys, item);
                validate(item, o, s, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

/// The old item of a list-type map with the same keys (none for other lists).
fn correlated_item<'a>(old: Option<&'a Value>, keys: &[&str], item: &Value) -> Option<&'a Value> {
    if keys.is_empty() {
        return None;
    }
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}
