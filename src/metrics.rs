//! Counters, gauges and a histogram, rendered as Prometheus text.

use crate::lock::lock;
use crate::outcome::Outcome;
use crate::server::{Answer, Handler, Request};
use crate::token_access::{TokenAccess, Verdict, METRICS_PATH};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// Where the phase gauge is read from at scrape time.
pub type PhaseSource = std::sync::Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>;

/// Where the queue gauges are read from at scrape time: keys ready, and
/// keys waiting out a backoff.
pub type QueueSource = std::sync::Arc<dyn Fn() -> (usize, usize) + Send + Sync>;

#[derive(Default)]
pub struct Metrics {
    reconciles: Mutex<BTreeMap<Outcome, u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
    duration: Mutex<Histogram>,
    /// Reads the work queue at each scrape, so no loop wakes to copy it.
    queue: Mutex<Option<QueueSource>>,
    watch_restarts: Mutex<BTreeMap<&'static str, u64>>,
    relists: Mutex<BTreeMap<&'static str, u64>>,
    api_requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// Counts managed resources by phase, from the cache, at each scrape.
    phases: Mutex<Option<PhaseSource>>,
    events_posted: Mutex<u64>,
    events_failed: Mutex<u64>,
    api_warnings: Mutex<u64>,
    /// 1 while this process holds the leader lease (always 1 without
    /// leader election, as controller-runtime reports it).
    leader: AtomicI64,
    leader_transitions: Mutex<u64>,
    /// Requests for /metrics by verdict (allowed, unauthenticated, ...).
    metrics_access: Mutex<BTreeMap<&'static str, u64>>,
}

impl crate::runtime::LeaderGauge for Metrics {
    fn set_leader(&self, leading: bool) {
        Metrics::set_leader(self, leading);
    }
}

impl crate::runtime::LoopMetrics for Metrics {
    fn watch_restarted(&self, resource: &'static str) {
        *lock(&self.watch_restarts).entry(resource).or_default() += 1;
    }

    fn relisted(&self, resource: &'static str) {
        *lock(&self.relists).entry(resource).or_default() += 1;
    }
}

impl Metrics {
    pub fn reconciled(&self, outcome: Outcome, took: Duration) {
        *lock(&self.reconciles).entry(outcome).or_default() += 1;
        let secs = took.as_secs_f64();
        let mut h = lock(&self.duration);
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// A reconcile error by kind (api code, transport, timeout...).
    pub fn error(&self, kind: &str) {
        *lock(&self.errors).entry(kind.to_string()).or_default() += 1;
    }

    /// The queue gauges, read by `source` at every scrape.
    pub fn set_queue_source(&self, source: QueueSource) {
        *lock(&self.queue) = Some(source);
    }

    /// (keys ready, keys waiting out a backoff), 0 before a queue exists.
    fn queue_figures(&self) -> (usize, usize) {
        let source = lock(&self.queue).clone();
        source.map_or((0, 0), |f| f())
    }

    pub fn api_request(&self, verb: &'static str, code: u16) {
        *lock(&self.api_requests).entry((verb, code)).or_default() += 1;
    }

    pub fn event_posted(&self) {
        *lock(&self.events_posted) += 1;
    }

    /// An Event post that failed (it is retried with the sync).
    pub fn event_failed(&self) {
        *lock(&self.events_failed) += 1;
    }

    /// A request for /metrics and what it was answered.
    pub fn metrics_access(&self, verdict: &'static str) {
        *lock(&self.metrics_access).entry(verdict).or_default() += 1;
    }

    /// A `Warning` header in an API response.
    pub fn api_warning(&self) {
        *lock(&self.api_warnings) += 1;
    }

    /// Managed resources per phase, counted at every scrape by `source`
    /// (so the gauge is never behind the cache).
    pub fn set_phase_source(&self, source: PhaseSource) {
        *lock(&self.phases) = Some(source);
    }

    /// Without leader election this process always writes: the gauge is 1
    /// and no transition is counted.
    pub fn set_sole_writer(&self) {
        self.leader.store(1, Ordering::SeqCst);
    }

    /// This process took the lease (`true`) or gave it up.
    pub fn set_leader(&self, leading: bool) {
        if leading && self.leader.swap(1, Ordering::SeqCst) == 0 {
            *lock(&self.leader_transitions) += 1;
        }
        if !leading {
            self.leader.store(0, Ordering::SeqCst);
        }
    }

    pub fn api_requests_total(&self) -> u64 {
        lock(&self.api_requests).values().sum()
    }

    /// The Prometheus text exposition, families in `FAMILIES` order.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, kind, help, rows) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (suffix, value) in rows(self) {
                let _ = writeln!(out, "{name}{suffix} {value}");
            }
        }
        out
    }

    fn reconcile_rows(&self) -> Vec<LabelPair> {
        let reconciles = lock(&self.reconciles);
        [Outcome::Unchanged, Outcome::Applied, Outcome::Error]
            .iter()
            .map(|o| {
                let n = reconciles.get(o).copied().unwrap_or(0);
                (format!("{{result=\"{}\"}}", o.as_str()), n.to_string())
            })
            .collect()
    }

    fn duration_rows(&self) -> Vec<LabelPair> {
        let h = lock(&self.duration);
        let mut rows: Vec<LabelPair> = BUCKETS
            .iter()
            .zip(h.counts.iter())
            .map(|(b, c)| (format!("_bucket{{le=\"{b}\"}}"), c.to_string()))
            .collect();
        rows.push(("_bucket{le=\"+Inf\"}".into(), h.count.to_string()));
        rows.push(("_sum".into(), h.sum.to_string()));
        rows.push(("_count".into(), h.count.to_string()));
        rows
    }

    fn api_request_rows(&self) -> Vec<LabelPair> {
        lock(&self.api_requests)
            .iter()
            .map(|((verb, code), v)| {
                (
                    format!("{{verb=\"{verb}\",code=\"{code}\"}}"),
                    v.to_string(),
                )
            })
            .collect()
    }

    fn phase_rows(&self) -> Vec<LabelPair> {
        // Cloned out first, so the source runs without our lock held.
        let source = lock(&self.phases).clone();
        let phases = source.map(|f| f()).unwrap_or_default();
        labelled("phase", phases.iter())
    }
}

