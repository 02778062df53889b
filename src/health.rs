//! Liveness and readiness: which loops are alive, whether the caches have
//! listed, which lists fail. `/healthz` and `/readyz` report it.

use crate::lock::lock;
use crate::server::{Answer, Handler, Request};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One loop's liveness. A watch loop is alive while its watch is open,
/// however quiet the cluster (bookmarks need not come at any interval), and
/// while a list or a watch succeeded within `max`; it is stuck only when it
/// cannot list or watch for that long. A worker is alive while it waits for
/// work, and stuck only when one pass takes longer than `max`.
struct Beat {
    last: Instant,
    max: Duration,
    /// A watch is open, or a worker waits for work: alive without beats.
    open: bool,
    /// When the open watch opened.
    opened: Option<Instant>,
}

/// How long a watch must stay open for its loop to count as working again:
/// the span after which it resets its count of failures
/// ([`crate::runtime::reconnect::Policy::healthy`]).
const RECOVERED: Duration = crate::runtime::reconnect::Policy::DEFAULT.healthy;

/// Liveness of the operator's loops and readiness of its caches.
#[derive(Default)]
pub struct Health {
    /// loop name → its last sign of life
    beats: Mutex<BTreeMap<String, Beat>>,
    /// Loops that ended; a loop that ends while the operator runs is dead.
    dead: Mutex<Vec<String>>,
    /// Every cache has listed once, in every namespace watched.
    ready: AtomicBool,
    /// List/watch loops whose last list failed: not ready while any is.
    failing_lists: Mutex<std::collections::BTreeSet<String>>,
    /// Leader election's word on liveness: Err for a leader that lost its
    /// lease and has not stopped.
    lease: Mutex<Option<LeaseCheck>>,
    /// Why the last probe of the API server failed, while it does (§9.D20).
    api: Mutex<Option<String>>,
}

/// See [`Health::watch_lease`].
pub type LeaseCheck = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl crate::runtime::Liveness for Health {
    fn register(&self, name: &str, max_silence: Duration) {
        let beat = Beat {
            last: Instant::now(),
            max: max_silence,
            open: false,
            opened: None,
        };
        lock(&self.beats).insert(name.to_string(), beat);
    }

    fn unregister(&self, name: &str) {
        lock(&self.beats).remove(name);
    }

    fn beat(&self, name: &str) {
        if let Some(b) = lock(&self.beats).get_mut(name) {
            b.last = Instant::now();
        }
    }

    fn watching(&self, name: &str, open: bool) {
        if let Some(b) = lock(&self.beats).get_mut(name) {
            let now = Instant::now();
            b.last = now;
            b.open = open;
            b.opened = open.then_some(now);
        }
    }

    fn idle(&self, name: &str, idle: bool) {
        self.watching(name, idle);
    }

    fn died(&self, name: &str) {
        lock(&self.dead).push(name.to_string());
    }

    fn list_failed(&self, name: &str) {
        lock(&self.failing_lists).insert(name.to_string());
    }

    fn list_ok(&self, name: &str) {
        lock(&self.failing_lists).remove(name);
    }
}

