//! kubesim: a simulated Kubernetes API server for openmed-operator's tests,
//! demos and benchmarks. Start it in-process with [`Sim::start`] or as the
//! `kubesim` binary; see README.md (section "The simulated cluster").

pub mod apiserver;
pub mod controllers;
pub mod rbac;
pub mod registry;
pub mod schema;

// The flat module paths from before the modules were grouped into folders
// (`kubesim::patch`, `kubesim::deployment`, ... as tests/ use them), so the
// public API stays as it was.
pub use apiserver::{api, errors, faults, http, patch, selector, table, time, tls, watch};
pub use controllers::{controller, deployment};
pub use registry::{kinds, resources, scale, store};
pub use schema::structural;

use api::{lock, Shared};
pub use faults::CutOff;
use faults::{FailRule, RequestRecord};
use http::{HttpServer, Request, Response};
use regex::Regex;
use registry::store::Retention;
use serde_json::{json, Value};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The path prefix of the control endpoint; the real API never uses it.
pub const CONTROL_PREFIX: &str = "/__sim/";

#[derive(Debug, Clone)]
pub struct SimConfig {
    /// 0 picks a free port.
    pub port: u16,
    pub tls: bool,
    /// Accepted bearer tokens; None disables authentication.
    pub tokens: Option<Vec<String>>,
    /// How long a pod takes to become ready.
    pub warmup: Duration,
    /// A preload value matching this regex never becomes ready.
    pub unloadable: Option<String>,
    /// Watch events retained at most; older resourceVersions get 410
    /// Expired (so do those older than `history_window`, and those past
    /// `history_bytes` of objects: [`registry::store::Retention`]).
    pub history: usize,
    pub history_window: Duration,
    pub history_bytes: usize,
    pub bookmark_interval: Duration,
    /// How often the Deployment controller and garbage collector run.
    pub tick: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            port: 0,
            tls: false,
            tokens: None,
            warmup: Duration::from_millis(300),
            unloadable: Some("unloadable".into()),
            history: Retention::DEFAULT.events,
            history_window: Retention::DEFAULT.window,
            history_bytes: Retention::DEFAULT.bytes,
            bookmark_interval: Duration::from_secs(2),
            tick: Duration::from_millis(50),
        }
    }
}

pub struct Sim {
    shared: Arc<Shared>,
    server: Arc<HttpServer>,
    ca_pem: Option<String>,
}

