//! The sync handler: one observation ([`observe`]), then one plan
//! from the core, then its writes carried out in order, then the status,
//! then the Events ([`writer`]).

pub mod observe;
mod settled;
mod writer;

use super::caches::{CacheRead, Caches};
use super::error::SyncError;
use super::events::Posted;
use crate::kube::{Client, Error};
use crate::live_view::RecentEvents;
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::outcome::Outcome;
use crate::reconcile::{decide, plan_refused, ConfigMapView, ModelView, Plan, TargetPolicy};
use crate::runtime::ObjectKey;
use observe::{confirm_targets, refresh_model, Api, Observer, Observing};
use settled::{Grounds, Settled};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use writer::{Failed, Writer};

/// The sync handler (sample-controller's `syncHandler`): one OpenMedModel
/// from the caches to a plan, carried out.
pub struct Reconciler {
    client: Arc<Client>,
    caches: Caches,
    /// Events written, by (namespace, name), with their object's uid.
    posted: Mutex<Posted>,
    /// The Events written lately, per model, for the live view.
    recent: Arc<RecentEvents>,
    metrics: Arc<Metrics>,
    /// The highest generation of each OpenMedModel (by uid) a pass has
    /// written for: a view older than that is never acted on (9.17). The
    /// uid is kept as a 64-bit digest keyed per process ([`Self::uid_digest`]):
    /// an incarnation that shares its predecessor's by chance (odds about 1
    /// in 10^19) waits for a generation past the old one's.
    acted: Mutex<HashMap<ObjectKey, (u64, i64)>>,
    /// The key of the acted uids' digests ([`Self::uid_digest`]).
    digest: std::hash::RandomState,
    /// Which Deployments may become targets (9.8).
    targets: TargetPolicy,
    /// Resources whose last pass changed nothing, with what it read
    /// ([`Reconciler::sync`]).
    settled: Mutex<HashMap<ObjectKey, Settled>>,
}

/// The plan reports a block about the target that the status did not
/// show yet: TargetNotFound, ContainerNotFound, TargetConflict or
/// TargetNotOptedIn.
fn newly_blocked(model: &ModelView, p: &Plan) -> bool {
    use crate::model::status::Reason::{
        ContainerNotFound, TargetConflict, TargetNotFound, TargetNotOptedIn,
    };
    let was = model.status().ready_reason();
    let now = p.status(None).ready_reason();
    matches!(
        now,
        Some(TargetNotFound | ContainerNotFound | TargetConflict | TargetNotOptedIn)
    ) && now != was
}

/// How many times a pass is planned again at once before the sync backs
/// off (`SyncError::NotSettled`).
const MAX_REPLANS: usize = 4;

/// What a pass asks for next (kube-runtime's `Action`): the sync carries
/// it out.
#[derive(Debug)]
pub enum Action {
    /// Done: synced again when something it read changes (§6), or at a
    /// resync. The core never waits on time: a rollout's deadline is the
    /// Deployment controller's to judge, and its verdict arrives by watch.
    Done(Outcome),
    /// Plan again at once: what the pass acted on was not what is there.
    Replan(Replan),
}

/// Why a pass is planned again at once.
#[derive(Debug)]
pub enum Replan {
    /// A write met a newer object (409); the model has been read afresh.
    Conflict(Error),
    /// A ConfigMap of our name that the caches (which hold only ours) did
    /// not know: the next pass is planned with it.
    UnknownConfigMap(Box<ConfigMapView>),
    /// The caches were behind what a read found, and have been put right
    /// (§9.14, §9.17).
    CachesBehind,
}

impl Reconciler {
    /// A reconciler with empty stores, over `client`.
    pub fn new(client: Arc<Client>, metrics: Arc<Metrics>) -> Reconciler {
        Reconciler {
            client,
            caches: Caches::default(),
            posted: Mutex::new(Default::default()),
            recent: Default::default(),
            metrics,
            acted: Mutex::new(Default::default()),
            digest: std::hash::RandomState::new(),
            targets: TargetPolicy::default(),
            settled: Mutex::new(HashMap::new()),
        }
    }

