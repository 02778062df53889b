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

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Strategic merge patch for built-in kinds, as apimachinery's
/// `strategicpatch.StrategicMergeMapPatch` applies it on the server
/// (`MergeParallelList` and `IgnoreUnmatchedNulls` on): `mergeMap`,
/// `mergeSlice` and the element order of `normalizeElementOrder`.
pub fn strategic_merge(target: &Value, patch: &Value) -> Result<Value, String> {
    let (Value::Object(t), Value::Object(p)) = (target, patch) else {
        return Err("invalid JSON document".into());
    };
    merge_map(t, p).map(Value::Object)
}

/// A value taken from the patch as is, as the typed decode sees it:
/// directives and `null`s carry no field.
fn raw(v: &Value) -> Value {
    strip_directives(v)
}

/// `mergeMap`: directives first (`$patch`, `$retainKeys`,
/// `$setElementOrder`), then every field; `null` deletes, a field the
/// original lacks or of another JSON type is taken from the patch.
fn merge_map(
    original: &Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    if let Some(whole) = map_directive(patch)? {
        return Ok(whole);
    }
    let mut out = original.clone();
    retain_keys(&mut out, patch)?;
    let done = merge_ordered_lists(&mut out, patch)?;
    merge_fields(&mut out, patch, &done)?;
    Ok(out)
}

/// A map's `$patch` directive: `replace` (the patch's map, as is) and
/// `delete` (an empty map) decide the result; None without one.
fn map_directive(patch: &Map<String, Value>) -> Result<Option<Map<String, Value>>, String> {
    match patch.get("$patch") {
        None => {}
        Some(Value::String(d)) if d == "replace" => {
            let mut m = patch.clone();
            m.remove("$patch");
            return match raw(&Value::Object(m)) {
                Value::Object(m) => Ok(Some(m)),
                _ => Ok(Some(Map::new())),
            };
        }
        Some(Value::String(d)) if d == "delete" => return Ok(Some(Map::new())),
        Some(other) => {
            return Err(format!(
                "Unknown patch type: {} in map: {}",
                other.as_str().unwrap_or(""),
                Value::Object(patch.clone())
            ))
        }
    }
    Ok(None)
}

/// `$retainKeys`: only the keys listed stay, and the patch sets no other.
fn retain_keys(out: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), String> {
    if let Some(keep) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep
            .as_array()
            .ok_or("invalid patch format of retainKeys")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let outside = patch
            .iter()
            .any(|(k, v)| !v.is_null() && !k.starts_with('$') && !keep.contains(&k.as_str()));
        if outside {
            return Err("invalid patch format of retainKeys".into());
        }
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

/// The lists a `$setElementOrder` names, merged and put in that order;
/// returns those fields, done.
fn merge_ordered_lists<'p>(
    out: &mut Map<String, Value>,
    patch: &'p Map<String, Value>,
) -> Result<Vec<&'p str>, String> {
    let mut done: Vec<&str> = Vec::new();
    for (k, order) in patch {
        let Some(field) = k.strip_prefix(SET_ORDER) else {
            continue;
        };
        let order = order
            .as_array()
            .ok_or("invalid patch format of setElementOrder list")?;
        let key = merge_key(field);
        let before = match out.get(field) {
            Some(Value::Array(a)) => Some(a.clone()),
            _ => None,
        };
        let merged = match (&before, patch.get(field)) {
            (Some(b), Some(Value::Array(p)))
                if merge_key(field).is_some() || is_set_list(field) =>
            {
                merge_slice(b.clone(), p, field)?
            }
            (Some(_), Some(p @ Value::Array(_))) => match raw(p) {
                Value::Array(a) => a,
                _ => Vec::new(),
            },
            (Some(b), _) => b.clone(),
            (None, Some(p @ Value::Array(_))) => match raw(p) {
                Value::Array(a) => a,
                _ => Vec::new(),
            },
            (None, _) => continue,
        };
        let server = before.unwrap_or_default();
        out.insert(
            field.to_string(),
            Value::Array(normalize(merged, order, &server, key)),
        );
        done.push(field);
    }
    Ok(done)
}

