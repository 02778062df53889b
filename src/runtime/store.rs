//! A cache of compact views keyed by [`ObjectKey`], in three handles:
//! a [`StoreWriter`] for the list/watch loops that fill it (the one way their
//! events come in), a [`Reader`] for whoever only looks, and the [`Store`]
//! itself for its owner, which reads and also keeps the answers to its own
//! writes (kube-runtime's `reflector::store` splits it the same way).
//!
//! Both ways in keep one rule (docs/contract.md §9.17): never backwards. A
//! view older by generation never replaces a newer one, and a deletion
//! removes only the incarnation (uid) it names.

use super::object::{newer, regresses, ObjectKey, Versioned};
use crate::lock::lock;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

/// What one applied event did to a store entry: the views shared with the
/// store, not copies (a copy a watch event was a tenth of the allocations
/// of a pass, docs/performance.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Change<V> {
    pub key: ObjectKey,
    pub old: Option<Arc<V>>,
    pub new: Option<Arc<V>>,
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

/// A view refused because the store holds a newer one of the same object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale;

/// The values indexed under a name (client-go's `Indexer`): a pass finds
/// the few objects of one owner without looking at thousands.
pub type IndexFn<V> = fn(&V) -> Vec<String>;

/// The map of a store and its index, changed only together.
///
/// Values are behind a pointer: a hash table keeps up to twice as many
/// slots as entries, and an empty slot costs a pointer, not a view
/// (docs/performance.md, memory per resource). Shared ones, so that what
/// an event changed is handed on without a copy ([`Change`]).
struct Items<V> {
    map: HashMap<ObjectKey, Entry<V>>,
    /// Bumped by every change: equal counts mean nothing changed between.
    changes: u64,
    /// Name -> the keys indexed under it: a few per name, so a short list
    /// (a hash set per name would cost a table for its one key).
    index: HashMap<String, Names>,
    index_fn: Option<IndexFn<V>>,
}

/// One object held, and the change that put it there.
struct Entry<V> {
    view: Arc<V>,
    stamp: Stamp,
}

/// The keys under one index name, and the last change to any of them or
/// to which they are.
#[derive(Default)]
struct Names {
    keys: Vec<ObjectKey>,
    stamp: Stamp,
}

/// Which change of a store last touched an entry: two equal readings of
/// an entry's stamp mean it held the same view in between, so a pass that
/// read it would read the same (§6, settled resources).
pub type Stamp = u64;

impl<V> Items<V> {
    fn get(&self, k: &ObjectKey) -> Option<&V> {
        self.map.get(k).map(|e| &*e.view)
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|e| &*e.view)
    }

    fn insert(&mut self, k: ObjectKey, v: Arc<V>) -> Option<Arc<V>> {
        self.changes += 1;
        let stamp = self.changes;
        if let Some(f) = self.index_fn {
            for name in f(&v) {
                let names = self.index.entry(name).or_default();
                names.stamp = stamp;
                if !names.keys.contains(&k) {
                    // Room for one more only: most names index one key.
                    names.keys.reserve_exact(1);
                    names.keys.push(k.clone());
                }
            }
        }
        let old = self.map.insert(k.clone(), Entry { view: v, stamp });
        let old = old.map(|e| e.view);
        self.unindex(&k, old.as_deref());
        old
    }

    fn remove(&mut self, k: &ObjectKey) -> Option<Arc<V>> {
        self.changes += 1;
        let old = self.map.remove(k).map(|e| e.view);
        self.unindex(k, old.as_deref());
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
            if let Some(names) = self.index.get_mut(&name) {
                names.keys.retain(|x| x != k);
                names.stamp = self.changes;
                if names.keys.is_empty() {
                    self.index.remove(&name);
                }
            }
        }
    }
}

/// The uids of deleted objects, the oldest forgotten past a cap. Each is
/// kept as a 64-bit digest keyed per process, not as its text: a watch
/// whose selector an object leaves (a claimed Deployment, from the metadata
/// watch) buries one uid a model (docs/performance.md, memory per
/// resource). A live uid that shares a buried one's digest by chance (odds
/// about 1 in 10^15 at the cap) is only taken from its own watch's events;
/// a neighbour cannot aim at one, the key being random.
struct Tombstones {
    set: HashSet<u64>,
    order: VecDeque<u64>,
    digest: std::hash::RandomState,
}

const TOMBSTONES: usize = 10_000;

