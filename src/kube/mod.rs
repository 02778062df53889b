//! The raw-HTTP Kubernetes API client. It knows nothing of OpenMedModels.

pub mod client;
pub mod endpoint;
pub mod error;
pub mod fields;
pub mod guard;
pub mod idn;
pub mod key;
pub mod names;
pub mod path;
pub mod proxy;
pub mod ratelimit;
pub mod shape;
pub mod watch;

pub use client::{
    Client, ClientConfig, ListParams, ObjectList, PatchType, Preconditions, Retry, Verb,
    WatchParams,
};
pub use endpoint::{Endpoint, EndpointOptions, Secret};
pub use error::{ApiError, ApiReason, Error, Result};
pub use path::{ResourcePath, ResourceType};
pub use watch::{WatchEvent, WatchStream};
