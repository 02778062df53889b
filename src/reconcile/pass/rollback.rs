//! Rollbacks: automatic (step 8), manual through `openmed.ai/rollback-to`
//! (step 5, 9.3, 9.22), watched until they serve or fail (step 12, 9.23),
//! and the state a rejected annotation replaced (9.24).

use super::blocked::blocked;
use super::targets::{apply, record_target};
use super::{Next, Pass};
use crate::model::spec::DesiredSpec;
use crate::model::status::{
    cond, spec_of, states, ConditionType, EventReason, Messages, ModelStatus, PerCondition, Phase,
    Reason, Snapshot,
};
use crate::reconcile::facts::recreated;
use crate::reconcile::judge;
use crate::reconcile::messages::paused_message;
use crate::reconcile::observed::DeploymentView;

/// Degraded while rolled back: a manual rollback is an override, not a
/// verdict (9.22); an automatic one says the desired version failed.
fn degraded(base: &ModelStatus, r: &DesiredSpec, desired: &DesiredSpec) -> Degraded {
    let manual = base
        .rollback_request
        .as_deref()
        .is_some_and(|q| q.starts_with("manual:"));
    let message = if manual {
        format!(
            "serving {} instead of {} (manual rollback)",
            r.version, desired.version
        )
    } else {
        format!("{} failed its rollout", desired.version)
    };
    Degraded { manual, message }
}

/// The Degraded condition while rolled back: whose verdict, in words.
struct Degraded {
    manual: bool,
    message: String,
}

/// Step 8: the rollout of `s` missed its deadline; roll back to `l`, the
/// last successful spec.
pub(super) fn automatic(p: &mut Pass<'_>, s: &DesiredSpec, hash: &str, l: &DesiredSpec) {
    begin_rollback(p, l, hash, format!("automatic:{}", s.version));
    let msg = format!("rolling back to {}", l.version);
    p.conds(states::AUTOMATIC_ROLLBACK_STARTED.with(Messages {
        ready: format!("{} failed; rolling back to {}", s.version, l.version),
        progressing: msg.clone(),
        degraded: format!(
            "{} missed the progress deadline of Deployment {}",
            s.version, s.target.name
        ),
        rolled_back: msg,
    }));
}

/// Apply a retained spec instead of the desired one (steps 5 and 8).
fn begin_rollback(p: &mut Pass<'_>, r: &DesiredSpec, desired_hash: &str, request: String) {
    apply(p, r);
    p.plan.new.phase = Some(Phase::RolledBack);
    p.plan.new.active_version = Some(r.version.to_string());
    p.plan.new.applied_spec_hash = Some(r.hash().to_string());
    // A manual rollback is an override, not a verdict (9.22): only an
    // automatic one records the desired spec as failed.
    if request.starts_with("automatic:") {
        p.plan.new.failed_spec_hash = Some(desired_hash.to_string());
    } else {
        p.plan.new.failed_spec_hash = None;
    }
    p.plan.new.before_rejection = None;
    let held = &p.plan.base.rollback_spec;
    p.plan.new.rollback_spec = Some(ModelStatus::keep_snapshot(held, Snapshot::of(&r.to_json())));
    p.plan.new.rollback_request = Some(request.to_string());
    let count = p.plan.base.rollback_count.unwrap_or(0);
    p.plan.new.rollback_count = Some(count + 1);
    let msg = format!("Rolling back Deployment {} to {}", r.target.name, r.version);
    rollback_event(p, EventReason::RollbackStarted, msg, r);
}

/// An Event of the rollback `rollbackRequest` names, to `r`: tagged
/// with its kind and the first 10 hex of `r`'s spec hash, so that an
/// automatic and a manual rollback, or two targets, in one generation
/// are two records (§2.6).
fn rollback_event(p: &mut Pass<'_>, reason: EventReason, message: String, r: &DesiredSpec) {
    let request = p.plan.new.rollback_request.as_deref().unwrap_or("");
    let kind = if request.starts_with("manual:") {
        "manual"
    } else {
        "automatic"
    };
    let hash = r.hash();
    let hex = hash.strip_prefix("sha256:").unwrap_or(&hash);
    let tag = format!("{kind}-{}", &hex[..hex.len().min(10)]);
    p.plan.push_tagged_event(reason, message, tag);
}