/// One exposition line after the metric name: `{labels}` or a suffix such
/// as `_sum`, and the value.
type LabelPair = (String, String);

/// Every metric family in exposition order: name, type, help, its rows.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Metrics) -> Vec<LabelPair>,
);

const FAMILIES: [Family; 15] = [
    (
        "openmed_operator_reconciles_total",
        "counter",
        "Reconcile passes by result.",
        Metrics::reconcile_rows,
    ),
    (
        "openmed_operator_reconcile_errors_total",
        "counter",
        "Reconcile errors by kind.",
        |m| labelled("kind", lock(&m.errors).iter()),
    ),
    (
        "openmed_operator_reconcile_duration_seconds",
        "histogram",
        "Time per reconcile pass.",
        Metrics::duration_rows,
    ),
    (
        "openmed_operator_queue_depth",
        "gauge",
        "Keys ready to be processed.",
        |m| single(m.queue_figures().0),
    ),
    (
        "openmed_operator_queue_retries",
        "gauge",
        "Keys waiting out a backoff after a failure, one per key.",
        |m| single(m.queue_figures().1),
    ),
    (
        "openmed_operator_watch_restarts_total",
        "counter",
        "Watches restarted, by resource.",
        |m| labelled("resource", lock(&m.watch_restarts).iter()),
    ),
    (
        "openmed_operator_relists_total",
        "counter",
        "Full lists (initial and after 410), by resource.",
        |m| labelled("resource", lock(&m.relists).iter()),
    ),
    (
        "openmed_operator_api_requests_total",
        "counter",
        "API requests by verb and HTTP status code (0: no response).",
        Metrics::api_request_rows,
    ),
    (
        "openmed_operator_managed_resources",
        "gauge",
        "OpenMedModels by status phase.",
        Metrics::phase_rows,
    ),
    (
        "openmed_operator_events_posted_total",
        "counter",
        "Events created or bumped.",
        |m| single(*lock(&m.events_posted)),
    ),
    (
        "openmed_operator_events_failed_total",
        "counter",
        "Event posts that failed; each is retried with its resource's sync.",
        |m| single(*lock(&m.events_failed)),
    ),
    (
        "openmed_operator_api_warnings_total",
        "counter",
        "Warning headers in API responses (each distinct one is also logged once).",
        |m| single(*lock(&m.api_warnings)),
    ),
    (
        "openmed_operator_leader",
        "gauge",
        "1 while this replica holds the leader lease and may write; 0 on a standby.",
        |m| single(m.leader.load(Ordering::SeqCst)),
    ),
    (
        "openmed_operator_leader_transitions_total",
        "counter",
        "Times this replica took the leader lease.",
        |m| single(*lock(&m.leader_transitions)),
    ),
    (
        "openmed_operator_metrics_requests_total",
        "counter",
        "Requests for /metrics by verdict: allowed, unauthenticated, forbidden, throttled, unavailable.",
        |m| labelled("verdict", lock(&m.metrics_access).iter()),
    ),
];

