//! The end-to-end harness: the real operator binary as a child process,
//! an in-process simulated cluster (kubesim) with the CRD and namespace in
//! place, and the fixtures and waits the end-to-end tests share. Included by
//! `tests/e2e/main.rs` as `#[path = "../common/operator.rs"] mod harness;`
//! (and by the other process-level tests as `"common/operator.rs"`; not part
//! of `common/mod.rs`, which holds the pure core's fixtures).
#![allow(dead_code)]

use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const NS: &str = "openmed";
pub const V1: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1";
pub const V2: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2";
pub const BAD: &str = "OpenMed/OpenMed-PII-unloadable-v3";
pub const MODEL: (&str, &str) = ("openmed.ai/v1alpha1", "OpenMedModel");
pub const WAIT: Duration = Duration::from_secs(40);

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
    let crd: Value = serde_json::from_str(include_str!("../../manifests/base/crd.json")).unwrap();
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
        let repo = env!("CARGO_MANIFEST_DIR");
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

pub struct Operator {
    child: Child,
    log: PathBuf,
    health: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Operator {
    pub fn start(sim_url: &str, dir: &Path, extra: &[&str]) -> Operator {
        Operator::start_with_env(sim_url, dir, extra, &[])
    }

    /// [`Operator::start`] with extra environment variables.
    pub fn start_with_env(
        sim_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        // OMO_OPERATOR_BIN runs another build, e.g. the static release one
        // for figures: OMO_OPERATOR_BIN=target/static/... cargo test --test e2e a_converged -- --nocapture
        let bin = std::env::var("OMO_OPERATOR_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_openmed-operator").to_string());
        Operator::start_bin(&bin, sim_url, dir, extra, env)
    }

