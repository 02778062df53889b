//! The side-by-side benchmark on the real control plane (`scripts/bench.sh
//! --cluster real`): each contestant started cold over N existing
//! OpenMedModels, each with its own one-replica Deployment, on a fresh plane
//! of its own (kube-controller-manager's API limits and syncs raised, so it
//! does not bound the run); then one version change for all. Measured from
//! outside: the contestant's and kube-apiserver's CPU and memory (`/proc`),
//! and the contestant's requests from the audit log. Both run as the
//! operator's ServiceAccount. Budgets are not asserted (docs/performance.md).
//!
//! - `OMO_BENCH_RESOURCES=1000`: the size (unset: the test says it is
//!   skipped; it is no part of the suite);
//! - `OMO_OPERATOR_BIN`: our binary; `OMO_BENCH_PEER_BIN` and
//!   `OMO_BENCH_PEER_ARGS`: the kube-rs peer (`../shared/peer-kube-rs`);
//! - `OMO_BENCH_ROUNDS`: rounds, contestants in alternating order, then
//!   each column's median and spread and ours over the peer's.

use crate::harness::{tmpdir, Operator};
use crate::plane::{OwnPlane, Plane};
use crate::story::{Story, V1, V2};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running contestant.
enum Running {
    Ours(Operator),
    Peer(Child),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Ours(op) => op.pid(),
            Running::Peer(c) => c.id(),
        }
    }
}

/// User + system CPU of process `pid`, in ms, and its resident set in MiB;
/// a figure read from nothing would print as zero, so a failed read fails.
fn usage(pid: u32) -> (u64, f64) {
    let read = |file: &str| {
        let path = format!("/proc/{pid}/{file}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        (path, text)
    };
    let (user, system) = crate::harness::process_cpu_ms(&pid.to_string())
        .unwrap_or_else(|| panic!("no CPU times in /proc/{pid}/stat"));
    let (path, status) = read("status");
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{path}: no VmRSS"));
    (user + system, rss_kib / 1024.0)
}

/// The pid `up` recorded for a component of the plane in `dir`.
fn component_pid(dir: &Path, component: &str) -> u32 {
    std::fs::read_to_string(dir.join(format!("{component}.pid")))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid for {component} in {}", dir.display()))
}

/// How many of the models serve `version`, Ready.
fn serving(plane: &Plane, ns: &str, version: &str) -> usize {
    let path = format!("/apis/openmed.ai/v1alpha1/namespaces/{ns}/openmedmodels");
    let (_, list) = plane.request("GET", &path, None);
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|m| m["status"]["phase"] == "Ready" && m["status"]["activeVersion"] == version)
        .count()
}

/// Time until all `n` serve `version`; a run that does not converge fails.
fn wait_all(plane: &Plane, ns: &str, n: usize, version: &str, limit: Duration) -> Duration {
    let t = Instant::now();
    while serving(plane, ns, version) < n {
        assert!(
            t.elapsed() < limit,
            "only {} of {n} serve {version} after {limit:?}",
            serving(plane, ns, version)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    t.elapsed()
}

/// One row: what a contestant did on a plane of its own.
struct Row {
    label: String,
    cold_s: f64,
    change_s: f64,
    cpu_s: f64,
    rss_mib: f64,
    api_cpu_s: f64,
    api_rss_mib: f64,
    requests: BTreeMap<String, f64>,
}

fn start(label: &str, plane: &Plane, ns: &str, dir: &Path) -> Running {
    if label == "ours" {
        let bin = crate::operator_bin();
        let token = dir.join("sa-token");
        std::fs::write(&token, plane.token("openmed-system", "openmed-operator")).expect("token");
        let ca = plane.ca.to_str().unwrap_or_default().to_string();
        let args = [
            "--token-file",
            token.to_str().unwrap_or_default(),
            "--ca-file",
            &ca,
            "--namespace",
            ns,
        ];
        return Running::Ours(Operator::start_bin(&bin, &plane.server, dir, &args, &[]));
    }
    let bin = std::env::var("OMO_BENCH_PEER_BIN").expect("OMO_BENCH_PEER_BIN");
    let kubeconfig = dir.join("kubeconfig");
    let token = plane.token("openmed-system", "openmed-operator");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: {}, certificate-authority: {}}}\n\
         users:\n- name: u\n  user: {{token: {token}}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: {ns}}}\n\
         current-context: c\n",
        plane.server,
        plane.ca.display()
    );
    std::fs::write(&kubeconfig, config).expect("kubeconfig");
    let args: Vec<String> = std::env::var("OMO_BENCH_PEER_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let child = Command::new(&bin)
        .args(&args)
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("peer.log")).expect("peer log"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the peer {bin}: {e}"));
    Running::Peer(child)
}

