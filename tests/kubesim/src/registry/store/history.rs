//! What the store keeps of its past for watches: each event, and the bounds
//! on how much and how long.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug, Clone)]
pub struct HistEvent {
    pub rv: u64,
    pub res: String,
    pub ns: String,
    pub kind: EvKind,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
    /// When it happened (for watches that lag, and retention).
    pub at: Instant,
    /// About how many bytes its object holds ([`approx_size`]).
    pub size: usize,
}

/// How much watch history is kept: what happened in the last `window`
/// (the API server compacts etcd every 5 minutes,
/// `--etcd-compaction-interval`), within at most `events` events and
/// about `bytes` bytes of their objects. Older resourceVersions answer 410.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub events: usize,
    pub window: std::time::Duration,
    pub bytes: usize,
}

impl Retention {
    /// Five minutes, within a million events and 256 MiB.
    pub const DEFAULT: Retention = Retention {
        events: 1_000_000,
        window: std::time::Duration::from_secs(300),
        bytes: 256 << 20,
    };
}

/// About how many bytes a JSON value holds in memory: each node, each key
/// and each string counted with a fixed overhead. For the history's bound,
/// not exact.
pub fn approx_size(v: &Value) -> usize {
    match v {
        Value::String(s) => 32 + s.len(),
        Value::Array(a) => 32 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(m) => {
            64 + m
                .iter()
                .map(|(k, v)| 48 + k.len() + approx_size(v))
                .sum::<usize>()
        }
        _ => 16,
    }
}
