//! The three patch formats the API server accepts: JSON merge patch
//! (RFC 7386), strategic merge patch (built-in kinds) and JSON patch
//! (RFC 6902). Public so the operator's tests can apply the bodies it builds.

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match target {
                Value::Object(t) => t.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else {
                    let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), v);
                    out.insert(k.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The merge key of a list field, by field name, as the built-in types
/// declare it (`patchMergeKey`). Lists not named here are replaced whole.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers" | "initContainers" | "ephemeralContainers" => "name",
        "env" | "volumes" | "imagePullSecrets" | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        "conditions" => "type",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars that merge as sets (`patchStrategy: merge`).
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch for built-in kinds.
pub fn strategic_merge(target: &Value, patch: &Value) -> Result<Value, String> {
    match smp_value(Some(target), patch, None)? {
        Some(v) => Ok(v),
        None => Err("the patch deletes the whole object".into()),
    }
}

/// Returns None when a `$patch: delete` removes the value.
fn smp_value(
    target: Option<&Value>,
    patch: &Value,
    field: Option<&str>,
) -> Result<Option<Value>, String> {
    match patch {
        Value::Object(p) => {
            match p.get("$patch").and_then(Value::as_str) {
                Some("delete") => return Ok(None),
                Some("replace") => {
                    let mut clean = p.clone();
                    clean.remove("$patch");
                    return Ok(Some(strip_directives(&Value::Object(clean))));
                }
                Some("merge") | None => {}
                Some(other) => return Err(format!("unknown patch type {other:?}")),
            }
            let mut out = match target {
                Some(Value::Object(t)) => t.clone(),
                _ => Map::new(),
            };
            let mut retain: Option<Vec<String>> = None;
            for (k, v) in p {
                if k == "$patch" || k.starts_with("$setElementOrder/") {
                    continue;
                }
                if k == "$retainKeys" {
                    retain = Some(
                        v.as_array()
                            .ok_or("$retainKeys must be a list")?
                            .iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect(),
                    );
                    continue;
                }
                if let Some(f) = k.strip_prefix("$deleteFromPrimitiveList/") {
                    let del = v
                        .as_array()
                        .ok_or("$deleteFromPrimitiveList needs a list")?;
                    if let Some(Value::Array(list)) = out.get_mut(f) {
                        list.retain(|x| !del.contains(x));
                    }
                    continue;
                }
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                match smp_value(out.get(k), v, Some(k))? {
                    Some(nv) => {
                        out.insert(k.clone(), nv);
                    }
                    None => {
                        out.remove(k);
                    }
                }
            }
            if let Some(keep) = retain {
                out.retain(|k, _| keep.contains(k));
            }
            Ok(Some(Value::Object(out)))
        }
        Value::Array(items) => {
            let f = field.unwrap_or("");
            if let Some(key) = merge_key(f) {
                let base = match target {
                    Some(Value::Array(a)) => a.clone(),
                    _ => Vec::new(),
                };
                return merge_list(base, items, key).map(Some);
            }
            if is_set_list(f) {
                let mut base = match target {
                    Some(Value::Array(a)) => a.clone(),
                    _ => Vec::new(),
                };
                for x in items {
                    if !base.contains(x) {
                        base.push(x.clone());
                    }
                }
                return Ok(Some(Value::Array(base)));
            }
            Ok(Some(strip_directives(patch)))
        }
        other => Ok(Some(other.clone())),
    }
}

fn merge_list(mut base: Vec<Value>, items: &[Value], key: &str) -> Result<Value, String> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let kept: Vec<Value> = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return Ok(Value::Array(kept));
    }
    for item in items {
        let Value::Object(obj) = item else {
            return Err(format!("list element without merge key {key:?}"));
        };
        let k = obj
            .get(key)
            .ok_or_else(|| format!("map: {item} does not contain declared merge key: {key}"))?;
        let pos = base.iter().position(|b| b.get(key) == Some(k));
        if obj.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                base.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => {
                if let Some(nv) = smp_value(Some(&base[i]), item, None)? {
                    base[i] = nv;
                }
            }
            None => base.push(strip_directives(item)),
        }
    }
    Ok(Value::Array(base))
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// RFC 6902, including `test`. Errors name the failing operation.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        let name = op["op"]
            .as_str()
            .ok_or(format!("operation {i} has no op"))?;
        let path = op["path"]
            .as_str()
            .ok_or(format!("operation {i} has no path"))?;
        match name {
            "add" => add(&mut doc, path, value_of(op, i)?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, value_of(op, i)?)?;
            }
            "move" => {
                let from = op["from"]
                    .as_str()
                    .ok_or(format!("operation {i} has no from"))?;
                let v = remove(&mut doc, from)?;
                add(&mut doc, path, v)?;
            }
            "copy" => {
                let from = op["from"]
                    .as_str()
                    .ok_or(format!("operation {i} has no from"))?;
                let v = doc
                    .pointer(from)
                    .cloned()
                    .ok_or(format!("copy from {from}: no such path"))?;
                add(&mut doc, path, v)?;
            }
            "test" => {
                let want = value_of(op, i)?;
                if doc.pointer(path) != Some(&want) {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(doc)
}

fn value_of(op: &Value, i: usize) -> Result<Value, String> {
    op.get("value")
        .cloned()
        .ok_or(format!("operation {i} has no value"))
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    if path.is_empty() {
        return Err("the root cannot be patched".into());
    }
    let idx = path.rfind('/').ok_or(format!("bad pointer {path:?}"))?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn add(doc: &mut Value, path: &str, v: Value) -> Result<(), String> {
    let (parent, last) = split_pointer(path)?;
    match doc.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            if last == "-" {
                a.push(v);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if i > a.len() {
                return Err(format!("index out of range in {path}"));
            }
            a.insert(i, v);
            Ok(())
        }
        _ => Err(format!("add to {path}: parent does not exist")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    match doc.pointer_mut(&parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or(format!("remove {path}: no such key")),
        Some(Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if i >= a.len() {
                return Err(format!("remove {path}: index out of range"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("remove {path}: parent does not exist")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        let p = json!({"a": "z", "c": {"f": null}});
        assert_eq!(merge_patch(&t, &p), json!({"a": "z", "c": {"d": "e"}}));
        assert_eq!(
            merge_patch(&json!({"a": [1, 2]}), &json!({"a": [3]})),
            json!({"a": [3]})
        );
        assert_eq!(
            merge_patch(&json!({"a": 1}), &json!({"b": {"c": null}})),
            json!({"a": 1, "b": {}})
        );
    }

    fn deployment() -> Value {
        json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "sidecar", "image": "s", "env": [{"name": "A", "value": "1"}]},
                {"name": "app", "image": "a", "env": [{"name": "X", "value": "x"}, {"name": "P", "value": "old"}],
                 "ports": [{"containerPort": 80}], "volumeMounts": [{"mountPath": "/d", "name": "d"}]}
            ],
            "volumes": [{"name": "d", "emptyDir": {}}]
        }}}})
    }

    #[test]
    fn smp_merges_containers_and_env_by_name() {
        let p = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "env": [{"name": "P", "value": null, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}
        ]}}}});
        let out = strategic_merge(&deployment(), &p).unwrap();
        let cs = out
            .pointer("/spec/template/spec/containers")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["env"][0]["value"], "1");
        let env = cs[1]["env"].as_array().unwrap();
        assert_eq!(env.len(), 2);
        assert_eq!(env[0], json!({"name": "X", "value": "x"}));
        assert_eq!(
            env[1],
            json!({"name": "P", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}})
        );
        assert_eq!(cs[1]["ports"], json!([{"containerPort": 80}]));
        assert_eq!(
            out.pointer("/spec/template/spec/volumes/0/name").unwrap(),
            "d"
        );
    }

    #[test]
    fn smp_appends_unknown_keys_and_deletes_with_directive() {
        let p = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "app", "env": [{"name": "NEW", "value": "n"}, {"name": "X", "$patch": "delete"}]}],
            "volumes": [{"name": "d", "$patch": "delete"}]
        }}}});
        let out = strategic_merge(&deployment(), &p).unwrap();
        let env = out.pointer("/spec/template/spec/containers/1/env").unwrap();
        assert_eq!(
            env,
            &json!([{"name": "P", "value": "old"}, {"name": "NEW", "value": "n"}])
        );
        assert_eq!(
            out.pointer("/spec/template/spec/volumes").unwrap(),
            &json!([])
        );
    }

    #[test]
    fn smp_replace_and_null() {
        let t = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}});
        let p = json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap(),
            json!({"spec": {"strategy": {"type": "Recreate"}}})
        );
        let p = json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap(),
            json!({"spec": {"strategy": {"type": "Recreate"}}})
        );
        let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "only"}, {"$patch": "replace"}]}}}});
        let out = strategic_merge(&deployment(), &p).unwrap();
        assert_eq!(
            out.pointer("/spec/template/spec/containers").unwrap(),
            &json!([{"name": "only"}])
        );
    }

    #[test]
    fn smp_finalizers_merge_as_a_set_and_retain_keys() {
        let t = json!({"metadata": {"finalizers": ["a"]}, "x": {"a": 1, "b": 2}});
        let p =
            json!({"metadata": {"finalizers": ["b", "a"]}, "x": {"$retainKeys": ["a"], "a": 3}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap(),
            json!({"metadata": {"finalizers": ["a", "b"]}, "x": {"a": 3}})
        );
        let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap()["metadata"]["finalizers"],
            json!([])
        );
    }

    #[test]
    fn smp_element_without_merge_key_is_an_error() {
        let p = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        assert!(strategic_merge(&deployment(), &p).is_err());
    }

    #[test]
    fn json_patch_ops_and_test() {
        let t = json!({"metadata": {"resourceVersion": "5", "finalizers": ["a"]}, "a~b": 1});
        let ops = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
            {"op": "replace", "path": "/a~0b", "value": 2},
            {"op": "copy", "from": "/a~0b", "path": "/c"},
            {"op": "move", "from": "/c", "path": "/d"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]);
        let out = json_patch(&t, &ops).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"resourceVersion": "5", "finalizers": ["b"]}, "a~b": 2, "d": 2})
        );
        let bad = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "4"}]);
        assert!(json_patch(&t, &bad).unwrap_err().contains("test"));
        assert!(json_patch(&t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&t, &json!({"op": "add"})).is_err());
    }
}