impl Sim {
    pub fn start(cfg: SimConfig) -> io::Result<Sim> {
        let unloadable = match &cfg.unloadable {
            Some(p) => Some(
                Regex::new(p)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?,
            ),
            None => None,
        };
        let retention = Retention {
            events: cfg.history.max(1),
            window: cfg.history_window,
            bytes: cfg.history_bytes,
        };
        let shared = Arc::new(Shared::new(
            retention,
            cfg.tokens.clone(),
            cfg.bookmark_interval,
        ));
        shared.write(|st| rbac::bootstrap::install(st, SystemTime::now()));
        let (tls_cfg, ca_pem) = if cfg.tls {
            let m = tls::generate().map_err(io::Error::other)?;
            (Some(m.server_config), Some(m.ca_pem))
        } else {
            (None, None)
        };
        let h = shared.clone();
        let handler: http::Handler = Arc::new(move |req: Request| {
            if req.path.starts_with(CONTROL_PREFIX) {
                control(&h, req)
            } else {
                api::handle(&h, req)
            }
        });
        let addr: SocketAddr = ([127, 0, 0, 1], cfg.port).into();
        let server = HttpServer::start(addr, tls_cfg, handler)?;
        let _ = shared.http.set(server.clone());
        let s = shared.clone();
        let mut ctl = controller::Controller::new(cfg.warmup, unloadable);
        let tick = cfg.tick;
        std::thread::Builder::new()
            .name("kubesim-controller".into())
            .spawn(move || {
                while !s.stopping.load(Ordering::SeqCst) {
                    let wall = SystemTime::now();
                    s.write(|st| {
                        ctl.tick(st, Instant::now(), wall);
                        st.gc(wall);
                        st.trim_history(Instant::now());
                        rbac::bootstrap::aggregate(st, wall);
                        controllers::serviceaccounts::sync(st, wall);
                    });
                    std::thread::sleep(tick);
                }
            })?;
        Ok(Sim {
            shared,
            server,
            ca_pem,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Connections accepted so far (a TLS handshake each over TLS).
    pub fn connections(&self) -> u64 {
        self.server.connections()
    }

    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr())
    }

    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A kubeconfig for kubectl: the server, the CA file (TLS) and a token.
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        ca_file: Option<&Path>,
        token: Option<&str>,
    ) -> io::Result<()> {
        let mut cluster = format!("    server: {}\n", self.url());
        if let Some(ca) = ca_file {
            cluster.push_str(&format!("    certificate-authority: {}\n", ca.display()));
        }
        let user = match token {
            Some(t) => format!("    token: {t}\n"),
            None => "    {}\n".to_string(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubesim\n  cluster:\n{cluster}users:\n- name: kubesim\n  user:\n{user}contexts:\n- name: kubesim\n  context:\n    cluster: kubesim\n    user: kubesim\n    namespace: default\ncurrent-context: kubesim\n"
        );
        std::fs::write(path, text)
    }

    // ---- faults ----

    /// Fail the next `count` requests whose method (any if None) and path
    /// (a regex) match, with `code` (and `Retry-After` seconds for 429).
    pub fn fail_next(
        &self,
        method: Option<&str>,
        path: &str,
        code: u16,
        count: u32,
        retry_after: Option<u64>,
    ) {
        self.add_rule(method, path, None, code, count, retry_after);
    }

    /// Like [`Sim::fail_next`], only for requests whose query also matches.
    pub fn fail_next_query(
        &self,
        method: Option<&str>,
        path: &str,
        query: &str,
        code: u16,
        count: u32,
    ) {
        self.add_rule(method, path, Some(query), code, count, None);
    }

    /// Answer the next `count` requests whose path and query match with
    /// 429 and `Retry-After: retry_after` (a throttled watch, say).
    pub fn throttle_next_query(
        &self,
        method: Option<&str>,
        path: &str,
        query: &str,
        count: u32,
        retry_after: u64,
    ) {
        self.add_rule(method, path, Some(query), 429, count, Some(retry_after));
    }

    fn add_rule(
        &self,
        method: Option<&str>,
        path: &str,
        query: Option<&str>,
        code: u16,
        count: u32,
        retry_after: Option<u64>,
    ) {
        // A fault that cannot match would pass its test unexercised.
        let path = Regex::new(path).unwrap_or_else(|e| panic!("fault path {path:?}: {e}"));
        let query =
            query.map(|q| Regex::new(q).unwrap_or_else(|e| panic!("fault query {q:?}: {e}")));
        lock(&self.shared.faults).rules.push(FailRule {
            method: method.map(str::to_string),
            path,
            query,
            code,
            retry_after,
            remaining: count,
        });
    }

    pub fn set_latency(&self, d: Duration) {
        lock(&self.shared.faults).latency = d;
    }

    /// Cut off every client whose User-Agent contains `part` (a network
    /// partition of one operator process), and drop the watches open now.
    pub fn cut_off(&self, part: &str, how: faults::CutOff) {
        self.cut_off_path(part, "", how);
        self.cut_watches();
    }

    /// Cut off only the requests of `part` whose path contains `path`
    /// (its Lease renewals, say, while its other writes still land).
    pub fn cut_off_path(&self, part: &str, path: &str, how: faults::CutOff) {
        let mut f = lock(&self.shared.faults);
        f.cut_off.retain(|(p, q, _)| p != part || q != path);
        f.cut_off.push((part.to_string(), path.to_string(), how));
    }

    /// End every cut [`Sim::cut_off`] made for `part`.
    pub fn reconnect(&self, part: &str) {
        lock(&self.shared.faults)
            .cut_off
            .retain(|(p, _, _)| p != part);
    }

    pub fn clear_faults(&self) {
        *lock(&self.shared.faults) = faults::Faults::default();
    }

    /// Drop every open watch without its final chunk, as a network cut does.
    pub fn cut_watches(&self) {
        self.shared.watch_epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.changed.notify_all();
    }

    /// End every open watch cleanly, with its final chunk, as a server's
    /// own timeout or a proxy's graceful idle close does.
    pub fn end_watches(&self) {
        self.shared.watch_end_epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.changed.notify_all();
    }

    /// Answer the next `n` watches with "too old resource version": as an
    /// HTTP 410, or (`in_stream`) as an ERROR event in a 200 stream.
    pub fn expire_next_watches(&self, n: u32, in_stream: bool) {
        let mut f = lock(&self.shared.faults);
        f.expire_watches = n;
        f.expire_in_stream = in_stream;
    }

    /// Make every watch whose request path matches `path_regex` lag: each
    /// event is delivered `lag` after it happened, in order, and bookmarks
    /// never pass an event held back. Applies to open watches too; a zero
    /// lag removes the rule for that regex; an invalid regex fails the
    /// caller, whose lag would otherwise never apply.
    pub fn set_watch_lag(&self, path_regex: &str, lag: Duration) {
        let re =
            Regex::new(path_regex).unwrap_or_else(|e| panic!("watch lag path {path_regex:?}: {e}"));
        lock(&self.shared.faults).set_watch_lag(path_regex, re, lag);
        self.shared.changed.notify_all();
    }

    /// Forget the watch history: every older resourceVersion is now expired.
    pub fn compact(&self) {
        self.shared.write(|st| st.compact());
    }

    /// Refuse connections for `d` and drop open ones, keeping all state.
    pub fn pause(&self, d: Duration) {
        self.server.pause(d);
    }

    /// Accept `token` as the service account `namespace/name`.
    pub fn accept_service_account_token(&self, namespace: &str, name: &str, token: &str) {
        let cred = apiserver::authn::Credential::service_account(namespace, name, String::new());
        apiserver::authn::remember(&mut lock(&self.shared.users), token.to_string(), cred);
    }

    /// A token for the service account `namespace/name`: requests with it
    /// are authorized by the Roles and bindings stored here, as RBAC does.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        apiserver::authn::issue_service_account_token(&self.shared, namespace, name)
    }

