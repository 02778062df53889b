//! One reconcile pass (docs/contract.md §6) as a pure function: from what
//! was observed to the writes, status and Events that must follow. The
//! steps are functions over the [`Pass`] in child modules; where the
//! contract re-enters one step from another (a rollback over a failed
//! rollout, a rollout when a rollback cannot be watched: §9.10), the step
//! returns the [`Next`] one and [`Pass::run`] takes it, so the whole order
//! reads here and the step modules call none of one another's steps.

mod blocked;
mod rollback;
mod rollout;
mod targets;

use super::block::{Block, RefusedWrite};
use super::facts::before_rejection;
use super::messages::NO_ROLLBACK;
use super::observed::{DeploymentView, ModelView};
use super::plan::{Observed, Plan, Write};
use crate::model::spec::DesiredSpec;
use crate::model::status::{states, Conds, EventReason, Messages, OwedEvent, Phase, Reason};
use crate::model::{FINALIZER, KOPF_FINALIZER};

/// The state of one pass, its plan growing as the steps run.
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

/// A step the pass is handed to (§6), with what it needs beyond the
/// desired spec.
enum Next<'a> {
    /// Steps 2-4 and §9.2: a block reported.
    Blocked(Block),
    /// Step 5: a manual rollback to the version named.
    ManualRollback(String),
    /// Steps 6-11: the desired spec judged against its Deployment.
    Judge,
    /// "Starting a rollout" of the desired spec.
    StartRollout(Reason),
    /// Step 8: an automatic rollback to the last successful spec.
    AutomaticRollback(DesiredSpec),
    /// Step 12 (§9.23): a rollback watched through.
    MonitorRollback,
    /// §9.21: the Deployment fails while nothing of ours rolls out.
    TargetDegraded(&'a DeploymentView),
}

/// How a check within a step ended: not its case, the pass settled, or
/// handed to another step.
enum Flow<'a> {
    Continue,
    Settled,
    Then(Next<'a>),
}

impl<'a> Pass<'a> {
    fn conds(&mut self, c: Conds) {
        let g = self.m.generation;
        self.plan.new.set_conditions(c, g, self.obs.now);
    }

    fn event(&mut self, reason: EventReason, message: String) {
        self.plan.push_event(reason, message);
    }

    fn run(&mut self) {
        let m = self.m;
        self.plan.new.observed_generation = Some(m.generation);
        if self.plan.base.rollback_count.is_none() {
            self.plan.new.rollback_count = Some(0);
        }
        // 1. Invalid spec.
        let s = match m.desired() {
            Ok(s) => s,
            Err(e) => {
                let msg = e.to_string();
                self.plan.new.phase = Some(Phase::Failed);
                self.conds(states::INVALID_SPEC.with(Messages {
                    ready: msg.clone(),
                    progressing: "fix the spec to continue".into(),
                    degraded: msg.clone(),
                    rolled_back: NO_ROLLBACK.into(),
                }));
                // One Warning per generation, naming the field (§6.1): an
                // edit that is invalid again is reported again.
                let base = &self.plan.base;
                let reported = base.ready_reason() == Some(Reason::InvalidSpec)
                    && base.observed_generation == Some(m.generation);
                self.plan.new_report |= !reported;
                self.event(EventReason::InvalidSpec, msg);
                return;
            }
        };
        let hash = s.hash();
        let new = &mut self.plan.new;
        new.desired_version = Some(s.version.clone());
        new.desired_spec_hash = Some(hash.clone());
        new.manifest_hash = Some(s.manifest_hash());

        // 2-4, and 9.2's foreign ConfigMap; else 5, a manual rollback;
        // else 6-11.
        let mut next = Some(match (blocked::blocked(self, s), &m.rollback_to) {
            (Some(b), _) => Next::Blocked(b),
            (None, Some(target)) => Next::ManualRollback(target.clone()),
            (None, None) => Next::Judge,
        });
        while let Some(step) = next {
            next = self.take(step, s, &hash);
        }
    }

    /// Run one step; the one it hands the pass to, if any.
    fn take(&mut self, step: Next<'a>, s: &DesiredSpec, hash: &str) -> Option<Next<'a>> {
        match step {
            Next::Blocked(b) => blocked::report_block(self, b),
            Next::ManualRollback(target) => return rollback::manual(self, s, hash, &target),
            Next::Judge => return rollout::judge_desired(self, s, hash),
            Next::StartRollout(reason) => rollout::start_rollout(self, s, hash, reason),
            Next::AutomaticRollback(l) => rollback::automatic(self, s, hash, &l),
            Next::MonitorRollback => return rollback::monitor_rollback(self, s),
            Next::TargetDegraded(d) => rollout::target_degraded(self, d),
        }
        None
    }

    /// A transition's Events go into the status it writes (`lastEvents`),
    /// so the shell can post one that a failure or a crash lost (9.7).
    fn record_owed_events(&mut self) {
        let events = self.plan.events_to_post();
        if events.is_empty() || self.plan.events_always {
            return;
        }
        let owed = events
            .iter()
            .map(|e| OwedEvent {
                reason: e.reason,
                generation: self.m.generation,
                message: e.message.clone(),
                tag: e.tag.clone(),
            })
            .collect();
        self.plan.new.last_events = Some(owed);
    }

    /// Keep a finalizer on every resource the operator acts on, added
    /// before the first write that will need cleanup.
    fn ensure_finalizer(&mut self) {
        let has = self
            .m
            .finalizers
            .iter()
            .any(|f| f == FINALIZER || f == KOPF_FINALIZER);
        let acted = self.plan.base.applied_spec_hash.is_some();
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

/// The plan for one pass over `obs.model`.
pub fn decide(obs: Observed<'_>) -> Plan {
    plan_with(obs, None)
}

/// The plan after the API refused a write of the last plan with an error
/// retrying will not cure (9.19): the block is reported with the API's words.
pub fn plan_refused(obs: Observed<'_>, what: RefusedWrite, message: &str) -> Plan {
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
        owner: obs.model.qualified_name(),
        plan,
        refusal,
        kept: None,
    };
    pass.run();
    targets::release_others(&mut pass);
    pass.ensure_finalizer();
    pass.plan.new.stamp_generation(obs.model.generation);
    pass.record_owed_events();
    pass.plan
}
