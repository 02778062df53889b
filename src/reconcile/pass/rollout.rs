//! Steps 6-11 (docs/contract.md §6.6-§6.11): the desired spec judged
//! against what its Deployment shows, and the rollout states that follow.

use super::Pass;
use crate::model::spec::DesiredSpec;
use crate::model::status::{states, EventReason, Field, Messages, Phase, Reason};
use crate::reconcile::block::is_block_reason;
use crate::reconcile::facts::{has_served, recreated};
use crate::reconcile::judge;
use crate::reconcile::messages::{paused_message, NO_ROLLBACK};
use crate::reconcile::observed::DeploymentView;
use crate::reconcile::plan::TargetGen;

impl Pass<'_> {
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
        // Failed, unless RolledBack (which is watched whatever its reason).
        let unblocked = is_block_reason(base.ready_reason());
        let failed_rollback = base.ready_reason() == Some(Reason::RollbackFailed);
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
                self.conds(states::AUTOMATIC_ROLLBACK_STARTED.with(Messages {
                    ready: format!("{} failed; rolling back to {}", s.version, l.version),
                    progressing: msg.clone(),
                    degraded: missed,
                    rolled_back: msg,
                }));
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
                // The Deployment serves a version the last status never
                // said it did: a rollout whose patch landed and whose status
                // did not (its writer died, or met conflict after conflict:
                // §9.7), already done. Announce it and its success (§6.13).
                let rolled = self
                    .plan
                    .base
                    .str(Field::ActiveVersion)
                    .is_some_and(|v| v != s.version);
                if rolled {
                    self.announce_rollout(s, reason);
                }
                self.mark_ready(s);
            } else {
                self.rolling_out(s, d);
                // A replica that wrote this rollout's patch died before its
                // status and Event (§9.7): it is under way, so announce it.
                if self.plan.base.str(Field::AppliedSpecHash) != Some(hash) {
                    self.announce_rollout(s, reason);
                }
            }
            return;
        }
        let msg = format!("rolling out {} ({reason})", s.version);
        self.conds(states::started(reason).with(Messages {
            ready: msg,
            progressing: format!("rolling out {} to Deployment {}", s.version, s.target.name),
            degraded: "no failure".into(),
            rolled_back: NO_ROLLBACK.into(),
        }));
        self.announce_rollout(s, reason);
    }

    /// Event `RolloutStarted`, even when the conditions were already the
    /// last rollout's "started" ones, its pods slow to warm (§6.13).
    fn announce_rollout(&mut self, s: &DesiredSpec, reason: Reason) {
        self.plan.new_report = true;
        self.event(
            EventReason::RolloutStarted,
            format!(
                "Rolling out {} to Deployment {} ({reason})",
                s.version, s.target.name
            ),
        );
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
        self.conds(states::FAILED_NO_ROLLBACK.with(Messages {
            rolled_back: why_not.into(),
            ..Messages::all(msg)
        }));
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
        self.conds(states::READY.with(Messages {
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
            && !self.announced(EventReason::RolloutSucceeded, &msg)
        {
            self.event(EventReason::RolloutSucceeded, msg);
        }
    }

    /// Whether the last transition that required Events required this one,
    /// in this generation: `lastEvents` keeps them until the next (§9.7).
    fn announced(&self, reason: EventReason, message: &str) -> bool {
        let last = self.plan.base.get(Field::LastEvents);
        last.and_then(|v| v.as_array()).is_some_and(|evs| {
            evs.iter().any(|e| {
                e["reason"] == reason.as_str()
                    && e["generation"] == self.m.generation
                    && e["message"] == message
            })
        })
    }

    /// Step 11's state: the rollout of `s` is under way.
    fn rolling_out(&mut self, s: &DesiredSpec, d: &DeploymentView) {
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
        self.conds(state.with(Messages {
            ready: format!("rolling out {}", s.version),
            progressing,
            degraded: "no failure".into(),
            rolled_back: NO_ROLLBACK.into(),
        }));
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
        self.conds(states::target_degraded(rolled_back).with(Messages {
            rolled_back: last.into(),
            ..Messages::all(msg.clone())
        }));
        self.event(EventReason::TargetDegraded, msg);
    }
}
