//! End to end: the real operator binary against the simulated API server.
//! Each test starts its own simulator (in process, 127.0.0.1, a free port)
//! and operator process; the harness is in `common/operator.rs`.

#[path = "common/operator.rs"]
mod harness;

use harness::*;
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn rollout_upgrade_automatic_and_manual_rollback_then_delete() {
    let (sim, _, mut op) = cluster_with(fast(), "lifecycle", "openmed-service", &[]);
    sim.create(model("openmed-service", "openmed-service", V1, 600))
        .unwrap();
    let s = wait_serving(&sim, "openmed-service", V1);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let cm = sim
        .object("", "configmaps", NS, "openmed-service-model-manifest")
        .unwrap();
    assert_eq!(cm["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], V1);
    assert_eq!(
        preload(&sim, "openmed-service")["valueFrom"]["configMapKeyRef"]["name"],
        "openmed-service-model-manifest"
    );

    // A version bump reaches Ready on v2.
    set_version(&sim, "openmed-service", V2);
    let s = wait_serving(&sim, "openmed-service", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    assert_eq!(s["previousSuccessfulSpec"]["version"], V1);

    // An unloadable version misses its deadline and rolls back by itself.
    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        "openmed-service",
        &json!({"spec": {"version": BAD, "rolloutStrategy": {"progressDeadlineSeconds": 2}}}),
    )
    .unwrap();
    let s = wait_for(
        "RolledBack with RollbackSucceeded",
        || status(&sim, "openmed-service"),
        |s| {
            s["phase"] == "RolledBack"
                && ready_reason(s) == "RolledBack"
                && s["conditions"][3]["reason"] == "RollbackSucceeded"
        },
    );
    assert_eq!(s["desiredVersion"], BAD);
    assert_eq!(s["activeVersion"], V2);
    assert_eq!(s["rollbackRequest"], format!("automatic:{BAD}"));
    assert_eq!(s["rollbackCount"], 1);
    for want in ["RolloutFailed", "RollbackStarted", "RollbackSucceeded"] {
        wait_event(&sim, "openmed-service", want);
    }

    // Manual rollback to the previous retained version.
    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        "openmed-service",
        &json!({"metadata": {"annotations": {"openmed.ai/rollback-to": V1}}}),
    )
    .unwrap();
    wait_until("manual rollback to v1", || {
        let s = status(&sim, "openmed-service");
        s["rollbackRequest"] == format!("manual:{V1}")
            && s["conditions"][3]["reason"] == "RollbackSucceeded"
    });
    assert_eq!(
        sim.object("", "configmaps", NS, "openmed-service-model-manifest")
            .unwrap()["data"]["OPENMED_SERVICE_PRELOAD_MODELS"],
        V1
    );
    // The manual rollback is a second RollbackStarted in this generation:
    // the same Event, counted twice, with the latest message.
    wait_until("the repeated RollbackStarted", || {
        sim.objects("", "events", Some(NS)).iter().any(|e| {
            e["reason"] == "RollbackStarted"
                && e["count"] == 2
                && e["message"].as_str().unwrap_or("").contains(V1)
        })
    });

    // Delete: ConfigMap gone, preload blanked, finalizer released.
    sim.delete(MODEL.0, MODEL.1, NS, "openmed-service").unwrap();
    wait_until("the OpenMedModel to go", || {
        sim.object("openmed.ai", "openmedmodels", NS, "openmed-service")
            .is_none()
    });
    assert!(sim
        .object("", "configmaps", NS, "openmed-service-model-manifest")
        .is_none());
    // `value: ""` is what the operator writes; the API server drops an
    // empty value (omitempty), as the real one does.
    assert_eq!(
        preload(&sim, "openmed-service"),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS"})
    );
    let d = sim
        .object("apps", "deployments", NS, "openmed-service")
        .unwrap();
    assert!(d["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][1]["name"], "proxy",
        "the other container survives"
    );

    let (code, metrics) = op.http_get("/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("openmed_operator_reconciles_total{result=\"applied\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("openmed_operator_api_requests_total{verb=\"patch\",code=\"200\"}"),
        "{metrics}"
    );
    assert_eq!(op.http_get("/healthz").0, 200);
    op.assert_clean_exit();
    let log = op.log();
    assert!(
        log.contains("openmed/openmed-service: RolloutStarted"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_second_model_on_the_same_deployment_conflicts_then_takes_over() {
    let (sim, _, _op) = cluster_with(fast(), "conflict", "shared", &[]);
    sim.create(model("first", "shared", V1, 600)).unwrap();
    wait_phase(&sim, "first", "Ready", "RolloutSucceeded");
    sim.create(model("second", "shared", V2, 600)).unwrap();
    let s = wait_phase(&sim, "second", "Failed", "TargetConflict");
    assert!(
        s["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("openmed/first"),
        "{s:#}"
    );
    wait_event(&sim, "second", "TargetConflict");
    assert!(s["failedSpecHash"].is_null());
    sim.delete(MODEL.0, MODEL.1, NS, "first").unwrap();
    let s = wait_serving(&sim, "second", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let d = sim.object("apps", "deployments", NS, "shared").unwrap();
    assert_eq!(
        d["metadata"]["annotations"]["openmed.ai/model-resource"],
        "openmed/second"
    );
}

#[test]
fn killed_mid_rollout_and_restarted_finishes_without_duplicate_events() {
    // Slow pods, so the operator can be killed while the rollout is under way.
    let (sim, dir, mut op) = cluster_with(
        SimConfig {
            warmup: Duration::from_millis(1500),
            ..fast()
        },
        "restart",
        "svc",
        &[],
    );
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_phase(&sim, "svc", "Ready", "");
    set_version(&sim, "svc", V2);
    wait_phase(&sim, "svc", "RollingOut", "");
    op.kill();
    let mut op2 = Operator::start(&sim.url(), &dir, &[]);
    op2.wait_ready();
    let s = wait_serving(&sim, "svc", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    // Events follow the status write; give the last one a moment.
    wait_until("the RolloutSucceeded Event", || {
        events(&sim, "svc").len() >= 4
    });
    std::thread::sleep(Duration::from_millis(500));
    let evs = events(&sim, "svc");
    let mut sorted = evs.clone();
    sorted.sort();
    sorted.dedup();
    // One Event per (reason, generation): started and succeeded for each generation.
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert_eq!(sorted, ["RolloutStarted", "RolloutSucceeded"]);
    for e in sim.objects("", "events", Some(NS)) {
        assert_eq!(e["count"], 1);
    }
    op2.assert_clean_exit();
}

/// Issue 15: versions applied in quick succession with replicas 1 and 2
/// (surge 1, unavailable 0): an unloadable version is never recorded as
/// successful, and the automatic rollback goes to a version that served.
/// With `ready_between` v2 serves before the unloadable version comes;
/// otherwise the unloadable one replaces v2 while v2's pods are starting.
fn quick_changes(replicas: i64, ready_between: bool) {
    let tag = format!("quick-{replicas}-{ready_between}");
    let slow = SimConfig {
        warmup: Duration::from_millis(800),
        ..fast()
    };
    let (sim, _, mut op) = cluster_with(slow, &tag, "svc", &[]);
    let mut m = model("svc", "svc", V1, 600);
    m["spec"]["replicas"] = json!(replicas);
    m["spec"]["rolloutStrategy"] = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0, "progressDeadlineSeconds": 3});
    sim.create(m).unwrap();
    wait_serving(&sim, "svc", V1);
    set_version(&sim, "svc", V2);
    if ready_between {
        wait_serving(&sim, "svc", V2);
    } else {
        std::thread::sleep(Duration::from_millis(100));
    }
    set_version(&sim, "svc", BAD);
    let served = if ready_between { V2 } else { V1 };
    let s = wait_for(
        "the automatic rollback to succeed",
        || {
            let s = status(&sim, "svc");
            for field in [
                "activeVersion",
                "lastSuccessfulSpec",
                "previousSuccessfulSpec",
            ] {
                let v = if field == "activeVersion" {
                    &s[field]
                } else {
                    &s[field]["version"]
                };
                assert_ne!(v, BAD, "{field} holds the unloadable version: {s:#}");
            }
            assert!(s["desiredVersion"] != BAD || s["phase"] != "Ready", "{s:#}");
            s
        },
        |s| s["phase"] == "RolledBack" && s["conditions"][3]["reason"] == "RollbackSucceeded",
    );
    assert_eq!(s["activeVersion"], served, "{s:#}");
    assert_eq!(s["rollbackRequest"], format!("automatic:{BAD}"));
    let cm = sim
        .object("", "configmaps", NS, "svc-model-manifest")
        .unwrap();
    assert_eq!(cm["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], served);
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert_eq!(
        d["status"]["availableReplicas"], replicas,
        "{:#}",
        d["status"]
    );
    assert_eq!(
        d["status"]["replicas"], replicas,
        "no pod of another version is left"
    );
    op.assert_clean_exit();
}

#[test]
fn quick_changes_with_one_replica_roll_back_to_what_served() {
    quick_changes(1, false);
    quick_changes(1, true);
}

#[test]
fn quick_changes_with_two_replicas_roll_back_to_what_served() {
    quick_changes(2, false);
    quick_changes(2, true);
}

fn owner_of(sim: &Sim, deploy: &str) -> Value {
    let d = sim.object("apps", "deployments", NS, deploy).unwrap();
    d["metadata"]["annotations"]["openmed.ai/model-resource"].clone()
}

fn retarget(sim: &Sim, name: &str, target: &str) {
    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        name,
        &json!({"spec": {"targetRef": {"name": target}}}),
    )
    .unwrap();
}

/// Issue 20, points 2 and 4: a retargeted model releases the Deployment it
/// left, a Deployment created again is applied afresh, a Deployment naming
/// a model that no longer exists is adopted, and delete releases them all.
#[test]
fn targets_are_released_recreated_and_adopted() {
    let (sim, _, mut op) = cluster_with(fast(), "targets", "dep-a", &[]);
    sim.create(deployment("dep-b", 2)).unwrap();
    sim.create(model("svc", "dep-a", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);

    retarget(&sim, "svc", "dep-b");
    wait_until("dep-b to be served and dep-a released", || {
        let s = status(&sim, "svc");
        s["phase"] == "Ready" && owner_of(&sim, "dep-a").is_null()
    });
    assert_eq!(owner_of(&sim, "dep-b"), "openmed/svc");
    assert_eq!(
        preload(&sim, "dep-a"),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS"})
    );
    wait_event(&sim, "svc", "TargetReleased");

    // `kubectl replace --force`: the same name, a new uid, the team's spec.
    let before = status(&sim, "svc")["targetDeploymentUID"].clone();
    sim.delete("apps/v1", "Deployment", NS, "dep-b").unwrap();
    sim.create(deployment("dep-b", 2)).unwrap();
    let s = wait_for(
        "the recreated dep-b served again",
        || status(&sim, "svc"),
        |s| s["phase"] == "Ready" && s["targetDeploymentUID"] != before,
    );
    let uid = sim.object("apps", "deployments", NS, "dep-b").unwrap()["metadata"]["uid"].clone();
    assert_eq!(s["targetDeploymentUID"], uid);
    assert_eq!(
        preload(&sim, "dep-b")["valueFrom"]["configMapKeyRef"]["name"],
        "svc-model-manifest"
    );

    // A Deployment left behind by a model that is gone is adopted.
    let mut orphan = deployment("dep-c", 2);
    orphan["metadata"]["annotations"] = json!({"openmed.ai/model-resource": "openmed/ghost"});
    sim.create(orphan).unwrap();
    retarget(&sim, "svc", "dep-c");
    wait_until("dep-c adopted", || owner_of(&sim, "dep-c") == "openmed/svc");
    wait_event(&sim, "svc", "TargetAdopted");
    wait_phase(&sim, "svc", "Ready", "RolloutSucceeded");

    // Delete: every Deployment this model still claims is handed back.
    sim.delete(MODEL.0, MODEL.1, NS, "svc").unwrap();
    wait_until("the OpenMedModel to go", || {
        sim.object("openmed.ai", "openmedmodels", NS, "svc")
            .is_none()
    });
    for d in ["dep-a", "dep-b", "dep-c"] {
        assert!(owner_of(&sim, d).is_null(), "{d} still claimed");
    }
    assert!(sim
        .object("", "configmaps", NS, "svc-model-manifest")
        .is_none());
    op.assert_clean_exit();
}

/// Issue 20, points 5 and 6: a write the API refuses is reported, backed
/// off and clears by itself; a paused target is reported and resumes.
#[test]
fn refused_writes_and_paused_targets_are_reported() {
    let (sim, _, mut op) = cluster_with(fast(), "refused", "svc", &[]);
    sim.merge_patch(
        "apps/v1",
        "Deployment",
        NS,
        "svc",
        &json!({"spec": {"minReadySeconds": 2}}),
    )
    .unwrap();
    sim.create(model("svc", "svc", V1, 2)).unwrap();
    let s = wait_phase(&sim, "svc", "Failed", "TargetPatchRejected");
    assert!(s["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .contains("minReadySeconds 2"));
    assert_eq!(s["conditions"][2]["reason"], "TargetPatchRejected");
    wait_event(&sim, "svc", "TargetPatchRejected");
    assert!(owner_of(&sim, "svc").is_null(), "never patched");
    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        "svc",
        &json!({"spec": {"rolloutStrategy": {"progressDeadlineSeconds": 60}}}),
    )
    .unwrap();
    wait_serving(&sim, "svc", V1);

    // An admission webhook denies Deployment patches for a while.
    sim.fail_next(Some("PATCH"), "/deployments/svc$", 403, 3, None);
    set_version(&sim, "svc", V2);
    let s = wait_phase(&sim, "svc", "Failed", "TargetPatchRejected");
    assert!(
        s["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("403"),
        "{s:#}"
    );
    wait_serving(&sim, "svc", V2);

    // A paused Deployment: reported, not judged, and the rollout resumes.
    sim.merge_patch(
        "apps/v1",
        "Deployment",
        NS,
        "svc",
        &json!({"spec": {"paused": true}}),
    )
    .unwrap();
    set_version(&sim, "svc", V1);
    let s = wait_for(
        "the pause to be reported",
        || status(&sim, "svc"),
        |s| s["conditions"][1]["reason"] == "TargetPaused",
    );
    assert_eq!(s["conditions"][1]["status"], "Unknown");
    assert_eq!(s["phase"], "RollingOut");
    sim.merge_patch(
        "apps/v1",
        "Deployment",
        NS,
        "svc",
        &json!({"spec": {"paused": false}}),
    )
    .unwrap();
    wait_serving(&sim, "svc", V1);
    op.assert_clean_exit();
}

/// Issue 20, point 3: with the model watch 0.8 s behind, three quick
/// version changes never put an older version back.
#[test]
fn a_lagging_watch_never_applies_an_older_spec() {
    let (sim, _, mut op) = cluster_with(fast(), "lag", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    sim.set_watch_lag("openmedmodels", Duration::from_millis(800));
    let versions = [
        V2,
        "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3",
        "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v4",
    ];
    // Every value the ConfigMap holds, in order, sampled every few ms.
    let mut seen = vec![V1.to_string()];
    let start = Instant::now();
    let mut next = 0;
    loop {
        if next < versions.len() && start.elapsed() >= Duration::from_millis(300 * next as u64) {
            set_version(&sim, "svc", versions[next]);
            next += 1;
        }
        let cm = sim.object("", "configmaps", NS, "svc-model-manifest");
        let value = cm.and_then(|c| {
            c["data"]["OPENMED_SERVICE_PRELOAD_MODELS"]
                .as_str()
                .map(str::to_string)
        });
        if let Some(v) = value.filter(|v| seen.last() != Some(v)) {
            seen.push(v);
        }
        let s = status(&sim, "svc");
        if next == versions.len() && s["phase"] == "Ready" && s["activeVersion"] == versions[2] {
            break;
        }
        assert!(start.elapsed() < WAIT, "not Ready on v4: {s:#}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let order: Vec<usize> = seen
        .iter()
        .map(|v| {
            [V1, versions[0], versions[1], versions[2]]
                .iter()
                .position(|x| x == v)
                .unwrap()
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "the ConfigMap went back: {seen:?}"
    );
    let started = events(&sim, "svc")
        .iter()
        .filter(|e| *e == "RolloutStarted")
        .count();
    assert!(
        started <= 4,
        "RolloutStarted {started} times: {:?}",
        events(&sim, "svc")
    );
    op.assert_clean_exit();
}

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
    let s = wait_phase(&sim, "svc", "Failed", "RollbackTargetUnavailable");
    wait_event(&sim, "svc", "RollbackRejected");
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

/// Issue 21, points 1-3: an outside failure is reported (never "rolled
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

/// Issue 16, point 1: a manual rollback made permanent in two separate
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

/// Issue 23, point 1: with two namespaces watched, a list failing in one
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

/// Issue 23, points 2-4: deletes are final in the caches and the gauge,
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
        let depth = sample(&m, "openmed_operator_queue_depth").unwrap_or(0.0);
        let retries = sample(&m, "openmed_operator_queue_retries").unwrap_or(0.0);
        max = (max.0.max(depth), max.1.max(retries));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        max.0 <= 2.0 && max.1 <= 1.0,
        "depth and retries peaked at {max:?}"
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

/// Issue 18: the same model name in three namespaces, each with a rollout,
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
    std::thread::sleep(Duration::from_secs(2));
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
    let cpu_converge = op.cpu_ms().unwrap_or(0);
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
    let steady_reads = sim.count(Some("get"), None) + sim.count(Some("list"), None);
    let steady_total: u64 = sim.requests().len() as u64;
    let (_, after) = op.http_get("/metrics");
    let reconciles = |m: &str| -> u64 {
        m.lines()
            .filter(|l| l.starts_with("openmed_operator_reconciles_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert!(
        reconciles(&after) >= reconciles(&before) + 2 * N as u64,
        "resync did not re-evaluate every resource"
    );
    assert_eq!(steady_writes, 0, "{:#?}", sim.requests());
    assert_eq!(steady_reads, 0, "{:#?}", sim.requests());

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
        op.cpu_ms().unwrap_or(0),
        op.peak_rss_kib().unwrap_or(0),
    );
}

#[test]
fn runs_in_an_isolated_network_namespace() {
    if std::env::var("OMO_IN_NETNS").is_ok() {
        // Inside: only loopback exists. Bring it up and run a whole rollout.
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success());
        let (sim, _, mut op) = cluster_with(fast(), "netns-inner", "svc", &[]);
        sim.create(model("svc", "svc", V1, 600)).unwrap();
        wait_phase(&sim, "svc", "Ready", "RolloutSucceeded");
        op.assert_clean_exit();
        return;
    }
    let me = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-n", "--"])
        .arg(&me)
        .args([
            "--exact",
            "runs_in_an_isolated_network_namespace",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OMO_IN_NETNS", "1")
        .output()
        .expect("unshare is needed for this test (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

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
    let lines: Vec<Value> = op
        .log()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for v in &lines {
        assert!(v["ts"].is_string() && v["level"].is_string() && v["msg"].is_string());
    }
    // Issue 16: lines about a resource say which, and why where it matters.
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

#[test]
fn a_foreign_configmap_of_the_same_name_blocks_until_it_is_gone() {
    let sim = start_sim(fast());
    let dir = tmpdir("foreign-cm");
    sim.create(deployment("svc", 2)).unwrap();
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "svc-model-manifest", "namespace": NS}, "data": {"owner": "someone else"}});
    sim.create(foreign).unwrap();
    let mut op = Operator::start(&sim.url(), &dir, &["--resync-seconds", "1"]);
    op.wait_ready();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    let s = wait_phase(&sim, "svc", "Failed", "ConfigMapConflict");
    assert!(s["failedSpecHash"].is_null());
    // Blocked is quiet: resyncs read the foreign ConfigMap, they do not
    // retry a create bound to meet AlreadyExists (found by the soak).
    let creates = |sim: &Sim| {
        sim.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/configmaps"))
            .count()
    };
    let before = creates(&sim);
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(creates(&sim), before, "a create per resync while blocked");
    let cm = sim
        .object("", "configmaps", NS, "svc-model-manifest")
        .unwrap();
    assert_eq!(
        cm["data"],
        json!({"owner": "someone else"}),
        "never modified"
    );
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert_eq!(
        d["metadata"]["generation"], 1,
        "the Deployment is not touched"
    );
    sim.delete("v1", "ConfigMap", NS, "svc-model-manifest")
        .unwrap();
    wait_serving(&sim, "svc", V1);
}

/// Found by the soak (kubernetes#125568): a spec that switches to Recreate
/// and resizes while a rolling update is under way. Sent in one write, the
/// Deployment wedges and the model stays RollingOut for ever; the switch
/// goes first and the resize after it, so the model serves.
#[test]
fn a_switch_to_recreate_with_a_resize_mid_rollout_completes() {
    const V3: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3";
    let slow = SimConfig {
        warmup: Duration::from_millis(1500),
        ..fast()
    };
    let (sim, _, mut op) = cluster_with(slow, "recreate-resize", "svc", &[]);
    let mut m = model("svc", "svc", V1, 60);
    m["spec"]["replicas"] = json!(3);
    m["spec"]["rolloutStrategy"] = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0, "progressDeadlineSeconds": 60});
    sim.create(m).unwrap();
    wait_serving(&sim, "svc", V1);
    set_version(&sim, "svc", V2);
    wait_for(
        "the rolling update to be under way",
        || sim.object("apps", "deployments", NS, "svc").unwrap(),
        |d| d["status"]["updatedReplicas"] == 1 && d["status"]["replicas"] == 4,
    );
    let change = json!({"spec": {"version": V3, "replicas": 4, "rolloutStrategy": {"type": "Recreate", "maxSurge": null, "maxUnavailable": null}}});
    sim.merge_patch(MODEL.0, MODEL.1, NS, "svc", &change)
        .unwrap();
    wait_serving(&sim, "svc", V3);
    let started = events(&sim, "svc")
        .into_iter()
        .filter(|r| r == "RolloutStarted")
        .count();
    assert_eq!(started, 3, "one per version, none for the resize");
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(d["status"]["availableReplicas"], 4, "{:#}", d["status"]);
    assert_eq!(
        d["status"]["replicas"], 4,
        "no pod of another version is left"
    );
    op.assert_clean_exit();
}

/// 9.8 (issue 9, the confused deputy): a Deployment that has not opted in
/// is never written, the model says how to opt in, and it starts by itself
/// once the label is there.
#[test]
fn a_deployment_must_opt_in_before_it_is_a_target() {
    let sim = start_sim(fast());
    let dir = tmpdir("opt-in");
    let mut d = deployment("svc", 2);
    d["metadata"]["labels"] = json!({"app": "svc"});
    sim.create(d).unwrap();
    let mut op = Operator::start(&sim.url(), &dir, &[]);
    op.wait_ready();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    let s = wait_phase(&sim, "svc", "Pending", "TargetNotOptedIn");
    let msg = s["conditions"][0]["message"].as_str().unwrap_or("");
    assert!(msg.contains("openmed.ai/managed-target=true"), "{msg}");
    wait_event(&sim, "svc", "TargetNotOptedIn");
    std::thread::sleep(Duration::from_secs(3));
    let writes = sim
        .requests()
        .iter()
        .filter(|r| r.resource.starts_with("deployments") && r.method != "GET")
        .count();
    assert_eq!(writes, 0, "the Deployment was written");
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert_eq!(d["metadata"]["generation"], 1);
    let label = json!({"metadata": {"labels": {"openmed.ai/managed-target": "true"}}});
    sim.merge_patch("apps/v1", "Deployment", NS, "svc", &label)
        .unwrap();
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

/// Issue 16, point 5: every metric and label value the shipped alert rules
/// ask for is one the operator exports, checked against a running one.
#[test]
fn the_alert_rules_use_only_exported_metrics() {
    let rules = include_str!("../manifests/monitoring/prometheusrule.yaml");
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

/// Runs `openmed-operator release` against `url`; its exit status and output.
fn release(url: &str, name: &str, extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_openmed-operator"))
        .args([
            "release",
            "--server",
            url,
            "--namespace",
            NS,
            "--name",
            name,
        ])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Issue 16, point 6: after the troubleshooting table's remedy (the
/// finalizer removed by hand while the operator is gone) the ConfigMap is
/// collected but the Deployment still reads it, so its next pod hangs.
/// `release` hands it back as the operator would have; it refuses while the
/// OpenMedModel exists, and a second run has nothing to do.
#[test]
fn release_hands_back_a_deployment_whose_model_lost_its_finalizer() {
    let (sim, _, mut op) = cluster_with(fast(), "release", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    op.assert_clean_exit();
    assert!(preload(&sim, "svc")["valueFrom"]["configMapKeyRef"].is_object());

    let (ok, text) = release(&sim.url(), "svc", &[]);
    assert!(!ok && text.contains("still exists"), "{text}");

    sim.merge_patch(
        MODEL.0,
        MODEL.1,
        NS,
        "svc",
        &json!({"metadata": {"finalizers": null}}),
    )
    .unwrap();
    sim.delete(MODEL.0, MODEL.1, NS, "svc").unwrap();
    let _ = sim.delete("v1", "ConfigMap", NS, "svc-model-manifest");
    let (ok, text) = release(&sim.url(), "svc", &[]);
    assert!(ok && text.contains("handed back"), "{text}");
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert!(
        d["metadata"]["annotations"]["openmed.ai/model-resource"].is_null(),
        "{d:#}"
    );
    assert!(
        d["metadata"]["labels"]["openmed.ai/managed"].is_null(),
        "{d:#}"
    );
    assert_eq!(d["metadata"]["labels"]["openmed.ai/managed-target"], "true");
    // An empty value is omitted, as the API server omits it.
    assert_eq!(
        preload(&sim, "svc"),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS"})
    );
    let hash = &d["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-manifest-hash"];
    assert_eq!(
        hash.as_str(),
        Some(openmed_operator::model::spec::empty_manifest_hash().as_str())
    );
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2, "no container added or lost");

    let (ok, text) = release(&sim.url(), "svc", &[]);
    assert!(ok && text.contains("nothing to do"), "{text}");
    let (ok, text) = release(&sim.url(), "Not_A_Name", &[]);
    assert!(!ok && text.contains("--name"), "{text}");
}

/// Issue 16, point 3: a Deployment a HorizontalPodAutoscaler scales keeps
/// the replicas the autoscaler gives it, through resyncs and a new version;
/// status says who owns them; with the autoscaler gone, the spec's replicas
/// come back.
#[test]
fn an_autoscalers_replicas_are_not_reverted() {
    let (sim, _, mut op) = cluster_with(fast(), "hpa", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "svc-hpa", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"},
                 "minReplicas": 2, "maxReplicas": 5,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 80}}}]}});
    sim.create(hpa).unwrap();
    wait_for(
        "status to name the autoscaler",
        || status(&sim, "svc")["replicasManagedBy"].clone(),
        |v| *v == "HorizontalPodAutoscaler/svc-hpa",
    );
    let replicas = |sim: &Sim| {
        sim.object("apps", "deployments", NS, "svc").unwrap()["spec"]["replicas"].clone()
    };
    // The autoscaler scales up, as the HPA controller does.
    sim.merge_patch(
        "apps/v1",
        "Deployment",
        NS,
        "svc",
        &json!({"spec": {"replicas": 4}}),
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(replicas(&sim), 4, "the operator reverted the autoscaler");
    wait_phase(&sim, "svc", "Ready", "RolloutSucceeded");
    set_version(&sim, "svc", V2);
    wait_serving(&sim, "svc", V2);
    assert_eq!(replicas(&sim), 4, "a new version reverted the autoscaler");
    sim.delete("autoscaling/v2", "HorizontalPodAutoscaler", NS, "svc-hpa")
        .unwrap();
    wait_for("the spec's replicas back", || replicas(&sim), |r| *r == 2);
    wait_for(
        "status to drop the autoscaler",
        || status(&sim, "svc")["replicasManagedBy"].clone(),
        Value::is_null,
    );
    op.assert_clean_exit();
}

/// Issue 17: `--qps` and `--burst` hold the operator to client-go's token
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
