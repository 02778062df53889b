//! The scenarios of the story (tests/real/main.rs runs each on both
//! clusters). Each waits for the state a user would wait for, then records a
//! checkpoint; assertions hold on both clusters.

use crate::story::{text, Story, BAD, MODEL, PRELOAD, V1, V2};
use serde_json::{json, Value};
use std::time::Duration;

/// A model turns Ready; a version change rolls the pods; an unloadable
/// version misses the Deployment's progress deadline and is rolled back by
/// itself; a manual rollback; a rollback-to a version not retained; delete.
pub fn lifecycle(st: &mut Story) {
    st.deployment("svc", 2, true);
    st.model("svc", "svc", V1, 600);
    st.wait_serving("svc", V1);
    st.wait_events("svc", &[("RolloutStarted", 1), ("RolloutSucceeded", 1)]);
    let cm = st.c.object("", "configmaps", &st.ns, "svc-model-manifest");
    assert_eq!(cm.map(|c| c["data"][PRELOAD].clone()), Some(json!(V1)));
    st.checkpoint("v1 Ready", "svc", "svc");

    let hash = |st: &Story| {
        text(
            &st.deploy("svc")["spec"]["template"]["metadata"]["annotations"]
                ["openmed.ai/model-manifest-hash"],
        )
    };
    let before = hash(st);
    st.patch_model("svc", json!({"spec": {"version": V2}}));
    let s = st.wait_serving("svc", V2);
    assert_eq!(s["previousSuccessfulSpec"]["version"], V1);
    assert_ne!(
        hash(st),
        before,
        "the pod template's manifest hash did not change: no pods rolled"
    );
    st.wait_events("svc", &[("RolloutStarted", 2), ("RolloutSucceeded", 2)]);
    st.checkpoint("v2 Ready", "svc", "svc");

    // The operator writes the model's deadline onto the Deployment; the deployment controller then marks it
    // Progressing=False/ProgressDeadlineExceeded (upstream `syncRolloutStatus`, `DeploymentTimedOut`), which
    // the operator judges a failed rollout (§4.3) and rolls back.
    st.patch_model(
        "svc",
        json!({"spec": {"version": BAD, "rolloutStrategy": {"progressDeadlineSeconds": 3}}}),
    );
    let s = st.wait_status("svc", "RolledBack with RollbackSucceeded", |s| {
        s["phase"] == "RolledBack" && s["conditions"][3]["reason"] == "RollbackSucceeded"
    });
    assert_eq!(
        (&s["desiredVersion"], &s["activeVersion"]),
        (&json!(BAD), &json!(V2))
    );
    assert_eq!(s["rollbackRequest"], format!("automatic:{BAD}"));
    st.wait_events(
        "svc",
        &[
            ("RolloutStarted", 3),
            ("RolloutFailed", 1),
            ("RollbackStarted", 1),
            ("RollbackSucceeded", 1),
        ],
    );
    st.checkpoint("unloadable rolled back", "svc", "svc");

    rollback_to(st, Some(V1));
    st.wait_status("svc", "a manual rollback to v1", |s| {
        s["rollbackRequest"] == format!("manual:{V1}")
            && s["conditions"][3]["reason"] == "RollbackSucceeded"
    });
    st.wait_events("svc", &[("RollbackStarted", 2), ("RollbackSucceeded", 2)]);
    let cm = st.c.object("", "configmaps", &st.ns, "svc-model-manifest");
    assert_eq!(cm.map(|c| c["data"][PRELOAD].clone()), Some(json!(V1)));
    st.checkpoint("manual rollback to v1", "svc", "svc");

    rollback_to(st, Some("OpenMed/never-served-v9"));
    st.wait_status("svc", "the rejected rollback-to in Degraded", |s| {
        s["conditions"][2]["reason"] == "RollbackTargetUnavailable"
    });
    st.wait_event("svc", "RollbackRejected");
    st.checkpoint("rollback-to a version not retained", "svc", "svc");

    deleted(st, "svc", "svc");
}

fn rollback_to(st: &Story, target: Option<&str>) {
    st.patch_model(
        "svc",
        json!({"metadata": {"annotations": {"openmed.ai/rollback-to": target}}}),
    );
}

/// Delete: the finalizer is released, the ConfigMap goes (the garbage
/// collector's work on a real cluster: it is owned by the model), the
/// preload variable is blanked and the other container stays.
fn deleted(st: &mut Story, name: &str, target: &str) {
    st.c.delete(MODEL.0, MODEL.1, &st.ns, name)
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    crate::harness::wait_until(
        &format!("{name} and its ConfigMap to go on {}", st.c.name()),
        || {
            st.c.object("openmed.ai", "openmedmodels", &st.ns, name)
                .is_none()
                && st
                    .c
                    .object("", "configmaps", &st.ns, &format!("{name}-model-manifest"))
                    .is_none()
        },
    );
    let d = st.deploy(target);
    let env = &d["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .into_iter()
            .flatten()
            .any(|e| *e == json!({"name": PRELOAD})),
        "the preload variable is not blanked: {env}"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][1]["name"],
        "proxy"
    );
    st.checkpoint("deleted", name, target);
}

