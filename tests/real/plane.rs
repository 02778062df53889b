//! The real control plane that `scripts/control-plane.sh up` started, as the
//! tests reach it: its files (the `env` it wrote), a REST client with the
//! admin's client certificate, the release's own kubectl, and its audit log.

use crate::cluster::{path, refusal, resource_of, Cluster};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig, TlsProvider};

/// One running control plane.
pub struct Plane {
    pub dir: PathBuf,
    pub server: String,
    pub ca: PathBuf,
    pub kubectl: PathBuf,
    pub promtool: PathBuf,
    pub helm: PathBuf,
    pub kubeconfig: PathBuf,
    pub audit: PathBuf,
    pub version: String,
    agent: ureq::Agent,
}

/// Runs `cmd` with `input` on its stdin: its stdout, or both its outputs as
/// the error.
fn run(mut cmd: Command, input: &str) -> Result<String, String> {
    use std::io::Write;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let name = format!("{:?}", cmd.get_program());
    let mut child = cmd.spawn().map_err(|e| format!("{name}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{name}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("{stdout}{stderr}"))
    }
}

/// The plane `OMO_CONTROL_PLANE` names, or None (and a line saying the
/// target is skipped) when it names none.
pub fn from_env() -> Option<Plane> {
    let Some(dir) = std::env::var_os("OMO_CONTROL_PLANE") else {
        eprintln!("skipped: OMO_CONTROL_PLANE is not set (scripts/test.sh starts the real control plane and sets it)");
        return None;
    };
    Some(Plane::open(Path::new(&dir)))
}

impl Plane {
    /// Reads what `up` wrote in `dir`; a plane that is not there fails the
    /// test: under scripts/test.sh a real plane is claimed, never skipped.
    pub fn open(dir: &Path) -> Plane {
        let text = std::fs::read_to_string(dir.join("env")).unwrap_or_else(|e| {
            panic!(
                "OMO_CONTROL_PLANE={} holds no env file ({e}): is the control plane up?",
                dir.display()
            )
        });
        let env: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| -> String {
            env.get(k)
                .unwrap_or_else(|| panic!("{k} missing from {}/env", dir.display()))
                .to_string()
        };
        let pki = dir.join("pki");
        Plane {
            dir: dir.to_path_buf(),
            server: get("OMO_CP_SERVER"),
            ca: PathBuf::from(get("OMO_CP_CA")),
            kubectl: PathBuf::from(get("OMO_CP_KUBECTL")),
            promtool: PathBuf::from(get("OMO_CP_PROMTOOL")),
            helm: PathBuf::from(get("OMO_CP_HELM")),
            kubeconfig: PathBuf::from(get("KUBECONFIG")),
            audit: PathBuf::from(get("OMO_CP_AUDIT")),
            version: get("OMO_CP_VERSION"),
            agent: admin_agent(&pki),
        }
    }

    /// One request as the admin: the status and the body as JSON (Null when
    /// it is not JSON). A transport error is status 0.
    pub fn request(&self, method: &str, path: &str, body: Option<(&str, &Value)>) -> (u16, Value) {
        let url = format!("{}{path}", self.server);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        let payload = match body {
            Some((ct, v)) => {
                req = req.header("Content-Type", ct);
                serde_json::to_vec(v).unwrap_or_default()
            }
            None => Vec::new(),
        };
        let Ok(req) = req.body(payload) else {
            return (0, Value::Null);
        };
        match self.agent.run(req) {
            Ok(mut resp) => {
                let code = resp.status().as_u16();
                let text = resp.body_mut().read_to_string().unwrap_or_default();
                (code, serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            Err(e) => (0, json!(e.to_string())),
        }
    }

    /// The release's kubectl as the admin; its stdout, or its stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_with_input(args, None)
    }

    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        run(cmd, input.unwrap_or(""))
    }

    /// The helm the tools module pins, as the admin, in the repository;
    /// its stdout, or both its outputs as the error.
    pub fn helm(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(&self.helm);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        run(cmd, "")
    }

    /// `promtool check metrics` (the release the tools module pins) on a
    /// scrape of /metrics: its lint, or what it found.
    pub fn check_metrics(&self, scrape: &str) -> Result<String, String> {
        let mut cmd = Command::new(&self.promtool);
        cmd.args(["check", "metrics"]);
        run(cmd, scrape)
    }

    /// A token for ServiceAccount `ns/name` from the TokenRequest API, as
    /// kubelet projects one into the operator's pod.
    pub fn token(&self, ns: &str, name: &str) -> String {
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token");
        let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}});
        let (code, body) = self.request("POST", &path, Some(("application/json", &req)));
        assert_eq!(code, 201, "TokenRequest for {ns}/{name}: {body}");
        body["status"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Stops (`stop`) or starts (`start`) one component of the plane with its
    /// state kept: etcd, apiserver, controller-manager or kubelet.
    pub fn control(&self, verb: &str, component: &str) {
        let script = format!("{}/scripts/control-plane.sh", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("bash")
            .arg(&script)
            .args([verb, component])
            .env("OMO_CP_DIR", &self.dir)
            .output()
            .expect("running scripts/control-plane.sh");
        assert!(
            out.status.success(),
            "control-plane.sh {verb} {component}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Whether kube-apiserver answers ok on /readyz.
    pub fn ready(&self) -> bool {
        let url = format!("{}/readyz", self.server);
        let Ok(req) = ureq::http::Request::builder().uri(&url).body(()) else {
            return false;
        };
        match self.agent.run(req) {
            Ok(mut resp) => {
                resp.status() == 200 && resp.body_mut().read_to_string().unwrap_or_default() == "ok"
            }
            Err(_) => false,
        }
    }

    /// The requests the audit log holds so far, in order, each once: a
    /// request it records at two stages (a watch: started, then complete)
    /// is kept at its first, by its audit ID.
    pub fn audit_events(&self) -> Vec<Value> {
        let mut seen = std::collections::HashSet::new();
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or("").to_string()))
            .collect()
    }
}

/// A ureq agent that presents the admin's client certificate and trusts
/// only the plane's CA.
fn admin_agent(pki: &Path) -> ureq::Agent {
    let read = |f: &str| {
        std::fs::read(pki.join(f)).unwrap_or_else(|e| panic!("{}: {e}", pki.join(f).display()))
    };
    let (ca, crt, key) = (read("ca.crt"), read("admin.crt"), read("admin.key"));
    let certs = |pem: &[u8]| -> Vec<_> {
        ureq::tls::parse_pem(pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c.to_owned()),
                _ => None,
            })
            .collect()
    };
    let key = ureq::tls::parse_pem(&key)
        .find_map(|i| match i {
            Ok(PemItem::PrivateKey(k)) => Some(k.to_owned()),
            _ => None,
        })
        .expect("admin.key holds a private key");
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::new_with_certs(&certs(&ca)))
        .client_cert(Some(ClientCert::new_with_certs(&certs(&crt), key)))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

