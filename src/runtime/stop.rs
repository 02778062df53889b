//! One stop token for every loop: a flag that, once set, stays set, and
//! that a waiter sleeps on instead of polling, so a stop wakes every loop at
//! once (the reflectors' backoffs, the lease loop's retry wait, the
//! controller's waits) however long it meant to wait.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    woken: Condvar,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Set the flag and wake every waiter. Idempotent.
    pub fn stop(&self) {
        *self.flag() = true;
        self.woken.notify_all();
    }

    pub fn is_stopped(&self) -> bool {
        *self.flag()
    }

    /// Sleep up to `timeout`, returning at once when stopped. Whether it
    /// is stopped (a loop's "give up now").
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut stopped = self.flag();
        while !*stopped {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                break;
            }
            stopped = self
                .woken
                .wait_timeout(stopped, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *stopped
    }

    fn flag(&self) -> std::sync::MutexGuard<'_, bool> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_runs_its_course_unless_stopped() {
        let s = Stop::new();
        let t = Instant::now();
        assert!(!s.wait(Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert!(!s.wait(Duration::ZERO));
        s.stop();
        s.stop();
        assert!(s.is_stopped());
        let t = Instant::now();
        assert!(s.wait(Duration::from_secs(60)), "stopped: no wait at all");
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    /// Every waiter wakes at once, however long it meant to sleep.
    #[test]
    fn a_stop_wakes_every_waiter_at_once() {
        let s = std::sync::Arc::new(Stop::new());
        let waiters: Vec<_> = (0..4)
            .map(|i| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let t = Instant::now();
                    let stopped = s.wait(Duration::from_secs(60 * (i + 1)));
                    (stopped, t.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        s.stop();
        for w in waiters {
            let (stopped, took) = w.join().unwrap();
            assert!(stopped);
            assert!(took < Duration::from_secs(5), "{took:?}");
        }
    }
}
