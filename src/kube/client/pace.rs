//! Pacing: the client-side token bucket (`--qps`, `--burst`) and the
//! server's Retry-After, one pace shared by every caller.

use super::Client;
use crate::backoff;
use crate::kube::error::{Error, Result};
use crate::lock::lock;
use std::time::Instant;

impl Client {
    /// Wait for a token of the client-side rate limit, if there is one.
    pub(super) fn take_token(&self) {
        if let Some(b) = &self.bucket {
            let wait = lock(b).take(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    /// Fail fast while the server's Retry-After runs.
    pub(super) fn check_pace(&self) -> Result<()> {
        let mut paced = lock(&self.paced_until);
        match *paced {
            Some(t) if t > Instant::now() => Err(Error::Throttled {
                retry_after: t - Instant::now(),
            }),
            Some(_) => {
                *paced = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A 429 with Retry-After sets the pace for every caller (capped).
    pub(super) fn note_pace(&self, err: &Error) {
        if let (Some(429), Some(ra)) = (err.code(), err.retry_after()) {
            let until = Instant::now() + ra.min(backoff::RETRY_AFTER_CAP);
            let mut paced = lock(&self.paced_until);
            if paced.is_none_or(|t| t < until) {
                *paced = Some(until);
            }
        }
    }
}
