//! Every flag: its names, what follows it, which command line takes it,
//! its default and help as users read them, and what it does.

use super::{Command, Flag, Scope, Takes};
use crate::config::LogFormat;
use crate::kube::names::{is_dns_label, is_dns_subdomain};
use std::path::PathBuf;
use std::time::Duration;

/// In the order --help lists them.
pub(super) const FLAGS: [Flag; 32] = [
    Flag {
        names: &["--all-namespaces"],
        takes: Takes::Switch,
        scope: Scope::Run,
        default: "yes",
        help: "Watch OpenMedModels in every namespace (the default)",
        apply: |s, _| {
            s.all = true;
            Ok(())
        },
    },
    Flag {
        names: &["--namespace"],
        takes: Takes::Value("NS"),
        scope: Scope::Both,
        default: "",
        help: "Watch only namespace NS; repeatable. Also WATCH_NAMESPACE=ns1,ns2",
        apply: |s, v| {
            s.config.namespaces.push(v);
            Ok(())
        },
    },
    Flag {
        names: &["--name"],
        takes: Takes::Value("DEPLOYMENT"),
        scope: Scope::Release,
        default: "",
        help: "The Deployment to hand back, in --namespace NS",
        apply: |s, v| {
            s.name = v;
            Ok(())
        },
    },
    Flag {
        names: &["--force"],
        takes: Takes::Switch,
        scope: Scope::Release,
        default: "off",
        help: "Hand it back even while its OpenMedModel exists",
        apply: |s, _| {
            s.force = true;
            Ok(())
        },
    },
    Flag {
        names: &["--server"],
        takes: Takes::Value("URL"),
        scope: Scope::Both,
        default: "in cluster",
        help: "API server origin, e.g. http://127.0.0.1:8001 (kubectl proxy).\n\
               Default: {default} (KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT)",
        apply: |s, v| {
            s.config.endpoint.server = Some(v);
            Ok(())
        },
    },
    Flag {
        names: &["--token-file"],
        takes: Takes::Value("PATH"),
        scope: Scope::Both,
        default: "the service-account token in cluster",
        help: "Bearer token file, re-read every 60 s and after a 401.\n\
               Default: {default}\n\
               (or OPENMED_OPERATOR_TOKEN_PATH)",
        apply: |s, v| {
            s.config.endpoint.token_file = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--ca-file"],
        takes: Takes::Value("PATH"),
        scope: Scope::Both,
        default: "the service-account ca.crt in cluster",
        help: "CA bundle for https, re-read when it changes.\n\
               Default: {default}\n\
               (or OPENMED_OPERATOR_CA_PATH)",
        apply: |s, v| {
            s.config.endpoint.ca_file = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--no-proxy"],
        takes: Takes::Switch,
        scope: Scope::Both,
        default: "off",
        help: "Connect to the API server directly, whatever HTTPS_PROXY,\n\
               HTTP_PROXY and NO_PROXY say (by default they are honoured\n\
               as kubectl honours them; only http:// proxies, via CONNECT)",
        apply: |s, _| {
            s.config.endpoint.no_proxy = true;
            Ok(())
        },
    },
    Flag {
        names: &["--health-addr"],
        takes: Takes::Value("ADDR"),
        scope: Scope::Run,
        default: "0.0.0.0:8080",
        help: "Serve /healthz and /readyz here, plain and open (default {default})",
        apply: |s, v| {
            s.config.health_addr = v
                .parse()
                .map_err(|_| format!("--health-addr: {v:?} is not an address like 0.0.0.0:8080"))?;
            Ok(())
        },
    },
    Flag {
        names: &["--metrics-addr"],
        takes: Takes::Value("ADDR"),
        scope: Scope::Run,
        default: "0.0.0.0:8443",
        help: "Serve /metrics here (default {default}; 0: not at all)",
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
        names: &["--metrics-secure"],
        takes: Takes::Bool,
        scope: Scope::Run,
        default: "true",
        help: "/metrics over TLS, for callers whose bearer token a TokenReview\n\
               authenticates and a SubjectAccessReview allows `get` on /metrics\n\
               (the default). =false: plain and open, for development",
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
        names: &["--ui-addr"],
        takes: Takes::Value("ADDR"),
        scope: Scope::Run,
        default: "127.0.0.1:8081",
        help: "Serve the live status view (a page, /api/models, /events) here\n\
               (default {default}; \"\" for none). Elsewhere than loopback\n\
               it needs the metrics' authentication and TLS",
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
        names: &["--metrics-cert-dir"],
        takes: Takes::Value("DIR"),
        scope: Scope::Run,
        default: "a self-signed certificate",
        help: "tls.crt and tls.key for /metrics, re-read when they change\n\
               (default: {default} made at start)",
        apply: |s, v| {
            s.config.metrics.cert_dir = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Flag {
        names: &["--resync-seconds"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "15",
        help: "Re-check every resource from the caches every N seconds (default {default})",
        apply: |s, v| {
            s.config.resync = Duration::from_secs(whole(&v, "--resync-seconds", MAX_WHOLE)?);
            Ok(())
        },
    },
    Flag {
        names: &["--liveness-window-seconds"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "600",
        help: "/healthz fails once a watch loop has neither kept a watch\n\
               open nor listed or watched successfully for N seconds,\n\
               or a worker has been stuck that long (default {default})",
        apply: |s, v| {
            let n = whole(&v, "--liveness-window-seconds", MAX_WHOLE)?;
            s.config.liveness_window = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-pages"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "1000",
        help: "Give up a list after N pages of 500 (default {default})",
        apply: |s, v| {
            s.config.list_max_pages = whole(&v, "--list-max-pages", MAX_WHOLE)? as u32;
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-items"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "200000",
        help: "Give up a list of more than N items (default {default})",
        apply: |s, v| {
            s.config.list_max_items = whole(&v, "--list-max-items", MAX_WHOLE)? as usize;
            Ok(())
        },
    },
    Flag {
        names: &["--list-max-mib"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "64",
        help: "Give up a list of more than N MiB, all its pages (default {default})",
        apply: |s, v| {
            let mib = whole(&v, "--list-max-mib", MAX_LIST_MIB)?.max(1);
            s.config.list_max_bytes = (mib as usize) << 20;
            Ok(())
        },
    },
    Flag {
        names: &["--workers"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "16",
        help: "Resources reconciled at once at most: workers start as work waits and end after 30 s without (default {default}; at most 64)",
        apply: |s, v| {
            s.config.workers = whole(&v, "--workers", 64)? as usize;
            Ok(())
        },
    },
    Flag {
        names: &["--qps"],
        takes: Takes::Value("Q"),
        scope: Scope::Run,
        default: "0: none",
        help: "Client-side rate limit: Q requests a second, as client-go's\n\
               token bucket (default {default}; the shipped manifests set 100)",
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
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "100",
        help: "Requests allowed at once above the rate (default {default})",
        apply: |s, v| {
            s.config.limits.burst = whole(&v, "--burst", MAX_WHOLE)? as u32;
            Ok(())
        },
    },
    Flag {
        names: &["--allow-any-target"],
        takes: Takes::Switch,
        scope: Scope::Run,
        default: "off",
        help: "Any Deployment named by an OpenMedModel may be a target, as with\n\
               the reference operator. By default a Deployment must carry the\n\
               label openmed.ai/managed-target=true or already name the\n\
               OpenMedModel as its owner; the operator's own Deployment\n\
               (POD_NAMESPACE / OPENMED_OPERATOR_DEPLOYMENT) never may",
        apply: |s, _| {
            s.config.allow_any_target = true;
            Ok(())
        },
    },
    Flag {
        names: &["--leader-elect"],
        takes: Takes::Switch,
        scope: Scope::Run,
        default: "off (on in the shipped manifests)",
        help: "Run as one of several replicas: only the holder of a Lease\n\
               writes; the others keep their caches warm and take over\n\
               when it goes (the shipped manifests run two)",
        apply: |s, _| {
            s.elect = true;
            Ok(())
        },
    },
    Flag {
        names: &["--lease-name"],
        takes: Takes::Value("NAME"),
        scope: Scope::Run,
        default: "openmed-operator",
        help: "The Lease (default {default}; with --selector,\n\
               openmed-operator-<digest of the selector>)",
        apply: |s, v| {
            if !is_dns_subdomain(&v) {
                return Err(format!("--lease-name: {v:?} is not a valid object name"));
            }
            s.election.lease_name = v;
            s.lease_name_set = true;
            Ok(())
        },
    },
    Flag {
        names: &["--lease-namespace"],
        takes: Takes::Value("NS"),
        scope: Scope::Run,
        default: "POD_NAMESPACE, else the service account's namespace",
        help: "Where the Lease is\n\
               (default: {default})",
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
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "15",
        help: "How long a leader's lease lasts unrenewed (default {default})",
        apply: |s, v| {
            let n = whole(&v, "--lease-duration-seconds", 3600)?;
            s.election.lease_duration = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--renew-deadline-seconds"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "10",
        help: "A leader that has not renewed within N seconds stops\n\
               writing and exits (default {default}; less than the duration)",
        apply: |s, v| {
            let n = whole(&v, "--renew-deadline-seconds", 3600)?;
            s.election.renew_deadline = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--retry-period-seconds"],
        takes: Takes::Value("N"),
        scope: Scope::Run,
        default: "2",
        help: "How often to renew or try to acquire (default {default})",
        apply: |s, v| {
            let n = whole(&v, "--retry-period-seconds", 3600)?;
            s.election.retry_period = Duration::from_secs(n);
            Ok(())
        },
    },
    Flag {
        names: &["--selector"],
        takes: Takes::Value("SELECTOR"),
        scope: Scope::Run,
        default: "",
        help: "Manage only the OpenMedModels this label selector matches\n\
               (sharding: one operator Deployment per shard)",
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
        takes: Takes::Value("text|json"),
        scope: Scope::Run,
        default: "text",
        help: "Log lines as text or one JSON object per line (default {default}).\n\
               RUST_LOG sets the level (default info)",
        apply: |s, v| {
            s.config.log_format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err(format!("--log-format: {v:?} is not text or json")),
            };
            Ok(())
        },
    },
    Flag {
        names: &["--help", "-h"],
        takes: Takes::Switch,
        scope: Scope::Run,
        default: "",
        help: "Print this help",
        apply: |s, _| {
            s.stop = Some(Command::Help);
            Ok(())
        },
    },
    Flag {
        names: &["--version", "-V"],
        takes: Takes::Switch,
        scope: Scope::Run,
        default: "",
        help: "Print the version",
        apply: |s, _| {
            s.stop = Some(Command::Version);
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
