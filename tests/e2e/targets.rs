//! Targets end to end: two models on one Deployment, retargeting, release,
//! recreation and adoption, refused writes and paused targets, a foreign
//! ConfigMap, the opt-in label, and `openmed-operator release`.

use crate::harness::*;
use kubesim::Sim;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

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

/// A claimed Deployment's change reaches the operator once, on the claimed
/// Deployments' watch: the metadata watch selects
/// `openmed.ai/managed!=true`, and a Deployment claimed leaves it as
/// DELETED (upstream `cacheWatcher.convertToWatchEvent`), so the API server
/// does not send its changes twice.
#[test]
fn a_claimed_deployments_change_is_sent_to_the_operator_once() {
    let (sim, _, _op) = cluster_with(fast(), "sent-once", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    let (rv, before) = (sim.resource_version(), sim.watch_events("apps/deployments"));
    let note = json!({"metadata": {"annotations": {"example.com/note": "seen"}}});
    sim.merge_patch("apps/v1", "Deployment", NS, "svc", &note)
        .unwrap();
    // Until the changes it caused (the Deployment controller's status
    // too) have all been sent: none for 500 ms.
    let mut last = (before, std::time::Instant::now());
    let start = std::time::Instant::now();
    while last.1.elapsed() < Duration::from_millis(500) || last.0 == before {
        assert!(start.elapsed() < Duration::from_secs(10), "no watch event");
        std::thread::sleep(Duration::from_millis(20));
        let now = sim.watch_events("apps/deployments");
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
    }
    let changes = sim.changes_after(rv, "apps/deployments", NS, "svc");
    assert!(changes >= 1);
    assert_eq!(
        last.0 - before,
        changes as u64,
        "events for {changes} changes"
    );
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

/// A retargeted model releases the Deployment it
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

/// A write the API refuses is reported, backed
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
    assert!(sim
        .requests()
        .iter()
        .any(|r| r.method == "PATCH" && r.path.ends_with("/deployments/svc") && r.status == 403));
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

/// 9.8 (the confused deputy): a Deployment that has not opted in
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

/// After the troubleshooting table's remedy (the
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
