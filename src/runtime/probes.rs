//! What the runtime's loops need and report, as small interfaces the app
//! implements (its API client, its health checks and its metrics), so that
//! the runtime knows nothing of any of them.

use crate::kube::fields::Decode;
use crate::kube::{Error, ListParams, ObjectList, ResourcePath, WatchParams, WatchStream};
use serde_json::Value;
use std::time::Duration;

/// Lists and watches a collection, as client-go's Reflector takes a
/// `ListerWatcher`: all a reflector asks of the API.
pub trait ListerWatcher: Send + Sync + 'static {
    /// Every object of `path`, page after page, at one resourceVersion.
    fn list_all_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &ListParams,
    ) -> Result<ObjectList<O>, Error>;
    /// A watch of `path` from `params.resource_version`.
    fn watch_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &WatchParams,
    ) -> Result<WatchStream<O>, Error>;
}

/// A loop's signs of life, by its name: what the liveness probe judges.
pub trait Liveness: Send + Sync {
    /// Watch this loop: silent longer than `max_silence`, it is stuck.
    fn register(&self, name: &str, max_silence: Duration);
    /// The loop ended as it should (a worker no longer needed).
    fn unregister(&self, name: &str);
    /// A sign of life: a list or watch that succeeded, work taken.
    fn beat(&self, name: &str);
    /// The loop's watch opened (a sign of life) or ended.
    fn watching(&self, name: &str, open: bool);
    /// The worker waits for work (alive without beats), or took some.
    fn idle(&self, name: &str, idle: bool);
    /// The loop ended when it should not have.
    fn died(&self, name: &str);
    fn list_failed(&self, name: &str);
    fn list_ok(&self, name: &str);
}

/// What the reflectors count, by resource.
pub trait LoopMetrics: Send + Sync {
    fn watch_restarted(&self, resource: &'static str);
    fn relisted(&self, resource: &'static str);
}

/// Reads and writes one Lease object, as client-go's `LeaseLock` does:
/// all leader election asks of the API.
pub trait LeaseClient: Send + Sync {
    fn get(&self, path: &ResourcePath) -> Result<Value, Error>;
    fn create(&self, collection: &ResourcePath, lease: &Value) -> Result<Value, Error>;
    fn update(&self, path: &ResourcePath, lease: &Value) -> Result<Value, Error>;
}

/// Whether this process leads, as the metrics show it.
pub trait LeaderGauge: Send + Sync {
    fn set_leader(&self, leading: bool);
}
