//! The Deployment `scale` subresource, as `ScaleREST` serves it
//! (pkg/registry/apps/deployment/storage/storage.go): an `autoscaling/v1`
//! `Scale` read from the Deployment (`scaleFromDeployment`), and a new
//! Scale turned back into the Deployment (`scaleUpdatedObjectInfo`).

use crate::apiserver::errors::{ApiErr, Cause};
use serde_json::{json, Value};

/// `metav1.LabelSelectorAsSelector(..).String()`: requirements sorted by
/// key and joined by commas, `k=v` for `matchLabels`, `k in (a,b)`,
/// `k notin (a,b)`, `k` and `!k` for the expressions (values sorted); an
/// empty or missing selector is the empty string.
pub fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(ml) = sel["matchLabels"].as_object() {
        for (k, v) in ml {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("").to_string();
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        values.sort_unstable();
        let set = values.join(",");
        let text = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({set})"),
            "NotIn" => format!("{key} notin ({set})"),
            "DoesNotExist" => format!("!{key}"),
            _ => key.clone(),
        };
        reqs.push((key, text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    let texts: Vec<String> = reqs.into_iter().map(|(_, t)| t).collect();
    texts.join(",")
}

/// `scaleFromDeployment`: name, namespace, uid, resourceVersion and
/// creationTimestamp; `spec.replicas` (omitted at 0, as `omitempty` has
/// it); the Deployment's `status.replicas` and its selector as a string.
pub fn scale_of(deploy: &Value) -> Value {
    let meta = &deploy["metadata"];
    let mut metadata = json!({});
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k).filter(|v| !v.is_null()) {
            metadata[k] = v.clone();
        }
    }
    let replicas = deploy["spec"]["replicas"].as_i64().unwrap_or(0);
    let spec = if replicas == 0 {
        json!({})
    } else {
        json!({ "replicas": replicas })
    };
    let mut status = json!({"replicas": deploy["status"]["replicas"].as_i64().unwrap_or(0)});
    let selector = selector_string(&deploy["spec"]["selector"]);
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata, "spec": spec, "status": status})
}

/// A PUT body's own checks before it becomes a Scale: the kind, if given,
/// and the name, which must be the one in the URL (handlers `checkName`).
pub fn check_body(body: &Value, name: &str) -> Result<(), ApiErr> {
    if let Some(k) = body["kind"].as_str().filter(|k| *k != "Scale") {
        return Err(ApiErr::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (Scale)"
        )));
    }
    let body_name = body["metadata"]["name"].as_str().unwrap_or("");
    if body_name != name {
        return Err(ApiErr::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// `scaleUpdatedObjectInfo.UpdatedObject`: `ValidateScale` (replicas not
/// below 0, as `Scale.autoscaling`), the UID precondition (a conflict on
/// `deployments/scale.apps`), then the Deployment with the Scale's replicas
/// and resourceVersion, which the store checks as a precondition.
pub fn apply(deploy: &Value, scale: &Value, name: &str) -> Result<Value, ApiErr> {
    let replicas = match &scale["spec"]["replicas"] {
        Value::Null => 0,
        v => v
            .as_i64()
            .filter(|r| i32::try_from(*r).is_ok())
            .ok_or_else(|| {
                ApiErr::bad_request(format!(
                    "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: expected an int32, got {v}"
                ))
            })?,
    };
    if replicas < 0 {
        let cause = Cause::invalid(
            "spec.replicas",
            &json!(replicas),
            "must be greater than or equal to 0",
        );
        return Err(ApiErr::invalid_kind(
            "autoscaling",
            "Scale",
            name,
            vec![cause],
        ));
    }
    let uid = deploy["metadata"]["uid"].as_str().unwrap_or("");
    if let Some(want) = scale["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
        if want != uid {
            let mut e = ApiErr::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on deployments/scale.apps {name:?}: Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
            );
            e.details = json!({"name": name, "group": "apps", "kind": "deployments/scale"});
            return Err(e);
        }
    }
    let mut next = deploy.clone();
    next["spec"]["replicas"] = json!(replicas);
    match scale["metadata"]["resourceVersion"].as_str() {
        Some(rv) => next["metadata"]["resourceVersion"] = json!(rv),
        None => {
            if let Some(m) = next["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_strings_as_label_selector_as_selector_prints_them() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [
            {"key": "c", "operator": "In", "values": ["y", "x"]},
            {"key": "d", "operator": "NotIn", "values": ["z"]},
            {"key": "e", "operator": "Exists"},
            {"key": "f", "operator": "DoesNotExist"},
        ]});
        assert_eq!(selector_string(&sel), "a=1,b=2,c in (x,y),d notin (z),e,!f");
        assert_eq!(selector_string(&json!({})), "");
        assert_eq!(selector_string(&Value::Null), "");
    }
}
