//! The plan for a resource being deleted (docs/contract.md §7 with 9.4):
//! hand the Deployment back, delete the ConfigMap if it is ours, report,
//! release the finalizer. Deleting never hangs.

use super::judge;
use super::observed::ModelView;
use super::patches;
use super::plan::{Observed, Plan, Write};
use crate::model::spec::DesiredSpec;
use crate::model::status::EventReason;
use crate::model::{FINALIZER, KOPF_FINALIZER};

fn is_ours(f: &str) -> bool {
    f == FINALIZER || f == KOPF_FINALIZER
}

/// The spec to clean up after: the desired one, or if it is invalid, the
/// one status records as applied (9.4).
fn cleanup_spec(m: &ModelView) -> Option<DesiredSpec> {
    if let Ok(s) = m.desired() {
        return Some(s.clone());
    }
    let st = m.status();
    let stored = st.retained_specs(m.name());
    let applied = st.applied_spec_hash.as_deref();
    stored
        .iter()
        .find(|s| Some(s.hash().as_str()) == applied)
        .or_else(|| stored.first())
        .cloned()
}

pub fn plan_delete(obs: Observed<'_>) -> Plan {
    let m = obs.model;
    let mut plan = Plan::bare(m.shared_status().clone());
    if !m.finalizers.iter().any(|f| is_ours(f)) {
        return plan;
    }
    let remaining: Vec<String> = m
        .finalizers
        .iter()
        .filter(|f| !is_ours(f))
        .cloned()
        .collect();
    if let Some(s) = cleanup_spec(m) {
        let mut c = Cleanup {
            obs,
            owner: m.qualified_name(),
            plan,
            removed: Vec::new(),
            skipped: Vec::new(),
        };
        let blanked = c.release_deployments(&s);
        c.delete_config_maps(&s, &blanked);
        plan = c.report();
    }
    // With nothing ever applied there is nothing to clean up.
    plan.writes.push(Write::RemoveFinalizers {
        finalizers: remaining,
    });
    plan
}

/// The cleanup of one deleted resource, and what it did and left.
struct Cleanup<'a> {
    obs: Observed<'a>,
    owner: String,
    plan: Plan,
    removed: Vec<String>,
    skipped: Vec<String>,
}

impl Cleanup<'_> {
    /// Every Deployment this owner still claims is handed back (9.16): the
    /// target of the spec being cleaned up, and any it was retargeted from.
    /// The pod template is touched only to blank the container that points
    /// at our ConfigMap; with that container gone it is left as it is
    /// (9.13). Returns the (Deployment, container) pairs blanked.
    fn release_deployments(&mut self, s: &DesiredSpec) -> Vec<(String, String)> {
        let owner = self.owner.clone();
        if let Some(d) = self
            .obs
            .deployments
            .iter()
            .find(|d| d.name() == s.target.name)
        {
            if judge::deployment_foreign(d, &owner) && !judge::deployment_owned_by(d, &owner) {
                let why = format!("Deployment {} belongs to another OpenMedModel", d.name());
                self.skipped.push(why);
            }
        }
        let mut blanked = Vec::new();
        let owned = self
            .obs
            .deployments
            .iter()
            .filter(|d| judge::deployment_owned_by(d, &owner));
        for d in owned {
            let container = if d.name() == s.target.name {
                d.container(&s.target.container_name)
                    .map(|c| c.name.clone())
            } else {
                patches::pointed_container(d).map(|c| c.name.clone())
            };
            self.plan.writes.push(Write::PatchDeployment {
                name: d.name().to_string(),
                body: match &container {
                    Some(c) => patches::deployment_decommission(Some(c)),
                    None => patches::deployment_unclaim(),
                },
                sets_target: false,
            });
            if let Some(c) = container {
                blanked.push((d.name().to_string(), c));
            }
            let done = format!("model pointer removed from Deployment {}", d.name());
            self.removed.push(done);
        }
        blanked
    }

    /// Our ConfigMaps go, unless some container will still read one after
    /// this pass (9.13); someone else's are left and reported.
    fn delete_config_maps(&mut self, s: &DesiredSpec, blanked: &[(String, String)]) {
        let deployments = self.obs.deployments;
        let still_read = |cm: &str| {
            deployments.iter().any(|d| {
                d.containers.iter().any(|c| {
                    let blank = blanked
                        .iter()
                        .any(|(dn, cn)| *dn == d.name() && *cn == c.name);
                    !blank
                        && c.preload
                            .as_ref()
                            .and_then(|e| e.config_map_ref.as_ref())
                            .is_some_and(|(n, _)| n == cm)
                })
            })
        };
        for cm in self.obs.config_maps {
            let named = cm.name() == s.manifest_config_map_name;
            let ours = judge::cm_fully_ours(cm, self.obs.model);
            if ours && !still_read(cm.name()) {
                self.plan.writes.push(Write::DeleteConfigMap {
                    name: cm.name().to_string(),
                    uid: cm.uid.clone(),
                });
                self.removed
                    .push(format!("ConfigMap {} deleted", cm.name()));
            } else if named && !ours {
                let why = format!("ConfigMap {} is not owned by this resource", cm.name());
                self.skipped.push(why);
            } else if named {
                let why = format!(
                    "ConfigMap {} is still read by a Deployment; kept",
                    cm.name()
                );
                self.skipped.push(why);
            }
        }
    }

    /// One Event saying what was removed or what was left untouched.
    fn report(mut self) -> Plan {
        if self.skipped.is_empty() {
            let what = if self.removed.is_empty() {
                "nothing left to clean up".to_string()
            } else {
                self.removed.join("; ")
            };
            let msg = format!("Model removed: {what}");
            self.plan.push_event(EventReason::ModelRemoved, msg);
        } else {
            let msg = format!("Left untouched: {}", self.skipped.join("; "));
            self.plan.push_event(EventReason::ModelRemovalSkipped, msg);
        }
        self.plan.always_post_events();
        self.plan
    }
}
