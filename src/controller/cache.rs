//! Caches filled by list+watch: compact views keyed by (namespace, name).

use crate::lock::lock;
use crate::reconcile::{ConfigMapView, DeploymentView, ModelView};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, RwLock};

/// Where an object lives: namespace (empty for cluster-scoped) and name.
///
/// One shared allocation, `namespace/name`: a resource's key sits in a
/// dozen maps (caches, indexes, the queue, the settled set), and clones
/// share it instead of copying two strings each.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    text: std::sync::Arc<str>,
    /// Where the namespace ends in `text`.
    split: usize,
}

impl ObjectKey {
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> ObjectKey {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        ObjectKey {
            text: format!("{namespace}/{name}").into(),
            split: namespace.len(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.text[..self.split]
    }

    pub fn name(&self) -> &str {
        &self.text[self.split + 1..]
    }

    /// `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key of a JSON object, from its metadata.
    pub fn of(o: &serde_json::Value) -> Option<ObjectKey> {
        let name = o["metadata"]["name"].as_str()?;
        Some(ObjectKey::new(
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            name,
        ))
    }
}

/// By namespace, then name (not by the joined text: `a-b/x` sorts after
/// `a/x`).
impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectKey")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .finish()
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a store compares to keep the newer of two views of one object
/// (docs/contract.md §9.17).
pub trait Versioned {
    fn resource_version(&self) -> &str;
    /// `metadata.uid`, when the view keeps it.
    fn uid(&self) -> &str {
        ""
    }
    /// The object's uid and the ordered counters it carries, if any
    /// (`metadata.generation`, and `status.observedGeneration` where the
    /// status has one): resourceVersions are opaque, these are not.
    fn order(&self) -> Option<(&str, i64, i64)> {
        None
    }
}

/// `new` is an older view of the same object than `old` (9.17): never let
/// it replace `old`, whatever order the watch and our writes deliver them in.
pub fn regresses<V: Versioned>(new: &V, old: &V) -> bool {
    match (new.order(), old.order()) {
        (Some((uid, g, o)), Some((old_uid, old_g, old_o))) => {
            uid == old_uid && !uid.is_empty() && (g, o) < (old_g, old_o)
        }
        _ => false,
    }
}

/// Each cached object's key in its store, from its own namespace and name.
macro_rules! keyed {
    ($($view:ty),*) => {$(
        impl $view {
            pub fn key(&self) -> ObjectKey {
                ObjectKey::new(&self.namespace, &self.name)
            }
        }
    )*};
}
keyed!(ModelView, DeploymentView, ConfigMapView);

impl Versioned for ModelView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn order(&self) -> Option<(&str, i64, i64)> {
        Some((&self.uid, self.generation, 0))
    }
}
impl Versioned for DeploymentView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn order(&self) -> Option<(&str, i64, i64)> {
        Some((&self.uid, self.generation, self.observed_generation))
    }
}
impl Versioned for ConfigMapView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
}

/// What the operator keeps of a HorizontalPodAutoscaler: the Deployment it
/// scales, if it scales one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerView {
    pub name: String,
    pub resource_version: String,
    /// `spec.scaleTargetRef.name` when its kind is Deployment (apps group).
    pub deployment: Option<String>,
}

impl AutoscalerView {
    pub fn from_json(v: &serde_json::Value) -> Option<AutoscalerView> {
        let target = &v["spec"]["scaleTargetRef"];
        let apps = target["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("apps/"));
        Some(AutoscalerView {
            name: v["metadata"]["name"].as_str()?.to_string(),
            resource_version: v["metadata"]["resourceVersion"].as_str()?.to_string(),
            deployment: (apps && target["kind"] == "Deployment")
                .then(|| target["name"].as_str().map(str::to_string))
                .flatten(),
        })
    }
}

impl Versioned for AutoscalerView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// What the cheap metadata-only watch keeps of every Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaView {
    pub resource_version: String,
    pub claimed: bool,
}

