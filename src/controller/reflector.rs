//! List, then watch from the list's resourceVersion, keeping a cache and
//! reporting every change. Relists on 410; resumes a watch from the last
//! resourceVersion or bookmark; backs off with jitter on failures.
//! (kube-runtime's watcher + reflector, client-go's Reflector.)

use super::cache::{apply_event, Change, Event, ObjectKey, Store, Versioned};
use crate::backoff::Backoff;
use crate::health::Health;
use crate::kube::client::random_watch_timeout;
use crate::kube::{Client, ListParams, ResourcePath, WatchEvent, WatchParams};
use crate::metrics::Metrics;
use serde_json::Value;
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
    /// The one stop signal (SIGTERM/SIGINT), read by every loop.
    pub stop: fn() -> bool,
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
    pub stop: fn() -> bool,
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
            stop: common.stop,
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
            if !self.stopped() {
                self.health.died(&self.loop_name());
            }
        })?;
        Ok(())
    }

    fn stopped(&self) -> bool {
        (self.stop)()
    }

    fn pause(&self, failures: &mut u32) {
        std::thread::sleep(BACKOFF.delay(*failures));
        *failures = failures.saturating_add(1);
    }

    /// List, then watch from the list's resourceVersion; relist on 410.
    fn run(&self) {
        let name = self.loop_name();
        let mut failures = 0u32;
        while !self.stopped() {
            let Some(rv) = self.list(&name, &mut failures) else {
                continue;
            };
            self.watch_from(&name, rv, &mut failures);
        }
    }

    fn feed(&self, ev: Event<V>) {
        for change in apply_event(&self.store, ev) {
            (self.on_change)(change);
        }
    }

    /// One full list into the store; its resourceVersion, or None after a
    /// failure (backed off, and reported to /readyz).
    fn list(&self, name: &str, failures: &mut u32) -> Option<String> {
        let params = ListParams {
            label_selector: self.label_selector.clone(),
            metadata_only: self.metadata_only,
            ..Default::default()
        };
        let list = match self.client.list_all(&self.path, &params) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("{name}: list failed, retrying: {e}");
                self.health.list_failed(name);
                self.pause(failures);
                return None;
            }
        };
        self.health.list_ok(name);
        self.metrics.relisted(self.resource);
        let items: Vec<(ObjectKey, V)> = list
            .items
            .iter()
            .filter_map(|o| Some((ObjectKey::of(o)?, (self.parse)(o)?)))
            .collect();
        self.feed(Event::Listed(self.namespace.clone(), items));
        self.store.mark_synced(name);
        self.health.beat(name);
        Some(list.resource_version)
    }

    /// Watch from `rv`, resuming after breaks, until a relist is needed
    /// (410, in the answer or in the stream) or the operator stops.
    fn watch_from(&self, name: &str, mut rv: String, failures: &mut u32) {
        while !self.stopped() {
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
                    return;
                }
                Err(e) => {
                    log::warn!("{name}: watch failed, retrying: {e}");
                    self.metrics.watch_restarted(self.resource);
                    self.pause(failures);
                    continue;
                }
            };
            match self.consume(name, stream, &mut rv, failures) {
                Ended::Relist => return,
                Ended::Stopped => return,
                Ended::Broke => {
                    self.metrics.watch_restarted(self.resource);
                    self.pause(failures);
                }
                Ended::Closed => self.metrics.watch_restarted(self.resource),
            }
        }
    }

    /// Apply a watch's events until it ends, keeping `rv` at the last one.
    fn consume(
        &self,
        name: &str,
        stream: impl Iterator<Item = Result<WatchEvent, crate::kube::Error>>,
        rv: &mut String,
        failures: &mut u32,
    ) -> Ended {
        for ev in stream {
            self.health.beat(name);
            match ev {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    remember_rv(&o, rv);
                    if let (Some(k), Some(v)) = (ObjectKey::of(&o), (self.parse)(&o)) {
                        self.feed(Event::Applied(k, v));
                    }
                }
                Ok(WatchEvent::Deleted(o)) => {
                    remember_rv(&o, rv);
                    if let Some(k) = ObjectKey::of(&o) {
                        let uid = o["metadata"]["uid"].as_str().unwrap_or("").to_string();
                        self.feed(Event::Deleted(k, uid));
                    }
                }
                Ok(WatchEvent::Bookmark { resource_version }) => *rv = resource_version,
                Err(e) if e.is_gone() => {
                    log::info!("{name}: watch expired in stream; relisting");
                    return Ended::Relist;
                }
                Err(e) => {
                    log::warn!("{name}: watch broke, resuming from {rv}: {e}");
                    return Ended::Broke;
                }
            }
            *failures = 0;
            if self.stopped() {
                return Ended::Stopped;
            }
        }
        Ended::Closed
    }
}

/// How a watch stream ended.
enum Ended {
    /// The server closed it (its timeout): resume from the last rv.
    Closed,
    /// It broke: back off, then resume.
    Broke,
    /// The rv expired: list again.
    Relist,
    Stopped,
}

fn remember_rv(o: &Value, rv: &mut String) {
    if let Some(r) = o["metadata"]["resourceVersion"].as_str() {
        *rv = r.to_string();
    }
}
