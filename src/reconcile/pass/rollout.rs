//! Steps 6-11 (docs/contract.md §6.6-§6.11): the desired spec judged
//! against what its Deployment shows, and the rollout states that follow.

use super::blocked::blocked;
use super::targets::{apply, claim_if_needed, record_target};
use super::{Flow, Next, Pass};
use crate::model::spec::DesiredSpec;
use crate::model::status::{
    spec_of, states, EventReason, Messages, ModelStatus, Phase, Reason, Snapshot,
};
use crate::reconcile::block::is_block_reason;
use crate::reconcile::facts::{has_served, recreated};
use crate::reconcile::judge;
use crate::reconcile::messages::{paused_message, NO_ROLLBACK};
use crate::reconcile::observed::DeploymentView;
use crate::reconcile::plan::TargetGen;

/// Steps 6-11: the desired spec against what the Deployment shows, each
/// check in turn until one settles the pass or hands it on.
pub(super) fn judge_desired<'a>(p: &mut Pass<'a>, s: &DesiredSpec, hash: &str) -> Option<Next<'a>> {
    match failed_spec(p, s, hash) {
        Flow::Continue => {}
        Flow::Settled => return None,
        Flow::Then(next) => return Some(next),
    }
    if new_spec(p, s, hash) {
        return None;
    }
    let d = p.obs.deployment(&s.target.name)?;
    let base = p.plan.base.clone();
    // 9.18: a Deployment deleted and created again is a new target.
    if recreated(&base, d) {
        return Some(Next::StartRollout(Reason::TargetRecreated));
    }
    p.kept = Some((s.target.name.clone(), s.manifest_config_map_name.clone()));
    record_target(p, &base, d);
    let gen = base.target_deployment_generation.unwrap_or(0);
    match rollout_failed(p, s, hash, d, gen) {
        Flow::Continue => {}
        Flow::Settled => return None,
        Flow::Then(next) => return Some(next),
    }
    if !config_map_drift(p, s, hash) {
        ready_or_in_progress(p, s, hash, d, gen);
    }
    None
}

/// Step 6: a failed spec is never retried by itself; a rollback over it
/// (or a failed one, 9.23) is watched, a cleared block shows it again.
fn failed_spec<'a>(p: &mut Pass<'a>, s: &DesiredSpec, hash: &str) -> Flow<'a> {
    let base = &p.plan.base;
    let phase = base.phase;
    let failed = matches!(phase, Some(Phase::Failed) | Some(Phase::RolledBack))
        && base.failed_spec_hash.as_deref() == Some(hash);
    if !failed {
        return Flow::Continue;
    }
    // Failed, unless RolledBack (which is watched whatever its reason).
    let unblocked = is_block_reason(base.ready_reason());
    let failed_rollback = base.ready_reason() == Some(Reason::RollbackFailed);
    let rollback = base.rollback_spec.is_some();
    if phase == Some(Phase::RolledBack) || ((unblocked || failed_rollback) && rollback) {
        return Flow::Then(Next::MonitorRollback);
    }
    if unblocked {
        rollout_failed_conds(p, s);
    }
    Flow::Settled
}

/// Step 7: a new spec, or not yet rolling out, starts a rollout. A
/// resource whose block has just cleared, with this spec already
/// applied, is judged as it stands instead (9.2, 9.3).
fn new_spec(p: &mut Pass<'_>, s: &DesiredSpec, hash: &str) -> bool {
    let base = &p.plan.base;
    let old_hash = base.desired_spec_hash.as_deref();
    let resumed =
        is_block_reason(base.ready_reason()) && base.applied_spec_hash.as_deref() == Some(hash);
    let idle = !matches!(base.phase, Some(Phase::RollingOut) | Some(Phase::Ready));
    if old_hash == Some(hash) && (!idle || resumed) {
        return false;
    }
    let reason = match old_hash {
        Some(h) if h != hash => Reason::SpecChanged,
        _ => Reason::InitialRollout,
    };
    start_rollout(p, s, hash, reason);
    true
}

