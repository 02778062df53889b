//! The sync handler: one observation ([`observe`]), then one plan
//! from the core, then its writes carried out in order, then the status,
//! then the Events ([`writer`]).

mod observe;
mod settled;
mod writer;

use super::cache::{AutoscalerView, Fetched, MetaView};
use super::error::SyncError;
use super::events::Posted;
use crate::kube::{Client, Error};
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::outcome::Outcome;
use crate::reconcile::{
    decide, plan_refused, ConfigMapView, DeploymentView, ModelView, Plan, TargetPolicy,
};
use crate::runtime::{ObjectKey, Store};
use observe::Observing;
use settled::{CacheRead, Grounds, Settled};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use writer::{Failed, Writer};

/// The sync handler (sample-controller's `syncHandler`): one OpenMedModel
/// from the caches to a plan, carried out.
pub struct Reconciler {
    pub client: Arc<Client>,
    pub models: Arc<Store<ModelView>>,
    /// Deployments the operator has claimed: full (compact) views.
    pub deployments: Arc<Store<DeploymentView>>,
    /// Every Deployment in scope, metadata only.
    pub deployment_meta: Arc<Store<MetaView>>,
    /// Unclaimed Deployments read on demand, reused while their
    /// resourceVersion in `deployment_meta` is unchanged.
    pub fetched: Fetched,
    pub config_maps: Arc<Store<ConfigMapView>>,
    /// HorizontalPodAutoscalers in scope: a Deployment one scales keeps its
    /// replicas (the autoscaler's, not the spec's).
    pub autoscalers: Arc<Store<AutoscalerView>>,
    /// Events written, by (namespace, name), with their object's uid.
    pub posted: Mutex<Posted>,
    /// The Events written lately, per model, for the live view.
    pub recent: Arc<crate::live_view::RecentEvents>,
    pub metrics: Arc<Metrics>,
    /// The highest generation of each OpenMedModel (by uid) a pass has
    /// written for: a view older than that is never acted on (9.17).
    pub acted: Mutex<HashMap<ObjectKey, (String, i64)>>,
    /// Which Deployments may become targets (9.8).
    pub targets: TargetPolicy,
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

/// The owners a claimed Deployment names (metadata and pod template): the
/// index by which a pass finds every Deployment its resource still claims.
fn deployment_owners(d: &DeploymentView) -> Vec<String> {
    let mut out: Vec<String> = d.owner.iter().chain(&d.template_owner).cloned().collect();
    out.dedup();
    out
}

/// The owner of one of our ConfigMaps.
fn config_map_owner(c: &ConfigMapView) -> Vec<String> {
    c.owner.iter().cloned().collect()
}

/// How many times a pass is replanned after a conflict before backing off.
const MAX_REPLANS: usize = 4;

/// How one attempt at a model ended.
enum Attempt {
    Done(Outcome),
    /// The plan changed nothing; what it rests on and what it read.
    Quiet(Grounds, Vec<CacheRead>),
    /// A write met a newer object (409), a ConfigMap the caches did not
    /// know, or the caches were behind: observe and plan again.
    Again,
}

impl Reconciler {
    /// A reconciler with empty stores, over `client`.
    pub fn new(client: Arc<Client>, metrics: Arc<Metrics>) -> Reconciler {
        Reconciler {
            client,
            models: Arc::new(Store::default()),
            deployments: Arc::new(Store::indexed(deployment_owners)),
            deployment_meta: Arc::new(Store::default()),
            fetched: Fetched::default(),
            config_maps: Arc::new(Store::indexed(config_map_owner)),
            autoscalers: Arc::new(Store::default()),
            posted: Mutex::new(Default::default()),
            recent: Default::default(),
            metrics,
            acted: Mutex::new(Default::default()),
            targets: TargetPolicy::default(),
            settled: Mutex::new(HashMap::new()),
        }
    }

    /// With this rule for which Deployments may become targets.
    pub fn with_targets(mut self, targets: TargetPolicy) -> Reconciler {
        self.targets = targets;
        self
    }

