//! The change stream behind `/events`: a snapshot on connect, then one
//! message per change, every [`TICK`], to each viewer.
//!
//! Bounded and never in the operator's way: at most [`MAX_VIEWERS`] at once,
//! each with a queue of [`QUEUE`] messages; the publisher only ever
//! `try_send`s, and a viewer whose queue is full (slow) is dropped, its
//! connection closed; one that stops reading is cut off by its write
//! deadline (`server::event_loop`). The publisher compares snapshots of the caches
//! (no API request) and sleeps while nobody watches.

use super::{diff, Row};
use crate::lock::lock;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often changes are looked for while someone watches.
pub const TICK: Duration = Duration::from_millis(250);
pub const MAX_VIEWERS: usize = 16;
/// Messages queued per viewer before it counts as stuck.
pub const QUEUE: usize = 32;
/// A comment line this often keeps proxies from closing a quiet stream
/// and finds dead connections (a closed page's place is freed by then).
const KEEPALIVE: Duration = Duration::from_secs(5);

/// Where the rows come from.
pub trait Source: Send + Sync {
    /// Every row now.
    fn rows(&self) -> BTreeMap<String, Row>;
    /// A number that grows whenever the rows may have changed.
    fn version(&self) -> u64;
    /// Nobody watches any more: let go of what only viewers need.
    fn idle(&self) {}
}

pub struct Hub {
    source: Box<dyn Source>,
    /// The rows every viewer has been sent, and the viewers.
    state: Mutex<Viewers>,
    watched: Condvar,
}

#[derive(Default)]
struct Viewers {
    last: BTreeMap<String, Row>,
    /// The source's version when `last` was taken.
    seen: Option<u64>,
    /// `last` as a snapshot message, made once for every viewer that joins
    /// before it changes, and shared by them, not copied per viewer (its
    /// size grows with the models: docs/performance.md, live view).
    snapshot: Option<Arc<str>>,
    viewers: Vec<Slot>,
}

/// A viewer as the hub sees it: its queue, and a token its connection holds
/// while it lasts.
struct Slot {
    queue: SyncSender<Arc<str>>,
    alive: Arc<()>,
}

impl Slot {
    fn connected(&self) -> bool {
        Arc::strong_count(&self.alive) > 1
    }
}

/// A connected viewer: its snapshot, then its queue.
pub struct Viewer {
    pub snapshot: Arc<str>,
    pub queue: Receiver<Arc<str>>,
    /// Held until the connection ends.
    alive: Arc<()>,
}

impl Hub {
    pub fn new(source: Box<dyn Source>) -> Arc<Hub> {
        Arc::new(Hub {
            source,
            state: Mutex::new(Viewers::default()),
            watched: Condvar::new(),
        })
    }

    /// Publish changes until the process ends (on a thread of its own).
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let hub = self.clone();
        std::thread::Builder::new()
            .name("view-publisher".into())
            .spawn(move || loop {
                hub.wait_for_viewers();
                std::thread::sleep(TICK);
                hub.publish();
            })
            .map(|_| ())
    }

    fn wait_for_viewers(&self) {
        let mut s = lock(&self.state);
        if s.viewers.is_empty() && s.seen.is_some() {
            // The last viewer left: free the copies kept for viewers.
            *s = Viewers::default();
            self.source.idle();
        }
        while s.viewers.is_empty() {
            s = self.watched.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Send what changed since the last look to every viewer; drop the
    /// ones that cannot keep up.
    pub fn publish(&self) {
        let version = self.source.version();
        {
            let mut s = lock(&self.state);
            // Viewers whose connection ended (their place is free again).
            s.viewers.retain(Slot::connected);
            if s.seen == Some(version) {
                return;
            }
        }
        let now = self.source.rows();
        let mut s = lock(&self.state);
        // A viewer that joined meanwhile may have taken newer rows already.
        if s.seen.is_some_and(|seen| seen >= version) {
            return;
        }
        let (changed, gone) = diff(&s.last, &now);
        s.last = now;
        s.seen = Some(version);
        s.snapshot = None;
        if changed.is_empty() && gone.is_empty() {
            return;
        }
        let body = serde_json::json!({"upsert": changed, "remove": gone});
        let msg: Arc<str> = format!("event: changes\ndata: {body}\n\n").into();
        s.viewers.retain(|v| match v.queue.try_send(msg.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                log::info!("live view: a viewer fell {QUEUE} messages behind and was dropped");
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }

    /// A new viewer, or None when [`MAX_VIEWERS`] are connected.
    pub fn join(&self) -> Option<Viewer> {
        let mut s = lock(&self.state);
        s.viewers.retain(Slot::connected);
        if s.viewers.len() >= MAX_VIEWERS {
            return None;
        }
        if s.viewers.is_empty() {
            // Nobody watched: what was last sent is stale.
            s.seen = Some(self.source.version());
            s.last = self.source.rows();
            s.snapshot = None;
        }
        let snapshot = match &s.snapshot {
            Some(m) => m.clone(),
            None => {
                let rows: Vec<&Row> = s.last.values().collect();
                let json = serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into());
                let m: Arc<str> = format!("retry: 1000\nevent: snapshot\ndata: {json}\n\n").into();
                s.snapshot = Some(m.clone());
                m
            }
        };
        let (tx, rx) = sync_channel(QUEUE);
        let alive = Arc::new(());
        s.viewers.push(Slot {
            queue: tx,
            alive: alive.clone(),
        });
        self.watched.notify_all();
        Some(Viewer {
            snapshot,
            queue: rx,
            alive,
        })
    }

    /// Every row now, from the caches (what only viewers need is let go
    /// again when nobody watches).
    pub fn rows(&self) -> BTreeMap<String, Row> {
        let rows = self.source.rows();
        if lock(&self.state).viewers.is_empty() {
            self.source.idle();
        }
        rows
    }

    /// Viewers connected now (the tests ask).
    #[cfg(test)]
    pub fn viewers(&self) -> usize {
        lock(&self.state).viewers.len()
    }
}

impl Viewer {
    /// Write the stream to `out` until the viewer goes or is dropped.
    pub fn serve(self, out: &mut dyn Write) {
        let Viewer {
            snapshot,
            queue,
            alive: _alive,
        } = self;
        if out
            .write_all(snapshot.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return;
        }
        // Not held for the life of the stream.
        drop(snapshot);
        loop {
            let msg = match queue.recv_timeout(KEEPALIVE) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => Arc::from(": keepalive\n\n"),
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if out
                .write_all(msg.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                return;
            }
        }
    }
}
