//! Rollbacks end to end: a forged `rollback-to`, outside failures and manual
//! rollbacks, and a rollback made permanent in two writes.

use crate::harness::*;
use kubesim::Sim;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Someone else adds (or removes) an env var that reads a ConfigMap that
/// does not exist: not a field the operator owns, and pods cannot start.
fn outsider_env(sim: &Sim, deploy: &str, broken: bool) {
    let d = sim.object("apps", "deployments", NS, deploy).unwrap();
    let mut containers = d["spec"]["template"]["spec"]["containers"].clone();
    let env = containers[0]["env"].as_array_mut().unwrap();
    env.retain(|e| e["name"] != "OUTSIDER");
    if broken {
        env.push(json!({"name": "OUTSIDER", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}));
    }
    let patch = json!({"spec": {"template": {"spec": {"containers": containers}}}});
    sim.merge_patch("apps/v1", "Deployment", NS, deploy, &patch)
        .unwrap();
}

fn annotate_rollback(sim: &Sim, name: &str, target: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {"openmed.ai/rollback-to": target}}});
    sim.merge_patch(MODEL.0, MODEL.1, NS, name, &patch).unwrap();
}

/// No user string reaches a log line, status or an Event raw (§9.15): a
/// `rollback-to` target carrying a newline and a forged log line is shown
/// with its control characters escaped everywhere it is copied.
#[test]
fn a_forged_rollback_target_cannot_forge_a_log_line_or_reach_status_raw() {
    let (sim, _, mut op) = cluster_with(fast(), "forged", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    let forged = "evil\n2026-12-01T00:00:00Z ERROR openmed_operator: FORGED\u{2028}LINE\u{85}x";
    annotate_rollback(&sim, "svc", Some(forged));
    wait_event(&sim, "svc", "RollbackRejected");
    // 9.D16: v1 still serves; Degraded names the refusal.
    let s = wait_for(
        "the rejection in status",
        || status(&sim, "svc"),
        |s| s["conditions"][2]["reason"] == "RollbackTargetUnavailable",
    );
    assert_eq!(
        (&s["phase"], &s["conditions"][0]["reason"]),
        (&json!("Ready"), &json!("RolloutSucceeded"))
    );
    let raw = |t: &str| t.chars().any(|c| c.is_control() || c == '\u{2028}');
    let request = s["rollbackRequest"].as_str().unwrap();
    assert!(
        request.contains("evil\\n2026-12-01T00:00:00Z ERROR") && !raw(request),
        "{request:?}"
    );
    for c in s["conditions"].as_array().unwrap() {
        let m = c["message"].as_str().unwrap();
        assert!(!raw(m), "a raw control character in a condition: {m:?}");
    }
    let warnings: Vec<Value> = sim
        .objects("", "events", Some(NS))
        .into_iter()
        .filter(|e| e["reason"] == "RollbackRejected")
        .collect();
    assert!(!warnings.is_empty());
    for e in &warnings {
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("evil\\n2026") && !raw(m), "{m:?}");
    }
    annotate_rollback(&sim, "svc", None);
    wait_serving(&sim, "svc", V1);
    op.assert_clean_exit();
    let log = op.log();
    assert!(
        log.contains("rollback target evil\\n2026-12-01T00:00:00Z ERROR"),
        "the Warning is logged, escaped:\n{log}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("2026-12-01T00:00:00Z")),
        "a forged line in the log:\n{log}"
    );
    assert!(
        !log.contains('\u{2028}') && !log.contains('\u{85}'),
        "a raw separator in the log"
    );
}

/// An outside failure is reported (never "rolled
/// back" to itself), a manual rollback records no failed spec, and a failed
/// manual rollback is judged again and succeeds once the Deployment serves.
#[test]
fn outside_failures_and_manual_rollbacks_tell_the_truth() {
    let (sim, _, mut op) = cluster_with(fast(), "truth", "svc", &[]);
    sim.create(model("svc", "svc", V1, 3)).unwrap();
    wait_serving(&sim, "svc", V1);
    set_version(&sim, "svc", V2);
    wait_serving(&sim, "svc", V2);

    outsider_env(&sim, "svc", true);
    let s = wait_phase(&sim, "svc", "Failed", "TargetDegraded");
    assert!(
        s["failedSpecHash"].is_null() && s["rollbackSpec"].is_null(),
        "{s:#}"
    );
    assert_eq!(s["rollbackCount"], 0);
    wait_event(&sim, "svc", "TargetDegraded");
    let evs = events(&sim, "svc");
    assert!(
        !evs.iter()
            .any(|e| e == "RollbackStarted" || e == "RolloutFailed"),
        "{evs:?}"
    );
    outsider_env(&sim, "svc", false);
    wait_serving(&sim, "svc", V2);

    // The rollback of a broken Deployment fails; it is judged again.
    outsider_env(&sim, "svc", true);
    wait_phase(&sim, "svc", "Failed", "TargetDegraded");
    annotate_rollback(&sim, "svc", Some(V1));
    let s = wait_phase(&sim, "svc", "Failed", "RollbackFailed");
    assert!(
        s["failedSpecHash"].is_null(),
        "a manual rollback is no verdict: {s:#}"
    );
    outsider_env(&sim, "svc", false);
    let s = wait_for(
        "the failed rollback to succeed after all",
        || status(&sim, "svc"),
        |s| s["phase"] == "RolledBack" && s["conditions"][3]["reason"] == "RollbackSucceeded",
    );
    assert_eq!(s["activeVersion"], V1);
    assert_eq!(s["conditions"][2]["reason"], "ManualRollback");

    // Removing the annotation rolls out what the resource asks for: v2.
    annotate_rollback(&sim, "svc", None);
    wait_serving(&sim, "svc", V2);
    op.assert_clean_exit();
}

/// A manual rollback made permanent in two separate
/// writes, either order, with resyncs an hour apart: Ready on v1 without
/// waiting for a resync, and no rollout started where none happens.
#[test]
fn a_rollback_made_permanent_in_two_writes_needs_no_resync() {
    for annotation_first in [false, true] {
        let tag = format!("permanent-{annotation_first}");
        let (sim, _, mut op) = cluster_with(fast(), &tag, "svc", &["--resync-seconds", "3600"]);
        sim.create(model("svc", "svc", V1, 600)).unwrap();
        wait_serving(&sim, "svc", V1);
        set_version(&sim, "svc", V2);
        wait_serving(&sim, "svc", V2);
        annotate_rollback(&sim, "svc", Some(V1));
        wait_until("the manual rollback to succeed", || {
            status(&sim, "svc")["conditions"][3]["reason"] == "RollbackSucceeded"
        });
        let started = |sim: &Sim| {
            events(sim, "svc")
                .iter()
                .filter(|e| *e == "RolloutStarted")
                .count()
        };
        let before = started(&sim);
        if annotation_first {
            annotate_rollback(&sim, "svc", None);
            std::thread::sleep(Duration::from_millis(300));
            set_version(&sim, "svc", V1);
        } else {
            set_version(&sim, "svc", V1);
            std::thread::sleep(Duration::from_millis(300));
            annotate_rollback(&sim, "svc", None);
        }
        let t = Instant::now();
        wait_serving(&sim, "svc", V1);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "waited {:?}",
            t.elapsed()
        );
        if !annotation_first {
            assert_eq!(
                started(&sim),
                before,
                "no rollout started: v1 already serves"
            );
        }
        op.assert_clean_exit();
    }
}
