//! The target Deployment and manifest ConfigMap: applying a spec to them
//! (section 3), recording which Deployment was applied (9.18), adopting
//! orphans and releasing targets left behind (9.16).

use super::Pass;
use crate::model::spec::DesiredSpec;
use crate::model::status::{EventReason, Field, StatusDoc};
use crate::reconcile::observed::DeploymentView;
use crate::reconcile::plan::{TargetGen, Write};
use crate::reconcile::{judge, patches};
use serde_json::json;

impl Pass<'_> {
    /// Section 3: plan the ConfigMap and Deployment writes for `s`.
    pub(super) fn apply(&mut self, s: &DesiredSpec) {
        match self.obs.config_map(&s.manifest_config_map_name) {
            None => self.plan.writes.push(Write::CreateConfigMap {
                body: patches::config_map_create(self.m, s),
            }),
            Some(cm) if judge::cm_needs_patch(cm, s, self.m) => {
                self.plan.writes.push(Write::PatchConfigMap {
                    name: cm.name.clone(),
                    body: patches::config_map_patch(self.m, s, cm),
                })
            }
            Some(_) => {}
        }
        let Some(d) = self.obs.deployment(&s.target.name) else {
            return;
        };
        self.plan
            .new
            .set(Field::TargetDeploymentUid, json!(d.uid.clone()));
        self.record_replicas_owner(d);
        self.kept = Some((s.target.name.clone(), s.manifest_config_map_name.clone()));
        if let Some(orphan) = self.orphaned_owner(d) {
            self.event(
                EventReason::TargetAdopted,
                format!(
                    "Deployment {} named OpenMedModel {orphan}, which no longer exists; adopted",
                    d.name
                ),
            );
        }
        let staged = judge::staged(d, s);
        let now = staged.as_ref().unwrap_or(s);
        if judge::needs_apply(d, now, &self.owner) {
            self.plan.writes.push(Write::PatchDeployment {
                name: s.target.name.clone(),
                body: patches::deployment_apply(self.m, now, d.autoscaler.is_some()),
                sets_target: true,
            });
            self.plan.target = TargetGen::FromPatch;
        } else {
            self.plan.target = TargetGen::Known(d.generation);
        }
    }

    /// The gone owner this Deployment still names, if any.
    fn orphaned_owner(&self, d: &DeploymentView) -> Option<String> {
        [d.owner.as_deref(), d.template_owner.as_deref()]
            .into_iter()
            .flatten()
            .find(|o| *o != self.owner && self.obs.orphans.iter().any(|x| x == o))
            .map(str::to_string)
    }

    /// What status records of the target judged: its uid, when status
    /// from before 9.18 has none, and who owns its replicas.
    pub(super) fn record_target(&mut self, old: &StatusDoc, d: &DeploymentView) {
        if old.get(Field::TargetDeploymentUid).is_none() && !d.uid.is_empty() {
            self.plan
                .new
                .set(Field::TargetDeploymentUid, json!(d.uid.clone()));
        }
        self.record_replicas_owner(d);
    }

    /// `replicasManagedBy`: the autoscaler that sets the target's replicas,
    /// absent when the operator sets them from the spec.
    fn record_replicas_owner(&mut self, d: &DeploymentView) {
        match &d.autoscaler {
            Some(by) => self.plan.new.set(Field::ReplicasManagedBy, json!(by)),
            None => self.plan.new.clear(Field::ReplicasManagedBy),
        }
    }

    /// A Deployment we own but have not labelled (adopted from the
    /// reference operator): add the label only, no spec change.
    pub(super) fn claim_if_needed(&mut self, d: &DeploymentView) {
        let writes_it = self
            .plan
            .writes
            .iter()
            .any(|w| matches!(w, Write::PatchDeployment { name, .. } if *name == d.name));
        if !writes_it && !d.claimed && d.owner.as_deref() == Some(self.owner.as_str()) {
            self.plan.writes.push(Write::PatchDeployment {
                name: d.name.clone(),
                body: patches::deployment_claim(),
                sets_target: false,
            });
        }
    }

    /// Release every Deployment this owner still claims but no longer
    /// serves from, after the kept one is applied and only if it still
    /// carries this owner; delete our ConfigMaps nothing refers to any more.
    pub(super) fn release_others(&mut self) {
        let Some((keep_d, keep_cm)) = self.kept.clone() else {
            return;
        };
        let stale: Vec<&DeploymentView> = self
            .obs
            .deployments
            .iter()
            .filter(|d| d.name != keep_d && judge::deployment_owned_by(d, &self.owner))
            .collect();
        for d in &stale {
            self.plan.writes.push(Write::PatchDeployment {
                name: d.name.clone(),
                body: patches::deployment_release(d),
                sets_target: false,
            });
            self.plan.push_event(
                EventReason::TargetReleased,
                format!("Deployment {} is no longer the target; released", d.name),
            );
        }
        // Whether a Deployment will still point at `cm` after this pass: not
        // the kept one (it points at `keep_cm` once applied), not a released one.
        let referenced = |cm: &str| {
            self.obs.deployments.iter().any(|d| {
                d.name != keep_d
                    && !stale.iter().any(|s| s.name == d.name)
                    && d.containers.iter().any(|c| {
                        c.preload
                            .as_ref()
                            .and_then(|e| e.config_map_ref.as_ref())
                            .is_some_and(|(n, _)| n == cm)
                    })
            })
        };
        let doomed: Vec<Write> = self
            .obs
            .config_maps
            .iter()
            .filter(|c| c.name != keep_cm && judge::cm_fully_ours(c, self.m))
            .filter(|c| !referenced(&c.name))
            .map(|c| Write::DeleteConfigMap {
                name: c.name.clone(),
                uid: c.uid.clone(),
            })
            .collect();
        self.plan.writes.extend(doomed);
    }
}
