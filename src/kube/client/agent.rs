//! The HTTP agent: its limits, the proxy, and the TLS trust of the CA
//! file, rebuilt when that file changes.

use super::transport::LeanTcpConnector;
use super::{Client, ClientConfig, USER_AGENT};
use crate::kube::error::{Error, Result};
use crate::kube::proxy::Proxy;
use crate::lock::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    ConnectProxyConnector, Connector, NextTimeout, RustlsConnector,
};

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
        // Up to one connection per worker at the most workers, so a burst
        // does not close and reopen (TLS handshake) what the next pass
        // needs; ureq closes one idle for 15 s.
        .max_idle_connections(16)
        .max_idle_connections_per_host(16)
        // Each pooled connection keeps its buffers, so ureq's default of
        // 128 KiB each way adds up across the pool (docs/performance.md).
        // A response's head must fit in, and Kubernetes's are well under
        // 16 KiB; each of a request's headers must fit out, the bearer
        // token the largest. Bodies stream through in pieces.
        .max_response_header_size(16 * 1024)
        .input_buffer_size(20 * 1024)
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
    Ok(ureq::Agent::with_parts(
        b.build(),
        connector(),
        KeptResolver::default(),
    ))
}

/// ureq's chain (a CONNECT proxy, TCP, TLS) with our TCP link
/// ([`super::transport`]).
fn connector() -> impl Connector {
    ().chain(ConnectProxyConnector::default())
        .chain(LeanTcpConnector)
        .chain(RustlsConnector::default())
}

/// How long a resolved host name is used before it is resolved again.
const RESOLVED_FOR: Duration = Duration::from_secs(30);

/// The API server's address, resolved once and kept: ureq resolves the
/// host before every request, pooled connection or not, and with a
/// timeout set its resolver starts a thread each time. At thousands of
/// requests that thread (its stack mapped, faulted and unmapped) was a
/// large part of the operator's CPU (docs/performance.md). An address
/// literal is used as it is; a name is resolved again after
/// [`RESOLVED_FOR`].
#[derive(Debug, Default)]
struct KeptResolver {
    kept: Mutex<Option<(String, ResolvedSocketAddrs, Instant)>>,
}

impl Resolver for KeptResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
        let (Some(host), Some(port)) = (uri.host(), uri.port_u16().or(default_port(uri))) else {
            return DefaultResolver::default().resolve(uri, config, timeout);
        };
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<std::net::IpAddr>() {
            let mut out = self.empty();
            out.push(std::net::SocketAddr::new(ip, port));
            return Ok(out);
        }
        let key = format!("{host}:{port}");
        if let Some((k, addrs, at)) = lock(&self.kept).as_ref() {
            if *k == key && at.elapsed() < RESOLVED_FOR {
                return Ok(addrs.clone());
            }
        }
        let addrs = DefaultResolver::default().resolve(uri, config, timeout)?;
        *lock(&self.kept) = Some((key, addrs.clone(), Instant::now()));
        Ok(addrs)
    }
}

fn default_port(uri: &ureq::http::Uri) -> Option<u16> {
    match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn resolve(r: &KeptResolver, url: &str) -> Vec<SocketAddr> {
        let uri: ureq::http::Uri = url.parse().unwrap();
        let cfg = ureq::config::Config::default();
        let timeout = NextTimeout {
            after: ureq::unversioned::transport::time::Duration::from_secs(5),
            ..NextTimeout::default()
        };
        r.resolve(&uri, &cfg, timeout).unwrap().to_vec()
    }

    #[test]
    fn an_address_literal_is_used_as_it_is_and_a_name_is_kept() {
        let r = KeptResolver::default();
        let v4: SocketAddr = "10.96.0.1:443".parse().unwrap();
        assert_eq!(resolve(&r, "https://10.96.0.1/api"), vec![v4]);
        let v6: SocketAddr = "[fd00::1]:6443".parse().unwrap();
        assert_eq!(resolve(&r, "https://[fd00::1]:6443/api"), vec![v6]);
        assert!(lock(&r.kept).is_none(), "a literal is never looked up");
        let first = resolve(&r, "http://localhost:8080/api");
        assert!(first
            .iter()
            .all(|a| a.port() == 8080 && a.ip().is_loopback()));
        let kept = lock(&r.kept).clone().unwrap();
        assert_eq!(kept.0, "localhost:8080");
        assert_eq!(resolve(&r, "http://localhost:8080/apis"), first);
        assert_eq!(lock(&r.kept).as_ref().unwrap().2, kept.2, "resolved once");
    }
}
