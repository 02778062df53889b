//! docs/contract.md §4 with 9.9 and 9.12: when is a rollout Ready? Judged as
//! `kubectl rollout status` judges it. First, rows of Deployment statuses as
//! the real controller reports them at telling moments; then every moment of
//! whole rollouts driven by kubesim's Deployment controller (which mirrors the
//! upstream one), for replicas 1, 2 and 10, surge and unavailable as ints and
//! percentages, and Recreate, compared with what the pods really are.

use kubesim::deployment::{PodOutcome, Rollouts};
use openmed_operator::reconcile::judge::ready;
use openmed_operator::reconcile::DeploymentView;
use serde_json::{json, Value};
use std::time::Duration;

/// A Deployment at `generation` whose controller reports `status`.
fn observed(replicas: i64, generation: i64, status: Value) -> DeploymentView {
    let d = json!({
        "metadata": {"name": "d", "namespace": "ns", "generation": generation},
        "spec": {"replicas": replicas},
        "status": status,
    });
    DeploymentView::from_json(&d).expect("a named Deployment")
}

fn progressing(reason: &str) -> Value {
    let status = if reason == "ProgressDeadlineExceeded" {
        "False"
    } else {
        "True"
    };
    json!([{"type": "Progressing", "status": status, "reason": reason}])
}

#[test]
fn one_old_ready_pod_never_stands_in_for_an_unready_new_one() {
    // replicas 1, maxSurge 1, maxUnavailable 0: the new pod never gets ready.
    // The real controller reports unavailableReplicas 1 (calculateStatus:
    // ReplicaSet replicas minus available); kubesim once reported 0.
    for unavailable in [1, 0] {
        let d = observed(
            1,
            2,
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1, "unavailableReplicas": unavailable,
                   "conditions": progressing("ReplicaSetUpdated")}),
        );
        assert!(!ready(&d, 1, 2), "unavailableReplicas {unavailable}");
    }
    // The same moment with replicas 2 and 10: old pods still running.
    for r in [2, 10] {
        let d = observed(
            r,
            2,
            json!({"observedGeneration": 2, "replicas": r + 1, "updatedReplicas": r, "readyReplicas": r,
                   "availableReplicas": r, "conditions": progressing("ReplicaSetUpdated")}),
        );
        assert!(!ready(&d, r, 2), "replicas {r}");
    }
}

#[test]
fn complete_when_every_pod_is_new_and_available() {
    for r in [1, 2, 10] {
        let done = json!({"observedGeneration": 2, "replicas": r, "updatedReplicas": r, "readyReplicas": r,
                          "availableReplicas": r, "conditions": progressing("NewReplicaSetAvailable")});
        assert!(ready(&observed(r, 2, done.clone()), r, 2));
        // Ready but not yet available (minReadySeconds): not complete.
        let mut waiting = done.clone();
        waiting["availableReplicas"] = json!(r - 1);
        waiting["unavailableReplicas"] = json!(1);
        assert!(!ready(&observed(r, 2, waiting), r, 2));
        // The deadline passed on this generation: never Ready.
        let mut late = done;
        late["conditions"] = progressing("ProgressDeadlineExceeded");
        assert!(!ready(&observed(r, 2, late), r, 2));
    }
}

#[test]
fn an_edit_the_controller_has_not_seen_is_not_judged() {
    // Someone else edited the template (generation 3) after our write (2):
    // the status still describes generation 2.
    let status = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                        "availableReplicas": 2, "conditions": progressing("NewReplicaSetAvailable")});
    assert!(!ready(&observed(2, 3, status.clone()), 2, 2));
    assert!(ready(&observed(2, 2, status), 2, 2));
}

/// The strategies swept below: (type, maxSurge, maxUnavailable).
fn strategies() -> Vec<Value> {
    let mut out = vec![json!({"type": "Recreate"})];
    for (surge, unavailable) in [
        (json!(1), json!(0)),
        (json!(0), json!(1)),
        (json!(2), json!(1)),
        (json!("25%"), json!("25%")),
        (json!("50%"), json!(0)),
        (json!(0), json!("30%")),
        (json!("100%"), json!("100%")),
    ] {
        out.push(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}));
    }
    out
}

fn deployment(replicas: i64, strategy: &Value, preload: &str) -> Value {
    json!({
        "metadata": {"name": "d", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {
            "replicas": replicas, "progressDeadlineSeconds": 30, "strategy": strategy,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                {"name": "c", "image": "i", "env": [{"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": preload}]}
            ]}},
        },
    })
}

fn set_preload(d: &mut Value, preload: &str) {
    d["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = json!(preload);
    let g = d["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
    d["metadata"]["generation"] = json!(g);
}

/// Drive a rollout from a Ready `v1` to `to`, one simulated second at a
/// time, and at every moment compare the operator's verdict with the pods:
/// Ready only when every pod is of the new template and available.
fn sweep(replicas: i64, strategy: &Value, to: &str) -> Option<u64> {
    let outcome = |template: &Value| {
        let preload = template["spec"]["containers"][0]["env"][0]["value"]
            .as_str()
            .unwrap_or("");
        if preload.contains("unloadable") {
            PodOutcome::NeverReady
        } else {
            PodOutcome::ReadyAfter(Duration::from_secs(2))
        }
    };
    let mut sim = Rollouts::new(outcome);
    let mut d = deployment(replicas, strategy, "v1");
    for _ in 0..20 {
        d["status"] = sim.step(&d, Duration::from_secs(1));
    }
    let v = DeploymentView::from_json(&d).expect("view");
    assert!(
        ready(&v, replicas, 1),
        "v1 never became Ready: {:#}",
        d["status"]
    );
    set_preload(&mut d, to);
    let mut first_ready = None;
    for second in 1..=60 {
        d["status"] = sim.step(&d, Duration::from_secs(1));
        let v = DeploymentView::from_json(&d).expect("view");
        let truth = sim.complete(&d);
        let verdict = ready(&v, replicas, 2);
        // Neither early nor late: the verdict is the pods' truth each second.
        assert_eq!(
            verdict, truth,
            "the verdict is not what the pods are (replicas {replicas}, {strategy}, {to}, t={second}s): {:#}",
            d["status"]
        );
        if verdict && first_ready.is_none() {
            first_ready = Some(second);
        }
    }
    first_ready
}

#[test]
fn every_moment_of_real_rollouts_is_judged_as_the_pods_are() {
    for replicas in [1, 2, 10] {
        for strategy in strategies() {
            let good = sweep(replicas, &strategy, "v2");
            assert!(
                good.is_some(),
                "v2 never Ready: replicas {replicas}, {strategy}"
            );
            let bad = sweep(replicas, &strategy, "v3-unloadable");
            assert_eq!(
                bad, None,
                "unloadable judged Ready: replicas {replicas}, {strategy}"
            );
        }
    }
}