    /// With this rule for which Deployments may become targets.
    pub fn with_targets(mut self, targets: TargetPolicy) -> Reconciler {
        self.targets = targets;
        self
    }

    /// The caches the watches fill and every pass reads.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// The Events written lately, per model, for the live view.
    pub fn recent(&self) -> Arc<RecentEvents> {
        self.recent.clone()
    }

    /// The Events this operator wrote before (a previous run), so that a
    /// restart neither repeats nor loses them.
    pub fn seed_posted(&self, items: &[serde_json::Value]) {
        lock(&self.posted).seed(items);
        for e in items {
            self.recent.record_object(e);
        }
    }

    /// Reconcile one OpenMedModel: passes while one asks to be planned
    /// again, at most [`MAX_REPLANS`], then the outcome, or the error the
    /// worker's error policy backs off from.
    pub fn sync(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let mut known: Vec<ConfigMapView> = Vec::new();
        let mut last = None;
        for _ in 0..MAX_REPLANS {
            match self.reconcile(key, &known)? {
                Action::Done(outcome) => return Ok(outcome),
                Action::Replan(Replan::Conflict(e)) => last = Some(e),
                Action::Replan(Replan::UnknownConfigMap(cm)) => {
                    known.retain(|c| c.name() != cm.name());
                    known.push(*cm);
                }
                Action::Replan(Replan::CachesBehind) => {}
            }
        }
        Err(SyncError::NotSettled {
            replans: MAX_REPLANS,
            last,
        })
    }

    /// One pass over one OpenMedModel (kube-runtime's `reconcile`). One
    /// whose last pass changed nothing is not planned again until something
    /// it read in the caches changes: a pass is a function of what they
    /// hold (docs/contract.md §6), so a resync of a converged cluster costs
    /// next to nothing (docs/performance.md).
    /// [`Reconciler::unsettle_reads`] forces full passes now and then of
    /// those whose pass also read what no cache shows (an owner in a
    /// namespace not watched). `known`: ConfigMaps an earlier pass found
    /// that the caches do not hold.
    pub fn reconcile(&self, key: &ObjectKey, known: &[ConfigMapView]) -> Result<Action, Error> {
        if self.is_settled(key) {
            return Ok(Action::Done(Outcome::Unchanged));
        }
        lock(&self.settled).remove(key);
        let action = match self.attempt(key, known) {
            Ok(action) => action,
            Err(e) if e.is_conflict() => {
                log::debug!("{key}: conflict, re-reading: {e}");
                refresh_model(&self.client, &self.caches, key)?;
                return Ok(Action::Replan(Replan::Conflict(e)));
            }
            Err(e) if e.is_not_found() && !self.caches.recorder().has_model(key) => {
                return Ok(self.forget(key));
            }
            Err(e) => return Err(e),
        };
        if let (Action::Done(_), Some(model)) = (&action, self.caches.recorder().model(key)) {
            let now = crate::time::now();
            let posted = Writer::new(self, &model, &now).and_then(|w| w.post_owed_events());
            if let Err(e) = posted {
                // An Event still owed (§9.7) leaves the resource unsettled:
                // the retry posts it.
                lock(&self.settled).remove(key);
                return Err(e);
            }
        }
        Ok(action)
    }

    /// A pass that changed nothing: settled on what it read, unless it
    /// rests on a foreign ConfigMap that every pass reads again.
    fn settle(&self, key: &ObjectKey, grounds: Grounds, reads: Vec<CacheRead>) -> Action {
        if grounds != Grounds::ForeignConfigMap {
            let reads = reads.into_boxed_slice();
            lock(&self.settled).insert(key.clone(), Settled { grounds, reads });
        }
        Action::Done(Outcome::Unchanged)
    }

    /// A model the caches no longer hold: nothing is kept for it, so a
    /// cluster whose models come and go does not grow this (a resync passes
    /// only cached models; a deleted uid does not come back, §9.17).
    fn forget(&self, key: &ObjectKey) -> Action {
        lock(&self.settled).remove(key);
        lock(&self.acted).remove(key);
        Action::Done(Outcome::Unchanged)
    }

