//! Whether the connection to the API server goes through a proxy, decided
//! once at start by the rules of Go's `http.ProxyFromEnvironment`
//! (golang.org/x/net/http/httpproxy), which client-go and kubectl use, so
//! the operator goes the way kubectl goes from the same environment:
//! - `HTTPS_PROXY` for an https server, `HTTP_PROXY` for an http one (never
//!   the other); the upper-case name wins, an empty value is unset.
//! - `localhost` and loopback addresses are never proxied.
//! - `NO_PROXY` is a comma-separated list: `*` (no proxy at all), IP
//!   addresses, CIDRs, and domain names matching the name and its
//!   subdomains (with a leading `.` or `*.`, only subdomains); each may
//!   carry a `:port`. Malformed entries are skipped, as Go skips them.
//! - A value without a scheme means `http://`.
//!
//! Only `http://` proxies are supported: a CONNECT tunnel over plain TCP,
//! with TLS to the API server inside it. Any other scheme (`https://`,
//! `socks5://`) is refused at start with the variable named, rather than
//! quietly going around the proxy.

use super::error::{Error, Result};
use super::guard::Origin;
use std::fmt;
use std::net::IpAddr;

/// The proxy chosen for the API server. Its `Debug` and `Display` never
/// show the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The variable it came from, for the log line and errors.
    pub source: &'static str,
    /// As in a URL: IPv6 in brackets.
    pub host: String,
    pub port: u16,
    /// `user:password`, percent-encoded as given.
    userinfo: Option<String>,
}

impl Proxy {
    /// The URL ureq is given, credentials included.
    pub fn url_with_credentials(&self) -> String {
        match &self.userinfo {
            Some(u) => format!("http://{u}@{}:{}", self.host, self.port),
            None => format!("http://{}:{}", self.host, self.port),
        }
    }

    /// The user name and password, decoded, as they travel (to be scrubbed
    /// from logs), and their `Proxy-Authorization` form.
    pub fn secrets(&self) -> Vec<String> {
        let Some(info) = &self.userinfo else {
            return Vec::new();
        };
        let (user, pass) = info.split_once(':').unwrap_or((info, ""));
        let (user, pass) = (percent_decoded(user), percent_decoded(pass));
        let mut out = vec![info.clone(), base64(&format!("{user}:{pass}"))];
        out.extend([pass].into_iter().filter(|p| p.len() >= 4));
        out
    }
}

impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "http://{}:{} (from {}",
            self.host, self.port, self.source
        )?;
        if self.userinfo.is_some() {
            f.write_str(", with credentials")?;
        }
        f.write_str(")")
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Proxy({self})")
    }
}

/// The proxy for `origin`, if the environment (`env` looks a variable up)
/// asks for one.
pub fn for_origin(origin: &Origin, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Proxy>> {
    let any = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find_map(|n| env(n).filter(|v| !v.is_empty()).map(|v| (n, v)))
    };
    let chosen = if origin.is_https() {
        any(["HTTPS_PROXY", "https_proxy"])
    } else {
        any(["HTTP_PROXY", "http_proxy"])
    };
    let Some((source, raw)) = chosen else {
        return Ok(None);
    };
    let no_proxy = any(["NO_PROXY", "no_proxy"])
        .map(|(_, v)| v)
        .unwrap_or_default();
    let port = origin.port().to_string();
    if !use_proxy(&NoProxy::parse(&no_proxy), origin.host(), &port) {
        return Ok(None);
    }
    parse_proxy(source, &raw).map(Some)
}

