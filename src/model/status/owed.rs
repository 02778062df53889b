//! The Events a status still owes (`status.lastEvents`, §2.6).

use super::EventReason;
use serde_json::Value;

/// An Event a transition requires, as `status.lastEvents` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwedEvent {
    pub reason: EventReason,
    pub generation: i64,
    pub message: String,
    /// The name's tag, for a rollback's Events (§2.6).
    pub tag: Option<String>,
}

impl OwedEvent {
    /// Those of a `lastEvents` value; an entry without a known reason or a
    /// generation is skipped.
    pub fn all_of(last_events: Option<&Value>) -> Vec<OwedEvent> {
        last_events
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some(OwedEvent {
                    reason: EventReason::parse(e["reason"].as_str()?)?,
                    generation: e["generation"].as_i64()?,
                    message: e["message"].as_str().unwrap_or("").to_string(),
                    tag: e["tag"].as_str().map(str::to_string),
                })
            })
            .collect()
    }
}