impl Health {
    /// Make `check` part of liveness.
    pub fn watch_lease(&self, check: LeaseCheck) {
        *lock(&self.lease) = Some(check);
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// The probe of the API server's reads ([`Health::probe_api`]):
    /// answered, or why not.
    pub fn api_answered(&self, verdict: Result<(), String>) {
        *lock(&self.api) = verdict.err();
    }

    /// Ok once every cache has listed, while no loop fails to list or
    /// watch and the API server answers the probe; otherwise why not,
    /// naming the failing loops.
    pub fn readiness(&self) -> Result<(), String> {
        self.readiness_at(Instant::now())
    }

    /// Readiness at `now`. A failing loop whose watch has stayed open for
    /// [`RECOVERED`] works again, whether or not any event came: a quiet
    /// watch ends only after 50 to 60 s, and readiness must not wait for it.
    fn readiness_at(&self, now: Instant) -> Result<(), String> {
        if let Some(why) = lock(&self.api).clone() {
            return Err(format!("the API server cannot serve a read: {why}"));
        }
        let mut failing = lock(&self.failing_lists);
        {
            let beats = lock(&self.beats);
            failing.retain(|name| {
                let opened = beats.get(name).and_then(|b| b.opened);
                opened.is_none_or(|t| now.saturating_duration_since(t) < RECOVERED)
            });
        }
        if !failing.is_empty() {
            let names: Vec<&str> = failing.iter().map(String::as_str).collect();
            return Err(format!("cannot list or watch: {}", names.join(", ")));
        }
        if !self.ready.load(Ordering::SeqCst) {
            return Err("caches not yet synced".into());
        }
        Ok(())
    }

    /// Ok, or the loops that look stuck or dead.
    pub fn check(&self) -> Result<(), String> {
        let mut bad: Vec<String> = lock(&self.dead)
            .iter()
            .map(|n| format!("{n} stopped"))
            .collect();
        let lease = lock(&self.lease).clone();
        if let Some(Err(e)) = lease.map(|check| check()) {
            bad.push(e);
        }
        for (name, b) in lock(&self.beats).iter() {
            if !b.open && b.last.elapsed() > b.max {
                let what = if name.starts_with("watch/") {
                    "cannot list or watch"
                } else {
                    "silent"
                };
                bad.push(format!("{name} {what} for {}s", b.last.elapsed().as_secs()));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join(", "))
        }
    }
}

/// How often the API server's reads are probed, and how long one may take
/// (§9.D20): an outage of its storage is seen within their sum.
pub const API_PROBE: (Duration, Duration) = (Duration::from_secs(4), Duration::from_secs(3));

/// The probe of the API server for readiness (§9.D20). Its storage may be
/// down while every watch stays open, served from the API server's watch
/// cache, and an idle operator makes no other request: a consistent read
/// every [`API_PROBE`] period is what tells readiness.
impl Health {
    /// Runs `probe` every period until `stop`, recording each verdict.
    pub fn probe_api(
        self: &Arc<Self>,
        probe: impl Fn() -> Result<(), String> + Send + 'static,
        stop: Arc<crate::runtime::Stop>,
    ) -> std::io::Result<()> {
        let health = self.clone();
        std::thread::Builder::new()
            .name("probe-api".into())
            .spawn(move || loop {
                health.api_answered(probe());
                if stop.wait(API_PROBE.0) {
                    return;
                }
            })
            .map(|_| ())
    }
}

/// `/healthz` and `/readyz`, for the kubelet's probes.
impl Health {
    pub fn handler(self: &Arc<Self>) -> Handler {
        let health = self.clone();
        Arc::new(move |r: &Request| {
            if r.method != "GET" {
                return Answer::text(405, "only GET\n");
            }
            let verdict = match r.path.as_str() {
                "/healthz" => health.check().map_err(|e| format!("unhealthy: {e}\n")),
                "/readyz" => health.readiness().map_err(|e| format!("not ready: {e}\n")),
                #[cfg(feature = "alloc-count")]
                "/debug/allocations" => {
                    let (calls, bytes) = crate::memory::count::totals();
                    let live = crate::memory::count::live();
                    let kept = crate::memory::cache::kept_total();
                    return Answer::text(
                        200,
                        format!("allocations {calls}\nbytes {bytes}\nlive {live}\nkept {kept}\n"),
                    );
                }
                _ => return Answer::text(404, "not found\n"),
            };
            match verdict {
                Ok(()) => Answer::text(200, "ok\n"),
                Err(e) => Answer::text(503, e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Liveness;

    #[test]
    fn ready_only_when_synced_and_no_list_fails() {
        let h = Health::default();
        assert_eq!(h.readiness(), Err("caches not yet synced".into()));
        h.set_ready();
        assert_eq!(h.readiness(), Ok(()));
        h.list_failed("list/deployments/b");
        assert_eq!(
            h.readiness(),
            Err("cannot list or watch: list/deployments/b".into())
        );
        h.list_ok("list/deployments/b");
        assert_eq!(h.readiness(), Ok(()));
    }

    /// A failed probe of the API server makes the operator unready, with
    /// its reason, until one succeeds.
    #[test]
    fn unready_while_the_api_server_fails_its_probe() {
        let h = Health::default();
        h.set_ready();
        h.api_answered(Err("HTTP 504".into()));
        assert_eq!(
            h.readiness(),
            Err("the API server cannot serve a read: HTTP 504".into())
        );
        h.api_answered(Ok(()));
        assert_eq!(h.readiness(), Ok(()));
    }

    /// A loop that failed is ready again once its watch has stayed open
    /// long enough, with no event and before the watch ends.
    #[test]
    fn a_watch_open_long_enough_makes_its_failing_loop_ready() {
        let h = Health::default();
        h.set_ready();
        h.register("watch/x", Duration::from_secs(60));
        h.list_failed("watch/x");
        h.watching("watch/x", true);
        let now = Instant::now();
        assert!(h.readiness_at(now + RECOVERED / 2).is_err());
        assert_eq!(h.readiness_at(now + RECOVERED), Ok(()));
        // It counts from the last open: a watch that ended does not.
        h.list_failed("watch/x");
        h.watching("watch/x", false);
        assert!(h.readiness_at(now + RECOVERED * 3).is_err());
    }

    #[test]
    fn silent_or_dead_loops_are_unhealthy() {
        let h = Health::default();
        h.register("worker", Duration::from_secs(60));
        assert!(h.check().is_ok());
        h.register("watch/x", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(h
            .check()
            .unwrap_err()
            .contains("watch/x cannot list or watch for"));
        h.watching("watch/x", true);
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.check().is_ok(), "an open watch is alive, however quiet");
        h.watching("watch/x", false);
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.check().is_err());
        h.register("watch/x", Duration::from_secs(60));
        h.died("worker");
        assert!(h.check().unwrap_err().contains("worker stopped"));
    }
}
