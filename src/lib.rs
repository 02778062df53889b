//! openmed-operator: makes the model version served by an OpenMed REST
//! Deployment declarative. See README.md for the module map.

pub mod backoff;
pub mod kube;
pub mod model;
pub mod reconcile;