impl Cluster for Plane {
    fn name(&self) -> &'static str {
        "real"
    }
    fn create(&self, obj: Value) -> Result<Value, String> {
        let (group, plural) = resource_of(
            obj["apiVersion"].as_str().unwrap_or(""),
            obj["kind"].as_str().unwrap_or(""),
        )?;
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
        let (code, body) = self.request(
            "POST",
            &path(group, plural, Some(ns), None),
            Some(("application/json", &obj)),
        );
        if code == 201 || code == 200 {
            Ok(body)
        } else {
            Err(refusal(code, &body))
        }
    }
    fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, String> {
        let (group, plural) = resource_of(api_version, kind)?;
        let (code, body) = self.request(
            "PATCH",
            &path(group, plural, Some(ns), Some(name)),
            Some(("application/merge-patch+json", patch)),
        );
        if code == 200 {
            Ok(body)
        } else {
            Err(refusal(code, &body))
        }
    }
    fn delete(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Result<(), String> {
        let (group, plural) = resource_of(api_version, kind)?;
        let (code, body) = self.request("DELETE", &path(group, plural, Some(ns), Some(name)), None);
        if code == 200 || code == 202 {
            Ok(())
        } else {
            Err(refusal(code, &body))
        }
    }
    fn object(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let (code, body) = self.request("GET", &path(group, plural, Some(ns), Some(name)), None);
        match code {
            200 => Some(body),
            404 => None,
            _ => panic!("reading {plural} {ns}/{name}: {}", refusal(code, &body)),
        }
    }
    fn objects(&self, group: &str, plural: &str, ns: Option<&str>) -> Vec<Value> {
        let (code, body) = self.request("GET", &path(group, plural, ns, None), None);
        assert_eq!(code, 200, "listing {plural}: {body}");
        body["items"].as_array().cloned().unwrap_or_default()
    }
    fn requests_of(&self, agent: &str, ns: &str) -> Vec<(String, String)> {
        self.audit_events()
            .into_iter()
            .filter(|e| e["userAgent"].as_str().unwrap_or("").starts_with(agent))
            .filter(|e| e["objectRef"]["namespace"] == ns)
            .map(|e| {
                let r = &e["objectRef"];
                let mut resource = r["resource"].as_str().unwrap_or("").to_string();
                if let Some(sub) = r["subresource"].as_str() {
                    resource = format!("{resource}/{sub}");
                }
                (e["verb"].as_str().unwrap_or("").to_string(), resource)
            })
            .collect()
    }
}

/// A plane of a test's own, taken down when dropped.
pub struct OwnPlane(PathBuf);

impl OwnPlane {
    /// `scripts/control-plane.sh up` in `dir` with extra kube-apiserver flags.
    pub fn up(dir: &Path, apiserver_flags: &str) -> OwnPlane {
        OwnPlane::up_with(dir, apiserver_flags, &[])
    }

    /// [`OwnPlane::up`] with more of the script's settings (`OMO_CP_KCM_QPS`).
    pub fn up_with(dir: &Path, apiserver_flags: &str, env: &[(&str, &str)]) -> OwnPlane {
        let own = OwnPlane(dir.to_path_buf());
        let out = Command::new("bash")
            .arg(format!(
                "{}/scripts/control-plane.sh",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(["up", "--warmup-ms", "300"])
            .env("OMO_CP_DIR", dir)
            .env("OMO_CP_APISERVER_FLAGS", apiserver_flags)
            .envs(env.iter().copied())
            .output()
            .expect("running scripts/control-plane.sh");
        assert!(
            out.status.success(),
            "a control plane with {apiserver_flags}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        own
    }
}

impl Drop for OwnPlane {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(format!(
                "{}/scripts/control-plane.sh",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("down")
            .env("OMO_CP_DIR", &self.0)
            .status();
    }
}
