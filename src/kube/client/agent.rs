//! The HTTP agent: its limits, the proxy, and the TLS trust of the CA
//! file, rebuilt when that file changes.

use super::{Client, ClientConfig, USER_AGENT};
use crate::kube::error::{Error, Result};
use crate::kube::proxy::Proxy;
use crate::lock::lock;
use std::sync::Arc;
use std::time::Instant;
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

pub(super) struct AgentState {
    pub(super) agent: ureq::Agent,
    pub(super) ca_checked: Instant,
}

/// The agent's form of the CONNECT proxy the endpoint names, if any.
pub(super) fn proxy_of(proxy: Option<&Proxy>) -> Result<Option<ureq::Proxy>> {
    match proxy {
        Some(p) => {
            let url = p.url_with_credentials();
            let built =
                ureq::Proxy::new(&url).map_err(|_| Error::Config(format!("unusable proxy {p}")))?;
            log::info!("reaching the API server through the proxy {p}");
            Ok(Some(built))
        }
        None => Ok(None),
    }
}

/// The agent for every request. Only the proxy chosen by our own rules
/// ([`crate::kube::proxy`]), never ureq's reading of the environment.
pub(super) fn build_agent(
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

impl Client {
    /// The agent to use, rebuilt first if the CA file has changed.
    pub(super) fn current_agent(&self) -> Result<ureq::Agent> {
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
