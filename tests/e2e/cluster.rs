//! Many namespaces and resources: every namespace listed before anything is
//! judged, caches, queue and gauges, the same names in many namespaces, the
//! cost of a converged cluster of 100, and the client-side rate limit.

use crate::harness::*;
use kubesim::Sim;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// With two namespaces watched, a list failing in one
/// keeps `/readyz` at 503 (naming the loop) and no model in either is
/// judged until it succeeds.
#[test]
fn every_namespace_is_listed_before_anything_is_judged() {
    let sim = start_sim(fast());
    let dir = tmpdir("two-ns");
    sim.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}))
        .unwrap();
    sim.create(deployment("svc", 2)).unwrap();
    let mut in_b = deployment("svc", 2);
    in_b["metadata"]["namespace"] = json!("b");
    sim.create(in_b).unwrap();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    let mut m_b = model("svc", "svc", V1, 600);
    m_b["metadata"]["namespace"] = json!("b");
    sim.create(m_b).unwrap();
    let ns = ["--namespace", NS, "--namespace", "b"];
    // The Deployment lists of `b` fail (watches and reads still work).
    sim.fail_next_query(
        Some("GET"),
        "/namespaces/b/deployments$",
        "limit=",
        500,
        10_000,
    );
    let mut op = Operator::start(&sim.url(), &dir, &ns);
    let (code, body) = wait_for(
        "/readyz to name the failing list",
        || op.http_get("/readyz"),
        |(_, body)| body.contains("deployments"),
    );
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("/b"), "{body}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(op.http_get("/readyz").0, 503);
    for n in [NS, "b"] {
        let m = sim.object("openmed.ai", "openmedmodels", n, "svc").unwrap();
        assert!(
            m.get("status").is_none(),
            "{n} judged before every list was in: {m:#}"
        );
    }
    sim.clear_faults();
    op.wait_ready();
    wait_serving(&sim, "svc", V1);
    wait_until("the model in b to be Ready", || {
        sim.object("openmed.ai", "openmedmodels", "b", "svc")
            .is_some_and(|m| m["status"]["phase"] == "Ready")
    });
    op.assert_clean_exit();
}

/// Deletes are final in the caches and the gauge,
/// one waiting retry per key, and the phase gauge current with every phase.
#[test]
fn caches_queue_and_gauges_tell_the_truth() {
    let (sim, _, mut op) = cluster_with(fast(), "gauges", "svc", &["--resync-seconds", "1"]);
    let (_, metrics) = op.http_get("/metrics");
    for phase in ["Pending", "RollingOut", "Ready", "Failed", "RolledBack"] {
        let series = format!("openmed_operator_managed_resources{{phase=\"{phase}\"}}");
        assert_eq!(sample(&metrics, &series), Some(0.0), "{phase}: {metrics}");
    }
    let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    for n in &names {
        sim.create(deployment(n, 1)).unwrap();
        let mut m = model(n, n, V1, 600);
        m["spec"]["replicas"] = json!(1);
        sim.create(m).unwrap();
    }
    wait_until("ten Ready", || {
        let (_, m) = op.http_get("/metrics");
        sample(&m, "openmed_operator_managed_resources{phase=\"Ready\"}") == Some(10.0)
    });
    for n in &names[..8] {
        sim.delete(MODEL.0, MODEL.1, NS, n).unwrap();
    }
    wait_until("eight gone", || {
        names[..8]
            .iter()
            .all(|n| sim.object("openmed.ai", "openmedmodels", NS, n).is_none())
    });
    // The gauge and the resync come down to what exists, and stay there.
    wait_until("the gauge at 2", || {
        let (_, m) = op.http_get("/metrics");
        sample(&m, "openmed_operator_managed_resources{phase=\"Ready\"}") == Some(2.0)
    });
    std::thread::sleep(Duration::from_secs(3));
    let (_, m) = op.http_get("/metrics");
    let total: f64 = ["Pending", "RollingOut", "Ready", "Failed", "RolledBack"]
        .iter()
        .filter_map(|p| {
            sample(
                &m,
                &format!("openmed_operator_managed_resources{{phase=\"{p}\"}}"),
            )
        })
        .sum();
    assert_eq!(total, 2.0, "ghosts in the cache: {m}");

    // A key whose Deployment patch keeps failing: one waiting retry, and a
    // depth that counts only keys ready to be processed.
    sim.fail_next(Some("PATCH"), "/deployments/m9$", 500, 10_000, None);
    set_version(&sim, "m9", V2);
    let mut max = (0.0f64, 0.0f64);
    for _ in 0..25 {
        let (_, m) = op.http_get("/metrics");
        let depth = sample(&m, "openmed_operator_queue_depth").expect("queue_depth exported");
        let retries = sample(&m, "openmed_operator_queue_retries").expect("queue_retries exported");
        max = (max.0.max(depth), max.1.max(retries));
        std::thread::sleep(Duration::from_millis(200));
    }
    let refused = sim
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/deployments/m9") && r.status == 500)
        .count();
    assert!(
        refused >= 2,
        "the 500s reached the operator {refused} times"
    );
    assert!(
        max.0 <= 2.0 && max.1 == 1.0,
        "depth and retries peaked at {max:?}: one key retried, none else queued"
    );
    sim.clear_faults();
    wait_serving(&sim, "m9", V2);
    wait_until("nothing waiting", || {
        let (_, m) = op.http_get("/metrics");
        sample(&m, "openmed_operator_queue_retries") == Some(0.0)
    });
    op.assert_clean_exit();
}

