//! The scale benchmark (issue 17), run by `scripts/bench.sh`: the operator
//! binary started cold over N existing OpenMedModels, each with its own
//! Deployment, on kubesim; everything measured from outside the process
//! (`/proc`, kubesim's request log). One table row per size.
//!
//! `OMO_BENCH_RESOURCES=1000,10000` picks the sizes (default: 20, which is
//! what the test suite runs, only to prove the benchmark works; it asserts
//! no budget). `OMO_OPERATOR_BIN` picks the binary; `OMO_BENCH_ARGS` adds
//! operator flags (`--workers 4 --qps 100`); `OMO_BENCH_LATENCY_MS` makes
//! every request that slow.

#[path = "common/operator.rs"]
mod harness;

use harness::*;
use kubesim::{Sim, SimConfig};
use std::time::{Duration, Instant};

/// One row of the table.
#[derive(Debug, Default)]
struct Row {
    n: usize,
    rolling_out_s: f64,
    ready_s: f64,
    by_verb: Vec<(String, f64)>,
    peak_rss_mib: f64,
    steady_rss_mib: f64,
    cpu_converge_ms: u64,
    cpu_per_resync_ms: f64,
    patch_p50_ms: u64,
    patch_p99_ms: u64,
    /// The live view with [`VIEWERS`] streams, while models change: RSS
    /// each viewer adds (KiB), and CPU all of them add (ms per minute; the
    /// publisher's work is shared by every viewer).
    view_rss_kib: f64,
    view_cpu_ms_per_min: f64,
    load: String,
}

/// Viewers of the live view connected for its cost.
const VIEWERS: usize = 16;

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn rss_mib(op: &Operator, field: &str) -> f64 {
    let pid_status =
        std::fs::read_to_string(format!("/proc/{}/status", op.pid())).unwrap_or_default();
    pid_status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Counts of models in each phase, from kubesim's store.
fn phases(sim: &Sim) -> (usize, usize) {
    let models = sim.objects("openmed.ai", "openmedmodels", Some(NS));
    let phase = |p: &str| models.iter().filter(|m| m["status"]["phase"] == p).count();
    (phase("RollingOut") + phase("Ready"), phase("Ready"))
}

/// Time from `t` until all `n` models are RollingOut or Ready (or Ready).
fn wait_all(sim: &Sim, t: Instant, n: usize, ready: bool, limit: Duration) -> Option<Duration> {
    loop {
        let (out, done) = phases(sim);
        if (if ready { done } else { out }) >= n {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(n: usize) -> Row {
    let sim = start_sim(SimConfig {
        warmup: Duration::from_millis(200),
        tick: Duration::from_millis(100),
        bookmark_interval: Duration::from_secs(5),
        history: 20 * n + 10_000,
        ..SimConfig::default()
    });
    for i in 0..n {
        sim.create(deployment(&format!("svc-{i}"), 1)).unwrap();
        let mut m = model(&format!("m-{i}"), &format!("svc-{i}"), V1, 600);
        m["spec"]["replicas"] = 1.into();
        sim.create(m).unwrap();
    }
    sim.reset_stats();
    // OMO_BENCH_LATENCY_MS: every request waits this long, as on a real
    // API server (kubesim answers in microseconds).
    let latency: u64 = std::env::var("OMO_BENCH_LATENCY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    sim.set_latency(Duration::from_millis(latency));
    let dir = tmpdir(&format!("bench-{n}"));
    let load_before = load();
    // Small runs (the suite's) keep the steady-state window short.
    let resync: u64 = if n < 100 { 2 } else { 10 };
    let resync_arg = resync.to_string();
    let extra = std::env::var("OMO_BENCH_ARGS").unwrap_or_default();
    let mut args = vec!["--resync-seconds", &resync_arg];
    args.extend(extra.split_whitespace());
    let mut op = Operator::start(&sim.url(), &dir, &args);
    let started = Instant::now();
    let limit = Duration::from_secs(60 + n as u64 / 20);
    let rolling = wait_all(&sim, started, n, false, limit).unwrap_or(limit);
    let ready = wait_all(&sim, started, n, true, limit).unwrap_or(limit);
    let cpu_converge_ms = op.cpu_ms().unwrap_or(0);
    let requests = sim.stats_json()["byVerb"].clone();
    let mut by_verb: Vec<(String, f64)> = requests
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(0.0) / n as f64))
                .collect()
        })
        .unwrap_or_default();
    by_verb.sort_by(|a, b| a.0.cmp(&b.0));
    // Steady state: two resync periods with nothing to do.
    std::thread::sleep(Duration::from_secs(3));
    let cpu0 = op.cpu_ms().unwrap_or(0);
    std::thread::sleep(Duration::from_secs(2 * resync));
    let cpu_per_resync_ms = (op.cpu_ms().unwrap_or(0) - cpu0) as f64 / 2.0;
    let steady_rss_mib = rss_mib(&op, "VmRSS:");
    let (p50, p99) = change_to_patch(&sim, n);
    let peak_rss_mib = rss_mib(&op, "VmHWM:");
    let (view_rss_kib, view_cpu_ms_per_min) = view_cost(&sim, &op, n);
    let row = Row {
        n,
        rolling_out_s: rolling.as_secs_f64(),
        ready_s: ready.as_secs_f64(),
        by_verb,
        peak_rss_mib,
        steady_rss_mib,
        cpu_converge_ms,
        cpu_per_resync_ms,
        patch_p50_ms: p50,
        patch_p99_ms: p99,
        view_rss_kib,
        view_cpu_ms_per_min,
        load: format!("{load_before} -> {}", load()),
    };
    op.assert_clean_exit();
    row
}

/// Spec change → Deployment patch, for up to 100 models changed one at a
/// time 20 ms apart: p50 and p99 in ms.
fn change_to_patch(sim: &Sim, n: usize) -> (u64, u64) {
    let picks: Vec<usize> = (0..n).step_by((n / 100).max(1)).take(100).collect();
    let mut changed = Vec::new();
    for &i in &picks {
        changed.push((i, sim.clock_ms()));
        set_version(sim, &format!("m-{i}"), V2);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(3));
    let log = sim.requests();
    let mut lat: Vec<u64> = changed
        .iter()
        .filter_map(|(i, at)| {
            let path = format!("/deployments/svc-{i}");
            log.iter()
                .find(|r| r.method == "PATCH" && r.path.ends_with(&path) && r.at_ms >= *at)
                .map(|r| r.at_ms - at)
        })
        .collect();
    lat.sort();
    let pct = |p: usize| {
        lat.get((lat.len() * p / 100).min(lat.len().saturating_sub(1)))
            .copied()
    };
    (pct(50).unwrap_or(0), pct(99).unwrap_or(0))
}

/// What `viewers` live-view streams add to the operator while ten models
/// change version (a message each to every viewer): RSS per viewer (KiB)
/// and CPU per viewer-minute (ms), against the same changes unwatched.
fn view_cost(sim: &Sim, op: &Operator, n: usize) -> (f64, f64) {
    use std::io::{Read, Write};
    let addr = op.view_addr();
    let window = |viewers: usize, version: &str| {
        let conns: Vec<std::net::TcpStream> = (0..viewers)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                write!(s, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
                let mut r = s.try_clone().unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while matches!(r.read(&mut buf), Ok(k) if k > 0) {}
                });
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let (cpu0, t) = (op.cpu_ms().unwrap_or(0), Instant::now());
        for i in (0..n).step_by((n / 10).max(1)).take(10) {
            set_version(sim, &format!("m-{i}"), version);
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(1000));
        let cpu = (op.cpu_ms().unwrap_or(0) - cpu0) as f64 / t.elapsed().as_secs_f64() * 60.0;
        let rss = rss_mib(op, "VmRSS:") * 1024.0;
        drop(conns);
        (cpu, rss)
    };
    let (cpu_alone, rss_alone) = window(0, V1);
    let (cpu_watched, rss_watched) = window(VIEWERS, V2);
    let per = VIEWERS as f64;
    (
        (rss_watched - rss_alone) / per,
        (cpu_watched - cpu_alone).max(0.0),
    )
}

