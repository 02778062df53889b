//! Judging what was observed against a desired spec (docs/contract.md §4),
//! and deciding whether a write would change anything (section 9.1).

use super::observed::{ConfigMapView, DeploymentView, ModelView};
use crate::model::spec::StrategyType;
use crate::model::{canonical, DesiredSpec, PRELOAD_ENV};

/// The Deployment carries everything section 3 writes that section 4 checks.
pub fn matches(d: &DeploymentView, s: &DesiredSpec, owner: &str) -> bool {
    let strategy_ok = match s.rollout.kind {
        StrategyType::Recreate => d.strategy_type.as_deref() == Some("Recreate"),
        StrategyType::RollingUpdate => {
            d.strategy_type.as_deref() == Some("RollingUpdate")
                && d.max_unavailable.as_ref() == Some(&s.rollout.max_unavailable.to_json())
                && d.max_surge.as_ref() == Some(&s.rollout.max_surge.to_json())
        }
    };
    let env_ok = d
        .container(&s.target.container_name)
        .and_then(|c| c.preload.as_ref())
        .and_then(|e| e.config_map_ref.as_ref())
        .map(|(name, key)| *name == s.manifest_config_map_name && key == PRELOAD_ENV)
        .unwrap_or(false);
    (d.autoscaler.is_some() || d.replicas == Some(s.replicas))
        && d.progress_deadline_seconds == Some(s.rollout.progress_deadline_seconds)
        && strategy_ok
        && d.owner.as_deref() == Some(owner)
        && template_hash_is(d, s)
        && env_ok
}

/// Would the apply patch of section 3 change anything? Also covers what
/// `matches` does not check: the template owner annotation, a leftover
/// `value`, a leftover `rollingUpdate` under Recreate, and the claim label.
pub fn needs_apply(d: &DeploymentView, s: &DesiredSpec, owner: &str) -> bool {
    let leftover_value = d
        .container(&s.target.container_name)
        .and_then(|c| c.preload.as_ref())
        .map(|e| e.value.is_some())
        .unwrap_or(false);
    !matches(d, s, owner)
        || d.template_owner.as_deref() != Some(owner)
        || leftover_value
        || (s.rollout.kind == StrategyType::Recreate && d.has_rolling_update)
        || !d.claimed
}

/// The spec to write to `d` now, when it is not `s` itself. One write that
/// switches a Deployment to Recreate and resizes it can wedge it for good
/// (kubernetes#125568): with the two active ReplicaSets of a rolling update,
/// `isScalingEvent` sends every sync to `scale`, which resizes nothing under
/// Recreate, so the rollout never starts and its deadline is never judged.
/// So the switch goes first with the replicas as they are, and the resize
/// follows once the controller has seen it (`rolloutRecreate` has then
/// scaled every old set to zero, and a resize has one set to go to).
pub fn staged(d: &DeploymentView, s: &DesiredSpec) -> Option<DesiredSpec> {
    if d.autoscaler.is_some() {
        return None;
    }
    let current = d.replicas?;
    let switching = d.strategy_type.as_deref() != Some("Recreate");
    let unseen = d.observed_generation < d.generation;
    let hold =
        s.rollout.kind == StrategyType::Recreate && current != s.replicas && (switching || unseen);
    hold.then(|| DesiredSpec {
        replicas: current,
        ..s.clone()
    })
}

/// All that keeps `d` from matching `s` is the resize our last write (of
/// generation `recorded`) held back under `staged`: the same rollout, not
/// drift, since nobody has written the Deployment since.
pub fn resize_held(d: &DeploymentView, s: &DesiredSpec, owner: &str, recorded: i64) -> bool {
    let held = |r: i64| DesiredSpec {
        replicas: r,
        ..s.clone()
    };
    s.rollout.kind == StrategyType::Recreate
        && d.generation == recorded
        && d.replicas
            .is_some_and(|r| r != s.replicas && matches(d, &held(r), owner))
}