/// A proxy URL as Go reads one: without a known scheme, `http://` is put in
/// front. Only `http` is supported.
fn parse_proxy(source: &'static str, raw: &str) -> Result<Proxy> {
    let bad = |why: String| Error::Config(format!("{source}: {why}; or run with --no-proxy"));
    let known = ["http://", "https://", "socks5://"];
    let text = if known
        .iter()
        .any(|k| raw.to_ascii_lowercase().starts_with(k))
    {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let url = super::idn::url_with_ascii_host(&text)
        .and_then(|ascii| url::Url::parse(&ascii).ok())
        .ok_or_else(|| bad("not a proxy URL".into()))?;
    if url.scheme() != "http" {
        return Err(bad(format!(
            "proxy scheme {:?} is not supported, only http:// (CONNECT)",
            url.scheme()
        )));
    }
    let host = match url.host() {
        Some(url::Host::Ipv6(a)) => format!("[{a}]"),
        Some(h) => h.to_string(),
        None => return Err(bad("the proxy URL has no host".into())),
    };
    let userinfo = match (url.username(), url.password()) {
        ("", None) => None,
        (u, None) => Some(u.to_string()),
        (u, Some(p)) => Some(format!("{u}:{p}")),
    };
    Ok(Proxy {
        source,
        host,
        port: url.port().unwrap_or(80),
        userinfo,
    })
}

/// The parsed `NO_PROXY` list.
#[derive(Debug, Default)]
struct NoProxy {
    all: bool,
    ips: Vec<(IpAddr, Option<String>)>,
    cidrs: Vec<(IpAddr, u8)>,
    /// Suffixes with their leading dot; `true` when the bare name matches too.
    domains: Vec<(String, Option<String>, bool)>,
}

impl NoProxy {
    fn parse(list: &str) -> NoProxy {
        let mut np = NoProxy::default();
        for entry in list.split(',') {
            let p = entry.trim().to_ascii_lowercase();
            if p.is_empty() {
                continue;
            }
            if p == "*" {
                return NoProxy {
                    all: true,
                    ..NoProxy::default()
                };
            }
            if let Some(cidr) = parse_cidr(&p) {
                np.cidrs.push(cidr);
                continue;
            }
            let (host, port) = match split_host_port(&p) {
                Some(("", _)) => continue,
                Some((h, port)) => (h, Some(port)),
                None => (p.as_str(), None),
            };
            if let Some(ip) = parse_ip(host) {
                np.ips.push((ip, port.map(str::to_string)));
                continue;
            }
            let host = host
                .strip_prefix('*')
                .filter(|h| h.starts_with('.'))
                .unwrap_or(host);
            let (suffix, bare_too) = match host.strip_prefix('.') {
                Some(rest) => (rest, false),
                None => (host, true),
            };
            np.domains.push((
                format!(".{}", ascii_domain(suffix)),
                port.map(str::to_string),
                bare_too,
            ));
        }
        np
    }
}

/// Go's `useProxy`: `host` as in a URL, `port` the request's (defaulted).
fn use_proxy(np: &NoProxy, host: &str, port: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = parse_ip(host);
    if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    if np.all {
        return false;
    }
    let port_ok = |want: &Option<String>| want.as_deref().is_none_or(|w| w == port);
    if let Some(ip) = ip {
        if np.ips.iter().any(|(m, p)| *m == ip && port_ok(p))
            || np.cidrs.iter().any(|(net, bits)| in_cidr(ip, *net, *bits))
        {
            return false;
        }
    }
    let host = ascii_domain(&host.to_ascii_lowercase());
    !np.domains.iter().any(|(suffix, p, bare_too)| {
        (host.ends_with(suffix.as_str()) || (*bare_too && host == suffix[1..])) && port_ok(p)
    })
}

/// An IP address, IPv4-mapped IPv6 folded to IPv4 (Go's `IP.Equal` treats
/// them as one).
fn parse_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    })
}

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = s.split_once('/')?;
    let ip: IpAddr = addr.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let (a, b, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = width - u32::from(bits);
    shift >= width || (a >> shift) == (b >> shift)
}

/// Go's `net.SplitHostPort`, enough for NO_PROXY entries: `host:port` with
/// one colon, or `[v6]:port`. None when there is no port to split off.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, port) = rest.split_once("]:")?;
        return Some((host, port));
    }
    let (host, port) = s.split_once(':')?;
    (!port.contains(':')).then_some((host, port))
}

/// A domain in its ASCII (punycode) form, as Go compares them.
fn ascii_domain(s: &str) -> String {
    super::idn::domain_to_ascii(s).unwrap_or_else(|| s.to_string())
}

/// `%XX` escapes decoded (user info in a URL); anything else kept.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex
            .filter(|_| b[i] == b'%')
            .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding: the `Proxy-Authorization` form of the
