//! Hand-written flag parsing and the --help text.

use crate::kube::names::is_dns_label;
use crate::kube::EndpointOptions;
use crate::release::ReleaseArgs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub const HELP: &str = "\
openmed-operator: makes the model version served by an OpenMed REST Deployment declarative.

USAGE:
    openmed-operator [FLAGS]
    openmed-operator release --namespace NS --name DEPLOYMENT [--force]
                     [--server URL] [--token-file PATH] [--ca-file PATH] [--no-proxy]
        Hand a Deployment back whose OpenMedModel lost its finalizer by hand
        while the operator was away: remove the operator's marks and start the
        container that read the (now deleted) ConfigMap with no model, so its
        pods can restart. Refused while the OpenMedModel exists, unless --force.

FLAGS:
    --all-namespaces        Watch OpenMedModels in every namespace (the default)
    --namespace NS          Watch only namespace NS; repeatable. Also WATCH_NAMESPACE=ns1,ns2
    --server URL            API server origin, e.g. http://127.0.0.1:8001 (kubectl proxy).
                            Default: in-cluster (KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT)
    --token-file PATH       Bearer token file, re-read every 60 s and after a 401.
                            Default in cluster: the service-account token
                            (or OPENMED_OPERATOR_TOKEN_PATH)
    --ca-file PATH          CA bundle for https, re-read when it changes.
                            Default in cluster: the service-account ca.crt
                            (or OPENMED_OPERATOR_CA_PATH)
    --no-proxy              Connect to the API server directly, whatever HTTPS_PROXY,
                            HTTP_PROXY and NO_PROXY say (by default they are honoured
                            as kubectl honours them; only http:// proxies, via CONNECT)
    --health-addr ADDR      Serve /healthz and /readyz here, plain and open (default 0.0.0.0:8080)
    --metrics-addr ADDR     Serve /metrics here (default 0.0.0.0:8443; 0: not at all)
    --metrics-secure[=false]
                            /metrics over TLS, for callers whose bearer token a TokenReview
                            authenticates and a SubjectAccessReview allows `get` on /metrics
                            (the default). =false: plain and open, for development
    --ui-addr ADDR          Serve the live status view (a page, /api/models, /events) here
                            (default 127.0.0.1:8081; \"\" for none). Elsewhere than loopback
                            it needs the metrics' authentication and TLS
    --metrics-cert-dir DIR  tls.crt and tls.key for /metrics, re-read when they change
                            (default: a self-signed certificate made at start)
    --resync-seconds N      Re-check every resource from the caches every N seconds (default 15)
    --liveness-window-seconds N
                            /healthz fails once a watch loop has neither kept a watch
                            open nor listed or watched successfully for N seconds,
                            or a worker has been stuck that long (default 600)
    --list-max-pages N      Give up a list after N pages of 500 (default 1000)
    --list-max-items N      Give up a list of more than N items (default 200000)
    --list-max-mib N        Give up a list of more than N MiB, all its pages (default 64)
    --workers N             Resources reconciled at once (default 4; at most 64)
    --qps Q                 Client-side rate limit: Q requests a second, as client-go's
                            token bucket (default 0: none; the shipped manifests set 100)
    --burst N               Requests allowed at once above the rate (default 100)
    --allow-any-target      Any Deployment named by an OpenMedModel may be a target, as with
                            the reference operator. By default a Deployment must carry the
                            label openmed.ai/managed-target=true or already name the
                            OpenMedModel as its owner; the operator's own Deployment
                            (POD_NAMESPACE / OPENMED_OPERATOR_DEPLOYMENT) never may
    --leader-elect          Run as one of several replicas: only the holder of a Lease
                            writes; the others keep their caches warm and take over
                            when it goes (the shipped manifests run two)
    --lease-name NAME       The Lease (default openmed-operator; with --selector,
                            openmed-operator-<digest of the selector>)
    --lease-namespace NS    Where the Lease is (default: POD_NAMESPACE, else the
                            service account's namespace)
    --lease-duration-seconds N   How long a leader's lease lasts unrenewed (default 15)
    --renew-deadline-seconds N   A leader that has not renewed within N seconds stops
                            writing and exits (default 10; less than the duration)
    --retry-period-seconds N     How often to renew or try to acquire (default 2)
    --selector SELECTOR     Manage only the OpenMedModels this label selector matches
                            (sharding: one operator Deployment per shard)
    --log-format text|json  Log lines as text (default) or one JSON object per line.
                            RUST_LOG sets the level (default info)
    --help                  Print this help
    --version               Print the version

The operator connects to nothing but the Kubernetes API server (through the
HTTP CONNECT proxy HTTPS_PROXY names, unless NO_PROXY or --no-proxy says otherwise).";

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
    /// `--workers`: resources reconciled at once.
    pub workers: usize,
    /// `--qps`, `--burst`: the client-side rate limit.
    pub limits: crate::kube::ratelimit::Limits,
    /// `--leader-elect` and its Lease (None: this replica always writes).
    pub election: Option<crate::controller::leader::ElectionConfig>,
    /// `--selector`: the OpenMedModels this instance manages.
    pub selector: Option<String>,
}

/// How /metrics is served (`--metrics-addr`, `--metrics-secure`, `--metrics-cert-dir`).
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

#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    /// `release`: hand one Deployment back by hand (see [`crate::release`]).
    Release(ReleaseArgs),
    Help,
    Version,
}

/// What the flags have set so far.
struct Settings {
    config: Config,
    all: bool,
    /// Set by --help / --version: stop parsing and answer this.
    stop: Option<Command>,
    /// `release`'s own flags: the Deployment, and `--force`.
    name: String,
    force: bool,
    /// The election flags, used only with `--leader-elect`.
    elect: bool,
    election: crate::controller::leader::ElectionConfig,
    lease_name_set: bool,
}

/// The flags `release` takes: a run's endpoint flags and `--namespace` (the
/// Deployment's), and its own `--name` and `--force`.
const RELEASE_FLAGS: [&str; 7] = [
    "--namespace",
    "--name",
    "--force",
    "--server",
    "--token-file",
    "--ca-file",
    "--no-proxy",
];
/// Switches that also take `=true` / `=false`, as Go's boolean flags do.
const BOOLEAN: [&str; 1] = ["--metrics-secure"];
/// Flags only `release` takes.
const RELEASE_ONLY: [&str; 2] = ["--name", "--force"];

/// One flag: its names, whether it takes a value (inline `--flag=v` or the
/// next argument), and what it does with the value ("" for a switch).
struct Flag {
    names: &'static [&'static str],
    takes_value: bool,
    apply: fn(&mut Settings, String) -> Result<(), String>,
}

