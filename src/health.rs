//! Liveness and readiness: which loops are alive, whether the caches have
//! listed, which lists fail. `/healthz` and `/readyz` report it.

use crate::lock::lock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Liveness of the operator's loops and readiness of its caches.
#[derive(Default)]
pub struct Health {
    /// loop name → (last sign of life, longest silence that is still healthy)
    beats: Mutex<BTreeMap<String, (Instant, Duration)>>,
    /// Loops that ended; a loop that ends while the operator runs is dead.
    dead: Mutex<Vec<String>>,
    /// Every cache has listed once, in every namespace watched.
    ready: AtomicBool,
    /// List/watch loops whose last list failed: not ready while any is.
    failing_lists: Mutex<std::collections::BTreeSet<String>>,
}

impl Health {
    pub fn register(&self, name: &str, max_silence: Duration) {
        lock(&self.beats).insert(name.to_string(), (Instant::now(), max_silence));
    }

    pub fn beat(&self, name: &str) {
        if let Some(b) = lock(&self.beats).get_mut(name) {
            b.0 = Instant::now();
        }
    }

    pub fn died(&self, name: &str) {
        lock(&self.dead).push(name.to_string());
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    pub fn list_failed(&self, name: &str) {
        lock(&self.failing_lists).insert(name.to_string());
    }

    pub fn list_ok(&self, name: &str) {
        lock(&self.failing_lists).remove(name);
    }

    /// Ok once every cache has listed, and while no loop fails to list;
    /// otherwise why not, naming the failing loops.
    pub fn readiness(&self) -> Result<(), String> {
        let failing = lock(&self.failing_lists);
        if !failing.is_empty() {
            let names: Vec<&str> = failing.iter().map(String::as_str).collect();
            return Err(format!("cannot list: {}", names.join(", ")));
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
        for (name, (last, max)) in lock(&self.beats).iter() {
            if last.elapsed() > *max {
                bad.push(format!("{name} silent for {}s", last.elapsed().as_secs()));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_synced_and_no_list_fails() {
        let h = Health::default();
        assert_eq!(h.readiness(), Err("caches not yet synced".into()));
        h.set_ready();
        assert_eq!(h.readiness(), Ok(()));
        h.list_failed("list/deployments/b");
        assert_eq!(h.readiness(), Err("cannot list: list/deployments/b".into()));
        h.list_ok("list/deployments/b");
        assert_eq!(h.readiness(), Ok(()));
    }

    #[test]
    fn silent_or_dead_loops_are_unhealthy() {
        let h = Health::default();
        h.register("worker", Duration::from_secs(60));
        assert!(h.check().is_ok());
        h.register("watch", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.check().unwrap_err().contains("watch silent"));
        h.register("watch", Duration::from_secs(60));
        h.died("worker");
        assert!(h.check().unwrap_err().contains("worker stopped"));
    }
}
