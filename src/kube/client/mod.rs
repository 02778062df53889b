//! The blocking JSON client: get, list (paged), create, patch, delete and
//! watch, with retries, typed errors and the guards of [`super::guard`].
//!
//! Here the client, its configuration and the one-object verbs; beside it
//! `request` (one request, its retries and errors), `pace` (the rate limit
//! and the server's Retry-After), `list` (lists and their pages), `watch`
//! (opening watches), `agent` (the HTTP agent and its TLS trust) and
//! `warnings` (the server's `Warning` headers).

mod agent;
#[cfg(all(test, feature = "alloc-count"))]
mod footprint;
mod list;
mod pace;
mod request;
mod transport;
mod warnings;
mod watch;

pub use list::{ListParams, ObjectList};
pub use request::{release_buffer, PatchType, Retry, Verb};
pub use watch::{random_watch_timeout, WatchParams};

use super::endpoint::{CaFile, Endpoint, TokenFile};
use super::error::Result;
use super::fields::Decode;
use super::path::ResourcePath;
use crate::backoff::Backoff;
use agent::{build_agent, proxy_of, AgentState};
use request::{Method, JSON};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warnings::Warnings;

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
    /// What is decoded of each resource's objects (all of an unregistered
    /// one's).
    pub shapes: crate::kube::shape::Shapes,
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
            shapes: Default::default(),
        }
    }
}

/// Whether this process may write now, and for how long (leader election's
/// fencing, checked before every attempt of every request that is not a
/// read): None, closed; Some(d), open, and an attempt must be over within
/// d (its timeout is cut to that), so it cannot land after another
/// process could hold the lease.
pub type WriteGate = Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// Called once per HTTP exchange with its verb and status code (0 when no
/// response came back).
pub type RequestObserver = Arc<dyn Fn(Verb, u16) + Send + Sync>;

#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

pub struct Client {
    base: String,
    https: bool,
    token: Option<Arc<TokenFile>>,
    ca: Option<CaFile>,
    agent: Mutex<AgentState>,
    cfg: ClientConfig,
    observer: Option<RequestObserver>,
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
    /// write with [`super::Error::NotLeader`] before anything is sent.
    write_gate: Option<WriteGate>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(endpoint: Endpoint, cfg: ClientConfig) -> Result<Client> {
        let ca = endpoint.ca_file.map(CaFile::new);
        let pem = match &ca {
            Some(ca) if endpoint.origin.is_https() => ca.changed()?,
            _ => None,
        };
        let https = endpoint.origin.is_https();
        let proxy = proxy_of(endpoint.proxy.as_ref())?;
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

    pub fn with_observer(mut self, observer: RequestObserver) -> Client {
        self.observer = Some(observer);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn get(&self, path: &ResourcePath) -> Result<Value> {
        self.get_as(path)
    }

    /// [`Client::get`], the answer decoded as `O`.
    pub fn get_as<O: Decode>(&self, path: &ResourcePath) -> Result<O> {
        let req = self.req(Verb::Get, Method::Get, path, Retry::Read);
        self.json(req)
    }

    pub fn create(&self, path: &ResourcePath, body: &impl serde::Serialize) -> Result<Value> {
        self.create_as(path, body)
    }

    /// [`Client::create`], the answer decoded as `O` (a typed view, or
    /// [`crate::kube::fields::Skipped`] when nothing of it is read).
    pub fn create_as<O: Decode>(
        &self,
        path: &ResourcePath,
        body: &impl serde::Serialize,
    ) -> Result<O> {
        let mut req = self.req(Verb::Create, Method::Post, path, Retry::Write);
        req.body = Some((JSON, encode(body)?));
        self.json(req)
    }

    /// Replace an object (PUT), bound to the resourceVersion in `body`.
    pub fn update(&self, path: &ResourcePath, body: &impl serde::Serialize) -> Result<Value> {
        let mut req = self.req(Verb::Update, Method::Put, path, Retry::Write);
        req.body = Some((JSON, encode(body)?));
        self.json(req)
    }

    pub fn patch(
        &self,
        path: &ResourcePath,
        kind: PatchType,
        body: &impl serde::Serialize,
        retry: Retry,
    ) -> Result<Value> {
        self.patch_as(path, kind, body, retry)
    }

    /// [`Client::patch`], the answer decoded as `O`.
    pub fn patch_as<O: Decode>(
        &self,
        path: &ResourcePath,
        kind: PatchType,
        body: &impl serde::Serialize,
        retry: Retry,
    ) -> Result<O> {
        let mut req = self.req(Verb::Patch, Method::Patch, path, retry);
        req.body = Some((kind.content_type(), encode(body)?));
        self.json(req)
    }

    /// Delete, optionally only if uid / resourceVersion still match (409 otherwise).
    pub fn delete(&self, path: &ResourcePath, pre: Option<&Preconditions>) -> Result<Value> {
        let mut req = self.req(Verb::Delete, Method::Delete, path, Retry::Write);
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
}

/// A request body's JSON: a `Value` or a struct that borrows what it
/// writes (no tree is built for a body the operator composes).
fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(body)
        .map_err(|e| super::Error::Decode(format!("cannot encode a request body ({e})")))
}
