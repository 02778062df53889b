//! The blocking JSON client: get, list (paged), create, patch, delete and
//! watch, with retries, typed errors and the guards of [`super::guard`].

use super::endpoint::{CaFile, Endpoint, TokenFile};
use super::error::{api_error_from_body, sanitize, Error, Result};
use super::guard::check_path;
use super::path::ResourcePath;
use super::watch::WatchStream;
use crate::backoff::{self, Backoff};
use crate::lock::lock;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

pub const USER_AGENT: &str = concat!("openmed-operator/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub connect_timeout: Duration,
    /// Whole-request budget for everything but watches.
    pub request_timeout: Duration,
    /// Largest response body accepted (a list page, or one watch event).
    pub body_limit: u64,
    /// Tries per request, counting the first.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// How often the CA file is checked for a change.
    pub ca_check_interval: Duration,
    /// Page size for [`Client::list_all`].
    pub page_size: u32,
    /// How long past its server-side timeout a watch is given before the
    /// client drops the connection as dead.
    pub watch_grace: Duration,
    /// The longest `Retry-After` a request waits out itself; a longer one
    /// is returned to the caller (a worker requeues its key with the delay,
    /// a watch loop backs off), so no worker sleeps on a throttled server.
    pub max_retry_sleep: Duration,
    /// Bounds on one [`Client::list_all`]: a server that keeps paging is
    /// refused, not followed until memory runs out.
    pub max_list_pages: u32,
    pub max_list_items: usize,
    /// The bytes of one list, all its pages together: what is decoded and
    /// kept grows with them, and items can be large where counts are not.
    pub max_list_bytes: usize,
    /// Client-side rate limit (`--qps`, `--burst`).
    pub limits: super::ratelimit::Limits,
    /// Who this process is (its leader-election identity), added to the
    /// User-Agent so the API server's audit log tells replicas apart.
    pub identity: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            body_limit: 32 << 20,
            max_attempts: 5,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            ca_check_interval: Duration::from_secs(10),
            page_size: 500,
            watch_grace: Duration::from_secs(10),
            max_retry_sleep: Duration::from_secs(1),
            max_list_pages: 1_000,
            max_list_items: 200_000,
            max_list_bytes: 64 << 20,
            limits: super::ratelimit::Limits::default(),
            identity: None,
        }
    }
}

/// Whether this process may write now, and for how long (leader election's
/// fencing, checked before every attempt of every request that is not a
/// read): None, closed; Some(d), open, and an attempt must be over within
/// d (its timeout is cut to that), so it cannot land after another
/// process could hold the lease.
pub type WriteGate = Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// The API verb of a request, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// Called once per HTTP exchange with its verb and status code (0 when no
/// response came back).
pub type Observer = Arc<dyn Fn(Verb, u16) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

impl PatchType {
    fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
        }
    }
}

/// When a failed request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Reads: on 429, 5xx, transport errors and timeouts.
    Read,
    /// Writes: only on 429 with Retry-After (the server did not act on it).
    Write,
    /// A write the caller knows is safe to repeat: retried like a read.
    Idempotent,
    /// Once (watch setup: the caller has its own backoff).
    Never,
}

#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    /// Ask for `PartialObjectMetadata` only (a cheap metadata-only view).
    pub metadata_only: bool,
}

#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: String,
    /// Server-side timeout; the client gives up a little after it.
    pub timeout: Duration,
    pub metadata_only: bool,
}

/// One page of a list, or all pages joined.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectList {
    pub items: Vec<Value>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    /// The length of the body (bodies, for [`Client::list_all`]) it came in.
    pub bytes: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

