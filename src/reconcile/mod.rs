//! The pure core: from what was observed (the OpenMedModel, its Deployment,
//! its ConfigMap, the time) to a plan (writes, status, Events). No sockets;
//! the controller carries plans out.

mod block;
pub mod delete;
pub mod execute;
mod facts;
pub mod judge;
mod messages;
pub mod observed;
mod pass;
pub mod patches;
pub mod plan;

pub use block::RefusedWrite;
pub use execute::{execute, Cluster, Executed};
pub use observed::{ConfigMapView, DeploymentView, ModelData, ModelObject, ModelView};
pub use pass::{decide, plan_refused};
pub use plan::{lookups, note_autoscaled, EventSpec, Lookups, Observed, Plan, TargetPolicy, Write};