/// The model (and its Deployment) as a team would create them in `ns`.
fn in_namespace(mut obj: Value, ns: &str) -> Value {
    obj["metadata"]["namespace"] = json!(ns);
    obj
}

fn model_in(sim: &Sim, ns: &str, name: &str) -> Value {
    sim.object("openmed.ai", "openmedmodels", ns, name)
        .unwrap_or(Value::Null)
}

/// Every Event in `ns` about the resource `name`, as (reason, uid, count).
fn events_in(sim: &Sim, ns: &str, name: &str) -> Vec<(String, String, i64)> {
    sim.objects("", "events", Some(ns))
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["reason"]),
                s(&e["involvedObject"]["uid"]),
                e["count"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

/// The same model name in three namespaces, each with a rollout,
/// an automatic rollback and a delete: every namespace gets its own Events,
/// pointing at its own resource; a model created again under the same name
/// gets Events of its own; an Event whose first post fails is still written.
#[test]
fn same_names_in_many_namespaces_each_get_their_own_events() {
    let sim = start_sim(fast());
    let dir = tmpdir("shared");
    let spaces = [NS, "team-b", "team-c"];
    for ns in spaces {
        if ns != NS {
            sim.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .unwrap();
        }
        sim.create(in_namespace(deployment("svc", 2), ns)).unwrap();
    }
    let mut op = Operator::start(&sim.url(), &dir, &[]);
    op.wait_ready();
    // The first Event post of all fails once.
    sim.fail_next(Some("POST"), "/events$", 500, 1, None);
    for ns in spaces {
        sim.create(in_namespace(model("svc", "svc", V1, 2), ns))
            .unwrap();
    }
    let served = |ns: &str, v: &str| {
        let s = model_in(&sim, ns, "svc")["status"].clone();
        s["phase"] == "Ready" && s["activeVersion"] == v
    };
    wait_until("Ready on v1 everywhere", || {
        spaces.iter().all(|ns| served(ns, V1))
    });
    let failed_posts = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/events") && r.status == 500)
        .count();
    assert_eq!(failed_posts, 1, "the failing Event post was never met");
    for ns in spaces {
        let patch = json!({"spec": {"version": BAD}});
        sim.merge_patch(MODEL.0, MODEL.1, ns, "svc", &patch)
            .unwrap();
    }
    wait_until("rolled back everywhere", || {
        spaces.iter().all(|ns| {
            let s = model_in(&sim, ns, "svc")["status"].clone();
            s["phase"] == "RolledBack" && s["conditions"][3]["reason"] == "RollbackSucceeded"
        })
    });
    let wanted = [
        "RolloutStarted",
        "RolloutSucceeded",
        "RolloutFailed",
        "RollbackStarted",
        "RollbackSucceeded",
    ];
    for ns in spaces {
        let uid = model_in(&sim, ns, "svc")["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        wait_until(&format!("every Event in {ns}"), || {
            let evs = events_in(&sim, ns, "svc");
            wanted
                .iter()
                .all(|w| evs.iter().filter(|e| e.0 == *w).count() >= 1)
        });
        for (reason, event_uid, _) in events_in(&sim, ns, "svc") {
            assert_eq!(event_uid, uid, "{ns}: {reason} points at another object");
        }
    }
    // Deleted and created again under the same name: Events of its own.
    sim.delete(MODEL.0, MODEL.1, "team-b", "svc").unwrap();
    wait_until("the old model gone", || {
        model_in(&sim, "team-b", "svc").is_null()
    });
    sim.create(in_namespace(model("svc", "svc", V1, 600), "team-b"))
        .unwrap();
    wait_until("the new one Ready", || served("team-b", V1));
    let uid = model_in(&sim, "team-b", "svc")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the new one's own RolloutSucceeded", || {
        events_in(&sim, "team-b", "svc")
            .iter()
            .any(|e| e.0 == "RolloutSucceeded" && e.1 == uid)
    });
    op.assert_clean_exit();
}

