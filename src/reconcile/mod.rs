//! The pure core: from what was observed (the OpenMedModel, its Deployment,
//! its ConfigMap, the time) to a plan (writes, status, Events). No sockets;
//! the controller carries plans out.

pub mod delete;
pub mod judge;
pub mod observed;
pub mod patches;
pub mod plan;

pub use observed::{ConfigMapView, DeploymentView, ModelView};
pub use plan::{lookups, plan, plan_refused, EventSpec, Lookups, Observed, Plan, Refused, Write};
