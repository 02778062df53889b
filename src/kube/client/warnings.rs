//! The server's `Warning` headers: each counted, each distinct text
//! logged once.

use super::request::Req;
use super::Client;
use crate::kube::error::sanitize;
use crate::lock::lock;
use std::sync::Arc;

/// Warning headers seen: a count, and the distinct texts already logged
/// (bounded: past `KEEP` distinct ones, new ones are counted, not logged).
#[derive(Default)]
pub(super) struct Warnings {
    total: u64,
    seen: std::collections::BTreeSet<String>,
}

impl Warnings {
    const KEEP: usize = 256;
}

/// The text of a `Warning: 299 - "text"` header (RFC 7234), sanitized and
/// cut; the whole value if it has not that shape.
fn warning_text(v: &str) -> String {
    let text = v
        .split_once('"')
        .and_then(|(_, rest)| rest.rsplit_once('"'))
        .map(|(t, _)| t)
        .unwrap_or(v);
    sanitize(&text.replace("\\\"", "\""), 300)
}

impl Client {
    /// Called for every `Warning` header in a response (a metric).
    pub fn with_warning_observer(mut self, f: Arc<dyn Fn() + Send + Sync>) -> Client {
        self.on_warning = Some(f);
        self
    }

    /// Warning headers seen so far, and the distinct texts remembered.
    pub fn warnings(&self) -> (u64, Vec<String>) {
        let w = lock(&self.warnings);
        (w.total, w.seen.iter().cloned().collect())
    }

    /// Log each distinct `Warning` header once (a pruned unknown field, a
    /// deprecated API) and count every one: client-go logs them too.
    pub(super) fn note_warnings(&self, req: &Req<'_>, headers: &ureq::http::HeaderMap) {
        for h in headers.get_all("warning") {
            let text = warning_text(&String::from_utf8_lossy(h.as_bytes()));
            if let Some(f) = &self.on_warning {
                f();
            }
            let mut w = lock(&self.warnings);
            w.total += 1;
            if w.seen.len() < Warnings::KEEP && w.seen.insert(text.clone()) {
                drop(w);
                log::warn!(
                    "API server warning on {} {}: {text}",
                    req.verb.as_str(),
                    req.path
                );
            }
        }
    }
}