/// A Deployment that has not opted in stays untouched until it does.
pub fn not_opted_in(st: &mut Story) {
    st.deployment("plain", 1, false);
    st.model("plain", "plain", V1, 600);
    let s = st.wait_status("plain", "Pending/TargetNotOptedIn", |s| {
        s["phase"] == "Pending" && s["conditions"][0]["reason"] == "TargetNotOptedIn"
    });
    let msg = text(&s["conditions"][0]["message"]);
    assert!(msg.contains("openmed.ai/managed-target=true"), "{msg}");
    st.wait_event("plain", "TargetNotOptedIn");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        st.deploy("plain")["metadata"]["generation"],
        1,
        "the Deployment was written"
    );
    st.checkpoint("not opted in", "plain", "plain");
    let label = json!({"metadata": {"labels": {"openmed.ai/managed-target": "true"}}});
    st.c.merge_patch("apps/v1", "Deployment", &st.ns, "plain", &label)
        .unwrap_or_else(|e| panic!("labelling: {e}"));
    st.wait_serving("plain", V1);
    st.wait_events("plain", &[("RolloutStarted", 1), ("RolloutSucceeded", 1)]);
    st.checkpoint("opted in", "plain", "plain");
}

/// A Deployment an autoscaler already scales keeps the replicas it set,
/// through the model's first rollout and a new version. (The scale-up comes
/// before the model: one while a model is Ready makes it RollingOut until
/// the new pod is ready, a window the operator sees or misses by timing, on
/// either cluster, and the differential compares no timing.)
pub fn autoscaled(st: &mut Story) {
    st.deployment("scaled", 2, true);
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "scaled-hpa", "namespace": st.ns},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "scaled"},
                 "minReplicas": 2, "maxReplicas": 5,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 80}}}]}});
    st.c.create(hpa)
        .unwrap_or_else(|e| panic!("creating the HPA: {e}"));
    // The autoscaler scales up, as the HPA controller does, through the scale subresource's field.
    let scale = json!({"spec": {"replicas": 3}});
    st.c.merge_patch("apps/v1", "Deployment", &st.ns, "scaled", &scale)
        .unwrap_or_else(|e| panic!("scaling: {e}"));
    crate::harness::wait_until(&format!("3 pods Ready on {}", st.c.name()), || {
        ready_pods(st, "scaled") == 3
    });
    st.model("scaled", "scaled", V1, 600);
    st.wait_serving("scaled", V1);
    st.wait_status("scaled", "status to name the autoscaler", |s| {
        s["replicasManagedBy"] == "HorizontalPodAutoscaler/scaled-hpa"
    });
    let replicas = |st: &Story| st.deploy("scaled")["spec"]["replicas"].clone();
    assert_eq!(replicas(st), 3, "the operator reverted the autoscaler");
    st.patch_model("scaled", json!({"spec": {"version": V2}}));
    st.wait_serving("scaled", V2);
    st.wait_events("scaled", &[("RolloutStarted", 2), ("RolloutSucceeded", 2)]);
    assert_eq!(replicas(st), 3, "a new version reverted the autoscaler");
    st.checkpoint("autoscaled to 3, then v2", "scaled", "scaled");
}

/// Pods of the model's Deployment that are Ready: the stand-in's or kubesim's.
pub fn ready_pods(st: &Story, app: &str) -> usize {
    st.c.objects("", "pods", Some(&st.ns))
        .iter()
        .filter(|p| {
            p["metadata"]["labels"]["app"] == app && p["metadata"]["deletionTimestamp"].is_null()
        })
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c: &Value| c["type"] == "Ready" && c["status"] == "True")
        })
        .count()
}

/// `kubectl rollout restart` in the middle of the operator's rollout: the
/// restart's template annotation stays (it is not a field the operator
/// owns), the rollout finishes, and no Event is lost or doubled.
pub fn restarted_mid_rollout(st: &mut Story) {
    st.deployment("rr", 2, true);
    st.model("rr", "rr", V1, 600);
    st.wait_serving("rr", V1);
    st.patch_model("rr", json!({"spec": {"version": V2}}));
    st.wait_status("rr", "the v2 rollout under way", |s| {
        s["desiredVersion"] == V2 && s["phase"] == "RollingOut"
    });
    // What `kubectl rollout restart` sends (kubectl's `objectRestarter`).
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-12-06T00:00:00Z"}}}}});
    st.c.merge_patch("apps/v1", "Deployment", &st.ns, "rr", &restart)
        .unwrap_or_else(|e| panic!("rollout restart: {e}"));
    st.wait_serving("rr", V2);
    st.wait_events("rr", &[("RolloutStarted", 2), ("RolloutSucceeded", 2)]);
    let events = st.events("rr");
    assert_eq!(
        (events.get("RolloutStarted"), events.get("RolloutSucceeded")),
        (Some(&2), Some(&2)),
        "an Event doubled on {}: {events:?}",
        st.c.name()
    );
    let d = st.deploy("rr");
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
        "2026-12-06T00:00:00Z",
        "the restart's annotation was reverted"
    );
    crate::harness::wait_until(&format!("every pod of rr Ready on {}", st.c.name()), || {
        ready_pods(st, "rr") == 2
    });
    st.checkpoint("restarted mid-rollout", "rr", "rr");
}
