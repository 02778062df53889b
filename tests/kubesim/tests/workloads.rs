//! Pods and ReplicaSets served as the upstream controllers make them:
//! `getNewReplicaSet` (pkg/controller/deployment/sync.go),
//! `ReplicaSetController.manageReplicas` and `calculateStatus`
//! (pkg/controller/replicaset), the kubelet's `generateAPIPodStatus` and
//! `makeEnvironmentVariables`, `pod.ToSelectableFields`, and kubectl's
//! `printPod` for the Table.

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const SETS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const PODS: &str = "/api/v1/namespaces/default/pods";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

fn sim() -> Sim {
    Sim::start(SimConfig {
        warmup: Duration::from_millis(50),
        tick: Duration::from_millis(10),
        ..SimConfig::default()
    })
    .unwrap()
}

fn deployment(name: &str, replicas: i64, version: &str, cm: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"team": "ml"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": {"v": version}},
                "spec": {"containers": [{"name": "svc", "image": "openmed:1",
                    "env": [{"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom":
                        {"configMapKeyRef": {"name": cm, "key": "OPENMED_SERVICE_PRELOAD_MODELS"}}}]}]}}}})
}

fn config_map(name: &str, model: &str) -> Value {
    json!({"metadata": {"name": name}, "data": {"OPENMED_SERVICE_PRELOAD_MODELS": model}})
}

/// `what` holds within 10 s.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn items(a: &Api, path: &str) -> Vec<Value> {
    let r = a.get(path);
    assert_eq!(r.code, 200, "{path}: {}", r.body);
    r.body["items"].as_array().cloned().unwrap_or_default()
}

fn owned_by<'a>(objs: &'a [Value], uid: &str) -> Vec<&'a Value> {
    objs.iter()
        .filter(|o| o["metadata"]["ownerReferences"][0]["uid"] == uid)
        .collect()
}

fn condition<'a>(o: &'a Value, ty: &str) -> &'a Value {
    o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .map(|c| &c["status"])
        .unwrap_or(&Value::Null)
}

fn ready_pods(a: &Api, rs_uid: &str) -> usize {
    owned_by(&items(a, PODS), rs_uid)
        .iter()
        .filter(|p| condition(p, "Ready") == "True")
        .count()
}

