//! The composition root: the endpoint is resolved once, and from it every
//! client (the API client behind the leader's write gate, the token
//! reviews', the Lease's), the TLS material, the health, metrics and view
//! servers, and leader election are built here and handed to the
//! controller. Nothing under `controller/` builds a client or binds a
//! socket.

use crate::config::Config;
use crate::controller::error::StartError;
use crate::controller::lister::ApiLease;
use crate::controller::{Controller, Wiring};
use crate::health::Health;
use crate::kube::{Client, ClientConfig, Endpoint, Error, ListParams, ResourcePath};
use crate::metrics::Metrics;
use crate::runtime::leader::{self, ElectionConfig, Elector, Leadership};
use crate::runtime::Stop;
use crate::server;
use crate::token_access::{ApiReviewer, TokenAccess, METRICS_PATH, VIEW_PATH};
use std::sync::Arc;
use std::time::Duration;

/// Run until `stop` (SIGTERM/SIGINT). Returns an error only for what
/// makes the operator unable to start (bad endpoint, a port taken).
pub fn run(cfg: Config, stop: Arc<Stop>) -> Result<(), StartError> {
    let env = |k: &str| std::env::var(k).ok();
    let endpoint = Endpoint::resolve(&cfg.endpoint, &env)?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let identity = cfg.election.as_ref().map(|_| leader::identity(&env));
    let warned = metrics.clone();
    let api = client(&endpoint, api_config(&cfg, identity.clone()), &metrics)?
        .with_warning_observer(Arc::new(move || warned.api_warning()));
    let (api, election) = match (&cfg.election, identity.clone()) {
        (Some(e), Some(id)) => {
            let (elector, leadership) = election(&endpoint, e, id, &metrics, &health)?;
            let gate = leadership.clone();
            let api = api.with_write_gate(Arc::new(move || gate.write_window()));
            (api, Some((elector, leadership)))
        }
        _ => {
            metrics.set_sole_writer();
            (api, None)
        }
    };
    let api = Arc::new(api);
    probe_api(&cfg, &endpoint, identity.clone(), &metrics, &health, &stop)?;
    let health_at = server::start("health", cfg.health_addr, None, health.handler())
        .map_err(StartError::Listen)?;
    let off_loopback = cfg.ui_addr.is_some_and(|a| !a.ip().is_loopback());
    let security = match cfg.metrics.secure && (cfg.metrics.addr.is_some() || off_loopback) {
        true => Some(Security::new(&cfg, &endpoint, &metrics, identity)?),
        false => None,
    };
    let metrics_at = serve_metrics(&cfg, &metrics, security.as_ref())?;
    let base_url = api.base_url().to_string();
    let wiring = Wiring {
        client: api,
        metrics,
        health,
        election,
        stop,
    };
    let controller = Controller::new(cfg, wiring);
    let view_at = serve_view(controller.config(), &controller, security.as_ref())?;
    let scope = match controller.config().namespaces.as_slice() {
        [] => "all namespaces".to_string(),
        names => format!("namespaces {}", names.join(",")),
    };
    log::info!(
        "openmed-operator {} starting: API server {base_url}, {scope}, health on http://{health_at}, metrics on {metrics_at}, live view on {view_at}",
        env!("CARGO_PKG_VERSION"),
    );
    controller.run()
}

/// The API client's settings: the flags' limits and this process's
/// identity in its User-Agent.
fn api_config(cfg: &Config, identity: Option<String>) -> ClientConfig {
    ClientConfig {
        limits: cfg.limits,
        max_list_pages: cfg.list_max_pages,
        max_list_items: cfg.list_max_items,
        max_list_bytes: cfg.list_max_bytes,
        identity,
        shapes: crate::controller::cache::shapes(),
        ..ClientConfig::default()
    }
}

/// A client of `endpoint` whose requests are counted in the metrics.
fn client(
    endpoint: &Endpoint,
    cfg: ClientConfig,
    metrics: &Arc<Metrics>,
) -> Result<Client, StartError> {
    let observer = metrics.clone();
    Ok(
        Client::new(endpoint.clone(), cfg)?.with_observer(Arc::new(move |verb, code| {
            observer.api_request(verb.as_str(), code)
        })),
    )
}

/// The probe that ties readiness to the API server's reads (§9.D20): a
/// client of its own, each request tried once within the probe's timeout,
/// listing at most one model in the first namespace watched.
fn probe_api(
    cfg: &Config,
    endpoint: &Endpoint,
    identity: Option<String>,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    stop: &Arc<Stop>,
) -> Result<(), StartError> {
    let probe_cfg = ClientConfig {
        request_timeout: crate::health::API_PROBE.1,
        max_attempts: 1,
        identity,
        ..ClientConfig::default()
    };
    let probe = client(endpoint, probe_cfg, metrics)?;
    let path = ResourcePath::collection(
        crate::model::RESOURCE,
        cfg.namespaces.first().map(String::as_str),
    )?;
    let one = ListParams {
        limit: Some(1),
        ..ListParams::default()
    };
    let read = move || match probe.list(&path, &one) {
        Ok(_) => Ok(()),
        // Throttled is an answer: the server is there, only busy.
        Err(Error::Api(a)) if a.code == 429 => Ok(()),
        Err(Error::Throttled { .. }) => Ok(()),
        Err(e) => Err(match (e.code(), e) {
            (Some(code), _) => format!("HTTP {code}"),
            (None, Error::Timeout(_)) => {
                format!("no answer within {:?}", crate::health::API_PROBE.1)
            }
            (None, _) => "no connection".to_string(),
        }),
    };
    health
        .probe_api(read, stop.clone())
        .map_err(StartError::Thread)
}