    /// [`Operator::start_with_env`] with the binary at `bin`.
    pub fn start_bin(
        bin: &str,
        sim_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let mut cmd = Command::new(bin);
        let log = dir.join(format!("operator-{:x}.log", rand_tag()));
        let f = std::fs::File::create(&log).unwrap();
        // The ServiceAccount's token, unless the test brings its own.
        if !extra.contains(&"--token-file") {
            // One file per process: tests start several at once in a dir.
            let token = dir.join(format!("service-account-token-{:x}", rand_tag()));
            std::fs::write(&token, OPERATOR_TOKEN).unwrap();
            cmd.arg("--token-file").arg(token);
        }
        // Plain, open metrics on a port of their own, unless the test is
        // about how metrics are served.
        if !extra.iter().any(|a| a.starts_with("--metrics-")) {
            cmd.args(["--metrics-addr", "127.0.0.1:0", "--metrics-secure=false"]);
        }
        // The live view on a port of its own (many operators run at once).
        if !extra.iter().any(|a| a.starts_with("--ui-addr")) {
            cmd.args(["--ui-addr", "127.0.0.1:0"]);
        }
        let child = cmd
            .args([
                "--server",
                sim_url,
                "--health-addr",
                "127.0.0.1:0",
                "--resync-seconds",
                "2",
            ])
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap();
        Operator {
            child,
            log,
            health: None,
            metrics: None,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn health_addr(&mut self) -> SocketAddr {
        if self.health.is_none() {
            self.health = Some(self.address_in_log("health on http://"));
        }
        self.health.unwrap()
    }

    /// Where the live view is served.
    pub fn view_addr(&self) -> SocketAddr {
        self.address_in_log("live view on http")
    }

    /// Where /metrics is served (plain or TLS).
    pub fn metrics_addr(&mut self) -> SocketAddr {
        if self.metrics.is_none() {
            self.metrics = Some(self.address_in_log("metrics on http"));
        }
        self.metrics.unwrap()
    }

    /// The address the start line gives after `marker`.
    fn address_in_log(&self, marker: &str) -> SocketAddr {
        let mut found = None;
        wait_until(&format!("{marker:?} in the log"), || {
            found = self
                .log()
                .split(marker)
                .nth(1)
                .map(|r| {
                    r.trim_start_matches("s://")
                        .trim_start_matches("://")
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                        .collect::<String>()
                })
                .and_then(|a| a.parse().ok());
            found.is_some()
        });
        found.unwrap()
    }

    /// A plain GET: /metrics from the metrics address, the rest from the
    /// health address.
    pub fn http_get(&mut self, path: &str) -> (u16, String) {
        let addr = if path.starts_with("/metrics") {
            self.metrics_addr()
        } else {
            self.health_addr()
        };
        http_get_at(addr, path)
    }

    pub fn wait_ready(&mut self) {
        wait_until("/readyz", || self.http_get("/readyz").0 == 200);
    }
}

/// A plain HTTP/1.0 GET: (status, body); status 0 when nothing came back.
pub fn http_get_at(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A server that closes at once answers nothing: status 0.
    if write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return (0, String::new());
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status_of(&out), body)
}

/// The status code of an HTTP response (0 when there is none).
pub fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

impl Operator {
    /// SIGTERM, then the exit status (None if it did not exit in time).
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let t = Instant::now();
        while t.elapsed() < within {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM must end the operator with exit 0 within a few seconds.
    pub fn assert_clean_exit(&mut self) {
        match self.terminate(Duration::from_secs(10)) {
            Some(st) => assert!(st.success(), "{st:?}\n{}", self.log()),
            None => panic!("did not exit after SIGTERM\n{}", self.log()),
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// User + system CPU time so far, in milliseconds.
    pub fn cpu_ms(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let after = s.rsplit(") ").next()?;
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some(ticks * 10)
    }

    /// Threads of the operator process now.
    pub fn threads(&self) -> Option<u64> {
        self.proc_status("Threads:")
    }

    pub fn rss_kib(&self) -> Option<u64> {
        self.proc_status("VmRSS:")
    }

    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.proc_status("VmHWM:")
    }

    /// A number from `/proc/<pid>/status`, by its field name.
    fn proc_status(&self, field: &str) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A random number, for file names no other run uses.
pub fn rand_tag() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(1);
    h.finish() as u128
}

/// What a GET over TLS saw: status, head, body and the server's
/// certificate (DER).
pub struct TlsAnswer {
    pub code: u16,
    pub head: String,
    pub body: String,
    pub cert: Vec<u8>,
}

/// GET `path` over TLS with an optional bearer token. With `trust` (a
/// certificate and the name to check it for) the server must present a
/// certificate that verifies against it; without, any certificate is
/// taken and recorded, as a scraper with insecureSkipVerify does.
pub fn tls_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    trust: Option<(&[u8], &str)>,
) -> Result<TlsAnswer, String> {
    let sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    tls_get_on(sock, path, token, trust)
}

/// A TCP connection to `to` from the loopback address `from` (loopback
/// has all of 127.0.0.0/8: clients told apart by address).
pub fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        return Err(std::io::ErrorKind::Unsupported.into());
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned by the TcpStream made of it; the
    // addresses are live sockaddr_in values of the length given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*to.ip(), to.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(sock)
    }
}

/// [`tls_get`] over a connection already made.
pub fn tls_get_on(
    sock: TcpStream,
    path: &str,
    token: Option<&str>,
    trust: Option<(&[u8], &str)>,
) -> Result<TlsAnswer, String> {
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let recorder = Arc::new(Recorder(std::sync::Mutex::new(Vec::new()), provider));
    let (cfg, name) = match trust {
        Some((cert, name)) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(cert.to_vec()))
                .map_err(|e| e.to_string())?;
            (builder.with_root_certificates(roots), name)
        }
        None => (
            builder
                .dangerous()
                .with_custom_certificate_verifier(recorder.clone()),
            "localhost",
        ),
    };
    let cfg = Arc::new(cfg.with_no_client_auth());
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if out.is_empty() => return Err(e.to_string()),
            Err(_) => break,
        }
    }
    let cert = match tls.conn.peer_certificates() {
        Some([first, ..]) => first.to_vec(),
        _ => recorder.0.lock().unwrap().clone(),
    };
    let out = String::from_utf8_lossy(&out).to_string();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok(TlsAnswer {
        code: status_of(head),
        head: head.to_string(),
        body: body.to_string(),
        cert,
    })
}

/// Takes any server certificate, and keeps it.
#[derive(Debug)]
struct Recorder(
    std::sync::Mutex<Vec<u8>>,
    std::sync::Arc<rustls::crypto::CryptoProvider>,
);

impl rustls::client::danger::ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = end_entity.to_vec();
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.1.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.1.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.1.signature_verification_algorithms.supported_schemes()
    }
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

impl Operator {
    /// The exit status if the process has ended (a crash, say), without
    /// waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The process id, for readings from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where this process writes its log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}
