//! The shell around the core: list+watch caches, a work queue, workers that
//! carry out plans, a resync tick evaluated from the caches, and shutdown.
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
pub mod index;
pub mod queue;
pub mod reflector;
pub mod sync;

use crate::backoff::Backoff;
use crate::cli::Config;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS};
use crate::kube::{Client, ClientConfig, Endpoint, ResourcePath};
use crate::metrics::{Metrics, Outcome};
use crate::model::status::{Phase, StatusDoc};
use crate::model::{CLAIM_LABEL, MANAGED_BY_LABEL};
use crate::reconcile::{lookups, ConfigMapView, DeploymentView, ModelView};
use crate::server::{self, Health};
use cache::{Key, MetaView, Store};
use index::{Kind, TargetIndex};
use queue::WorkQueue;
use reflector::Reflector;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WORKERS: usize = 2;
/// Backoff per failing key: about half a second up to about five minutes.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(300));
/// How long shutdown waits for reconciles in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn meta_view(v: &Value) -> Option<MetaView> {
    Some(MetaView {
        resource_version: v["metadata"]["resourceVersion"].as_str()?.to_string(),
        claimed: v["metadata"]["labels"][CLAIM_LABEL.0] == CLAIM_LABEL.1,
    })
}

/// Run until SIGTERM/SIGINT. Returns an error only for what makes the
/// operator unable to start (bad endpoint, health port taken).
pub fn run(cfg: Config) -> Result<(), String> {
    let endpoint =
        Endpoint::resolve(&cfg.endpoint, &|k| std::env::var(k).ok()).map_err(|e| e.to_string())?;
    let metrics = Arc::new(Metrics::default());
    let observer = metrics.clone();
    let client = Client::new(endpoint, ClientConfig::default())
        .map_err(|e| e.to_string())?
        .with_observer(Arc::new(move |verb, code| {
            observer.api_request(verb.as_str(), code)
        }));
    let client = Arc::new(client);
    let health = Arc::new(Health::default());
    let bound = server::start(cfg.health_addr, health.clone(), metrics.clone())?;
    log::info!(
        "openmed-operator {} starting: API server {}, {}, health and metrics on http://{bound}",
        env!("CARGO_PKG_VERSION"),
        client.base_url(),
        if cfg.namespaces.is_empty() {
            "all namespaces".to_string()
        } else {
            format!("namespaces {}", cfg.namespaces.join(","))
        },
    );

    let stop = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(sync::Ctx {
        client: client.clone(),
        models: Arc::new(Store::default()),
        deployments: Arc::new(Store::default()),
        deployment_meta: Arc::new(Store::default()),
        fetched: Mutex::new(Default::default()),
        config_maps: Arc::new(Store::default()),
        posted: Mutex::new(Default::default()),
        metrics: metrics.clone(),
        acted: Mutex::new(Default::default()),
    });
    let queue: Arc<WorkQueue<Key>> = Arc::new(WorkQueue::new(RETRY));
    let models = ctx.models.clone();
    metrics.set_phase_source(Arc::new(move || phase_counts(&models)));
    let index = Arc::new(TargetIndex::default());

    let scopes: Vec<Option<String>> = if cfg.namespaces.is_empty() {
        vec![None]
    } else {
        cfg.namespaces.iter().cloned().map(Some).collect()
    };
    let wake = |index: Arc<TargetIndex>, queue: Arc<WorkQueue<Key>>, kind: Kind| {
        move |key: &Key| {
            for m in index.models_for(&key.0, kind, &key.1) {
                queue.add(m);
            }
        }
    };
    let common = reflector::Common {
        client: client.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        stop: stop.clone(),
    };
    let spawn_err = |e: std::io::Error| format!("cannot start a watch thread: {e}");
    for scope in &scopes {
        let ns = scope.as_deref();
        let path = |rt| ResourcePath::collection(rt, ns).map_err(|e| e.to_string());
        let (q, idx) = (queue.clone(), index.clone());
        let on_model: reflector::OnChange<ModelView> = Arc::new(move |(key, _old, new)| {
            idx.update(&key, new.as_ref().map(lookups).as_ref());
            q.add(key);
        });
        Reflector::new(
            &common,
            "openmedmodels",
            path(crate::model::RESOURCE)?,
            scope.clone(),
            ctx.models.clone(),
            ModelView::from_json,
            on_model,
        )
        .spawn()
        .map_err(spawn_err)?;

        let w = wake(index.clone(), queue.clone(), Kind::ConfigMap);
        let on_cm: reflector::OnChange<ConfigMapView> = Arc::new(move |(key, _, _)| w(&key));
        Reflector::new(
            &common,
            "configmaps",
            path(CONFIG_MAPS)?,
            scope.clone(),
            ctx.config_maps.clone(),
            ConfigMapView::from_json,
            on_cm,
        )
        .selecting(MANAGED_BY_LABEL)
        .spawn()
        .map_err(spawn_err)?;

        let w = wake(index.clone(), queue.clone(), Kind::Deployment);
        let on_deploy: reflector::OnChange<DeploymentView> = Arc::new(move |(key, _, _)| w(&key));
        Reflector::new(
            &common,
            "deployments",
            path(DEPLOYMENTS)?,
            scope.clone(),
            ctx.deployments.clone(),
            DeploymentView::from_json,
            on_deploy,
        )
        .selecting(CLAIM_LABEL)
        .spawn()
        .map_err(spawn_err)?;

        // Claimed Deployments are covered above; here only appearance,
        // disappearance and changes of unclaimed ones matter.
        let w = wake(index.clone(), queue.clone(), Kind::Deployment);
        let c2 = ctx.clone();
        let on_meta: reflector::OnChange<MetaView> = Arc::new(move |(key, old, new)| {
            if new.is_none() {
                crate::kube::endpoint::lock(&c2.fetched).remove(&key);
            }
            let unclaimed = new.as_ref().map(|n| !n.claimed).unwrap_or(true);
            if old.is_none() || unclaimed {
                w(&key);
            }
        });
        Reflector::new(
            &common,
            "deployments-metadata",
            path(DEPLOYMENTS)?,
            scope.clone(),
            ctx.deployment_meta.clone(),
            meta_view,
            on_meta,
        )
        .metadata_only()
        .spawn()
        .map_err(spawn_err)?;
    }

    // Plans made before every cache is filled would mistake "not listed
    // yet" for "absent": workers start once all initial lists are in.
    let synced = || {
        ctx.models.is_synced()
            && ctx.deployments.is_synced()
            && ctx.deployment_meta.is_synced()
            && ctx.config_maps.is_synced()
    };
    let mut next_warning = Instant::now() + Duration::from_secs(30);
    while !synced() {
        if crate::signals::stop_requested() {
            log::info!("stopped before the caches synced");
            return Ok(());
        }
        if Instant::now() >= next_warning {
            next_warning += Duration::from_secs(30);
            let waiting: Vec<String> = [
                ctx.models.unsynced(),
                ctx.deployments.unsynced(),
                ctx.deployment_meta.unsynced(),
                ctx.config_maps.unsynced(),
            ]
            .concat();
            log::warn!(
                "still waiting for the initial lists of {} (is the API server reachable?)",
                waiting.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    health.set_ready();
    log::info!(
        "caches synced: {} OpenMedModels, {} claimed Deployments, {} managed ConfigMaps",
        ctx.models.len(),
        ctx.deployments.len(),
        ctx.config_maps.len()
    );

    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let (ctx, queue, metrics, health) =
            (ctx.clone(), queue.clone(), metrics.clone(), health.clone());
        let name = format!("worker-{i}");
        // A pass can spend minutes in request retries against a black-holed API
        // server; only a worker silent longer than a watch is stuck.
        health.register(&name, reflector::MAX_SILENCE);
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || worker(&name, &ctx, &queue, &metrics, &health))
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        workers.push(handle);
    }

    // Resync: re-enqueue every key, evaluated from the caches.
    let mut next_resync = Instant::now() + cfg.resync;
    while !crate::signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(100));
        metrics.set_queue_depth(queue.len());
        metrics.set_queue_retries(queue.waiting());
        if Instant::now() >= next_resync {
            next_resync = Instant::now() + cfg.resync;
            for k in ctx.models.keys() {
                queue.resync(k);
            }
        }
    }

    log::info!("shutting down: finishing reconciles in flight");
    stop.store(true, Ordering::SeqCst);
    queue.shutdown();
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    for w in workers {
        while !w.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    log::info!("stopped");
    Ok(())
}

