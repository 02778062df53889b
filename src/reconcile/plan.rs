//! One reconcile pass (contract section 6) as a pure function: from what
//! was observed to the writes, status and Events that must follow.

use super::judge::{self, cm_ours};
use super::observed::{ConfigMapView, DeploymentView, ModelView};
use super::patches;
use crate::model::spec::DesiredSpec;
use crate::model::status::{
    bounded, cond, Cond, CondStatus, ConditionType, EventReason, Field, Phase, Reason, StatusDoc,
    MAX_MESSAGE,
};
use crate::model::{validate, FINALIZER, KOPF_FINALIZER};
use serde_json::{json, Value};

/// Everything one pass looks at. `deployments` and `config_maps` hold
/// whichever of the names from [`lookups`] exist.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub model: &'a ModelView,
    pub deployments: &'a [DeploymentView],
    pub config_maps: &'a [ConfigMapView],
    /// Owners (`<namespace>/<name>`) named on observed Deployments that are
    /// confirmed to exist no more: their Deployments are orphans, adopted
    /// rather than reported as a conflict (9.16).
    pub orphans: &'a [String],
    /// RFC 3339 UTC, seconds.
    pub now: &'a str,
}

impl<'a> Observed<'a> {
    fn deployment(&self, name: &str) -> Option<&'a DeploymentView> {
        self.deployments.iter().find(|d| d.name == name)
    }
    fn config_map(&self, name: &str) -> Option<&'a ConfigMapView> {
        self.config_maps.iter().find(|c| c.name == name)
    }
}

/// The Deployments and ConfigMaps a pass may need: those of the desired
/// spec and of every spec retained in status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookups {
    pub deployments: Vec<String>,
    pub config_maps: Vec<String>,
}

pub fn lookups(m: &ModelView) -> Lookups {
    let mut out = Lookups::default();
    let mut add = |s: &DesiredSpec| {
        if !out.deployments.contains(&s.target.name) {
            out.deployments.push(s.target.name.clone());
        }
        if !out.config_maps.contains(&s.manifest_config_map_name) {
            out.config_maps.push(s.manifest_config_map_name.clone());
        }
    };
    if let Ok(s) = validate(&m.name, m.spec.as_ref()) {
        add(&s);
    }
    for s in StatusDoc::from_value(m.status.as_ref()).retained_specs(&m.name) {
        add(&s);
    }
    out
}

/// One write, in the order it must happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Merge patch of the OpenMedModel's finalizers (the full new list),
    /// conditional on its resourceVersion.
    AddFinalizer {
        finalizers: Vec<String>,
    },
    CreateConfigMap {
        body: Value,
    },
    PatchConfigMap {
        name: String,
        body: Value,
    },
    /// Strategic merge patch. With `sets_target`, the generation it returns
    /// becomes `status.targetDeploymentGeneration`.
    PatchDeployment {
        name: String,
        body: Value,
        sets_target: bool,
    },
    /// Delete, on condition that the uid is still this one.
    DeleteConfigMap {
        name: String,
        uid: String,
    },
    /// As AddFinalizer, with ours (and Kopf's) taken out.
    RemoveFinalizers {
        finalizers: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub reason: EventReason,
    pub message: String,
}

/// Where `status.targetDeploymentGeneration` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetGen {
    Unchanged,
    Known(i64),
    FromPatch,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub events: Vec<EventSpec>,
    /// The status as stored: what the status patch is computed against.
    old: StatusDoc,
    /// The status the pass reasons from: as stored, or as it was before a
    /// rejected `rollback-to` annotation that has since gone (9.3, 9.24).
    base: StatusDoc,
    new: StatusDoc,
    target: TargetGen,
    /// Deletion posts its Event whatever happens to status.
    events_always: bool,
}

impl Plan {
    /// The status after this pass, given the generation the Deployment
    /// patch returned (if one was sent).
    pub fn status(&self, patched_generation: Option<i64>) -> StatusDoc {
        let mut st = self.new.clone();
        match (self.target, patched_generation) {
            (TargetGen::Known(g), _) | (TargetGen::FromPatch, Some(g)) => {
                st.set(Field::TargetDeploymentGeneration, json!(g))
            }
            _ => {}
        }
        st
    }

