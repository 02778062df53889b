//! The sync handler: one observation ([`observe`]), then one plan
//! from the core, then its writes carried out in order, then the status,
//! then the Events ([`writer`]).

mod observe;
mod writer;

use super::cache::{AutoscalerView, Fetched, MetaView};
use super::error::SyncError;
use super::events::Posted;
use crate::kube::{Client, Error};
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::outcome::Outcome;
use crate::reconcile::{
    plan, plan_refused, ConfigMapView, DeploymentView, ModelView, Plan, TargetPolicy,
};
use crate::runtime::{ObjectKey, Store};
use observe::{reports_config_map_conflict, Observing};
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
    /// Resources whose last pass changed nothing, with where the caches
    /// stood then ([`Reconciler::sync`]).
    settled: Mutex<HashMap<ObjectKey, [u64; 5]>>,
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
pub(super) enum Attempt {
    Done(Outcome),
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
    /// not planned again until something in the caches changes: a pass is a
    /// function of what they hold (docs/contract.md §6), so a resync of a
    /// converged cluster costs next to nothing (docs/performance.md).
    /// [`Reconciler::unsettle_all`] forces full passes now and then, for
    /// what no cache shows (a foreign ConfigMap, an owner in a namespace not
    /// watched).
    pub fn sync(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let world = self.world();
        if lock(&self.settled).get(key) == Some(&world) {
            return Ok(Outcome::Unchanged);
        }
        lock(&self.settled).remove(key);
        let out = self.sync_now(key)?;
        let quiet = matches!(out, Outcome::Unchanged) && self.world() == world;
        let model = self.models.get(key);
        if quiet && model.is_some_and(|m| !reports_config_map_conflict(&m)) {
            lock(&self.settled).insert(key.clone(), world);
        }
        Ok(out)
    }

    /// Forget which resources are settled: the next sync of each is a full
    /// pass.
    pub fn unsettle_all(&self) {
        lock(&self.settled).clear();
    }

    /// Where every cache stands: equal readings mean nothing changed.
    fn world(&self) -> [u64; 5] {
        [
            self.models.changes(),
            self.deployments.changes(),
            self.deployment_meta.changes(),
            self.config_maps.changes(),
            self.autoscalers.changes(),
        ]
    }

    fn sync_now(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let mut extra_cms: Vec<ConfigMapView> = Vec::new();
        let mut last_conflict = None;
        for _ in 0..MAX_REPLANS {
            match self.attempt(key, &mut extra_cms) {
                Ok(Attempt::Done(o)) => {
                    self.post_owed_events(key)?;
                    return Ok(o);
                }
                Ok(Attempt::Again) => {}
                Err(e) if e.is_conflict() => {
                    log::debug!("{key}: conflict, re-reading: {e}");
                    self.refresh_model(key)?;
                    last_conflict = Some(e);
                }
                Err(e) if e.is_not_found() && !self.models.contains(key) => {
                    return Ok(Outcome::Unchanged)
                }
                Err(e) => return Err(e.into()),
            }
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
            Observing::Gone => return Ok(Attempt::Done(Outcome::Unchanged)),
            Observing::Behind => return Ok(Attempt::Again),
            Observing::Seen(o) => o,
        };
        let obs = seen.observed(&self.targets);
        let p = plan(obs);
        if p.is_noop() {
            return Ok(Attempt::Done(Outcome::Unchanged));
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
