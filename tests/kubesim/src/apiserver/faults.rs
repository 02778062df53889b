//! Fault injection and request accounting.

use regex::Regex;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct FailRule {
    pub method: Option<String>,
    pub path: Regex,
    /// Also required to match the raw query string, if set.
    pub query: Option<Regex>,
    pub code: u16,
    pub retry_after: Option<u64>,
    pub remaining: u32,
}

/// Watches whose request path matches `path` deliver each event `lag`
/// after it happened.
#[derive(Debug, Clone)]
pub struct WatchLag {
    pub pattern: String,
    pub path: Regex,
    pub lag: Duration,
}

#[derive(Debug, Default)]
pub struct Faults {
    pub rules: Vec<FailRule>,
    pub latency: Duration,
    pub watch_lags: Vec<WatchLag>,
    /// Answer this many upcoming watches with "too old resource version".
    pub expire_watches: u32,
    /// ... as an in-stream ERROR event rather than an HTTP 410.
    pub expire_in_stream: bool,
    /// Clients cut off, by a piece of their User-Agent (and, if not empty,
    /// a piece of the request path): a network partition of one client
    /// while the others pass.
    pub cut_off: Vec<(String, String, CutOff)>,
}

/// How a cut-off client's requests fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// At once, 503 (a refused connection, as near as HTTP gets).
    Refuse,
    /// Never answered while the cut lasts (a black hole), then 504.
    Hang,
}

impl Faults {
    /// How requests from `user_agent` fail, if it is cut off.
    pub fn cut_off_for(&self, user_agent: &str, path: &str) -> Option<CutOff> {
        self.cut_off
            .iter()
            .find(|(part, p, _)| user_agent.contains(part.as_str()) && path.contains(p.as_str()))
            .map(|(_, _, how)| *how)
    }

    /// Set the lag of watches matching `pattern` (replacing an earlier rule
    /// with the same pattern); a zero lag removes the rule.
    pub fn set_watch_lag(&mut self, pattern: &str, path: Regex, lag: Duration) {
        self.watch_lags.retain(|l| l.pattern != pattern);
        if !lag.is_zero() {
            self.watch_lags.push(WatchLag {
                pattern: pattern.to_string(),
                path,
                lag,
            });
        }
    }

    /// The lag of a watch on `path`: the longest of the rules matching it.
    pub fn watch_lag_for(&self, path: &str) -> Duration {
        self.watch_lags
            .iter()
            .filter(|l| l.path.is_match(path))
            .map(|l| l.lag)
            .max()
            .unwrap_or_default()
    }

    /// The failure the next request must get, if a rule matches it.
    pub fn take_failure(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
    ) -> Option<(u16, Option<u64>)> {
        let rule = self.rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.method
                    .as_deref()
                    .map(|m| m.eq_ignore_ascii_case(method))
                    .unwrap_or(true)
                && r.path.is_match(path)
                && r.query.as_ref().map(|q| q.is_match(query)).unwrap_or(true)
        })?;
        rule.remaining -= 1;
        let out = (rule.code, rule.retry_after);
        self.rules.retain(|r| r.remaining > 0);
        Some(out)
    }
}

/// One request as the simulator saw it (no bodies, no headers).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub status: u16,
    pub verb: String,
    pub resource: String,
    pub user_agent: String,
    pub accept: String,
    /// Milliseconds since the simulator started, when the request arrived.
    pub at_ms: u64,
}

impl RequestRecord {
    pub fn to_json(&self) -> Value {
        json!({"method": self.method, "path": self.path, "query": self.query, "contentType": self.content_type,
               "status": self.status, "verb": self.verb, "resource": self.resource, "userAgent": self.user_agent, "accept": self.accept, "atMs": self.at_ms})
    }
}

const LOG_CAP: usize = 200_000;

#[derive(Debug, Default)]
pub struct Stats {
    pub log: Vec<RequestRecord>,
    /// (verb, resource, code) → count
    pub counts: BTreeMap<(String, String, u16), u64>,
    /// Watch events sent (not bookmarks), by resource (`apps/deployments`),
    /// summed over every watch.
    pub watch_events: BTreeMap<String, u64>,
}

impl Stats {
    pub fn record(&mut self, r: RequestRecord) {
        *self
            .counts
            .entry((r.verb.clone(), r.resource.clone(), r.status))
            .or_default() += 1;
        if self.log.len() >= LOG_CAP {
            self.log.drain(..LOG_CAP / 2);
        }
        self.log.push(r);
    }

    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .counts
            .iter()
            .map(|((v, r, c), n)| json!({"verb": v, "resource": r, "code": c, "count": n}))
            .collect();
        let mut by_verb: BTreeMap<&str, u64> = BTreeMap::new();
        for ((v, _, _), n) in &self.counts {
            *by_verb.entry(v).or_default() += n;
        }
        json!({"byVerb": by_verb, "counts": rows, "total": self.log.len()})
    }
}
