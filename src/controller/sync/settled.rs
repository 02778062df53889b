//! Which resources are settled: their last pass changed nothing, and
//! nothing that pass read has changed since (§6). Each read is kept with
//! the stamp of what it saw ([`crate::runtime::store::Stamp`]), so a change
//! to another resource's objects leaves this one settled: after a busy
//! convergence, a resync passes none of the resources that settled during
//! it (docs/performance.md, idle CPU).

use super::Reconciler;
use crate::runtime::store::Stamp;
use crate::runtime::ObjectKey;

/// What a pass that changed nothing was planned from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grounds {
    /// The caches alone: while what it read stands still, so does its plan.
    Caches,
    /// Also reads of what no cache shows (an owner outside the watched
    /// namespaces, a ConfigMap not ours): a full pass reads them again.
    Reads,
    /// The status reports a foreign ConfigMap of our name, which no cache
    /// holds: every pass reads it again, so such a resource never settles.
    ForeignConfigMap,
}

/// One cache read of a pass, with the stamp of what it saw (None: it was
/// not there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CacheRead {
    Model(ObjectKey, Option<Stamp>),
    Deployment(ObjectKey, Option<Stamp>),
    DeploymentMeta(ObjectKey, Option<Stamp>),
    ConfigMap(ObjectKey, Option<Stamp>),
    /// The claimed Deployments indexed under the resource's own name.
    DeploymentsOfOwner(Option<Stamp>),
    /// Our ConfigMaps indexed under the resource's own name.
    ConfigMapsOfOwner(Option<Stamp>),
    /// Every autoscaler: the store's change count.
    Autoscalers(u64),
}

/// A resource whose last pass changed nothing, and what that pass read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settled {
    pub grounds: Grounds,
    pub reads: Box<[CacheRead]>,
}

impl Reconciler {
    /// Whether a pass of `owner` would read now what `read` saw.
    fn still(&self, owner: &ObjectKey, read: &CacheRead) -> bool {
        match read {
            CacheRead::Model(k, s) => self.models.stamp(k) == *s,
            CacheRead::Deployment(k, s) => self.deployments.stamp(k) == *s,
            CacheRead::DeploymentMeta(k, s) => self.deployment_meta.stamp(k) == *s,
            CacheRead::ConfigMap(k, s) => self.config_maps.stamp(k) == *s,
            CacheRead::DeploymentsOfOwner(s) => self.deployments.index_stamp(owner.as_str()) == *s,
            CacheRead::ConfigMapsOfOwner(s) => self.config_maps.index_stamp(owner.as_str()) == *s,
            CacheRead::Autoscalers(c) => self.autoscalers.changes() == *c,
        }
    }

    /// Whether every read of `settled`, a pass of `owner`, still holds.
    pub(super) fn holds(&self, owner: &ObjectKey, settled: &Settled) -> bool {
        settled.reads.iter().all(|r| self.still(owner, r))
    }
}