impl Versioned for MetaView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// Unclaimed Deployments read on demand (not watched in full), each reused
/// while the metadata watch shows the same resourceVersion. Most are
/// claimed soon after and dropped; the table shrinks with them, so the
/// burst of a cold start does not stay resident as empty slots.
#[derive(Default)]
pub struct Fetched(Mutex<HashMap<ObjectKey, Box<DeploymentView>>>);

impl Fetched {
    /// The copy read at `resource_version`, if that is the one held.
    pub fn get(&self, k: &ObjectKey, resource_version: &str) -> Option<DeploymentView> {
        lock(&self.0)
            .get(k)
            .filter(|d| d.resource_version == resource_version)
            .map(|d| DeploymentView::clone(d))
    }

    pub fn insert(&self, k: ObjectKey, d: DeploymentView) {
        lock(&self.0).insert(k, Box::new(d));
    }

    pub fn remove(&self, k: &ObjectKey) {
        let mut map = lock(&self.0);
        if map.remove(k).is_some() && map.capacity() > 4 * map.len().max(8) {
            map.shrink_to_fit();
        }
    }
}

/// Whether resourceVersion `a` is newer than `b`. Kubernetes calls them
/// opaque; in practice they are etcd revisions, and this is only used to
/// avoid putting an older copy from our own write over a newer watch event.
pub fn newer(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x > y,
        _ => false,
    }
}

/// What one applied event did to a store entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Change<V> {
    pub key: ObjectKey,
    pub old: Option<V>,
    pub new: Option<V>,
}

/// One thing a list/watch loop saw, ready to apply to a store.
#[derive(Debug, Clone)]
pub enum Event<V> {
    /// ADDED or MODIFIED.
    Applied(ObjectKey, V),
    /// DELETED, with the uid of the incarnation that went.
    Deleted(ObjectKey, String),
    /// A (re)list of one namespace (None: all): the whole truth for it.
    Listed(Option<String>, Vec<(ObjectKey, V)>),
}

/// Apply one event to a store and say what changed (kube-runtime's
/// `reflector::store::apply_watcher_event`): the loop that feeds it only
/// lists, watches and backs off.
pub fn apply_event<V: Clone + PartialEq + Versioned>(
    store: &Store<V>,
    ev: Event<V>,
) -> Vec<Change<V>> {
    match ev {
        Event::Applied(key, v) => match store.put(key.clone(), v.clone()) {
            Ok(old) if old.as_ref() != Some(&v) => vec![Change {
                key,
                old,
                new: Some(v),
            }],
            Ok(_) => vec![],
            Err(Stale) => {
                log::debug!("kept a newer view of {key}");
                vec![]
            }
        },
        Event::Deleted(key, uid) => store
            .remove_object(&key, &uid)
            .map(|old| Change {
                key,
                old: Some(old),
                new: None,
            })
            .into_iter()
            .collect(),
        Event::Listed(namespace, items) => store.replace(namespace.as_deref(), items),
    }
}

/// A view refused because the store holds a newer one of the same object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale;

/// The values indexed under a name (client-go's `Indexer`): a pass finds
/// the few objects of one owner without looking at thousands.
pub type IndexFn<V> = fn(&V) -> Vec<String>;

/// The map of a [`Store`] and its index, changed only together.
///
/// Values are boxed: a hash table keeps up to twice as many slots as
/// entries, and an empty slot of a boxed map costs a pointer, not a view
/// (docs/performance.md, memory per resource).
struct Items<V> {
    map: HashMap<ObjectKey, Box<V>>,
    /// Bumped by every change: equal counts mean nothing changed between.
    changes: u64,
    /// Name -> the keys indexed under it: a few per name, so a short list
    /// (a hash set per name would cost a table for its one key).
    index: HashMap<String, Vec<ObjectKey>>,
    index_fn: Option<IndexFn<V>>,
}