    pub fn set_tokens(&self, tokens: Option<Vec<String>>) {
        *lock(&self.shared.tokens) = tokens;
    }

    // ---- figures ----

    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.stats).log.clone()
    }

    /// Requests so far whose verb (get, list, watch, create, update, patch,
    /// delete, discovery) and resource match, None matching any.
    pub fn count(&self, verb: Option<&str>, resource: Option<&str>) -> u64 {
        lock(&self.shared.stats)
            .counts
            .iter()
            .filter(|((v, r, _), _)| {
                verb.map(|x| x == v).unwrap_or(true) && resource.map(|x| x == r).unwrap_or(true)
            })
            .map(|(_, n)| n)
            .sum()
    }

    pub fn reset_stats(&self) {
        *lock(&self.shared.stats) = faults::Stats::default();
    }

    /// How many times the object `resource` (`apps/deployments`) `ns/name`
    /// was stored after resourceVersion `rv`, from the watch history.
    pub fn changes_after(&self, rv: u64, resource: &str, ns: &str, name: &str) -> usize {
        let st = lock(&self.shared.store);
        let events = st.events_after(rv).unwrap_or_default();
        let of = |e: &&registry::store::HistEvent| {
            e.res == resource && e.ns == ns && e.obj["metadata"]["name"] == name
        };
        events.iter().filter(of).count()
    }

    /// Watch events (not bookmarks) sent of `resource` (`apps/deployments`)
    /// since the last [`Sim::reset_stats`], over every watch.
    pub fn watch_events(&self, resource: &str) -> u64 {
        let stats = lock(&self.shared.stats);
        stats.watch_events.get(resource).copied().unwrap_or(0)
    }

    pub fn stats_json(&self) -> Value {
        lock(&self.shared.stats).to_json()
    }

    // ---- direct state access, bypassing HTTP ----

    /// The stored object, if any (`group` "" for core).
    pub fn object(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let st = lock(&self.shared.store);
        let def = st.registry.by_key(&format!("{group}/{plural}"))?.clone();
        st.get(&def, namespace, name).map(|o| (*o).clone())
    }

    /// All stored objects of a kind in a namespace (None: all namespaces).
    pub fn objects(&self, group: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let shared = self.shared_objects(group, plural, namespace);
        shared.into_iter().map(|o| (*o).clone()).collect()
    }

    /// The stored objects themselves, shared: nothing is copied while the
    /// store is locked, so a caller that looks often (a benchmark waiting
    /// on 10,000 models) does not hold the server up.
    pub fn shared_objects(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Vec<std::sync::Arc<Value>> {
        let st = lock(&self.shared.store);
        let Some(def) = st.registry.by_key(&format!("{group}/{plural}")).cloned() else {
            return Vec::new();
        };
        st.list(&def, namespace)
    }

    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv
    }

    /// Milliseconds since start, on the clock of [`RequestRecord::at_ms`].
    pub fn clock_ms(&self) -> u64 {
        self.shared.started.elapsed().as_millis() as u64
    }

    fn def_for(&self, api_version: &str, kind: &str) -> Result<resources::ResourceDef, String> {
        lock(&self.shared.store)
            .registry
            .by_kind(api_version, kind)
            .cloned()
            .ok_or_else(|| format!("no kind {kind} in {api_version}"))
    }

    /// Create an object directly (not over HTTP, not counted), as another
    /// client of the cluster would. Watches see it.
    pub fn create(&self, obj: Value) -> Result<Value, String> {
        let def = self.def_for(
            obj["apiVersion"].as_str().unwrap_or(""),
            obj["kind"].as_str().unwrap_or(""),
        )?;
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        self.shared
            .write(|st| {
                st.create(
                    &def,
                    &ns,
                    obj,
                    kinds::FieldValidation::Strict,
                    SystemTime::now(),
                )
            })
            .map(|w| (*w.obj).clone())
            .map_err(|e| e.message)
    }

    /// Merge-patch an object directly (main resource, not status).
    pub fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, String> {
        let def = self.def_for(api_version, kind)?;
        self.shared
            .write(|st| {
                let current = st
                    .get(&def, namespace, name)
                    .ok_or_else(|| errors::ApiErr::not_found(&def, name))?;
                let next = patch::merge_patch(&current, patch);
                st.update(
                    &def,
                    namespace,
                    name,
                    next,
                    false,
                    kinds::FieldValidation::Strict,
                    false,
                    SystemTime::now(),
                )
            })
            .map(|w| (*w.obj).clone())
            .map_err(|e| e.message)
    }

    /// Delete an object directly (finalizers are honoured).
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), String> {
        let def = self.def_for(api_version, kind)?;
        self.shared
            .write(|st| {
                st.delete(
                    &def,
                    namespace,
                    name,
                    &store::Preconditions::default(),
                    SystemTime::now(),
                )
            })
            .map(|_| ())
            .map_err(|e| e.message)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        self.server.stop();
    }
}

