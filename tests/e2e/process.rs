//! The process: bad flags and unusable endpoints, JSON logs and readiness
//! before the first sync, and the alert rules against the metrics it
//! exports. (The network-namespace test is in `main.rs`.)

use crate::harness::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

#[test]
fn bad_flags_and_unusable_endpoints_exit_with_one_clear_line() {
    let bin = env!("CARGO_BIN_EXE_openmed-operator");
    for (args, needle) in [
        (vec!["--bogus"], "unknown flag"),
        (
            vec!["--server", "http://kubernetes.default.svc"],
            "loopback",
        ),
        (vec!["--server", "https://10.0.0.1"], "CA file"),
        (vec!["--server", "ftp://x"], "scheme"),
        (
            vec![
                "--server",
                "http://127.0.0.1:1",
                "--token-file",
                "/nonexistent",
            ],
            "token file",
        ),
        (
            vec![
                "--server",
                "http://127.0.0.1:1",
                "--health-addr",
                "256.0.0.1:1",
            ],
            "--health-addr",
        ),
    ] {
        let out = Command::new(bin)
            .args(&args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains(needle), "{args:?}: {err}");
    }
    let out = Command::new(bin)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("KUBERNETES_SERVICE_HOST"));
    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(
        help.status.success() && String::from_utf8_lossy(&help.stdout).contains("--resync-seconds")
    );
    let v = Command::new(bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("openmed-operator {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn json_logs_and_readiness_before_sync() {
    let sim = start_sim(fast());
    let dir = tmpdir("json");
    // The API is down at start: live but not ready, and it keeps trying.
    sim.pause(Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(100));
    let mut op = Operator::start(&sim.url(), &dir, &["--log-format", "json"]);
    let addr = op.health_addr();
    assert_eq!(op.http_get("/readyz").0, 503);
    assert_eq!(op.http_get("/healthz").0, 200);
    op.wait_ready();
    let _ = addr;
    sim.create(deployment("svc", 2)).unwrap();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    // The line about a status write follows the write: read the log once it is there.
    wait_until("the RolloutSucceeded line", || {
        op.log().contains("\"reason\":\"RolloutSucceeded\"")
    });
    let lines: Vec<Value> = op
        .log()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for v in &lines {
        assert!(v["ts"].is_string() && v["level"].is_string() && v["msg"].is_string());
    }
    // Lines about a resource say which, and why where it matters.
    let ours: Vec<&Value> = lines
        .iter()
        .filter(|v| v["namespace"] == NS && v["name"] == "svc")
        .collect();
    assert!(ours.len() >= 3, "{lines:#?}");
    assert!(
        ours.iter().any(|v| v["reason"] == "RolloutSucceeded"),
        "{ours:#?}"
    );
    assert!(
        lines.iter().any(|v| v["namespace"].is_null()),
        "startup lines name no resource"
    );
    op.assert_clean_exit();
}

/// After an outage, `/readyz` is 200 again once the watches have stayed
/// open for 10 s (docs/reference.md, "Health and metrics"), not when they first
/// end 50 to 60 s later: the kubelet would keep the pod out of its Service
/// for a minute after the API server came back.
#[test]
fn ready_again_soon_after_an_outage() {
    let (sim, _, mut op) = cluster_with(fast(), "outage", "svc", &[]);
    op.wait_ready();
    let outage = Duration::from_secs(6);
    sim.pause(outage);
    let down = std::time::Instant::now();
    wait_until("not ready during the outage", || {
        op.http_get("/readyz").0 == 503
    });
    std::thread::sleep(outage.saturating_sub(down.elapsed()));
    let back = std::time::Instant::now();
    while op.http_get("/readyz").0 != 200 && back.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = back.elapsed();
    // Up to 10 s of backoff, then 10 s open; a watch ends after 50 s at
    // the soonest.
    assert!(
        took < Duration::from_secs(40),
        "ready {} s after the API server came back: {}",
        took.as_secs(),
        op.http_get("/readyz").1
    );
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    op.assert_clean_exit();
}

/// The metric names and `name{label="value"}` selectors in a rule
/// expression (negative matchers are skipped: they name what to leave out).
fn selectors(expr: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("openmed_operator_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut matchers = Vec::new();
        if let Some(body) = tail[end..].strip_prefix('{') {
            let close = body.find('}').unwrap_or(body.len());
            for m in body[..close].split(',') {
                if let Some((k, v)) = m.split_once('=') {
                    if !k.ends_with('!') && !v.starts_with('~') {
                        matchers
                            .push((k.trim().to_string(), v.trim().trim_matches('"').to_string()));
                    }
                }
            }
        }
        out.push((name, matchers));
        rest = &tail[end..];
    }
    out
}

/// Every metric and label value the shipped alert rules
/// ask for is one the operator exports, checked against a running one.
#[test]
fn the_alert_rules_use_only_exported_metrics() {
    let rules = include_str!("../../manifests/monitoring/prometheusrule.yaml");
    let exprs: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .collect();
    assert!(exprs.len() >= 5, "{exprs:?}");
    let (sim, _, mut op) = cluster_with(fast(), "alerts", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    let metrics = op.http_get("/metrics").1;
    let mut checked = 0;
    for expr in exprs {
        let found = selectors(expr);
        assert!(!found.is_empty(), "{expr} uses no operator metric");
        for (name, matchers) in found {
            assert!(
                metrics.contains(&format!("# TYPE {name} ")),
                "{name} (in {expr}) is not exported:\n{metrics}"
            );
            for (k, v) in matchers {
                let series = format!("{name}{{{k}=\"{v}\"}}");
                assert!(metrics.contains(&series), "{series} is never exported");
                checked += 1;
            }
        }
    }
    assert!(checked >= 2, "only {checked} label matchers checked");
    // The check itself can fail.
    assert_eq!(
        selectors(r#"max(openmed_operator_nope{phase="X",kind!="y"}) > 0"#),
        vec![(
            "openmed_operator_nope".to_string(),
            vec![("phase".to_string(), "X".to_string())]
        )]
    );
    op.assert_clean_exit();
}
