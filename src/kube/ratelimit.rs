//! Client-side rate limiting with client-go's semantics (`--qps`,
//! `--burst`; `flowcontrol.NewTokenBucketRateLimiter`): a bucket of `burst`
//! tokens refilled at `qps` a second; each request, a retry or a watch
//! opening included, takes one, and waits for it when the bucket is empty.
//! A wait is a reservation, as golang.org/x/time/rate's `Wait` is: callers
//! queue up in order instead of racing for the next token. Pure (instants
//! in, waits out), so the rules are tested without sleeping.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Tokens a second; `None`: no client-side limit.
    pub qps: Option<f64>,
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: None,
            burst: 100,
        }
    }
}

#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    /// May go below zero: tokens already promised to waiting callers.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket, or None when there is no limit.
    pub fn new(limits: Limits, now: Instant) -> Option<Bucket> {
        let qps = limits.qps.filter(|q| *q > 0.0)?;
        let burst = f64::from(limits.burst.max(1));
        Some(Bucket {
            qps,
            burst,
            tokens: burst,
            at: now,
        })
    }

    /// Take a token at `now` if one is there; never waits nor reserves.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether the bucket is full at `now` (as a new one would be).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = now.max(self.at);
    }

    /// Take a token at `now`: how long to wait before using it.
    pub fn take(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_goes_at_once_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut b = Bucket::new(
            Limits {
                qps: Some(10.0),
                burst: 3,
            },
            t0,
        )
        .unwrap();
        for _ in 0..3 {
            assert_eq!(b.take(t0), Duration::ZERO);
        }
        // Reservations: the 4th waits 100 ms, the 5th 200 ms.
        assert_eq!(b.take(t0).as_millis(), 100);
        assert_eq!(b.take(t0).as_millis(), 200);
        // A second later the debt is paid and 5 tokens more are in, capped
        // at the burst.
        let later = t0 + 1000 * MS;
        for _ in 0..3 {
            assert_eq!(b.take(later), Duration::ZERO);
        }
        assert!(b.take(later) > Duration::ZERO);
    }

    #[test]
    fn trying_takes_only_what_is_there() {
        let t0 = Instant::now();
        let limits = Limits {
            qps: Some(5.0),
            burst: 2,
        };
        let mut b = Bucket::new(limits, t0).unwrap();
        assert!(b.try_take(t0) && b.try_take(t0));
        // Empty: refused, and no debt run up by the refusals.
        for _ in 0..100 {
            assert!(!b.try_take(t0));
        }
        assert!(b.try_take(t0 + 200 * MS));
        assert!(!b.try_take(t0 + 200 * MS));
    }

    #[test]
    fn a_steady_caller_gets_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(
            Limits {
                qps: Some(50.0),
                burst: 1,
            },
            t0,
        )
        .unwrap();
        let mut now = t0;
        for _ in 0..500 {
            now += b.take(now);
        }
        let secs = now.duration_since(t0).as_secs_f64();
        assert!(
            (9.9..=10.0).contains(&secs),
            "500 requests at 50 qps took {secs} s"
        );
    }

    #[test]
    fn no_qps_means_no_limit() {
        assert!(Bucket::new(Limits::default(), Instant::now()).is_none());
        assert!(Bucket::new(
            Limits {
                qps: Some(0.0),
                burst: 5
            },
            Instant::now()
        )
        .is_none());
    }
}
