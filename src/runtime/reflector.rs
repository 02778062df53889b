//! The thin loop that drives a [`Watcher`]: it makes the request each
//! [`WatchStep`] asks for, feeds what comes back into a store's [`StoreWriter`],
//! reports every change, and tells the machine how it went. What is
//! watched, with which selectors, and what a change wakes is the caller's
//! (kube-runtime's watcher + reflector, client-go's Reflector).

use super::probes::{ListerWatcher, Liveness, LoopMetrics};
use super::reconnect::{Policy, WatchEnd};
use super::stop::Stop;
use super::store::{Change, Event, StoreWriter};
use super::watcher::{WatchResult, WatchStep, Watcher};
use super::{Item, Versioned};
use crate::kube::client::random_watch_timeout;
use crate::kube::fields::Decode;
use crate::kube::{Error, ListParams, ResourcePath, WatchEvent, WatchParams};
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
pub struct Common<L> {
    pub client: Arc<L>,
    pub metrics: Arc<dyn LoopMetrics>,
    pub health: Arc<dyn Liveness>,
    /// The one stop token (SIGTERM/SIGINT), obeyed by every loop.
    pub stop: Arc<Stop>,
    /// How long a loop may go without a working list or watch before
    /// /healthz calls it stuck.
    pub liveness_window: Duration,
    pub reconnect: Policy,
    /// Called after each list, before the watch that follows: the thread
    /// gives back what the list needed (as a worker does when idle).
    pub on_long_wait: fn(),
}

/// A one-term label selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// Objects whose label `key` is `value` (`key=value`).
    Is(&'static str, &'static str),
    /// All others, those without the label too (`key!=value`).
    IsNot(&'static str, &'static str),
}

/// Objects arrive decoded as `O` (a pruned `Value`, or a typed view:
/// [`crate::kube::fields`]), and `parse` makes them views.
pub struct Reflector<V, L, O = Value> {
    /// For logs, metrics and health: the plural of what is watched.
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub path: ResourcePath,
    pub label_selector: Option<String>,
    pub metadata_only: bool,
    pub client: Arc<L>,
    pub store: StoreWriter<V>,
    pub parse: fn(O) -> Option<V>,
    pub on_change: OnChange<V>,
    pub metrics: Arc<dyn LoopMetrics>,
    pub health: Arc<dyn Liveness>,
    pub stop: Arc<Stop>,
    pub liveness_window: Duration,
    pub reconnect: Policy,
    pub on_long_wait: fn(),
}

/// Consecutive failures after which a loop is reported not ready.
const FAILING_AFTER: u32 = 3;

