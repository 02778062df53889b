//! The simulated cluster a test runs against (kubesim, with the CRD, the
//! shipped RBAC and the operator's namespace), its fixtures and its waits.

use super::*;

pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("omo-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Quick pods, a quick controller, frequent bookmarks.
pub fn fast() -> SimConfig {
    SimConfig {
        warmup: Duration::from_millis(200),
        tick: Duration::from_millis(20),
        bookmark_interval: Duration::from_millis(500),
        ..SimConfig::default()
    }
}

/// A simulator holding the OpenMedModel CRD, the namespace `NS`, and the
/// shipped RBAC: the operator started by [`Operator::start`] runs as its
/// ServiceAccount, so every end-to-end test exercises the shipped roles.
pub fn start_sim(cfg: SimConfig) -> Sim {
    let sim = Sim::start(cfg).unwrap();
    let crd: Value =
        serde_json::from_str(include_str!("../../../manifests/base/crd.json")).unwrap();
    sim.create(crd).unwrap();
    sim.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .unwrap();
    for obj in shipped_rbac(&sim) {
        sim.create(obj.clone()).unwrap();
    }
    sim.accept_service_account_token(OPERATOR_NS, "openmed-operator", OPERATOR_TOKEN);
    sim
}

/// `kubectl --server <sim> ARGS` (as an admin: no token), its output;
/// a failure fails the test with kubectl's words.
pub fn kubectl(sim: &Sim, cache: &Path, args: &[&str]) -> Vec<u8> {
    let tls = sim.ca_pem().is_some();
    let out = Command::new("kubectl")
        .args(["--server", &sim.url(), "--cache-dir"])
        .arg(cache)
        // Over TLS kubectl asks for a user unless it has a token; kubesim
        // without a token list takes any as an administrator's.
        .args(tls.then_some("--insecure-skip-tls-verify=true"))
        .args(tls.then_some("--token=kubesim-admin"))
        .args(args)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The operator's namespace in the manifests, and the token its
/// ServiceAccount has in every simulator [`start_sim`] makes.
pub const OPERATOR_NS: &str = "openmed-system";

pub const OPERATOR_TOKEN: &str = "openmed-operator-service-account-token";

/// The operator's namespace, ServiceAccount, roles and bindings, rendered
/// once from `manifests/` by kubectl (a client-side dry run of `create -k`,
/// against `sim` for discovery).
fn shipped_rbac(sim: &Sim) -> &'static [Value] {
    static RBAC: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    RBAC.get_or_init(|| {
        let repo = REPO;
        let cache = std::env::temp_dir().join(format!("omo-kube-cache-{}", std::process::id()));
        let manifests = format!("{repo}/manifests");
        let out = kubectl(
            sim,
            &cache,
            &[
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "json",
                "-k",
                &manifests,
            ],
        );
        // One JSON document per object (or a List), one after another.
        let docs = serde_json::Deserializer::from_slice(&out).into_iter::<Value>();
        let items: Vec<Value> = docs
            .map(|d| d.unwrap())
            .flat_map(|d| match d["items"].as_array() {
                Some(items) => items.clone(),
                None => vec![d],
            })
            .collect();
        let kinds = [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ];
        let mut objs: Vec<Value> = items
            .into_iter()
            .filter(|o| kinds.contains(&o["kind"].as_str().unwrap_or("")))
            .filter(|o| o["kind"] != "Namespace" || o["metadata"]["name"] == OPERATOR_NS)
            .collect();
        // Namespaces first.
        objs.sort_by_key(|o| o["kind"] != "Namespace");
        for kind in kinds {
            assert!(
                objs.iter().any(|o| o["kind"] == kind),
                "no {kind} in the manifests"
            );
        }
        objs
    })
}

/// A token of `monitoring/prometheus`, bound to the shipped
/// `openmed-operator-metrics-reader` ClusterRole: a scraper's.
pub fn metrics_scraper(sim: &Sim) -> String {
    let token = sim.service_account_token("monitoring", "prometheus");
    sim.create(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "prometheus-openmed-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "openmed-operator-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}],
    }))
    .unwrap();
    token
}

/// A simulated cluster holding Deployment `deploy` (2 replicas), and the
/// operator running against it, ready. The directory holds the operator's log.
pub fn cluster_with(
    cfg: SimConfig,
    tag: &str,
    deploy: &str,
    args: &[&str],
) -> (Sim, PathBuf, Operator) {
    let sim = start_sim(cfg);
    let dir = tmpdir(tag);
    sim.create(deployment(deploy, 2)).unwrap();
    let mut op = Operator::start(&sim.url(), &dir, args);
    op.wait_ready();
    (sim, dir, op)
}

