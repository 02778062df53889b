//! The workers: threads that take keys from a [`WorkQueue`] and handle
//! them (client-go's `processNextWorkItem` loop), as many as the queue
//! needs up to a maximum. A burst of keys gets every worker at once, because
//! a pass waits on the API server's round trips far more than it computes
//! (docs/performance.md, "change → all Ready"); a worker that finds no work
//! for a while ends, so a quiet process keeps one thread, and the memory
//! and wakes of one.

use super::probes::Liveness;
use super::queue::WorkQueue;
use super::Stop;
use crate::lock::lock;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a worker waits for work before it gives its memory back.
const GIVE_BACK_AFTER: Duration = Duration::from_secs(1);
/// How long a worker other than the last waits for work before it ends;
/// the last waits as long again and again.
pub const RETIRE_AFTER: Duration = Duration::from_secs(30);

/// What a worker does with a key it took; the queue's `done` follows.
pub type Job<K> = Arc<dyn Fn(&K) + Send + Sync>;

/// What the workers run with.
pub struct WorkerSetup<K> {
    pub queue: Arc<WorkQueue<K>>,
    pub job: Job<K>,
    pub health: Arc<dyn Liveness>,
    pub stop: Arc<Stop>,
    /// A worker in one job longer than this is stuck (liveness).
    pub liveness_window: Duration,
    /// The most workers at once (at least one).
    pub max: usize,
    /// How long a worker other than the last waits for work before it ends.
    pub retire_after: Duration,
    /// Called by a worker about to wait long for work: the app gives back
    /// what the thread keeps for its next burst.
    pub on_long_wait: fn(),
}

/// What every worker shares.
struct WorkerShared<K> {
    queue: Arc<WorkQueue<K>>,
    job: Job<K>,
    health: Arc<dyn Liveness>,
    stop: Arc<Stop>,
    liveness_window: Duration,
    retire_after: Duration,
    on_long_wait: fn(),
    max: usize,
    slots: Mutex<Slots>,
    /// Signalled as each worker ends.
    ended: Condvar,
}

/// Which worker names are in use: a worker is `worker-{slot}`.
struct Slots {
    used: Vec<bool>,
    live: usize,
    /// Started but not yet waiting for keys: they will take keys waiting.
    starting: usize,
}

/// The pool of workers over one queue.
pub struct Workers<K> {
    shared: Arc<WorkerShared<K>>,
}

