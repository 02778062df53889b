//! One reconcile pass (docs/contract.md §6) as a pure function: from what
//! was observed to the writes, status and Events that must follow. `run`
//! dispatches to one method per step; blocks, targets and rollbacks have
//! files of their own.

use super::block::{is_block_reason, Block, Refused};
use super::judge;
use super::observed::{DeploymentView, ModelView};
use super::plan::{Observed, Plan, TargetGen, Write};
use super::rollback::before_rejection;
use super::targets::recreated;
use crate::model::spec::DesiredSpec;
use crate::model::status::states;
use crate::model::status::{Cond, EventReason, Field, Phase, Reason, StatusDoc};
use crate::model::{validate, FINALIZER, KOPF_FINALIZER};
use serde_json::json;

pub(super) struct Pass<'a> {
    pub(super) obs: Observed<'a>,
    pub(super) m: &'a ModelView,
    pub(super) owner: String,
    pub(super) plan: Plan,
    /// A refusal the shell met carrying out the previous plan.
    pub(super) refusal: Option<Block>,
    /// The Deployment and ConfigMap this pass keeps serving; every other
    /// one this owner still claims is released (9.16).
    pub(super) kept: Option<(String, String)>,
}

pub(super) const NO_ROLLBACK: &str = "no rollback requested";