    /// How many models this keeps what their last passes did for: cached
    /// models at most.
    pub fn remembered(&self) -> usize {
        let mut keys: std::collections::HashSet<ObjectKey> =
            lock(&self.acted).keys().cloned().collect();
        keys.extend(lock(&self.settled).keys().cloned());
        keys.len()
    }

    /// Whether `key` is settled: its last pass changed nothing, and nothing
    /// that pass read has changed since.
    pub fn is_settled(&self, key: &ObjectKey) -> bool {
        lock(&self.settled)
            .get(key)
            .is_some_and(|s| s.holds(&self.caches, key))
    }

    /// Every resource that is not settled: what a resync queues. A settled
    /// one would sync to [`Outcome::Unchanged`] at once, so queueing it
    /// costs a worker's wake and nothing more (§6).
    pub fn unsettled_keys(&self) -> Vec<ObjectKey> {
        let mut keys = self.caches.model_keys();
        let settled = lock(&self.settled);
        keys.retain(|k| settled.get(k).is_none_or(|s| !s.holds(&self.caches, k)));
        keys
    }

    /// Forget which resources are settled: the next sync of each is a full
    /// pass (a new leader's first).
    pub fn unsettle_all(&self) {
        lock(&self.settled).clear();
    }

    /// Forget the settled resources whose last pass read what no cache
    /// shows: the next sync of each reads it again (§6). The others stay
    /// settled: planned again from the same caches, they would plan the
    /// same nothing.
    pub fn unsettle_reads(&self) {
        lock(&self.settled).retain(|_, s| s.grounds == Grounds::Caches);
    }

    /// One attempt: one observation, one plan from it, carried out.
    fn attempt(&self, key: &ObjectKey, known: &[ConfigMapView]) -> Result<Action, Error> {
        let api = Api(&self.client);
        let observer = Observer::new(&api, self.caches.recorder());
        let seen = match observer.observe(key, known, |m| self.is_behind(m))? {
            Observing::Gone => return Ok(self.forget(key)),
            Observing::Behind => {
                refresh_model(&self.client, &self.caches, key)?;
                return Ok(Action::Replan(Replan::CachesBehind));
            }
            Observing::Found(o) => o,
        };
        let obs = seen.observed(&self.targets);
        let p = decide(obs);
        if p.is_noop() {
            return Ok(self.settle(key, seen.grounds, seen.reads));
        }
        let confirm =
            || confirm_targets(&self.client, &self.caches, &seen.model, &seen.deployments);
        if newly_blocked(&seen.model, &p) && confirm()? {
            // The caches were behind (9.14): plan again from what is there.
            return Ok(Action::Replan(Replan::CachesBehind));
        }
        let mut writer = Writer::new(self, &seen.model, &seen.now)?;
        match writer.carry_out(&p) {
            Ok(action) => Ok(action),
            Err(Failed::Api(e)) => Err(e),
            Err(Failed::Refused(what, e)) => {
                // A write the API refuses every time (9.19): say so in status,
                // then back off (the caller's error) instead of retrying at once.
                let refused = plan_refused(obs, what, &e.to_string());
                writer.carry_out(&refused).map_err(Failed::into_error)?;
                Err(e)
            }
        }
    }

    /// A view of `model` older than one a previous pass acted on.
    fn is_behind(&self, model: &ModelView) -> bool {
        let uid = self.uid_digest(model);
        lock(&self.acted)
            .get(&model.key())
            .is_some_and(|(u, g)| *u == uid && model.generation < *g)
    }

    /// What [`Self::acted`] keeps of a model's uid.
    fn uid_digest(&self, model: &ModelView) -> u64 {
        use std::hash::BuildHasher;
        self.digest.hash_one(model.uid.as_str())
    }

    /// Remember that a pass wrote for this generation of `model` (9.17).
    fn remember_acted(&self, model: &ModelView) {
        let (k, uid) = (model.key(), self.uid_digest(model));
        let mut acted = lock(&self.acted);
        let newer = acted
            .get(&k)
            .is_none_or(|(u, g)| *u != uid || model.generation > *g);
        if newer {
            acted.insert(k, (uid, model.generation));
        }
    }
}
