//! What the store does to an object's metadata, as the real registry does:
//! names and uids on create, the system fields kept on update, the
//! finalizers the garbage collector adds, the owners an object names.

use super::*;

pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

pub(super) fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

pub(super) fn meta_owned(obj: &Value, k: &str) -> String {
    meta_str(obj, k).unwrap_or("").to_string()
}

pub(crate) fn meta_str<'a>(obj: &'a Value, k: &str) -> Option<&'a str> {
    obj["metadata"][k].as_str()
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    str_list(obj["metadata"].get("finalizers"))
}

/// Equal apart from bookkeeping the server itself maintains.
pub(super) fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

/// Whether a write of the main resource changes what `generation` tracks:
/// for custom resources anything outside `metadata` (customresource
/// strategy `PrepareForUpdate`, `copyNonMetadata`: with a status
/// subresource `status` was already reset to the stored one, without one a
/// status change counts); for Deployments the spec or the annotations
/// (deployment strategy `PrepareForUpdate`: annotations are copied to the
/// ReplicaSets); otherwise the spec.
pub(super) fn spec_changed(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    if def.custom {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        strip(old) != strip(new)
    } else if def.key() == "apps/deployments" {
        let annotations = |v: &Value| {
            v["metadata"]["annotations"]
                .as_object()
                .filter(|m| !m.is_empty())
                .cloned()
        };
        old["spec"] != new["spec"] || annotations(old) != annotations(new)
    } else {
        old["spec"] != new["spec"]
    }
}

/// `deletionFinalizersForGarbageCollection` (generic registry store.go):
/// the finalizers an object gets when deleted with `p`.
pub(crate) fn gc_finalizers(current: &[String], p: Propagation) -> Vec<String> {
    let own = current
        .iter()
        .find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER)
        .map(String::as_str);
    let (orphan, foreground) = match p {
        Propagation::Orphan => (true, false),
        Propagation::Foreground => (false, true),
        Propagation::Background => (false, false),
        Propagation::Default => (
            own == Some(ORPHAN_FINALIZER),
            own == Some(FOREGROUND_FINALIZER),
        ),
    };
    let mut out: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        out.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        out.push(FOREGROUND_FINALIZER.into());
    }
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    if set(&out) == set(current) {
        current.to_vec()
    } else {
        out
    }
}

/// Five characters as apimachinery's `rand.String` picks them (no vowels,
/// no characters that read alike): a `generateName` suffix.
pub fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHA[(r % ALPHA.len() as u64) as usize] as char;
            r /= ALPHA.len() as u64;
            c
        })
        .collect()
}

/// The name of an object being created: its own, or its `generateName`
/// with a random suffix (written into the object).
pub(super) fn name_for_create(obj: &mut Value) -> String {
    let mut name = meta_str(obj, "name").unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(g) = meta_str(obj, "generateName").filter(|g| !g.is_empty()) {
            name = format!("{g}{}", random_suffix());
            obj["metadata"]["name"] = json!(name);
        }
    }
    name
}

/// What a create sets itself: the stored apiVersion and kind, a new uid
/// and creationTimestamp, generation 1, no system fields from the body, and
/// no status where status is a subresource.
pub(super) fn reset_for_create(def: &ResourceDef, obj: &mut Value, now: SystemTime) {
    obj["apiVersion"] = json!(def.storage_api_version());
    obj["kind"] = json!(def.kind);
    if let Some(m) = obj["metadata"].as_object_mut() {
        for k in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            m.remove(k);
        }
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(rfc3339(now)));
        if def.generation {
            m.insert("generation".into(), json!(1));
        }
    }
    if def.status_subresource && def.plural != "namespaces" {
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }
}

/// The update's resourceVersion precondition: the stored one if the body
/// names one, and one is needed where the kind does not allow an
/// unconditional update.
pub(super) fn check_update_version(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    new: &Value,
    require_rv: bool,
) -> Result<(), ApiErr> {
    match meta_str(new, "resourceVersion").filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != meta_str(old, "resourceVersion") => {
            return Err(ApiErr::modified(def, name))
        }
        None if require_rv => {
            return Err(ApiErr::invalid(
                def,
                name,
                vec![Cause::invalid(
                    "metadata.resourceVersion",
                    &json!("0x0"),
                    "must be specified for an update",
                )],
            ));
        }
        _ => {}
    }
    Ok(())
}

/// The strategy's PrepareForUpdate: /status keeps all but the status (a
/// Deployment's keeps all but spec and labels), the main resource keeps the
/// stored status where status is a subresource.
pub(super) fn prepare_for_update(
    def: &ResourceDef,
    old: &Value,
    new: Value,
    status_only: bool,
) -> Value {
    if status_only && def.key() == "apps/deployments" {
        // deploymentStatusStrategy.PrepareForUpdate resets only the spec
        // and the labels: the deployment controller writes its revision
        // annotation through /status.
        let mut r = new;
        r["spec"] = old["spec"].clone();
        match old["metadata"].get("labels") {
            Some(l) => r["metadata"]["labels"] = l.clone(),
            None => {
                if let Some(m) = r["metadata"].as_object_mut() {
                    m.remove("labels");
                }
            }
        }
        r
    } else if status_only {
        let mut r = old.clone();
        match new.get("status") {
            Some(s) if !s.is_null() => r["status"] = s.clone(),
            _ => {
                if let Some(m) = r.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        r
    } else {
        let mut r = new;
        if def.status_subresource {
            match old.get("status") {
                Some(s) => r["status"] = s.clone(),
                None => {
                    if let Some(m) = r.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        r
    }
}

/// What an update cannot change: apiVersion, kind, identity and deletion
/// fields, generation (bumped later, if at all); managedFields and selfLink
/// are not kept.
pub(super) fn keep_system_fields(old: &Value, result: &mut Value) {
    result["apiVersion"] = old["apiVersion"].clone();
    result["kind"] = old["kind"].clone();
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "name",
        "namespace",
    ] {
        match old["metadata"].get(k) {
            Some(v) => result["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = result["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    if let Some(m) = result["metadata"].as_object_mut() {
        m.remove("managedFields");
        m.remove("selfLink");
    }
}

/// An object being deleted may gain no finalizer.
pub(super) fn check_no_new_finalizers(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    result: &Value,
) -> Result<(), ApiErr> {
    if meta_str(old, "deletionTimestamp").is_some() {
        // ValidateNoNewFinalizers: a sorted set, printed with Go's %#v.
        let before = finalizers(old);
        let added: std::collections::BTreeSet<String> = finalizers(result)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            let why = format!(
                "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                listed.join(", ")
            );
            return Err(ApiErr::invalid(
                def,
                name,
                vec![Cause::forbidden("metadata.finalizers", &why)],
            ));
        }
    }
    Ok(())
}

/// Being deleted, and held by finalizer `f`.
pub(super) fn deleting_with(o: &Value, f: &str) -> bool {
    meta_str(o, "deletionTimestamp").is_some() && finalizers(o).iter().any(|x| x == f)
}

pub(super) fn owner_refs(o: &Value) -> Vec<Value> {
    o["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub(super) fn ref_uid(r: &Value) -> String {
    r["uid"].as_str().unwrap_or("").to_string()
}

/// `DeleteOptions.propagationPolicy` (and the deprecated `orphanDependents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// None given: the object's own GC finalizer, else the kind's default
    /// (background for every kind served here).
    #[default]
    Default,
    Background,
    Foreground,
    Orphan,
}

pub const ORPHAN_FINALIZER: &str = "orphan";
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
