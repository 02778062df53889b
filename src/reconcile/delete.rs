//! The plan for a resource being deleted (contract section 7 with 9.4):
//! hand the Deployment back, delete the ConfigMap if it is ours, report,
//! release the finalizer. Deleting never hangs.

use super::judge;
use super::observed::ModelView;
use super::patches;
use super::plan::{Observed, Plan, Write};
use crate::model::spec::DesiredSpec;
use crate::model::status::{EventReason, Field, StatusDoc};
use crate::model::{validate, FINALIZER, KOPF_FINALIZER};

fn is_ours(f: &str) -> bool {
    f == FINALIZER || f == KOPF_FINALIZER
}

/// The spec to clean up after: the desired one, or if it is invalid, the
/// one status records as applied (9.4).
fn cleanup_spec(m: &ModelView) -> Option<DesiredSpec> {
    if let Ok(s) = validate(&m.name, m.spec.as_ref()) {
        return Some(s);
    }
    let st = StatusDoc::from_value(m.status.as_ref());
    let stored = st.retained_specs(&m.name);
    let applied = st.str(Field::AppliedSpecHash);
    stored
        .iter()
        .find(|s| Some(s.hash().as_str()) == applied)
        .or_else(|| stored.first())
        .cloned()
}

pub fn plan_delete(obs: Observed<'_>) -> Plan {
    let m = obs.model;
    let mut plan = Plan::bare(StatusDoc::from_value(m.status.as_ref()));
    if !m.finalizers.iter().any(|f| is_ours(f)) {
        return plan;
    }
    let remaining: Vec<String> = m
        .finalizers
        .iter()
        .filter(|f| !is_ours(f))
        .cloned()
        .collect();
    let Some(s) = cleanup_spec(m) else {
        // Nothing was ever applied: nothing to clean up.
        plan.writes.push(Write::RemoveFinalizers {
            finalizers: remaining,
        });
        return plan;
    };
    let owner = m.owner();
    let mut skipped = Vec::new();
    let mut removed = Vec::new();
    match obs.deployments.iter().find(|d| d.name == s.target.name) {
        Some(d)
            if judge::deployment_foreign(d, &owner) && !judge::deployment_owned_by(d, &owner) =>
        {
            skipped.push(format!(
                "Deployment {} belongs to another OpenMedModel",
                d.name
            ));
        }
        _ => {}
    }
    // Every Deployment this owner still claims is handed back (9.16): the
    // target of the spec being cleaned up, and any it was retargeted from.
    // The pod template is touched only to blank the container that points
    // at our ConfigMap; with that container gone it is left as it is (9.13).
    let mut blanked: Vec<(String, String)> = Vec::new();
    for d in obs
        .deployments
        .iter()
        .filter(|d| judge::deployment_owned_by(d, &owner))
    {
        let container = if d.name == s.target.name {
            d.container(&s.target.container_name)
                .map(|c| c.name.clone())
        } else {
            patches::pointed_container(d).map(|c| c.name.clone())
        };
        plan.writes.push(Write::PatchDeployment {
            name: d.name.clone(),
            body: match &container {
                Some(c) => patches::deployment_decommission(Some(c)),
                None => patches::deployment_unclaim(),
            },
            sets_target: false,
        });
        if let Some(c) = container {
            blanked.push((d.name.clone(), c));
        }
        removed.push(format!("model pointer removed from Deployment {}", d.name));
    }
    // A ConfigMap some container will still read after this pass stays.
    let still_read = |cm: &str| {
        obs.deployments.iter().any(|d| {
            d.containers.iter().any(|c| {
                let blank = blanked
                    .iter()
                    .any(|(dn, cn)| *dn == d.name && *cn == c.name);
                !blank
                    && c.preload
                        .as_ref()
                        .and_then(|e| e.config_map_ref.as_ref())
                        .is_some_and(|(n, _)| n == cm)
            })
        })
    };
    for cm in obs.config_maps {
        let named = cm.name == s.manifest_config_map_name;
        if judge::cm_fully_ours(cm, m) && !still_read(&cm.name) {
            plan.writes.push(Write::DeleteConfigMap {
                name: cm.name.clone(),
                uid: cm.uid.clone(),
            });
            removed.push(format!("ConfigMap {} deleted", cm.name));
        } else if named && !judge::cm_fully_ours(cm, m) {
            skipped.push(format!(
                "ConfigMap {} is not owned by this resource",
                cm.name
            ));
        } else if named {
            skipped.push(format!(
                "ConfigMap {} is still read by a Deployment; kept",
                cm.name
            ));
        }
    }
    if skipped.is_empty() {
        let what = if removed.is_empty() {
            "nothing left to clean up".to_string()
        } else {
            removed.join("; ")
        };
        plan.push_event(EventReason::ModelRemoved, format!("Model removed: {what}"));
    } else {
        plan.push_event(
            EventReason::ModelRemovalSkipped,
            format!("Left untouched: {}", skipped.join("; ")),
        );
    }
    plan.always_post_events();
    plan.writes.push(Write::RemoveFinalizers {
        finalizers: remaining,
    });
    plan
}