/// One contestant at size `n` on a fresh plane.
fn run(label: &str, n: usize) -> Row {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/control-plane-bench-{label}"));
    let _own = OwnPlane::up_with(&dir, "", &[("OMO_CP_KCM_QPS", "400")]);
    let plane = Plane::open(&dir);
    crate::install::apply(&plane).expect("install");
    let ns = "bench";
    let st = Story::new(&plane, ns);
    for i in 0..n {
        st.deployment(&format!("svc-{i}"), 1, true);
        let m = json!({"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel",
            "metadata": {"name": format!("m-{i}"), "namespace": ns},
            "spec": {"family": "PII", "version": V1, "tier": "Small", "replicas": 1,
                     "rolloutStrategy": {"type": "RollingUpdate", "progressDeadlineSeconds": 600},
                     "targetRef": {"name": format!("svc-{i}")}}});
        crate::cluster::Cluster::create(&plane, m).expect("a model");
    }
    let work = tmpdir(&format!("bench-real-{label}"));
    let api = component_pid(&dir, "apiserver");
    let (api_cpu0, _) = usage(api);
    let audited0 = plane.audit_events().len();
    let limit = Duration::from_secs(120 + n as u64 / 5);
    let mut p = start(label, &plane, ns, &work);
    let cold = wait_all(&plane, ns, n, V1, limit);
    for i in 0..n {
        st.patch_model(&format!("m-{i}"), json!({"spec": {"version": V2}}));
    }
    let change = wait_all(&plane, ns, n, V2, limit);
    std::thread::sleep(Duration::from_secs(5));
    let (cpu, rss) = usage(p.pid());
    let (api_cpu1, api_rss) = usage(api);
    let mut requests = BTreeMap::new();
    // Every request of the contestant's ServiceAccount (the one audited
    // identity on its plane): the peer watches all namespaces, ours one.
    for e in plane.audit_events().into_iter().skip(audited0) {
        // By verb and resource, so that a difference in requests is
        // named: "patch openmedmodels/status".
        let what = &e["objectRef"];
        let resource = match (what["resource"].as_str(), what["subresource"].as_str()) {
            (Some(r), Some(s)) => format!(" {r}/{s}"),
            (Some(r), None) => format!(" {r}"),
            _ => String::new(),
        };
        let verb = e["verb"].as_str().unwrap_or("");
        *requests.entry(format!("{verb}{resource}")).or_insert(0.0) += 1.0 / n as f64;
    }
    match &mut p {
        Running::Ours(op) => op.assert_clean_exit(),
        Running::Peer(c) => {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    Row {
        label: label.into(),
        cold_s: cold.as_secs_f64(),
        change_s: change.as_secs_f64(),
        cpu_s: cpu as f64 / 1000.0,
        rss_mib: rss,
        api_cpu_s: (api_cpu1 - api_cpu0) as f64 / 1000.0,
        api_rss_mib: api_rss,
        requests,
    }
}

#[test]
fn side_by_side_on_the_real_control_plane() {
    let Some(n) = std::env::var("OMO_BENCH_RESOURCES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        eprintln!(
            "skipped: OMO_BENCH_RESOURCES is not set (scripts/bench.sh --cluster real sets it)"
        );
        return;
    };
    let _plane = crate::exclusive();
    let rounds: usize = std::env::var("OMO_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut rows = Vec::new();
    let mut contestants = vec!["ours"];
    if std::env::var_os("OMO_BENCH_PEER_BIN").is_some_and(|p| !p.is_empty()) {
        contestants.push("peer");
    }
    for r in 0..rounds {
        let mut order = contestants.clone();
        if r % 2 == 1 {
            order.reverse();
        }
        for label in order {
            let row = run(label, n);
            println!(
                "measured: round {r} {label}: cold {:.1} s, change {:.1} s, CPU {:.2} s, RSS {:.1} MiB, \
                 kube-apiserver CPU {:.1} s, RSS {:.0} MiB, requests/resource {:?}",
                row.cold_s, row.change_s, row.cpu_s, row.rss_mib, row.api_cpu_s, row.api_rss_mib, row.requests
            );
            rows.push(row);
        }
    }
    println!("| contestant | N | cold → all Ready | change → all Ready | CPU to converge | RSS after | kube-apiserver CPU | kube-apiserver RSS | requests per resource |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let reqs: Vec<String> = r
            .requests
            .iter()
            .map(|(v, k)| format!("{k:.2} {v}"))
            .collect();
        println!(
            "| {} | {n} | {:.1} s | {:.1} s | {:.2} s | {:.1} MiB | {:.1} s | {:.0} MiB | {} |",
            r.label,
            r.cold_s,
            r.change_s,
            r.cpu_s,
            r.rss_mib,
            r.api_cpu_s,
            r.api_rss_mib,
            reqs.join(", ")
        );
    }
    medians(&rows, n);
}

/// A column of the medians: its name and the figure of a row.
type Column = (&'static str, fn(&Row) -> f64);

/// Each column's median over the rounds, a contestant, with the lowest and
/// highest, then ours over the peer's.
fn medians(rows: &[Row], n: usize) {
    let columns: [Column; 6] = [
        ("cold → all Ready (s)", |r| r.cold_s),
        ("change → all Ready (s)", |r| r.change_s),
        ("CPU to converge (s)", |r| r.cpu_s),
        ("RSS after (MiB)", |r| r.rss_mib),
        ("kube-apiserver CPU (s)", |r| r.api_cpu_s),
        ("kube-apiserver RSS (MiB)", |r| r.api_rss_mib),
    ];
    let median = |label: &str, f: fn(&Row) -> f64| {
        crate::harness::median(rows.iter().filter(|r| r.label == label).map(f).collect())
    };
    let heads: Vec<&str> = columns.iter().map(|c| c.0).collect();
    println!("| contestant | N | rounds | {} |", heads.join(" | "));
    println!("| --- | --- | --- |{}", " --- |".repeat(columns.len()));
    for label in ["ours", "peer"] {
        let count = rows.iter().filter(|r| r.label == label).count();
        if count == 0 {
            continue;
        }
        let cells: Vec<String> = columns
            .iter()
            .map(|&(_, f)| {
                let (m, lo, hi) = median(label, f);
                format!("{m:.2} ({lo:.2}–{hi:.2})")
            })
            .collect();
        println!(
            "| {label}, median | {n} | {count} | {} |",
            cells.join(" | ")
        );
    }
    if rows.iter().any(|r| r.label == "peer") {
        let ratios: Vec<String> = columns
            .iter()
            .map(|&(_, f)| format!("{:.2}x", median("ours", f).0 / median("peer", f).0))
            .collect();
        println!("| ours over the peer | {n} | | {} |", ratios.join(" | "));
    }
}