/// The one row of an unlabelled metric.
fn single(value: impl std::fmt::Display) -> Vec<LabelPair> {
    vec![(String::new(), value.to_string())]
}

/// Rows with a single label.
fn labelled<K: std::fmt::Display, V: std::fmt::Display>(
    label: &str,
    items: impl Iterator<Item = (K, V)>,
) -> Vec<LabelPair> {
    items
        .map(|(k, v)| (format!("{{{label}=\"{k}\"}}"), v.to_string()))
        .collect()
}

/// `/metrics`, for callers `access` allows (everyone without it).
impl Metrics {
    pub fn handler(self: &Arc<Self>, access: Option<Arc<TokenAccess>>) -> Handler {
        let metrics = self.clone();
        Arc::new(move |r: &Request| {
            if r.method != "GET" {
                return Answer::text(405, "only GET\n");
            }
            if r.path != METRICS_PATH {
                return Answer::text(404, "not found\n");
            }
            let verdict = access.as_ref().map_or(Verdict::Allowed, |a| {
                a.check(r.authorization.as_deref(), r.peer)
            });
            metrics.metrics_access(verdict.as_str());
            verdict.refusal().unwrap_or_else(|| Answer {
                content_type: "text/plain; version=0.0.4",
                ..Answer::text(200, metrics.render())
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::LoopMetrics;

    /// docs/reference.md names every metric the operator exports.
    #[test]
    fn the_reference_lists_every_metric() {
        let reference = include_str!("../docs/reference.md");
        let m = Metrics::default();
        let names: Vec<String> = m
            .render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        assert!(names.len() >= 15, "{names:?}");
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !reference.contains(&format!("`{n}")))
            .collect();
        assert!(missing.is_empty(), "not in docs/reference.md: {missing:?}");
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.reconciled(Outcome::Applied, Duration::from_millis(3));
        m.reconciled(Outcome::Unchanged, Duration::from_secs(20));
        m.api_request("patch", 200);
        m.api_request("patch", 200);
        m.api_request("get", 0);
        m.watch_restarted("deployments");
        m.relisted("openmedmodels");
        m.error("api_409");
        m.set_queue_source(std::sync::Arc::new(|| (4, 1)));
        m.set_phase_source(std::sync::Arc::new(|| [("Ready".to_string(), 3)].into()));
        let t = m.render();
        for want in [
            "openmed_operator_reconciles_total{result=\"applied\"} 1",
            "openmed_operator_reconciles_total{result=\"error\"} 0",
            "openmed_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1",
            "openmed_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 2",
            "openmed_operator_reconcile_duration_seconds_count 2",
            "openmed_operator_api_requests_total{verb=\"patch\",code=\"200\"} 2",
            "openmed_operator_api_requests_total{verb=\"get\",code=\"0\"} 1",
            "openmed_operator_queue_depth 4",
            "openmed_operator_queue_retries 1",
            "openmed_operator_watch_restarts_total{resource=\"deployments\"} 1",
            "openmed_operator_relists_total{resource=\"openmedmodels\"} 1",
            "openmed_operator_managed_resources{phase=\"Ready\"} 3",
            "openmed_operator_reconcile_errors_total{kind=\"api_409\"} 1",
            "# TYPE openmed_operator_reconcile_duration_seconds histogram",
        ] {
            assert!(t.contains(want), "missing {want}\n{t}");
        }
        assert_eq!(m.api_requests_total(), 3);
    }
}
