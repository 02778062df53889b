//! The object store: what etcd plus the registry strategies do for us.
//! One global resourceVersion counter, a bounded event history for watches,
//! object metadata kept as the real server keeps it, finalizers, and
//! background garbage collection.

use crate::apiserver::errors::{ApiErr, Cause};
use crate::apiserver::time::rfc3339;
use crate::registry::kinds::{self, FieldValidation};
use crate::registry::resources::{def_from_crd, str_list, Registry, ResourceDef};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// (resource key, namespace or "", name)
pub type Key = (String, String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug, Clone)]
pub struct HistEvent {
    pub rv: u64,
    pub res: String,
    pub ns: String,
    pub kind: EvKind,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
    /// When it happened (for watches that lag, and retention).
    pub at: Instant,
    /// About how many bytes its object holds ([`approx_size`]).
    pub size: usize,
}

/// How much watch history is kept: what happened in the last `window`
/// (the API server compacts etcd every 5 minutes,
/// `--etcd-compaction-interval`), within at most `events` events and
/// about `bytes` bytes of their objects. Older resourceVersions answer 410.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub events: usize,
    pub window: std::time::Duration,
    pub bytes: usize,
}

impl Retention {
    /// Five minutes, within a million events and 256 MiB.
    pub const DEFAULT: Retention = Retention {
        events: 1_000_000,
        window: std::time::Duration::from_secs(300),
        bytes: 256 << 20,
    };
}

/// About how many bytes a JSON value holds in memory: each node, each key
/// and each string counted with a fixed overhead. For the history's bound,
/// not exact.
pub fn approx_size(v: &Value) -> usize {
    match v {
        Value::String(s) => 32 + s.len(),
        Value::Array(a) => 32 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(m) => {
            64 + m
                .iter()
                .map(|(k, v)| 48 + k.len() + approx_size(v))
                .sum::<usize>()
        }
        _ => 16,
    }
}

#[derive(Debug)]
pub struct WriteResult {
    pub obj: Arc<Value>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

pub struct Store {
    pub rv: u64,
    pub objects: BTreeMap<Key, Arc<Value>>,
    pub history: VecDeque<HistEvent>,
    /// Events at or below this resourceVersion are gone from history.
    pub compacted: u64,
    pub retention: Retention,
    /// The sum of the retained events' sizes.
    history_bytes: usize,
    pub registry: Registry,
    pub gc_dirty: bool,
}

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

fn new_uid() -> String {
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

fn meta_owned(obj: &Value, k: &str) -> String {
    meta_str(obj, k).unwrap_or("").to_string()
}

pub(super) fn meta_str<'a>(obj: &'a Value, k: &str) -> Option<&'a str> {
    obj["metadata"][k].as_str()
}

pub(super) fn finalizers(obj: &Value) -> Vec<String> {
    str_list(obj["metadata"].get("finalizers"))
}

