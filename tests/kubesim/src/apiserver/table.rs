//! `as=Table` responses (what `kubectl get` prints) and the small JSONPath
//! subset CRD printer columns use.

use crate::apiserver::time::{age, parse_rfc3339};
use crate::registry::resources::{PrinterColumn, ResourceDef};
use serde_json::{json, Value};
use std::time::SystemTime;

/// Evaluate `.a.b`, `.a[0]` and `.a[?(@.k=="v")].b`.
pub fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("[?(@.") {
            let close = r.find(")]")?;
            let cond = &r[..close];
            let (k, want) = cond.split_once("==")?;
            let want = want.trim().trim_matches(['"', '\'']);
            cur = cur
                .as_array()?
                .iter()
                .find(|e| e.get(k.trim()).and_then(Value::as_str) == Some(want))?;
            rest = &r[close + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let close = r.find(']')?;
            let i: usize = r[..close].parse().ok()?;
            cur = cur.get(i)?;
            rest = &r[close + 1..];
        } else {
            return None;
        }
    }
    Some(cur)
}

fn cell_string(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(other) => json!(other.to_string()),
    }
}

fn age_of(obj: &Value, now: SystemTime) -> String {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .map(|t| age(t, now))
        .unwrap_or_else(|| "<unknown>".into())
}

fn builtin_columns(def: &ResourceDef) -> Vec<(&'static str, &'static str)> {
    match def.plural.as_str() {
        "deployments" => vec![
            ("Name", "string"),
            ("Ready", "string"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
            ("Age", "string"),
        ],
        "configmaps" => vec![("Name", "string"), ("Data", "integer"), ("Age", "string")],
        "pods" => vec![
            ("Name", "string"),
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "string"),
            ("Age", "string"),
        ],
        "replicasets" => vec![
            ("Name", "string"),
            ("Desired", "integer"),
            ("Current", "integer"),
            ("Ready", "integer"),
            ("Age", "string"),
        ],
        "namespaces" => vec![("Name", "string"), ("Status", "string"), ("Age", "string")],
        "events" => vec![
            ("Last Seen", "string"),
            ("Type", "string"),
            ("Reason", "string"),
            ("Object", "string"),
            ("Message", "string"),
        ],
        "leases" => vec![("Name", "string"), ("Holder", "string"), ("Age", "string")],
        _ => vec![("Name", "string"), ("Created At", "date")],
    }
}

/// The columns `kubectl get -o wide` adds (priority 1), as kubectl's
/// printers define them for pods and ReplicaSets.
fn wide_columns(def: &ResourceDef) -> Vec<(&'static str, &'static str)> {
    match def.plural.as_str() {
        "pods" => vec![
            ("IP", "string"),
            ("Node", "string"),
            ("Nominated Node", "string"),
            ("Readiness Gates", "string"),
        ],
        "replicasets" => vec![
            ("Containers", "string"),
            ("Images", "string"),
            ("Selector", "string"),
        ],
        _ => vec![],
    }
}

fn wide_cells(def: &ResourceDef, o: &Value) -> Vec<Value> {
    let or_none = |v: Option<&str>| json!(v.filter(|s| !s.is_empty()).unwrap_or("<none>"));
    let joined = |path: &str, field: &str| {
        let all: Vec<&str> = (o
            .pointer(path)
            .and_then(Value::as_array)
            .into_iter()
            .flatten())
        .filter_map(|c| c[field].as_str())
        .collect();
        json!(all.join(","))
    };
    match def.plural.as_str() {
        "pods" => vec![
            or_none(o.pointer("/status/podIP").and_then(Value::as_str)),
            or_none(o.pointer("/spec/nodeName").and_then(Value::as_str)),
            or_none(
                o.pointer("/status/nominatedNodeName")
                    .and_then(Value::as_str),
            ),
            json!("<none>"),
        ],
        "replicasets" => {
            let labels = o
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object);
            let selector: Vec<String> = (labels.into_iter().flatten())
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            vec![
                joined("/spec/template/spec/containers", "name"),
                joined("/spec/template/spec/containers", "image"),
                json!(selector.join(",")),
            ]
        }
        _ => vec![],
    }
}

fn builtin_cells(def: &ResourceDef, o: &Value, now: SystemTime) -> Vec<Value> {
    let name = json!(o["metadata"]["name"].as_str().unwrap_or(""));
    let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    match def.plural.as_str() {
        "deployments" => vec![
            name,
            json!(format!(
                "{}/{}",
                n("/status/readyReplicas"),
                n("/spec/replicas")
            )),
            json!(n("/status/updatedReplicas")),
            json!(n("/status/availableReplicas")),
            json!(age_of(o, now)),
        ],
        "pods" => {
            let statuses = o["status"]["containerStatuses"].as_array();
            let statuses = statuses.map(Vec::as_slice).unwrap_or_default();
            let total = o["spec"]["containers"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            let ready = statuses.iter().filter(|c| c["ready"] == true).count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c["restartCount"].as_i64())
                .sum();
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status_column(o)),
                json!(restarts.to_string()),
                json!(age_of(o, now)),
            ]
        }
        "replicasets" => vec![
            name,
            json!(n("/spec/replicas")),
            json!(n("/status/replicas")),
            json!(n("/status/readyReplicas")),
            json!(age_of(o, now)),
        ],
        "configmaps" => vec![
            name,
            json!(o["data"].as_object().map(|d| d.len()).unwrap_or(0)),
            json!(age_of(o, now)),
        ],
        "namespaces" => vec![
            name,
            cell_string(o.pointer("/status/phase")),
            json!(age_of(o, now)),
        ],
        "events" => {
            let last = o["lastTimestamp"]
                .as_str()
                .or(o["eventTime"].as_str())
                .and_then(parse_rfc3339)
                .map(|t| age(t, now))
                .unwrap_or_else(|| "<unknown>".into());
            let obj = format!(
                "{}/{}",
                o["involvedObject"]["kind"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase(),
                o["involvedObject"]["name"].as_str().unwrap_or("")
            );
            vec![
                json!(last),
                cell_string(o.get("type")),
                cell_string(o.get("reason")),
                json!(obj),
                cell_string(o.get("message")),
            ]
        }
        "leases" => vec![
            name,
            cell_string(o.pointer("/spec/holderIdentity")),
            json!(age_of(o, now)),
        ],
        _ => vec![name, cell_string(o.pointer("/metadata/creationTimestamp"))],
    }
}

