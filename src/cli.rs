//! Hand-written flag parsing and the --help text.

use crate::kube::names::is_dns_label;
use crate::kube::EndpointOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub const HELP: &str = "\
openmed-operator: makes the model version served by an OpenMed REST Deployment declarative.

USAGE:
    openmed-operator [FLAGS]

FLAGS:
    --all-namespaces        Watch OpenMedModels in every namespace (the default)
    --namespace NS          Watch only namespace NS; repeatable. Also WATCH_NAMESPACE=ns1,ns2
    --server URL            API server origin, e.g. http://127.0.0.1:8001 (kubectl proxy).
                            Default: in-cluster (KUBERNETES_SERVICE_HOST / _PORT_HTTPS)
    --token-file PATH       Bearer token file, re-read every 60 s and after a 401.
                            Default in cluster: the service-account token
                            (or OPENMED_OPERATOR_TOKEN_PATH)
    --ca-file PATH          CA bundle for https, re-read when it changes.
                            Default in cluster: the service-account ca.crt
                            (or OPENMED_OPERATOR_CA_PATH)
    --health-addr ADDR      Serve /healthz, /readyz and /metrics here (default 0.0.0.0:8080)
    --resync-seconds N      Re-check every resource from the caches every N seconds (default 15)
    --log-format text|json  Log lines as text (default) or one JSON object per line.
                            RUST_LOG sets the level (default info)
    --help                  Print this help
    --version               Print the version

The operator connects to nothing but the Kubernetes API server.";

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
    pub resync: Duration,
    pub log_format: LogFormat,
}

#[derive(Debug)]
pub enum Command {
    Run(Config),
    Help,
    Version,
}

/// Parse arguments (without the program name). `env` looks up environment
/// variables. Errors are one line, meant for stderr.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Command, String> {
    let mut namespaces: Vec<String> = Vec::new();
    let mut all = false;
    let mut endpoint = EndpointOptions::default();
    let mut health_addr: SocketAddr = ([0, 0, 0, 0], 8080).into();
    let mut resync = Duration::from_secs(15);
    let mut log_format = LogFormat::Text;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let takes_value = matches!(
            flag.as_str(),
            "--namespace"
                | "--server"
                | "--token-file"
                | "--ca-file"
                | "--health-addr"
                | "--resync-seconds"
                | "--log-format"
        );
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| format!("{flag} needs a value"))?,
            }
        } else {
            if inline.is_some() {
                return Err(format!("{flag} takes no value"));
            }
            String::new()
        };
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--version" | "-V" => return Ok(Command::Version),
            "--all-namespaces" => all = true,
            "--namespace" => namespaces.push(value),
            "--server" => endpoint.server = Some(value),
            "--token-file" => endpoint.token_file = Some(PathBuf::from(value)),
            "--ca-file" => endpoint.ca_file = Some(PathBuf::from(value)),
            "--health-addr" => {
                health_addr = value.parse().map_err(|_| {
                    format!("--health-addr: {value:?} is not an address like 0.0.0.0:8080")
                })?
            }
            "--resync-seconds" => {
                let n: u64 = value.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("--resync-seconds: {value:?} is not a whole number of seconds >= 1")
                })?;
                resync = Duration::from_secs(n);
            }
            "--log-format" => {
                log_format = match value.as_str() {
                    "text" => LogFormat::Text,
                    "json" => LogFormat::Json,
                    _ => return Err(format!("--log-format: {value:?} is not text or json")),
                }
            }
            other => return Err(format!("unknown flag {other:?} (see --help)")),
        }
    }
    if namespaces.is_empty() && !all {
        if let Some(w) = env("WATCH_NAMESPACE") {
            namespaces = w
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
    }
    if all && !namespaces.is_empty() {
        return Err("--all-namespaces and --namespace are mutually exclusive".into());
    }
    if let Some(bad) = namespaces.iter().find(|n| !is_dns_label(n)) {
        return Err(format!("namespace {bad:?} is not a valid namespace name"));
    }
    namespaces.sort();
    namespaces.dedup();
    Ok(Command::Run(Config {
        namespaces,
        endpoint,
        health_addr,
        resync,
        log_format,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match parse(args.iter().map(|s| s.to_string()), &lookup)? {
            Command::Run(c) => Ok(c),
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
            ],
            &[],
        )
        .unwrap();
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
            (vec!["--log-format", "xml"], "--log-format"),
            (vec!["--health-addr", "nope"], "--health-addr"),
            (vec!["--help=1"], "takes no value"),
        ] {
            let e = run(&args, &[]).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{args:?}: {e}");
        }
        let help = parse(vec!["--help".to_string()], &|_| None).unwrap();
        assert!(matches!(help, Command::Help));
    }
}
