//! Environmental blocks (docs/contract.md §6.2-§6.4, 9.2, 9.19): why a spec cannot
//! be applied right now. They are reported, never recorded as a failed spec,
//! and clear by themselves when the cause goes.

use super::judge::cm_ours;
use super::observed::DeploymentView;
use super::pass::{Pass, NO_ROLLBACK};
use crate::foreign::bounded;
use crate::model::spec::DesiredSpec;
use crate::model::status::states;
use crate::model::status::{EventReason, Phase, Reason, MAX_MESSAGE};
use crate::model::OPT_IN_LABEL;

/// Why a spec cannot be applied right now (an environmental block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Block {
    TargetNotFound(String),
    ContainerNotFound(String, String),
    TargetConflict(String, String),
    /// The Deployment has not opted in (9.8); true when it is the
    /// operator's own, which never may.
    TargetNotOptedIn(String, bool),
    ConfigMapConflict(String),
    /// A write the API refuses every time, or one the operator knows it
    /// would refuse (9.19): the message says why.
    Refused(Refused, String),
}

/// Which write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
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
            Block::Refused(Refused::Deployment, _) => (
                Reason::TargetPatchRejected,
                EventReason::TargetPatchRejected,
            ),
            Block::Refused(Refused::ConfigMap, _) => {
                (Reason::ConfigMapRejected, EventReason::ConfigMapRejected)
            }
        }
    }

    pub(super) fn message(&self, ns: &str) -> String {
        match self {
            Block::TargetNotFound(d) => format!("Deployment {ns}/{d} not found"),
            Block::ContainerNotFound(d, c) => format!("Deployment {ns}/{d} has no container {c:?}"),
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

impl Pass<'_> {
    pub(super) fn blocked(&self, s: &DesiredSpec) -> Option<Block> {
        if let Some(r) = &self.refusal {
            return Some(r.clone());
        }
        let Some(d) = self.obs.deployment(&s.target.name) else {
            return Some(Block::TargetNotFound(s.target.name.clone()));
        };
        if d.container(&s.target.container_name).is_none() {
            return Some(Block::ContainerNotFound(
                d.name.clone(),
                s.target.container_name.clone(),
            ));
        }
        if let Some(other) = self.foreign_owner(d) {
            return Some(Block::TargetConflict(d.name.clone(), other));
        }
        if let Some(own) = self.not_opted_in(d) {
            return Some(Block::TargetNotOptedIn(d.name.clone(), own));
        }
        let deadline = s.rollout.progress_deadline_seconds;
        if d.min_ready_seconds >= deadline {
            let why = format!(
                "Deployment {}/{} has minReadySeconds {}, which must be less than progressDeadlineSeconds {deadline}: the API server would refuse the patch",
                d.namespace, d.name, d.min_ready_seconds
            );
            return Some(Block::Refused(Refused::Deployment, why));
        }
        match self.obs.config_map(&s.manifest_config_map_name) {
            Some(cm) if !cm_ours(cm, self.m) => Some(Block::ConfigMapConflict(cm.name.clone())),
            _ => None,
        }
    }

    /// 9.8: why `d` may not be a target, if it may not: Some(true) for the
    /// operator's own Deployment, Some(false) for one that has not opted
    /// in (no label, and not already ours, as one adopted from the
    /// reference operator is).
    fn not_opted_in(&self, d: &DeploymentView) -> Option<bool> {
        let policy = self.obs.targets;
        let own = policy
            .own
            .as_ref()
            .is_some_and(|(ns, name)| *ns == d.namespace && *name == d.name);
        let ours = d.owner.as_deref() == Some(self.owner.as_str());
        if own {
            Some(true)
        } else if policy.allow_any || d.opted_in || ours {
            None
        } else {
            Some(false)
        }
    }

    /// Another OpenMedModel named on the Deployment that still exists; an
    /// owner confirmed gone leaves an orphan, which is adopted.
    pub(super) fn foreign_owner(&self, d: &DeploymentView) -> Option<String> {
        [d.owner.as_deref(), d.template_owner.as_deref()]
            .into_iter()
            .flatten()
            .find(|o| !o.is_empty() && *o != self.owner && !self.obs.orphans.iter().any(|x| x == o))
            .map(str::to_string)
    }

    /// Steps 2-4 (and the foreign ConfigMap of 9.2): report the block.
    pub(super) fn report_block(&mut self, b: Block) {
        self.kept = None;
        let (reason, event) = b.reason();
        let msg = b.message(&self.m.namespace);
        let phase = if matches!(b, Block::TargetNotFound(_) | Block::TargetNotOptedIn(..)) {
            Phase::Pending
        } else {
            Phase::Failed
        };
        self.plan.new.set_phase(phase);
        self.conds(states::blocked(reason).with([
            msg.clone(),
            msg.clone(),
            msg.clone(),
            NO_ROLLBACK.into(),
        ]));
        self.event(event, msg);
    }
}