impl<K: Clone + Eq + Hash + Ord + Send + Sync + 'static> Workers<K> {
    /// Start the first worker; more start as keys wait that no worker is
    /// free to take.
    pub fn start(p: WorkerSetup<K>) -> std::io::Result<Workers<K>> {
        let max = p.max.max(1);
        let shared = Arc::new(WorkerShared {
            queue: p.queue,
            job: p.job,
            health: p.health,
            stop: p.stop,
            liveness_window: p.liveness_window,
            retire_after: p.retire_after,
            on_long_wait: p.on_long_wait,
            max,
            slots: Mutex::new(Slots {
                used: vec![false; max],
                live: 0,
                starting: 0,
            }),
            ended: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        shared.queue.on_short(Box::new(move || {
            if let Some(s) = weak.upgrade() {
                s.grow();
            }
        }));
        shared.spawn()?;
        shared.grow();
        Ok(Workers { shared })
    }

    /// Workers running now.
    pub fn live(&self) -> usize {
        lock(&self.shared.slots).live
    }

    /// Stop handing out work and wait up to `grace` for the jobs in
    /// flight. Whether every worker ended.
    pub fn shut_down(&self, grace: Duration) -> bool {
        self.shared.queue.shutdown();
        let deadline = Instant::now() + grace;
        let mut slots = lock(&self.shared.slots);
        while slots.live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            slots = self
                .shared
                .ended
                .wait_timeout(slots, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }
}

impl<K: Clone + Eq + Hash + Ord + Send + Sync + 'static> WorkerShared<K> {
    /// Start workers while keys wait that no worker will take at once, up
    /// to `max`.
    fn grow(self: &Arc<Self>) {
        loop {
            let unserved = self.queue.unserved();
            let slots = lock(&self.slots);
            if unserved <= slots.starting || slots.live >= self.max {
                return;
            }
            drop(slots);
            if let Err(e) = self.spawn() {
                log::warn!("cannot start a worker: {e}");
                return;
            }
        }
    }

    /// One more worker, in the first free slot (none free: nothing).
    fn spawn(self: &Arc<Self>) -> std::io::Result<()> {
        let slot = {
            let mut slots = lock(&self.slots);
            let Some(slot) = slots.used.iter().position(|u| !u) else {
                return Ok(());
            };
            slots.used[slot] = true;
            slots.live += 1;
            slots.starting += 1;
            slot
        };
        let name = format!("worker-{slot}");
        self.health.register(&name, self.liveness_window);
        let exit = Exit {
            shared: self.clone(),
            slot,
            name: name.clone(),
            released: false,
            ran: false,
        };
        let shared = self.clone();
        // A failed spawn drops `exit` with the closure: the slot is freed.
        std::thread::Builder::new()
            .name(name)
            .spawn(move || shared.work(exit))
            .map(drop)
    }

    /// Take keys until the queue shuts down or there is no work for this
    /// worker; `exit` reports the end, by return or by panic.
    fn work(&self, mut exit: Exit<K>) {
        lock(&self.slots).starting -= 1;
        exit.ran = true;
        loop {
            let Some(key) = self.next_key(&mut exit) else {
                return;
            };
            (self.job)(&key);
            self.queue.done(&key);
        }
    }

    /// The next key; None when this worker should end (the queue shut
    /// down, or it is not the last and found no work for a while). Waiting
    /// for work, a worker is alive however long it waits.
    fn next_key(&self, exit: &mut Exit<K>) -> Option<K> {
        self.health.idle(&exit.name, true);
        let key = self.wait_for_key(exit);
        self.health.idle(&exit.name, false);
        key
    }

    fn wait_for_key(&self, exit: &mut Exit<K>) -> Option<K> {
        if let Some(key) = self.queue.get(GIVE_BACK_AFTER) {
            return Some(key);
        }
        (self.on_long_wait)();
        loop {
            if self.stop.is_stopped() || self.queue.is_shut_down() {
                return None;
            }
            if let Some(key) = self.queue.get(self.retire_after) {
                return Some(key);
            }
            if self.retire(exit) {
                return None;
            }
        }
    }

    /// End this worker if it is not the last one: its name and slot are
    /// given up here, under the lock a new worker takes them with.
    fn retire(&self, exit: &mut Exit<K>) -> bool {
        let mut slots = lock(&self.slots);
        if slots.live <= 1 {
            return false;
        }
        self.health.unregister(&exit.name);
        slots.used[exit.slot] = false;
        slots.live -= 1;
        exit.released = true;
        drop(slots);
        self.ended.notify_all();
        true
    }
}

/// A worker's end: its slot freed, its liveness entry gone, or, if it
/// panicked, reported dead.
struct Exit<K> {
    shared: Arc<WorkerShared<K>>,
    slot: usize,
    name: String,
    /// Retired: the slot and name are given up already.
    released: bool,
    /// The thread ran: it is no longer counted as starting.
    ran: bool,
}

impl<K> Drop for Exit<K> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if std::thread::panicking() {
            self.shared.health.died(&self.name);
        } else {
            self.shared.health.unregister(&self.name);
        }
        let mut slots = lock(&self.shared.slots);
        slots.used[self.slot] = false;
        slots.live -= 1;
        if !self.ran {
            slots.starting -= 1;
        }
        drop(slots);
        self.shared.ended.notify_all();
    }
}

#[cfg(test)]
mod tests;