/// The STATUS column as kubectl's `printPod` reads it: the pod's reason or
/// phase, a waiting or terminated container's reason, `Terminating` while
/// deleting.
fn pod_status_column(o: &Value) -> String {
    let mut reason = o["status"]["reason"]
        .as_str()
        .or(o["status"]["phase"].as_str())
        .unwrap_or("")
        .to_string();
    for c in o["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(r) = state["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        }
    }
    if o["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    reason
}

fn custom_columns(def: &ResourceDef, version: &str) -> Vec<PrinterColumn> {
    let cols = def.columns.get(version).cloned().unwrap_or_default();
    if cols.is_empty() {
        return vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            json_path: ".metadata.creationTimestamp".into(),
            priority: 0,
            description: String::new(),
            format: String::new(),
        }];
    }
    cols
}

/// A printer column's cell as the CRD table convertor makes it
/// (`cellForJSONValue`): the value as the column's type, a `date` as its age
/// (`<invalid>` if it does not parse), null when missing or of another type.
fn custom_cell(ty: &str, v: Option<&Value>, now: SystemTime) -> Value {
    match (ty, v) {
        (_, None | Some(Value::Null)) => Value::Null,
        ("string", Some(Value::String(s))) => json!(s),
        // A string column shows any value as JSONPath prints it.
        ("string", Some(other)) => json!(other.to_string()),
        ("integer", Some(Value::Number(n))) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map(|i| json!(i))
            .unwrap_or(Value::Null),
        ("number", Some(Value::Number(n))) => json!(n.as_f64()),
        ("boolean", Some(Value::Bool(b))) => json!(b),
        ("date", Some(Value::String(s))) => {
            json!(parse_rfc3339(s)
                .map(|t| age(t, now))
                .unwrap_or_else(|| "<invalid>".into()))
        }
        _ => Value::Null,
    }
}

fn partial(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
}

/// What a row carries besides its cells (`TableOptions.includeObject`):
/// nothing, the object's metadata (the default) or the whole object, which
/// kubectl asks for to sort (`--sort-by`) or to print with a template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Include {
    None,
    #[default]
    Metadata,
    Object,
}

impl Include {
    /// From the `includeObject` query parameter.
    pub fn of(param: Option<&str>) -> Include {
        match param {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

fn row(def: &ResourceDef, version: &str, o: &Value, now: SystemTime, include: Include) -> Value {
    let cells = if def.custom {
        let mut cells = vec![json!(o["metadata"]["name"].as_str().unwrap_or(""))];
        for c in custom_columns(def, version) {
            cells.push(custom_cell(&c.type_, json_path(o, &c.json_path), now));
        }
        cells
    } else {
        let mut cells = builtin_cells(def, o, now);
        cells.extend(wide_cells(def, o));
        cells
    };
    match include {
        Include::None => json!({"cells": cells}),
        Include::Metadata => json!({"cells": cells, "object": partial(o)}),
        Include::Object => {
            let mut whole = o.clone();
            whole["apiVersion"] = json!(def.api_version(version));
            json!({"cells": cells, "object": whole})
        }
    }
}

/// A Table of `objs`; `with_columns` false for watch events after the first.
pub fn table(
    def: &ResourceDef,
    version: &str,
    objs: &[&Value],
    rv: &str,
    now: SystemTime,
    include: Include,
) -> Value {
    let columns: Vec<Value> = if def.custom {
        let mut cols = vec![
            json!({"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}),
        ];
        for c in custom_columns(def, version) {
            let desc = if c.description.is_empty() {
                format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    c.json_path
                )
            } else {
                c.description.clone()
            };
            cols.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                "description": desc, "priority": c.priority}));
        }
        cols
    } else {
        let wide = wide_columns(def).into_iter().map(|c| (c, 1));
        (builtin_columns(def).into_iter().map(|c| (c, 0)))
            .chain(wide)
            .map(|((n, t), priority)| {
                let fmt = if n == "Name" { "name" } else { "" };
                json!({"name": n, "type": t, "format": fmt, "description": "", "priority": priority})
            })
            .collect()
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns,
        "rows": objs.iter().map(|o| row(def, version, o, now, include)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_subset() {
        let o = json!({"spec": {"family": "PII"}, "status": {"conditions": [{"type": "Progressing", "status": "True"}, {"type": "Ready", "status": "False"}]}, "l": [1, 2]});
        assert_eq!(json_path(&o, ".spec.family"), Some(&json!("PII")));
        assert_eq!(
            json_path(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(&json!("False"))
        );
        assert_eq!(json_path(&o, ".l[1]"), Some(&json!(2)));
        assert_eq!(json_path(&o, ".status.activeVersion"), None);
    }
}
