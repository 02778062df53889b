//! The target Deployment and manifest ConfigMap: applying a spec to them
//! (section 3), recording which Deployment was applied (9.18), adopting
//! orphans and releasing targets left behind (9.16).

use super::Pass;
use crate::model::spec::DesiredSpec;
use crate::model::status::{EventReason, ModelStatus};
use crate::reconcile::observed::DeploymentView;
use crate::reconcile::plan::{TargetGen, Write};
use crate::reconcile::{judge, patches};

/// Section 3: plan the ConfigMap and Deployment writes for `s`.
pub(super) fn apply(p: &mut Pass<'_>, s: &DesiredSpec) {
    match p.obs.config_map(&s.manifest_config_map_name) {
        None => p.plan.writes.push(Write::CreateConfigMap {
            body: patches::config_map_create(p.m, s),
        }),
        Some(cm) if judge::cm_needs_patch(cm, s, p.m) => {
            p.plan.writes.push(Write::PatchConfigMap {
                name: cm.name().to_string(),
                body: patches::config_map_patch(p.m, s, cm),
            })
        }
        Some(_) => {}
    }
    let Some(d) = p.obs.deployment(&s.target.name) else {
        return;
    };
    p.plan.new.target_deployment_uid = Some(d.uid.clone());
    record_replicas_owner(p, d);
    p.kept = Some((s.target.name.clone(), s.manifest_config_map_name.clone()));
    if let Some(orphan) = orphaned_owner(p, d) {
        p.event(
            EventReason::TargetAdopted,
            format!(
                "Deployment {} named OpenMedModel {orphan}, which no longer exists; adopted",
                d.name()
            ),
        );
    }
    let staged = judge::staged(d, s);
    let now = staged.as_ref().unwrap_or(s);
    if judge::needs_apply(d, now, &p.owner) {
        p.plan.writes.push(Write::PatchDeployment {
            name: s.target.name.clone(),
            body: patches::deployment_apply(p.m, now, d.autoscaler.is_some()),
            sets_target: true,
        });
        p.plan.target = TargetGen::FromPatch;
    } else {
        p.plan.target = TargetGen::Known(d.generation);
    }
}

/// The gone owner this Deployment still names, if any.
fn orphaned_owner(p: &Pass<'_>, d: &DeploymentView) -> Option<String> {
    [d.owner.as_deref(), d.template_owner.as_deref()]
        .into_iter()
        .flatten()
        .find(|o| *o != p.owner && p.obs.orphans.iter().any(|x| x == o))
        .map(str::to_string)
}

/// What status records of the target judged: its uid, when status
/// from before 9.18 has none, and who owns its replicas.
pub(super) fn record_target(p: &mut Pass<'_>, old: &ModelStatus, d: &DeploymentView) {
    if old.target_deployment_uid.is_none() && !d.uid.is_empty() {
        p.plan.new.target_deployment_uid = Some(d.uid.clone());
    }
    record_replicas_owner(p, d);
}

/// `replicasManagedBy`: the autoscaler that sets the target's replicas,
/// absent when the operator sets them from the spec.
fn record_replicas_owner(p: &mut Pass<'_>, d: &DeploymentView) {
    p.plan.new.replicas_managed_by = d.autoscaler.clone();
}

/// A Deployment we own but have not labelled (adopted from the
/// reference operator): add the label only, no spec change.
pub(super) fn claim_if_needed(p: &mut Pass<'_>, d: &DeploymentView) {
    let writes_it = p
        .plan
        .writes
        .iter()
        .any(|w| matches!(w, Write::PatchDeployment { name, .. } if *name == d.name()));
    if !writes_it && !d.claimed && d.owner.as_deref() == Some(p.owner.as_str()) {
        p.plan.writes.push(Write::PatchDeployment {
            name: d.name().to_string(),
            body: patches::deployment_claim(),
            sets_target: false,
        });
    }
}

/// Release every Deployment this owner still claims but no longer
/// serves from, after the kept one is applied and only if it still
/// carries this owner; delete our ConfigMaps nothing refers to any more.
pub(super) fn release_others(p: &mut Pass<'_>) {
    let Some((keep_d, keep_cm)) = p.kept.clone() else {
        return;
    };
    let stale: Vec<&DeploymentView> = p
        .obs
        .deployments
        .iter()
        .filter(|d| d.name() != keep_d && judge::deployment_owned_by(d, &p.owner))
        .collect();
    for d in &stale {
        p.plan.writes.push(Write::PatchDeployment {
            name: d.name().to_string(),
            body: patches::deployment_release(d),
            sets_target: false,
        });
        p.plan.push_event(
            EventReason::TargetReleased,
            format!("Deployment {} is no longer the target; released", d.name()),
        );
    }
    // Whether a Deployment will still point at `cm` after this pass: not
    // the kept one (it points at `keep_cm` once applied), not a released one.
    let referenced = |cm: &str| {
        p.obs.deployments.iter().any(|d| {
            d.name() != keep_d
                && !stale.iter().any(|s| s.name() == d.name())
                && d.containers.iter().any(|c| {
                    c.preload
                        .as_ref()
                        .and_then(|e| e.config_map_ref.as_ref())
                        .is_some_and(|(n, _)| n == cm)
                })
        })
    };
    let doomed: Vec<Write> = p
        .obs
        .config_maps
        .iter()
        .filter(|c| c.name() != keep_cm && judge::cm_fully_ours(c, p.m))
        .filter(|c| !referenced(c.name()))
        .map(|c| Write::DeleteConfigMap {
            name: c.name().to_string(),
            uid: c.uid.clone(),
        })
        .collect();
    p.plan.writes.extend(doomed);
}
