//! openmed-operator: makes the model version served by an OpenMed REST
//! Deployment declarative. See README.md for the module map.

pub mod backoff;
pub mod cli;
pub mod controller;
pub mod kube;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod reconcile;
pub mod server;
pub mod signals;
pub mod time;