fn control(shared: &Arc<Shared>, req: Request) -> Response {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(json!({}));
    let op = req
        .path
        .trim_start_matches(CONTROL_PREFIX)
        .trim_end_matches('/');
    let done = || Response::json(200, &json!({"ok": true}));
    match (req.method.as_str(), op) {
        ("GET", "healthz") => done(),
        ("GET", "counters") => Response::json(200, &lock(&shared.stats).to_json()),
        ("GET", "requests") => {
            let log: Vec<Value> = lock(&shared.stats)
                .log
                .iter()
                .map(RequestRecord::to_json)
                .collect();
            Response::json(200, &json!(log))
        }
        ("POST", "reset-counters") => {
            *lock(&shared.stats) = faults::Stats::default();
            done()
        }
        ("POST", "fail") => control_fail(shared, &body),
        ("POST", "latency") => {
            lock(&shared.faults).latency = Duration::from_millis(body["ms"].as_u64().unwrap_or(0));
            done()
        }
        ("POST", "watch-lag") => control_watch_lag(shared, &body),
        ("POST", "clear-faults") => {
            *lock(&shared.faults) = faults::Faults::default();
            done()
        }
        ("POST", "cut-watches") => {
            shared.watch_epoch.fetch_add(1, Ordering::SeqCst);
            shared.changed.notify_all();
            done()
        }
        ("POST", "expire-watches") => {
            let mut f = lock(&shared.faults);
            f.expire_watches = body["count"].as_u64().unwrap_or(1) as u32;
            f.expire_in_stream = body["inStream"].as_bool().unwrap_or(false);
            done()
        }
        ("POST", "compact") => {
            shared.write(|st| st.compact());
            done()
        }
        ("POST", "pause") => {
            control_pause(shared, &body);
            done()
        }
        ("POST", "serviceaccount-token") => control_service_account_token(shared, &body),
        ("POST", "tokens") => {
            let tokens = body["tokens"]
                .is_array()
                .then(|| resources::str_list(body.get("tokens")));
            *lock(&shared.tokens) = tokens;
            done()
        }
        _ => Response::json(
            404,
            &json!({"error": format!("unknown control operation {op:?}")}),
        ),
    }
}