impl Default for Tombstones {
    fn default() -> Self {
        Tombstones {
            set: HashSet::new(),
            order: VecDeque::new(),
            digest: std::hash::RandomState::new(),
        }
    }
}

impl Tombstones {
    fn uid_digest(&self, uid: &str) -> u64 {
        use std::hash::BuildHasher;
        self.digest.hash_one(uid)
    }

    fn holds(&self, uid: &str) -> bool {
        !uid.is_empty() && self.set.contains(&self.uid_digest(uid))
    }

    fn lift(&mut self, uid: &str) {
        let d = self.uid_digest(uid);
        if self.set.remove(&d) {
            self.order.retain(|u| *u != d);
        }
    }

    fn bury(&mut self, uid: &str) {
        let d = self.uid_digest(uid);
        if uid.is_empty() || !self.set.insert(d) {
            return;
        }
        self.order.push_back(d);
        while self.order.len() > TOMBSTONES {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// What every handle of one store shares.
struct Shared<V> {
    items: RwLock<Items<V>>,
    /// Every list/watch loop that fills this store (one per namespace
    /// watched), and whether its first list is in. Synced when all are.
    loops: Mutex<HashMap<String, bool>>,
    /// Uids a DELETED event has removed: our write responses and re-reads
    /// never bring them back; only a later event of the same watch does.
    gone: Mutex<Tombstones>,
}

impl<V: Versioned> Shared<V> {
    /// Whether the store holds this incarnation at this resourceVersion: an
    /// object that would change nothing here (one version is one state of
    /// an object), so it need not be made a view. The watch's echo of our
    /// own write and the write's answer arrive in either order.
    fn holds(&self, k: &ObjectKey, uid: &str, version: Option<&str>) -> bool {
        let Some(version) = version.filter(|v| !v.is_empty()) else {
            return false;
        };
        let items = self.read();
        let held = items.map.get(k).map(|e| &e.view);
        held.is_some_and(|v| !uid.is_empty() && v.uid() == uid && v.resource_version() == version)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Items<V>> {
        self.items.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Items<V>> {
        self.items.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Remove `k` only if it is the incarnation `uid` names (or either
    /// side does not know its uid), and remember `uid` as gone.
    fn remove_object(&self, k: &ObjectKey, uid: &str) -> Option<Arc<V>> {
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
}

/// A read-only handle on a store, for whoever only looks (the live view,
/// the metrics). Cheap to clone: every clone reads the same store.
pub struct Reader<V> {
    shared: Arc<Shared<V>>,
}

impl<V> Clone for Reader<V> {
    fn clone(&self) -> Self {
        Reader {
            shared: self.shared.clone(),
        }
    }
}

impl<V: Clone + Versioned> Reader<V> {
    /// A count that grows with every change to the store: two equal
    /// readings mean it held the same objects in between.
    pub fn changes(&self) -> u64 {
        self.shared.read().changes
    }

    /// The values indexed under `name` (see [`Store::indexed`]).
    pub fn by_index(&self, name: &str) -> Vec<V> {
        self.by_index_where(name, |_| true)
    }

    /// The values under index `name` that `keep` keeps: only those are
    /// copied.
    pub fn by_index_where(&self, name: &str, keep: impl Fn(&V) -> bool) -> Vec<V> {
        self.by_index_stamped(name, keep).0
    }

    /// [`Reader::by_index_where`], and the stamp of the name (None: no key
    /// has it), read together.
    pub fn by_index_stamped(
        &self,
        name: &str,
        keep: impl Fn(&V) -> bool,
    ) -> (Vec<V>, Option<Stamp>) {
        let items = self.shared.read();
        let Some(names) = items.index.get(name) else {
            return (Vec::new(), None);
        };
        let values = names
            .keys
            .iter()
            .filter_map(|k| items.get(k).filter(|v| keep(v)).cloned())
            .collect();
        (values, Some(names.stamp))
    }

    /// The stamp of index name `name` now (None: no key has it).
    pub fn index_stamp(&self, name: &str) -> Option<Stamp> {
        self.shared.read().index.get(name).map(|n| n.stamp)
    }

    /// The view of `k` and its stamp, read together.
    pub fn get_stamped(&self, k: &ObjectKey) -> Option<(V, Stamp)> {
        let items = self.shared.read();
        items.map.get(k).map(|e| (V::clone(&e.view), e.stamp))
    }

    /// The stamp of `k` now (None: not held).
    pub fn stamp(&self, k: &ObjectKey) -> Option<Stamp> {
        self.shared.read().map.get(k).map(|e| e.stamp)
    }

    pub fn get(&self, k: &ObjectKey) -> Option<V> {
        self.shared.read().get(k).cloned()
    }

    pub fn contains(&self, k: &ObjectKey) -> bool {
        self.shared.read().map.contains_key(k)
    }

    pub fn keys(&self) -> Vec<ObjectKey> {
        self.shared.read().map.keys().cloned().collect()
    }

    pub fn values(&self) -> Vec<V> {
        self.shared.read().values().cloned().collect()
    }

    /// Look at every value without cloning any (a count at each scrape).
    pub fn for_each(&self, mut f: impl FnMut(&V)) {
        self.shared.read().values().for_each(&mut f);
    }

    /// The values `keep` accepts, cloning only those: cloning every value
    /// to pick a few made a resync cost seconds of CPU (docs/performance.md).
    /// An index, [`Reader::by_index`], avoids even the scan.
    pub fn select(&self, keep: impl Fn(&ObjectKey, &V) -> bool) -> Vec<V> {
        self.shared
            .read()
            .map
            .iter()
            .filter(|(k, e)| keep(k, &e.view))
            .map(|(_, e)| V::clone(&e.view))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.shared.read().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every loop that fills this store has listed once (and there is one).
    pub fn is_synced(&self) -> bool {
        let loops = lock(&self.shared.loops);
        !loops.is_empty() && loops.values().all(|s| *s)
    }

    /// The loops not yet synced, for logs and `/readyz`.
    pub fn unsynced(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.shared.loops)
            .iter()
            .filter(|(_, s)| !**s)
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }
}

/// The store as its owner holds it: every read of a [`Reader`], and the
/// answers to the owner's own writes, so its next pass sees them before
/// the watch does.
pub struct Store<V> {
    reader: Reader<V>,
}

impl<V> std::ops::Deref for Store<V> {
    type Target = Reader<V>;

    fn deref(&self) -> &Reader<V> {
        &self.reader
    }
}

impl<V: Clone + Versioned> Default for Store<V> {
    fn default() -> Self {
        let shared = Shared {
            items: RwLock::new(Items {
                map: HashMap::new(),
                changes: 0,
                index: HashMap::new(),
                index_fn: None,
            }),
            loops: Mutex::new(HashMap::new()),
            gone: Mutex::new(Tombstones::default()),
        };
        Store {
            reader: Reader {
                shared: Arc::new(shared),
            },
        }
    }
}

impl<V: Clone + Versioned> Store<V> {
    /// A store whose values are also found by the names `f` gives them.
    pub fn indexed(f: IndexFn<V>) -> Store<V> {
        let s = Store::default();
        s.shared().write().index_fn = Some(f);
        s
    }

    fn shared(&self) -> &Shared<V> {
        &self.reader.shared
    }

    /// A read-only handle on this store.
    pub fn reader(&self) -> Reader<V> {
        self.reader.clone()
    }

    /// The handle a list/watch loop fills this store through.
    pub fn writer(&self) -> StoreWriter<V> {
        StoreWriter {
            shared: self.reader.shared.clone(),
        }
    }

    /// Whether the store holds this incarnation at this version already
    /// ([`Shared::holds`]): a write's answer its watch echoed first.
    pub fn holds(&self, k: &ObjectKey, uid: &str, version: Option<&str>) -> bool {
        self.shared().holds(k, uid, version)
    }

    /// The response to our own write: kept only if newer than the cache,
    /// so the next pass sees our write even before its watch event.
    pub fn put_if_newer(&self, k: ObjectKey, v: V) -> bool {
        if lock(&self.shared().gone).holds(v.uid()) {
            return false;
        }
        let mut items = self.shared().write();
        let fresher = items
            .get(&k)
            .map(|old| newer(v.resource_version(), old.resource_version()) && !regresses(&v, old))
            .unwrap_or(true);
        if fresher {
            items.insert(k, Arc::new(v));
        }
        fresher
    }

    /// A deletion our own request confirmed: only for the incarnation it
    /// names, as a watch's DELETED event.
    pub fn remove_object(&self, k: &ObjectKey, uid: &str) -> Option<V> {
        self.shared()
            .remove_object(k, uid)
            .map(Arc::unwrap_or_clone)
    }

    pub fn remove(&self, k: &ObjectKey) -> Option<V> {
        self.shared().write().remove(k).map(Arc::unwrap_or_clone)
    }
}

/// The list/watch side of a store: what a loop saw goes in here, and what
/// it changed comes out (kube-runtime's `reflector::store::Writer`).
pub struct StoreWriter<V> {
    shared: Arc<Shared<V>>,
}

impl<V: Clone + PartialEq + Versioned> StoreWriter<V> {
    /// Whether the store holds this incarnation at this version already
    /// ([`Shared::holds`]): a watch's echo of what a write's answer put here.
    pub fn holds(&self, k: &ObjectKey, uid: &str, version: Option<&str>) -> bool {
        self.shared.holds(k, uid, version)
    }

    /// Apply one event and say what changed: the loop that feeds it only
    /// lists, watches and backs off.
    pub fn apply(&self, ev: Event<V>) -> Vec<Change<V>> {
        match ev {
            Event::Applied(key, v) => {
                let v = Arc::new(v);
                match self.put_shared(key.clone(), v.clone()) {
                    Ok(old) if old.as_deref() != Some(&*v) => vec![Change {
                        key,
                        old,
                        new: Some(v),
                    }],
                    Ok(_) => vec![],
                    Err(Stale) => {
                        log::debug!("kept a newer view of {key}");
                        vec![]
                    }
                }
            }
            Event::Deleted(key, uid) => self
                .shared
                .remove_object(&key, &uid)
                .map(|old| Change {
                    key,
                    old: Some(old),
                    new: None,
                })
                .into_iter()
                .collect(),
            Event::Listed(namespace, items) => self.replace(namespace.as_deref(), items),
        }
    }

    /// A watch event: the server's word, unless it is an older view of the
    /// object than one already held (a lagging watch after our own write).
    /// `Err(Stale)` when refused, else what it replaced.
    ///
    /// A watch stream is ordered, so an event for a uid it reported DELETED
    /// means the object came back under the watch's label selector (a
    /// Deployment released and claimed again): it lifts the tombstone.
    pub fn put(&self, k: ObjectKey, v: V) -> Result<Option<V>, Stale> {
        let old = self.put_shared(k, Arc::new(v))?;
        Ok(old.map(Arc::unwrap_or_clone))
    }

    /// [`StoreWriter::put`], sharing the view with the store.
    fn put_shared(&self, k: ObjectKey, v: Arc<V>) -> Result<Option<Arc<V>>, Stale> {
        lock(&self.shared.gone).lift(v.uid());
        let mut items = self.shared.write();
        match items.map.get(&k) {
            Some(old) if regresses(&*v, &old.view) => return Err(Stale),
            // The same view again (a relist, a repeated event): its stamp
            // stays, so what read it is still settled.
            Some(old) if old.view == v => return Ok(Some(old.view.clone())),
            _ => {}
        }
        Ok(items.insert(k, v))
    }

    /// A watch's DELETED event: only for the incarnation it names, so a
    /// late deletion of an object since created again removes nothing.
    pub fn remove_object(&self, k: &ObjectKey, uid: &str) -> Option<V> {
        self.shared.remove_object(k, uid).map(Arc::unwrap_or_clone)
    }

    /// After a list: make the entries of `namespace` (None: all) exactly
    /// `items`, returning what changed.
    pub fn replace(&self, namespace: Option<&str>, items: Vec<(ObjectKey, V)>) -> Vec<Change<V>> {
        let mut map = self.shared.write();
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
            if map
                .get(&k)
                .is_some_and(|old| regresses(&v, old) || *old == v)
            {
                continue;
            }
            let v = Arc::new(v);
            let old = map.insert(k.clone(), v.clone());
            if old.as_deref() != Some(&*v) {
                changes.push(Change {
                    key: k,
                    old,
                    new: Some(v),
                });
            }
        }
        changes
    }

    /// A list/watch loop that will fill this store: the store is not
    /// synced until it has listed (docs/contract.md §6: workers start only
    /// then).
    pub fn register_loop(&self, name: &str) {
        lock(&self.shared.loops)
            .entry(name.to_string())
            .or_insert(false);
    }

    /// `name`'s first list is in.
    pub fn mark_synced(&self, name: &str) {
        lock(&self.shared.loops).insert(name.to_string(), true);
    }
}

#[cfg(test)]
mod tests;