/// Equal apart from bookkeeping the server itself maintains.
fn same_content(a: &Value, b: &Value) -> bool {
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
fn spec_changed(def: &ResourceDef, old: &Value, new: &Value) -> bool {
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

/// What a delete did: the object as it now is (or was), and whether it is gone.
#[derive(Debug)]
pub struct Deleted {
    pub obj: Arc<Value>,
    pub gone: bool,
}

/// `deletionFinalizersForGarbageCollection` (generic registry store.go):
/// the finalizers an object gets when deleted with `p`.
pub(super) fn gc_finalizers(current: &[String], p: Propagation) -> Vec<String> {
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
fn name_for_create(obj: &mut Value) -> String {
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
fn reset_for_create(def: &ResourceDef, obj: &mut Value, now: SystemTime) {
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
fn check_update_version(
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
fn prepare_for_update(def: &ResourceDef, old: &Value, new: Value, status_only: bool) -> Value {
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
fn keep_system_fields(old: &Value, result: &mut Value) {
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
fn check_no_new_finalizers(
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
fn deleting_with(o: &Value, f: &str) -> bool {
    meta_str(o, "deletionTimestamp").is_some() && finalizers(o).iter().any(|x| x == f)
}

fn owner_refs(o: &Value) -> Vec<Value> {
    o["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn ref_uid(r: &Value) -> String {
    r["uid"].as_str().unwrap_or("").to_string()
}

impl Store {
    /// A copy to try a write on and throw away (a dry run): the objects
    /// (shared, not copied) and the registry, with no history, so nothing
    /// done to it reaches a watch.
    pub fn scratch(&self) -> Store {
        Store {
            rv: self.rv,
            objects: self.objects.clone(),
            history: VecDeque::new(),
            compacted: self.rv,
            retention: self.retention,
            history_bytes: 0,
            registry: self.registry.clone(),
            gc_dirty: false,
        }
    }

    pub fn new(history_cap: usize) -> Store {
        let mut s = Store {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            retention: Retention {
                events: history_cap.max(1),
                ..Retention::DEFAULT
            },
            history_bytes: 0,
            registry: Registry::builtin(),
            gc_dirty: false,
        };
        let now = SystemTime::now();
        if let Some(def) = s.registry.find("", "v1", "namespaces").cloned() {
            for ns in ["default", "kube-system", "kube-public"] {
                let _ = s.create(
                    &def,
                    "",
                    json!({"metadata": {"name": ns}}),
                    FieldValidation::Ignore,
                    now,
                );
            }
        }
        s
    }

    pub(super) fn record(
        &mut self,
        key: Key,
        kind: EvKind,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let obj = Arc::new(obj);
        match kind {
            EvKind::Deleted => {
                self.objects.remove(&key);
            }
            _ => {
                self.objects.insert(key.clone(), obj.clone());
            }
        }
        let size = approx_size(&obj);
        let at = Instant::now();
        self.history.push_back(HistEvent {
            rv: self.rv,
            res: key.0,
            ns: key.1,
            kind,
            obj: obj.clone(),
            old,
            at,
            size,
        });
        self.history_bytes += size;
        self.trim_history(at);
        obj
    }

    /// Drop the events past the [`Retention`]: older than its window, or
    /// beyond its count or bytes (the newest event always stays).
    pub fn trim_history(&mut self, now: Instant) {
        let r = self.retention;
        while self.history.len() > 1 {
            let Some(front) = self.history.front() else {
                break;
            };
            let old = now.saturating_duration_since(front.at) > r.window;
            if !(old || self.history.len() > r.events || self.history_bytes > r.bytes) {
                break;
            }
            if let Some(e) = self.history.pop_front() {
                self.history_bytes -= e.size;
                self.compacted = e.rv;
            }
        }
    }

    /// Forget all history: any watch or continue token older than now is expired.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_bytes = 0;
        self.compacted = self.rv;
    }

    pub fn key(def: &ResourceDef, ns: &str, name: &str) -> Key {
        (
            def.key(),
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        )
    }

    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects.get(&Store::key(def, ns, name)).cloned()
    }

    /// Objects of a kind, in one namespace or all, in key order.
    pub fn list(&self, def: &ResourceDef, ns: Option<&str>) -> Vec<Arc<Value>> {
        let res = def.key();
        let lo = (res.clone(), ns.unwrap_or("").to_string(), String::new());
        self.objects
            .range(lo..)
            .take_while(|((r, n, _), _)| *r == res && ns.map(|x| x == n).unwrap_or(true))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn namespace_exists(&self, ns: &str) -> bool {
        self.objects
            .contains_key(&("/namespaces".to_string(), String::new(), ns.to_string()))
    }

    pub fn create(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        fv: FieldValidation,
        now: SystemTime,
    ) -> Result<WriteResult, ApiErr> {
        if !obj.is_object() {
            return Err(ApiErr::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let name = name_for_create(&mut obj);
        self.place_in_namespace(def, ns, &mut obj)?;
        if self.get(def, ns, &name).is_some() {
            return Err(ApiErr::already_exists(def, &name));
        }
        reset_for_create(def, &mut obj, now);
        let warnings = kinds::prepare(def, &mut obj, None, fv)?;
        if def.plural == "customresourcedefinitions" {
            self.register_crd(&mut obj, &name, now)?;
        }
        let key = Store::key(def, ns, &name);
        let stored = self.record(key, EvKind::Added, obj, None);
        Ok(WriteResult {
            obj: stored,
            warnings,
        })
    }

    /// A namespaced object lives in the request's namespace, which must
    /// exist (and match the body's, if it names one); a cluster-scoped one
    /// loses any namespace.
    fn place_in_namespace(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: &mut Value,
    ) -> Result<(), ApiErr> {
        if def.namespaced {
            if let Some(body_ns) = meta_str(obj, "namespace").filter(|n| !n.is_empty()) {
                if body_ns != ns {
                    return Err(ApiErr::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
            obj["metadata"]["namespace"] = json!(ns);
            if !self.namespace_exists(ns) {
                let nsdef = self.registry.find("", "v1", "namespaces").cloned();
                if let Some(nsdef) = nsdef {
                    return Err(ApiErr::not_found(&nsdef, ns));
                }
            }
            self.admit_in_namespace(def, ns, obj)?;
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        Ok(())
    }

    fn register_crd(&mut self, crd: &mut Value, name: &str, now: SystemTime) -> Result<(), ApiErr> {
        let new_def = def_from_crd(crd);
        if let Some(existing) = self.registry.by_key(&new_def.key()) {
            if !existing.custom {
                let crd_def = self
                    .registry
                    .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
                    .cloned();
                if let Some(crd_def) = crd_def {
                    return Err(ApiErr::invalid(
                        &crd_def,
                        name,
                        vec![Cause::invalid(
                            "spec.group",
                            &json!(new_def.group),
                            "conflicts with a built-in group",
                        )],
                    ));
                }
            }
        }
        crd["status"] = kinds::established_crd_status(crd, &rfc3339(now));
        self.read_with_schema(&new_def);
        self.registry.add(new_def);
        Ok(())
    }

    /// Stored custom resources as they read under a changed schema: unknown
    /// fields pruned and defaults filled in, as the custom resource storage
    /// decoder does on every read from etcd (`customresource_handler`'s
    /// `schemaCoercingDecoder` and `unstructuredDefaulter`). Nothing is
    /// written: no new resourceVersion, no watch event.
    fn read_with_schema(&mut self, def: &ResourceDef) {
        let Some(schema) = def.versions.first().and_then(|v| def.schemas.get(v)) else {
            return;
        };
        let res = def.key();
        let mine = self.objects.iter_mut().filter(|(k, _)| k.0 == res);
        for obj in mine.map(|(_, o)| o) {
            let mut read = (**obj).clone();
            crate::schema::prune(&mut read, schema, "", true, &mut Vec::new());
            crate::schema::apply_defaults(&mut read, schema);
            if read != **obj {
                *obj = Arc::new(read);
            }
        }
    }

    /// Replace an object (PUT, or the result of a patch). With `status_only`
    /// only `.status` is taken from `new`; otherwise `.status` is kept when
    /// the kind has a status subresource.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mut new: Value,
        status_only: bool,
        fv: FieldValidation,
        require_rv: bool,
        now: SystemTime,
    ) -> Result<WriteResult, ApiErr> {
        let old = self
            .get(def, ns, name)
            .ok_or_else(|| ApiErr::not_found(def, name))?;
        if !new.is_object() {
            return Err(ApiErr::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        check_update_version(def, name, &old, &new, require_rv)?;
        let mut result = prepare_for_update(def, &old, new, status_only);
        keep_system_fields(&old, &mut result);
        check_no_new_finalizers(def, name, &old, &result)?;
        let warnings = kinds::prepare(def, &mut result, Some(&old), fv)?;
        if def.generation && !status_only && spec_changed(def, &old, &result) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
            result["metadata"]["generation"] = json!(g + 1);
        }
        if def.plural == "customresourcedefinitions" && !status_only {
            self.register_crd(&mut result, name, now)?;
        }
        if same_content(&old, &result) {
            return Ok(WriteResult { obj: old, warnings });
        }
        let key = Store::key(def, ns, name);
        if meta_str(&result, "deletionTimestamp").is_some() && finalizers(&result).is_empty() {
            let gone = self.purge(key, result);
            return Ok(WriteResult {
                obj: gone,
                warnings,
            });
        }
        let stored = self.record(key, EvKind::Modified, result, Some(old));
        Ok(WriteResult {
            obj: stored,
            warnings,
        })
    }

    /// Delete with the kind's default propagation (finalizers are honoured).
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        pre: &Preconditions,
        now: SystemTime,
    ) -> Result<Arc<Value>, ApiErr> {
        self.delete_with(def, ns, name, pre, Propagation::Default, now)
            .map(|d| d.obj)
    }

    /// The generic registry's `Store.Delete` for kinds without graceful
    /// deletion: preconditions as `rest.BeforeDelete` checks them, the GC
    /// finalizers the propagation asks for, then either gone at once or
    /// marked deleting (`markAsDeleting`: deletionTimestamp now, grace
    /// period 0, generation bumped once) while finalizers remain.
    pub fn delete_with(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        pre: &Preconditions,
        propagation: Propagation,
        now: SystemTime,
    ) -> Result<Deleted, ApiErr> {
        let old = self
            .get(def, ns, name)
            .ok_or_else(|| ApiErr::not_found(def, name))?;
        // CustomResourceDefinitions (and namespaces, for the UID) check
        // preconditions in their own Delete, with the storage layer's words.
        let own_words = matches!(
            def.plural.as_str(),
            "customresourcedefinitions" | "namespaces"
        );
        if let Some(uid) = &pre.uid {
            let actual = meta_str(&old, "uid").unwrap_or("");
            if uid != actual {
                if !own_words {
                    return Err(ApiErr::conflict_on_kind(def, name, &format!("the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated")));
                }
                let mut e = ApiErr::conflict(def, name, "");
                e.message = format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                );
                return Err(e);
            }
        }
        if let Some(rv) = &pre.resource_version {
            let actual = meta_str(&old, "resourceVersion").unwrap_or("");
            if rv != actual {
                if !own_words {
                    return Err(ApiErr::conflict_on_kind(def, name, &format!("the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified")));
                }
                let mut e = ApiErr::conflict(def, name, "");
                e.message = format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}");
                return Err(e);
            }
        }
        let key = Store::key(def, ns, name);
        if def.key() == "/namespaces" && super::namespaces::held(&old) {
            return Ok(self.terminate_namespace(key, &old, propagation, now));
        }
        let wanted = gc_finalizers(&finalizers(&old), propagation);
        if wanted.is_empty() {
            let last = (*old).clone();
            return Ok(Deleted {
                obj: self.purge(key, last),
                gone: true,
            });
        }
        let mut next = (*old).clone();
        next["metadata"]["finalizers"] = json!(wanted);
        if meta_str(&old, "deletionTimestamp").is_none() {
            next["metadata"]["deletionTimestamp"] = json!(rfc3339(now));
            if let Some(g) = old["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
                next["metadata"]["generation"] = json!(g + 1);
            }
        }
        next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if same_content(&old, &next) {
            return Ok(Deleted {
                obj: old,
                gone: false,
            });
        }
        self.gc_dirty = true;
        Ok(Deleted {
            obj: self.record(key, EvKind::Modified, next, Some(old)),
            gone: false,
        })
    }

    /// Remove for good (DELETED event), cascading for CRDs and namespaces.
    pub(super) fn purge(&mut self, key: Key, last: Value) -> Arc<Value> {
        let old = self.objects.get(&key).cloned();
        let gone = self.record(key.clone(), EvKind::Deleted, last, old);
        self.gc_dirty = true;
        if key.0 == "apiextensions.k8s.io/customresourcedefinitions" {
            let res = format!(
                "{}/{}",
                gone["spec"]["group"].as_str().unwrap_or(""),
                gone["spec"]["names"]["plural"].as_str().unwrap_or("")
            );
            let doomed: Vec<Key> = self
                .objects
                .keys()
                .filter(|k| k.0 == res)
                .cloned()
                .collect();
            for k in doomed {
                if let Some(o) = self.objects.get(&k).map(|o| (**o).clone()) {
                    self.purge(k, o);
                }
            }
            self.registry.remove(&res);
        }
        if key.0 == "/namespaces" {
            let doomed: Vec<Key> = self
                .objects
                .keys()
                .filter(|k| k.1 == key.2)
                .cloned()
                .collect();
            for k in doomed {
                if let Some(o) = self.objects.get(&k).map(|o| (**o).clone()) {
                    self.purge(k, o);
                }
            }
        }
        gone
    }

    /// The garbage collector (pkg/controller/garbagecollector), one pass:
    /// `attemptToDeleteItem` for dependents (references to owners that are
    /// gone or waiting for their dependents are dropped while a solid owner
    /// remains; with none left the dependent is deleted, in the foreground if
    /// an owner waits for it and it has dependents of its own),
    /// `orphanDependents` for owners deleted with the `orphan` finalizer and
    /// `processDeletingDependentsItem` for owners deleted in the foreground
    /// (their finalizer goes once no dependent blocks them).
    pub fn gc(&mut self, now: SystemTime) {
        if !self.gc_dirty {
            return;
        }
        self.gc_dirty = false;
        self.attempt_to_delete_dependents(now);
        self.process_deleting_owners();
        self.finish_namespaces(now);
        // Work left for the next pass: a foreground owner still waiting.
        if self.objects.values().any(|o| {
            deleting_with(o, ORPHAN_FINALIZER)
                || deleting_with(o, FOREGROUND_FINALIZER)
                || super::namespaces::terminating(o)
        }) {
            self.gc_dirty = true;
        }
    }

    /// `attemptToDeleteItem` for every object with owner references.
    fn attempt_to_delete_dependents(&mut self, now: SystemTime) {
        // uid → waiting for its dependents (foreground deletion).
        let owners: HashMap<String, bool> = self
            .objects
            .values()
            .filter_map(|o| {
                meta_str(o, "uid").map(|u| (u.to_string(), deleting_with(o, FOREGROUND_FINALIZER)))
            })
            .collect();
        let referenced: HashSet<String> = self
            .objects
            .values()
            .flat_map(|o| owner_refs(o).iter().map(ref_uid).collect::<Vec<_>>())
            .collect();
        let snapshot: Vec<(Key, Arc<Value>)> = self
            .objects
            .iter()
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, obj) in &snapshot {
            let refs = owner_refs(obj);
            if refs.is_empty() {
                continue;
            }
            let solid: Vec<Value> = refs
                .iter()
                .filter(|r| owners.get(&ref_uid(r)) == Some(&false))
                .cloned()
                .collect();
            if solid.len() == refs.len() {
                continue;
            }
            let Some(def) = self.registry.by_key(&key.0).cloned() else {
                continue;
            };
            if !solid.is_empty() {
                let mut next = (**obj).clone();
                next["metadata"]["ownerReferences"] = json!(solid);
                self.record(key.clone(), EvKind::Modified, next, Some(obj.clone()));
                continue;
            }
            let waited_on = refs.iter().any(|r| owners.get(&ref_uid(r)) == Some(&true));
            let has_dependents = meta_str(obj, "uid").is_some_and(|u| referenced.contains(u));
            let p = if waited_on && has_dependents {
                Propagation::Foreground
            } else {
                Propagation::Default
            };
            let pre = Preconditions::default();
            let _ = self.delete_with(&def, &key.1, &key.2, &pre, p, now);
        }
    }

    /// Owners deleted with a GC finalizer: `orphanDependents` for the
    /// `orphan` one, `processDeletingDependentsItem` for the foreground one.
    fn process_deleting_owners(&mut self) {
        // Owners deleted with a GC finalizer, as they now are.
        let owners: Vec<(Key, Arc<Value>)> = self
            .objects
            .iter()
            .filter(|(_, o)| {
                deleting_with(o, ORPHAN_FINALIZER) || deleting_with(o, FOREGROUND_FINALIZER)
            })
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, owner) in owners {
            let uid = meta_str(&owner, "uid").unwrap_or("").to_string();
            let dependents: Vec<(Key, Arc<Value>)> = self
                .objects
                .iter()
                .filter(|(_, o)| owner_refs(o).iter().any(|r| ref_uid(r) == uid))
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            if deleting_with(&owner, ORPHAN_FINALIZER) {
                self.orphan_dependents(&uid, dependents);
                self.drop_finalizer(key, &owner, ORPHAN_FINALIZER);
                continue;
            }
            let blocked = dependents.iter().any(|(_, d)| {
                owner_refs(d)
                    .iter()
                    .any(|r| ref_uid(r) == uid && r["blockOwnerDeletion"].as_bool() == Some(true))
            });
            if !blocked {
                self.drop_finalizer(key, &owner, FOREGROUND_FINALIZER);
            }
        }
    }

    /// Drop the references to owner `uid` from its dependents.
    fn orphan_dependents(&mut self, uid: &str, dependents: Vec<(Key, Arc<Value>)>) {
        for (dkey, dep) in dependents {
            let mut next = (*dep).clone();
            let kept: Vec<Value> = owner_refs(&dep)
                .into_iter()
                .filter(|r| ref_uid(r) != uid)
                .collect();
            if kept.is_empty() {
                if let Some(m) = next["metadata"].as_object_mut() {
                    m.remove("ownerReferences");
                }
            } else {
                next["metadata"]["ownerReferences"] = json!(kept);
            }
            self.record(dkey, EvKind::Modified, next, Some(dep));
        }
    }

    /// The garbage collector's finalizer removal: the object goes once its
    /// last finalizer does (the store's update path).
    fn drop_finalizer(&mut self, key: Key, obj: &Arc<Value>, f: &str) {
        let mut next = (**obj).clone();
        let left: Vec<String> = finalizers(obj).into_iter().filter(|x| x != f).collect();
        next["metadata"]["finalizers"] = json!(left);
        if left.is_empty() {
            if let Some(m) = next["metadata"].as_object_mut() {
                m.remove("finalizers");
            }
            self.purge(key, next);
        } else {
            self.record(key, EvKind::Modified, next, Some(obj.clone()));
        }
    }

    /// Objects of a kind as they were at resourceVersion `rv`, in key
    /// order: today's, with every change after `rv` undone (an object's
    /// first later event gives its state then: absent if it was added,
    /// else the event's previous object). None once that history is gone.
    /// A paged list is such a snapshot at its first page's revision (etcd3
    /// store's `GetList` reads every page at that revision).
    pub fn list_at(&self, def: &ResourceDef, ns: Option<&str>, rv: u64) -> Option<Vec<Arc<Value>>> {
        if rv < self.compacted {
            return None;
        }
        let res = def.key();
        let mut at: BTreeMap<(String, String), Option<Arc<Value>>> = self
            .list(def, ns)
            .into_iter()
            .map(|o| {
                (
                    (meta_owned(&o, "namespace"), meta_owned(&o, "name")),
                    Some(o),
                )
            })
            .collect();
        let start = self.history.partition_point(|e| e.rv <= rv);
        let mut undone = HashSet::new();
        for e in self.history.range(start..) {
            if e.res != res || ns.is_some_and(|n| n != e.ns) {
                continue;
            }
            let key = (e.ns.clone(), meta_owned(&e.obj, "name"));
            if undone.insert(key.clone()) {
                let before = match e.kind {
                    EvKind::Added => None,
                    _ => e.old.clone(),
                };
                at.insert(key, before);
            }
        }
        Some(at.into_values().flatten().collect())
    }

    /// History after `cursor`, or None if some of it has been compacted away.
    pub fn events_after(&self, cursor: u64) -> Option<Vec<HistEvent>> {
        if cursor < self.compacted {
            return None;
        }
        let start = self.history.partition_point(|e| e.rv <= cursor);
        Some(self.history.range(start..).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
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
}
