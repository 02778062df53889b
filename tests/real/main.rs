//! The operator's story on the real control plane: etcd, kube-apiserver and
//! kube-controller-manager built from their Go modules, with the kubelet
//! stand-in (`scripts/control-plane.sh up`), the operator running as its
//! ServiceAccount under the shipped RBAC. Each scenario of the story also
//! runs on kubesim, and the two are compared (the differential, `diff.rs`).
//!
//! It runs against the plane `OMO_CONTROL_PLANE` names; scripts/test.sh
//! builds and starts one and sets it. A plain `cargo test` without it skips
//! every test of this target and says so. The operator under test is
//! `OMO_OPERATOR_BIN` (scripts/test.sh: the static musl build), else the
//! debug build.

use openmed_test_support as harness;

mod access;
mod bench;
mod cluster;
mod diff;
mod faults;
mod ha;
mod helm;
mod install;
#[path = "../soak/observe.rs"]
#[allow(dead_code)]
mod observe;
#[path = "../soak/operations.rs"]
#[allow(dead_code)]
mod operations;
mod outage;
mod plane;
#[path = "../soak/pool.rs"]
mod pool;
mod scenarios;
mod seeded;
mod story;
mod tenant;

use cluster::Cluster;
use harness::{tmpdir, wait_until, Operator};
use plane::Plane;
use pool::*;
use std::path::Path;
use story::Story;

/// The operator binary under test.
pub fn operator_bin() -> String {
    std::env::var("OMO_OPERATOR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_openmed-operator").to_string())
}

/// Tests that stop the plane's components or hold its one Lease take it
/// alone; the others share it.
static PLANE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The plane, shared with the other tests of this process.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    PLANE.read().unwrap_or_else(|p| p.into_inner())
}

/// The plane alone: no other test of this process runs meanwhile.
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    PLANE.write().unwrap_or_else(|p| p.into_inner())
}

/// The operator on the real plane, watching `ns` only, as its ServiceAccount
/// with a token from the TokenRequest API.
pub fn operator_on_real(plane: &Plane, ns: &str, dir: &Path, extra: &[&str]) -> Operator {
    operator_on_real_as(plane, ns, dir, extra, "")
}

/// [`operator_on_real`] as pod `pod` (its identity in a Lease and in its
/// User-Agent), when not empty.
pub fn operator_on_real_as(
    plane: &Plane,
    ns: &str,
    dir: &Path,
    extra: &[&str],
    pod: &str,
) -> Operator {
    let token = dir.join("sa-token");
    std::fs::write(&token, plane.token("openmed-system", "openmed-operator"))
        .expect("writing the token");
    let mut args = vec![
        "--token-file",
        token.to_str().unwrap_or_default(),
        "--ca-file",
        plane.ca.to_str().unwrap_or_default(),
        "--namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    let env: Vec<(&str, &str)> = if pod.is_empty() {
        vec![]
    } else {
        vec![("POD_NAME", pod)]
    };
    let mut op = Operator::start_bin(&operator_bin(), &plane.server, dir, &args, &env);
    op.wait_ready();
    op
}

/// Runs `scenario` on kubesim and on the real plane at once, each with its
/// own operator, and fails on any difference a user would see.
fn on_both(name: &str, scenario: fn(&mut Story)) {
    on_both_in(name, &[], scenario);
}

