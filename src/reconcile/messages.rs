//! Condition messages that more than one step of the pass words alike, so
//! a state reads the same whichever step reports it.

use super::observed::DeploymentView;

/// RolledBack's message while no rollback is asked for.
pub(super) const NO_ROLLBACK: &str = "no rollback requested";

/// Progressing=Unknown while the target is paused (9.20): Kubernetes
/// neither rolls out nor judges the deadline until it is resumed.
pub(super) fn paused_message(d: &DeploymentView, version: &str) -> String {
    format!(
        "Deployment {} is paused; the rollout of {version} waits for `kubectl rollout resume deployment/{}`",
        d.name(), d.name()
    )
}
