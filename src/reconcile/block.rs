//! Environmental blocks (docs/contract.md §6.2-§6.4, 9.2, 9.19): why a spec cannot
//! be applied right now. They are reported, never recorded as a failed spec,
//! and clear by themselves when the cause goes.

use crate::foreign::bounded;
use crate::model::status::{EventReason, Reason, MAX_MESSAGE};
use crate::model::OPT_IN_LABEL;

/// Why a spec cannot be applied right now (an environmental block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Block {
    TargetNotFound(String),
    /// The Deployment, the container asked for, the containers it has.
    ContainerNotFound(String, String, Vec<String>),
    TargetConflict(String, String),
    /// The Deployment has not opted in (9.8); true when it is the
    /// operator's own, which never may.
    TargetNotOptedIn(String, bool),
    ConfigMapConflict(String),
    /// A write the API refuses every time, or one the operator knows it
    /// would refuse (9.19): the message says why.
    Refused(RefusedWrite, String),
}

/// Which write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedWrite {
    Deployment,
    ConfigMap,
}

impl Block {
    pub(super) fn reason(&self) -> (Reason, EventReason) {
        match self {
            Block::TargetNotFound(_) => (Reason::TargetNotFound, EventReason::TargetNotFound),
            Block::ContainerNotFound(..) => {
                (Reason::ContainerNotFound, EventReason::ContainerNotFound)
            }
            Block::TargetConflict(..) => (Reason::TargetConflict, EventReason::TargetConflict),
            Block::TargetNotOptedIn(..) => {
                (Reason::TargetNotOptedIn, EventReason::TargetNotOptedIn)
            }
            Block::ConfigMapConflict(_) => {
                (Reason::ConfigMapConflict, EventReason::ConfigMapConflict)
            }
            Block::Refused(RefusedWrite::Deployment, _) => (
                Reason::TargetPatchRejected,
                EventReason::TargetPatchRejected,
            ),
            Block::Refused(RefusedWrite::ConfigMap, _) => {
                (Reason::ConfigMapRejected, EventReason::ConfigMapRejected)
            }
        }
    }

    pub(super) fn message(&self, ns: &str) -> String {
        match self {
            Block::TargetNotFound(d) => format!("Deployment {ns}/{d} not found"),
            Block::ContainerNotFound(d, c, has) => {
                let has: Vec<String> = has.iter().map(|n| format!("{n:?}")).collect();
                format!(
                    "Deployment {ns}/{d} has no container {c:?} (its containers: {})",
                    has.join(", ")
                )
            }
            Block::TargetConflict(d, other) => {
                format!("Deployment {ns}/{d} is managed by OpenMedModel {other}")
            }
            Block::TargetNotOptedIn(d, true) => format!(
                "Deployment {ns}/{d} runs the operator itself and is never a target"
            ),
            Block::TargetNotOptedIn(d, false) => format!(
                "Deployment {ns}/{d} has not opted in: label it with kubectl label deployment -n {ns} {d} {}={}",
                OPT_IN_LABEL.0, OPT_IN_LABEL.1
            ),
            Block::ConfigMapConflict(c) => {
                format!(
                    "ConfigMap {ns}/{c} exists and belongs to someone else; it is left untouched"
                )
            }
            Block::Refused(_, why) => bounded(why, MAX_MESSAGE),
        }
    }
}

pub(super) fn is_block_reason(r: Option<Reason>) -> bool {
    matches!(
        r,
        Some(
            Reason::TargetNotFound
                | Reason::ContainerNotFound
                | Reason::TargetConflict
                | Reason::TargetNotOptedIn
                | Reason::ConfigMapConflict
                | Reason::RollbackTargetUnavailable
                | Reason::InvalidSpec
                | Reason::TargetPatchRejected
                | Reason::ConfigMapRejected
                | Reason::TargetDegraded
        )
    )
}