/// credentials, so it can be scrubbed from logs too.
fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `UseProxyTests` and `noProxy` from golang.org/x/net's proxy_test.go
    /// (`TestUseProxy`: each host with port 80).
    #[test]
    fn no_proxy_matches_as_go_does() {
        let np = NoProxy::parse(
            "foobar.com, .barbaz.net, *.wildcard.io, 192.168.1.1, 192.168.1.2:81, \
             192.168.1.3:80, 10.0.0.0/30, 2001:db8::52:0:1, [2001:db8::52:0:2]:443, \
             [2001:db8::52:0:3]:80, 2002:db8:a::45/64",
        );
        let cases = [
            ("localhost", false),
            ("127.0.0.1", false),
            ("127.0.0.2", false),
            ("[::1]", false),
            ("[::2]", true),
            ("192.168.1.1", false),
            ("192.168.1.2", true),
            ("192.168.1.3", false),
            ("192.168.1.4", true),
            ("10.0.0.2", false),
            ("[2001:db8::52:0:1]", false),
            ("[2001:db8::52:0:2]", true),
            ("[2001:db8::52:0:3]", false),
            ("[2002:db8:a::123]", false),
            ("[fe80::424b:c8be:1643:a1b6]", true),
            ("barbaz.net", true),
            ("www.barbaz.net", false),
            ("foobar.com", false),
            ("www.foobar.com", false),
            ("foofoobar.com", true),
            ("baz.com", true),
            ("localhost.net", true),
            ("local.localhost", true),
            ("barbarbaz.net", true),
            ("wildcard.io", true),
            ("nested.wildcard.io", false),
            ("awildcard.io", true),
        ];
        for (host, proxied) in cases {
            assert_eq!(use_proxy(&np, host, "80"), proxied, "{host}");
        }
        let all = NoProxy::parse("*");
        for (host, _) in cases {
            assert!(!use_proxy(&all, host, "80"), "{host} with NO_PROXY=*");
        }
        // TestInvalidNoProxy: a malformed entry is skipped.
        assert!(use_proxy(&NoProxy::parse(":1"), "example.com", "80"));
    }

    fn origin(url: &str) -> Origin {
        Origin::parse(url).unwrap()
    }

    fn choose(url: &str, vars: &[(&str, &str)]) -> Result<Option<String>> {
        let env = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        Ok(for_origin(&origin(url), &env)?.map(|p| p.url_with_credentials()))
    }

    /// Cases of `proxyForURLTests` in golang.org/x/net's proxy_test.go that
    /// apply to an http(s) origin, and the variables' precedence.
    #[test]
    fn the_variable_is_chosen_by_the_scheme_as_go_does() {
        let some = |s: &str| Ok(Some(s.to_string()));
        let both = [
            ("HTTP_PROXY", "http.proxy.tld"),
            ("HTTPS_PROXY", "secure.proxy.tld"),
        ];
        assert_eq!(
            choose("https://secure.tld", &both),
            some("http://secure.proxy.tld:80")
        );
        assert_eq!(choose("https://secure.tld", &both[..1]), Ok(None));
        assert_eq!(
            choose(
                "https://api.corp:6443",
                &[("HTTPS_PROXY", "cache.corp.example.com:1234")]
            ),
            some("http://cache.corp.example.com:1234")
        );
        assert_eq!(
            choose("https://api.corp", &[("https_proxy", "localhost")]),
            some("http://localhost:80")
        );
        let lower_and_upper = [
            ("https_proxy", "http://low:1"),
            ("HTTPS_PROXY", "http://up:2"),
        ];
        assert_eq!(
            choose("https://api.corp", &lower_and_upper),
            some("http://up:2")
        );
        let empty_upper = [("HTTPS_PROXY", ""), ("https_proxy", "http://low:1")];
        assert_eq!(
            choose("https://api.corp", &empty_upper),
            some("http://low:1")
        );
        for (no_proxy, want) in [
            ("example.com", None),
            (".example.com", Some("http://proxy:80")),
            ("ample.com", Some("http://proxy:80")),
            (".foo.com", Some("http://proxy:80")),
            ("xn--fsq092h.com", None),
        ] {
            let host = if no_proxy.starts_with("xn--") {
                "www.示例.com"
            } else {
                "example.com"
            };
            let vars = [("HTTPS_PROXY", "proxy"), ("NO_PROXY", no_proxy)];
            let got = choose(&format!("https://{host}"), &vars).unwrap();
            assert_eq!(got.as_deref(), want, "NO_PROXY={no_proxy}");
        }
    }

    #[test]
    fn loopback_is_never_proxied_and_ports_count() {
        let vars = [
            ("HTTPS_PROXY", "http://p:3128"),
            ("HTTP_PROXY", "http://p:3128"),
        ];
        for url in [
            "http://127.0.0.1:8001",
            "https://[::1]:6443",
            "https://localhost",
        ] {
            assert_eq!(choose(url, &vars), Ok(None), "{url}");
        }
        let np = [
            ("HTTPS_PROXY", "http://p:3128"),
            ("NO_PROXY", "10.96.0.1:443"),
        ];
        assert_eq!(choose("https://10.96.0.1", &np), Ok(None));
        assert!(choose("https://10.96.0.1:6443", &np).unwrap().is_some());
        let cidr = [
            ("HTTPS_PROXY", "http://p:3128"),
            ("no_proxy", "10.96.0.0/12,.svc"),
        ];
        assert_eq!(choose("https://10.100.0.1", &cidr), Ok(None));
        assert_eq!(choose("https://kubernetes.default.svc", &cidr), Ok(None));
        assert!(choose("https://10.112.0.1", &cidr).unwrap().is_some());
    }

    #[test]
    fn only_http_proxies_and_credentials_stay_hidden() {
        for bad in ["https://p:3128", "socks5://p:1080"] {
            let e = choose("https://api.corp", &[("HTTPS_PROXY", bad)]).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("HTTPS_PROXY") && text.contains("--no-proxy"),
                "{text}"
            );
        }
        let env = |k: &str| (k == "HTTPS_PROXY").then(|| "http://al%40ice:s3cr%3At@p:3128".into());
        let p = for_origin(&origin("https://api.corp"), &env)
            .unwrap()
            .unwrap();
        assert_eq!(
            p.to_string(),
            "http://p:3128 (from HTTPS_PROXY, with credentials)"
        );
        assert!(!format!("{p:?}").contains("s3cr"));
        assert_eq!(p.url_with_credentials(), "http://al%40ice:s3cr%3At@p:3128");
        let secrets = p.secrets();
        assert!(secrets.contains(&"s3cr:t".to_string()), "{secrets:?}");
        assert!(secrets.contains(&base64("al@ice:s3cr:t")), "{secrets:?}");
        assert_eq!(base64("user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64("ab"), "YWI=");
    }
}