fn print(rows: &[Row]) {
    println!(
        "| resources | all RollingOut | all Ready | requests per resource | peak RSS | steady RSS | CPU to converge | CPU per resync | change→patch p50/p99 | load 1/5/15 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let verbs: Vec<String> = r
            .by_verb
            .iter()
            .map(|(v, k)| format!("{v} {k:.2}"))
            .collect();
        println!(
            "| {} | {:.1} s | {:.1} s | {} | {:.1} MiB | {:.1} MiB | {:.2} s ({:.2} ms/resource) | {:.0} ms | {}/{} ms | {} |",
            r.n,
            r.rolling_out_s,
            r.ready_s,
            verbs.join(", "),
            r.peak_rss_mib,
            r.steady_rss_mib,
            r.cpu_converge_ms as f64 / 1000.0,
            r.cpu_converge_ms as f64 / r.n as f64,
            r.cpu_per_resync_ms,
            r.patch_p50_ms,
            r.patch_p99_ms,
            r.load
        );
    }
    println!("| resources | live view, {VIEWERS} viewers, 10 changes: RSS added (the first viewer pays for the shared rows) | CPU added by all of them |");
    println!("| --- | --- | --- |");
    for r in rows {
        let all = r.view_rss_kib * VIEWERS as f64 / 1024.0;
        println!(
            "| {} | {all:.1} MiB in all, {:.0} KiB a viewer | {:.0} ms a minute |",
            r.n, r.view_rss_kib, r.view_cpu_ms_per_min
        );
    }
}

#[test]
fn bench() {
    let sizes: Vec<usize> = std::env::var("OMO_BENCH_RESOURCES")
        .unwrap_or_else(|_| "20".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rows: Vec<Row> = sizes.iter().map(|&n| run(n)).collect();
    print(&rows);
    // Only that it measured something: budgets are not asserted here.
    for r in &rows {
        assert!(r.ready_s > 0.0 && r.peak_rss_mib > 0.0, "{r:?}");
        assert!(r.by_verb.iter().any(|(v, _)| v == "patch"), "{r:?}");
    }
}