/// `POST /__sim/pause`: the API goes down for `seconds`, after this
/// request has had its answer.
fn control_pause(shared: &Arc<Shared>, body: &Value) {
    let d = Duration::from_secs_f64(body["seconds"].as_f64().unwrap_or(5.0));
    if let Some(server) = shared.http.get().cloned() {
        // Answer first, then go down.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            server.pause(d);
        });
    }
}

/// `POST /__sim/serviceaccount-token`: {"namespace": "ns", "name": "sa"} →
/// {"token": "..."}, a token RBAC applies to (see
/// `Sim::service_account_token`).
fn control_service_account_token(shared: &Shared, body: &Value) -> Response {
    let (ns, name) = (body["namespace"].as_str(), body["name"].as_str());
    let (Some(ns), Some(name)) = (ns, name) else {
        return Response::json(400, &json!({"error": "namespace and name are required"}));
    };
    let token = apiserver::authn::issue_service_account_token(shared, ns, name);
    Response::json(200, &json!({"token": token}))
}

/// `POST /__sim/fail`: a [`FailRule`] from the body.
fn control_fail(shared: &Arc<Shared>, body: &Value) -> Response {
    let Ok(re) = Regex::new(body["path"].as_str().unwrap_or(".*")) else {
        return Response::json(400, &json!({"error": "path is not a valid regex"}));
    };
    let Ok(query) = body["query"].as_str().map(Regex::new).transpose() else {
        return Response::json(400, &json!({"error": "query is not a valid regex"}));
    };
    lock(&shared.faults).rules.push(FailRule {
        method: body["method"].as_str().map(str::to_string),
        path: re,
        query,
        code: body["code"].as_u64().unwrap_or(500) as u16,
        retry_after: body["retryAfter"].as_u64(),
        remaining: body["count"].as_u64().unwrap_or(1) as u32,
    });
    Response::json(200, &json!({"ok": true}))
}

/// `POST /__sim/watch-lag {"path": REGEX, "ms": N}`: as [`Sim::set_watch_lag`].
fn control_watch_lag(shared: &Arc<Shared>, body: &Value) -> Response {
    let pattern = body["path"].as_str().unwrap_or(".*");
    let Ok(re) = Regex::new(pattern) else {
        return Response::json(400, &json!({"error": "path is not a valid regex"}));
    };
    let lag = Duration::from_millis(body["ms"].as_u64().unwrap_or(0));
    lock(&shared.faults).set_watch_lag(pattern, re, lag);
    shared.changed.notify_all();
    Response::json(200, &json!({"ok": true}))
}
