//! Where the API server is and how we prove who we are: in-cluster service
//! account or an explicit URL, with a bearer token that is re-read from its
//! file (projected tokens expire) and a CA file that is re-read on change.

use super::error::{Error, Result};
use super::guard::Origin;
use super::proxy::{self, Proxy};
use crate::lock::lock;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

pub const SA_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
pub const SA_CA_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// How often the token file is re-read at most, unless a 401 asks sooner.
pub const TOKEN_MAX_AGE: Duration = Duration::from_secs(60);

/// A bearer token. Its `Debug` and `Display` never show the value.
/// Shared: every request sends it, so a copy is a reference count.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(std::sync::Arc<str>);

impl Secret {
    pub fn new(s: String) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What the user asked for on the command line; `None` means "not given".
#[derive(Debug, Clone, Default)]
pub struct EndpointOptions {
    pub server: Option<String>,
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    /// `--no-proxy`: connect directly whatever `HTTPS_PROXY` says.
    pub no_proxy: bool,
}

/// Resolved once at start and cloned for each client: the clones share
/// the token file, so a rotated token is read once for all of them.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub origin: Origin,
    pub token: Option<std::sync::Arc<TokenFile>>,
    pub ca_file: Option<PathBuf>,
    /// The proxy the environment names for this origin (see [`super::proxy`]).
    pub proxy: Option<Proxy>,
}

impl Endpoint {
    /// Resolve the endpoint. `env` looks up an environment variable (a
    /// parameter so tests need not touch the process environment).
    ///
    /// Flags win over `OPENMED_OPERATOR_TOKEN_PATH` / `OPENMED_OPERATOR_CA_PATH`,
    /// which win over the service-account defaults (in cluster only).
    pub fn resolve(
        opts: &EndpointOptions,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Endpoint> {
        let env_path = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
        let token_path = opts
            .token_file
            .clone()
            .or_else(|| env_path("OPENMED_OPERATOR_TOKEN_PATH"));
        let ca_path = opts
            .ca_file
            .clone()
            .or_else(|| env_path("OPENMED_OPERATOR_CA_PATH"));
        let (origin, token_path, ca_path) = match &opts.server {
            Some(server) => (Origin::parse(server)?, token_path, ca_path),
            None => {
                let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.trim().is_empty()).ok_or_else(|| {
                    Error::Config(
                        "no --server given and KUBERNETES_SERVICE_HOST is not set (not running in a cluster?)"
                            .into(),
                    )
                })?;
                // client-go's InClusterConfig reads KUBERNETES_SERVICE_PORT;
                // the _HTTPS variant and 443 only stand in when it is unset.
                let port = ["KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS"]
                    .into_iter()
                    .find_map(|k| env(k).filter(|p| !p.trim().is_empty()))
                    .unwrap_or_else(|| "443".into());
                (
                    Origin::in_cluster(&host, &port)?,
                    Some(token_path.unwrap_or_else(|| PathBuf::from(SA_TOKEN_PATH))),
                    Some(ca_path.unwrap_or_else(|| PathBuf::from(SA_CA_PATH))),
                )
            }
        };
        if origin.is_https() && ca_path.is_none() {
            return Err(Error::Config(format!(
                "{} is https but no CA file was given (--ca-file); the operator carries no system roots",
                origin.base_url()
            )));
        }
        let token = match token_path {
            Some(p) => Some(std::sync::Arc::new(TokenFile::open(p, TOKEN_MAX_AGE)?)),
            None => None,
        };
        let proxy = match opts.no_proxy {
            true => None,
            false => proxy::for_origin(&origin, env)?,
        };
        for secret in proxy.iter().flat_map(Proxy::secrets) {
            crate::redact::remember_for_good(&secret);
        }
        Ok(Endpoint {
            origin,
            token,
            ca_file: ca_path,
            proxy,
        })
    }
}

/// A bearer token backed by a file that may be rotated underneath us.
pub struct TokenFile {
    path: PathBuf,
    max_age: Duration,
    state: Mutex<TokenState>,
}

struct TokenState {
    value: Secret,
    /// `Bearer <value>`, the header sent: made at each read of the file,
    /// not at each request.
    authorization: Secret,
    read_at: Instant,
}

