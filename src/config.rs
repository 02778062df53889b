//! What a run of the operator is configured to do, whatever set it: the
//! flags ([`crate::cli`]) start from [`Config::default`].

use crate::kube::ratelimit::Limits;
use crate::kube::EndpointOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Empty: all namespaces.
    pub namespaces: Vec<String>,
    pub endpoint: EndpointOptions,
    pub health_addr: SocketAddr,
    /// `--metrics-*`: where and how /metrics is served.
    pub metrics: MetricsServing,
    /// `--ui-addr`: the live view (None: not served).
    pub ui_addr: Option<SocketAddr>,
    pub resync: Duration,
    pub liveness_window: Duration,
    pub log_format: LogFormat,
    /// Bounds on one paged list (`--list-max-pages`, `--list-max-items`,
    /// `--list-max-mib`, held in bytes).
    pub list_max_pages: u32,
    pub list_max_items: usize,
    pub list_max_bytes: usize,
    /// `--allow-any-target`: any Deployment may be a target, opted in or not.
    pub allow_any_target: bool,
    /// The operator's own Deployment, never a target: `POD_NAMESPACE` and
    /// `OPENMED_OPERATOR_DEPLOYMENT` (set by the shipped manifests).
    pub own_deployment: Option<(String, String)>,
    /// `--workers`: resources reconciled at once at most (the pool grows
    /// to it under a burst and shrinks to one worker when quiet).
    pub workers: usize,
    /// `--qps`, `--burst`: the client-side rate limit.
    pub limits: Limits,
    /// `--leader-elect` and its Lease (None: this replica always writes).
    pub election: Option<ElectionConfig>,
    /// `--selector`: the OpenMedModels this instance manages.
    pub selector: Option<String>,
}

/// The defaults the `--help` text and docs/reference.md state.
impl Default for Config {
    fn default() -> Self {
        Config {
            namespaces: Vec::new(),
            endpoint: EndpointOptions::default(),
            health_addr: ([0, 0, 0, 0], 8080).into(),
            metrics: MetricsServing::default(),
            ui_addr: Some(([127, 0, 0, 1], 8081).into()),
            resync: Duration::from_secs(15),
            liveness_window: crate::runtime::reflector::MAX_SILENCE,
            log_format: LogFormat::Text,
            list_max_pages: 1_000,
            list_max_items: 200_000,
            list_max_bytes: 64 << 20,
            allow_any_target: false,
            own_deployment: None,
            workers: 16,
            limits: Limits::default(),
            election: None,
            selector: None,
        }
    }
}

/// How /metrics is served.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsServing {
    /// None: not served (`--metrics-addr 0`).
    pub addr: Option<SocketAddr>,
    /// TLS with token review and access review; false: plain and open.
    pub secure: bool,
    /// `tls.crt`/`tls.key`; None: self-signed.
    pub cert_dir: Option<PathBuf>,
}

impl Default for MetricsServing {
    fn default() -> Self {
        MetricsServing {
            addr: Some(([0, 0, 0, 0], 8443).into()),
            secure: true,
            cert_dir: None,
        }
    }
}

pub use crate::runtime::leader::ElectionConfig;

/// The Lease of a shard given no `--lease-name`: one per selector, so each
/// shard elects its own leader without a flag to forget.
pub fn lease_name_for(selector: &str) -> String {
    let digest = crate::model::canonical::sha256_hex(selector.as_bytes());
    format!("openmed-operator-{}", &digest[..10])
}
