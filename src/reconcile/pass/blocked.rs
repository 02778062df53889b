//! Steps 2-4 and 9.2's foreign ConfigMap (docs/contract.md §6.2-§6.4):
//! whether the spec is blocked by its environment, and the block reported.

use super::Pass;
use crate::model::spec::DesiredSpec;
use crate::model::status::{states, Messages, Phase};
use crate::reconcile::block::{Block, RefusedWrite};
use crate::reconcile::judge::cm_ours;
use crate::reconcile::messages::NO_ROLLBACK;
use crate::reconcile::observed::DeploymentView;

pub(super) fn blocked(p: &Pass<'_>, s: &DesiredSpec) -> Option<Block> {
    if let Some(r) = &p.refusal {
        return Some(r.clone());
    }
    let Some(d) = p.obs.deployment(&s.target.name) else {
        return Some(Block::TargetNotFound(s.target.name.clone()));
    };
    if d.container(&s.target.container_name).is_none() {
        return Some(Block::ContainerNotFound(
            d.name().to_string(),
            s.target.container_name.clone(),
            d.containers.iter().map(|c| c.name.clone()).collect(),
        ));
    }
    if let Some(other) = foreign_owner(p, d) {
        return Some(Block::TargetConflict(d.name().to_string(), other));
    }
    if let Some(own) = not_opted_in(p, d) {
        return Some(Block::TargetNotOptedIn(d.name().to_string(), own));
    }
    let deadline = s.rollout.progress_deadline_seconds;
    if d.min_ready_seconds >= deadline {
        let why = format!(
            "Deployment {}/{} has minReadySeconds {}, which must be less than progressDeadlineSeconds {deadline}: the API server would refuse the patch",
            d.namespace(), d.name(), d.min_ready_seconds
        );
        return Some(Block::Refused(RefusedWrite::Deployment, why));
    }
    match p.obs.config_map(&s.manifest_config_map_name) {
        Some(cm) if !cm_ours(cm, p.m) => Some(Block::ConfigMapConflict(cm.name().to_string())),
        _ => None,
    }
}

/// 9.8: why `d` may not be a target, if it may not: Some(true) for the
/// operator's own Deployment, Some(false) for one that has not opted
/// in (no label, and not already ours, as one adopted from the
/// reference operator is).
fn not_opted_in(p: &Pass<'_>, d: &DeploymentView) -> Option<bool> {
    let policy = p.obs.targets;
    let own = policy
        .own
        .as_ref()
        .is_some_and(|(ns, name)| *ns == d.namespace() && *name == d.name());
    let ours = d.owner.as_deref() == Some(p.owner.as_str());
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
fn foreign_owner(p: &Pass<'_>, d: &DeploymentView) -> Option<String> {
    [d.owner.as_deref(), d.template_owner.as_deref()]
        .into_iter()
        .flatten()
        .find(|o| !o.is_empty() && *o != p.owner && !p.obs.orphans.iter().any(|x| x == o))
        .map(str::to_string)
}

/// Steps 2-4 (and the foreign ConfigMap of 9.2): report the block.
pub(super) fn report_block(p: &mut Pass<'_>, b: Block) {
    p.kept = None;
    let (reason, event) = b.reason();
    let msg = b.message(p.m.namespace());
    let phase = if matches!(b, Block::TargetNotFound(_) | Block::TargetNotOptedIn(..)) {
        Phase::Pending
    } else {
        Phase::Failed
    };
    p.plan.new.phase = Some(phase);
    p.conds(states::blocked(reason).with(Messages {
        rolled_back: NO_ROLLBACK.into(),
        ..Messages::all(msg.clone())
    }));
    p.event(event, msg);
}