/// Every other field: `$deleteFromPrimitiveList`, deletion by `null`, maps
/// and merging lists merged, anything else taken from the patch.
fn merge_fields(
    out: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    done: &[&str],
) -> Result<(), String> {
    for (k, v) in patch {
        if k == "$patch"
            || k == "$retainKeys"
            || k.starts_with(SET_ORDER)
            || done.contains(&k.as_str())
        {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            let del = v
                .as_array()
                .ok_or("invalid patch format of primitive list")?;
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        let merged = match (out.get(k), v) {
            (Some(Value::Object(o)), Value::Object(p)) => Value::Object(merge_map(o, p)?),
            (Some(Value::Array(o)), Value::Array(p))
                if merge_key(k).is_some() || is_set_list(k) =>
            {
                Value::Array(merge_slice(o.clone(), p, k)?)
            }
            _ => raw(v),
        };
        out.insert(k.clone(), merged);
    }
    Ok(())
}

/// `mergeSlice` for a list with `patchStrategy: merge`: by merge key for
/// lists of maps (`$patch: delete|replace` elements first), as a set for
/// scalars; then `normalizeElementOrder`.
fn merge_slice(original: Vec<Value>, patch: &[Value], field: &str) -> Result<Vec<Value>, String> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let Some(key) = merge_key(field) else {
        let mut merged = original.clone();
        for x in patch {
            if !merged.contains(x) {
                merged.push(x.clone());
            }
        }
        return Ok(normalize(merged, patch, &original, None));
    };
    let mut original = original;
    let mut plain: Vec<&Value> = Vec::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(m) = item else {
            return Err(format!("list element types are not identical: {item}"));
        };
        match m.get("$patch") {
            None => plain.push(item),
            Some(Value::String(d)) if d == "delete" => {
                let k = m.get(key).ok_or_else(|| no_merge_key(item, key))?;
                original.retain(|o| o.get(key) != Some(k));
            }
            Some(Value::String(d)) if d == "replace" => replace = true,
            Some(Value::String(d)) if d == "merge" => {
                return Err("merging lists cannot yet be specified in the patch".into())
            }
            Some(other) => {
                return Err(format!(
                    "Unknown patch type: {} in map: {item}",
                    other.as_str().unwrap_or("")
                ))
            }
        }
    }
    if replace {
        return Ok(plain.into_iter().map(raw).collect());
    }
    let server = original.clone();
    let mut merged = original;
    for item in &plain {
        let Value::Object(p) = item else { continue };
        let k = p.get(key).ok_or_else(|| no_merge_key(item, key))?;
        match merged.iter().position(|m| m.get(key) == Some(k)) {
            Some(i) => {
                let base = merged[i].as_object().cloned().unwrap_or_default();
                merged[i] = Value::Object(merge_map(&base, p)?);
            }
            None => merged.push(raw(item)),
        }
    }
    let order: Vec<Value> = plain.into_iter().cloned().collect();
    Ok(normalize(merged, &order, &server, Some(key)))
}

fn no_merge_key(item: &Value, key: &str) -> String {
    format!("map: {item} does not contain declared merge key: {key}")
}

/// Where `v` sits in `list`: by merge key for maps, by value for scalars.
fn index_in(list: &[Value], v: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(k) => {
            let want = v.get(k)?;
            list.iter().position(|x| x.get(k) == Some(want))
        }
        None => list.iter().position(|x| x == v),
    }
}

/// `normalizeElementOrder`: the items named in `patch_order` in that order,
/// the others in server order, interleaved by `mergeSortedSlice`: a
/// server-only item goes first only when both it and the next patch item
/// are in the live list and it came first there, so an item new to the
/// list lands ahead of the server-only items after it.
fn normalize(
    merged: Vec<Value>,
    patch_order: &[Value],
    server: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let (mut mine, mut theirs): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| index_in(patch_order, v, key).is_some());
    mine.sort_by_key(|v| index_in(patch_order, v, key));
    theirs.sort_by_key(|v| index_in(server, v, key));
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(mine.len() + theirs.len());
    while i < theirs.len() || j < mine.len() {
        let left_first = match (theirs.get(i), mine.get(j)) {
            (Some(_), None) => true,
            (None, _) => false,
            (Some(l), Some(r)) => matches!(
                (index_in(server, l, key), index_in(server, r, key)),
                (Some(a), Some(b)) if a < b
            ),
        };
        if left_first {
            out.push(theirs[i].clone());
            i += 1;
        } else {
            out.push(mine[j].clone());
            j += 1;
        }
    }
    out
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
                // An absent path tests equal to null, as evanphx/json-patch
                // (kube-apiserver's) has it; kube-runtime's finalizer
                // helper relies on it.
                let want = value_of(op, i)?;
                if doc.pointer(path).unwrap_or(&Value::Null) != &want {
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
        // An item new to the list goes ahead of the server-only ones
        // (`mergeSortedSlice`).
        let env = out.pointer("/spec/template/spec/containers/1/env").unwrap();
        assert_eq!(
            env,
            &json!([{"name": "NEW", "value": "n"}, {"name": "P", "value": "old"}])
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
        // Patch order wins for the items the patch names.
        assert_eq!(
            strategic_merge(&t, &p).unwrap(),
            json!({"metadata": {"finalizers": ["b", "a"]}, "x": {"a": 3}})
        );
        let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap()["metadata"]["finalizers"],
            json!([])
        );
    }

    #[test]
    fn smp_set_element_order_reorders_and_maps_delete_to_empty() {
        let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
            "$setElementOrder/env": [{"name": "P"}, {"name": "X"}],
            "env": [{"name": "P", "value": "new"}]}]}}}});
        let out = strategic_merge(&deployment(), &p).unwrap();
        assert_eq!(
            out.pointer("/spec/template/spec/containers/1/env").unwrap(),
            &json!([{"name": "P", "value": "new"}, {"name": "X", "value": "x"}])
        );
        let t = json!({"spec": {"strategy": {"type": "Recreate"}}});
        let p = json!({"spec": {"strategy": {"$patch": "delete"}}});
        assert_eq!(
            strategic_merge(&t, &p).unwrap(),
            json!({"spec": {"strategy": {}}})
        );
        let p = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "merge", "name": "a"}]}}}});
        assert!(strategic_merge(&deployment(), &p).is_err());
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
        let absent = json!([{"op": "test", "path": "/metadata/labels", "value": null}]);
        assert!(
            json_patch(&t, &absent).is_ok(),
            "absent tests equal to null"
        );
        let not_null = json!([{"op": "test", "path": "/metadata/labels", "value": {}}]);
        assert!(json_patch(&t, &not_null).is_err());
        assert!(json_patch(&t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&t, &json!({"op": "add"})).is_err());
    }
}
