//! The command line: parsing, help and the errors a user sees.

use super::*;
use crate::config::{LogFormat, MetricsServing};
use std::path::PathBuf;
use std::time::Duration;

#[test]
fn workers_and_the_rate_limit_are_flags() {
    let c = run(&["--workers", "8", "--qps", "50.5", "--burst", "200"], &[]).unwrap();
    assert_eq!(c.workers, 8);
    assert_eq!(c.limits.qps, Some(50.5));
    assert_eq!(c.limits.burst, 200);
    let d = run(&[], &[]).unwrap();
    assert_eq!((d.workers, d.limits.qps), (16, None));
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

#[test]
fn release_helps_and_says_what_is_missing_or_misspelled() {
    let p = |a: &[&str]| parse(a.iter().map(|s| s.to_string()), &|_| None);
    assert!(matches!(
        p(&["release", "--help"]),
        Ok(Command::ReleaseHelp)
    ));
    assert!(matches!(
        p(&["release", "--namespace", "a", "-h"]),
        Ok(Command::ReleaseHelp)
    ));
    let help = release_help();
    assert!(
        help.starts_with("USAGE:\n    openmed-operator release --namespace NS --name DEPLOYMENT")
    );
    assert!(
        help.contains("\n    --force ") && !help.contains("--leader-elect"),
        "{help}"
    );
    let err = |a: &[&str]| p(a).unwrap_err();
    assert_eq!(
        err(&["release", "--namespace", "a"]),
        "release: --name is required (the Deployment to hand back)"
    );
    assert_eq!(
        err(&["release", "--name", "d"]),
        "release: --namespace is required (the Deployment's namespace)"
    );
    assert_eq!(
        err(&["release", "--namspace", "a"]),
        "release: unknown flag \"--namspace\": did you mean --namespace? (see --help)"
    );
    assert_eq!(
        err(&["--resync-secnds", "5"]),
        "unknown flag \"--resync-secnds\": did you mean --resync-seconds? (see --help)"
    );
    assert_eq!(err(&["--bogus"]), "unknown flag \"--bogus\" (see --help)");
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

#[test]
fn the_help_is_the_table() {
    let help = help();
    let release = "    openmed-operator release --namespace NS --name DEPLOYMENT [--force]";
    let wrapped = "[--server URL] [--token-file PATH] [--ca-file PATH] [--no-proxy]";
    assert!(help.contains(&format!("\n{release}\n{:21}{wrapped}\n", "")));
    assert!(help.contains(
        "\n    --health-addr ADDR      Serve /healthz and /readyz here, \
         plain and open (default 0.0.0.0:8080)\n"
    ));
    assert!(help
        .contains("\n    --metrics-secure[=false]\n                            /metrics over TLS"));
    assert!(!help.contains("{default}"));
    for flag in &FLAGS {
        let shown = format!("\n    {}", flag.usage());
        assert_eq!(help.matches(&shown).count(), 1, "{shown}");
        // A flag that takes a value says its default, if it has one.
        let says = flag.help.contains("{default}");
        if matches!(flag.takes, Takes::Value(_)) || says {
            assert_eq!(says, !flag.default.is_empty(), "{}", flag.names[0]);
        }
    }
}

/// The flags in docs/reference.md's `## Flags` table, as shown, each
/// with its default. A row of several flags gives their defaults
/// comma-separated.
fn readme_flags() -> Vec<(String, String)> {
    let readme = include_str!("../../docs/reference.md");
    let section = readme.split("\n## Flags\n").nth(1).expect("## Flags");
    let rows = section.lines().skip_while(|l| !l.starts_with('|'));
    let mut flags = Vec::new();
    for row in rows.take_while(|l| l.starts_with('|')).skip(2) {
        let row = row.replace("\\|", "\u{0}");
        let cells: Vec<String> = row.split('|').map(|c| c.replace('\u{0}', "|")).collect();
        let names: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
        let default = cells[2].replace('`', "");
        let defaults: Vec<&str> = match (names.len(), default.trim()) {
            (1, d) | (_, d @ "") => vec![d; names.len()],
            (_, d) => d.split(", ").collect(),
        };
        assert_eq!(names.len(), defaults.len(), "{row}");
        flags.extend(
            names
                .iter()
                .zip(defaults)
                .map(|(n, d)| (n.to_string(), d.to_string())),
        );
    }
    flags
}

#[test]
fn the_readme_lists_every_flag_with_its_default() {
    let readme = readme_flags();
    let table: Vec<(String, String)> = FLAGS
        .iter()
        .map(|f| (f.usage(), f.default.to_string()))
        .collect();
    let missing: Vec<_> = table.iter().filter(|f| !readme.contains(f)).collect();
    let extra: Vec<_> = readme.iter().filter(|f| !table.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "not in docs/reference.md as in FLAGS: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "in docs/reference.md, not in FLAGS: {extra:?}"
    );
    assert_eq!(readme.len(), table.len(), "a flag listed twice");
}

#[test]
fn the_defaults_shown_are_the_ones_used() {
    let base = format!("{:?}", run(&["--leader-elect"], &[]).unwrap());
    // A one-word default is the value itself; more words describe it.
    let stated = FLAGS.iter().filter(|f| {
        let one_word = !f.default.is_empty() && !f.default.contains(' ');
        f.scope.has(Scope::Run) && f.takes != Takes::Switch && one_word
    });
    for flag in stated {
        let arg = format!("{}={}", flag.names[0], flag.default);
        let c = run(&["--leader-elect", &arg], &[]).unwrap();
        assert_eq!(format!("{c:?}"), base, "{arg}");
    }
}

#[test]
fn a_shard_has_its_own_lease_unless_named() {
    let lease = |args: &[&str]| run(args, &[]).unwrap().election.unwrap().lease_name;
    assert_eq!(lease(&["--leader-elect"]), "openmed-operator");
    let sel = ["--leader-elect", "--selector", "openmed.ai/shard=a"];
    assert_eq!(lease(&sel), lease_name_for("openmed.ai/shard=a"));
    assert_eq!(lease(&[&sel[..], &["--lease-name=x"]].concat()), "x");
}
