//! Which resources are settled: their last pass changed nothing, and
//! nothing that pass read has changed since (§6). Each read is kept with
//! the stamp of what it saw ([`crate::runtime::store::Stamp`]), so a change
//! to another resource's objects leaves this one settled: after a busy
//! convergence, a resync passes none of the resources that settled during
//! it (docs/performance.md, idle CPU).

use crate::controller::caches::{CacheRead, Caches};
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

/// A resource whose last pass changed nothing, and what that pass read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settled {
    pub grounds: Grounds,
    pub reads: Box<[CacheRead]>,
}

impl Settled {
    /// Whether every read of this pass of `owner` still holds.
    pub fn holds(&self, caches: &Caches, owner: &ObjectKey) -> bool {
        self.reads.iter().all(|r| caches.still(owner, r))
    }
}