/// Managed resources per phase, every phase present (0 included); a model
/// not yet given a phase counts as Pending.
fn phase_counts(models: &Store<ModelView>) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = Phase::ALL
        .iter()
        .map(|p| (p.as_str().to_string(), 0))
        .collect();
    for m in models.values() {
        let phase = StatusDoc::from_value(m.status.as_ref())
            .phase()
            .unwrap_or(Phase::Pending);
        *out.entry(phase.as_str().to_string()).or_default() += 1;
    }
    out
}

fn worker(name: &str, ctx: &sync::Ctx, queue: &WorkQueue<Key>, metrics: &Metrics, health: &Health) {
    loop {
        health.beat(name);
        let Some(key) = queue.get(Duration::from_secs(1)) else {
            if crate::signals::stop_requested() {
                return;
            }
            continue;
        };
        let started = Instant::now();
        match ctx.sync(&key) {
            Ok(outcome) => {
                queue.forget(&key);
                metrics.reconciled(outcome, started.elapsed());
            }
            Err(e) => {
                metrics.reconciled(Outcome::Error, started.elapsed());
                let kind = match e.code() {
                    Some(c) => format!("api_{c}"),
                    None => match e {
                        crate::kube::Error::Timeout(_) => "timeout".to_string(),
                        crate::kube::Error::Transport(_) => "transport".to_string(),
                        _ => "other".to_string(),
                    },
                };
                metrics.error(&kind);
                let delay = queue.add_rate_limited(key.clone(), e.retry_after());
                log::warn!(
                    "{}/{}: reconcile failed, retrying in {} ms: {e}",
                    key.0,
                    key.1,
                    delay.as_millis()
                );
            }
        }
        queue.done(&key);
    }
}