pub fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name, "openmed.ai/managed-target": "true"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "openmed-service", "image": "ghcr.io/openmed/openmed-service:1.4",
                     "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""}]},
                    {"name": "proxy", "image": "envoy:1.30"}
                ]},
            },
        },
    })
}

pub fn model(name: &str, target: &str, version: &str, deadline: i64) -> Value {
    json!({
        "apiVersion": MODEL.0, "kind": MODEL.1,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "family": "PII", "version": version, "tier": "Small", "replicas": 2,
            "rolloutStrategy": {"type": "RollingUpdate", "progressDeadlineSeconds": deadline},
            "targetRef": {"name": target},
        },
    })
}

pub fn status(sim: &Sim, name: &str) -> Value {
    sim.object("openmed.ai", "openmedmodels", NS, name)
        .map(|m| m["status"].clone())
        .unwrap_or(Value::Null)
}

pub fn ready_reason(s: &Value) -> String {
    s["conditions"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Polls `probe` until `done` holds, and returns what it saw; on timeout the
/// panic shows the last observation.
pub fn wait_for<T: std::fmt::Debug>(
    what: &str,
    mut probe: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let t = Instant::now();
    loop {
        let last = probe();
        if done(&last) {
            return last;
        }
        if t.elapsed() >= WAIT {
            panic!("timed out waiting for {what}; last seen: {last:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    wait_for(what, &mut f, |ok| *ok);
}

pub fn wait_phase(sim: &Sim, name: &str, phase: &str, reason: &str) -> Value {
    wait_for(
        &format!("{name} to reach {phase}/{reason}"),
        || status(sim, name),
        |s| s["phase"] == phase && (reason.is_empty() || ready_reason(s) == reason),
    )
}

/// Ready, and serving `version` as the desired version.
pub fn wait_serving(sim: &Sim, name: &str, version: &str) -> Value {
    wait_for(
        &format!("{name} to serve {version}"),
        || status(sim, name),
        |s| {
            s["phase"] == "Ready" && s["desiredVersion"] == version && s["activeVersion"] == version
        },
    )
}

pub fn set_version(sim: &Sim, name: &str, version: &str) {
    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        name,
        &json!({"spec": {"version": version}}),
    )
    .unwrap();
}

pub fn events(sim: &Sim, name: &str) -> Vec<String> {
    let mut evs: Vec<(String, String)> = sim
        .objects("", "events", Some(NS))
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["metadata"]["name"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    evs.sort();
    evs.into_iter().map(|(_, r)| r).collect()
}

/// Events are written after the status patch that announces them, so a test
/// that has just seen a status must wait for the Event rather than read once.
pub fn wait_event(sim: &Sim, name: &str, reason: &str) {
    wait_for(
        &format!("a {reason} Event for {name}"),
        || events(sim, name),
        |evs| evs.iter().any(|e| e == reason),
    );
}

pub fn preload(sim: &Sim, deploy: &str) -> Value {
    let d = sim.object("apps", "deployments", NS, deploy).unwrap();
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| {
            e.iter()
                .find(|v| v["name"] == "OPENMED_SERVICE_PRELOAD_MODELS")
        })
        .cloned()
        .unwrap_or(Value::Null)
}

/// The write requests the simulator has counted since its last reset.
pub fn writes(sim: &Sim) -> u64 {
    ["create", "update", "patch", "delete", "deletecollection"]
        .iter()
        .map(|v| sim.count(Some(v), None))
        .sum()
}

/// The value of one sample in a Prometheus text exposition.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// ---- Helpers for tests that use several namespaces (tests/soak.rs). ----

/// Creates namespace `ns`; one that already exists is fine.
pub fn create_namespace(sim: &Sim, ns: &str) {
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    if let Err(e) = sim.create(obj) {
        assert!(e.contains("already exists"), "namespace {ns}: {e}");
    }
}

/// [`deployment`] in namespace `ns`.
pub fn deployment_in(ns: &str, name: &str, replicas: i64) -> Value {
    let mut d = deployment(name, replicas);
    d["metadata"]["namespace"] = json!(ns);
    d
}

/// The status of the OpenMedModel `ns/name` (Null if it does not exist).
pub fn status_in(sim: &Sim, ns: &str, name: &str) -> Value {
    sim.object("openmed.ai", "openmedmodels", ns, name)
        .map(|m| m["status"].clone())
        .unwrap_or(Value::Null)
}