fn rollback_failed_conds(p: &mut Pass<'_>, r_version: &str, deployment: &str) {
    let msg =
        format!("rollback to {r_version} missed the progress deadline of Deployment {deployment}");
    p.conds(states::ROLLBACK_FAILED.with(Messages::all(msg)));
}

/// Step 12 (and 9.23): watch a rollback through, judged on every pass.
pub(super) fn monitor_rollback<'a>(p: &mut Pass<'a>, desired: &DesiredSpec) -> Option<Next<'a>> {
    let Some(r) = spec_of(&p.plan.base.rollback_spec, p.m.name()) else {
        // A rollback with no readable rollbackSpec cannot be watched:
        // go back to the desired spec.
        return Some(Next::StartRollout(Reason::InitialRollout));
    };
    if let Some(b) = blocked(p, &r) {
        return Some(Next::Blocked(b));
    }
    let d = p.obs.deployment(&r.target.name)?;
    let base = p.plan.base.clone();
    let gen = base.target_deployment_generation.unwrap_or(0);
    p.kept = Some((r.target.name.clone(), r.manifest_config_map_name.clone()));
    let recreated = recreated(&base, d);
    record_target(p, &base, d);
    let degraded = degraded(&base, &r, desired);
    let served = base.ready_reason() == Some(Reason::TargetDegraded)
        || base.condition_reason(ConditionType::RolledBack) == Some(Reason::RollbackSucceeded);
    p.plan.new.phase = Some(Phase::RolledBack);
    p.plan.new.active_version = Some(r.version.to_string());
    if !recreated && !d.paused && judge::failed(d, gen) {
        if served {
            // The rollback had served: an outside failure (9.21).
            return Some(Next::TargetDegraded(d));
        }
        rollback_failed(p, &r);
        return None;
    }
    let drifted = !judge::matches(d, &r, &p.owner)
        || !p
            .obs
            .config_map(&r.manifest_config_map_name)
            .is_some_and(|cm| judge::cm_content_matches(cm, &r));
    if !recreated && !drifted && judge::ready(d, r.replicas, gen) {
        rollback_served(p, &r, degraded);
        return None;
    }
    if drifted || recreated {
        // Someone changed what the rollback wrote, or the Deployment
        // was created again: write it again and judge it afresh.
        apply(p, &r);
    }
    rollback_in_progress(p, &r, d, degraded);
    None
}

fn rollback_failed(p: &mut Pass<'_>, r: &DesiredSpec) {
    p.plan.new.phase = Some(Phase::Failed);
    rollback_failed_conds(p, &r.version, &r.target.name);
    let msg = format!(
        "Rollback of Deployment {} to {} missed its progress deadline",
        r.target.name, r.version
    );
    rollback_event(p, EventReason::RollbackFailed, msg, r);
}

fn rollback_served(p: &mut Pass<'_>, r: &DesiredSpec, degraded: Degraded) {
    let done = format!("rolled back to {}", r.version);
    p.conds(states::rolled_back(degraded.manual).with(Messages {
        ready: done.clone(),
        progressing: format!("rollback to {} complete", r.version),
        degraded: degraded.message,
        rolled_back: done,
    }));
    // Serving again after an outside failure (9.21) is no new rollback.
    if p.plan.base.ready_reason() != Some(Reason::TargetDegraded) {
        let msg = format!(
            "Deployment {} is serving {} again",
            r.target.name, r.version
        );
        rollback_event(p, EventReason::RollbackSucceeded, msg, r);
    }
}

fn rollback_in_progress(p: &mut Pass<'_>, r: &DesiredSpec, d: &DeploymentView, degraded: Degraded) {
    let progressing = if d.paused {
        paused_message(d, &r.version)
    } else {
        format!("rolling back Deployment {} to {}", r.target.name, r.version)
    };
    let msg = format!("rolling back to {}", r.version);
    let state = states::rolling_back(degraded.manual, d.paused);
    p.conds(state.with(Messages {
        ready: msg.clone(),
        progressing,
        degraded: degraded.message,
        rolled_back: msg,
    }));
}

