//! API faults survived: cut watches and forced 410s, a pause and a burst of
//! 500s, token rotation over TLS.

use crate::harness::*;
use kubesim::SimConfig;
use std::time::{Duration, Instant};

#[test]
fn cut_watches_and_forced_410s_lose_no_change() {
    let (sim, _, mut op) = cluster_with(fast(), "watches", "svc", &["--resync-seconds", "3600"]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_phase(&sim, "svc", "Ready", "");
    // Mid-rollout: every watch cut, the history compacted, the next watches
    // answered 410 both ways. With resync off, only the watches can tell.
    set_version(&sim, "svc", V2);
    sim.cut_watches();
    sim.compact();
    sim.expire_next_watches(3, false);
    std::thread::sleep(Duration::from_millis(300));
    sim.cut_watches();
    sim.expire_next_watches(3, true);
    let s = wait_serving(&sim, "svc", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    // A change made while a watch is down is not lost either.
    sim.cut_watches();
    set_version(&sim, "svc", V1);
    let s = wait_serving(&sim, "svc", V1);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let (_, metrics) = op.http_get("/metrics");
    let relists: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("openmed_operator_relists_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(relists > 4, "expected relists after 410s:\n{metrics}");
}

#[test]
fn an_api_pause_and_a_burst_of_500s_are_survived() {
    let (sim, _, mut op) = cluster_with(fast(), "outage", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_phase(&sim, "svc", "Ready", "");

    // Ten seconds of refused connections, like an API server restart.
    sim.pause(Duration::from_secs(10));
    // The pause reached the operator: its probe and its watches fail.
    wait_until("the operator unready during the pause", || {
        op.http_get("/readyz").0 == 503
    });
    set_version(&sim, "svc", V2);
    let s = wait_serving(&sim, "svc", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");

    // A burst of 500s on everything. Which requests meet them depends on
    // timing: when the worker's writes take most of the 40 (five tries
    // each), its key's backoff has grown past 20 s by the end, so this
    // waits up to two minutes (it took 43 s alone and more on a loaded
    // machine; each watch loop backs off at most 10 s).
    sim.fail_next(None, ".*", 500, 40, None);
    set_version(&sim, "svc", V1);
    let t = Instant::now();
    let s = loop {
        let s = status(&sim, "svc");
        if s["phase"] == "Ready" && s["activeVersion"] == V1 && s["desiredVersion"] == V1 {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "not serving V1: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let refused = sim.requests().iter().filter(|r| r.status == 500).count();
    assert_eq!(refused, 40, "the burst of 500s reached the operator");
    assert_eq!(op.http_get("/healthz").0, 200);
    assert!(!op.log().contains("panicked"));
}

#[test]
fn token_rotation_over_tls_is_survived() {
    let sim = start_sim(SimConfig {
        tls: true,
        tokens: Some(vec!["token-one".into()]),
        ..fast()
    });
    let dir = tmpdir("rotation");
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "token-one\n").unwrap();
    sim.create(deployment("svc", 2)).unwrap();
    let mut op = Operator::start(
        &sim.url(),
        &dir,
        &[
            "--token-file",
            token.to_str().unwrap(),
            "--ca-file",
            ca.to_str().unwrap(),
        ],
    );
    op.wait_ready();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_phase(&sim, "svc", "Ready", "");

    std::fs::write(&token, "token-two\n").unwrap();
    sim.set_tokens(Some(vec!["token-two".into()]));
    // Watches are dropped too, as a restarting API server would.
    sim.cut_watches();
    set_version(&sim, "svc", V2);
    let s = wait_serving(&sim, "svc", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let log = op.log();
    assert!(
        !log.contains("token-one") && !log.contains("token-two"),
        "a token leaked into the log"
    );
}