#[test]
fn a_converged_cluster_of_100_costs_no_writes_and_no_reads_per_resync() {
    const N: usize = 100;
    let sim = start_sim(fast());
    let dir = tmpdir("scale");
    for i in 0..N {
        sim.create(deployment(&format!("svc-{i}"), 2)).unwrap();
    }
    let mut op = Operator::start(&sim.url(), &dir, &["--resync-seconds", "1"]);
    op.wait_ready();
    sim.reset_stats();
    let t0 = Instant::now();
    for i in 0..N {
        sim.create(model(&format!("m-{i}"), &format!("svc-{i}"), V1, 600))
            .unwrap();
    }
    wait_until("all Ready", || {
        (0..N).all(|i| status(&sim, &format!("m-{i}"))["phase"] == "Ready")
    });
    let converge = t0.elapsed();
    let cpu_converge = op.cpu_ms().expect("the operator's CPU in /proc");
    let by_verb = sim.stats_json()["byVerb"].clone();
    // The last Events trail the last status writes; on a loaded machine that
    // can take a while, so wait for a full second without writes.
    let mut seen = writes(&sim);
    let mut quiet_since = Instant::now();
    wait_until("the writes to settle", || {
        std::thread::sleep(Duration::from_millis(200));
        let now = writes(&sim);
        if now != seen {
            seen = now;
            quiet_since = Instant::now();
        }
        quiet_since.elapsed() >= Duration::from_secs(1)
    });

    // Steady state over several resync periods.
    sim.reset_stats();
    let (_, before) = op.http_get("/metrics");
    std::thread::sleep(Duration::from_millis(4500));
    let steady_writes = writes(&sim);
    // The readiness probe's one read every 4 s (§9.D20) is no resync's.
    let (probes, others): (Vec<_>, Vec<_>) = sim.requests().into_iter().partition(|r| {
        r.verb == "list" && r.path.ends_with("/openmedmodels") && r.query == "limit=1"
    });
    assert!(!probes.is_empty(), "no readiness probe in 4.5 s");
    let steady_reads = others
        .iter()
        .filter(|r| r.verb == "get" || r.verb == "list")
        .count();
    let steady_total: u64 = others.len() as u64;
    let (_, after) = op.http_get("/metrics");
    let reconciles = |m: &str| -> u64 {
        m.lines()
            .filter(|l| l.starts_with("openmed_operator_reconciles_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    // A settled resource is not queued by a resync at all (§6): four
    // periods of 100 settled resources hand no key to a worker, where a
    // resync of them would make 400 reconciles. A Deployment's late status
    // change may wake its own model: a few are allowed, not one period's.
    let (before, after) = (reconciles(&before), reconciles(&after));
    assert!(
        before >= N as u64,
        "{before} reconciles counted to converge"
    );
    assert!(
        after - before <= 10,
        "a resync queued the settled resources: {} reconciles in 4.5 s",
        after - before
    );
    assert_eq!(steady_writes, 0, "{:#?}", sim.requests());
    assert_eq!(steady_reads, 0, "{others:#?}");

    // Time from a version bump to the Deployment patch.
    sim.reset_stats();
    let bumped_at = sim.clock_ms();
    set_version(&sim, "m-7", V2);
    wait_until("the Deployment patch", || {
        sim.requests()
            .iter()
            .any(|r| r.method == "PATCH" && r.path.ends_with("/deployments/svc-7"))
    });
    let patch_at = sim
        .requests()
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/deployments/svc-7"))
        .unwrap()
        .at_ms;
    eprintln!(
        "FIGURES 100 resources: converged in {} ms; requests to converge by verb {by_verb}; steady state over 4.5 s: {steady_total} requests ({steady_writes} writes, {steady_reads} reads); version bump to Deployment patch {} ms; operator CPU {} ms to converge, {} ms in all; peak RSS {} KiB",
        converge.as_millis(),
        patch_at - bumped_at,
        cpu_converge,
        op.cpu_ms().expect("the operator's CPU in /proc"),
        op.peak_rss_kib().expect("the operator's peak RSS in /proc"),
    );
}

/// `--qps` and `--burst` hold the operator to client-go's token
/// bucket: over a cold start of 30 models, no more requests than the burst
/// plus the rate allows (the 30 need about 240).
#[test]
fn the_client_side_rate_limit_holds() {
    let sim = start_sim(fast());
    for i in 0..30 {
        sim.create(deployment(&format!("svc-{i}"), 1)).unwrap();
        sim.create(model(&format!("m-{i}"), &format!("svc-{i}"), V1, 600))
            .unwrap();
    }
    let dir = tmpdir("qps");
    let t0 = sim.clock_ms();
    let mut op = Operator::start(&sim.url(), &dir, &["--qps", "20", "--burst", "10"]);
    std::thread::sleep(Duration::from_secs(4));
    let log = sim.requests();
    let sent = log.iter().filter(|r| r.at_ms >= t0).count() as u64;
    let span_s = (sim.clock_ms() - t0) as f64 / 1000.0;
    let allowed = 10.0 + 20.0 * span_s;
    eprintln!("{sent} requests in {span_s:.1} s with --qps 20 --burst 10 (at most {allowed:.0})");
    assert!(
        sent as f64 <= allowed + 5.0,
        "{sent} requests in {span_s:.1} s"
    );
    assert!(sent >= 15, "it hardly ran: {sent} requests");
    op.assert_clean_exit();
}
