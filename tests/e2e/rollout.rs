//! Rollouts end to end: upgrade, automatic and manual rollback and delete;
//! a kill mid-rollout; quick successive changes; a lagging watch; a switch
//! to Recreate with a resize; an autoscaler's replicas.

use crate::harness::*;
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[test]
fn rollout_upgrade_automatic_and_manual_rollback_then_delete() {
    let (sim, _, mut op) = cluster_with(fast(), "lifecycle", "openmed-service", &[]);
    sim.create(model("openmed-service", "openmed-service", V1, 600))
        .unwrap();
    the_first_version_serves_from_the_manifest(&sim);
    // A version bump reaches Ready on v2.
    set_version(&sim, "openmed-service", V2);
    let s = wait_serving(&sim, "openmed-service", V2);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    assert_eq!(s["previousSuccessfulSpec"]["version"], V1);

    an_unloadable_version_rolls_back_by_itself(&sim);
    a_manual_rollback_to_the_previous_version(&sim);
    a_delete_releases_everything(&sim);

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

fn the_first_version_serves_from_the_manifest(sim: &Sim) {
    let s = wait_serving(sim, "openmed-service", V1);
    assert_eq!(s["conditions"][0]["reason"], "RolloutSucceeded");
    let cm = sim
        .object("", "configmaps", NS, "openmed-service-model-manifest")
        .unwrap();
    assert_eq!(cm["data"]["OPENMED_SERVICE_PRELOAD_MODELS"], V1);
    assert_eq!(
        preload(sim, "openmed-service")["valueFrom"]["configMapKeyRef"]["name"],
        "openmed-service-model-manifest"
    );
}

/// A version that cannot load misses its deadline; the operator rolls back
/// to the last one that served.
fn an_unloadable_version_rolls_back_by_itself(sim: &Sim) {
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
        || status(sim, "openmed-service"),
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
        wait_event(sim, "openmed-service", want);
    }
}

fn a_manual_rollback_to_the_previous_version(sim: &Sim) {
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
        let s = status(sim, "openmed-service");
        s["rollbackRequest"] == format!("manual:{V1}")
            && s["conditions"][3]["reason"] == "RollbackSucceeded"
    });
    assert_eq!(
        sim.object("", "configmaps", NS, "openmed-service-model-manifest")
            .unwrap()["data"]["OPENMED_SERVICE_PRELOAD_MODELS"],
        V1
    );
    // The manual rollback is a second RollbackStarted in this generation,
    // with a record of its own beside the automatic one's (§2.6, §9.D17).
    wait_until("a RollbackStarted of its own", || {
        let started: Vec<Value> = sim
            .objects("", "events", Some(NS))
            .into_iter()
            .filter(|e| e["reason"] == "RollbackStarted")
            .collect();
        let kind = |k: &str| {
            started.iter().any(|e| {
                e["count"] == 1 && e["metadata"]["name"].as_str().unwrap_or("").contains(k)
            })
        };
        started.len() == 2 && kind("-automatic-") && kind("-manual-")
    });
}

fn a_delete_releases_everything(sim: &Sim) {
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
        preload(sim, "openmed-service"),
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

/// Versions applied in quick succession with replicas 1 and 2
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

/// Writes of model svc's ConfigMap so far.
fn config_map_writes(sim: &Sim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method != "GET" && r.path.ends_with("/configmaps/svc-model-manifest"))
        .count()
}

/// With the model watch 0.8 s behind, three quick
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
    let writes_before = config_map_writes(&sim);
    let start = Instant::now();
    let mut next = 0;
    let mut first_change = None;
    loop {
        if next < versions.len() && start.elapsed() >= Duration::from_millis(300 * next as u64) {
            set_version(&sim, "svc", versions[next]);
            next += 1;
        }
        if first_change.is_none() && config_map_writes(&sim) > writes_before {
            first_change = Some(start.elapsed());
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
    // The lag took effect: the operator heard of v2 0.8 s late.
    let first = first_change.expect("the ConfigMap was never written");
    assert!(
        first >= Duration::from_millis(750),
        "first ConfigMap write after {first:?}"
    );
    // One write per version at most: an older one put back and undone
    // between two samples would take two more.
    let writes = config_map_writes(&sim) - writes_before;
    assert!(writes <= versions.len(), "{writes} writes of the ConfigMap");
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
    let named: Vec<String> = sim
        .objects("", "events", Some(NS))
        .into_iter()
        .filter(|e| e["reason"] == "RolloutStarted")
        .map(|e| format!("{} x{} {}", e["metadata"]["name"], e["count"], e["message"]))
        .collect();
    assert_eq!(
        started,
        3,
        "one per version, none for the resize: {named:#?}\n{}",
        op.log()
    );
    let d = sim.object("apps", "deployments", NS, "svc").unwrap();
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(d["status"]["availableReplicas"], 4, "{:#}", d["status"]);
    assert_eq!(
        d["status"]["replicas"], 4,
        "no pod of another version is left"
    );
    op.assert_clean_exit();
}

/// A Deployment a HorizontalPodAutoscaler scales keeps
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
