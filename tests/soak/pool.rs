//! The soak's pool: three namespaces and three names (so the same name lives
//! in several namespaces and collisions are frequent), the versions it sets,
//! and the operator's own names under the soak's short names. Shared with the
//! real control plane's seeded differential (`tests/real/seeded.rs`).

#![allow(dead_code)]

use crate::harness::{BAD, V1, V2};
pub use openmed_operator::model::spec::DEFAULT_CONTAINER as CONTAINER;
pub use openmed_operator::model::{
    CLAIM_LABEL, HASH_ANNOTATION as HASH, MANAGED_BY_LABEL, OWNER_ANNOTATION as OWNER,
    PRELOAD_ENV as PRELOAD, ROLLBACK_ANNOTATION as ROLLBACK_TO,
};

pub const NAMESPACES: [&str; 3] = ["openmed", "team-b", "team-c"];
pub const NAMES: [&str; 3] = ["openmed-service", "ner", "deid"];
pub const V3: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3";
pub const V4: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v4";
pub const LOADABLE: [&str; 4] = [V1, V2, V3, V4];
pub const UNLOADABLE: [&str; 2] = [BAD, "OpenMed/OpenMed-PII-unloadable-v5"];
/// A well-formed version the soak never sets: never retained.
pub const NEVER_SET: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v9";
pub const CLAIM: &str = CLAIM_LABEL.0;
pub const MANAGED_BY: &str = MANAGED_BY_LABEL.0;
