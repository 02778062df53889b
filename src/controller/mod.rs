//! The shell around the core: which resources are watched and what each
//! change wakes, workers that carry out plans, a resync tick evaluated from
//! the caches, and shutdown. The list/watch loops, stores, queue and stop
//! token it runs on are [`crate::runtime`]'s.
//!
//! Data flows one way: watch events fill caches → keys enter the queue → a
//! worker reads the caches, asks the core for a plan, carries out its writes
//! → the watches report the result.
//!
//! Deployments are watched twice, cheaply: Deployments the operator has
//! claimed (label `openmed.ai/managed=true`, added by its apply patch) as
//! compact full views, so a rollout finishing or an edit is seen at once; and
//! every Deployment in scope as metadata only (`PartialObjectMetadata`), so a
//! target appearing, disappearing or changing before it is claimed wakes the
//! resources that point at it. Unclaimed targets are read on demand and reused
//! while their resourceVersion is unchanged.

pub mod cache;
pub mod caches;
pub mod error;
pub mod events;
#[cfg(all(test, feature = "alloc-count"))]
mod footprint;
pub mod index;
pub mod kinds;
pub(crate) mod lister;
pub mod sync;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::health::Health;
use crate::kube::{Client, ResourcePath};
use crate::metrics::Metrics;
use crate::model::status::Phase;
use crate::outcome::Outcome;
use crate::reconcile::ModelView;
use crate::runtime::leader::{Elector, Leadership};
use crate::runtime::queue::WorkQueue;
use crate::runtime::reflector::{self, Reflector};
use crate::runtime::workers::{self, Workers};
use crate::runtime::{reconnect, ObjectKey, Reader, Stop};
use error::{StartError, SyncError};
use index::TargetIndex;
use kinds::{Wake, WatchedKind};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Backoff per failing key: about half a second up to about five minutes.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(300));
/// How long shutdown waits for reconciles in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often the controller looks again at what it waits for (every cache
/// listed, the lease held); a stop ends the wait at once.
const LOOK: Duration = Duration::from_millis(50);
/// Every this many resync periods, every resource whose last pass read what
/// no cache shows gets a full pass even if no cache changed (2 minutes at
/// the default 15 s; §6).
const FULL_RESYNC: u32 = 8;

/// What the app root ([`crate::app`]) builds for the controller: the API
/// client (behind the write gate with `--leader-elect`), the metrics and
/// health it reports to, the lease loop with its gate, and the stop token
/// every loop obeys.
pub struct Wiring {
    pub client: Arc<Client>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub election: Option<(Elector, Arc<Leadership>)>,
    pub stop: Arc<Stop>,
}

/// The controller in the stages client-go's sample-controller names: build
/// (`NewController`), run (`Run`: watches, wait for sync, workers, resync,
/// shutdown), process the next key (`processNextWorkItem`), and sync one
/// resource ([`sync::Reconciler::sync`], `syncHandler`).
pub struct Controller {
    cfg: Config,
    client: Arc<Client>,
    reconciler: Arc<sync::Reconciler>,
    queue: Arc<WorkQueue<ObjectKey>>,
    index: Arc<TargetIndex>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// With `--leader-elect`: the lease loop, until it runs.
    elector: Option<Elector>,
    leadership: Option<Arc<Leadership>>,
    stop: Arc<Stop>,
}