impl<V> Items<V> {
    fn get(&self, k: &ObjectKey) -> Option<&V> {
        self.map.get(k).map(|b| &**b)
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|b| &**b)
    }

    fn insert(&mut self, k: ObjectKey, v: V) -> Option<V> {
        self.changes += 1;
        if let Some(f) = self.index_fn {
            for name in f(&v) {
                let keys = self.index.entry(name).or_default();
                if !keys.contains(&k) {
                    keys.push(k.clone());
                }
            }
        }
        let old = self.map.insert(k.clone(), Box::new(v)).map(|b| *b);
        self.unindex(&k, old.as_ref());
        old
    }

    fn remove(&mut self, k: &ObjectKey) -> Option<V> {
        self.changes += 1;
        let old = self.map.remove(k).map(|b| *b);
        self.unindex(k, old.as_ref());
        old
    }

    /// Drop `k` from the names `old` was indexed under and the value now
    /// held is not.
    fn unindex(&mut self, k: &ObjectKey, old: Option<&V>) {
        let (Some(f), Some(old)) = (self.index_fn, old) else {
            return;
        };
        let now = self.get(k).map(f).unwrap_or_default();
        for name in f(old).into_iter().filter(|n| !now.contains(n)) {
            if let Some(keys) = self.index.get_mut(&name) {
                keys.retain(|x| x != k);
                if keys.is_empty() {
                    self.index.remove(&name);
                }
            }
        }
    }
}

pub struct Store<V> {
    items: RwLock<Items<V>>,
    /// Every list/watch loop that fills this store (one per namespace
    /// watched), and whether its first list is in. Synced when all are.
    loops: Mutex<HashMap<String, bool>>,
    /// Uids a DELETED event has removed: our write responses and re-reads
    /// never bring them back; only a later event of the same watch does.
    gone: Mutex<Tombstones>,
}

/// The uids of deleted objects, the oldest forgotten past a cap.
#[derive(Default)]
struct Tombstones {
    set: HashSet<String>,
    order: VecDeque<String>,
}

const TOMBSTONES: usize = 10_000;

impl Tombstones {
    fn lift(&mut self, uid: &str) {
        if self.set.remove(uid) {
            self.order.retain(|u| u != uid);
        }
    }

