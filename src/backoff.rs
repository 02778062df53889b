//! Jittered exponential backoff, shared by request retries, watch restarts
//! and the work queue so that every retry in the operator behaves alike.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The longest `Retry-After` honoured: a server (or a proxy) asking for
/// more is retried after this anyway.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff { base, cap }
    }

    /// The delay before retry number `attempt` (0-based): `base * 2^attempt`,
    /// capped, then jittered down by up to half so that many clients that
    /// failed together do not retry together.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << attempt.min(20));
        jitter(exp.min(self.cap))
    }

    /// The delay honouring a server's `Retry-After`: never shorter than what
    /// the server asked for.
    pub fn delay_after(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let d = self.delay(attempt);
        match retry_after {
            Some(ra) => d.max(ra.min(RETRY_AFTER_CAP)),
            None => d,
        }
    }
}

/// A uniformly random duration in `[d/2, d]`.
pub fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    let span = (d - half).as_nanos() as u64;
    if span == 0 {
        return d;
    }
    half + Duration::from_nanos(random_u64() % (span + 1))
}

/// A random number from the standard library's per-process hash keys; good
/// enough for jitter, and no extra crate.
pub fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps_with_jitter() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        for attempt in 0..12 {
            let full = Duration::from_millis(100)
                .saturating_mul(1 << attempt)
                .min(Duration::from_secs(5));
            for _ in 0..20 {
                let d = b.delay(attempt);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt}: {d:?} vs {full:?}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let b = Backoff::new(Duration::from_millis(10), Duration::from_millis(20));
        assert!(b.delay_after(0, Some(Duration::from_secs(2))) >= Duration::from_secs(2));
        assert!(b.delay_after(0, None) <= Duration::from_millis(20));
    }

    #[test]
    fn jitter_varies() {
        let d = Duration::from_secs(1);
        let samples: std::collections::HashSet<_> = (0..50).map(|_| jitter(d)).collect();
        assert!(samples.len() > 10);
    }
}