impl TokenState {
    fn new(value: Secret) -> TokenState {
        let authorization = Secret::new(format!("Bearer {}", value.expose()));
        TokenState {
            value,
            authorization,
            read_at: Instant::now(),
        }
    }
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    /// Read the token once; a missing or empty file at start is an error.
    pub fn open(path: PathBuf, max_age: Duration) -> Result<TokenFile> {
        let value = read_token(&path)?;
        Ok(TokenFile {
            path,
            max_age,
            state: Mutex::new(TokenState::new(value)),
        })
    }

    /// The token to send, re-read if the cached one is older than `max_age`.
    pub fn current(&self) -> Secret {
        self.fresh(|st| st.value.clone())
    }

    /// The `Authorization` header's value for [`TokenFile::current`].
    pub fn authorization(&self) -> Secret {
        self.fresh(|st| st.authorization.clone())
    }

    fn fresh(&self, read: impl FnOnce(&TokenState) -> Secret) -> Secret {
        let mut st = lock(&self.state);
        if st.read_at.elapsed() >= self.max_age {
            self.refresh(&mut st);
        }
        read(&st)
    }

    /// Re-read now (after a 401). Returns whether the token changed.
    pub fn reload(&self) -> bool {
        let mut st = lock(&self.state);
        let before = st.value.clone();
        self.refresh(&mut st);
        st.value != before
    }

    fn refresh(&self, st: &mut TokenState) {
        match read_token(&self.path) {
            Ok(v) => *st = TokenState::new(v),
            // Keep the last good token; the file may be mid-rotation.
            Err(e) => {
                log::warn!("keeping the previous token: {e}");
                st.read_at = Instant::now();
            }
        }
    }
}

