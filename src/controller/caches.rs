//! The caches a sync reads, owned in one place: the stores the watches
//! fill, the Deployments read on demand, and the index of what each owner
//! claims. A pass reads them only through a [`Recorder`], which keeps the
//! stamp of every read it makes: a read cannot go unrecorded, so a resource
//! whose pass changed nothing is skipped only while nothing it read has
//! changed (§6). Others get write-only handles ([`CacheWriters`], the
//! watches' and the tests' door), readers for the live view, and the
//! answers of the operator's own writes.

use super::cache::{AutoscalerView, Fetched, MetaView};
use crate::reconcile::{ConfigMapView, DeploymentView, ModelObject, ModelView};
use crate::runtime::store::Stamp;
use crate::runtime::{ObjectKey, Reader, Store, StoreWriter, Versioned};

/// Declares every store once: its name, its field, the view it keeps and
/// how it is made (indexed or not). The controller's [`Caches`], the
/// write-only [`CacheWriters`], the readiness wait's [`Caches::unsynced`]
/// and the stamps a pass's [`CacheRead`]s are checked against follow from
/// the one list, so a store added there is in all of them.
macro_rules! stores {
    ($($(#[$doc:meta])* $id:ident $field:ident: $view:ty = $make:expr;)*) => {
        /// Which store a [`CacheRead`] read.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum StoreId {
            $($id),*
        }

        /// Every store of the controller, and the Deployments read on
        /// demand.
        pub struct Caches {
            $($(#[$doc])* $field: Store<$view>,)*
            /// Unclaimed Deployments read on demand, reused while their
            /// resourceVersion in `deployment_meta` is unchanged.
            fetched: Fetched,
        }

        /// The write-only ends of the stores, for the watches that fill
        /// them and the tests that seed them.
        pub struct CacheWriters {
            $(pub $field: StoreWriter<$view>,)*
        }

        impl Default for Caches {
            fn default() -> Caches {
                Caches {
                    $($field: $make,)*
                    fetched: Fetched::default(),
                }
            }
        }

        impl Caches {
            pub fn writers(&self) -> CacheWriters {
                CacheWriters {
                    $($field: self.$field.writer(),)*
                }
            }

            /// The list/watch loops of any store that have not listed yet.
            pub fn unsynced(&self) -> Vec<String> {
                [$(self.$field.unsynced()),*].concat()
            }

            /// The stamp of `key` in store `id` now.
            fn stamp(&self, id: StoreId, key: &ObjectKey) -> Option<Stamp> {
                match id {
                    $(StoreId::$id => self.$field.stamp(key)),*
                }
            }

            /// The stamp of index entry `name` in store `id` now.
            fn index_stamp(&self, id: StoreId, name: &str) -> Option<Stamp> {
                match id {
                    $(StoreId::$id => self.$field.index_stamp(name)),*
                }
            }

            /// How many changes store `id` has taken.
            fn changes(&self, id: StoreId) -> u64 {
                match id {
                    $(StoreId::$id => self.$field.changes()),*
                }
            }
        }
    };
}

stores! {
    Models models: ModelView = Store::default();
    /// Deployments the operator has claimed: full (compact) views.
    Deployments deployments: DeploymentView = Store::indexed(deployment_owners);
    /// Every Deployment in scope, metadata only.
    DeploymentMeta deployment_meta: MetaView = Store::default();
    ConfigMaps config_maps: ConfigMapView = Store::indexed(config_map_owner);
    /// HorizontalPodAutoscalers in scope: a Deployment one scales keeps its
    /// replicas (the autoscaler's, not the spec's).
    Autoscalers autoscalers: AutoscalerView = Store::default();
}

/// One cache read of a pass, with the stamp of what it saw (None: it was
/// not there). Every store's reads are one of these three, so a store
/// added to [`stores!`] needs no new kind of read nor of check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheRead {
    /// One object by its key.
    Object(StoreId, ObjectKey, Option<Stamp>),
    /// The objects indexed under the resource's own name.
    OfOwner(StoreId, Option<Stamp>),
    /// Every object: the store's change count.
    Every(StoreId, u64),
}

/// The owners a claimed Deployment names (metadata and pod template): the
/// index by which a pass finds every Deployment its resource still claims.
fn deployment_owners(d: &DeploymentView) -> Vec<String> {
    let mut out: Vec<String> = d.owner.iter().chain(&d.template_owner).cloned().collect();
    out.dedup();
    out
}

/// The owner of one of our ConfigMaps.
fn config_map_owner(c: &ConfigMapView) -> Vec<String> {
    c.owner.iter().cloned().collect()
}

impl Caches {
    /// A pass's way in: every read it makes is recorded.
    pub fn recorder(&self) -> Recorder<'_> {
        Recorder {
            caches: self,
            reads: Vec::new(),
        }
    }

    /// The models, for those that only look (metrics, the live view).
    pub fn model_reader(&self) -> Reader<ModelView> {
        self.models.reader()
    }

    /// The claimed Deployments, for the live view.
    pub fn deployment_reader(&self) -> Reader<DeploymentView> {
        self.deployments.reader()
    }

    /// Every model's key.
    pub fn model_keys(&self) -> Vec<ObjectKey> {
        self.models.keys()
    }

    /// How many models, claimed Deployments and our ConfigMaps are held.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.models.len(),
            self.deployments.len(),
            self.config_maps.len(),
        )
    }

    /// Whether a pass of `owner` would read now what `read` saw.
    pub fn still(&self, owner: &ObjectKey, read: &CacheRead) -> bool {
        match read {
            CacheRead::Object(id, k, s) => self.stamp(*id, k) == *s,
            CacheRead::OfOwner(id, s) => self.index_stamp(*id, owner.as_str()) == *s,
            CacheRead::Every(id, c) => self.changes(*id) == *c,
        }
    }

    /// A model as a write or a read answered, made its view unless the
    /// store holds that version already (its watch echo came first); its
    /// resourceVersion.
    pub fn remember_model(&self, m: ModelObject) -> Option<String> {
        if self
            .models
            .holds(&m.key(), &m.uid, Some(&m.resource_version))
        {
            // Its watch event came first: that view is held already.
            return Some(m.resource_version.clone());
        }
        let m = m.view()?;
        let rv = m.resource_version.clone();
        self.models.put_if_newer(m.key(), m);
        Some(rv)
    }

    /// The model is gone (a read found none).
    pub fn forget_model(&self, key: &ObjectKey) {
        self.models.remove(key);
    }

    /// This incarnation of the model is being deleted by the server: its
    /// last view is never to be cached (docs/contract.md §9.17).
    pub fn forget_model_object(&self, key: &ObjectKey, uid: &str) {
        self.models.remove_object(key, uid);
    }

    /// A ConfigMap as a write answered, kept if it is ours.
    pub fn remember_config_map(&self, cm: ConfigMapView) {
        if cm.managed_by.as_deref() == Some(crate::model::MANAGED_BY_LABEL.1)
            && !cm.name().is_empty()
        {
            self.config_maps.put_if_newer(cm.key(), cm);
        }
    }

    pub fn forget_config_map(&self, key: &ObjectKey) {
        self.config_maps.remove(key);
    }

    /// A Deployment as a write or a read answered: claimed, into its store;
    /// else kept as read on demand. Its metadata too, when `with_meta`.
    pub fn remember_deployment(&self, d: DeploymentView, with_meta: bool) {
        if d.name().is_empty() {
            return;
        }
        let k = d.key();
        // The metadata watch leaves claimed ones out (`AllDeployments`).
        if with_meta && !d.claimed {
            let meta = MetaView {
                resource_version: d.resource_version.clone(),
            };
            self.deployment_meta.put_if_newer(k.clone(), meta);
        }
        if d.claimed {
            self.deployments.put_if_newer(k, d);
        } else {
            self.deployments.remove(&k);
            self.fetched.insert(k, d);
        }
    }

    /// This incarnation of the Deployment is gone (a read found none).
    pub fn forget_deployment(&self, key: &ObjectKey, uid: &str) {
        self.deployment_meta.remove_object(key, uid);
        self.deployments.remove_object(key, uid);
        self.fetched.remove(key);
    }

    /// Whether the Deployment at `key` is cached as claimed.
    pub fn claims(&self, key: &ObjectKey) -> bool {
        self.deployments.contains(key)
    }

    /// The metadata watch saw a Deployment go: its copy read on demand
    /// goes too.
    pub fn forget_fetched(&self, key: &ObjectKey) {
        self.fetched.remove(key);
    }
}

