//! openmed-operator: makes the model version served by an OpenMed REST
//! Deployment declarative. See docs/development.md for the module map.
//!
//! The behaviour is specified in `docs/contract.md`; comments cite it by
//! section: "§6.8" or "step 8" is one step of a reconcile pass, "9.21" or
//! "§9.21" a deliberate improvement, "section 3" what the operator writes.
//!
//! Public: what the binary (`main.rs`) and the tests use. The rest is the
//! crate's own.

pub mod app;
pub mod backoff;
pub(crate) mod certificate;
pub mod cli;
pub mod config;
pub mod controller;
pub(crate) mod foreign;
pub(crate) mod health;
pub mod kube;
pub(crate) mod live_view;
mod lock;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod reconcile;
pub(crate) mod redact;
pub mod release;
pub mod runtime;
pub(crate) mod server;
pub mod signals;
pub(crate) mod time;
pub(crate) mod token_access;
