//! List, then watch from the list's resourceVersion, keeping a cache and
//! reporting every change. Relists on 410; resumes a watch from the last
//! resourceVersion or bookmark; backs off with jitter on failures.
//! (kube-runtime's watcher + reflector, client-go's Reflector.)

use super::cache::{apply_event, Change, Event, ObjectKey, Store, Versioned};
use super::reconnect::{Policy, Reconnect, WatchEnd};
use crate::health::Health;
use crate::kube::client::random_watch_timeout;
use crate::kube::{Client, Error, ListParams, ResourcePath, WatchEvent, WatchParams};
use crate::metrics::Metrics;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a loop may go without a working list or watch, or a worker
/// without taking work, before /healthz calls it stuck (the default of
/// `--liveness-window-seconds`).
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
    /// How long a loop may go without a working list or watch before
    /// /healthz calls it stuck.
    pub liveness_window: Duration,
    pub reconnect: Policy,
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
    pub liveness_window: Duration,
    pub reconnect: Policy,
}

/// Consecutive failures after which a loop is reported not ready.
const FAILING_AFTER: u32 = 3;

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
            liveness_window: common.liveness_window,
            reconnect: common.reconnect,
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
        self.health.register(&name, self.liveness_window);
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

    /// Wait before the next attempt, waking for a stop.
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(200)));
        }
    }

    /// List, then watch from the list's resourceVersion; relist on 410.
    /// Every retry goes through one [`Reconnect`], so no path loops hot.
    fn run(&self) {
        let name = self.loop_name();
        let mut reconnect = Reconnect::new(self.reconnect);
        while !self.stopped() {
            let Some(rv) = self.list(&name, &mut reconnect) else {
                continue;
            };
            self.watch_from(&name, rv, &mut reconnect);
        }
    }

    fn feed(&self, ev: Event<V>) {
        for change in apply_event(&self.store, ev) {
            (self.on_change)(change);
        }
    }

    /// One full list into the store; its resourceVersion, or None after a
    /// failure (backed off, and reported to /readyz).
    fn list(&self, name: &str, reconnect: &mut Reconnect) -> Option<String> {
        let params = ListParams {
            label_selector: self.label_selector.clone(),
            metadata_only: self.metadata_only,
            ..Default::default()
        };
        let list = match self.client.list_all(&self.path, &params) {
            Ok(l) => l,
            Err(e) => {
                let delay = match e {
                    Error::ListBound(_) => reconnect.gave_up(),
                    _ => reconnect.failed(e.retry_after()),
                };
                log::warn!(
                    "{name}: list failed, retrying in {} ms: {e}",
                    delay.as_millis()
                );
                self.health.list_failed(name);
                self.pause(delay);
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
    fn watch_from(&self, name: &str, mut rv: String, reconnect: &mut Reconnect) {
        while !self.stopped() {
            let wp = WatchParams {
                label_selector: self.label_selector.clone(),
                field_selector: None,
                resource_version: rv.clone(),
                timeout: random_watch_timeout(),
                metadata_only: self.metadata_only,
            };
            let opened = Instant::now();
            let end = match self.client.watch(&self.path, &wp) {
                Ok(stream) => {
                    self.health.watching(name, true);
                    let end = self.consume(name, stream, &mut rv);
                    self.health.watching(name, false);
                    end
                }
                Err(e) if e.is_gone() => {
                    log::info!("{name}: resourceVersion {rv} expired; relisting");
                    Some(WatchEnd::Expired)
                }
                Err(e) => {
                    let delay = reconnect.failed(e.retry_after());
                    log::warn!(
                        "{name}: watch failed, retrying in {} ms: {e}",
                        delay.as_millis()
                    );
                    self.restarted(reconnect);
                    self.pause(delay);
                    continue;
                }
            };
            let Some(end) = end else { return };
            let delay = reconnect.watch_ended(opened.elapsed(), end);
            self.restarted(reconnect);
            if !delay.is_zero() {
                log::debug!(
                    "{name}: watch ended after {} ms; again in {} ms",
                    opened.elapsed().as_millis(),
                    delay.as_millis()
                );
            }
            self.pause(delay);
            if end == WatchEnd::Expired {
                return;
            }
        }
    }

    /// A watch ended or failed: counted, and a loop that keeps failing is
    /// reported to /readyz until a watch works again.
    fn restarted(&self, reconnect: &Reconnect) {
        self.metrics.watch_restarted(self.resource);
        if reconnect.failures() >= FAILING_AFTER {
            self.health.list_failed(&self.loop_name());
        } else if reconnect.failures() == 0 {
            self.health.list_ok(&self.loop_name());
        }
    }

    /// Apply a watch's events until it ends, keeping `rv` at the last one.
    /// None when the operator stops.
    fn consume(
        &self,
        name: &str,
        stream: impl Iterator<Item = Result<WatchEvent, crate::kube::Error>>,
        rv: &mut String,
    ) -> Option<WatchEnd> {
        for ev in stream {
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
                    return Some(WatchEnd::Expired);
                }
                // Cut mid-stream or gone idle: a normal close (client-go's
                // StreamWatcher treats EOF and unexpected EOF alike).
                Err(e @ (crate::kube::Error::Transport(_) | crate::kube::Error::Timeout(_))) => {
                    log::debug!("{name}: watch cut, resuming from {rv}: {e}");
                    return Some(WatchEnd::Closed);
                }
                Err(e) => {
                    log::warn!("{name}: watch broke, resuming from {rv}: {e}");
                    return Some(WatchEnd::Broken);
                }
            }
            self.health.beat(name);
            if self.stopped() {
                return None;
            }
        }
        Some(WatchEnd::Closed)
    }
}

fn remember_rv(o: &Value, rv: &mut String) {
    if let Some(r) = o["metadata"]["resourceVersion"].as_str() {
        *rv = r.to_string();
    }
}