/// The reads of one pass, each kept with the stamp of what it saw.
pub struct Recorder<'a> {
    caches: &'a Caches,
    reads: Vec<CacheRead>,
}

impl Recorder<'_> {
    /// What was read, in order.
    pub fn into_reads(self) -> Vec<CacheRead> {
        self.reads
    }

    /// One object of store `id` (`store`), its read recorded.
    fn object<V: Clone + Versioned>(
        &mut self,
        id: StoreId,
        store: &Store<V>,
        key: &ObjectKey,
    ) -> Option<V> {
        let got = store.get_stamped(key);
        let stamp = got.as_ref().map(|g| g.1);
        self.reads.push(CacheRead::Object(id, key.clone(), stamp));
        got.map(|g| g.0)
    }

    /// The objects of `owner` in store `id` (`store`) that `keep` keeps,
    /// their read recorded.
    fn of_owner<V: Clone + Versioned>(
        &mut self,
        id: StoreId,
        store: &Store<V>,
        owner: &str,
        keep: impl Fn(&V) -> bool,
    ) -> Vec<V> {
        let (got, stamp) = store.by_index_stamped(owner, keep);
        self.reads.push(CacheRead::OfOwner(id, stamp));
        got
    }

    pub fn model(&mut self, key: &ObjectKey) -> Option<ModelView> {
        self.object(StoreId::Models, &self.caches.models, key)
    }

    /// Whether the model is cached, without a copy of it.
    pub fn has_model(&mut self, key: &ObjectKey) -> bool {
        let stamp = self.caches.models.stamp(key);
        let read = CacheRead::Object(StoreId::Models, key.clone(), stamp);
        self.reads.push(read);
        stamp.is_some()
    }

    /// A claimed Deployment. Its copy read on demand, no longer needed,
    /// goes.
    pub fn claimed_deployment(&mut self, key: &ObjectKey) -> Option<DeploymentView> {
        let d = self.object(StoreId::Deployments, &self.caches.deployments, key)?;
        self.caches.fetched.remove(key);
        Some(d)
    }

    /// Whether the metadata watch shows the Deployment, and if it does, its
    /// copy read on demand at that resourceVersion when one is held:
    /// `Some(None)` says it must be read.
    pub fn unclaimed_deployment(&mut self, key: &ObjectKey) -> Option<Option<DeploymentView>> {
        let meta = self.object(StoreId::DeploymentMeta, &self.caches.deployment_meta, key)?;
        Some(self.caches.fetched.get(key, &meta.resource_version))
    }

    /// A Deployment read on demand, kept while its resourceVersion stands.
    pub fn keep_fetched(&self, d: DeploymentView) {
        self.caches.fetched.insert(d.key(), d);
    }

    /// The claimed Deployments of `owner` that `keep` keeps.
    pub fn deployments_of(
        &mut self,
        owner: &str,
        keep: impl Fn(&DeploymentView) -> bool,
    ) -> Vec<DeploymentView> {
        self.of_owner(StoreId::Deployments, &self.caches.deployments, owner, keep)
    }

    pub fn config_map(&mut self, key: &ObjectKey) -> Option<ConfigMapView> {
        self.object(StoreId::ConfigMaps, &self.caches.config_maps, key)
    }

    /// Our ConfigMaps of `owner` that `keep` keeps.
    pub fn config_maps_of(
        &mut self,
        owner: &str,
        keep: impl Fn(&ConfigMapView) -> bool,
    ) -> Vec<ConfigMapView> {
        self.of_owner(StoreId::ConfigMaps, &self.caches.config_maps, owner, keep)
    }

    /// The HorizontalPodAutoscaler scaling Deployment `ns/name`, as
    /// `HorizontalPodAutoscaler/<name>` (the first by name if several).
    pub fn autoscaler_of(&mut self, ns: &str, name: &str) -> Option<String> {
        let changes = CacheRead::Every(StoreId::Autoscalers, self.caches.autoscalers.changes());
        if !self.reads.contains(&changes) {
            self.reads.push(changes);
        }
        let mut by: Vec<String> = self
            .caches
            .autoscalers
            .select(|k, a| k.namespace() == ns && a.deployment.as_deref() == Some(name))
            .into_iter()
            .map(|a| a.name)
            .collect();
        by.sort();
        by.first().map(|n| format!("HorizontalPodAutoscaler/{n}"))
    }
}
