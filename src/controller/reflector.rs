//! List, then watch from the list's resourceVersion, keeping a cache and
//! reporting every change. Relists on 410; resumes a watch from the last
//! resourceVersion or bookmark; backs off with jitter on failures.
//! (kube-runtime's watcher + reflector, client-go's Reflector.)

use super::cache::{Change, Key, Store, Versioned};
use crate::backoff::Backoff;
use crate::kube::client::random_watch_timeout;
use crate::kube::{Client, ListParams, ResourcePath, WatchEvent, WatchParams};
use crate::metrics::Metrics;
use crate::server::Health;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a watch loop may be silent before /healthz calls it stuck:
/// a watch lasts at most about 5.5 minutes before it is restarted.
pub const MAX_SILENCE: Duration = Duration::from_secs(600);

pub type OnChange<V> = Arc<dyn Fn(Change<V>) + Send + Sync>;

/// What every reflector shares.
#[derive(Clone)]
pub struct Common {
    pub client: Arc<Client>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub stop: Arc<AtomicBool>,
}

pub struct Reflector<V> {
    /// For logs, metrics and health: the plural of what is watched.
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub path: ResourcePath,
    pub label_selector: Option<String>,
    pub metadata_only: bool,
    pub client: Arc<Client>,
    pub store: Arc<Store<V>>,
    pub parse: fn(&Value) -> Option<V>,
    pub on_change: OnChange<V>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub stop: Arc<AtomicBool>,
}

fn key_of(o: &Value) -> Option<Key> {
    let name = o["metadata"]["name"].as_str()?;
    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
    Some((ns.to_string(), name.to_string()))
}

const BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));

impl<V: Clone + PartialEq + Versioned + Send + Sync + 'static> Reflector<V> {
    /// A reflector over every object of `path` (a collection); narrow it
    /// with [`Reflector::selecting`] or [`Reflector::metadata_only`].
    pub fn new(
        common: &Common,
        resource: &'static str,
        path: ResourcePath,
        namespace: Option<String>,
        store: Arc<Store<V>>,
        parse: fn(&Value) -> Option<V>,
        on_change: OnChange<V>,
    ) -> Reflector<V> {
        Reflector {
            resource,
            namespace,
            path,
            label_selector: None,
            metadata_only: false,
            client: common.client.clone(),
            store,
            parse,
            on_change,
            metrics: common.metrics.clone(),
            health: common.health.clone(),
            stop: common.stop.clone(),
        }
    }

    /// Only objects carrying this label (`key=value`).
    pub fn selecting(mut self, label: (&str, &str)) -> Reflector<V> {
        self.label_selector = Some(format!("{}={}", label.0, label.1));
        self
    }

    /// Watch `PartialObjectMetadata` only: cheap for kinds with big objects.
    pub fn metadata_only(mut self) -> Reflector<V> {
        self.metadata_only = true;
        self
    }

    pub fn loop_name(&self) -> String {
        format!(
            "watch/{}/{}",
            self.resource,
            self.namespace.as_deref().unwrap_or("*")
        )
    }

    pub fn spawn(self) -> std::io::Result<()> {
        let name = self.loop_name();
        self.health.register(&name, MAX_SILENCE);
        self.store.register_loop(&name);
        std::thread::Builder::new().name(name).spawn(move || {
            self.run();
            if !self.stop.load(Ordering::SeqCst) {
                self.health.died(&self.loop_name());
            }
        })?;
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn pause(&self, failures: &mut u32) {
        std::thread::sleep(BACKOFF.delay(*failures));
        *failures = failures.saturating_add(1);
    }

    fn run(&self) {
        let name = self.loop_name();
        let mut failures = 0u32;
        'relist: loop {
            if self.stopped() {
                return;
            }
            let params = ListParams {
                label_selector: self.label_selector.clone(),
                metadata_only: self.metadata_only,
                ..Default::default()
            };
            let list = match self.client.list_all(&self.path, &params) {
                Ok(l) => l,
                Err(e) => {
                    log::warn!("{name}: list failed, retrying: {e}");
                    self.health.list_failed(&name);
                    self.pause(&mut failures);
                    continue;
                }
            };
            self.health.list_ok(&name);
            self.metrics.relisted(self.resource);
            let items: Vec<(Key, V)> = list
                .items
                .iter()
                .filter_map(|o| Some((key_of(o)?, (self.parse)(o)?)))
                .collect();
            for change in self.store.replace(self.namespace.as_deref(), items) {
                (self.on_change)(change);
            }
            self.store.mark_synced(&name);
            self.health.beat(&name);
            let mut rv = list.resource_version;
            loop {
                if self.stopped() {
                    return;
                }
                let wp = WatchParams {
                    label_selector: self.label_selector.clone(),
                    field_selector: None,
                    resource_version: rv.clone(),
                    timeout: random_watch_timeout(),
                    metadata_only: self.metadata_only,
                };
                let stream = match self.client.watch(&self.path, &wp) {
                    Ok(s) => s,
                    Err(e) if e.is_gone() => {
                        log::info!("{name}: resourceVersion {rv} expired; relisting");
                        continue 'relist;
                    }
                    Err(e) => {
                        log::warn!("{name}: watch failed, retrying: {e}");
                        self.metrics.watch_restarted(self.resource);
                        self.pause(&mut failures);
                        continue;
                    }
                };
                let mut errored = false;
                for ev in stream {
                    self.health.beat(&name);
                    match ev {
                        Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                            if let Some(r) = o["metadata"]["resourceVersion"].as_str() {
                                rv = r.to_string();
                            }
                            if let (Some(k), Some(v)) = (key_of(&o), (self.parse)(&o)) {
                                match self.store.put(k.clone(), v.clone()) {
                                    Ok(old) if old.as_ref() != Some(&v) => {
                                        (self.on_change)((k, old, Some(v)))
                                    }
                                    Ok(_) => {}
                                    Err(_) => log::debug!("{name}: kept a newer view of {k:?}"),
                                }
                            }
                        }
                        Ok(WatchEvent::Deleted(o)) => {
                            if let Some(r) = o["metadata"]["resourceVersion"].as_str() {
                                rv = r.to_string();
                            }
                            if let Some(k) = key_of(&o) {
                                let uid = o["metadata"]["uid"].as_str().unwrap_or("");
                                if let Some(old) = self.store.remove_object(&k, uid) {
                                    (self.on_change)((k, Some(old), None));
                                }
                            }
                        }
                        Ok(WatchEvent::Bookmark { resource_version }) => rv = resource_version,
                        Err(e) if e.is_gone() => {
                            log::info!("{name}: watch expired in stream; relisting");
                            continue 'relist;
                        }
                        Err(e) => {
                            log::warn!("{name}: watch broke, resuming from {rv}: {e}");
                            errored = true;
                            break;
                        }
                    }
                    failures = 0;
                    if self.stopped() {
                        return;
                    }
                }
                self.metrics.watch_restarted(self.resource);
                if errored {
                    self.pause(&mut failures);
                }
            }
        }
    }
}
