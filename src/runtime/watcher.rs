//! The list/watch loop as a state machine: what happened (a [`WatchResult`])
//! and the state it happened in give the next state and the next thing to
//! do (an [`WatchStep`]). No sockets and no clock: the driver
//! ([`super::reflector`]) makes the requests and passes the instant each
//! outcome arrived, so every transition is tested on made-up instants.
//!
//! ```text
//!   Listing ──Listed(rv)──────────────────────▶ Watching(rv)
//!   Listing ──ListFailed──────────────────────▶ BackingOff → Listing
//!   Watching ─WatchEnded(Closed), worked──────▶ Watching(last rv)
//!   Watching ─WatchEnded(Expired), worked─────▶ Listing
//!   Watching ─WatchEnded, short or Broken─────▶ BackingOff → Watching / Listing
//!   Watching ─WatchFailed─────────────────────▶ BackingOff → Watching(same rv)
//!   BackingOff ─Waited────────────────────────▶ what it was backing off to
//! ```
//!
//! When to try again is [`Reconnect`]'s to say (client-go's Reflector
//! rules); this machine only threads its delays between the states.
//! Paging through a list stays in the client (`Client::list_all`): it holds
//! the one-list-at-a-time gate and the list bounds for the whole list.

use super::reconnect::{Policy, Reconnect, WatchEnd};
use std::time::{Duration, Instant};

/// Where the loop is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchState {
    /// A full list is under way: the first one, or after a 410.
    Listing,
    /// A watch from `resource_version`, opened at `opened`.
    Watching {
        resource_version: String,
        opened: Instant,
    },
    /// Waiting out a delay, then on to `then`.
    BackingOff { then: Resume },
}

/// Where a backoff leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    List,
    Watch(String),
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchStep {
    /// List everything and make it the store's whole truth.
    List,
    /// Open a watch from this resourceVersion and apply its events.
    Watch(String),
    /// Wait this long (a stop cuts it short), then report [`WatchResult::Waited`].
    Wait(Duration),
}

impl WatchStep {
    /// How long this action waits before the next request (zero for one).
    pub fn delay(&self) -> Duration {
        match self {
            WatchStep::Wait(d) => *d,
            _ => Duration::ZERO,
        }
    }
}

/// What the last action came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchResult {
    /// The list is in the store, at this resourceVersion.
    Listed(String),
    /// The list failed; `too_big`: it went past the client's bounds.
    ListFailed {
        retry_after: Option<Duration>,
        too_big: bool,
    },
    /// The watch could not be opened (any answer but 410).
    WatchFailed { retry_after: Option<Duration> },
    /// The watch ended, or its opening answered 410 (`Expired`); the last
    /// resourceVersion it delivered.
    WatchEnded {
        end: WatchEnd,
        resource_version: String,
    },
    /// A [`WatchStep::Wait`] ran its course.
    Waited,
}

/// One loop's state and its memory of recent failures.
#[derive(Debug, Clone)]
pub struct Watcher {
    state: WatchState,
    reconnect: Reconnect,
}

impl Watcher {
    /// A loop about to make its first list ([`WatchStep::List`]).
    pub fn new(policy: Policy) -> Watcher {
        Watcher {
            state: WatchState::Listing,
            reconnect: Reconnect::new(policy),
        }
    }

    pub fn state(&self) -> &WatchState {
        &self.state
    }

    /// Consecutive failures so far (for `/readyz`).
    pub fn failures(&self) -> u32 {
        self.reconnect.failures()
    }

    /// The transition: `outcome`, arrived at `now`, moves the loop on;
    /// what to do next.
    pub fn step(&mut self, outcome: WatchResult, now: Instant) -> WatchStep {
        let state = std::mem::replace(&mut self.state, WatchState::Listing);
        let (next, action) = self.next(state, outcome, now);
        self.state = next;
        action
    }

    fn next(
        &mut self,
        state: WatchState,
        outcome: WatchResult,
        now: Instant,
    ) -> (WatchState, WatchStep) {
        let r = &mut self.reconnect;
        match (state, outcome) {
            (WatchState::Listing, WatchResult::Listed(rv)) => resume(Resume::Watch(rv), now),
            (WatchState::Listing, WatchResult::ListFailed { too_big: true, .. }) => {
                back_off(r.gave_up(), Resume::List, now)
            }
            (WatchState::Listing, WatchResult::ListFailed { retry_after, .. }) => {
                back_off(r.failed(retry_after), Resume::List, now)
            }
            (
                WatchState::Watching {
                    resource_version, ..
                },
                WatchResult::WatchFailed { retry_after },
            ) => {
                let delay = r.failed(retry_after);
                back_off(delay, Resume::Watch(resource_version), now)
            }
            (
                WatchState::Watching { opened, .. },
                WatchResult::WatchEnded {
                    end,
                    resource_version,
                },
            ) => {
                let delay = r.watch_ended(now.saturating_duration_since(opened), end);
                let then = match end {
                    WatchEnd::Expired => Resume::List,
                    WatchEnd::Closed | WatchEnd::Broken => Resume::Watch(resource_version),
                };
                back_off(delay, then, now)
            }
            (WatchState::BackingOff { then }, WatchResult::Waited) => resume(then, now),
            // An outcome the state did not ask for is the driver's mistake:
            // start over from a list, backed off like any failure.
            (_, _) => back_off(r.failed(None), Resume::List, now),
        }
    }
}

/// Wait `delay` first, unless it is zero.
fn back_off(delay: Duration, then: Resume, now: Instant) -> (WatchState, WatchStep) {
    if delay.is_zero() {
        return resume(then, now);
    }
    (WatchState::BackingOff { then }, WatchStep::Wait(delay))
}

fn resume(then: Resume, now: Instant) -> (WatchState, WatchStep) {
    match then {
        Resume::List => (WatchState::Listing, WatchStep::List),
        Resume::Watch(rv) => (
            WatchState::Watching {
                resource_version: rv.clone(),
                opened: now,
            },
            WatchStep::Watch(rv),
        ),
    }
}

#[cfg(test)]
mod tests;
