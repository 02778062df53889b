//! The side-by-side benchmark, run by `scripts/bench.sh`: each contestant
//! started cold over N existing OpenMedModels, each with its own Deployment,
//! on a fresh kubesim served over TLS with bearer tokens and 0.5 s pod
//! warmup, as in a cluster; then one version change for all; then idle.
//! Everything is measured from outside the process (`/proc`, kubesim's
//! request log), except allocations, which the counting build reports on
//! its health port (`alloc-count`, src/memory/count.rs). One row per
//! contestant and size; budgets are not asserted (docs/performance.md).
//!
//! - `OMO_BENCH_RESOURCES=1000,10000`: the sizes (default 100, what the
//!   suite runs once, only to prove the benchmark works);
//! - `OMO_BENCH_ROUNDS=3,2`: rounds a size, contestants in alternating
//!   order, then the medians (rounds.rs);
//! - `OMO_BENCH_INSTRUCTIONS`: the size the instructions are counted at
//!   under callgrind (instructions.rs; default 100, 0 for none);
//!   `OMO_BENCH_SYSCALLS`: the size the system calls are counted at under
//!   `perf stat` (default 0, none);
//! - `OMO_OPERATOR_BIN`: our binary (default the test build), labelled
//!   `OMO_BENCH_LABEL`; `OMO_BENCH_GLIBC_BIN`: the glibc build;
//!   `OMO_BENCH_BEFORE_BIN`: an earlier build, for a before/after row;
//! - `OMO_BENCH_COUNT_BIN`: our counting build, run over the same scenario
//!   for allocations per resource;
//! - `OMO_BENCH_PEER_BIN` (and `OMO_BENCH_PEER_ARGS`): the kube-rs peer
//!   (`../shared/peer-kube-rs`), run in the same invocation;
//! - `OMO_BENCH_ARGS`: flags for our operator; `OMO_BENCH_IDLE_S`: the idle
//!   window (default 120 s, one full resync cycle at the default period);
//!   `OMO_BENCH_PLAIN=1`: plain HTTP; `OMO_BENCH_LATENCY_MS`: every request
//!   that slow.

mod instructions;
mod rounds;

use openmed_test_support as harness;

