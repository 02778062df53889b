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

mod graph;
mod history;
mod meta;
pub use history::{approx_size, EvKind, HistEvent, Retention};
use meta::*;
pub(super) use meta::{finalizers, gc_finalizers, meta_str};
pub use meta::{random_suffix, random_u64, Propagation, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};

/// (resource key, namespace or "", name)
pub type Key = (String, String, String);

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
    /// Whether a write gives the collector work ([`graph::OwnerGraph`]).
    graph: graph::OwnerGraph,
}

/// What a delete did: the object as it now is (or was), and whether it is gone.
#[derive(Debug)]
pub struct Deleted {
    pub obj: Arc<Value>,
    pub gone: bool,
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
            // Never collected: its writes are thrown away.
            graph: graph::OwnerGraph::default(),
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
            graph: graph::OwnerGraph::default(),
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
        let now_there = (kind != EvKind::Deleted).then_some(&*obj);
        self.gc_dirty |= self.graph.write(old.as_deref(), now_there);
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
mod tests;