fn read_token(path: &Path) -> Result<Secret> {
    let raw = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read token file {}: {e}", path.display())))?;
    let t = raw.trim();
    if t.is_empty() {
        return Err(Error::Config(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    if t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(Error::Config(format!(
            "token file {} holds characters not allowed in a header",
            path.display()
        )));
    }
    crate::redact::remember(t);
    Ok(Secret::new(t.to_string()))
}

/// Tracks a CA file so the TLS configuration can be rebuilt when it changes.
#[derive(Debug)]
pub struct CaFile {
    path: PathBuf,
    seen: Mutex<Option<(SystemTime, u64, Vec<u8>)>>,
}

impl CaFile {
    pub fn new(path: PathBuf) -> CaFile {
        CaFile {
            path,
            seen: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes if they differ from the last call's; `None` when
    /// unchanged. A read error is reported only when nothing was read before.
    pub fn changed(&self) -> Result<Option<Vec<u8>>> {
        let mut seen = lock(&self.seen);
        let meta = std::fs::metadata(&self.path);
        let stamp = meta
            .as_ref()
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if let (Some((t, l)), Some((st, sl, _))) = (stamp, seen.as_ref()) {
            if t == *st && l == *sl {
                return Ok(None);
            }
        }
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                let (t, l) = stamp.unwrap_or((SystemTime::UNIX_EPOCH, bytes.len() as u64));
                let changed = seen.as_ref().map(|(_, _, b)| b != &bytes).unwrap_or(true);
                *seen = Some((t, l, bytes.clone()));
                Ok(changed.then_some(bytes))
            }
            Err(e) if seen.is_none() => Err(Error::Config(format!(
                "cannot read CA file {}: {e}",
                self.path.display()
            ))),
            Err(e) => {
                log::warn!(
                    "keeping the previous CA: cannot read {}: {e}",
                    self.path.display()
                );
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("omo-endpoint-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn in_cluster_uses_service_env_and_overrides() {
        let dir = tmp("incluster");
        let tok = dir.join("token");
        std::fs::write(&tok, "abc\n").unwrap();
        let ca = dir.join("ca.crt");
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("OPENMED_OPERATOR_TOKEN_PATH", tok.to_str().unwrap()),
            ("OPENMED_OPERATOR_CA_PATH", ca.to_str().unwrap()),
        ]);
        let ep = Endpoint::resolve(&EndpointOptions::default(), &env).unwrap();
        assert_eq!(ep.origin.base_url(), "https://[fd00::1]:443");
        assert_eq!(ep.ca_file.as_deref(), Some(ca.as_path()));
        assert_eq!(ep.token.unwrap().current().expose(), "abc");
        // KUBERNETES_SERVICE_PORT as client-go reads it, over the _HTTPS one.
        let ports = |vars: &[(&str, &str)]| {
            let mut all = vec![
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("OPENMED_OPERATOR_TOKEN_PATH", tok.to_str().unwrap()),
                ("OPENMED_OPERATOR_CA_PATH", ca.to_str().unwrap()),
            ];
            all.extend_from_slice(vars);
            let ep = Endpoint::resolve(&EndpointOptions::default(), &env_of(&all)).unwrap();
            ep.origin.base_url()
        };
        assert_eq!(
            ports(&[
                ("KUBERNETES_SERVICE_PORT", "18443"),
                ("KUBERNETES_SERVICE_PORT_HTTPS", "443")
            ]),
            "https://10.0.0.1:18443"
        );
        assert_eq!(
            ports(&[("KUBERNETES_SERVICE_PORT_HTTPS", "6443")]),
            "https://10.0.0.1:6443"
        );
    }

    #[test]
    fn flags_win_over_env() {
        let dir = tmp("flags");
        let t1 = dir.join("t1");
        let t2 = dir.join("t2");
        std::fs::write(&t1, "one").unwrap();
        std::fs::write(&t2, "two").unwrap();
        let env = env_of(&[("OPENMED_OPERATOR_TOKEN_PATH", t1.to_str().unwrap())]);
        let opts = EndpointOptions {
            server: Some("http://127.0.0.1:8001".into()),
            token_file: Some(t2),
            ..Default::default()
        };
        let ep = Endpoint::resolve(&opts, &env).unwrap();
        assert_eq!(ep.token.unwrap().current().expose(), "two");
    }

    #[test]
    fn unusable_endpoints_say_why() {
        let none = env_of(&[]);
        let e = Endpoint::resolve(&EndpointOptions::default(), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("KUBERNETES_SERVICE_HOST"), "{e}");
        let opts = EndpointOptions {
            server: Some("https://10.0.0.1".into()),
            ..Default::default()
        };
        let e = Endpoint::resolve(&opts, &none).unwrap_err().to_string();
        assert!(e.contains("CA file"), "{e}");
        let opts = EndpointOptions {
            server: Some("http://127.0.0.1:1".into()),
            token_file: Some(PathBuf::from("/nonexistent/token")),
            ..Default::default()
        };
        let e = Endpoint::resolve(&opts, &none).unwrap_err().to_string();
        assert!(e.contains("cannot read token file"), "{e}");
    }

    #[test]
    fn token_rereads_after_max_age_and_keeps_last_good() {
        let dir = tmp("rotate");
        let p = dir.join("token");
        std::fs::write(&p, "first").unwrap();
        let t = TokenFile::open(p.clone(), Duration::from_millis(0)).unwrap();
        assert_eq!(t.current().expose(), "first");
        std::fs::write(&p, "second").unwrap();
        assert_eq!(t.current().expose(), "second");
        std::fs::remove_file(&p).unwrap();
        assert_eq!(t.current().expose(), "second");
        std::fs::write(&p, "third").unwrap();
        assert!(t.reload());
        assert!(!t.reload());
    }

    #[test]
    fn token_is_cached_within_max_age() {
        let dir = tmp("cache");
        let p = dir.join("token");
        std::fs::write(&p, "first").unwrap();
        let t = TokenFile::open(p.clone(), Duration::from_secs(3600)).unwrap();
        std::fs::write(&p, "second").unwrap();
        assert_eq!(t.current().expose(), "first");
        assert!(t.reload());
        assert_eq!(t.current().expose(), "second");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2".into());
        assert!(!format!("{s:?} {s}").contains("hunter2"));
        let dir = tmp("debug");
        let p = dir.join("token");
        std::fs::write(&p, "hunter2").unwrap();
        let t = TokenFile::open(p, TOKEN_MAX_AGE).unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
    }

    #[test]
    fn ca_file_change_detection() {
        let dir = tmp("ca");
        let p = dir.join("ca.crt");
        std::fs::write(&p, "A").unwrap();
        let ca = CaFile::new(p.clone());
        assert_eq!(ca.changed().unwrap(), Some(b"A".to_vec()));
        assert_eq!(ca.changed().unwrap(), None);
        std::fs::write(&p, "BB").unwrap();
        assert_eq!(ca.changed().unwrap(), Some(b"BB".to_vec()));
        std::fs::remove_file(&p).unwrap();
        assert_eq!(ca.changed().unwrap(), None);
        assert!(CaFile::new(dir.join("missing")).changed().is_err());
    }
}