/// Step 8: the Deployment failed. Our rollout rolls back (or fails);
/// a failure with no rollout of ours is reported (9.21). A paused
/// Deployment's deadline is not judged (9.20).
fn rollout_failed<'a>(
    p: &mut Pass<'a>,
    s: &DesiredSpec,
    hash: &str,
    d: &'a DeploymentView,
    gen: i64,
) -> Flow<'a> {
    let base = p.plan.base.clone();
    let ours = base.target_deployment_generation.is_some();
    // A failure of a template someone else wrote is not our rollout
    // failing (§6.8): the drift is put right instead (§6.11).
    let template = judge::template_ours(d, s, &p.owner);
    if !ours || d.paused || !template || !judge::failed(d, gen) {
        return Flow::Continue;
    }
    if base.phase == Some(Phase::Ready) || has_served(&base, hash, p.m.name()) {
        return Flow::Then(Next::TargetDegraded(d));
    }
    p.event(
        EventReason::RolloutFailed,
        format!(
            "Rollout of {} to Deployment {} missed its progress deadline",
            s.version, s.target.name
        ),
    );
    match spec_of(&base.last_successful_spec, p.m.name()) {
        Some(l) if s.rollout.rollback_on_failure && blocked(p, &l).is_none() => {
            Flow::Then(Next::AutomaticRollback(l))
        }
        _ => {
            p.plan.new.phase = Some(Phase::Failed);
            p.plan.new.failed_spec_hash = Some(hash.to_string());
            rollout_failed_conds(p, s);
            Flow::Settled
        }
    }
}

/// Step 9: the ConfigMap is absent, not ours or says something else.
fn config_map_drift(p: &mut Pass<'_>, s: &DesiredSpec, hash: &str) -> bool {
    let ok = p
        .obs
        .config_map(&s.manifest_config_map_name)
        .is_some_and(|cm| judge::cm_content_matches(cm, s));
    if !ok {
        start_rollout(p, s, hash, Reason::DriftCorrected);
    }
    !ok
}

/// Steps 10 and 11: Ready, drift put right, or still rolling out.
fn ready_or_in_progress(
    p: &mut Pass<'_>,
    s: &DesiredSpec,
    hash: &str,
    d: &DeploymentView,
    gen: i64,
) {
    let matches = judge::matches(d, s, &p.owner);
    let staged = !matches && judge::resize_held(d, s, &p.owner, gen);
    if matches && judge::ready(d, s.replicas, gen) {
        if p.plan.base.phase != Some(Phase::Ready) {
            mark_ready(p, s);
        }
    } else if !matches && !staged {
        start_rollout(p, s, hash, Reason::DriftCorrected);
        return;
    } else {
        if staged {
            apply(p, s);
        }
        rolling_out(p, s, d);
    }
    claim_if_needed(p, d);
}

/// "Starting a rollout".
pub(super) fn start_rollout(p: &mut Pass<'_>, s: &DesiredSpec, hash: &str, reason: Reason) {
    let before = p.plan.writes.len();
    apply(p, s);
    p.plan.new.phase = Some(Phase::RollingOut);
    p.plan.new.applied_spec_hash = Some(hash.to_string());
    p.plan.new.forget_rollback();
    // 9.11: nothing to write means no rollout to start: judge the
    // Deployment as it stands, in this very pass.
    let wrote = p.plan.writes.len() > before;
    if let (false, TargetGen::Known(g), Some(d)) =
        (wrote, p.plan.target, p.obs.deployment(&s.target.name))
    {
        if judge::ready(d, s.replicas, g) {
            // The Deployment serves a version the last status never
            // said it did: a rollout whose patch landed and whose status
            // did not (its writer died, or met conflict after conflict:
            // §9.7), already done. Announce it and its success (§6.13).
            let rolled = p
                .plan
                .base
                .active_version
                .as_deref()
                .is_some_and(|v| v != s.version);
            if rolled {
                announce_rollout(p, s, reason);
            }
            mark_ready(p, s);
        } else {
            rolling_out(p, s, d);
            // A replica that wrote this rollout's patch died before its
            // status and Event (§9.7): it is under way, so announce it.
            if p.plan.base.applied_spec_hash.as_deref() != Some(hash) {
                announce_rollout(p, s, reason);
            }
        }
        return;
    }
    let msg = format!("rolling out {} ({reason})", s.version);
    p.conds(states::started(reason).with(Messages {
        ready: msg,
        progressing: format!("rolling out {} to Deployment {}", s.version, s.target.name),
        degraded: "no failure".into(),
        rolled_back: NO_ROLLBACK.into(),
    }));
    announce_rollout(p, s, reason);
}

