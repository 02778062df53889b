//! A namespace's life as the API server and the namespace controller lead
//! it: created held by the `kubernetes` finalizer; deleted, it turns
//! `Terminating` (`namespace` storage's `Delete`), refuses new content
//! (the NamespaceLifecycle admission plugin), has its content deleted
//! (`NamespacedResourcesDeleter.Delete`), then drops the finalizer and goes.

use super::store::{finalizers, gc_finalizers, meta_str, Key, Preconditions, Propagation, Store};
use crate::apiserver::errors::{qualified, ApiErr};
use crate::apiserver::time::{parse_rfc3339, rfc3339};
use crate::registry::resources::ResourceDef;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// The `spec.finalizers` entry every namespace is created with.
pub const FINALIZER: &str = "kubernetes";

/// How long after the delete the namespace controller starts on the
/// content: on a real cluster it first rediscovers every resource, so a
/// client deleting the namespace's objects right after the namespace
/// (`kubectl delete -k`) still finds them.
pub const CONTROLLER_DELAY: Duration = Duration::from_secs(1);

/// Still held by the `kubernetes` finalizer.
pub fn held(ns: &Value) -> bool {
    ns["spec"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// A namespace being deleted.
pub fn terminating(o: &Value) -> bool {
    o["kind"] == "Namespace" && meta_str(o, "deletionTimestamp").is_some()
}

impl Store {
    /// The delete of a held namespace: `deletionTimestamp`, phase
    /// `Terminating`, the propagation's finalizers; the namespace stays.
    pub(super) fn terminate_namespace(
        &mut self,
        key: Key,
        old: &std::sync::Arc<Value>,
        propagation: Propagation,
        now: SystemTime,
    ) -> super::store::Deleted {
        let mut next = (**old).clone();
        if meta_str(old, "deletionTimestamp").is_none() {
            next["metadata"]["deletionTimestamp"] = json!(rfc3339(now));
            next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        let wanted = gc_finalizers(&finalizers(old), propagation);
        if !wanted.is_empty() {
            next["metadata"]["finalizers"] = json!(wanted);
        }
        next["status"]["phase"] = json!("Terminating");
        self.gc_dirty = true;
        if next == **old {
            return super::store::Deleted {
                obj: old.clone(),
                gone: false,
            };
        }
        super::store::Deleted {
            obj: self.record(key, super::store::EvKind::Modified, next, Some(old.clone())),
            gone: false,
        }
    }

    /// NamespaceLifecycle: nothing new is created in a namespace being
    /// deleted (403, cause `NamespaceTerminating`).
    pub(super) fn admit_in_namespace(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: &Value,
    ) -> Result<(), ApiErr> {
        let key = ("/namespaces".to_string(), String::new(), ns.to_string());
        if !self.objects.get(&key).is_some_and(|n| terminating(n)) {
            return Ok(());
        }
        let name = meta_str(obj, "name")
            .or(meta_str(obj, "generateName"))
            .unwrap_or("");
        let why = format!(
            "unable to create new content in namespace {ns} because it is being terminated"
        );
        let mut e = ApiErr::new(
            403,
            "Forbidden",
            format!(
                "{} {name:?} is forbidden: {why}",
                qualified(&def.group, &def.plural)
            ),
        );
        e.details = json!({"name": name, "group": def.group, "kind": def.plural,
            "causes": [{"reason": "NamespaceTerminating", "message": why,
                "field": "metadata.namespace"}]});
        Err(e)
    }

    /// The namespace controller's pass: for each namespace deleted at least
    /// [`CONTROLLER_DELAY`] ago, delete what it holds (finalizers are
    /// honoured); once empty, drop the `kubernetes` finalizer, and the
    /// namespace goes when no other finalizer holds it.
    pub(super) fn finish_namespaces(&mut self, now: SystemTime) {
        let due: Vec<(Key, Value)> = self
            .objects
            .iter()
            .filter(|(k, o)| k.0 == "/namespaces" && terminating(o))
            .filter(|(_, o)| {
                let since = meta_str(o, "deletionTimestamp").and_then(parse_rfc3339);
                since.is_some_and(|t| now.duration_since(t).unwrap_or_default() >= CONTROLLER_DELAY)
            })
            .map(|(k, o)| (k.clone(), (**o).clone()))
            .collect();
        for (key, ns) in due {
            let name = key.2.clone();
            let content: Vec<Key> = (self.objects.keys())
                .filter(|k| !k.1.is_empty() && k.1 == name)
                .cloned()
                .collect();
            if content.is_empty() {
                self.release_namespace(key, ns);
                continue;
            }
            for k in content {
                let def = self.registry.by_key(&k.0).cloned();
                let deleting = self
                    .objects
                    .get(&k)
                    .and_then(|o| meta_str(o, "deletionTimestamp").map(|_| ()));
                if let (Some(def), None) = (def, deleting) {
                    let pre = Preconditions::default();
                    let _ = self.delete_with(&def, &k.1, &k.2, &pre, Propagation::Default, now);
                }
            }
        }
    }

    /// An emptied namespace: the `kubernetes` finalizer goes (`/finalize`),
    /// then the namespace, unless another finalizer still holds it.
    fn release_namespace(&mut self, key: Key, ns: Value) {
        let mut next = ns.clone();
        if let Some(f) = next["spec"]["finalizers"].as_array_mut() {
            f.retain(|x| x != FINALIZER);
        }
        if !finalizers(&next).is_empty() {
            if next != ns {
                let old = self.objects.get(&key).cloned();
                self.record(key, super::store::EvKind::Modified, next, old);
            }
            return;
        }
        self.purge(key, next);
    }
}