impl<V, L, O> Reflector<V, L, O>
where
    V: Clone + PartialEq + Versioned + Send + Sync + 'static,
    L: ListerWatcher,
    O: Decode + Item + Send + 'static,
{
    /// A reflector over every object of `path` (a collection); narrow it
    /// with [`Reflector::selecting`] or [`Reflector::metadata_only`].
    pub fn new(
        common: &Common<L>,
        resource: &'static str,
        path: ResourcePath,
        namespace: Option<String>,
        store: StoreWriter<V>,
        parse: fn(O) -> Option<V>,
        on_change: OnChange<V>,
    ) -> Reflector<V, L, O> {
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
            liveness_window: common.liveness_window,
            reconnect: common.reconnect,
            on_long_wait: common.on_long_wait,
        }
    }

    /// Only the objects the selector selects.
    pub fn selecting(mut self, selector: Label) -> Self {
        self.label_selector = Some(match selector {
            Label::Is(k, v) => format!("{k}={v}"),
            Label::IsNot(k, v) => format!("{k}!={v}"),
        });
        self
    }

    /// Watch `PartialObjectMetadata` only: cheap for kinds with big objects.
    pub fn metadata_only(mut self) -> Self {
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
            if !self.stop.is_stopped() {
                self.health.died(&self.loop_name());
            }
        })?;
        Ok(())
    }

    /// Do what the machine asks until told to stop. Every retry goes
    /// through the machine's one [`super::reconnect::Reconnect`], so no
    /// path loops hot.
    fn run(&self) {
        let name = self.loop_name();
        let mut machine = Watcher::new(self.reconnect);
        let mut action = WatchStep::List;
        while !self.stop.is_stopped() {
            action = match action {
                WatchStep::List => self.list(&name, &mut machine),
                WatchStep::Watch(rv) => match self.watch(&name, rv, &mut machine) {
                    Some(next) => next,
                    None => return,
                },
                WatchStep::Wait(d) => {
                    if self.stop.wait(d) {
                        return;
                    }
                    machine.step(WatchResult::Waited, Instant::now())
                }
            };
        }
    }

    fn feed(&self, ev: Event<V>) {
        for change in self.store.apply(ev) {
            (self.on_change)(change);
        }
    }

    /// One full list into the store (a failure is backed off, and reported
    /// to /readyz).
    fn list(&self, name: &str, machine: &mut Watcher) -> WatchStep {
        let params = ListParams {
            label_selector: self.label_selector.clone(),
            metadata_only: self.metadata_only,
            ..Default::default()
        };
        let list = match self.client.list_all_as::<O>(&self.path, &params) {
            Ok(l) => l,
            Err(e) => return list_failed(self.health.as_ref(), name, machine, &e),
        };
        self.health.list_ok(name);
        self.metrics.relisted(self.resource);
        let items: Vec<_> = list
            .items
            .into_iter()
            .filter_map(|o| Some((o.key()?, (self.parse)(o)?)))
            .collect();
        self.feed(Event::Listed(self.namespace.clone(), items));
        self.store.mark_synced(name);
        self.health.beat(name);
        // The watch that follows reads little at a time.
        (self.on_long_wait)();
        machine.step(WatchResult::Listed(list.resource_version), Instant::now())
    }

    /// One watch from `rv`, its events applied until it ends (a 410, in
    /// the answer or in the stream, ends it too). None when the operator
    /// stops.
    fn watch(&self, name: &str, mut rv: String, machine: &mut Watcher) -> Option<WatchStep> {
        let wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: None,
            resource_version: rv.clone(),
            timeout: random_watch_timeout(),
            metadata_only: self.metadata_only,
        };
        let opened = Instant::now();
        let end = match self.client.watch_as::<O>(&self.path, &wp) {
            Ok(stream) => {
                self.health.watching(name, true);
                let end = self.consume(name, stream, &mut rv);
                self.health.watching(name, false);
                end?
            }
            Err(e) if e.is_gone() => {
                log::info!("{name}: resourceVersion {rv} expired; relisting");
                WatchEnd::Expired
            }
            Err(e) => {
                let failed = WatchResult::WatchFailed {
                    retry_after: e.retry_after(),
                };
                let next = machine.step(failed, Instant::now());
                log::warn!(
                    "{name}: watch failed, retrying in {} ms: {e}",
                    next.delay().as_millis()
                );
                self.restarted(machine);
                return Some(next);
            }
        };
        let next = watch_ended(name, machine, end, rv, opened);
        self.restarted(machine);
        Some(next)
    }

    /// A watch ended or failed: counted, and a loop that keeps failing is
    /// reported to /readyz until a watch works again.
    fn restarted(&self, machine: &Watcher) {
        self.metrics.watch_restarted(self.resource);
        if machine.failures() >= FAILING_AFTER {
            self.health.list_failed(&self.loop_name());
        } else if machine.failures() == 0 {
            self.health.list_ok(&self.loop_name());
        }
    }

    /// Apply a watch's events until it ends, keeping `rv` at the last one.
    /// None when the operator stops.
    fn consume(
        &self,
        name: &str,
        stream: impl Iterator<Item = Result<WatchEvent<O>, Error>>,
        rv: &mut String,
    ) -> Option<WatchEnd> {
        for ev in stream {
            match ev {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    remember_rv(&o, rv);
                    // An echo of our own write is not made a view again.
                    let fresh = o
                        .key()
                        .filter(|k| !self.store.holds(k, o.uid(), o.version()));
                    if let Some(k) = fresh {
                        if let Some(v) = (self.parse)(o) {
                            self.feed(Event::Applied(k, v));
                        }
                    }
                }
                Ok(WatchEvent::Deleted(o)) => {
                    remember_rv(&o, rv);
                    if let Some(k) = o.key() {
                        self.feed(Event::Deleted(k, o.uid().to_string()));
                    }
                }
                Ok(WatchEvent::Bookmark { resource_version }) => *rv = resource_version,
                Err(e) => return Some(stream_broke(name, rv, &e)),
            }
            self.health.beat(name);
            if self.stop.is_stopped() {
                return None;
            }
        }
        Some(WatchEnd::Closed)
    }
}

/// A list failed: backed off, and reported to /readyz. (Apart from the
/// generic loop: one copy for every kind.)
#[inline(never)]
fn list_failed(health: &dyn Liveness, name: &str, machine: &mut Watcher, e: &Error) -> WatchStep {
    let failed = WatchResult::ListFailed {
        retry_after: e.retry_after(),
        too_big: matches!(e, Error::ListBound(_)),
    };
    let next = machine.step(failed, Instant::now());
    log::warn!(
        "{name}: list failed, retrying in {} ms: {e}",
        next.delay().as_millis()
    );
    health.list_failed(name);
    next
}

/// A watch ended as `end`: what the machine does next.
#[inline(never)]
fn watch_ended(
    name: &str,
    machine: &mut Watcher,
    end: WatchEnd,
    resource_version: String,
    opened: Instant,
) -> WatchStep {
    let ended = WatchResult::WatchEnded {
        end,
        resource_version,
    };
    let next = machine.step(ended, Instant::now());
    if !next.delay().is_zero() {
        log::debug!(
            "{name}: watch ended after {} ms; again in {} ms",
            opened.elapsed().as_millis(),
            next.delay().as_millis()
        );
    }
    next
}

/// How a watch whose stream gave `e` ended.
#[inline(never)]
fn stream_broke(name: &str, rv: &str, e: &Error) -> WatchEnd {
    match e {
        _ if e.is_gone() => {
            log::info!("{name}: watch expired in stream; relisting");
            WatchEnd::Expired
        }
        // Cut mid-stream or gone idle: a normal close (client-go's
        // StreamWatcher treats EOF and unexpected EOF alike).
        Error::Transport(_) | Error::Timeout(_) => {
            log::debug!("{name}: watch cut, resuming from {rv}: {e}");
            WatchEnd::Closed
        }
        _ => {
            log::warn!("{name}: watch broke, resuming from {rv}: {e}");
            WatchEnd::Broken
        }
    }
}

fn remember_rv(o: &impl Item, rv: &mut String) {
    if let Some(r) = o.version() {
        r.clone_into(rv);
    }
}