    fn bury(&mut self, uid: &str) {
        if uid.is_empty() || !self.set.insert(uid.to_string()) {
            return;
        }
        self.order.push_back(uid.to_string());
        while self.order.len() > TOMBSTONES {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

impl<V: Clone + Versioned> Default for Store<V> {
    fn default() -> Self {
        Store {
            items: RwLock::new(Items {
                map: HashMap::new(),
                changes: 0,
                index: HashMap::new(),
                index_fn: None,
            }),
            loops: Mutex::new(HashMap::new()),
            gone: Mutex::new(Tombstones::default()),
        }
    }
}

impl<V: Clone + Versioned> Store<V> {
    /// A store whose values are also found by the names `f` gives them.
    pub fn indexed(f: IndexFn<V>) -> Store<V> {
        let s = Store::default();
        s.write().index_fn = Some(f);
        s
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Items<V>> {
        self.items.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Items<V>> {
        self.items.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A count that grows with every change to the store: two equal
    /// readings mean it held the same objects in between.
    pub fn changes(&self) -> u64 {
        self.read().changes
    }

    /// The values indexed under `name` (see [`Store::indexed`]).
    pub fn by_index(&self, name: &str) -> Vec<V> {
        let items = self.read();
        let Some(keys) = items.index.get(name) else {
            return Vec::new();
        };
        keys.iter().filter_map(|k| items.get(k).cloned()).collect()
    }

    pub fn get(&self, k: &ObjectKey) -> Option<V> {
        self.read().get(k).cloned()
    }

    pub fn contains(&self, k: &ObjectKey) -> bool {
        self.read().map.contains_key(k)
    }

    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read().map.keys().cloned().collect()
    }

    pub fn values(&self) -> Vec<V> {
        self.read().values().cloned().collect()
    }

    /// Look at every value without cloning any (a count at each scrape).
    pub fn for_each(&self, mut f: impl FnMut(&V)) {
        self.read().values().for_each(&mut f);
    }

    /// The values `keep` accepts, cloning only those: cloning every value
    /// to pick a few made a resync cost seconds of CPU (docs/performance.md).
    /// An index, [`Store::by_index`], avoids even the scan.
    pub fn select(&self, keep: impl Fn(&ObjectKey, &V) -> bool) -> Vec<V> {
        self.read()
            .map
            .iter()
            .filter(|(k, v)| keep(k, v))
            .map(|(_, v)| V::clone(v))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.read().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A watch event: the server's word, unless it is an older view of the
    /// object than one already held (a lagging watch after our own write).
    /// `Err(Stale)` when refused, else what it replaced.
    ///
    /// A watch stream is ordered, so an event for a uid it reported DELETED
    /// means the object came back under the watch's label selector (a
    /// Deployment released and claimed again): it lifts the tombstone.
    pub fn put(&self, k: ObjectKey, v: V) -> Result<Option<V>, Stale> {
        lock(&self.gone).lift(v.uid());
        let mut items = self.write();
        if items.get(&k).is_some_and(|old| regresses(&v, old)) {
            return Err(Stale);
        }
        Ok(items.insert(k, v))
    }

    fn is_gone(&self, v: &V) -> bool {
        lock(&self.gone).set.contains(v.uid())
    }

    /// A watch's DELETED event: only for the incarnation it names, so a
    /// late deletion of an object since created again removes nothing.
    pub fn remove_object(&self, k: &ObjectKey, uid: &str) -> Option<V> {
        lock(&self.gone).bury(uid);
        let mut items = self.write();
        let same = items
            .get(k)
            .is_some_and(|old| uid.is_empty() || old.uid().is_empty() || old.uid() == uid);
        if same {
            items.remove(k)
        } else {
            None
        }
    }

    pub fn remove(&self, k: &ObjectKey) -> Option<V> {
        self.write().remove(k)
    }

    /// The response to our own write: kept only if newer than the cache,
    /// so the next pass sees our write even before its watch event.
    pub fn put_if_newer(&self, k: ObjectKey, v: V) -> bool {
        if self.is_gone(&v) {
            return false;
        }
        let mut items = self.write();
        let fresher = items
            .get(&k)
            .map(|old| newer(v.resource_version(), old.resource_version()) && !regresses(&v, old))
            .unwrap_or(true);
        if fresher {
            items.insert(k, v);
        }
        fresher
    }

    /// After a list: make the entries of `namespace` (None: all) exactly
    /// `items`, returning what changed.
    pub fn replace(&self, namespace: Option<&str>, items: Vec<(ObjectKey, V)>) -> Vec<Change<V>>
    where
        V: PartialEq,
    {
        let mut map = self.write();
        let mut changes = Vec::new();
        let fresh: HashMap<ObjectKey, V> = items.into_iter().collect();
        let gone: Vec<ObjectKey> = map
            .map
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.namespace() == ns) && !fresh.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            let old = map.remove(&k);
            changes.push(Change {
                key: k,
                old,
                new: None,
            });
        }
        for (k, v) in fresh {
            if map.get(&k).is_some_and(|old| regresses(&v, old)) {
                continue;
            }
            let old = map.insert(k.clone(), v.clone());
            if old.as_ref() != Some(&v) {
                changes.push(Change {
                    key: k,
                    old,
                    new: Some(v),
                });
            }
        }
        changes
    }

    /// A list/watch loop that will fill this store.
    pub fn register_loop(&self, name: &str) {
        lock(&self.loops).entry(name.to_string()).or_insert(false);
    }

    /// `name`'s first list is in.
    pub fn mark_synced(&self, name: &str) {
        lock(&self.loops).insert(name.to_string(), true);
    }

    /// Every loop that fills this store has listed once (and there is one).
    pub fn is_synced(&self) -> bool {
        let loops = lock(&self.loops);
        !loops.is_empty() && loops.values().all(|s| *s)
    }

    /// The loops not yet synced, for logs and `/readyz`.
    pub fn unsynced(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.loops)
            .iter()
            .filter(|(_, s)| !**s)
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(rv: &str) -> MetaView {
        MetaView {
            resource_version: rv.into(),
            claimed: false,
        }
    }

    fn k(ns: &str, n: &str) -> ObjectKey {
        ObjectKey::new(ns, n)
    }

    #[test]
    fn own_writes_never_regress_the_cache() {
        let s: Store<MetaView> = Store::default();
        s.put(k("a", "x"), mv("10")).unwrap();
        assert!(!s.put_if_newer(k("a", "x"), mv("9")));
        assert!(s.put_if_newer(k("a", "x"), mv("11")));
        assert_eq!(s.get(&k("a", "x")).unwrap().resource_version, "11");
        assert!(s.put_if_newer(k("a", "y"), mv("1")));
    }

    fn model(uid: &str, generation: i64, rv: &str, phase: &str) -> ModelView {
        ModelView::from_json(&serde_json::json!({"metadata": {
            "name": "m", "namespace": "a", "uid": uid, "generation": generation, "resourceVersion": rv},
            "status": {"phase": phase}}))
        .unwrap()
    }

    /// The index follows every change: a new name, a changed one, a
    /// removal, and a list replacing everything.
    #[test]
    fn the_index_follows_puts_removes_and_lists() {
        fn owner(m: &ModelView) -> Vec<String> {
            m.phase
                .map(|p| p.as_str().to_string())
                .into_iter()
                .collect()
        }
        let s: Store<ModelView> = Store::indexed(owner);
        let names = |s: &Store<ModelView>, i: &str| {
            let mut v: Vec<String> = s.by_index(i).into_iter().map(|m| m.uid).collect();
            v.sort();
            v
        };
        s.put(k("a", "m1"), model("u1", 1, "1", "Ready")).unwrap();
        s.put(k("a", "m2"), model("u2", 1, "2", "Ready")).unwrap();
        assert_eq!(names(&s, "Ready"), ["u1", "u2"]);
        s.put(k("a", "m1"), model("u1", 2, "3", "Failed")).unwrap();
        assert_eq!(names(&s, "Ready"), ["u2"]);
        assert_eq!(names(&s, "Failed"), ["u1"]);
        s.remove(&k("a", "m2"));
        assert!(names(&s, "Ready").is_empty());
        s.replace(None, vec![(k("a", "m3"), model("u3", 1, "4", "Ready"))]);
        assert_eq!(names(&s, "Ready"), ["u3"]);
        assert!(names(&s, "Failed").is_empty());
    }

    /// 9.17: a lagging watch never takes a model back to an older spec.
    #[test]
    fn an_older_generation_never_replaces_a_newer_one() {
        let s: Store<ModelView> = Store::default();
        assert!(s.put_if_newer(k("a", "m"), model("u1", 4, "40", "RollingOut")));
        assert_eq!(
            s.put(k("a", "m"), model("u1", 3, "30", "Ready")),
            Err(Stale)
        );
        assert_eq!(s.get(&k("a", "m")).unwrap().generation, 4);
        // The same generation with a new status is taken; so is a new incarnation.
        assert!(s.put(k("a", "m"), model("u1", 4, "41", "Ready")).is_ok());
        assert!(s.put(k("a", "m"), model("u2", 1, "50", "Pending")).is_ok());
        // A late deletion of the old incarnation removes nothing.
        assert!(s.remove_object(&k("a", "m"), "u1").is_none());
        assert!(s.remove_object(&k("a", "m"), "u2").is_some());
        // A relist of an older view keeps the newer one too.
        s.put(k("a", "m"), model("u3", 5, "60", "Ready")).unwrap();
        s.replace(
            Some("a"),
            vec![(k("a", "m"), model("u3", 2, "20", "Ready"))],
        );
        assert_eq!(s.get(&k("a", "m")).unwrap().generation, 5);
    }

    /// A DELETED event is final for that uid against our own write
    /// responses and re-reads (docs/contract.md §9.17: a deletion removes
    /// the incarnation it names); only a later event of the same watch
    /// brings it back. The store is synced only when every loop filling it
    /// has listed (§6: workers start only then).
    #[test]
    fn deletes_are_final_and_sync_needs_every_loop() {
        let s: Store<ModelView> = Store::default();
        s.put(k("a", "m"), model("u1", 1, "10", "Ready")).unwrap();
        s.remove_object(&k("a", "m"), "u1");
        // Our finalizer-release response arrives after the DELETED event.
        assert!(!s.put_if_newer(k("a", "m"), model("u1", 2, "12", "Ready")));
        assert!(s.is_empty());
        assert!(
            s.put_if_newer(k("a", "m"), model("u2", 1, "20", "Pending")),
            "a new object of that name"
        );
        // A selector watch: the object left the selector (DELETED) and came
        // back (ADDED, same uid). The stream is ordered, so it is live again
        // and our write responses for it are kept.
        s.remove_object(&k("a", "d"), "d1");
        assert!(!s.put_if_newer(k("a", "d"), model("d1", 1, "30", "Ready")));
        assert!(s.put(k("a", "d"), model("d1", 2, "31", "Ready")).is_ok());
        assert!(s.put_if_newer(k("a", "d"), model("d1", 3, "32", "Ready")));
        assert_eq!(s.get(&k("a", "d")).unwrap().generation, 3);
        assert!(!s.is_synced(), "no loop: not synced");
        s.register_loop("models/a");
        s.register_loop("models/b");
        s.mark_synced("models/a");
        assert!(!s.is_synced());
        assert_eq!(s.unsynced(), ["models/b"]);
        s.mark_synced("models/b");
        assert!(s.is_synced());
    }

    /// The applier alone, no server: events in, changes out.
    #[test]
    fn the_applier_reports_exactly_what_changed() {
        let s: Store<ModelView> = Store::default();
        let m1 = model("u1", 1, "10", "Pending");
        let add = apply_event(&s, Event::Applied(k("a", "m"), m1.clone()));
        assert_eq!(
            add,
            vec![Change {
                key: k("a", "m"),
                old: None,
                new: Some(m1.clone())
            }]
        );
        assert!(
            apply_event(&s, Event::Applied(k("a", "m"), m1.clone())).is_empty(),
            "no change"
        );
        let m2 = model("u1", 2, "11", "RollingOut");
        let upd = apply_event(&s, Event::Applied(k("a", "m"), m2.clone()));
        assert_eq!(upd[0].old.as_ref(), Some(&m1));
        assert!(
            apply_event(&s, Event::Applied(k("a", "m"), m1.clone())).is_empty(),
            "older: kept"
        );
        let del = apply_event(&s, Event::Deleted(k("a", "m"), "u1".into()));
        assert_eq!(del[0].new, None);
        // A relist of namespace a: n appears; b is untouched.
        apply_event(
            &s,
            Event::Applied(k("b", "x"), model("u9", 1, "1", "Ready")),
        );
        let n = model("u2", 1, "12", "Ready");
        let listed = apply_event(
            &s,
            Event::Listed(Some("a".into()), vec![(k("a", "n"), n.clone())]),
        );
        assert_eq!(
            listed,
            vec![Change {
                key: k("a", "n"),
                old: None,
                new: Some(n)
            }]
        );
        assert!(s.contains(&k("b", "x")));
        assert_eq!(k("a", "n").to_string(), "a/n");
    }

    #[test]
    fn replace_is_scoped_to_a_namespace_and_reports_changes() {
        let s: Store<MetaView> = Store::default();
        for key in [k("a", "x"), k("a", "gone"), k("b", "y")] {
            s.put(key, mv("1")).unwrap();
        }
        let ch = s.replace(
            Some("a"),
            vec![(k("a", "x"), mv("1")), (k("a", "new"), mv("2"))],
        );
        assert_eq!(ch.len(), 2);
        assert!(s.contains(&k("b", "y")));
        assert!(!s.contains(&k("a", "gone")));
        assert!(s.contains(&k("a", "new")));
        assert!(newer("10", "9") && !newer("9", "10") && !newer("x", "1"));
    }
}
