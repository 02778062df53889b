//! When a list/watch loop tries again: at once after a watch that worked,
//! with growing jittered delays after one that did not. Pure (durations in,
//! delays out) so the rules are tested without sockets or clocks; the
//! [`super::watcher`] machine measures the durations on the instants it is
//! given.
//!
//! The rules, as client-go's Reflector has them, tightened against a broken
//! or hostile server:
//! - A watch that ends, cleanly or cut mid-stream (a load balancer's idle
//!   timeout, a reset, our read limit), after it stayed open at least
//!   [`Policy::short`] is reopened at once from its last resourceVersion.
//!   client-go's `StreamWatcher` treats EOF as a normal close the same way.
//! - A watch that ends sooner, however it ends and whatever it delivered,
//!   counts as a failure: "very short watch" in client-go. So a server that
//!   closes every watch at once, or answers 410 to every watch, is retried at
//!   a slowing pace, not in a hot loop; one good event changes nothing.
//! - Failures (a list or watch refused, garbage, a short watch) back off
//!   exponentially with jitter, and never sooner than the server's
//!   `Retry-After` (capped at [`crate::backoff::RETRY_AFTER_CAP`]).
//! - The count of failures resets only once a watch has stayed open for
//!   [`Policy::healthy`]: not on one event, not on one good list.

use crate::backoff::Backoff;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub backoff: Backoff,
    /// A watch open for less than this did not work.
    pub short: Duration,
    /// A watch open for this long proves the server healthy again.
    pub healthy: Duration,
}

impl Policy {
    /// The cap is 10 s where client-go has 30 s: a watch loop is blind
    /// while it waits, and with the longer cap a short outage (a pause,
    /// then a few 500s) left it waiting far longer than the outage lasted
    /// before it saw a delete (see docs/performance.md). Ten seconds keeps
    /// the load of a broken server at a few requests a minute per loop.
    pub const DEFAULT: Policy = Policy {
        backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
        short: Duration::from_secs(1),
        healthy: Duration::from_secs(10),
    };
}

/// How a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEnd {
    /// The server closed it, or the connection was cut or went idle: resume
    /// from the last resourceVersion.
    Closed,
    /// 410 Gone, in the answer or in the stream: list again.
    Expired,
    /// The server sent something we cannot use (garbage, an error event).
    Broken,
}

/// One loop's memory of how its recent attempts went.
#[derive(Debug, Clone)]
pub struct Reconnect {
    policy: Policy,
    failures: u32,
}

impl Reconnect {
    pub fn new(policy: Policy) -> Reconnect {
        Reconnect {
            policy,
            failures: 0,
        }
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A list or watch request failed: the delay before the next attempt.
    pub fn failed(&mut self, retry_after: Option<Duration>) -> Duration {
        let d = self.policy.backoff.delay_after(self.failures, retry_after);
        self.failures = self.failures.saturating_add(1);
        d
    }

    /// The server answered a list with more than we hold (past the page or
    /// item bounds): it will again soon, so wait the longest delay rather
    /// than page through it all again within a second.
    pub fn gave_up(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.policy.backoff.delay(u32::MAX)
    }

    /// A watch that had been open for `lasted` ended: the delay before the
    /// next attempt (a watch, or a list after `Expired`).
    pub fn watch_ended(&mut self, lasted: Duration, how: WatchEnd) -> Duration {
        if lasted >= self.policy.healthy {
            self.failures = 0;
        }
        if how == WatchEnd::Broken || lasted < self.policy.short {
            return self.failed(None);
        }
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Policy = Policy {
        backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(10)),
        short: Duration::from_secs(1),
        healthy: Duration::from_secs(30),
    };
    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_watch_that_worked_is_reopened_at_once_however_it_ended() {
        let mut r = Reconnect::new(P);
        for lasted in [SEC, 3 * SEC, 35 * SEC, 300 * SEC] {
            for how in [WatchEnd::Closed, WatchEnd::Expired] {
                assert_eq!(r.watch_ended(lasted, how), Duration::ZERO);
            }
        }
        assert_eq!(r.failures(), 0);
    }

    #[test]
    fn short_watches_back_off_and_grow_to_the_cap() {
        let mut r = Reconnect::new(P);
        let mut last = Duration::ZERO;
        for i in 0..12 {
            let how = [WatchEnd::Closed, WatchEnd::Expired][i % 2];
            let d = r.watch_ended(Duration::from_millis(50), how);
            assert!(d >= Duration::from_millis(50), "attempt {i}: {d:?}");
            assert!(d <= Duration::from_secs(10));
            last = d;
        }
        assert!(last >= Duration::from_secs(5), "{last:?}");
        assert_eq!(r.failures(), 12);
    }

    #[test]
    fn a_list_past_its_bounds_waits_the_longest_delay() {
        let mut r = Reconnect::new(P);
        for _ in 0..5 {
            assert!(r.gave_up() >= 5 * SEC);
        }
        assert_eq!(r.failures(), 5);
    }

    #[test]
    fn only_a_watch_that_stays_open_resets_the_count() {
        let mut r = Reconnect::new(P);
        for _ in 0..6 {
            r.failed(None);
        }
        // Good but brief watches (an idle-cut proxy) neither grow nor reset it.
        for _ in 0..5 {
            assert_eq!(r.watch_ended(3 * SEC, WatchEnd::Closed), Duration::ZERO);
        }
        assert_eq!(r.failures(), 6);
        assert!(r.watch_ended(Duration::ZERO, WatchEnd::Closed) >= Duration::from_millis(3200));
        assert_eq!(r.watch_ended(30 * SEC, WatchEnd::Closed), Duration::ZERO);
        assert_eq!(r.failures(), 0);
    }

    #[test]
    fn garbage_backs_off_even_after_a_long_watch() {
        let mut r = Reconnect::new(P);
        assert!(r.watch_ended(100 * SEC, WatchEnd::Broken) >= Duration::from_millis(50));
        assert_eq!(r.failures(), 1);
    }

    #[test]
    fn retry_after_is_a_floor_up_to_the_cap() {
        let mut r = Reconnect::new(P);
        assert!(r.failed(Some(3 * SEC)) >= 3 * SEC);
        assert_eq!(r.failed(Some(3600 * SEC)), 60 * SEC);
    }
}
