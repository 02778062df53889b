use super::*;

fn cm_def(s: &Store) -> ResourceDef {
    s.registry.find("", "v1", "configmaps").cloned().unwrap()
}

/// A plain client's create in "default".
fn add(s: &mut Store, body: Value) -> Result<Arc<Value>, ApiErr> {
    let def = cm_def(s);
    let now = SystemTime::now();
    s.create(&def, "default", body, FieldValidation::Ignore, now)
        .map(|w| w.obj)
}

/// A plain client's PUT of the main resource in "default".
fn put(s: &mut Store, body: Value) -> Result<Arc<Value>, ApiErr> {
    let def = cm_def(s);
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    let (fv, now) = (FieldValidation::Ignore, SystemTime::now());
    s.update(&def, "default", &name, body, false, fv, false, now)
        .map(|w| w.obj)
}

#[test]
fn metadata_lifecycle() {
    let mut s = Store::new(100);
    let def = cm_def(&s);
    let a = add(
        &mut s,
        json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
    )
    .unwrap();
    assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
    assert!(a["metadata"]["generation"].is_null());
    let rv = a["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // A write that changes nothing keeps the resourceVersion.
    let same = put(&mut s, (*a).clone()).unwrap();
    assert_eq!(same["metadata"]["resourceVersion"], rv.as_str());
    // A stale resourceVersion is a conflict.
    let mut stale = (*a).clone();
    stale["data"]["k"] = json!("w");
    stale["metadata"]["resourceVersion"] = json!("1");
    assert_eq!(put(&mut s, stale).unwrap_err().code, 409);
    // The name is taken in "default"; "nope" is no namespace.
    let taken = json!({"metadata": {"name": "a"}});
    assert_eq!(add(&mut s, taken.clone()).unwrap_err().code, 409);
    let now = SystemTime::now();
    let err = s
        .create(&def, "nope", taken, FieldValidation::Ignore, now)
        .unwrap_err();
    assert_eq!(err.code, 404);
    let g = add(&mut s, json!({"metadata": {"generateName": "x-"}})).unwrap();
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("x-"));
}

#[test]
fn finalizers_hold_deletion() {
    let mut s = Store::new(100);
    let def = cm_def(&s);
    let now = SystemTime::now();
    add(
        &mut s,
        json!({"metadata": {"name": "a", "finalizers": ["x/y"]}}),
    )
    .unwrap();
    let d = s
        .delete(&def, "default", "a", &Preconditions::default(), now)
        .unwrap();
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    let mut more = (*d).clone();
    more["metadata"]["finalizers"] = json!(["x/y", "x/z"]);
    assert_eq!(put(&mut s, more).unwrap_err().code, 422);
    let mut rm = (*d).clone();
    rm["metadata"]["finalizers"] = json!([]);
    put(&mut s, rm).unwrap();
    assert!(s.get(&def, "default", "a").is_none());
    assert_eq!(s.history.back().unwrap().kind, EvKind::Deleted);
}

#[test]
fn gc_deletes_orphans() {
    let mut s = Store::new(100);
    let def = cm_def(&s);
    let now = SystemTime::now();
    let owner = add(&mut s, json!({"metadata": {"name": "owner"}})).unwrap();
    let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
    let owned = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": true});
    add(
        &mut s,
        json!({"metadata": {"name": "dep", "ownerReferences": [owned]}}),
    )
    .unwrap();
    s.gc(now);
    assert!(s.get(&def, "default", "dep").is_some());
    s.delete(&def, "default", "owner", &Preconditions::default(), now)
        .unwrap();
    s.gc(now);
    assert!(s.get(&def, "default", "dep").is_none());
}

#[test]
fn history_is_bounded_and_compaction_expires() {
    let mut s = Store::new(3);
    for i in 0..5 {
        add(&mut s, json!({"metadata": {"name": format!("c{i}")}})).unwrap();
    }
    assert!(s.events_after(1).is_none());
    assert_eq!(s.events_after(s.rv - 2).unwrap().len(), 2);
    s.compact();
    assert!(s.events_after(s.rv - 1).is_none());
    assert_eq!(s.events_after(s.rv).unwrap().len(), 0);
}