/// `release`'s arguments, checked.
fn release_args(s: Settings) -> Result<ReleaseArgs, String> {
    let namespace = match s.config.namespaces.as_slice() {
        [ns] if is_dns_label(ns) => ns.clone(),
        other => {
            return Err(format!(
                "release: --namespace {other:?} is not one namespace name"
            ))
        }
    };
    if !crate::kube::names::is_dns_subdomain(&s.name) {
        return Err(format!(
            "release: --name {:?} is not a Deployment name",
            s.name
        ));
    }
    Ok(ReleaseArgs {
        endpoint: s.config.endpoint,
        namespace,
        name: s.name,
        force: s.force,
    })
}

const FLAGS: [Flag; 32] = [
    Flag {
        names: &["--help", "-h"],
        takes_value: false,
        apply: |s, _| {
            s.stop = Some(Command::Help);
            Ok(())
        },
    },
    Flag {
        names: &["--version", "-V"],
        takes_value: false,
        apply: |s, _| {
            s.stop = Some(Command::Version);
            Ok(())
        },
    },
    Flag {
        names: &["--all-namespaces"],
        takes_value: false,
        apply: |s, _| {
            s.all = true;
            Ok(())
        },
    },
    Flag {
        names: &["--namespace"],
        takes_value: true,
        apply: |s, v| {
            s.config.namespaces.push(v);
            Ok(())
        },
    },
    Flag {
        names: &["--server"],
        takes_value: true,
        apply: |s, v| {
            s.config.endpoint.server = Some(v);
            Ok(())
        },
    },
    Flag {
        names: &["--token-file"],
        takes_value: true,
        apply: |s, v| {
            s.config.endpoint.token_file = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--ca-file"],
        takes_value: true,
        apply: |s, v| {
            s.config.endpoint.ca_file = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--no-proxy"],
        takes_value: false,
        apply: |s, _| {
            s.config.endpoint.no_proxy = true;
            Ok(())
        },
    },
    Flag {
        names: &["--health-addr"],
        takes_value: true,
        apply: |s, v| {
            s.config.health_addr = v
                .parse()
                .map_err(|_| format!("--health-addr: {v:?} is not an address like 0.0.0.0:8080"))?;
            Ok(())
        },
    },
    Flag {
        names: &["--metrics-addr"],
        takes_value: true,
        apply: |s, v| {
            s.config.metrics.addr = match v.as_str() {
                "0" => None,
                _ => Some(v.parse().map_err(|_| {
                    format!("--metrics-addr: {v:?} is not an address like 0.0.0.0:8443 (or 0)")
                })?),
            };
            Ok(())
        },
    },
    Flag {
        names: &["--ui-addr"],
        takes_value: true,
        apply: |s, v| {
            s.config.ui_addr = match v.as_str() {
                "" => None,
                _ => Some(v.parse().map_err(|_| {
                    format!("--ui-addr: {v:?} is not an address like 127.0.0.1:8081 (or \"\")")
                })?),
            };
            Ok(())
        },
    },
    Flag {
        names: &["--metrics-secure"],
        takes_value: false,
        apply: |s, v| {
            s.config.metrics.secure = match v.as_str() {
                "" | "true" => true,
                "false" => false,
                _ => return Err(format!("--metrics-secure: {v:?} is not true or false")),
            };
            Ok(())
        },
    },
    Flag {
        names: &["--metrics-cert-dir"],
        takes_value: true,
        apply: |s, v| {
            s.config.metrics.cert_dir = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--resync-seconds"],
        takes_value: true,
        apply: |s, v| {
            s.config.resync = Duration::from_secs(whole(&v, "--resync-seconds", MAX_WHOLE)?);
            Ok(())
        },
    },
    Flag {
        names: &["--liveness-window-seconds"],
        takes_value: true,
        apply: |s, v| {
            let n = whole(&v, "--liveness-window-seconds", MAX_WHOLE)?;
            s.config.liveness_window = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-pages"],
        takes_value: true,
        apply: |s, v| {
            s.config.list_max_pages = whole(&v, "--list-max-pages", MAX_WHOLE)? as u32;
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-items"],
        takes_value: true,
        apply: |s, v| {
            s.config.list_max_items = whole(&v, "--list-max-items", MAX_WHOLE)? as usize;
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-mib"],
        takes_value: true,
        apply: |s, v| {
            let mib = whole(&v, "--list-max-mib", MAX_LIST_MIB)?.max(1);
            s.config.list_max_bytes = (mib as usize) << 20;
            Ok(())
        },
    },
    Flag {
        names: &["--workers"],
        takes_value: true,
        apply: |s, v| {
            s.config.workers = whole(&v, "--workers", 64)? as usize;
            Ok(())
        },
    },
    Flag {
        names: &["--qps"],
        takes_value: true,
        apply: |s, v| {
            let q: f64 = v
                .parse()
                .ok()
                .filter(|q: &f64| q.is_finite() && *q >= 0.0)
                .ok_or_else(|| format!("--qps: {v:?} is not a number of requests a second >= 0"))?;
            s.config.limits.qps = (q > 0.0).then_some(q);
            Ok(())
        },
    },
    Flag {
        names: &["--burst"],
        takes_value: true,
        apply: |s, v| {
            s.config.limits.burst = whole(&v, "--burst", MAX_WHOLE)? as u32;
            Ok(())
        },
    },
    Flag {
        names: &["--name"],
        takes_value: true,
        apply: |s, v| {
            s.name = v;
            Ok(())
        },
    },
    Flag {
        names: &["--force"],
        takes_value: false,
        apply: |s, _| {
            s.force = true;
            Ok(())
        },
    },
    Flag {
        names: &["--allow-any-target"],
        takes_value: false,
        apply: |s, _| {
            s.config.allow_any_target = true;
            Ok(())
        },
    },
    Flag {
        names: &["--leader-elect"],
        takes_value: false,
        apply: |s, _| {
            s.elect = true;
            Ok(())
        },
    },
    Flag {
        names: &["--lease-name"],
        takes_value: true,
        apply: |s, v| {
            if !crate::kube::names::is_dns_subdomain(&v) {
                return Err(format!("--lease-name: {v:?} is not a valid object name"));
            }
            s.election.lease_name = v;
            s.lease_name_set = true;
            Ok(())
        },
    },
    Flag {
        names: &["--lease-namespace"],
        takes_value: true,
        apply: |s, v| {
            if !is_dns_label(&v) {
                return Err(format!("--lease-namespace: {v:?} is not a namespace name"));
            }
            s.election.lease_namespace = Some(v);
            Ok(())
        },
    },
    Flag {
        names: &["--lease-duration-seconds"],
        takes_value: true,
        apply: |s, v| {
            let n = whole(&v, "--lease-duration-seconds", 3600)?;
            s.election.lease_duration = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--renew-deadline-seconds"],
        takes_value: true,
        apply: |s, v| {
            let n = whole(&v, "--renew-deadline-seconds", 3600)?;
            s.election.renew_deadline = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--retry-period-seconds"],
        takes_value: true,
        apply: |s, v| {
            let n = whole(&v, "--retry-period-seconds", 3600)?;
            s.election.retry_period = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--selector"],
        takes_value: true,
        apply: |s, v| {
            let v = v.trim().to_string();
            let ok = !v.is_empty() && v.len() <= 1024 && v.chars().all(|c| !c.is_control());
            if !ok {
                return Err(
                    "--selector: not a label selector (non-empty, at most 1024 characters)".into(),
                );
            }
            s.config.selector = Some(v);
            Ok(())
        },
    },
    Flag {
        names: &["--log-format"],
        takes_value: true,
        apply: |s, v| {
            s.config.log_format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err(format!("--log-format: {v:?} is not text or json")),
            };
            Ok(())
        },
    },
];

/// The largest count or number of seconds a flag takes.
const MAX_WHOLE: u64 = 10_000_000;
/// A list budget above 64 GiB bounds nothing.
const MAX_LIST_MIB: u64 = 65_536;

/// A whole number from 1 to `max`.
fn whole(v: &str, flag: &str, max: u64) -> Result<u64, String> {
    v.parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("{flag}: {v:?} is not a whole number from 1 to {max}"))
}

/// Parse arguments (without the program name). `env` looks up environment
/// variables. Errors are one line, meant for stderr.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Command, String> {
    let mut s = defaults();
    let mut it = args.into_iter().peekable();
    if it.peek().map(String::as_str) == Some("release") {
        it.next();
        let allowed = |name: &str| RELEASE_FLAGS.contains(&name);
        read_flags(it, &mut s, &allowed).map_err(|e| format!("release: {e}"))?;
        return release_args(s).map(Command::Release);
    }
    let allowed = |name: &str| !RELEASE_ONLY.contains(&name);
    if let Some(stop) = read_flags(it, &mut s, &allowed)? {
        return Ok(stop);
    }
    finish(s, env).map(|c| Command::Run(Box::new(c)))
}

fn defaults() -> Settings {
    Settings {
        config: Config {
            namespaces: Vec::new(),
            endpoint: EndpointOptions::default(),
            health_addr: ([0, 0, 0, 0], 8080).into(),
            metrics: MetricsServing::default(),
            ui_addr: Some(([127, 0, 0, 1], 8081).into()),
            resync: Duration::from_secs(15),
            liveness_window: crate::controller::reflector::MAX_SILENCE,
            log_format: LogFormat::Text,
            allow_any_target: false,
            own_deployment: None,
            list_max_pages: 1_000,
            list_max_items: 200_000,
            list_max_bytes: 64 << 20,
            workers: 4,
            limits: crate::kube::ratelimit::Limits::default(),
            election: None,
            selector: None,
        },
        all: false,
        stop: None,
        name: String::new(),
        force: false,
        elect: false,
        election: Default::default(),
        lease_name_set: false,
    }
}

/// Apply each flag `allowed` accepts to `s`; `--help`/`--version` stop at
/// once with their answer.
fn read_flags(
    args: impl Iterator<Item = String>,
    s: &mut Settings,
    allowed: &dyn Fn(&str) -> bool,
) -> Result<Option<Command>, String> {
    let mut it = args;
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (arg.as_str(), None),
        };
        let flag = FLAGS
            .iter()
            .find(|f| f.names.contains(&name) && allowed(name));
        let value = match (flag.is_some_and(|f| f.takes_value), inline) {
            (true, Some(v)) => v.to_string(),
            (true, None) => it.next().ok_or_else(|| format!("{name} needs a value"))?,
            (false, Some(v)) if BOOLEAN.contains(&name) => v.to_string(),
            (false, Some(_)) => return Err(format!("{name} takes no value")),
            (false, None) => String::new(),
        };
        let flag = flag.ok_or_else(|| format!("unknown flag {name:?} (see --help)"))?;
        (flag.apply)(s, value)?;
        if let Some(stop) = s.stop.take() {
            return Ok(Some(stop));
        }
    }
    Ok(None)
}

/// WATCH_NAMESPACE when no flag chose namespaces, then the namespace checks.
fn finish(s: Settings, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, String> {
    let mut config = s.config;
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    config.own_deployment = set("POD_NAMESPACE").zip(set("OPENMED_OPERATOR_DEPLOYMENT"));
    if config.namespaces.is_empty() && !s.all {
        if let Some(w) = env("WATCH_NAMESPACE") {
            config.namespaces = w
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
    }
    if s.all && !config.namespaces.is_empty() {
        return Err("--all-namespaces and --namespace are mutually exclusive".into());
    }
    if let Some(bad) = config.namespaces.iter().find(|n| !is_dns_label(n)) {
        return Err(format!("namespace {bad:?} is not a valid namespace name"));
    }
    config.namespaces.sort();
    config.namespaces.dedup();
    if !s.elect && s.election != Default::default() {
        return Err("the --lease-* and timing flags need --leader-elect".into());
    }
    if s.elect {
        let mut e = s.election;
        e.check()?;
        if e.lease_namespace.is_none() {
            e.lease_namespace = set("POD_NAMESPACE");
        }
        if let (Some(sel), false) = (&config.selector, s.lease_name_set) {
            // Each shard its own Lease, without a flag to forget.
            let digest = crate::model::canonical::sha256_hex(sel.as_bytes());
            e.lease_name = format!("openmed-operator-{}", &digest[..10]);
        }
        config.election = Some(e);
    }
    let m = &config.metrics;
    if m.cert_dir.is_some() && !m.secure {
        return Err("--metrics-cert-dir needs TLS: drop --metrics-secure=false".into());
    }
    if m.addr == Some(config.health_addr) && config.health_addr.port() != 0 {
        return Err("--metrics-addr and --health-addr must differ".into());
    }
    if config.ui_addr.is_some_and(|a| !a.ip().is_loopback()) && !m.secure {
        return Err("--ui-addr off loopback needs the metrics' authentication: drop --metrics-secure=false, or serve the view on 127.0.0.1 and use kubectl port-forward".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_and_the_rate_limit_are_flags() {
        let c = run(&["--workers", "8", "--qps", "50.5", "--burst", "200"], &[]).unwrap();
        assert_eq!(c.workers, 8);
        assert_eq!(c.limits.qps, Some(50.5));
        assert_eq!(c.limits.burst, 200);
        let d = run(&[], &[]).unwrap();
        assert_eq!((d.workers, d.limits.qps), (4, None));
        assert_eq!(run(&["--qps", "0"], &[]).unwrap().limits.qps, None);
        for bad in [
            &["--workers", "0"][..],
            &["--qps", "-1"],
            &["--qps", "x"],
            &["--burst", "0"],
        ] {
            assert!(run(bad, &[]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn release_takes_the_deployment_and_the_endpoint_flags() {
        let args = [
            "release",
            "--namespace",
            "openmed",
            "--name=svc",
            "--server",
            "https://k:6443",
            "--ca-file",
            "/ca",
            "--no-proxy",
            "--force",
        ];
        let Ok(Command::Release(r)) = parse(args.iter().map(|s| s.to_string()), &|_| None) else {
            panic!("not a release");
        };
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.force),
            ("openmed", "svc", true)
        );
        assert_eq!(r.endpoint.server.as_deref(), Some("https://k:6443"));
        assert!(r.endpoint.no_proxy && r.endpoint.ca_file.is_some());
        for bad in [
            &["release", "--name", "svc"][..],
            &["release", "--namespace", "a", "--name"],
            &[
                "release",
                "--namespace",
                "a",
                "--name",
                "b",
                "--all-namespaces",
            ],
        ] {
            let e = parse(bad.iter().map(|s| s.to_string()), &|_| None).unwrap_err();
            assert!(e.starts_with("release:"), "{e}");
        }
        // `release`'s own flags are not a run's.
        assert!(parse(["--force".to_string()], &|_| None).is_err());
    }

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match parse(args.iter().map(|s| s.to_string()), &lookup)? {
            Command::Run(c) => Ok(*c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = run(&[], &[]).unwrap();
        assert!(c.namespaces.is_empty());
        assert_eq!(c.health_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(c.resync, Duration::from_secs(15));
        assert_eq!(c.log_format, LogFormat::Text);
        assert!(c.endpoint.server.is_none());
        assert_eq!((c.list_max_pages, c.list_max_items), (1_000, 200_000));
        assert_eq!(c.list_max_bytes, 64 << 20);
        assert!(!c.allow_any_target);
    }

    #[test]
    fn every_flag_both_forms() {
        let c = run(
            &[
                "--namespace",
                "a",
                "--namespace=b",
                "--server=http://127.0.0.1:8001",
                "--token-file",
                "/t",
                "--ca-file=/c",
                "--health-addr",
                "127.0.0.1:9090",
                "--resync-seconds=30",
                "--log-format",
                "json",
                "--list-max-pages=7",
                "--list-max-items",
                "900",
                "--list-max-mib=3",
                "--allow-any-target",
            ],
            &[
                ("POD_NAMESPACE", "ops"),
                ("OPENMED_OPERATOR_DEPLOYMENT", "op"),
            ],
        )
        .unwrap();
        assert_eq!((c.list_max_pages, c.list_max_items), (7, 900));
        assert_eq!(c.list_max_bytes, 3 << 20);
        assert!(c.allow_any_target);
        assert_eq!(c.own_deployment, Some(("ops".into(), "op".into())));
        assert_eq!(c.namespaces, ["a", "b"]);
        assert_eq!(c.endpoint.server.as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!(c.endpoint.token_file, Some(PathBuf::from("/t")));
        assert_eq!(c.endpoint.ca_file, Some(PathBuf::from("/c")));
        assert_eq!(c.health_addr.port(), 9090);
        assert_eq!(c.resync, Duration::from_secs(30));
        assert_eq!(c.log_format, LogFormat::Json);
    }

    #[test]
    fn watch_namespace_env() {
        assert_eq!(
            run(&[], &[("WATCH_NAMESPACE", "x, y,")])
                .unwrap()
                .namespaces,
            ["x", "y"]
        );
        assert_eq!(
            run(&["--namespace", "z"], &[("WATCH_NAMESPACE", "x")])
                .unwrap()
                .namespaces,
            ["z"]
        );
        assert!(run(&["--all-namespaces"], &[("WATCH_NAMESPACE", "x")])
            .unwrap()
            .namespaces
            .is_empty());
    }

    #[test]
    fn metrics_are_served_over_tls_unless_told_otherwise() {
        let c = run(&[], &[]).unwrap();
        assert_eq!(c.metrics, MetricsServing::default());
        assert_eq!(c.metrics.addr.unwrap().to_string(), "0.0.0.0:8443");
        assert!(c.metrics.secure);
        let c = run(
            &["--metrics-secure=false", "--metrics-addr=127.0.0.1:9"],
            &[],
        )
        .unwrap();
        assert!(!c.metrics.secure);
        assert_eq!(c.metrics.addr.unwrap().port(), 9);
        let c = run(&["--metrics-secure", "--metrics-cert-dir", "/certs"], &[]).unwrap();
        assert!(c.metrics.secure);
        assert_eq!(c.metrics.cert_dir, Some(PathBuf::from("/certs")));
        assert_eq!(
            run(&["--metrics-addr", "0"], &[]).unwrap().metrics.addr,
            None
        );
        let ui = run(&[], &[]).unwrap().ui_addr;
        assert_eq!(ui.unwrap().to_string(), "127.0.0.1:8081");
        assert_eq!(run(&["--ui-addr="], &[]).unwrap().ui_addr, None);
    }

    #[test]
    fn errors_are_one_clear_line() {
        for (args, needle) in [
            (vec!["--bogus"], "unknown flag"),
            (vec!["--namespace"], "needs a value"),
            (vec!["--namespace", "Bad_NS"], "not a valid namespace"),
            (
                vec!["--all-namespaces", "--namespace", "a"],
                "mutually exclusive",
            ),
            (vec!["--resync-seconds", "0"], "--resync-seconds"),
            (vec!["--list-max-pages", "0"], "--list-max-pages"),
            (vec!["--list-max-items=x"], "--list-max-items"),
            (vec!["--list-max-mib=70000"], "--list-max-mib"),
            (vec!["--log-format", "xml"], "--log-format"),
            (vec!["--health-addr", "nope"], "--health-addr"),
            (vec!["--help=1"], "takes no value"),
            (vec!["--metrics-addr", "8443"], "--metrics-addr"),
            (vec!["--metrics-secure=no"], "--metrics-secure"),
            (vec!["--ui-addr", "x"], "--ui-addr"),
            (
                vec!["--ui-addr", "0.0.0.0:8081", "--metrics-secure=false"],
                "port-forward",
            ),
            (
                vec!["--metrics-secure=false", "--metrics-cert-dir", "/c"],
                "needs TLS",
            ),
            (
                vec!["--metrics-addr", "0.0.0.0:8080"],
                "--metrics-addr and --health-addr",
            ),
        ] {
            let e = run(&args, &[]).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{args:?}: {e}");
        }
        let help = parse(vec!["--help".to_string()], &|_| None).unwrap();
        assert!(matches!(help, Command::Help));
    }
}