/// [`on_both`] with namespaces `{ns}-{extra}` besides the story's own `ns`,
/// all watched by both operators.
fn on_both_in(name: &str, extra: &[&str], scenario: fn(&mut Story)) {
    let Some(plane) = plane::from_env() else {
        return;
    };
    let _plane = shared();
    install::once(&plane);
    let ns = format!("{name}-{}", std::process::id());
    let mut namespaces = vec![ns.clone()];
    namespaces.extend(extra.iter().map(|e| format!("{ns}-{e}")));
    let (real_dir, sim_dir) = (
        tmpdir(&format!("{name}-real")),
        tmpdir(&format!("{name}-sim")),
    );
    let sim = harness::start_sim(harness::fast());
    let leg = |c: &dyn Cluster, dir: &Path| {
        let mut st = Story::new(c, &ns);
        let mut args = Vec::new();
        for n in &namespaces[1..] {
            c.create(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
                .unwrap_or_else(|e| panic!("creating namespace {n} on {}: {e}", c.name()));
            args.extend(["--namespace", n.as_str()]);
        }
        let mut op = match c.name() {
            "real" => operator_on_real(&plane, &ns, dir, &args),
            _ => {
                args.extend(["--namespace", ns.as_str()]);
                let mut op = Operator::start(&sim.url(), dir, &args);
                op.wait_ready();
                op
            }
        };
        scenario(&mut st);
        if c.name() == "real" {
            // The metrics of the story just told pass Prometheus's linter.
            let (code, scrape) = op.http_get("/metrics");
            assert_eq!(code, 200, "{scrape}");
            assert!(
                scrape.contains("openmed_operator_reconciles_total"),
                "{scrape}"
            );
            if let Err(lint) = plane.check_metrics(&scrape) {
                panic!("promtool check metrics on the operator's /metrics:\n{lint}");
            }
        }
        op.assert_clean_exit();
        let requests = diff::request_counts(
            &namespaces
                .iter()
                .flat_map(|n| c.requests_of("openmed-operator", n))
                .filter(|(_, r)| !r.is_empty() && !r.starts_with("leases"))
                .collect::<Vec<_>>(),
        );
        (st.checkpoints, requests)
    };
    let (real, simulated) = std::thread::scope(|s| {
        let real = s.spawn(|| leg(&plane, &real_dir));
        let simulated = s.spawn(|| leg(&sim, &sim_dir));
        let join = |h: std::thread::ScopedJoinHandle<'_, _>| {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        };
        (join(real), join(simulated))
    });
    assert!(
        !real.0.is_empty() && !real.1.is_empty() && !simulated.1.is_empty(),
        "nothing to compare: {} checkpoints, {} and {} kinds of request",
        real.0.len(),
        simulated.1.len(),
        real.1.len()
    );
    let mut rows = diff::rows(name, &simulated.0, &real.0);
    rows.extend(diff::request_rows(name, &simulated.1, &real.1));
    let table = diff::table(&rows);
    eprintln!(
        "differential, {name} ({} checkpoints, {} rows):\n{table}",
        real.0.len(),
        rows.len()
    );
    assert!(
        !rows.iter().any(diff::differs),
        "kubesim and the real control plane differ:\n{table}"
    );
}

#[test]
fn lifecycle_on_both_clusters() {
    on_both("lifecycle", scenarios::lifecycle);
}

#[test]
fn a_deployment_not_opted_in_on_both_clusters() {
    on_both("opt-in", scenarios::not_opted_in);
}

#[test]
fn an_autoscaler_on_both_clusters() {
    on_both("autoscaled", scenarios::autoscaled);
}

#[test]
fn a_rollout_restart_mid_rollout_on_both_clusters() {
    on_both("restart", scenarios::restarted_mid_rollout);
}

/// The soak's user operations for a fixed seed (`seeded.rs`), over three
/// namespaces and three names.
#[test]
fn the_soaks_operations_of_a_fixed_seed_on_both_clusters() {
    on_both_in("seeded", seeded::extra_namespaces(), seeded::seeded);
}

/// A namespace deleted with models in it terminates: the operator releases
/// its finalizers, the namespace controller deletes the rest, the stand-in
/// finishes the pods (upstream `namespace_deleter.go`, `deleteAllContent`).
#[test]
fn a_namespace_deleted_with_models_in_it_goes() {
    let Some(plane) = plane::from_env() else {
        return;
    };
    let _plane = shared();
    install::once(&plane);
    let ns = format!("doomed-{}", std::process::id());
    let dir = tmpdir("doomed");
    let mut st = Story::new(&plane, &ns);
    let mut op = operator_on_real(&plane, &ns, &dir, &[]);
    for name in ["a", "b"] {
        st.deployment(name, 1, true);
        st.model(name, name, story::V1, 600);
    }
    for name in ["a", "b"] {
        st.wait_serving(name, story::V1);
    }
    // The model's two replicas, made by the real ReplicaSet controller, bound and made Ready by the stand-in.
    assert_eq!(scenarios::ready_pods(&st, "a"), 2, "pods Ready for model a");
    st.checkpoints.clear();
    let (code, body) = plane.request("DELETE", &format!("/api/v1/namespaces/{ns}"), None);
    assert_eq!(code, 200, "{body}");
    wait_until("the namespace to go", || {
        let (code, _) = plane.request("GET", &format!("/api/v1/namespaces/{ns}"), None);
        code == 404
    });
    op.assert_clean_exit();
}
