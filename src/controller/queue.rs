//! The work queue, after client-go's: a key is handled by one worker at a
//! time, pending keys are deduplicated, a key added while it is being
//! handled is handled again afterwards, and failures back off per key.

use crate::backoff::Backoff;
use crate::kube::endpoint::lock;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

struct Inner<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    processing: HashSet<K>,
    /// Added while processing: requeue on `done`.
    dirty: HashSet<K>,
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    seq: u64,
    failures: HashMap<K, u32>,
    /// Failing keys resyncs leave alone (see `hold`).
    held: HashSet<K>,
    shutting_down: bool,
}

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    ready: Condvar,
    backoff: Backoff,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    pub fn new(backoff: Backoff) -> WorkQueue<K> {
        WorkQueue {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                processing: HashSet::new(),
                dirty: HashSet::new(),
                delayed: BinaryHeap::new(),
                seq: 0,
                failures: HashMap::new(),
                held: HashSet::new(),
                shutting_down: false,
            }),
            ready: Condvar::new(),
            backoff,
        }
    }

    fn enqueue(inner: &mut Inner<K>, k: K) -> bool {
        if inner.shutting_down {
            return false;
        }
        if inner.processing.contains(&k) {
            inner.dirty.insert(k);
            return false;
        }
        if inner.queued.insert(k.clone()) {
            inner.queue.push_back(k);
            return true;
        }
        false
    }

    pub fn add(&self, k: K) {
        let mut inner = lock(&self.inner);
        if Self::enqueue(&mut inner, k) {
            self.ready.notify_one();
        }
    }

    /// A periodic resync. A key held back by [`WorkQueue::hold`] keeps
    /// waiting for its scheduled retry, so a write the API refuses every
    /// time is not retried on every resync; any other key is added.
    pub fn resync(&self, k: K) {
        let mut inner = lock(&self.inner);
        if inner.held.contains(&k) {
            return;
        }
        if Self::enqueue(&mut inner, k) {
            self.ready.notify_one();
        }
    }

    pub fn add_after(&self, k: K, d: Duration) {
        let mut inner = lock(&self.inner);
        if inner.shutting_down {
            return;
        }
        inner.seq += 1;
        let seq = inner.seq;
        inner.delayed.push(Reverse((Instant::now() + d, seq, k)));
        self.ready.notify_one();
    }

    /// Retry `k` after its next backoff step (honouring a server's
    /// Retry-After). Returns the delay chosen.
    pub fn retry(&self, k: K, retry_after: Option<Duration>) -> Duration {
        let attempt = {
            let mut inner = lock(&self.inner);
            let n = inner.failures.entry(k.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let d = self.backoff.delay_after(attempt, retry_after);
        self.add_after(k, d);
        d
    }

    /// `k` succeeded: its backoff starts over.
    /// Keep resyncs off `k` until it succeeds: its failure is one that
    /// only its own backoff (or a change to what it watches) should retry.
    pub fn hold(&self, k: K) {
        lock(&self.inner).held.insert(k);
    }

    pub fn forget(&self, k: &K) {
        let mut inner = lock(&self.inner);
        inner.failures.remove(k);
        inner.held.remove(k);
    }

    /// The next key to handle, waiting up to `timeout`. None on timeout or
    /// once shut down.
    pub fn get(&self, timeout: Duration) -> Option<K> {
        let deadline = Instant::now() + timeout;
        let mut inner = lock(&self.inner);
        loop {
            if inner.shutting_down {
                return None;
            }
            let now = Instant::now();
            while let Some(Reverse((at, _, _))) = inner.delayed.peek() {
                if *at > now {
                    break;
                }
                if let Some(Reverse((_, _, k))) = inner.delayed.pop() {
                    Self::enqueue(&mut inner, k);
                }
            }
            if let Some(k) = inner.queue.pop_front() {
                inner.queued.remove(&k);
                inner.processing.insert(k.clone());
                return Some(k);
            }
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
        if inner.dirty.remove(k) && Self::enqueue(&mut inner, k.clone()) {
            self.ready.notify_one();
        }
    }

    /// Keys waiting (now or later), for the queue-depth gauge.
    pub fn len(&self) -> usize {
        let inner = lock(&self.inner);
        inner.queue.len() + inner.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    fn q() -> WorkQueue<String> {
        WorkQueue::new(Backoff::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
    }

    #[test]
    fn dedups_pending_keys() {
        let q = q();
        q.add("a".into());
        q.add("a".into());
        q.add("b".into());
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("b"));
        assert_eq!(q.get(Duration::from_millis(5)), None);
    }

    #[test]
    fn one_worker_per_key_and_re_adds_are_not_lost() {
        let q = q();
        q.add("a".into());
        let k = q.get(Duration::ZERO).unwrap();
        q.add("a".into());
        // Held by a worker: not handed to another.
        assert_eq!(q.get(Duration::from_millis(5)), None);
        q.done(&k);
        assert_eq!(q.get(Duration::ZERO).as_deref(), Some("a"));
    }

    #[test]
    fn retries_back_off_per_key_and_honour_retry_after() {
        let q = q();
        let d1 = q.retry("a".into(), None);
        let d2 = q.retry("a".into(), None);
        let d3 = q.retry("a".into(), None);
        assert!(
            d1 <= Duration::from_millis(20) && d3 >= Duration::from_millis(40),
            "{d1:?} {d2:?} {d3:?}"
        );
        q.forget(&"a".to_string());
        assert!(q.retry("a".into(), None) <= Duration::from_millis(20));
        assert!(q.retry("b".into(), Some(Duration::from_secs(3))) >= Duration::from_secs(3));
        let t = Instant::now();
        assert_eq!(q.get(Duration::from_secs(1)).as_deref(), Some("a"));
        assert!(t.elapsed() >= Duration::from_millis(5));
    }

    #[test]
    fn shutdown_releases_waiters() {
        let q = std::sync::Arc::new(q());
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.get(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        q.shutdown();
        assert_eq!(t.join().unwrap(), None);
        q.add("x".into());
        assert!(q.is_empty());
    }
}
