//! How one sync of one resource ended, as the metrics count it.

/// Outcome of one reconcile, for `openmed_operator_reconciles_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Nothing needed writing.
    Unchanged,
    /// Writes were made.
    Applied,
    /// Failed; will be retried with backoff.
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Applied => "applied",
            Outcome::Error => "error",
        }
    }
}