/// The rollout of `target_generation` is complete, judged as `kubectl
/// rollout status` judges it (docs/contract.md §4 with 9.9 and 9.12): the
/// controller has seen the Deployment as it is now, every pod is of the new
/// template (`status.replicas == updatedReplicas`, so a ready old pod cannot
/// stand in for an unready new one), the new pods are available, and the
/// deadline has not been exceeded. Under an autoscaler, the replicas it set
/// are the ones to wait for.
pub fn ready(d: &DeploymentView, replicas: i64, target_generation: i64) -> bool {
    let replicas = match (&d.autoscaler, d.replicas) {
        (Some(_), Some(current)) => current,
        _ => replicas,
    };
    d.generation >= target_generation
        && d.observed_generation >= target_generation
        && d.observed_generation >= d.generation
        && d.updated_replicas >= replicas
        && d.ready_replicas >= replicas
        && d.available_replicas >= replicas
        && d.unavailable_replicas == 0
        && d.status_replicas == d.updated_replicas
        && d.available_replicas >= d.updated_replicas
        && !timed_out(d)
}

/// `Progressing=False` with `ProgressDeadlineExceeded`.
fn timed_out(d: &DeploymentView) -> bool {
    d.conditions.iter().any(|c| {
        c.type_ == "Progressing" && c.status == "False" && c.reason == "ProgressDeadlineExceeded"
    })
}

/// The pod template is the one our apply patch writes for `s`: only then is
/// a failing rollout ours to judge. A template someone else wrote since (an
/// owner that won a conflict, then went) failed for them, not for `s`.
pub fn template_ours(d: &DeploymentView, s: &DesiredSpec, owner: &str) -> bool {
    template_hash_is(d, s) && d.template_owner.as_deref() == Some(owner)
}

/// The pod template carries the manifest hash of `s` (§6.9).
fn template_hash_is(d: &DeploymentView, s: &DesiredSpec) -> bool {
    d.template_hash
        .is_some_and(|h| canonical::digest_is(&s.manifest_hash(), &h))
}

/// The rollout of `target_generation` has failed.
pub fn failed(d: &DeploymentView, target_generation: i64) -> bool {
    d.observed_generation >= target_generation
        && (timed_out(d)
            || d.conditions
                .iter()
                .any(|c| c.type_ == "ReplicaFailure" && c.status == "True"))
}

/// Names this resource as its owner, on the Deployment or its pod template.
pub fn deployment_owned_by(d: &DeploymentView, owner: &str) -> bool {
    d.owner.as_deref() == Some(owner) || d.template_owner.as_deref() == Some(owner)
}

/// Names another resource as its owner.
pub fn deployment_foreign(d: &DeploymentView, owner: &str) -> bool {
    [d.owner.as_deref(), d.template_owner.as_deref()]
        .into_iter()
        .flatten()
        .any(|o| !o.is_empty() && o != owner)
}

/// Ours to write: our owner annotation or a controller reference to us.
pub fn cm_ours(cm: &ConfigMapView, m: &ModelView) -> bool {
    cm.owner.as_deref() == Some(m.qualified_name().as_str()) || cm.controlled_by(&m.uid)
}

/// Ours to delete: both the annotation and the controller reference.
pub fn cm_fully_ours(cm: &ConfigMapView, m: &ModelView) -> bool {
    cm.owner.as_deref() == Some(m.qualified_name().as_str()) && cm.controlled_by(&m.uid)
}

/// The pointer the pods read is right (docs/contract.md §6.9).
pub fn cm_content_matches(cm: &ConfigMapView, s: &DesiredSpec) -> bool {
    cm.manifest
        .is_some_and(|d| canonical::digest_is(&s.manifest_hash(), &d))
        && cm.preload.as_deref() == Some(s.version.as_str())
}

/// Would the ConfigMap merge patch change anything?
pub fn cm_needs_patch(cm: &ConfigMapView, s: &DesiredSpec, m: &ModelView) -> bool {
    let our_ref = cm.owner_refs.iter().any(|r| {
        r.uid == m.uid
            && r.controller
            && r.block_owner_deletion
            && r.name == m.name()
            && r.kind == crate::model::KIND
    });
    !cm_content_matches(cm, s)
        || cm.owner.as_deref() != Some(m.qualified_name().as_str())
        || cm.managed_by.as_deref() != Some(crate::model::MANAGED_BY_LABEL.1)
        || cm.family.as_deref() != Some(s.family.as_str())
        || !our_ref
}