/// Step 5: a manual rollback to `target`.
pub(super) fn manual<'a>(
    p: &mut Pass<'a>,
    desired: &DesiredSpec,
    hash: &str,
    target: &str,
) -> Option<Next<'a>> {
    let request = format!("manual:{target}");
    let same_request = p.plan.base.rollback_request.as_deref() == Some(request.as_str());
    let phase = p.plan.base.phase;
    let failed_rollback = phase == Some(Phase::Failed)
        && matches!(
            p.plan.base.ready_reason(),
            Some(Reason::RollbackFailed | Reason::TargetDegraded)
        );
    // A rejected request keeps the phase it found (9.D16), so a
    // `RolledBack` beside it is not this request's rollback.
    let rejected = p.plan.base.before_rejection.is_some();
    if same_request && !rejected && (phase == Some(Phase::RolledBack) || failed_rollback) {
        // A rollback under way, done, or failed: judged on every pass
        // (9.23), so a failed one that later serves is RolledBack.
        return monitor_rollback(p, desired);
    }
    // The last successful spec first, then the previous one.
    let base = &p.plan.base;
    let retained = [&base.last_successful_spec, &base.previous_successful_spec]
        .into_iter()
        .filter_map(|v| spec_of(v, p.m.name()))
        .find(|s| s.version == target);
    match retained {
        None => reject_rollback(p, target, request),
        Some(r) if r.hash() == hash => {
            // A rollback to the very spec the resource names is no
            // rollback (9.10): judge the spec as it stands.
            p.plan.new.before_rejection = None;
            return Some(Next::Judge);
        }
        Some(r) => {
            if let Some(b) = blocked(p, &r) {
                return Some(Next::Blocked(b));
            }
            begin_rollback(p, &r, hash, request);
            let msg = format!("rolling back to {}", r.version);
            p.conds(states::MANUAL_ROLLBACK_STARTED.with(Messages {
                ready: format!("manual rollback to {} requested", r.version),
                progressing: msg.clone(),
                degraded: format!("serving {} instead of {}", r.version, desired.version),
                rolled_back: msg,
            }));
        }
    }
    None
}

/// Step 5's rejection: `target` is no retained version. The version in
/// spec still serves, so the phase, Ready and Progressing stay as they
/// were; Degraded and RolledBack say the request was refused (9.D16).
/// What the request replaces is kept, so removing or correcting it
/// restores exactly that (9.3, 9.24).
fn reject_rollback(p: &mut Pass<'_>, target: &str, request: String) {
    let base = &p.plan.base;
    let versions: Vec<String> = [&base.last_successful_spec, &base.previous_successful_spec]
        .into_iter()
        .flatten()
        .filter_map(|v| v.value()["version"].as_str().map(str::to_string))
        .collect();
    let retained = if versions.is_empty() {
        "none".to_string()
    } else {
        versions.join(", ")
    };
    let msg = format!("rollback target {target} is not a retained version (retained: {retained})");
    let before = match p.plan.base.before_rejection.as_ref() {
        Some(b) => b.clone(),
        None => {
            let snapshot = p.plan.base.rejection_snapshot();
            p.plan.new.before_rejection = Some(snapshot.clone());
            snapshot
        }
    };
    p.plan.new.rollback_request = Some(request);
    let kept = |ty: ConditionType| {
        let c = before.conditions.iter().flatten().find(|c| c.type_ == ty)?;
        Some(cond(c.status, c.reason, c.message.clone()))
    };
    let ready = kept(ConditionType::Ready);
    match (before.phase, ready, kept(ConditionType::Progressing)) {
        (Some(phase), Some(ready), Some(progressing)) => {
            p.plan.new.phase = Some(phase);
            p.conds(PerCondition {
                ready,
                progressing,
                degraded: cond(true, Reason::RollbackTargetUnavailable, msg.clone()),
                rolled_back: cond(false, Reason::RollbackRejected, msg.clone()),
            });
        }
        // Nothing served yet: nothing to keep.
        _ => {
            p.plan.new.phase = Some(Phase::Failed);
            p.conds(states::ROLLBACK_REJECTED.with(Messages::all(msg.clone())));
        }
    }
    p.event(EventReason::RollbackRejected, msg);
}