struct Req<'a> {
    verb: Verb,
    method: Method,
    path: String,
    query: Vec<(&'static str, String)>,
    accept: &'a str,
    body: Option<(&'static str, Vec<u8>)>,
    retry: Retry,
    timeout: Duration,
}

struct AgentState {
    agent: ureq::Agent,
    ca_checked: Instant,
}

pub struct Client {
    base: String,
    https: bool,
    token: Option<Arc<TokenFile>>,
    ca: Option<CaFile>,
    agent: Mutex<AgentState>,
    cfg: ClientConfig,
    observer: Option<Observer>,
    /// One list (all its pages) in flight at a time, across every loop: the
    /// initial lists of all kinds would otherwise hold several lists' items,
    /// each up to the bounds, at once.
    list_gate: Mutex<()>,
    /// Warning headers seen, each distinct text logged once: every resync
    /// would otherwise log the same deprecation again.
    warnings: Mutex<Warnings>,
    on_warning: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The server asked (429 with Retry-After) for no requests before this:
    /// one pace for every caller, kept without sleeping in any of them.
    paced_until: Mutex<Option<Instant>>,
    /// The CONNECT proxy to the API server, if the environment names one.
    proxy: Option<ureq::Proxy>,
    /// The client-side token bucket, if `--qps` sets one.
    bucket: Option<Mutex<super::ratelimit::Bucket>>,
    /// Checked before each attempt of a write; a closed gate fails the
    /// write with [`Error::NotLeader`] before anything is sent.
    write_gate: Option<WriteGate>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

const JSON: &str = "application/json";
const META_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META_ONE: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

impl Client {
    pub fn new(endpoint: Endpoint, cfg: ClientConfig) -> Result<Client> {
        let ca = endpoint.ca_file.map(CaFile::new);
        let pem = match &ca {
            Some(ca) if endpoint.origin.is_https() => ca.changed()?,
            _ => None,
        };
        let https = endpoint.origin.is_https();
        let proxy = match &endpoint.proxy {
            Some(p) => {
                let url = p.url_with_credentials();
                let built = ureq::Proxy::new(&url)
                    .map_err(|_| Error::Config(format!("unusable proxy {p}")))?;
                log::info!("reaching the API server through the proxy {p}");
                Some(built)
            }
            None => None,
        };
        let agent = build_agent(&cfg, https, pem.as_deref(), proxy.as_ref())?;
        let bucket = super::ratelimit::Bucket::new(cfg.limits, Instant::now()).map(Mutex::new);
        Ok(Client {
            base: endpoint.origin.base_url(),
            https,
            token: endpoint.token,
            ca,
            agent: Mutex::new(AgentState {
                agent,
                ca_checked: Instant::now(),
            }),
            cfg,
            observer: None,
            paced_until: Mutex::new(None),
            proxy,
            bucket,
            warnings: Mutex::new(Warnings::default()),
            on_warning: None,
            list_gate: Mutex::new(()),
            write_gate: None,
        })
    }

    /// Writes only while `gate` says so (see [`WriteGate`]).
    pub fn with_write_gate(mut self, gate: WriteGate) -> Client {
        self.write_gate = Some(gate);
        self
    }

    /// Replace an object (PUT), bound to the resourceVersion in `body`.
    pub fn update(&self, path: &ResourcePath, body: &Value) -> Result<Value> {
        let mut req = self.req(Verb::Update, Method::Put, path.render(), Retry::Write);
        req.body = Some((JSON, body.to_string().into_bytes()));
        self.json(req)
    }

    /// Called for every `Warning` header in a response (a metric).
    pub fn with_warning_observer(mut self, f: Arc<dyn Fn() + Send + Sync>) -> Client {
        self.on_warning = Some(f);
        self
    }

    /// Warning headers seen so far, and the distinct texts remembered.
    pub fn warnings(&self) -> (u64, Vec<String>) {
        let w = lock(&self.warnings);
        (w.total, w.seen.iter().cloned().collect())
    }

    pub fn with_observer(mut self, observer: Observer) -> Client {
        self.observer = Some(observer);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn get(&self, path: &ResourcePath) -> Result<Value> {
        let req = self.req(Verb::Get, Method::Get, path.render(), Retry::Read);
        self.json(req)
    }

    /// One page of a list ([`Client::list_all`] follows `continue`). Like
    /// every list, it waits for the list in flight.
    pub fn list(&self, path: &ResourcePath, params: &ListParams) -> Result<ObjectList> {
        let _one_at_a_time = lock(&self.list_gate);
        self.list_page(path, params)
    }

    fn list_page(&self, path: &ResourcePath, params: &ListParams) -> Result<ObjectList> {
        let mut req = self.req(Verb::List, Method::Get, path.render(), Retry::Read);
        push_selectors(
            &mut req.query,
            &params.label_selector,
            &params.field_selector,
        );
        if let Some(l) = params.limit {
            req.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &params.continue_token {
            req.query.push(("continue", c.clone()));
        }
        if params.metadata_only {
            req.accept = META_LIST;
        }
        let (v, bytes) = self.json_sized(req)?;
        let mut list = parse_list(v)?;
        list.bytes = bytes;
        Ok(list)
    }

    /// Every page of a list, in order. If a continue token expires midway
    /// (410) the list starts over, as client-go's pager does. At most
    /// `max_list_pages` pages, `max_list_items` items and `max_list_bytes`
    /// bytes of bodies; a `continue`
    /// token seen before is an error. One list at a time across the client,
    /// all its pages: the items of lists in flight never add up.
    pub fn list_all(&self, path: &ResourcePath, params: &ListParams) -> Result<ObjectList> {
        let _one_at_a_time = lock(&self.list_gate);
        let mut restarts = 0;
        'outer: loop {
            let mut p = params.clone();
            p.limit = Some(p.limit.unwrap_or(self.cfg.page_size));
            p.continue_token = None;
            let mut all = Vec::new();
            let mut bytes = 0usize;
            let mut seen = std::collections::HashSet::new();
            for _ in 0..self.cfg.max_list_pages {
                let page = match self.list_page(path, &p) {
                    Ok(page) => page,
                    Err(e) if e.is_gone() && p.continue_token.is_some() && restarts < 3 => {
                        restarts += 1;
                        continue 'outer;
                    }
                    Err(e) => return Err(e),
                };
                all.extend(page.items);
                bytes = bytes.saturating_add(page.bytes);
                if all.len() > self.cfg.max_list_items {
                    let max = self.cfg.max_list_items;
                    return Err(Error::ListBound(format!("more than {max} items")));
                }
                if bytes > self.cfg.max_list_bytes {
                    let mib = self.cfg.max_list_bytes >> 20;
                    return Err(Error::ListBound(format!("more than {mib} MiB")));
                }
                let Some(c) = page.continue_token else {
                    return Ok(ObjectList {
                        items: all,
                        resource_version: page.resource_version,
                        continue_token: None,
                        bytes,
                    });
                };
                if !seen.insert(digest_of(&c)) {
                    return Err(Error::ListBound(
                        "the server repeated a continue token".into(),
                    ));
                }
                p.continue_token = Some(c);
            }
            let max = self.cfg.max_list_pages;
            return Err(Error::ListBound(format!("more than {max} pages")));
        }
    }

    pub fn create(&self, path: &ResourcePath, body: &Value) -> Result<Value> {
        let mut req = self.req(Verb::Create, Method::Post, path.render(), Retry::Write);
        req.body = Some((JSON, body.to_string().into_bytes()));
        self.json(req)
    }

    pub fn patch(
        &self,
        path: &ResourcePath,
        kind: PatchType,
        body: &Value,
        retry: Retry,
    ) -> Result<Value> {
        let mut req = self.req(Verb::Patch, Method::Patch, path.render(), retry);
        req.body = Some((kind.content_type(), body.to_string().into_bytes()));
        self.json(req)
    }

    /// Delete, optionally only if uid / resourceVersion still match (409 otherwise).
    pub fn delete(&self, path: &ResourcePath, pre: Option<&Preconditions>) -> Result<Value> {
        let mut req = self.req(Verb::Delete, Method::Delete, path.render(), Retry::Write);
        let mut opts = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
        if let Some(p) = pre {
            let mut pc = serde_json::Map::new();
            if let Some(u) = &p.uid {
                pc.insert("uid".into(), Value::from(u.as_str()));
            }
            if let Some(rv) = &p.resource_version {
                pc.insert("resourceVersion".into(), Value::from(rv.as_str()));
            }
            opts["preconditions"] = Value::Object(pc);
        }
        req.body = Some((JSON, opts.to_string().into_bytes()));
        self.json(req)
    }

    /// Open a watch. The server ends it after `params.timeout`; the client
    /// gives up `watch_grace` after that, so a silently dead connection is
    /// noticed.
    pub fn watch(&self, path: &ResourcePath, params: &WatchParams) -> Result<WatchStream> {
        let mut req = self.req(Verb::Watch, Method::Get, path.render(), Retry::Never);
        req.query.push(("watch", "1".into()));
        req.query.push(("allowWatchBookmarks", "true".into()));
        if !params.resource_version.is_empty() {
            req.query
                .push(("resourceVersion", params.resource_version.clone()));
        }
        let secs = params.timeout.as_secs().max(1);
        req.query.push(("timeoutSeconds", secs.to_string()));
        push_selectors(
            &mut req.query,
            &params.label_selector,
            &params.field_selector,
        );
        if params.metadata_only {
            req.accept = META_ONE;
        }
        req.timeout = Duration::from_secs(secs) + self.cfg.watch_grace;
        let resp = self.send(&req)?;
        let reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
        Ok(WatchStream::new(
            Box::new(reader),
            self.cfg.body_limit as usize,
        ))
    }

    fn req(&self, verb: Verb, method: Method, path: String, retry: Retry) -> Req<'static> {
        Req {
            verb,
            method,
            path,
            query: Vec::new(),
            accept: JSON,
            body: None,
            retry,
            timeout: self.cfg.request_timeout,
        }
    }

    fn json(&self, req: Req<'_>) -> Result<Value> {
        self.json_sized(req).map(|(v, _)| v)
    }

    /// A JSON object answer, with the length of the body it came in.
    fn json_sized(&self, req: Req<'_>) -> Result<(Value, usize)> {
        let mut resp = self.send(&req)?;
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(self.cfg.body_limit)
            .read_to_vec()
            .map_err(|e| map_ureq(e, self.cfg.body_limit))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Decode(format!(
                "{} {}: body is not JSON ({e})",
                req.verb.as_str(),
                req.path
            ))
        })?;
        if !v.is_object() {
            return Err(Error::Decode(format!(
                "{} {}: body is not a JSON object",
                req.verb.as_str(),
                req.path
            )));
        }
        Ok((v, bytes.len()))
    }

    /// Send with retries; a 2xx response is returned with its body unread.
    fn send(&self, req: &Req<'_>) -> Result<ureq::http::Response<ureq::Body>> {
        check_path(&req.path)?;
        let mut attempt: u32 = 0;
        let mut reauthed = false;
        loop {
            self.check_pace()?;
            self.take_token();
            let mut timeout = req.timeout;
            if let (Some(gate), false) = (&self.write_gate, matches!(req.method, Method::Get)) {
                timeout = timeout.min(gate().ok_or(Error::NotLeader)?);
            }
            let err = match self.attempt(req, timeout) {
                Ok(resp) => return Ok(resp),
                Err(e) => e,
            };
            self.note_pace(&err);
            if err.code() == Some(401) && !reauthed {
                reauthed = true;
                if self
                    .token
                    .as_deref()
                    .map(TokenFile::reload)
                    .unwrap_or(false)
                {
                    log::info!("API server refused the token; re-read the token file and retrying");
                    continue;
                }
            }
            let retry = match req.retry {
                Retry::Read | Retry::Idempotent => err.is_transient(),
                Retry::Write => err.code() == Some(429) && err.retry_after().is_some(),
                Retry::Never => false,
            };
            attempt += 1;
            if !retry || attempt >= self.cfg.max_attempts {
                return Err(err);
            }
            let delay = self.cfg.backoff.delay_after(attempt - 1, err.retry_after());
            if err.retry_after().is_some() && delay > self.cfg.max_retry_sleep {
                return Err(err);
            }
            log::debug!(
                "{} {} failed ({err}); retry {attempt} in {} ms",
                req.verb.as_str(),
                req.path,
                delay.as_millis()
            );
            std::thread::sleep(delay);
        }
    }

    /// Log each distinct `Warning` header once (a pruned unknown field, a
    /// deprecated API) and count every one: client-go logs them too.
    fn note_warnings(&self, req: &Req<'_>, headers: &ureq::http::HeaderMap) {
        for h in headers.get_all("warning") {
            let text = warning_text(&String::from_utf8_lossy(h.as_bytes()));
            if let Some(f) = &self.on_warning {
                f();
            }
            let mut w = lock(&self.warnings);
            w.total += 1;
            if w.seen.len() < Warnings::KEEP && w.seen.insert(text.clone()) {
                drop(w);
                log::warn!(
                    "API server warning on {} {}: {text}",
                    req.verb.as_str(),
                    req.path
                );
            }
        }
    }

    /// Wait for a token of the client-side rate limit, if there is one.
    fn take_token(&self) {
        if let Some(b) = &self.bucket {
            let wait = lock(b).take(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    /// Fail fast while the server's Retry-After runs.
    fn check_pace(&self) -> Result<()> {
        let mut paced = lock(&self.paced_until);
        match *paced {
            Some(t) if t > Instant::now() => Err(Error::Throttled {
                retry_after: t - Instant::now(),
            }),
            Some(_) => {
                *paced = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A 429 with Retry-After sets the pace for every caller (capped).
    fn note_pace(&self, err: &Error) {
        if let (Some(429), Some(ra)) = (err.code(), err.retry_after()) {
            let until = Instant::now() + ra.min(backoff::RETRY_AFTER_CAP);
            let mut paced = lock(&self.paced_until);
            if paced.is_none_or(|t| t < until) {
                *paced = Some(until);
            }
        }
    }

    fn attempt(
        &self,
        req: &Req<'_>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let agent = self.current_agent()?;
        let mut url = format!("{}{}", self.base, req.path);
        if !req.query.is_empty() {
            let mut ser = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in &req.query {
                ser.append_pair(k, v);
            }
            url.push('?');
            url.push_str(&ser.finish());
        }
        let mut headers: Vec<(&str, String)> = vec![("Accept", req.accept.to_string())];
        if let Some(t) = &self.token {
            headers.push(("Authorization", format!("Bearer {}", t.current().expose())));
        }
        if let Some((ct, _)) = &req.body {
            headers.push(("Content-Type", ct.to_string()));
        }
        let body = req.body.as_ref().map(|(_, b)| b.as_slice());
        let result = dispatch(&agent, req.method, &url, &headers, body, timeout);
        drop(headers);
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                self.observe(req.verb, 0);
                return Err(map_ureq(e, self.cfg.body_limit));
            }
        };
        let code = resp.status().as_u16();
        self.observe(req.verb, code);
        self.note_warnings(req, resp.headers());
        if (200..300).contains(&code) {
            return Ok(resp);
        }
        if (300..400).contains(&code) {
            return Err(Error::Redirect { code });
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Error bodies are small Status objects; read at most 64 KiB of one.
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        Err(Error::Api(api_error_from_body(code, &body, retry_after)))
    }

    fn observe(&self, verb: Verb, code: u16) {
        if let Some(o) = &self.observer {
            o(verb, code);
        }
    }

    /// The agent to use, rebuilt first if the CA file has changed.
    fn current_agent(&self) -> Result<ureq::Agent> {
        let mut st = lock(&self.agent);
        if let Some(ca) = self.ca.as_ref().filter(|_| self.https) {
            if st.ca_checked.elapsed() >= self.cfg.ca_check_interval {
                st.ca_checked = Instant::now();
                if let Some(pem) = ca.changed()? {
                    match build_agent(&self.cfg, true, Some(&pem), self.proxy.as_ref()) {
                        Ok(a) => {
                            log::info!(
                                "CA file {} changed; TLS trust reloaded",
                                ca.path().display()
                            );
                            st.agent = a;
                        }
                        Err(e) => log::warn!("keeping the previous CA: {e}"),
                    }
                }
            }
        }
        Ok(st.agent.clone())
    }
}

fn push_selectors(
    q: &mut Vec<(&'static str, String)>,
    label: &Option<String>,
    field: &Option<String>,
) {
    if let Some(l) = label.as_ref().filter(|l| !l.is_empty()) {
        q.push(("labelSelector", l.clone()));
    }
    if let Some(f) = field.as_ref().filter(|f| !f.is_empty()) {
        q.push(("fieldSelector", f.clone()));
    }
}

fn parse_list(mut v: Value) -> Result<ObjectList> {
    let items = match v.get_mut("items").map(Value::take) {
        Some(Value::Array(a)) => a,
        Some(Value::Null) | None => Vec::new(),
        Some(_) => return Err(Error::Decode("list items is not an array".into())),
    };
    if items.iter().any(|i| !i.is_object()) {
        return Err(Error::Decode("list item is not an object".into()));
    }
    let meta = v.get("metadata");
    let resource_version = meta
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Decode("list without metadata.resourceVersion".into()))?
        .to_string();
    let continue_token = meta
        .and_then(|m| m.get("continue"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    Ok(ObjectList {
        items,
        resource_version,
        continue_token,
        bytes: 0,
    })
}

/// The agent for every request. Only the proxy chosen by our own rules
/// ([`super::proxy`]), never ureq's reading of the environment.
fn build_agent(
    cfg: &ClientConfig,
    https: bool,
    ca_pem: Option<&[u8]>,
    proxy: Option<&ureq::Proxy>,
) -> Result<ureq::Agent> {
    let mut b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(proxy.cloned())
        .https_only(https)
        .user_agent(match &cfg.identity {
            Some(id) => format!("{USER_AGENT} ({id})"),
            None => USER_AGENT.to_string(),
        })
        .accept_encoding("identity")
        .timeout_connect(Some(cfg.connect_timeout))
        .timeout_global(Some(cfg.request_timeout))
        .max_idle_connections_per_host(8)
        // Each pooled connection keeps its buffers, so ureq's default of
        // 128 KiB each way adds up across the pool (docs/performance.md).
        // Kubernetes response headers are well under 16 KiB; bodies stream
        // through.
        .max_response_header_size(16 * 1024)
        .input_buffer_size(32 * 1024)
        .output_buffer_size(16 * 1024);
    if https {
        let pem = ca_pem.ok_or_else(|| Error::Config("https needs a CA file".into()))?;
        let certs: Vec<_> = ureq::tls::parse_pem(pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(Error::Config("the CA file holds no PEM certificate".into()));
        }
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::new_with_certs(&certs))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        b = b.tls_config(tls);
    }
    Ok(b.build().new_agent())
}

fn dispatch(
    agent: &ureq::Agent,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    macro_rules! finish {
        ($b:expr) => {{
            let mut b = $b;
            for (k, v) in headers {
                b = b.header(*k, v.as_str());
            }
            b.config().timeout_global(Some(timeout)).build()
        }};
    }
    let body = body.unwrap_or_default();
    match method {
        Method::Get => finish!(agent.get(url)).call(),
        Method::Post => finish!(agent.post(url)).send(body),
        Method::Put => finish!(agent.put(url)).send(body),
        Method::Patch => finish!(agent.patch(url)).send(body),
        Method::Delete => finish!(agent.delete(url).force_send_body()).send(body),
    }
}

/// Warning headers seen: a count, and the distinct texts already logged
/// (bounded: past `KEEP` distinct ones, new ones are counted, not logged).
#[derive(Default)]
struct Warnings {
    total: u64,
    seen: std::collections::BTreeSet<String>,
}

impl Warnings {
    const KEEP: usize = 256;
}

/// The text of a `Warning: 299 - "text"` header (RFC 7234), sanitized and
/// cut; the whole value if it has not that shape.
fn warning_text(v: &str) -> String {
    let text = v
        .split_once('"')
        .and_then(|(_, rest)| rest.rsplit_once('"'))
        .map(|(t, _)| t)
        .unwrap_or(v);
    sanitize(&text.replace("\\\"", "\""), 300)
}

/// A short fingerprint of a continue token: the set of tokens seen stays
/// small however long the tokens are.
fn digest_of(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

fn map_ureq(e: ureq::Error, limit: u64) -> Error {
    match e {
        ureq::Error::Timeout(t) => Error::Timeout(t.to_string()),
        ureq::Error::BodyExceedsLimit(_) => Error::BodyTooLarge { limit },
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            Error::Timeout(io.to_string())
        }
        other => Error::Transport(with_hint(sanitize(&other.to_string(), 300))),
    }
}

/// rustls refuses a server certificate that is itself a CA (self-signed,
/// `CA:TRUE`), which kubectl and curl accept when it is given as the CA:
/// say what to do, since the error names only webpki's reason.
fn with_hint(msg: String) -> String {
    if msg.contains("CaUsedAsEndEntity") {
        return format!(
            "{msg} (the API server presents a CA certificate as its own; serve a leaf \
             certificate, CA:FALSE with the server's names, signed by that CA)"
        );
    }
    msg
}

/// A random server-side watch timeout between 50 and 60 seconds, so that
/// many watches started together do not all restart together. Short, so a
/// connection that stops delivering without closing (half-open behind NAT,
/// a crashed middlebox) is given up within about a minute (this plus
/// `watch_grace`); a healthy watch is simply reopened at once from its
/// last resourceVersion, which costs the API server little.
pub fn random_watch_timeout() -> Duration {
    Duration::from_secs(50 + backoff::random_u64() % 11)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_shape_is_checked() {
        let ok = parse_list(
            json!({"items": [{"a": 1}], "metadata": {"resourceVersion": "7", "continue": "c"}}),
        )
        .unwrap();
        assert_eq!(ok.resource_version, "7");
        assert_eq!(ok.continue_token.as_deref(), Some("c"));
        let empty = parse_list(
            json!({"items": null, "metadata": {"resourceVersion": "7", "continue": ""}}),
        )
        .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
        assert!(parse_list(json!({"items": {}, "metadata": {"resourceVersion": "1"}})).is_err());
        assert!(parse_list(json!({"items": [1], "metadata": {"resourceVersion": "1"}})).is_err());
        assert!(parse_list(json!({"items": []})).is_err());
    }

    #[test]
    fn a_ca_used_as_the_server_certificate_says_what_to_do() {
        let msg = "rustls: invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        let hinted = with_hint(msg.to_string());
        assert!(
            hinted.starts_with(msg) && hinted.contains("serve a leaf"),
            "{hinted}"
        );
        assert_eq!(with_hint("connection refused".into()), "connection refused");
    }

    #[test]
    fn watch_timeouts_are_spread() {
        for _ in 0..50 {
            let t = random_watch_timeout();
            assert!(t >= Duration::from_secs(50) && t <= Duration::from_secs(60));
        }
    }
}
