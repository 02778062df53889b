//! Every transition on made-up instants: no socket, no sleep.

use super::*;
use crate::backoff::Backoff;

const P: Policy = Policy {
    backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(10)),
    short: Duration::from_secs(1),
    healthy: Duration::from_secs(30),
};

/// Instants `ms` milliseconds after one fixed start.
struct FakeClock(Instant);

impl FakeClock {
    fn new() -> FakeClock {
        FakeClock(Instant::now())
    }
    fn at(&self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
}

fn ended(end: WatchEnd, rv: &str) -> WatchResult {
    WatchResult::WatchEnded {
        end,
        resource_version: rv.into(),
    }
}

fn watching(rv: &str, opened: Instant) -> WatchState {
    WatchState::Watching {
        resource_version: rv.into(),
        opened,
    }
}

/// A watcher that has listed at `rv` and opened its watch at `t(0)`.
fn listed(t: &FakeClock, rv: &str) -> Watcher {
    let mut w = Watcher::new(P);
    assert_eq!(w.state(), &WatchState::Listing);
    assert_eq!(
        w.step(WatchResult::Listed(rv.into()), t.at(0)),
        WatchStep::Watch(rv.into())
    );
    assert_eq!(w.state(), &watching(rv, t.at(0)));
    w
}

#[test]
fn a_watch_that_worked_resumes_at_once_from_its_last_resource_version() {
    let t = FakeClock::new();
    let mut w = listed(&t, "5");
    let next = w.step(ended(WatchEnd::Closed, "9"), t.at(30_000));
    assert_eq!(next, WatchStep::Watch("9".into()));
    assert_eq!(w.state(), &watching("9", t.at(30_000)), "opened anew");
    assert_eq!(w.failures(), 0);
}

#[test]
fn an_expired_watch_lists_again() {
    let t = FakeClock::new();
    let mut w = listed(&t, "5");
    assert_eq!(
        w.step(ended(WatchEnd::Expired, "7"), t.at(5_000)),
        WatchStep::List
    );
    assert_eq!(w.state(), &WatchState::Listing);
    assert_eq!(
        w.step(WatchResult::Listed("12".into()), t.at(5_100)),
        WatchStep::Watch("12".into())
    );
}

/// A watch shorter than `short` did not work, however it ended: it waits,
/// then goes where it would have gone at once.
#[test]
fn a_short_watch_backs_off_then_goes_on() {
    let t = FakeClock::new();
    let mut w = listed(&t, "5");
    let a = w.step(ended(WatchEnd::Closed, "6"), t.at(100));
    assert!(a.delay() >= Duration::from_millis(50), "{a:?}");
    let back_to_watch = WatchState::BackingOff {
        then: Resume::Watch("6".into()),
    };
    assert_eq!(w.state(), &back_to_watch);
    assert_eq!(
        w.step(WatchResult::Waited, t.at(400)),
        WatchStep::Watch("6".into())
    );
    assert_eq!(w.state(), &watching("6", t.at(400)));
    let a = w.step(ended(WatchEnd::Expired, "6"), t.at(500));
    assert!(a.delay() > Duration::ZERO);
    let back_to_list = WatchState::BackingOff { then: Resume::List };
    assert_eq!(w.state(), &back_to_list);
    assert_eq!(w.step(WatchResult::Waited, t.at(1_000)), WatchStep::List);
    assert_eq!(w.failures(), 2);
}

#[test]
fn garbage_backs_off_even_after_a_long_watch() {
    let t = FakeClock::new();
    let mut w = listed(&t, "5");
    let a = w.step(ended(WatchEnd::Broken, "8"), t.at(100_000));
    assert!(matches!(a, WatchStep::Wait(_)), "{a:?}");
    assert_eq!(
        w.step(WatchResult::Waited, t.at(100_500)),
        WatchStep::Watch("8".into())
    );
}

/// A watch that cannot be opened is tried again from the same
/// resourceVersion, never sooner than the server's Retry-After.
#[test]
fn a_refused_watch_retries_from_the_same_resource_version() {
    let t = FakeClock::new();
    let mut w = listed(&t, "5");
    let refused = WatchResult::WatchFailed {
        retry_after: Some(Duration::from_secs(3)),
    };
    let a = w.step(refused, t.at(10));
    assert!(a.delay() >= Duration::from_secs(3), "{a:?}");
    assert_eq!(
        w.step(WatchResult::Waited, t.at(3_010)),
        WatchStep::Watch("5".into())
    );
}

#[test]
fn list_failures_back_off_and_a_list_past_its_bounds_waits_longest() {
    let t = FakeClock::new();
    let mut w = Watcher::new(P);
    let failed = |retry_after| WatchResult::ListFailed {
        retry_after,
        too_big: false,
    };
    let first = w.step(failed(None), t.at(0));
    assert!(first.delay() <= Duration::from_millis(100), "{first:?}");
    assert_eq!(w.step(WatchResult::Waited, t.at(100)), WatchStep::List);
    let a = w.step(failed(Some(Duration::from_secs(2))), t.at(200));
    assert!(a.delay() >= Duration::from_secs(2));
    assert_eq!(w.step(WatchResult::Waited, t.at(2_200)), WatchStep::List);
    let too_big = WatchResult::ListFailed {
        retry_after: None,
        too_big: true,
    };
    assert!(w.step(too_big, t.at(2_300)).delay() >= Duration::from_secs(5));
    assert_eq!(w.failures(), 3);
}

/// A server that closes every watch at once, or answers 410 to every
/// one, is retried at a slowing pace: every round waits, up to the cap.
#[test]
fn a_server_that_ends_every_watch_at_once_is_never_retried_hot() {
    let t = FakeClock::new();
    let mut w = listed(&t, "1");
    let mut now = 0;
    let mut last = Duration::ZERO;
    for i in 0..12 {
        now += 10;
        let how = [WatchEnd::Closed, WatchEnd::Expired][i % 2];
        let a = w.step(ended(how, "1"), t.at(now));
        assert!(a.delay() >= Duration::from_millis(50), "round {i}: {a:?}");
        assert!(a.delay() <= Duration::from_secs(10));
        last = a.delay();
        now += last.as_millis() as u64;
        if w.step(WatchResult::Waited, t.at(now)) == WatchStep::List {
            assert_eq!(
                w.step(WatchResult::Listed("1".into()), t.at(now)),
                WatchStep::Watch("1".into())
            );
        }
    }
    assert!(last >= Duration::from_secs(5), "{last:?}");
    assert_eq!(w.failures(), 12);
}

/// Only a watch that stays open `healthy` forgets the failures; a good
/// list or a brief good watch does not.
#[test]
fn only_a_watch_that_stays_open_resets_the_failures() {
    let t = FakeClock::new();
    let mut w = Watcher::new(P);
    for _ in 0..3 {
        let failed = WatchResult::ListFailed {
            retry_after: None,
            too_big: false,
        };
        w.step(failed, t.at(0));
        assert_eq!(w.step(WatchResult::Waited, t.at(0)), WatchStep::List);
    }
    w.step(WatchResult::Listed("4".into()), t.at(0));
    assert_eq!(
        w.step(ended(WatchEnd::Closed, "5"), t.at(3_000)),
        WatchStep::Watch("5".into())
    );
    assert_eq!(w.failures(), 3);
    assert_eq!(
        w.step(ended(WatchEnd::Closed, "6"), t.at(33_000)),
        WatchStep::Watch("6".into())
    );
    assert_eq!(w.failures(), 0);
}

/// An outcome the state did not ask for goes back to a list, backed off.
#[test]
fn an_outcome_out_of_turn_starts_over_from_a_list() {
    let t = FakeClock::new();
    let mut w = Watcher::new(P);
    let a = w.step(ended(WatchEnd::Closed, "3"), t.at(0));
    assert!(matches!(a, WatchStep::Wait(_)), "{a:?}");
    assert_eq!(w.step(WatchResult::Waited, t.at(200)), WatchStep::List);
    let mut w = listed(&t, "5");
    assert!(matches!(
        w.step(WatchResult::Listed("6".into()), t.at(10)),
        WatchStep::Wait(_)
    ));
    assert_eq!(w.state(), &WatchState::BackingOff { then: Resume::List });
}