use harness::*;
use kubesim::{Sim, SimConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The peer's token: kubesim takes it as an administrator's.
const PEER_TOKEN: &str = "bench-peer-token";

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Which program a row measures.
#[derive(Clone, Debug)]
enum Kind {
    /// Ours; `counting` reads allocations off the health port.
    Ours {
        bin: String,
        counting: bool,
    },
    Peer {
        bin: String,
        args: Vec<String>,
    },
}

#[derive(Clone, Debug)]
struct Contestant {
    label: String,
    kind: Kind,
}

fn contestants() -> Vec<Contestant> {
    let ours = |label: String, bin: String, counting| Contestant {
        label,
        kind: Kind::Ours { bin, counting },
    };
    let default_bin = env!("CARGO_BIN_EXE_openmed-operator").to_string();
    let label = env("OMO_BENCH_LABEL").unwrap_or_else(|| "ours".into());
    let mut all = vec![ours(
        label,
        env("OMO_OPERATOR_BIN").unwrap_or(default_bin),
        false,
    )];
    if let Some(bin) = env("OMO_BENCH_BEFORE_BIN") {
        all.push(ours("ours, the build before".into(), bin, false));
    }
    if let Some(bin) = env("OMO_BENCH_GLIBC_BIN") {
        all.push(ours("ours, glibc".into(), bin, false));
    }
    if let Some(bin) = env("OMO_BENCH_COUNT_BIN") {
        all.push(ours("ours, counting allocator".into(), bin, true));
    }
    if let Some(bin) = env("OMO_BENCH_PEER_BIN") {
        let args: Vec<String> = env("OMO_BENCH_PEER_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let label = format!("kube-rs peer {}", args.join(" "));
        all.push(Contestant {
            label: label.trim().to_string(),
            kind: Kind::Peer { bin, args },
        });
    }
    all
}

/// A running contestant: its process, and for ours the harness's handle.
enum Running {
    Ours(Operator),
    Peer(Child, PathBuf),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Ours(op) => op.pid(),
            Running::Peer(c, _) => c.id(),
        }
    }

    /// User and system CPU so far, in ms (from `/proc/PID/stat`).
    fn cpu(&self) -> (u64, u64) {
        proc_cpu(&self.pid().to_string())
    }

    fn cpu_ms(&self) -> u64 {
        let (u, s) = self.cpu();
        u + s
    }

    fn rss_mib(&self, field: &str) -> f64 {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{path}: no {field}"))
            / 1024.0
    }

    /// Allocations so far, from the counting build's health port.
    fn allocations(&mut self) -> Option<u64> {
        self.counted("allocations ")
    }

    /// One figure of the counting build's health port (`allocations`,
    /// `live` bytes held, bytes `kept` in the allocator's caches).
    fn counted(&mut self, name: &str) -> Option<u64> {
        let Running::Ours(op) = self else { return None };
        let (code, body) = op.http_get("/debug/allocations");
        (code == 200).then_some(())?;
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    }

    /// Reconcile passes so far, of every result (ours).
    fn passes(&mut self) -> Option<f64> {
        let Running::Ours(op) = self else { return None };
        let (code, body) = op.http_get("/metrics");
        (code == 200).then_some(())?;
        let passes = body
            .lines()
            .filter(|l| l.starts_with("openmed_operator_reconciles_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        Some(passes.sum())
    }

    fn stop(self) {
        match self {
            Running::Ours(mut op) => op.assert_clean_exit(),
            Running::Peer(mut c, log) => {
                // SIGTERM first: a peer run under callgrind writes its
                // counts as it ends (instructions.rs).
                let _ = Command::new("kill")
                    .args(["-TERM", &c.id().to_string()])
                    .status();
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(10) && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = c.kill();
                let _ = c.wait();
                let _ = std::fs::remove_file(log);
            }
        }
    }
}

/// User and system CPU of process `pid` ("self": this one, which runs
/// kubesim) so far, in ms. A figure read from nothing would print as zero:
/// fail instead.
fn proc_cpu(pid: &str) -> (u64, u64) {
    process_cpu_ms(pid).unwrap_or_else(|| panic!("no CPU times in /proc/{pid}/stat"))
}

/// One row of the table.
#[derive(Debug, Default)]
struct Row {
    label: String,
    n: usize,
    cold_ready_s: f64,
    change_ready_s: f64,
    cpu_converge_ms: u64,
    /// The benchmark's own CPU (kubesim serving the contestant, and the
    /// driver's changes and looks) from the start to all Ready after the
    /// change: the load a contestant puts on its API server.
    server_cpu_ms: u64,
    /// CPU from all Ready until one resync period later.
    settle_cpu_ms: u64,
    kernel_share: f64,
    /// Allocations per resource: cold to all Ready, and the change.
    allocs_cold: Option<f64>,
    allocs_change: Option<f64>,
    by_verb: Vec<(String, f64)>,
    idle_requests: u64,
    peak_rss_mib: f64,
    steady_rss_mib: f64,
    idle_cpu_ms_per_min: f64,
    /// The largest burst of CPU in the idle window: a full resync pass.
    idle_burst_ms: u64,
    patch_p50_ms: u64,
    patch_p99_ms: u64,
    /// The live view (ours): RSS each viewer adds (KiB) and CPU all of
    /// them add (ms a minute).
    view: Option<(f64, f64)>,
    load: String,
}

/// Viewers of the live view connected for its cost.
const VIEWERS: usize = 16;

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A fresh cluster holding `n` Deployments and their models, over TLS
/// unless `OMO_BENCH_PLAIN` is set.
fn cluster(n: usize) -> Sim {
    let sim = start_sim(SimConfig {
        tls: env("OMO_BENCH_PLAIN").is_none(),
        warmup: Duration::from_millis(500),
        tick: Duration::from_millis(100),
        // The API server's watch cache sends a bookmark a minute
        // (`defaultBookmarkFrequency`, apiserver's cacher).
        bookmark_interval: Duration::from_secs(60),
        // Events of the models, Deployments and ConfigMaps, and as many
        // again of the ReplicaSets and pods, with room to spare.
        history: 40 * n + 10_000,
        ..SimConfig::default()
    });
    for i in 0..n {
        sim.create(deployment(&format!("svc-{i}"), 1)).unwrap();
        let mut m = model(&format!("m-{i}"), &format!("svc-{i}"), V1, 600);
        m["spec"]["replicas"] = 1.into();
        sim.create(m).unwrap();
    }
    // Bearer tokens from here on: the operator's ServiceAccount's, and the
    // peer's (an administrator's).
    sim.set_tokens(Some(vec![PEER_TOKEN.into()]));
    let latency: u64 = env("OMO_BENCH_LATENCY_MS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    sim.set_latency(Duration::from_millis(latency));
    sim
}

/// How many models are Ready and serve `version`.
fn serving(sim: &Sim, version: &str) -> usize {
    let models = sim.shared_objects("openmed.ai", "openmedmodels", Some(NS));
    models
        .iter()
        .filter(|m| m["status"]["phase"] == "Ready" && m["status"]["activeVersion"] == version)
        .count()
}

/// Time from `t` until all `n` models serve `version`; a contestant that
/// does not get there within `limit` fails the benchmark.
fn wait_serving(sim: &Sim, t: Instant, n: usize, version: &str, limit: Duration) -> Duration {
    loop {
        let done = serving(sim, version);
        if done >= n {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < limit,
            "only {done} of {n} models serve {version} after {limit:?}"
        );
        // Each look lists every model: at 10,000, every 100 ms took a core.
        std::thread::sleep(Duration::from_millis((n as u64 / 20).max(100)));
    }
}

fn start(c: &Contestant, sim: &Sim, dir: &Path, resync_s: u64) -> Running {
    let ca = dir.join("ca.crt");
    if let Some(pem) = sim.ca_pem() {
        std::fs::write(&ca, pem).unwrap();
    }
    let ca_arg = sim.ca_pem().map(|_| ca.to_str().unwrap().to_string());
    match &c.kind {
        Kind::Ours { bin, .. } => {
            let resync = resync_s.to_string();
            let extra = env("OMO_BENCH_ARGS").unwrap_or_default();
            let mut args: Vec<&str> = vec!["--resync-seconds", &resync];
            if let Some(ca) = &ca_arg {
                args.extend(["--ca-file", ca]);
            }
            args.extend(extra.split_whitespace());
            // OMO_BENCH_LOG: the operator's RUST_LOG, to see what a run did.
            let log = env("OMO_BENCH_LOG");
            let envs: Vec<(&str, &str)> = log.iter().map(|l| ("RUST_LOG", l.as_str())).collect();
            Running::Ours(Operator::start_bin(bin, &sim.url(), dir, &args, &envs))
        }
        Kind::Peer { bin, args } => {
            let kubeconfig = dir.join("kubeconfig");
            sim.write_kubeconfig(
                &kubeconfig,
                ca_arg.as_ref().map(Path::new),
                Some(PEER_TOKEN),
            )
            .unwrap();
            let log = dir.join("peer.log");
            let child = Command::new(bin)
                .args(args)
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start the peer {bin}: {e}"));
            Running::Peer(child, log)
        }
    }
}

/// The idle window: CPU a minute, the largest burst (sampled every
/// 100 ms; a burst ends at the first quiet sample) and the requests made.
fn idle(sim: &Sim, p: &Running, window: Duration) -> (f64, u64, u64) {
    let requests0 = sim.requests().len();
    let (t, cpu0) = (Instant::now(), p.cpu_ms());
    let (mut last, mut burst, mut largest) = (cpu0, 0, 0);
    while t.elapsed() < window {
        std::thread::sleep(Duration::from_millis(100));
        let now = p.cpu_ms();
        burst = if now > last { burst + now - last } else { 0 };
        largest = largest.max(burst);
        last = now;
    }
    let per_min = (p.cpu_ms() - cpu0) as f64 / t.elapsed().as_secs_f64() * 60.0;
    let requests = sim.requests().len().saturating_sub(requests0) as u64;
    (per_min, largest, requests)
}

/// Requests per resource by verb since the last reset.
fn by_verb(sim: &Sim, n: usize) -> Vec<(String, f64)> {
    let requests = sim.stats_json()["byVerb"].clone();
    let mut v: Vec<(String, f64)> = requests
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(0.0) / n as f64))
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn set_all(sim: &Sim, n: usize, version: &str) {
    for i in 0..n {
        set_version(sim, &format!("m-{i}"), version);
    }
}

fn run(c: &Contestant, n: usize) -> Row {
    let sim = cluster(n);
    sim.reset_stats();
    let dir = tmpdir(&format!("bench-{n}"));
    let load_before = load();
    let small = n <= 100;
    let resync: u64 = if small { 2 } else { 15 };
    let counting = matches!(c.kind, Kind::Ours { counting: true, .. });
    let server0 = proc_cpu("self");
    let mut p = start(c, &sim, &dir, resync);
    let limit = Duration::from_secs(60 + n as u64 / 20);
    let cold = wait_serving(&sim, Instant::now(), n, V1, limit);
    let (user, system) = p.cpu();
    let conns_cold = sim.connections();
    let allocs0 = p.allocations();
    let verbs = by_verb(&sim, n);
    std::thread::sleep(Duration::from_secs(2));
    let (allocs1, passes1) = (p.allocations(), p.passes());
    let change_at = sim.clock_ms();
    set_all(&sim, n, V2);
    let set_ms = sim.clock_ms() - change_at;
    let change = wait_serving(&sim, Instant::now(), n, V2, limit);
    let server1 = proc_cpu("self");
    println!(
        "change timeline ({}, {n}): models set by {set_ms} ms; {}; connections opened cold {conns_cold}, change {}",
        c.label,
        timeline(&sim, change_at),
        sim.connections() - conns_cold
    );
    let (allocs2, passes2) = (p.allocations(), p.passes());
    if let (Some(a), Some(b)) = (passes1, passes2) {
        let (cold, change) = (a / n as f64, (b - a) / n as f64);
        println!(
            "passes per resource ({}, {n}): cold {cold:.1}, change {change:.1}",
            c.label
        );
    }
    let per = |a: Option<u64>, b: Option<u64>| Some((b? - a?) as f64 / n as f64);
    let mut row = Row {
        label: c.label.clone(),
        n,
        cold_ready_s: cold.as_secs_f64(),
        change_ready_s: change.as_secs_f64(),
        cpu_converge_ms: user + system,
        server_cpu_ms: (server1.0 + server1.1) - (server0.0 + server0.1),
        kernel_share: system as f64 / (user + system).max(1) as f64,
        allocs_cold: allocs0.map(|a| a as f64 / n as f64),
        allocs_change: per(allocs1, allocs2),
        by_verb: verbs,
        ..Row::default()
    };
    if counting {
        std::thread::sleep(Duration::from_secs(3));
        let kib = |v: Option<u64>| v.map_or("-".into(), |v| (v / 1024).to_string());
        let (live, kept) = (p.counted("live "), p.counted("kept "));
        println!(
            "memory ({}, {n}): live {} KiB, kept in caches {} KiB, RSS {:.1} MiB; {}",
            c.label,
            kib(live),
            kib(kept),
            p.rss_mib("VmRSS:"),
            memory_map(p.pid())
        );
    } else {
        measure_steady(&sim, &mut p, n, resync, &mut row);
    }
    row.peak_rss_mib = p.rss_mib("VmHWM:");
    row.load = format!("{load_before} -> {}", load());
    p.stop();
    row
}

/// Idle CPU and RSS, change → patch latency and (ours) the live view.
///
/// The idle window starts one resync period after all are Ready. Until
/// then, the first resync passes once more each resource whose last pass
/// wrote (its own write's watch event wakes nothing: the cache holds the
/// write already); the peer's watch events run those passes during its
/// convergence. That phase is printed on its own (`settle`), so the idle
/// window holds only what recurs.
fn measure_steady(sim: &Sim, p: &mut Running, n: usize, resync_s: u64, row: &mut Row) {
    let small = n <= 100;
    let (cpu0, passes0) = (p.cpu_ms(), p.passes());
    std::thread::sleep(Duration::from_secs(resync_s + 1));
    let passes = p.passes();
    let settle_passes = match (passes0, passes) {
        (Some(a), Some(b)) => format!(", {:.0} passes", b - a),
        _ => String::new(),
    };
    row.settle_cpu_ms = p.cpu_ms() - cpu0;
    println!(
        "settle ({}, {n}): {} ms of CPU in the {} s after all were Ready{settle_passes}",
        row.label,
        row.settle_cpu_ms,
        resync_s + 1
    );
    let window = env("OMO_BENCH_IDLE_S")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if small { 4 } else { 120 });
    let (per_min, burst, requests) = idle(sim, p, Duration::from_secs(window));
    if let (Some(a), Some(b)) = (passes, p.passes()) {
        // The passes of the window: none while nothing changes (a resync
        // passes only what a change since left unsettled).
        println!(
            "idle passes ({}, {n}): {:.0} in {window} s",
            row.label,
            b - a
        );
    }
    row.idle_cpu_ms_per_min = per_min;
    row.idle_burst_ms = burst;
    row.idle_requests = requests;
    row.steady_rss_mib = p.rss_mib("VmRSS:");
    println!("memory ({}, {n}): {}", row.label, memory_map(p.pid()));
    (row.patch_p50_ms, row.patch_p99_ms) = change_to_patch(sim, n);
    if let Running::Ours(op) = p {
        row.view = Some(view_cost(sim, op, n));
    }
}

/// Where the resident memory is, from `/proc/PID/smaps`: the binary's own
/// pages, the brk heap, and anonymous mappings split by size (musl's
/// allocator groups and single large blocks below 1 MiB; thread stacks and
/// larger blocks above), each as resident KiB and count.
fn memory_map(pid: u32) -> String {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .expect("the contestant's /proc/PID/smaps");
    // (resident KiB, mappings) for: file, [heap], anon < 1 MiB, anon >= 1 MiB, other.
    let mut sums = [(0u64, 0u32); 5];
    let mut class = 4usize;
    let kib = |l: &str| {
        l.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
    };
    for l in smaps.lines() {
        let mut f = l.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let name = f.nth(4).unwrap_or("");
            class = match name {
                "" => 2,
                "[heap]" => 1,
                n if n.starts_with('/') => 0,
                _ => 4,
            };
        } else if first == "Size:" {
            if class == 2 && kib(l).unwrap_or(0) >= 1024 {
                class = 3;
            }
        } else if first == "Rss:" {
            sums[class].0 += kib(l).unwrap_or(0);
            sums[class].1 += 1;
        }
    }
    let names = ["file", "[heap]", "anon <1 MiB", "anon >=1 MiB", "other"];
    let parts: Vec<String> = names
        .iter()
        .zip(sums)
        .map(|(name, (rss, count))| format!("{name} {rss} KiB in {count}"))
        .collect();
    parts.join(", ")
}