    /// Reconcile one OpenMedModel. One whose last pass changed nothing is
    /// not planned again until something it read in the caches changes: a pass is a
    /// function of what they hold (docs/contract.md §6), so a resync of a
    /// converged cluster costs next to nothing (docs/performance.md).
    /// [`Reconciler::unsettle_reads`] forces full passes now and then of
    /// those whose pass also read what no cache shows (an owner in a
    /// namespace not watched).
    pub fn sync(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        if self.is_settled(key) {
            return Ok(Outcome::Unchanged);
        }
        lock(&self.settled).remove(key);
        let (out, quiet) = self.sync_now(key)?;
        if let Some(s) = quiet.filter(|s| s.grounds != Grounds::ForeignConfigMap) {
            lock(&self.settled).insert(key.clone(), s);
        }
        Ok(out)
    }

    /// Whether `key` is settled: its last pass changed nothing, and nothing
    /// that pass read has changed since.
    pub fn is_settled(&self, key: &ObjectKey) -> bool {
        lock(&self.settled)
            .get(key)
            .is_some_and(|s| self.holds(key, s))
    }

    /// Every resource that is not settled: what a resync queues. A settled
    /// one would sync to [`Outcome::Unchanged`] at once, so queueing it
    /// costs a worker's wake and nothing more (§6).
    pub fn unsettled_keys(&self) -> Vec<ObjectKey> {
        let mut keys = self.models.keys();
        let settled = lock(&self.settled);
        keys.retain(|k| settled.get(k).is_none_or(|s| !self.holds(k, s)));
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

    /// The outcome, and for a pass that changed nothing what it was
    /// planned from.
    fn sync_now(&self, key: &ObjectKey) -> Result<(Outcome, Option<Settled>), SyncError> {
        let mut extra_cms: Vec<ConfigMapView> = Vec::new();
        let mut last_conflict = None;
        for _ in 0..MAX_REPLANS {
            let done = match self.attempt(key, &mut extra_cms) {
                Ok(Attempt::Done(o)) => (o, None),
                Ok(Attempt::Quiet(grounds, reads)) => {
                    let reads = reads.into_boxed_slice();
                    (Outcome::Unchanged, Some(Settled { grounds, reads }))
                }
                Ok(Attempt::Again) => continue,
                Err(e) if e.is_conflict() => {
                    log::debug!("{key}: conflict, re-reading: {e}");
                    self.refresh_model(key)?;
                    last_conflict = Some(e);
                    continue;
                }
                Err(e) if e.is_not_found() && !self.models.contains(key) => {
                    let gone = Settled {
                        grounds: Grounds::Caches,
                        reads: Box::new([CacheRead::Model(key.clone(), None)]),
                    };
                    return Ok((Outcome::Unchanged, Some(gone)));
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(model) = self.models.get(key) {
                let now = crate::time::now();
                Writer::new(self, &model, &now)?.post_owed_events()?;
            }
            return Ok(done);
        }
        Err(SyncError::NotSettled {
            replans: MAX_REPLANS,
            last: last_conflict,
        })
    }

    /// One attempt: one observation, one plan from it, carried out.
    fn attempt(
        &self,
        key: &ObjectKey,
        extra_cms: &mut Vec<ConfigMapView>,
    ) -> Result<Attempt, Error> {
        let seen = match self.observe(key, extra_cms)? {
            Observing::Gone => {
                let gone = vec![CacheRead::Model(key.clone(), None)];
                return Ok(Attempt::Quiet(Grounds::Caches, gone));
            }
            Observing::Behind => return Ok(Attempt::Again),
            Observing::Found(o) => o,
        };
        let obs = seen.observed(&self.targets);
        let p = decide(obs);
        if p.is_noop() {
            return Ok(Attempt::Quiet(seen.grounds, seen.reads));
        }
        if newly_blocked(&seen.model, &p) && self.confirm_targets(&seen.model, &seen.deployments)? {
            // The caches were behind (9.14): plan again from what is there.
            return Ok(Attempt::Again);
        }
        let mut writer = Writer::new(self, &seen.model, &seen.now)?;
        match writer.carry_out(&p, extra_cms) {
            Ok(attempt) => Ok(attempt),
            Err(Failed::Api(e)) => Err(e),
            Err(Failed::Refused(what, e)) => {
                // A write the API refuses every time (9.19): say so in status,
                // then back off (the caller's error) instead of retrying at once.
                let refused = plan_refused(obs, what, &e.to_string());
                writer
                    .carry_out(&refused, extra_cms)
                    .map_err(Failed::into_error)?;
                Err(e)
            }
        }
    }
}