/// The lease loop and the write gate it drives, for `--leader-elect`. The
/// loop has its own client: no gate, each request as short as the retry
/// period and tried once (the loop is the retry).
fn election(
    endpoint: &Endpoint,
    e: &ElectionConfig,
    identity: String,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
) -> Result<(Elector, Arc<Leadership>), StartError> {
    let namespace = e
        .lease_namespace
        .clone()
        .or_else(|| {
            let f = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
            std::fs::read_to_string(f)
                .ok()
                .map(|n| n.trim().to_string())
        })
        .filter(|n| crate::kube::names::is_dns_label(n))
        .ok_or(StartError::NoLeaseNamespace)?;
    let lease_cfg = ClientConfig {
        request_timeout: e.retry_period.max(Duration::from_secs(1)),
        max_attempts: 1,
        identity: Some(identity.clone()),
        ..ClientConfig::default()
    };
    let lease_client = client(endpoint, lease_cfg, metrics)?;
    let leadership = Arc::new(Leadership::new(e, metrics.clone()));
    let check = leadership.clone();
    health.watch_lease(Arc::new(move || check.check()));
    let elector = Elector::new(
        Box::new(ApiLease(lease_client)),
        e.clone(),
        namespace,
        identity,
        leadership.clone(),
        Box::new(|why| {
            log::error!(
                "lost the leader lease ({why}); writes stopped; exiting to rejoin as a candidate"
            );
            std::process::exit(1)
        }),
    );
    Ok((elector, leadership))
}

/// TLS and the token checks that `--metrics-secure` asks of /metrics (and
/// of the live view off loopback). The reviews go out on a client of their
/// own, without the leader's write gate (the reviews are creates, and a
/// standby answers scrapes too), short (a scrape does not wait for retries).
struct Security {
    tls: Arc<rustls::ServerConfig>,
    /// Token checks for `get` on /metrics, and on /live-view.
    metrics: Arc<TokenAccess>,
    view: Arc<TokenAccess>,
}

impl Security {
    fn new(
        cfg: &Config,
        endpoint: &Endpoint,
        metrics: &Arc<Metrics>,
        identity: Option<String>,
    ) -> Result<Security, StartError> {
        use crate::certificate::{default_names, CertDir, SelfSigned};
        let source: Arc<dyn rustls::server::ResolvesServerCert> = match &cfg.metrics.cert_dir {
            Some(dir) => Arc::new(CertDir::open(dir).map_err(StartError::Certificate)?),
            None => {
                let ns = std::env::var("POD_NAMESPACE").ok();
                let names = default_names(ns.as_deref());
                Arc::new(SelfSigned::new(names).map_err(StartError::Certificate)?)
            }
        };
        let tls = crate::certificate::server_config(source).map_err(StartError::Certificate)?;
        let review_cfg = ClientConfig {
            request_timeout: Duration::from_secs(5),
            max_attempts: 1,
            identity,
            ..ClientConfig::default()
        };
        let reviews = Arc::new(client(endpoint, review_cfg, metrics)?);
        let access = |path| {
            let client = reviews.clone();
            Arc::new(TokenAccess::new(Box::new(ApiReviewer { client, path })))
        };
        Ok(Security {
            tls: Arc::new(tls),
            metrics: access(METRICS_PATH),
            view: access(VIEW_PATH),
        })
    }
}

/// Start the /metrics server as `--metrics-*` say; where it listens, for
/// the log.
fn serve_metrics(
    cfg: &Config,
    metrics: &Arc<Metrics>,
    security: Option<&Security>,
) -> Result<String, StartError> {
    let Some(addr) = cfg.metrics.addr else {
        return Ok("no address (--metrics-addr 0)".into());
    };
    let Some(s) = security else {
        let open = metrics.handler(None);
        let bound = server::start("metrics", addr, None, open).map_err(StartError::Listen)?;
        return Ok(format!("http://{bound} (open: --metrics-secure=false)"));
    };
    let handler = metrics.handler(Some(s.metrics.clone()));
    let bound =
        server::start("metrics", addr, Some(s.tls.clone()), handler).map_err(StartError::Listen)?;
    Ok(format!(
        "https://{bound} (callers need a token allowed get on /metrics)"
    ))
}

/// Start the live view (`--ui-addr`) over the controller's caches: plain
/// on loopback, else with the metrics' TLS and token check.
fn serve_view(
    cfg: &Config,
    controller: &Controller,
    security: Option<&Security>,
) -> Result<String, StartError> {
    let Some(addr) = cfg.ui_addr else {
        return Ok("no address".into());
    };
    let hub = crate::live_view::hub::Hub::new(Box::new(controller.live_view_rows()));
    hub.start().map_err(StartError::Thread)?;
    let (tls, access, scheme) = match security {
        Some(s) if !addr.ip().is_loopback() => (Some(s.tls.clone()), Some(s.view.clone()), "https"),
        _ => (None, None, "http"),
    };
    let handler = crate::live_view::page::handler(hub, access);
    let bound = server::start("view", addr, tls, handler).map_err(StartError::Listen)?;
    Ok(format!("{scheme}://{bound}/"))
}