/// A Deployment's one ReplicaSet and its pods are API objects, owned as
/// upstream owns them, with the counts the Deployment status reports.
#[test]
fn a_deployments_replica_set_and_pods_are_served_as_the_controllers_make_them() {
    let sim = sim();
    let a = api(&sim);
    assert_eq!(
        a.post(
            "/api/v1/namespaces/default/configmaps",
            config_map("m", "OpenMed/v1")
        )
        .code,
        201
    );
    let d = a.post(DEPLOYS, deployment("svc", 2, "1", "m"));
    assert_eq!(d.code, 201, "{}", d.body);
    let uid = d.body["metadata"]["uid"].as_str().unwrap().to_string();
    wait_for("the Deployment available", || {
        a.get(&format!("{DEPLOYS}/svc")).body["status"]["availableReplicas"] == 2
    });

    let sets = items(&a, SETS);
    let mine = owned_by(&sets, &uid);
    assert_eq!(mine.len(), 1, "{sets:#?}");
    let rs = mine[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(rs["metadata"]["name"], format!("svc-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    let ann = &rs["metadata"]["annotations"];
    assert_eq!(ann["deployment.kubernetes.io/revision"], "1");
    assert_eq!(ann["deployment.kubernetes.io/desired-replicas"], "2");
    // 25% surge of 2, rounded up (`ResolveFenceposts`).
    assert_eq!(ann["deployment.kubernetes.io/max-replicas"], "3");
    assert_eq!(ann["team"], "ml", "the Deployment's annotations are copied");
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(rs["spec"]["replicas"], 2);
    assert_eq!(rs["status"]["readyReplicas"], 2);
    assert_eq!(rs["status"]["availableReplicas"], 2);

    let rs_uid = rs["metadata"]["uid"].as_str().unwrap();
    let pods = items(&a, PODS);
    let pods = owned_by(&pods, rs_uid);
    assert_eq!(pods.len(), 2);
    for p in &pods {
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            p["metadata"]["annotations"]["kubesim.openmed.ai/preload"],
            "OpenMed/v1"
        );
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(condition(p, "Ready"), "True");
        assert_eq!(condition(p, "ContainersReady"), "True");
        let c = &p["status"]["containerStatuses"][0];
        assert_eq!(
            (&c["ready"], &c["started"], &c["restartCount"]),
            (&json!(true), &json!(true), &json!(0))
        );
    }

    // kubectl's columns, and a field selector on the phase.
    let t = a.get_as(PODS, TABLE).body;
    let cols = |priority: i64| -> Vec<&str> {
        (t["columnDefinitions"].as_array().unwrap().iter())
            .filter(|c| c["priority"] == priority)
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    };
    assert_eq!(cols(0), ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(cols(1), ["IP", "Node", "Nominated Node", "Readiness Gates"]);
    assert_eq!(t["rows"][0]["cells"][6], "kubesim-node");
    assert_eq!(t["rows"][0]["cells"][1], "1/1");
    assert_eq!(t["rows"][0]["cells"][2], "Running");
    let running = items(&a, &format!("{PODS}?fieldSelector=status.phase%3DRunning"));
    assert_eq!(running.len(), 2);
    assert!(items(&a, &format!("{PODS}?fieldSelector=status.phase%3DPending")).is_empty());
    assert_eq!(
        a.get(&format!("{PODS}?fieldSelector=spec.bogus%3Dx")).code,
        400
    );
}

/// Deployment `svc` with `replicas`, its ConfigMap present, available.
fn serving(a: &Api, replicas: i64) {
    a.post(
        "/api/v1/namespaces/default/configmaps",
        config_map("m", "OpenMed/v1"),
    );
    a.post(DEPLOYS, deployment("svc", replicas, "1", "m"));
    wait_for("the Deployment available", || {
        a.get(&format!("{DEPLOYS}/svc")).body["status"]["availableReplicas"] == replicas
    });
}

/// `manageReplicas`: a pod deleted through the API is replaced by a new
/// one, which becomes ready; the Deployment counts it.
#[test]
fn a_pod_deleted_by_hand_is_replaced() {
    let sim = sim();
    let a = api(&sim);
    serving(&a, 2);
    let rs_uid = items(&a, SETS)[0]["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("both pods ready", || ready_pods(&a, &rs_uid) == 2);
    let names = |a: &Api| -> Vec<String> {
        owned_by(&items(a, PODS), &rs_uid)
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let before = names(&a);
    let victim = &before[0];
    assert_eq!(a.delete(&format!("{PODS}/{victim}"), None).code, 200);
    wait_for("a replacement ready", || {
        let now = names(&a);
        now.len() == 2 && !now.contains(victim) && ready_pods(&a, &rs_uid) == 2
    });
    assert_eq!(
        a.get(&format!("{DEPLOYS}/svc")).body["status"]["readyReplicas"],
        2
    );
}

/// `makeEnvironmentVariables`: a pod whose ConfigMap is missing never
/// starts its container (Pending, `CreateContainerConfigError`).
#[test]
fn a_pod_whose_config_map_is_missing_waits_with_the_kubelets_reason() {
    let sim = sim();
    let a = api(&sim);
    a.post(DEPLOYS, deployment("svc", 1, "1", "absent"));
    wait_for("a pod", || !items(&a, PODS).is_empty());
    let pods = items(&a, PODS);
    let p = &pods[0];
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(condition(p, "Ready"), "False");
    let waiting = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    assert_eq!(waiting["reason"], "CreateContainerConfigError");
    assert_eq!(waiting["message"], "configmap \"absent\" not found");
    let t = a.get_as(PODS, TABLE).body;
    assert_eq!(t["rows"][0]["cells"][2], "CreateContainerConfigError");
    assert_eq!(t["rows"][0]["cells"][1], "0/1");
}

/// A rollout makes a second ReplicaSet with the next revision; the old one
/// is kept, scaled to 0, as `rollout history` lists them.
#[test]
fn a_rollout_keeps_the_old_replica_set_with_its_revision() {
    let sim = sim();
    let a = api(&sim);
    serving(&a, 1);
    let r = a.merge(
        &format!("{DEPLOYS}/svc"),
        json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}}),
    );
    assert_eq!(r.code, 200);
    wait_for("the rollout complete", || {
        let sets = items(&a, SETS);
        let by_rev = |rev: &str| {
            sets.iter()
                .find(|s| s["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == rev)
                .map(|s| {
                    (
                        s["spec"]["replicas"].clone(),
                        s["status"]["readyReplicas"].clone(),
                    )
                })
        };
        sets.len() == 2
            && by_rev("1") == Some((json!(0), Value::Null))
            && by_rev("2") == Some((json!(1), json!(1)))
    });
    let pods = items(&a, PODS);
    assert_eq!(pods.len(), 1, "the old pod is gone: {pods:#?}");
    assert_eq!(pods[0]["metadata"]["annotations"]["v"], "2");
}
