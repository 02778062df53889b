//! The controller runtime: the parts of a Kubernetes controller that know
//! nothing of the resources it manages (kube-runtime's, client-go's
//! `tools/cache` and `workqueue`). The controller (`crate::controller`)
//! says what to watch and what a change wakes; this module lists and
//! watches ([`watcher`], driven by [`reflector`]), caches ([`store`]),
//! queues keys with per-key backoff ([`queue`]) for a pool of threads that
//! grows with the work ([`workers`]), decides when a loop tries
//! again ([`reconnect`]), and stops every loop at once ([`stop`]).

pub mod leader;
pub mod object;
pub mod probes;
pub mod queue;
pub mod reconnect;
pub mod reflector;
pub mod stop;
pub mod store;
pub mod watcher;
pub mod workers;

pub use object::{newer, regresses, Item, ObjectKey, Versioned};
pub use probes::{LeaderGauge, LeaseClient, ListerWatcher, Liveness, LoopMetrics};
pub use stop::Stop;
pub use store::{Change, Event, IndexFn, Reader, Stale, Store, StoreWriter};