/// Event `RolloutStarted`, even when the conditions were already the
/// last rollout's "started" ones, its pods slow to warm (§6.13).
fn announce_rollout(p: &mut Pass<'_>, s: &DesiredSpec, reason: Reason) {
    p.plan.new_report = true;
    p.event(
        EventReason::RolloutStarted,
        format!(
            "Rolling out {} to Deployment {} ({reason})",
            s.version, s.target.name
        ),
    );
}

fn rollout_failed_conds(p: &mut Pass<'_>, s: &DesiredSpec) {
    let msg = format!(
        "{} missed the progress deadline of Deployment {}",
        s.version, s.target.name
    );
    let why_not = if !s.rollout.rollback_on_failure {
        "automatic rollback is disabled (rollbackOnFailure: false)"
    } else {
        "no earlier successful version to roll back to"
    };
    p.conds(states::FAILED_NO_ROLLBACK.with(Messages {
        rolled_back: why_not.into(),
        ..Messages::all(msg)
    }));
}

/// Step 10's transition: the desired spec serves.
fn mark_ready(p: &mut Pass<'_>, s: &DesiredSpec) {
    let base = p.plan.base.clone();
    p.plan.new.phase = Some(Phase::Ready);
    p.plan.new.active_version = Some(s.version.to_string());
    let held = &base.last_successful_spec;
    let spec = ModelStatus::keep_snapshot(held, Snapshot::of(&s.to_json()));
    if let Some(last) = held.as_ref().filter(|l| **l != spec) {
        p.plan.new.previous_successful_spec = Some(last.clone());
    }
    p.plan.new.last_successful_spec = Some(spec);
    p.plan.new.forget_rollback();
    p.conds(states::READY.with(Messages {
        ready: format!("{} is serving", s.version),
        progressing: format!("rollout of {} complete", s.version),
        degraded: "no failure".into(),
        rolled_back: NO_ROLLBACK.into(),
    }));
    // Serving again after an outside failure (9.21) is no rollout; nor
    // is serving again after a dip, when no rollout started since this
    // success was announced (§9.D21).
    let msg = format!("Deployment {} is serving {}", s.target.name, s.version);
    if base.ready_reason() != Some(Reason::TargetDegraded)
        && !announced(p, EventReason::RolloutSucceeded, &msg)
    {
        p.event(EventReason::RolloutSucceeded, msg);
    }
}

/// Whether the last transition that required Events required this one,
/// in this generation: `lastEvents` keeps them until the next (§9.7).
fn announced(p: &Pass<'_>, reason: EventReason, message: &str) -> bool {
    let last = p.plan.base.last_events.iter().flatten();
    last.into_iter()
        .any(|e| e.reason == reason && e.generation == p.m.generation && e.message == message)
}

/// Step 11's state: the rollout of `s` is under way.
fn rolling_out(p: &mut Pass<'_>, s: &DesiredSpec, d: &DeploymentView) {
    p.plan.new.phase = Some(Phase::RollingOut);
    let (state, progressing) = if d.paused {
        (states::ROLLING_OUT_PAUSED, paused_message(d, &s.version))
    } else {
        let waiting = format!(
            "waiting for Deployment {} to roll out {}",
            s.target.name, s.version
        );
        (states::ROLLING_OUT, waiting)
    };
    p.conds(state.with(Messages {
        ready: format!("rolling out {}", s.version),
        progressing,
        degraded: "no failure".into(),
        rolled_back: NO_ROLLBACK.into(),
    }));
}

/// 9.21: the Deployment fails while no rollout of ours is under way.
pub(super) fn target_degraded(p: &mut Pass<'_>, d: &DeploymentView) {
    let why = d
        .conditions
        .iter()
        .find(|c| {
            (c.type_ == "Progressing" && c.status == "False")
                || (c.type_ == "ReplicaFailure" && c.status == "True")
        })
        .map(|c| format!("{}={} ({})", c.type_, c.status, c.reason))
        .unwrap_or_else(|| "a failure".to_string());
    let msg = format!(
        "Deployment {} reports {why}; nothing of ours is rolling out, so nothing is rolled back",
        d.name()
    );
    p.plan.new.phase = Some(Phase::Failed);
    let rolled_back = p.plan.base.rollback_spec.is_some();
    let last = if rolled_back {
        "the rollback had completed"
    } else {
        NO_ROLLBACK
    };
    p.conds(states::target_degraded(rolled_back).with(Messages {
        rolled_back: last.into(),
        ..Messages::all(msg.clone())
    }));
    p.event(EventReason::TargetDegraded, msg);
}
