//! The work queue, after client-go's: a key is handled by one worker at a
//! time, pending keys are deduplicated, a key added while it is being
//! handled is handled again afterwards, and failures back off per key.
//! Keys a periodic resync queues wait in a lane of their own, served after
//! every key a change queued (as controller-runtime's priority queue puts
//! resyncs last): one change need not wait behind a resync of every
//! resource (docs/performance.md, change→patch).

use crate::backoff::Backoff;
use crate::lock::lock;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The queue's state. Invariants: a key is in at most one of `queued` and
/// `processing`; `queue` holds exactly the keys of `queued` not in
/// `resynced`, in order; `resyncs` holds every key of `resynced` (and
/// perhaps stale entries of keys since moved to `queue`, or handed out);
/// `again` ⊆ `processing`; `waiting` has one entry per key with a retry
/// scheduled, and `delayed` holds that entry (and perhaps stale ones).
struct Inner<K> {
    /// Keys ready to be processed, first in first out.
    queue: VecDeque<K>,
    queued: HashSet<K>,
    /// Keys only a resync queued, served when `queue` is empty.
    resyncs: VecDeque<K>,
    resynced: HashSet<K>,
    /// Keys a worker holds: never handed to a second worker.
    processing: HashSet<K>,
    /// Keys added while a worker held them: queued again on `done`, so the
    /// change that came meanwhile is not lost.
    again: HashSet<K>,
    /// Entries due later, earliest first; an entry whose time is not the
    /// key's in `waiting` is stale (replaced by an earlier one) and skipped.
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    /// At most one waiting retry per key: when it is due (client-go's
    /// delaying queue keeps one entry per key, the earliest).
    waiting: HashMap<K, Instant>,
    /// Orders `delayed` entries of the same instant.
    seq: u64,
    /// Consecutive failures per key: the backoff step of its next retry.
    failures: HashMap<K, u32>,
    shutting_down: bool,
    /// Threads inside [`WorkQueue::get`]: who will take a key at once.
    getters: usize,
}

/// The room a drained queue keeps in each table: a burst (a cold start, a
/// resync, an outage's retries) grows them to its size, and what it left
/// would otherwise stay for as long as the process lives (docs/performance.md,
/// memory per resource).
const KEPT_ROOM: usize = 256;

impl<K: Eq + Hash> Inner<K> {
    /// Give back what a burst left in the tables that are empty now.
    fn shrink_empty(&mut self) {
        if self.queued.is_empty() {
            self.queue.shrink_to(KEPT_ROOM);
            self.queued.shrink_to(KEPT_ROOM);
            self.resyncs.shrink_to(KEPT_ROOM);
            self.resynced.shrink_to(KEPT_ROOM);
        }
        if self.failures.is_empty() {
            self.failures.shrink_to(KEPT_ROOM);
        }
        if self.waiting.is_empty() {
            // Every entry left in `delayed` is stale (see the invariants).
            self.delayed.clear();
            self.delayed.shrink_to(KEPT_ROOM);
            self.waiting.shrink_to(KEPT_ROOM);
        }
    }
}

/// Called when a key becomes ready and more keys are ready than threads
/// wait for them.
pub type OnShort = Box<dyn Fn() + Send + Sync>;

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    ready: Condvar,
    backoff: Backoff,
    /// What "now" is: the system's monotonic clock, or a test's.
    clock: Arc<dyn Clock>,
    /// How a pool of workers hears that it is short of hands.
    on_short: OnceLock<OnShort>,
}

