//! Rounds (`OMO_BENCH_ROUNDS`): the contestants run in alternating order,
//! ours then the peer, then the peer then ours, so that neither always
//! meets the machine as the other left it; then each column's median and
//! spread (lowest to highest) a contestant and size, and the ratio of ours
//! to the peer's medians. One run on a shared machine says little
//! (docs/performance.md); the median of several in one invocation is what
//! the goals are read from.

use super::harness::median;
use super::{Contestant, Kind, Row};

/// The contestants of round `r`: listed order in even rounds, reversed in
/// odd ones.
pub fn order(all: Vec<Contestant>, r: usize) -> Vec<Contestant> {
    let mut all = all;
    if r % 2 == 1 {
        all.reverse();
    }
    all
}

/// The columns the medians are taken of: a name, the figure of a row, its
/// unit and decimals.
type Column = (&'static str, fn(&Row) -> f64, &'static str, usize);

const COLUMNS: [Column; 9] = [
    ("cold → all Ready", |r| r.cold_ready_s, "s", 1),
    ("change → all Ready", |r| r.change_ready_s, "s", 1),
    (
        "CPU to converge",
        |r| r.cpu_converge_ms as f64 / 1000.0,
        "s",
        2,
    ),
    (
        "CPU to converge and settle",
        |r| (r.cpu_converge_ms + r.settle_cpu_ms) as f64 / 1000.0,
        "s",
        2,
    ),
    (
        "kubesim's CPU meanwhile",
        |r| r.server_cpu_ms as f64 / 1000.0,
        "s",
        2,
    ),
    ("steady RSS", |r| r.steady_rss_mib, "MiB", 1),
    ("peak RSS", |r| r.peak_rss_mib, "MiB", 1),
    (
        "idle CPU a minute",
        |r| r.idle_cpu_ms_per_min / 1000.0,
        "s",
        2,
    ),
    ("change→patch p99", |r| r.patch_p99_ms as f64, "ms", 0),
];

/// Medians over the rounds of each contestant and size, with the spread,
/// then ours over the peer's.
pub fn print(rows: &[Row], peer: Option<&str>) {
    let mut groups: Vec<(usize, &str)> = rows.iter().map(|r| (r.n, r.label.as_str())).collect();
    groups.sort();
    groups.dedup();
    let heads: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    println!("| resources | operator | rounds | {} |", heads.join(" | "));
    println!("| --- | --- | --- |{}", " --- |".repeat(COLUMNS.len()));
    let mut medians = Vec::new();
    for &(n, label) in &groups {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|r| r.n == n && r.label == label)
            .collect();
        let cells: Vec<String> = COLUMNS
            .iter()
            .map(|&(_, f, unit, d)| {
                let (m, lo, hi) = median(of.iter().map(|r| f(r)).collect());
                medians.push(((n, label), m));
                format!("{m:.d$} {unit} ({lo:.d$}–{hi:.d$})")
            })
            .collect();
        println!("| {n} | {label} | {} | {} |", of.len(), cells.join(" | "));
    }
    let Some(peer) = peer else { return };
    for &(n, label) in groups.iter().filter(|g| g.1 != peer) {
        let of = |l: &str| -> Vec<f64> {
            let own = medians.iter().filter(|(g, _)| *g == (n, l));
            own.map(|(_, m)| *m).collect()
        };
        let ratios: Vec<String> = of(label)
            .into_iter()
            .zip(of(peer))
            .map(|(a, b)| match a / b {
                r if r.is_finite() => format!("{r:.2}x"),
                _ => "-".into(),
            })
            .collect();
        if !ratios.is_empty() {
            println!("| {n} | {label} over the peer | | {} |", ratios.join(" | "));
        }
    }
}

/// The peer's label, if it runs.
pub fn peer_label(all: &[Contestant]) -> Option<String> {
    all.iter()
        .find(|c| matches!(c.kind, Kind::Peer { .. }))
        .map(|c| c.label.clone())
}
