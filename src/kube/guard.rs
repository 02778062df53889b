//! Guards that decide what the client may talk to, checked before any
//! connection or DNS lookup is made.

use super::error::{Error, Result};
use std::net::IpAddr;

/// A checked API server origin: scheme, host and port, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    https: bool,
    /// As it appears in a URL (IPv6 in brackets).
    host: String,
    port: u16,
}

impl Origin {
    /// Accept only `http(s)://host[:port][/]`. Plain http only to loopback, so
    /// a bearer token never crosses a network in clear text.
    pub fn parse(raw: &str) -> Result<Origin> {
        let bad = |why: &str| Error::Config(format!("refusing API server URL {raw:?}: {why}"));
        let ascii = super::idn::url_with_ascii_host(raw.trim())
            .ok_or_else(|| bad("the host name has no ASCII form"))?;
        let url = url::Url::parse(&ascii).map_err(|e| bad(&format!("not a URL ({e})")))?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => return Err(bad(&format!("scheme {other:?} is not http or https"))),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("user info in the URL is not allowed; use a token file"));
        }
        if url.path() != "/" && !url.path().is_empty() {
            return Err(bad("the URL must be an origin without a path"));
        }
        if url.query().is_some() {
            return Err(bad("the URL must not carry a query"));
        }
        if url.fragment().is_some() {
            return Err(bad("the URL must not carry a fragment"));
        }
        let host = url.host().ok_or_else(|| bad("no host"))?;
        let loopback = match &host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback(),
        };
        if !https && !loopback {
            return Err(bad(
                "plain http is only allowed to a loopback address (127.0.0.0/8, ::1, localhost); use https",
            ));
        }
        let host = match host {
            url::Host::Domain(d) => d.to_ascii_lowercase(),
            url::Host::Ipv4(ip) => ip.to_string(),
            url::Host::Ipv6(ip) => format!("[{ip}]"),
        };
        let port = url.port_or_known_default().ok_or_else(|| bad("no port"))?;
        Ok(Origin { https, host, port })
    }

    /// The in-cluster origin from the service environment variables.
    pub fn in_cluster(host: &str, port: &str) -> Result<Origin> {
        let host = host.trim();
        let host = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
            _ => host.to_string(),
        };
        Origin::parse(&format!("https://{host}:{}", port.trim()))
    }

    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The host as in a URL: lower case, IPv6 in brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `scheme://host:port`, without a trailing slash.
    pub fn base_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// A request path must be absolute, with no empty, `.` or `..` segment.
/// Paths are built by [`super::path`]; this is the last line of defence.
pub fn check_path(path: &str) -> Result<()> {
    let bad = |why: &str| Error::Config(format!("refusing request path {path:?}: {why}"));
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| bad("must start with /"))?;
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    for seg in rest.split('/') {
        match seg {
            "" => return Err(bad("empty segment")),
            "." | ".." => return Err(bad("dot segment")),
            s if s.contains("%2e%2e") || s.contains("%2E%2E") => return Err(bad("dot segment")),
            _ => {}
        }
    }
    if path.contains(['?', '#', ' ', '\\']) {
        return Err(bad("query, fragment, space or backslash in path"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_origins() {
        for (given, base) in [
            ("https://10.0.0.1", "https://10.0.0.1:443"),
            ("https://api.example:6443/", "https://api.example:6443"),
            ("http://127.0.0.1:8001", "http://127.0.0.1:8001"),
            ("http://127.9.9.9:8001", "http://127.9.9.9:8001"),
            ("http://localhost:8001", "http://localhost:8001"),
            ("http://[::1]:8001", "http://[::1]:8001"),
            (
                "https://API.München.example",
                "https://api.xn--mnchen-3ya.example:443",
            ),
        ] {
            let origin = Origin::parse(given).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!(origin.base_url(), base, "{given}");
        }
    }

    #[test]
    fn refuses_non_origins_with_a_reason() {
        for (raw, why) in [
            ("file:///etc/passwd", "scheme"),
            ("https://user@host", "user info"),
            ("https://user:pw@host", "user info"),
            ("https://host/api/v1", "path"),
            ("https://host/?x=1", "query"),
            ("https://host/#frag", "fragment"),
            ("not a url", "not a URL"),
            ("http://kubernetes.default.svc", "loopback"),
            ("http://10.0.0.1:8080", "loopback"),
            ("http://[::2]:80", "loopback"),
        ] {
            let err = Origin::parse(raw).unwrap_err().to_string();
            assert!(err.contains(why), "{raw}: {err}");
        }
    }

    #[test]
    fn in_cluster_brackets_ipv6() {
        assert_eq!(
            Origin::in_cluster("fd00::1", "443").unwrap().base_url(),
            "https://[fd00::1]:443"
        );
        assert_eq!(
            Origin::in_cluster("10.96.0.1", "6443").unwrap().base_url(),
            "https://10.96.0.1:6443"
        );
        assert!(Origin::in_cluster("10.96.0.1", "x").is_err());
    }

    #[test]
    fn paths() {
        assert!(check_path("/api/v1/namespaces/a/configmaps").is_ok());
        for bad in [
            "api/v1",
            "/",
            "//api",
            "/api//v1",
            "/api/../v1",
            "/api/./v1",
            "/a?b",
            "/a/%2e%2e/b",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