/// A source of the current instant, so tests can move time by hand.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The monotonic system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    pub fn new(backoff: Backoff) -> WorkQueue<K> {
        WorkQueue::with_clock(backoff, Arc::new(SystemClock))
    }

    pub fn with_clock(backoff: Backoff, clock: Arc<dyn Clock>) -> WorkQueue<K> {
        WorkQueue {
            clock,
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                resyncs: VecDeque::new(),
                resynced: HashSet::new(),
                processing: HashSet::new(),
                again: HashSet::new(),
                delayed: BinaryHeap::new(),
                seq: 0,
                waiting: HashMap::new(),
                failures: HashMap::new(),
                shutting_down: false,
                getters: 0,
            }),
            ready: Condvar::new(),
            backoff,
            on_short: OnceLock::new(),
        }
    }

    /// Call `f` whenever a key becomes ready that no waiting thread will
    /// take at once (set once; later calls are ignored).
    pub fn on_short(&self, f: OnShort) {
        let _ = self.on_short.set(f);
    }

    /// A key became ready: wake one getter, and say so if none is left for
    /// it. The guard is released before the callback runs.
    fn readied(&self, inner: MutexGuard<'_, Inner<K>>) {
        let short = inner.queued.len() > inner.getters;
        drop(inner);
        self.ready.notify_one();
        if let Some(f) = self.on_short.get().filter(|_| short) {
            f();
        }
    }

    fn enqueue(inner: &mut Inner<K>, k: K) -> bool {
        if inner.shutting_down {
            return false;
        }
        if inner.processing.contains(&k) {
            inner.again.insert(k);
            return false;
        }
        if inner.queued.insert(k.clone()) {
            inner.queue.push_back(k);
            return true;
        }
        // Queued by a resync: a change moves it to the front lane (its
        // entry there goes stale).
        if inner.resynced.remove(&k) {
            inner.queue.push_back(k);
        }
        false
    }

    pub fn add(&self, k: K) {
        let mut inner = lock(&self.inner);
        if Self::enqueue(&mut inner, k) {
            self.readied(inner);
        }
    }

    /// A periodic resync: a key waiting out a failure's backoff keeps
    /// waiting (its retry is already scheduled, and its backoff does not
    /// advance); any other key is queued in the resync lane, behind every
    /// change.
    pub fn resync(&self, k: K) {
        let mut inner = lock(&self.inner);
        if inner.waiting.contains_key(&k) || inner.shutting_down {
            return;
        }
        if inner.processing.contains(&k) {
            inner.again.insert(k);
            return;
        }
        if inner.queued.insert(k.clone()) {
            inner.resynced.insert(k.clone());
            inner.resyncs.push_back(k);
            self.readied(inner);
        }
    }

    /// The next key of either lane: a change's first.
    fn next(inner: &mut Inner<K>) -> Option<K> {
        if let Some(k) = inner.queue.pop_front() {
            return Some(k);
        }
        while let Some(k) = inner.resyncs.pop_front() {
            if inner.resynced.remove(&k) {
                return Some(k);
            }
        }
        None
    }

    /// Add `k` once `d` has passed; if it already waits, the earlier time wins.
    /// Returns how long it will really wait.
    pub fn add_after(&self, k: K, d: Duration) -> Duration {
        let mut inner = lock(&self.inner);
        let now = self.clock.now();
        if inner.shutting_down {
            return d;
        }
        let at = now + d;
        if let Some(&earlier) = inner.waiting.get(&k).filter(|e| **e <= at) {
            return earlier.saturating_duration_since(now);
        }
        inner.waiting.insert(k.clone(), at);
        inner.seq += 1;
        let seq = inner.seq;
        inner.delayed.push(Reverse((at, seq, k)));
        self.ready.notify_one();
        d
    }

    /// A failure: retry `k` after its next backoff step (client-go's
    /// `AddRateLimited`), returning the delay that will really be used.
    pub fn add_rate_limited(&self, k: K, retry_after: Option<Duration>) -> Duration {
        let attempt = {
            let mut inner = lock(&self.inner);
            let n = inner.failures.entry(k.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let d = self.backoff.delay_after(attempt, retry_after);
        self.add_after(k, d)
    }

    /// Success: the key's backoff starts over.
    pub fn forget(&self, k: &K) {
        lock(&self.inner).failures.remove(k);
    }

    /// The next key ready to be processed, waiting up to `timeout` for one
    /// (a delayed key becomes ready when the clock passes its time).
    pub fn get(&self, timeout: Duration) -> Option<K> {
        let mut inner = lock(&self.inner);
        inner.getters += 1;
        let got = self.take(inner, timeout);
        lock(&self.inner).getters -= 1;
        got
    }

    /// [`WorkQueue::get`] once counted among the getters.
    fn take(&self, mut inner: MutexGuard<'_, Inner<K>>, timeout: Duration) -> Option<K> {
        let deadline = self.clock.now() + timeout;
        loop {
            if inner.shutting_down {
                return None;
            }
            let now = self.clock.now();
            while let Some(Reverse((at, _, _))) = inner.delayed.peek() {
                if *at > now {
                    break;
                }
                if let Some(Reverse((at, _, k))) = inner.delayed.pop() {
                    if inner.waiting.get(&k) == Some(&at) {
                        inner.waiting.remove(&k);
                        Self::enqueue(&mut inner, k);
                    }
                }
            }
            if let Some(k) = Self::next(&mut inner) {
                inner.queued.remove(&k);
                inner.processing.insert(k.clone());
                return Some(k);
            }
            inner.shrink_empty();
            if now >= deadline {
                return None;
            }
            let mut wait = deadline - now;
            if let Some(Reverse((at, _, _))) = inner.delayed.peek() {
                wait = wait.min(at.saturating_duration_since(now));
            }
            inner = self
                .ready
                .wait_timeout(inner, wait.max(Duration::from_millis(1)))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// The worker is finished with `k`.
    pub fn done(&self, k: &K) {
        let mut inner = lock(&self.inner);
        inner.processing.remove(k);
        if inner.again.remove(k) && Self::enqueue(&mut inner, k.clone()) {
            // The worker that calls this is about to take it or another:
            // no reason to start one more.
            drop(inner);
            self.ready.notify_one();
        }
    }

    /// Keys ready to be processed (client-go's `workqueue_depth`).
    pub fn len(&self) -> usize {
        lock(&self.inner).queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys ready that no thread waiting in [`WorkQueue::get`] will take.
    pub fn unserved(&self) -> usize {
        let inner = lock(&self.inner);
        inner.queued.len().saturating_sub(inner.getters)
    }

    pub fn is_shut_down(&self) -> bool {
        lock(&self.inner).shutting_down
    }

    /// Keys waiting out a backoff, one per key.
    pub fn waiting(&self) -> usize {
        lock(&self.inner).waiting.len()
    }

    /// Stop handing out work; workers finish what they hold.
    pub fn shutdown(&self) {
        lock(&self.inner).shutting_down = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that moves only when told to.
    struct ManualClock(Mutex<Instant>);

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            *lock(&self.0)
        }
    }

    impl ManualClock {
        fn advance(&self, d: Duration) {
            *lock(&self.0) += d;
        }
    }

    fn q() -> (WorkQueue<String>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock(Mutex::new(Instant::now())));
        let backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(200));
        (WorkQueue::with_clock(backoff, clock.clone()), clock)
    }

    #[test]
    fn dedups_pending_keys() {
        let (q, _) = q();
        q.add("a".into());
        q.add("a".into());
        q.add("b".into());
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("b"));
        assert_eq!(q.get(Duration::ZERO), None);
    }

    #[test]
    fn one_worker_per_key_and_re_adds_are_not_lost() {
        let (q, _) = q();
        q.add("a".into());
        let k = q.get(Duration::ZERO).unwrap();
        q.add("a".into());
        // Held by a worker: not handed to another.
        assert_eq!(q.get(Duration::ZERO), None);
        q.done(&k);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
    }

    #[test]
    fn retries_back_off_per_key_and_honour_retry_after() {
        let (q, clock) = q();
        // Each failure follows the retry of the one before (the key is
        // taken, fails, and is put back), as in the workers.
        let fail = |q: &WorkQueue<String>| {
            let d = q.add_rate_limited("a".into(), None);
            assert_eq!(q.get(Duration::ZERO), None, "not before its time");
            clock.advance(d);
            assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
            q.done(&"a".to_string());
            d
        };
        let d1 = fail(&q);
        let d2 = fail(&q);
        let d3 = fail(&q);
        assert!(
            d1 <= Duration::from_millis(20) && d3 >= Duration::from_millis(40),
            "{d1:?} {d2:?} {d3:?}"
        );
        q.forget(&"a".to_string());
        assert!(q.add_rate_limited("a".into(), None) <= Duration::from_millis(20));
        let b = q.add_rate_limited("b".into(), Some(Duration::from_secs(3)));
        assert!(b >= Duration::from_secs(3));
        clock.advance(Duration::from_millis(20));
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
        assert_eq!(q.get(Duration::ZERO), None, "b honours Retry-After");
        clock.advance(b);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("b"));
    }

    /// One waiting entry per key, the earliest; a resync leaves a waiting
    /// key alone (docs/contract.md §6.16 item 7); depth counts only keys
    /// ready to be processed.
    #[test]
    fn one_waiting_retry_per_key_and_resyncs_leave_it_alone() {
        let (q, clock) = q();
        let k = "a".to_string();
        assert_eq!(
            q.add_after(k.clone(), Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        let sooner = q.add_after(k.clone(), Duration::from_millis(30));
        assert_eq!(sooner, Duration::from_millis(30));
        let later = q.add_after(k.clone(), Duration::from_secs(90));
        assert_eq!(later, Duration::from_millis(30), "the earlier time wins");
        assert_eq!((q.len(), q.waiting()), (0, 1));
        q.resync(k.clone());
        assert_eq!(q.len(), 0, "a resync does not cut a backoff short");
        q.resync("b".into());
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("b"));
        clock.advance(Duration::from_millis(30));
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
        assert_eq!(q.waiting(), 0);
        // The stale 60 s and 90 s entries fire nothing.
        q.done(&k);
        clock.advance(Duration::from_secs(120));
        assert_eq!(q.get(Duration::ZERO), None);
    }

    /// A change is handed out before the keys a resync queued, and a key a
    /// resync queued that a change then adds goes first, once.
    #[test]
    fn a_change_goes_before_the_resyncs() {
        let (q, _) = q();
        for k in ["a", "b", "c"] {
            q.resync(k.into());
        }
        q.add("d".into());
        q.add("b".into());
        assert_eq!(q.len(), 4);
        let order: Vec<String> = std::iter::from_fn(|| q.get(Duration::ZERO)).collect();
        assert_eq!(order, ["d", "b", "a", "c"]);
        for k in &order {
            q.done(k);
        }
        assert_eq!((q.len(), q.get(Duration::ZERO)), (0, None));
        // A resync of a key a worker holds is not lost: it comes again.
        q.resync("a".into());
        let a = q.get(Duration::ZERO).unwrap();
        q.resync(a.clone());
        q.done(&a);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
    }

    /// A burst of 5,000 keys, handled: the tables it grew give their room
    /// back once the queue is drained, in both lanes and in the failures.
    #[test]
    fn a_drained_queue_gives_back_the_room_of_a_burst() {
        let (q, clock) = q();
        for i in 0..5000 {
            q.add(format!("k{i}"));
            q.resync(format!("r{i}"));
        }
        while let Some(k) = q.get(Duration::ZERO) {
            q.add_rate_limited(k.clone(), None);
            q.done(&k);
        }
        assert_eq!(q.waiting(), 10_000);
        clock.advance(Duration::from_secs(1));
        while let Some(k) = q.get(Duration::ZERO) {
            q.forget(&k);
            q.done(&k);
        }
        let inner = lock(&q.inner);
        let rooms = [
            inner.delayed.capacity(),
            inner.waiting.capacity(),
            inner.queue.capacity(),
            inner.queued.capacity(),
            inner.resyncs.capacity(),
            inner.resynced.capacity(),
            inner.failures.capacity(),
        ];
        assert!(rooms.iter().all(|r| *r <= 2 * KEPT_ROOM), "{rooms:?}");
    }

    #[test]
    fn shutdown_releases_waiters() {
        let q = Arc::new(WorkQueue::<String>::new(Backoff::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        )));
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.get(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        q.shutdown();
        assert_eq!(t.join().unwrap(), None);
        q.add("x".into());
        assert!(q.is_empty());
    }
}
