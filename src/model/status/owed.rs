//! The Events a status still owes (`status.lastEvents`, §2.6).

use super::EventReason;
use serde::{Deserialize, Serialize};

/// An Event a transition requires, as `status.lastEvents` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedEvent {
    pub reason: EventReason,
    pub generation: i64,
    #[serde(default)]
    pub message: String,
    /// The name's tag, for a rollback's Events (§2.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}