impl Controller {
    /// Stage 1: the stores, the index and the queue over what the app
    /// root built. Nothing is watched yet.
    pub fn new(cfg: Config, w: Wiring) -> Controller {
        let targets = crate::reconcile::TargetPolicy {
            allow_any: cfg.allow_any_target,
            own: cfg.own_deployment.clone(),
        };
        let reconciler = sync::Reconciler::new(w.client.clone(), w.metrics.clone());
        let reconciler = Arc::new(reconciler.with_targets(targets));
        let models = reconciler.caches().model_reader();
        w.metrics
            .set_phase_source(Arc::new(move || phase_counts(&models)));
        let queue = Arc::new(WorkQueue::new(RETRY));
        let gauged = queue.clone();
        w.metrics
            .set_queue_source(Arc::new(move || (gauged.len(), gauged.waiting())));
        let (elector, leadership) = w.election.map_or((None, None), |(e, l)| (Some(e), Some(l)));
        Controller {
            cfg,
            client: w.client,
            reconciler,
            queue,
            index: Arc::new(TargetIndex::default()),
            metrics: w.metrics,
            health: w.health,
            elector,
            leadership,
            stop: w.stop,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The live view's rows, read from the caches.
    pub fn live_view_rows(&self) -> crate::live_view::Rows {
        let c = self.reconciler.caches();
        crate::live_view::Rows::new(
            c.model_reader(),
            c.deployment_reader(),
            self.reconciler.recent(),
        )
    }

    /// Stage 2: watch, wait until every cache has listed, start the
    /// workers, resync until told to stop, then shut down.
    pub fn run(mut self) -> Result<(), StartError> {
        let elector = match self.elector.take() {
            Some(e) => {
                let stop = self.stop.clone();
                let lease_loop = std::thread::Builder::new()
                    .name("leader-election".into())
                    .spawn(move || e.run(&stop))
                    .map_err(StartError::Thread)?;
                Some(lease_loop)
            }
            None => None,
        };
        self.start_watches()?;
        let mut done = true;
        if self.wait_for_sync() && self.wait_for_leadership() {
            self.seed_posted_events();
            let workers = self.start_workers()?;
            self.resync_until_stopped();
            done = self.shut_down(workers);
        } else {
            log::info!("stopped before the caches synced or before leading");
        }
        // The workers are done: hand the lease over now, not a lease
        // duration from now. One still writing keeps it to the end (its
        // writes close with the gate); the lease then expires by itself.
        if let Some(mut e) = elector.and_then(|t| t.join().ok()) {
            if done {
                e.release();
            } else {
                log::warn!("a reconcile is still running: the leader lease is left to expire");
            }
        }
        Ok(())
    }

    /// A standby waits here, its caches filled and kept current by the
    /// watches, until it holds the lease; then every resource is planned
    /// once, from the caches (no cold list). False if told to stop first.
    fn wait_for_leadership(&self) -> bool {
        let Some(l) = &self.leadership else {
            return true;
        };
        if !l.may_write() {
            log::info!("standby: caches synced, waiting for the leader lease");
        }
        while !l.may_write() {
            if self.stop.wait(LOOK) {
                return false;
            }
        }
        self.reconciler.unsettle_all();
        for k in self.reconciler.caches().model_keys() {
            self.queue.add(k);
        }
        true
    }

    fn scopes(&self) -> Vec<Option<String>> {
        if self.cfg.namespaces.is_empty() {
            vec![None]
        } else {
            self.cfg.namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// A reflector for kind `K` in `scope`, filling its store and waking
    /// what its declaration says.
    fn watch<K: WatchedKind>(&self, scope: &Option<String>, wake: &Wake) -> Result<(), StartError> {
        let w = &K::WATCH;
        let common = reflector::Common {
            client: Arc::new(lister::ApiLister(self.client.clone())),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            stop: self.stop.clone(),
            liveness_window: self.cfg.liveness_window,
            reconnect: reconnect::Policy::DEFAULT,
            on_long_wait: crate::memory::thread_idle,
        };
        let path = ResourcePath::collection(w.kind, scope.as_deref())?;
        let store = K::store(self.reconciler.caches());
        let parse: fn(K::Object) -> Option<K::View> = K::view;
        let mut r = Reflector::new(
            &common,
            w.resource,
            path,
            scope.clone(),
            store,
            parse,
            K::on_change(wake),
        );
        if let Some(sel) = w.selector {
            r = r.selecting(sel);
        }
        if let (true, Some(sel)) = (w.sharded, &self.cfg.selector) {
            r.label_selector = Some(sel.clone());
        }
        if w.metadata_only {
            r = r.metadata_only();
        }
        r.spawn().map_err(StartError::Thread)
    }

    /// Every watch, in every namespace watched, as [`kinds`] declares
    /// them.
    fn start_watches(&self) -> Result<(), StartError> {
        let wake = Wake {
            index: self.index.clone(),
            queue: self.queue.clone(),
            reconciler: self.reconciler.clone(),
        };
        for scope in &self.scopes() {
            self.watch::<kinds::Models>(scope, &wake)?;
            self.watch::<kinds::OurConfigMaps>(scope, &wake)?;
            self.watch::<kinds::ClaimedDeployments>(scope, &wake)?;
            self.watch::<kinds::AllDeployments>(scope, &wake)?;
            self.watch::<kinds::Autoscalers>(scope, &wake)?;
        }
        Ok(())
    }

    /// Plans made before every cache is filled would mistake "not listed
    /// yet" for "absent": wait until every loop has listed. False if told
    /// to stop first.
    fn wait_for_sync(&self) -> bool {
        let caches = self.reconciler.caches();
        let unsynced = || caches.unsynced();
        let mut next_warning = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting = unsynced();
            if waiting.is_empty() {
                break;
            }
            if Instant::now() >= next_warning {
                next_warning += Duration::from_secs(30);
                log::warn!(
                    "still waiting for the initial lists of {} (is the API server reachable?)",
                    waiting.join(", ")
                );
            }
            if self.stop.wait(LOOK) {
                return false;
            }
        }
        self.health.set_ready();
        let (models, deployments, config_maps) = caches.counts();
        log::info!(
            "caches synced: {models} OpenMedModels, {deployments} claimed Deployments, {config_maps} managed ConfigMaps"
        );
        true
    }

    /// The Events this operator wrote before (a previous run): one list per
    /// namespace watched, so a restart neither repeats nor loses them. A
    /// failure only costs a repeat count bump later.
    fn seed_posted_events(&self) {
        let params = crate::kube::ListParams {
            field_selector: Some(format!(
                "reportingComponent={}",
                crate::reconcile::patches::COMPONENT
            )),
            ..Default::default()
        };
        for scope in self.scopes() {
            let listed = ResourcePath::collection(crate::kube::path::EVENTS, scope.as_deref())
                .and_then(|path| self.client.list_all(&path, &params));
            match listed {
                Ok(list) => self.reconciler.seed_posted(&list.items),
                Err(e) => log::warn!("could not list earlier Events: {e}"),
            }
        }
    }

    /// The workers: one now, more as keys wait, up to `--workers`. A pass
    /// can spend minutes in request retries against a black-holed API
    /// server; only a worker in one pass longer than a watch is stuck.
    fn start_workers(&self) -> Result<Workers<ObjectKey>, StartError> {
        let (reconciler, queue, metrics) = (
            self.reconciler.clone(),
            self.queue.clone(),
            self.metrics.clone(),
        );
        let job = move |key: &ObjectKey| sync_one(&reconciler, &queue, &metrics, key);
        Workers::start(workers::WorkerSetup {
            queue: self.queue.clone(),
            job: Arc::new(job),
            health: self.health.clone(),
            stop: self.stop.clone(),
            liveness_window: self.cfg.liveness_window,
            max: self.cfg.workers,
            retire_after: workers::RETIRE_AFTER,
            on_long_wait: crate::memory::thread_idle,
        })
        .map_err(StartError::Thread)
    }

    /// Re-enqueue every key that is not settled on each resync tick
    /// (evaluated from the caches, no API requests when converged) until
    /// SIGTERM/SIGINT. Every [`FULL_RESYNC`]th period first unsettles each
    /// resource whose last pass read what no cache shows, so it gets a full
    /// pass (see [`sync::Reconciler::sync`], §6).
    fn resync_until_stopped(&self) {
        let mut next_resync = Instant::now() + self.cfg.resync;
        let mut periods = 0u32;
        // Only at the deadline: each wake of an idle process is CPU spent
        // for nothing (idle CPU, docs/performance.md).
        while !self
            .stop
            .wait(next_resync.saturating_duration_since(Instant::now()))
        {
            if Instant::now() >= next_resync {
                next_resync = Instant::now() + self.cfg.resync;
                periods += 1;
                if periods % FULL_RESYNC == 0 {
                    self.reconciler.unsettle_reads();
                }
                let keys = self.reconciler.unsettled_keys();
                log::debug!("resync: {} resources not settled", keys.len());
                for k in keys {
                    self.queue.resync(k);
                }
            }
        }
    }

    /// After the stop signal (which the watches obey too): stop taking work
    /// and give reconciles in flight a few seconds to finish. Whether all
    /// did.
    fn shut_down(&self, workers: Workers<ObjectKey>) -> bool {
        log::info!("shutting down: finishing reconciles in flight");
        let all = workers.shut_down(SHUTDOWN_GRACE);
        log::info!("stopped");
        all
    }
}

/// Stage 3: sync one key, then forget its failures, or hand the error to
/// [`error_policy`].
fn sync_one(
    reconciler: &sync::Reconciler,
    queue: &WorkQueue<ObjectKey>,
    metrics: &Metrics,
    key: &ObjectKey,
) {
    let started = Instant::now();
    crate::logging::for_resource(key.namespace(), key.name(), || match reconciler.sync(key) {
        Ok(outcome) => {
            queue.forget(key);
            metrics.reconciled(outcome, started.elapsed());
        }
        Err(e) => {
            metrics.reconciled(Outcome::Error, started.elapsed());
            error_policy(queue, metrics, key, &e);
        }
    });
}

/// The one mapping from a failed sync to when its key comes back
/// (kube-runtime's `error_policy`): the queue's per-key exponential
/// backoff, or the server's `Retry-After` when it is longer.
fn error_policy(queue: &WorkQueue<ObjectKey>, metrics: &Metrics, key: &ObjectKey, e: &SyncError) {
    metrics.error(&e.kind_label());
    let delay = queue.add_rate_limited(key.clone(), e.retry_after());
    log::warn!(
        reason = e.kind_label().as_str();
        "{key}: reconcile failed, retrying in {} ms: {e}",
        delay.as_millis()
    );
}

/// Managed resources per phase, every phase present (0 included); a model
/// not yet given a phase counts as Pending.
fn phase_counts(models: &Reader<ModelView>) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = Phase::ALL
        .iter()
        .map(|p| (p.as_str().to_string(), 0))
        .collect();
    models.for_each(|m| {
        let phase = m.phase.unwrap_or(Phase::Pending);
        *out.entry(phase.as_str().to_string()).or_default() += 1;
    });
    out
}