    /// The `/status` merge patch, or None when the status would not change.
    pub fn status_patch(
        &self,
        patched_generation: Option<i64>,
        resource_version: &str,
    ) -> Option<Value> {
        let changes = self.status(patched_generation).diff(&self.old)?;
        Some(patches::status_patch(resource_version, changes))
    }

    /// An Event announces a transition (9.1, 9.24): it is posted when a
    /// condition's status or reason changes from the state the pass reasoned
    /// from, never because some other field (a message, a version) did.
    pub fn events_to_post(&self, patched_generation: Option<i64>) -> &[EventSpec] {
        let moved = self.status(patched_generation).transitions() != self.base.transitions();
        if self.events_always || moved {
            &self.events
        } else {
            &[]
        }
    }

    /// Nothing to write at all.
    pub fn is_noop(&self) -> bool {
        self.writes.is_empty() && self.status(None).diff(&self.old).is_none()
    }

    pub(crate) fn bare(old: StatusDoc) -> Plan {
        Plan {
            writes: Vec::new(),
            events: Vec::new(),
            new: old.clone(),
            base: old.clone(),
            old,
            target: TargetGen::Unchanged,
            events_always: false,
        }
    }

    pub(crate) fn push_event(&mut self, reason: EventReason, message: String) {
        self.events.push(EventSpec { reason, message });
    }

    /// Deletion plans post their Event regardless of status.
    pub(crate) fn always_post_events(&mut self) {
        self.events_always = true;
    }
}

/// Why a spec cannot be applied right now (an environmental block).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Block {
    TargetNotFound(String),
    ContainerNotFound(String, String),
    TargetConflict(String, String),
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
    fn reason(&self) -> (Reason, EventReason) {
        match self {
            Block::TargetNotFound(_) => (Reason::TargetNotFound, EventReason::TargetNotFound),
            Block::ContainerNotFound(..) => {
                (Reason::ContainerNotFound, EventReason::ContainerNotFound)
            }
            Block::TargetConflict(..) => (Reason::TargetConflict, EventReason::TargetConflict),
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

    fn message(&self, ns: &str) -> String {
        match self {
            Block::TargetNotFound(d) => format!("Deployment {ns}/{d} not found"),
            Block::ContainerNotFound(d, c) => format!("Deployment {ns}/{d} has no container {c:?}"),
            Block::TargetConflict(d, other) => {
                format!("Deployment {ns}/{d} is managed by OpenMedModel {other}")
            }
            Block::ConfigMapConflict(c) => {
                format!(
                    "ConfigMap {ns}/{c} exists and belongs to someone else; it is left untouched"
                )
            }
            Block::Refused(_, why) => bounded(why, MAX_MESSAGE),
        }
    }
}

struct Pass<'a> {
    obs: Observed<'a>,
    m: &'a ModelView,
    owner: String,
    plan: Plan,
    /// A refusal the shell met carrying out the previous plan.
    refusal: Option<Block>,
    /// The Deployment and ConfigMap this pass keeps serving; every other
    /// one this owner still claims is released (9.16).
    kept: Option<(String, String)>,
}

const NO_ROLLBACK: &str = "no rollback requested";

impl<'a> Pass<'a> {
    fn conds(&mut self, c: [Cond; 4]) {
        let g = self.m.generation;
        self.plan.new.set_conditions(c, g, self.obs.now);
    }

    fn event(&mut self, reason: EventReason, message: String) {
        self.plan.push_event(reason, message);
    }

    fn set_str(&mut self, f: Field, v: &str) {
        self.plan.new.set(f, json!(v));
    }