/// Spec change → Deployment patch, for up to 100 models changed one at a
/// time 20 ms apart: p50 and p99 in ms.
/// When, after `from` (ms), the writes of a change went out: half and all
/// of the Deployment patches, and the last status write.
fn timeline(sim: &Sim, from: u64) -> String {
    let log = sim.requests();
    let after = |f: &dyn Fn(&str, &str) -> bool| -> Vec<u64> {
        log.iter()
            .filter(|r| r.at_ms >= from && f(&r.method, &r.path))
            .map(|r| r.at_ms - from)
            .collect()
    };
    let deps = after(&|m, p| m == "PATCH" && p.contains("/deployments/"));
    let status = after(&|m, p| m == "PATCH" && p.ends_with("/status"));
    let nth = |v: &[u64], q: usize| v.get(v.len() * q / 100).or(v.last()).copied().unwrap_or(0);
    format!(
        "Deployments patched 50% {} ms, all {} ms ({}); status writes {}, last {} ms",
        nth(&deps, 50),
        deps.last().copied().unwrap_or(0),
        deps.len(),
        status.len(),
        status.last().copied().unwrap_or(0),
    )
}

fn change_to_patch(sim: &Sim, n: usize) -> (u64, u64) {
    let picks: Vec<usize> = (0..n).step_by((n / 100).max(1)).take(100).collect();
    let mut changed = Vec::new();
    for &i in &picks {
        changed.push((i, sim.clock_ms()));
        set_version(sim, &format!("m-{i}"), V1);
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

/// What [`VIEWERS`] live-view streams add to the operator while ten models
/// change version (a message each to every viewer): RSS per viewer (KiB)
/// and CPU per minute (ms), against the same changes unwatched.
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
        let (cpu0, t) = (
            op.cpu_ms().expect("the operator's CPU in /proc"),
            Instant::now(),
        );
        for i in (0..n).step_by((n / 10).max(1)).take(10) {
            set_version(sim, &format!("m-{i}"), version);
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(1000));
        let cpu = (op.cpu_ms().expect("the operator's CPU in /proc") - cpu0) as f64
            / t.elapsed().as_secs_f64()
            * 60.0;
        let kib = op.rss_kib().expect("the operator's RSS in /proc") as f64;
        drop(conns);
        (cpu, kib)
    };
    let (cpu_alone, rss_alone) = window(0, V2);
    let (cpu_watched, rss_watched) = window(VIEWERS, V1);
    (
        (rss_watched - rss_alone) / VIEWERS as f64,
        (cpu_watched - cpu_alone).max(0.0),
    )
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// One row of the main table.
fn line(r: &Row) -> String {
    let verbs: Vec<String> = r
        .by_verb
        .iter()
        .map(|(v, k)| format!("{v} {k:.2}"))
        .collect();
    format!(
        "| {} | {} | {:.1} s | {:.1} s | {:.2} s ({:.0}%) | {:.2} s | {} / {} | {:.1} MiB | {:.1} MiB | {:.2} s | {} ms | {} | {}/{} ms | {} | {} |",
        r.n,
        r.label,
        r.cold_ready_s,
        r.change_ready_s,
        r.cpu_converge_ms as f64 / 1000.0,
        r.kernel_share * 100.0,
        r.server_cpu_ms as f64 / 1000.0,
        opt(r.allocs_cold),
        opt(r.allocs_change),
        r.peak_rss_mib,
        r.steady_rss_mib,
        r.idle_cpu_ms_per_min / 1000.0,
        r.idle_burst_ms,
        r.idle_requests,
        r.patch_p50_ms,
        r.patch_p99_ms,
        verbs.join(", "),
        r.load
    )
}

fn print(rows: &[Row]) {
    println!(
        "| resources | operator | cold → all Ready | change → all Ready | CPU to converge (kernel) | kubesim's CPU meanwhile | allocations per resource (cold / change) | peak RSS | steady RSS | idle CPU a minute | largest idle burst | idle requests | change→patch p50/p99 | requests per resource (cold) | load 1/5/15 |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in rows {
        println!("{}", line(r));
    }
    println!("| resources | operator | live view, {VIEWERS} viewers, 10 changes: RSS added | CPU added by all of them |");
    println!("| --- | --- | --- | --- |");
    for r in rows {
        if let Some((kib, cpu)) = r.view {
            let all = kib * VIEWERS as f64 / 1024.0;
            println!(
                "| {} | {} | {all:.1} MiB in all, {kib:.0} KiB a viewer | {cpu:.0} ms a minute |",
                r.n, r.label
            );
        }
    }
}

#[test]
fn bench() {
    let sizes: Vec<usize> = env("OMO_BENCH_RESOURCES")
        .unwrap_or_else(|| "100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // Rounds a size, in the order of the sizes; the last stands for the rest.
    let rounds: Vec<usize> = env("OMO_BENCH_ROUNDS").map_or(vec![1], |r| {
        let counts = r.split(',').map(|c| c.trim().parse().ok());
        counts
            .collect::<Option<_>>()
            .expect("OMO_BENCH_ROUNDS: counts, as 3,2")
    });
    let mut rows = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        for r in 0..*rounds.get(i).or(rounds.last()).unwrap_or(&1) {
            for c in rounds::order(contestants(), r) {
                let row = run(&c, n);
                // At once too, so that a run cut short keeps what it measured.
                eprintln!("measured: round {r}: {}", line(&row));
                rows.push(row);
            }
        }
    }
    assert!(
        !rows.is_empty(),
        "nothing measured: OMO_BENCH_RESOURCES names no size"
    );
    print(&rows);
    rounds::print(&rows, rounds::peer_label(&contestants()).as_deref());
    // Only that it measured something: budgets are not asserted here.
    for r in &rows {
        assert!(r.cold_ready_s > 0.0 && r.peak_rss_mib > 0.0, "{r:?}");
        assert!(r.by_verb.iter().any(|(v, _)| v == "patch"), "{r:?}");
    }
    let instructions: usize = env("OMO_BENCH_INSTRUCTIONS").map_or(100, |n| {
        n.parse().expect("OMO_BENCH_INSTRUCTIONS: a size, or 0")
    });
    if instructions > 0 {
        instructions::print(&contestants(), instructions);
    }
    let syscalls: usize = env("OMO_BENCH_SYSCALLS")
        .map_or(0, |n| n.parse().expect("OMO_BENCH_SYSCALLS: a size, or 0"));
    if syscalls > 0 {
        instructions::print_syscalls(&contestants(), syscalls);
    }
}