impl Pass<'_> {
    pub(super) fn conds(&mut self, c: [Cond; 4]) {
        let g = self.m.generation;
        self.plan.new.set_conditions(c, g, self.obs.now);
    }

    pub(super) fn event(&mut self, reason: EventReason, message: String) {
        self.plan.push_event(reason, message);
    }

    pub(super) fn set_str(&mut self, f: Field, v: &str) {
        self.plan.new.set(f, json!(v));
    }

    pub(super) fn run(&mut self) {
        let m = self.m;
        self.plan
            .new
            .set(Field::ObservedGeneration, json!(m.generation));
        if self.plan.base.get(Field::RollbackCount).is_none() {
            self.plan.new.set(Field::RollbackCount, json!(0));
        }
        // 1. Invalid spec.
        let s = match validate(&m.name, m.spec()) {
            Ok(s) => s,
            Err(e) => {
                let msg = e.to_string();
                self.plan.new.set_phase(Phase::Failed);
                self.conds(states::INVALID_SPEC.with([
                    msg.clone(),
                    "fix the spec to continue".into(),
                    msg,
                    NO_ROLLBACK.into(),
                ]));
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

    /// Steps 6-11: the desired spec against what the Deployment shows,
    /// each step a method that says whether it settled the pass.
    pub(super) fn judge_desired(&mut self, s: &DesiredSpec, hash: &str) {
        if self.failed_spec(s, hash) || self.new_spec(s, hash) {
            return;
        }
        let Some(d) = self.obs.deployment(&s.target.name) else {
            return;
        };
        let base = self.plan.base.clone();
        // 9.18: a Deployment deleted and created again is a new target.
        if recreated(&base, d) {
            self.start_rollout(s, hash, Reason::TargetRecreated);
            return;
        }
        self.kept = Some((s.target.name.clone(), s.manifest_config_map_name.clone()));
        self.record_target(&base, d);
        let gen = base.int(Field::TargetDeploymentGeneration).unwrap_or(0);
        if self.rollout_failed(s, hash, d, gen) || self.config_map_drift(s, hash) {
            return;
        }
        self.ready_or_in_progress(s, hash, d, gen);
    }

    /// Step 6: a failed spec is never retried by itself; a rollback over it
    /// (or a failed one, 9.23) is watched, a cleared block shows it again.
    fn failed_spec(&mut self, s: &DesiredSpec, hash: &str) -> bool {
        let base = &self.plan.base;
        let phase = base.phase();
        let failed = matches!(phase, Some(Phase::Failed) | Some(Phase::RolledBack))
            && base.str(Field::FailedSpecHash) == Some(hash);
        if !failed {
            return false;
        }
        let unblocked = phase == Some(Phase::Failed) && is_block_reason(base.ready_reason());
        let failed_rollback =
            phase == Some(Phase::Failed) && base.ready_reason() == Some(Reason::RollbackFailed);
        let rollback = base.get(Field::RollbackSpec).is_some();
        if phase == Some(Phase::RolledBack) || ((unblocked || failed_rollback) && rollback) {
            self.monitor_rollback(s, hash);
        } else if unblocked {
            self.rollout_failed_conds(s);
        }
        true
    }

    /// Step 7: a new spec, or not yet rolling out, starts a rollout. A
    /// resource whose block has just cleared, with this spec already
    /// applied, is judged as it stands instead (9.2, 9.3).
    fn new_spec(&mut self, s: &DesiredSpec, hash: &str) -> bool {
        let base = &self.plan.base;
        let old_hash = base.str(Field::DesiredSpecHash);
        let resumed =
            is_block_reason(base.ready_reason()) && base.str(Field::AppliedSpecHash) == Some(hash);
        let idle = !matches!(base.phase(), Some(Phase::RollingOut) | Some(Phase::Ready));
        if old_hash == Some(hash) && (!idle || resumed) {
            return false;
        }
        let reason = match old_hash {
            Some(h) if h != hash => Reason::SpecChanged,
            _ => Reason::InitialRollout,
        };
        self.start_rollout(s, hash, reason);
        true
    }

    /// Step 8: the Deployment failed. Our rollout rolls back (or fails);
    /// a failure with no rollout of ours is reported (9.21). A paused
    /// Deployment's deadline is not judged (9.20).
    fn rollout_failed(
        &mut self,
        s: &DesiredSpec,
        hash: &str,
        d: &DeploymentView,
        gen: i64,
    ) -> bool {
        let base = self.plan.base.clone();
        let ours = base.get(Field::TargetDeploymentGeneration).is_some();
        // A failure of a template someone else wrote is not our rollout
        // failing (§6.8): the drift is put right instead (§6.11).
        let template = judge::template_ours(d, s, &self.owner);
        if !ours || d.paused || !template || !judge::failed(d, gen) {
            return false;
        }
        if base.phase() == Some(Phase::Ready) || has_served(&base, hash, &self.m.name) {
            self.target_degraded(d);
            return true;
        }
        let missed = format!(
            "{} missed the progress deadline of Deployment {}",
            s.version, s.target.name
        );
        self.event(
            EventReason::RolloutFailed,
            format!(
                "Rollout of {} to Deployment {} missed its progress deadline",
                s.version, s.target.name
            ),
        );
        match base.spec(Field::LastSuccessfulSpec, &self.m.name) {
            Some(l) if s.rollout.rollback_on_failure && self.blocked(&l).is_none() => {
                self.begin_rollback(&l, hash, format!("automatic:{}", s.version));
                let msg = format!("rolling back to {}", l.version);
                self.conds(states::AUTOMATIC_ROLLBACK_STARTED.with([
                    format!("{} failed; rolling back to {}", s.version, l.version),
                    msg.clone(),
                    missed,
                    msg,
                ]));
            }
            _ => {
                self.plan.new.set_phase(Phase::Failed);
                self.set_str(Field::FailedSpecHash, hash);
                self.rollout_failed_conds(s);
            }
        }
        true
    }

    /// Step 9: the ConfigMap is absent, not ours or says something else.
    fn config_map_drift(&mut self, s: &DesiredSpec, hash: &str) -> bool {
        let ok = self
            .obs
            .config_map(&s.manifest_config_map_name)
            .is_some_and(|cm| judge::cm_content_matches(cm, s));
        if !ok {
            self.start_rollout(s, hash, Reason::DriftCorrected);
        }
        !ok
    }

    /// Steps 10 and 11: Ready, drift put right, or still rolling out.
    fn ready_or_in_progress(&mut self, s: &DesiredSpec, hash: &str, d: &DeploymentView, gen: i64) {
        let matches = judge::matches(d, s, &self.owner);
        let staged = !matches && judge::resize_held(d, s, &self.owner, gen);
        if matches && judge::ready(d, s.replicas, gen) {
            if self.plan.base.phase() != Some(Phase::Ready) {
                self.mark_ready(s);
            }
        } else if !matches && !staged {
            self.start_rollout(s, hash, Reason::DriftCorrected);
            return;
        } else {
            if staged {
                self.apply(s);
            }
            self.rolling_out(s, d);
        }
        self.claim_if_needed(d);
    }

    /// "Starting a rollout".
    pub(super) fn start_rollout(&mut self, s: &DesiredSpec, hash: &str, reason: Reason) {
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
        self.conds(states::started(reason).with([
            msg.clone(),
            format!("rolling out {} to Deployment {}", s.version, s.target.name),
            "no failure".into(),
            NO_ROLLBACK.into(),
        ]));
        self.event(
            EventReason::RolloutStarted,
            format!(
                "Rolling out {} to Deployment {} ({reason})",
                s.version, s.target.name
            ),
        );
    }

    pub(super) fn rollout_failed_conds(&mut self, s: &DesiredSpec) {
        let msg = format!(
            "{} missed the progress deadline of Deployment {}",
            s.version, s.target.name
        );
        let why_not = if !s.rollout.rollback_on_failure {
            "automatic rollback is disabled (rollbackOnFailure: false)"
        } else {
            "no earlier successful version to roll back to"
        };
        self.conds(states::FAILED_NO_ROLLBACK.with([
            msg.clone(),
            msg.clone(),
            msg,
            why_not.into(),
        ]));
    }

    /// Step 10's transition: the desired spec serves.
    pub(super) fn mark_ready(&mut self, s: &DesiredSpec) {
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
        self.conds(states::READY.with([
            format!("{} is serving", s.version),
            format!("rollout of {} complete", s.version),
            "no failure".into(),
            NO_ROLLBACK.into(),
        ]));
        // Serving again after an outside failure (9.21) is no rollout.
        if base.ready_reason() != Some(Reason::TargetDegraded) {
            self.event(
                EventReason::RolloutSucceeded,
                format!("Deployment {} is serving {}", s.target.name, s.version),
            );
        }
    }

    /// Step 11's state: the rollout of `s` is under way.
    pub(super) fn rolling_out(&mut self, s: &DesiredSpec, d: &DeploymentView) {
        self.plan.new.set_phase(Phase::RollingOut);
        let (state, progressing) = if d.paused {
            (states::ROLLING_OUT_PAUSED, paused_message(d, &s.version))
        } else {
            let waiting = format!(
                "waiting for Deployment {} to roll out {}",
                s.target.name, s.version
            );
            (states::ROLLING_OUT, waiting)
        };
        self.conds(state.with([
            format!("rolling out {}", s.version),
            progressing,
            "no failure".into(),
            NO_ROLLBACK.into(),
        ]));
    }

    /// 9.21: the Deployment fails while no rollout of ours is under way.
    pub(super) fn target_degraded(&mut self, d: &DeploymentView) {
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
        let last = if rolled_back {
            "the rollback had completed"
        } else {
            NO_ROLLBACK
        };
        self.conds(states::target_degraded(rolled_back).with([
            msg.clone(),
            msg.clone(),
            msg.clone(),
            last.into(),
        ]));
        self.event(EventReason::TargetDegraded, msg);
    }

    /// A transition's Events go into the status it writes (`lastEvents`),
    /// so the shell can post one that a failure or a crash lost (9.7).
    pub(super) fn record_owed_events(&mut self) {
        let events = self.plan.events_to_post(None);
        if events.is_empty() || self.plan.events_always {
            return;
        }
        let owed: Vec<serde_json::Value> = events
            .iter()
            .map(|e| json!({"reason": e.reason.as_str(), "generation": self.m.generation, "message": e.message}))
            .collect();
        self.plan.new.set(Field::LastEvents, json!(owed));
    }

    /// Keep a finalizer on every resource the operator acts on, added
    /// before the first write that will need cleanup.
    pub(super) fn ensure_finalizer(&mut self) {
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
pub(super) fn has_served(st: &StatusDoc, hash: &str, name: &str) -> bool {
    st.spec(Field::LastSuccessfulSpec, name)
        .is_some_and(|l| l.hash() == hash)
}

/// Progressing=Unknown while the target is paused (9.20): Kubernetes
/// neither rolls out nor judges the deadline until it is resumed.
pub(super) fn paused_message(d: &DeploymentView, version: &str) -> String {
    format!(
        "Deployment {} is paused; the rollout of {version} waits for `kubectl rollout resume deployment/{}`",
        d.name, d.name
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

fn plan_with(obs: Observed<'_>, refusal: Option<Block>) -> Plan {
    if obs.model.deleting {
        return super::delete::plan_delete(obs);
    }
    let mut plan = Plan::bare(obs.model.shared_status().clone());
    if let Some(restored) = before_rejection(&plan.base, obs.model) {
        plan.new = restored.clone();
        plan.base = restored.into();
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
    pass.record_owed_events();
    pass.plan
}