    fn blocked(&self, s: &DesiredSpec) -> Option<Block> {
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

    /// Another OpenMedModel named on the Deployment that still exists; an
    /// owner confirmed gone leaves an orphan, which is adopted.
    fn foreign_owner(&self, d: &DeploymentView) -> Option<String> {
        [d.owner.as_deref(), d.template_owner.as_deref()]
            .into_iter()
            .flatten()
            .find(|o| !o.is_empty() && *o != self.owner && !self.obs.orphans.iter().any(|x| x == o))
            .map(str::to_string)
    }

    /// Steps 2-4 (and the foreign ConfigMap of 9.2): report the block.
    fn report_block(&mut self, b: Block) {
        self.kept = None;
        let (reason, event) = b.reason();
        let msg = b.message(&self.m.namespace);
        let phase = if matches!(b, Block::TargetNotFound(_)) {
            Phase::Pending
        } else {
            Phase::Failed
        };
        self.plan.new.set_phase(phase);
        self.conds([
            cond(false, reason, msg.clone()),
            cond(false, Reason::Blocked, msg.clone()),
            cond(true, reason, msg.clone()),
            cond(false, Reason::NotRequested, NO_ROLLBACK),
        ]);
        self.event(event, msg);
    }

    /// Section 3: plan the ConfigMap and Deployment writes for `s`.
    fn apply(&mut self, s: &DesiredSpec) {
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
        if judge::needs_apply(d, s, &self.owner) {
            self.plan.writes.push(Write::PatchDeployment {
                name: s.target.name.clone(),
                body: patches::deployment_apply(self.m, s),
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

    /// "Starting a rollout".
    fn start_rollout(&mut self, s: &DesiredSpec, hash: &str, reason: Reason) {
        let before = self.plan.writes.len();
        self.apply(s);
        self.plan.new.set_phase(Phase::RollingOut);
        self.set_str(Field::AppliedSpecHash, hash);
        for f in [
            Field::FailedSpecHash,
            Field::RollbackSpec,
            Field::RollbackRequest,
        ] {
            self.plan.new.clear(f);
        }
        // 9.11: nothing to write means no rollout to start: judge the
        // Deployment as it stands, in this very pass.
        let wrote = self.plan.writes.len() > before;
        if let (false, TargetGen::Known(g), Some(d)) =
            (wrote, self.plan.target, self.obs.deployment(&s.target.name))
        {
            if judge::ready(d, s.replicas, g) {
                self.mark_ready(s);
            } else {
                self.rolling_out(s, d);
            }
            return;
        }
        let msg = format!("rolling out {} ({reason})", s.version);
        self.conds([
            cond(false, Reason::RolloutStarted, msg.clone()),
            cond(
                true,
                reason,
                format!("rolling out {} to Deployment {}", s.version, s.target.name),
            ),
            cond(false, Reason::Healthy, "no failure"),
            cond(false, Reason::NotRequested, NO_ROLLBACK),
        ]);
        self.event(
            EventReason::RolloutStarted,
            format!(
                "Rolling out {} to Deployment {} ({reason})",
                s.version, s.target.name
            ),
        );
    }

    /// Apply a retained spec instead of the desired one (steps 5 and 8).
    fn begin_rollback(&mut self, r: &DesiredSpec, desired_hash: &str, request: String) {
        self.apply(r);
        self.plan.new.set_phase(Phase::RolledBack);
        self.set_str(Field::ActiveVersion, &r.version);
        self.set_str(Field::AppliedSpecHash, &r.hash());
        // A manual rollback is an override, not a verdict (9.22): only an
        // automatic one records the desired spec as failed.
        if request.starts_with("automatic:") {
            self.set_str(Field::FailedSpecHash, desired_hash);
        } else {
            self.plan.new.clear(Field::FailedSpecHash);
        }
        self.plan.new.clear(Field::BeforeRejection);
        self.plan.new.set(Field::RollbackSpec, r.to_json());
        self.set_str(Field::RollbackRequest, &request);
        let count = self.plan.base.int(Field::RollbackCount).unwrap_or(0);
        self.plan.new.set(Field::RollbackCount, json!(count + 1));
        self.event(
            EventReason::RollbackStarted,
            format!("Rolling back Deployment {} to {}", r.target.name, r.version),
        );
    }

    fn rollback_failed_conds(&mut self, r_version: &str, deployment: &str) {
        let msg = format!(
            "rollback to {r_version} missed the progress deadline of Deployment {deployment}"
        );
        self.conds([
            cond(false, Reason::RollbackFailed, msg.clone()),
            cond(false, Reason::ProgressDeadlineExceeded, msg.clone()),
            cond(true, Reason::RollbackFailed, msg.clone()),
            cond(false, Reason::RollbackFailed, msg),
        ]);
    }

    fn rollout_failed_conds(&mut self, s: &DesiredSpec) {
        let msg = format!(
            "{} missed the progress deadline of Deployment {}",
            s.version, s.target.name
        );
        let why_not = if !s.rollout.rollback_on_failure {
            "automatic rollback is disabled (rollbackOnFailure: false)"
        } else {
            "no earlier successful version to roll back to"
        };
        self.conds([
            cond(false, Reason::RolloutFailed, msg.clone()),
            cond(false, Reason::ProgressDeadlineExceeded, msg.clone()),
            cond(true, Reason::RolloutFailed, msg),
            cond(false, Reason::RollbackDisabled, why_not),
        ]);
    }

    /// Step 12: watch a rollback through.
    fn monitor_rollback(&mut self, desired: &DesiredSpec, hash: &str) {
        let Some(r) = self.plan.base.spec(Field::RollbackSpec, &self.m.name) else {
            // A rollback with no readable rollbackSpec cannot be watched:
            // go back to the desired spec.
            self.start_rollout(desired, hash, Reason::InitialRollout);
            return;
        };
        if let Some(b) = self.blocked(&r) {
            self.report_block(b);
            return;
        }
        let gen = self
            .plan
            .base
            .int(Field::TargetDeploymentGeneration)
            .unwrap_or(0);
        let manual = self
            .plan
            .base
            .str(Field::RollbackRequest)
            .map(|q| q.starts_with("manual:"))
            .unwrap_or(false);
        let Some(d) = self.obs.deployment(&r.target.name) else {
            return;
        };
        self.kept = Some((r.target.name.clone(), r.manifest_config_map_name.clone()));
        let recreated = recreated(&self.plan.base, d);
        self.record_uid(&self.plan.base.clone(), d);
        // A manual rollback is an override, not a verdict (9.22).
        let degraded = if manual {
            cond(
                true,
                Reason::ManualRollback,
                format!(
                    "serving {} instead of {} (manual rollback)",
                    r.version, desired.version
                ),
            )
        } else {
            cond(
                true,
                Reason::DesiredVersionFailed,
                format!("{} failed its rollout", desired.version),
            )
        };
        let base = &self.plan.base;
        let served = base.ready_reason() == Some(Reason::TargetDegraded)
            || base.condition_reason(ConditionType::RolledBack) == Some(Reason::RollbackSucceeded);
        self.plan.new.set_phase(Phase::RolledBack);
        self.set_str(Field::ActiveVersion, &r.version);
        let failed = !recreated && !d.paused && judge::failed(d, gen);
        if failed && served {
            // The rollback had served: an outside failure (9.21).
            self.target_degraded(d);
            return;
        }
        if failed {
            self.plan.new.set_phase(Phase::Failed);
            self.rollback_failed_conds(&r.version, &r.target.name);
            self.event(
                EventReason::RollbackFailed,
                format!(
                    "Rollback of Deployment {} to {} missed its progress deadline",
                    r.target.name, r.version
                ),
            );
            return;
        }
        let drifted = !judge::matches(d, &r, &self.owner)
            || self
                .obs
                .config_map(&r.manifest_config_map_name)
                .map(|cm| !judge::cm_content_matches(cm, &r))
                .unwrap_or(true);
        if !recreated && !drifted && judge::ready(d, r.replicas, gen) {
            self.conds([
                cond(
                    false,
                    Reason::RolledBack,
                    format!("rolled back to {}", r.version),
                ),
                cond(
                    false,
                    Reason::RollbackComplete,
                    format!("rollback to {} complete", r.version),
                ),
                degraded,
                cond(
                    true,
                    Reason::RollbackSucceeded,
                    format!("rolled back to {}", r.version),
                ),
            ]);
            if self.plan.base.ready_reason() != Some(Reason::TargetDegraded) {
                self.event(
                    EventReason::RollbackSucceeded,
                    format!(
                        "Deployment {} is serving {} again",
                        r.target.name, r.version
                    ),
                );
            }
            return;
        }
        if drifted || recreated {
            // Someone changed what the rollback wrote, or the Deployment
            // was created again: write it again and judge it afresh.
            self.apply(&r);
        }
        let progressing = if d.paused {
            paused_cond(d, &r.version)
        } else {
            cond(
                true,
                Reason::RollbackInProgress,
                format!("rolling back Deployment {} to {}", r.target.name, r.version),
            )
        };
        self.conds([
            cond(
                false,
                Reason::RolledBack,
                format!("rolling back to {}", r.version),
            ),
            progressing,
            degraded,
            cond(
                false,
                Reason::RollbackInProgress,
                format!("rolling back to {}", r.version),
            ),
        ]);
    }

    /// Step 5.
    fn manual_rollback(&mut self, desired: &DesiredSpec, hash: &str, target: &str) {
        let request = format!("manual:{target}");
        let same_request = self.plan.base.str(Field::RollbackRequest) == Some(request.as_str());
        let phase = self.plan.base.phase();
        let failed_rollback = phase == Some(Phase::Failed)
            && matches!(
                self.plan.base.ready_reason(),
                Some(Reason::RollbackFailed | Reason::TargetDegraded)
            );
        if same_request && (phase == Some(Phase::RolledBack) || failed_rollback) {
            // A rollback under way, done, or failed: judged on every pass
            // (9.23), so a failed one that later serves is RolledBack.
            self.monitor_rollback(desired, hash);
            return;
        }
        // The last successful spec first, then the previous one.
        let retained = [Field::LastSuccessfulSpec, Field::PreviousSuccessfulSpec]
            .iter()
            .filter_map(|f| self.plan.base.spec(*f, &self.m.name))
            .find(|s| s.version == target);
        match retained {
            None => {
                let versions: Vec<String> =
                    [Field::LastSuccessfulSpec, Field::PreviousSuccessfulSpec]
                        .iter()
                        .filter_map(|f| self.plan.base.get(*f))
                        .filter_map(|v| v["version"].as_str().map(str::to_string))
                        .collect();
                let retained = if versions.is_empty() {
                    "none".to_string()
                } else {
                    versions.join(", ")
                };
                let msg = format!(
                    "rollback target {target} is not a retained version (retained: {retained})"
                );
                self.remember_before_rejection();
                self.plan.new.set_phase(Phase::Failed);
                self.set_str(Field::RollbackRequest, &request);
                self.conds([
                    cond(false, Reason::RollbackTargetUnavailable, msg.clone()),
                    cond(false, Reason::Blocked, msg.clone()),
                    cond(true, Reason::RollbackTargetUnavailable, msg.clone()),
                    cond(false, Reason::RollbackRejected, msg.clone()),
                ]);
                self.event(EventReason::RollbackRejected, msg);
            }
            Some(r) if r.hash() == hash => {
                // A rollback to the very spec the resource names is no
                // rollback (9.10): judge the spec as it stands.
                self.plan.new.clear(Field::BeforeRejection);
                self.judge_desired(desired, hash);
            }
            Some(r) => {
                if let Some(b) = self.blocked(&r) {
                    self.report_block(b);
                    return;
                }
                self.begin_rollback(&r, hash, request);
                let msg = format!("rolling back to {}", r.version);
                self.conds([
                    cond(
                        false,
                        Reason::ManualRollback,
                        format!("manual rollback to {} requested", r.version),
                    ),
                    cond(true, Reason::RollbackInProgress, msg.clone()),
                    cond(
                        true,
                        Reason::ManualRollback,
                        format!("serving {} instead of {}", r.version, desired.version),
                    ),
                    cond(false, Reason::RollbackInProgress, msg),
                ]);
            }
        }
    }

    fn run(&mut self) {
        let m = self.m;
        self.plan
            .new
            .set(Field::ObservedGeneration, json!(m.generation));
        if self.plan.base.get(Field::RollbackCount).is_none() {
            self.plan.new.set(Field::RollbackCount, json!(0));
        }
        // 1. Invalid spec.
        let s = match validate(&m.name, m.spec.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                let msg = e.to_string();
                self.plan.new.set_phase(Phase::Failed);
                self.conds([
                    cond(false, Reason::InvalidSpec, msg.clone()),
                    cond(false, Reason::Blocked, "fix the spec to continue"),
                    cond(true, Reason::InvalidSpec, msg),
                    cond(false, Reason::NotRequested, NO_ROLLBACK),
                ]);
                return;
            }
        };
        let hash = s.hash();
        self.set_str(Field::DesiredVersion, &s.version);
        self.set_str(Field::DesiredSpecHash, &hash);
        self.set_str(Field::ManifestHash, &s.manifest_hash());

        // 2-4, and 9.2's foreign ConfigMap.
        if let Some(b) = self.blocked(&s) {
            self.report_block(b);
            return;
        }
        // 5. Manual rollback.
        if let Some(target) = m.rollback_to.clone() {
            self.manual_rollback(&s, &hash, &target);
            return;
        }
        self.judge_desired(&s, &hash);
    }

    /// Steps 6-11: the desired spec against what the Deployment shows.
    fn judge_desired(&mut self, s: &DesiredSpec, hash: &str) {
        let (m, s, hash) = (self.m, s.clone(), hash.to_string());
        let old = self.plan.base.clone();
        let phase = old.phase();
        // 6. A failed spec is never retried by itself.
        if matches!(phase, Some(Phase::Failed) | Some(Phase::RolledBack))
            && old.str(Field::FailedSpecHash) == Some(hash.as_str())
        {
            let unblocked = phase == Some(Phase::Failed) && is_block_reason(old.ready_reason());
            let failed_rollback =
                phase == Some(Phase::Failed) && old.ready_reason() == Some(Reason::RollbackFailed);
            if phase == Some(Phase::RolledBack)
                || ((unblocked || failed_rollback) && old.get(Field::RollbackSpec).is_some())
            {
                // A rollback, or a block over one that has now cleared (9.2,
                // 9.3): judge the rollback by what the Deployment shows.
                self.monitor_rollback(&s, &hash);
            } else if unblocked {
                // A block over a failed rollout has cleared: show the failure again.
                self.rollout_failed_conds(&s);
            }
            return;
        }
        // 7. A new spec, or not yet rolling out. A resource whose block has
        // just cleared, with this spec already applied, is judged as it
        // stands instead (9.2, 9.3): no needless restart of the rollout.
        let old_hash = old.str(Field::DesiredSpecHash);
        let resumed = is_block_reason(old.ready_reason())
            && old.str(Field::AppliedSpecHash) == Some(hash.as_str());
        let idle = !matches!(phase, Some(Phase::RollingOut) | Some(Phase::Ready));
        if old_hash != Some(hash.as_str()) || (idle && !resumed) {
            let reason = match old_hash {
                Some(h) if h != hash => Reason::SpecChanged,
                _ => Reason::InitialRollout,
            };
            self.start_rollout(&s, &hash, reason);
            return;
        }
        let Some(d) = self.obs.deployment(&s.target.name) else {
            return;
        };
        // 9.18: a Deployment deleted and created again is a new target.
        if recreated(&old, d) {
            self.start_rollout(&s, &hash, Reason::TargetRecreated);
            return;
        }
        self.kept = Some((s.target.name.clone(), s.manifest_config_map_name.clone()));
        self.record_uid(&old, d);
        let gen = old.int(Field::TargetDeploymentGeneration).unwrap_or(0);
        // 8. The rollout failed (a paused Deployment's deadline is not judged).
        if old.get(Field::TargetDeploymentGeneration).is_some()
            && !d.paused
            && judge::failed(d, gen)
        {
            // 9.21: not a rollout of ours (Ready, or the applied spec has
            // served): report the Deployment, roll nothing back.
            if phase == Some(Phase::Ready) || has_served(&old, &hash, &m.name) {
                self.target_degraded(d);
                return;
            }
            self.event(
                EventReason::RolloutFailed,
                format!(
                    "Rollout of {} to Deployment {} missed its progress deadline",
                    s.version, s.target.name
                ),
            );
            match old.spec(Field::LastSuccessfulSpec, &m.name) {
                Some(l) if s.rollout.rollback_on_failure && self.blocked(&l).is_none() => {
                    self.begin_rollback(&l, &hash, format!("automatic:{}", s.version));
                    let msg = format!("rolling back to {}", l.version);
                    self.conds([
                        cond(
                            false,
                            Reason::RolledBack,
                            format!("{} failed; rolling back to {}", s.version, l.version),
                        ),
                        cond(true, Reason::RollbackInProgress, msg.clone()),
                        cond(
                            true,
                            Reason::RolloutFailed,
                            format!(
                                "{} missed the progress deadline of Deployment {}",
                                s.version, s.target.name
                            ),
                        ),
                        cond(false, Reason::RollbackInProgress, msg),
                    ]);
                }
                _ => {
                    self.plan.new.set_phase(Phase::Failed);
                    self.set_str(Field::FailedSpecHash, &hash);
                    self.rollout_failed_conds(&s);
                }
            }
            return;
        }
        // 9. The ConfigMap drifted.
        let cm_ok = self
            .obs
            .config_map(&s.manifest_config_map_name)
            .map(|cm| judge::cm_content_matches(cm, &s))
            .unwrap_or(false);
        if !cm_ok {
            self.start_rollout(&s, &hash, Reason::DriftCorrected);
            return;
        }
        let matches = judge::matches(d, &s, &self.owner);
        // 10. Done.
        if matches && judge::ready(d, s.replicas, gen) {
            if phase != Some(Phase::Ready) {
                self.mark_ready(&s);
            }
            self.claim_if_needed(d);
            return;
        }
        // 11. Drift, or still rolling out.
        if !matches {
            self.start_rollout(&s, &hash, Reason::DriftCorrected);
            return;
        }
        self.rolling_out(&s, d);
        self.claim_if_needed(d);
    }

    /// Step 10's transition: the desired spec serves.
    fn mark_ready(&mut self, s: &DesiredSpec) {
        let base = self.plan.base.clone();
        self.plan.new.set_phase(Phase::Ready);
        self.set_str(Field::ActiveVersion, &s.version);
        let spec_json = s.to_json();
        if let Some(last) = base.get(Field::LastSuccessfulSpec) {
            if *last != spec_json {
                self.plan
                    .new
                    .set(Field::PreviousSuccessfulSpec, last.clone());
            }
        }
        self.plan.new.set(Field::LastSuccessfulSpec, spec_json);
        for f in [
            Field::FailedSpecHash,
            Field::RollbackSpec,
            Field::RollbackRequest,
        ] {
            self.plan.new.clear(f);
        }
        self.conds([
            cond(
                true,
                Reason::RolloutSucceeded,
                format!("{} is serving", s.version),
            ),
            cond(
                false,
                Reason::RolloutComplete,
                format!("rollout of {} complete", s.version),
            ),
            cond(false, Reason::Healthy, "no failure"),
            cond(false, Reason::NotRequested, NO_ROLLBACK),
        ]);
        // Serving again after an outside failure (9.21) is no rollout.
        if base.ready_reason() != Some(Reason::TargetDegraded) {
            self.event(
                EventReason::RolloutSucceeded,
                format!("Deployment {} is serving {}", s.target.name, s.version),
            );
        }
    }

    /// Step 11's state: the rollout of `s` is under way.
    fn rolling_out(&mut self, s: &DesiredSpec, d: &DeploymentView) {
        self.plan.new.set_phase(Phase::RollingOut);
        let progressing = if d.paused {
            paused_cond(d, &s.version)
        } else {
            cond(
                true,
                Reason::DeploymentProgressing,
                format!(
                    "waiting for Deployment {} to roll out {}",
                    s.target.name, s.version
                ),
            )
        };
        self.conds([
            cond(
                false,
                Reason::RolloutInProgress,
                format!("rolling out {}", s.version),
            ),
            progressing,
            cond(false, Reason::Healthy, "no failure"),
            cond(false, Reason::NotRequested, NO_ROLLBACK),
        ]);
    }

    /// 9.21: the Deployment fails while no rollout of ours is under way.
    fn target_degraded(&mut self, d: &DeploymentView) {
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
            d.name
        );
        self.plan.new.set_phase(Phase::Failed);
        let rolled_back = self.plan.base.get(Field::RollbackSpec).is_some();
        self.conds([
            cond(false, Reason::TargetDegraded, msg.clone()),
            cond(false, Reason::TargetDegraded, msg.clone()),
            cond(true, Reason::TargetDegraded, msg.clone()),
            if rolled_back {
                cond(
                    true,
                    Reason::RollbackSucceeded,
                    "the rollback had completed",
                )
            } else {
                cond(false, Reason::NotRequested, NO_ROLLBACK)
            },
        ]);
        self.event(EventReason::TargetDegraded, msg);
    }

    /// A rejected `rollback-to` keeps what it replaces, so removing or
    /// correcting it restores exactly that (9.3, 9.24).
    fn remember_before_rejection(&mut self) {
        if self.plan.base.get(Field::BeforeRejection).is_some() {
            return;
        }
        let b = &self.plan.base;
        let snapshot = json!({
            "phase": b.get(Field::Phase),
            "rollbackRequest": b.get(Field::RollbackRequest),
            "conditions": b.get(Field::Conditions),
        });
        self.plan.new.set(Field::BeforeRejection, snapshot);
    }

    /// Status from before 9.18 has no target uid: record the one judged.
    fn record_uid(&mut self, old: &StatusDoc, d: &DeploymentView) {
        if old.get(Field::TargetDeploymentUid).is_none() && !d.uid.is_empty() {
            self.plan
                .new
                .set(Field::TargetDeploymentUid, json!(d.uid.clone()));
        }
    }

    /// A Deployment we own but have not labelled (adopted from the
    /// reference operator): add the label only, no spec change.
    fn claim_if_needed(&mut self, d: &DeploymentView) {
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
    fn release_others(&mut self) {
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

    /// Keep a finalizer on every resource the operator acts on, added
    /// before the first write that will need cleanup.
    fn ensure_finalizer(&mut self) {
        let has = self
            .m
            .finalizers
            .iter()
            .any(|f| f == FINALIZER || f == KOPF_FINALIZER);
        let acted = self.plan.base.get(Field::AppliedSpecHash).is_some();
        if has || (self.plan.writes.is_empty() && !acted) {
            return;
        }
        let mut finalizers = self.m.finalizers.clone();
        finalizers.push(FINALIZER.to_string());
        self.plan
            .writes
            .insert(0, Write::AddFinalizer { finalizers });
    }
}

/// `hash` is the spec status records as having served last.
fn has_served(st: &StatusDoc, hash: &str, name: &str) -> bool {
    st.spec(Field::LastSuccessfulSpec, name)
        .is_some_and(|l| l.hash() == hash)
}

/// The Deployment's uid differs from the one status recorded (9.18).
fn recreated(old: &StatusDoc, d: &DeploymentView) -> bool {
    old.str(Field::TargetDeploymentUid)
        .is_some_and(|u| !d.uid.is_empty() && u != d.uid)
}

/// Progressing=Unknown while the target is paused (9.20): Kubernetes
/// neither rolls out nor judges the deadline until it is resumed.
fn paused_cond(d: &DeploymentView, version: &str) -> Cond {
    cond(
        CondStatus::Unknown,
        Reason::TargetPaused,
        format!(
            "Deployment {} is paused; the rollout of {version} waits for `kubectl rollout resume deployment/{}`",
            d.name, d.name
        ),
    )
}

fn is_block_reason(r: Option<Reason>) -> bool {
    matches!(
        r,
        Some(
            Reason::TargetNotFound
                | Reason::ContainerNotFound
                | Reason::TargetConflict
                | Reason::ConfigMapConflict
                | Reason::RollbackTargetUnavailable
                | Reason::InvalidSpec
                | Reason::TargetPatchRejected
                | Reason::ConfigMapRejected
                | Reason::TargetDegraded
        )
    )
}

/// The plan for one pass over `obs.model`.
pub fn plan(obs: Observed<'_>) -> Plan {
    plan_with(obs, None)
}

/// The plan after the API refused a write of the last plan with an error
/// retrying will not cure (9.19): the block is reported with the API's words.
pub fn plan_refused(obs: Observed<'_>, what: Refused, message: &str) -> Plan {
    plan_with(obs, Some(Block::Refused(what, message.to_string())))
}

/// The status as it was before a rejected `rollback-to`, once the
/// annotation is gone or back at the request it replaced.
fn before_rejection(base: &StatusDoc, m: &ModelView) -> Option<StatusDoc> {
    let snapshot = base.get(Field::BeforeRejection)?;
    let request = snapshot["rollbackRequest"].as_str();
    let back = match &m.rollback_to {
        None => true,
        Some(t) => request == Some(format!("manual:{t}").as_str()),
    };
    if !back {
        return None;
    }
    let mut restored = base.clone();
    for f in [Field::Phase, Field::RollbackRequest, Field::Conditions] {
        match snapshot.get(f.key()).filter(|v| !v.is_null()) {
            Some(v) => restored.set(f, v.clone()),
            None => restored.clear(f),
        }
    }
    restored.clear(Field::BeforeRejection);
    Some(restored)
}

fn plan_with(obs: Observed<'_>, refusal: Option<Block>) -> Plan {
    if obs.model.deleting {
        return super::delete::plan_delete(obs);
    }
    let old = StatusDoc::from_value(obs.model.status.as_ref());
    let mut plan = Plan::bare(old);
    if let Some(restored) = before_rejection(&plan.base, obs.model) {
        plan.base = restored.clone();
        plan.new = restored;
    }
    let mut pass = Pass {
        obs,
        m: obs.model,
        owner: obs.model.owner(),
        plan,
        refusal,
        kept: None,
    };
    pass.run();
    pass.release_others();
    pass.ensure_finalizer();
    pass.plan.new.stamp_generation(obs.model.generation);
    pass.plan
}
