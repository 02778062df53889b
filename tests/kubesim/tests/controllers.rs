//! kubesim's controllers and the rest of its cluster, checked through its
//! HTTP API as a client sees them: the Deployment controller rolling and
//! judging pods, Deployment validation, Leases, namespace termination and
//! table output.

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(name: &str, replicas: i64, strategy: Value, preload: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "replicas": replicas, "progressDeadlineSeconds": 1, "strategy": strategy,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
            {"name": "c", "image": "i:1", "env": [preload]}]}},
    }})
}

/// Poll a Deployment's status until `done`, checking `invariant` on each.
fn follow(
    a: &Api,
    name: &str,
    mut invariant: impl FnMut(&Value),
    done: impl Fn(&Value) -> bool,
) -> Value {
    let t = Instant::now();
    loop {
        let d = a
            .get(&format!(
                "/apis/apps/v1/namespaces/default/deployments/{name}"
            ))
            .body;
        invariant(&d["status"]);
        if done(&d) {
            return d;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "deployment {name} stuck: {:#}",
            d["status"]
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn progressing(d: &Value) -> (String, String) {
    let c = d["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing").cloned())
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
    )
}

#[test]
fn deployment_controller_rolls_and_judges_pods() {
    let sim = Sim::start(SimConfig {
        warmup: Duration::from_millis(100),
        tick: Duration::from_millis(10),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    a.post(
        CMS,
        json!({"metadata": {"name": "models"}, "data": {"good": "m/v1", "bad": "m/unloadable"}}),
    );
    a_deployment_rolls_out(&a);
    a_new_template_rolls_within_surge_and_unavailability(&a);
    recreate_never_runs_old_and_new_pods_together(&a);
    an_unloadable_model_misses_the_deadline_until_rolled_back(&a);
    a_missing_config_map_key_keeps_the_pod_from_starting(&a);
}

/// The preload env var, from key `key` of ConfigMap models.
fn preload_from(key: &str) -> Value {
    json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom": {"configMapKeyRef": {"name": "models", "key": key}}})
}

fn rolling_update() -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
}

/// Observed and complete.
fn rolled_out(d: &Value) -> bool {
    d["status"]["observedGeneration"] == d["metadata"]["generation"]
        && progressing(d).1 == "NewReplicaSetAvailable"
}

fn a_deployment_rolls_out(a: &Api) {
    assert_eq!(
        a.post(
            DEPLOYMENTS,
            deployment("roll", 3, rolling_update(), preload_from("good"))
        )
        .code,
        201
    );
    let first = follow(a, "roll", |_| {}, rolled_out);
    assert_eq!(first["status"]["availableReplicas"], 3);
    assert!(
        first["status"].get("unavailableReplicas").is_none(),
        "zero counts are omitted"
    );
}

fn a_new_template_rolls_within_surge_and_unavailability(a: &Api) {
    // A new template: never more than replicas + maxSurge pods, never fewer
    // than replicas - maxUnavailable available.
    let p = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    a.patch(
        &format!("{DEPLOYMENTS}/roll"),
        "application/strategic-merge-patch+json",
        p,
    );
    let mut saw_progress = false;
    follow(
        a,
        "roll",
        |s| {
            assert!(s["replicas"].as_i64().unwrap_or(0) <= 4, "{s}");
            assert!(s["availableReplicas"].as_i64().unwrap_or(0) >= 3, "{s}");
            saw_progress |= s["updatedReplicas"].as_i64().unwrap_or(0) < 3;
        },
        |d| rolled_out(d) && d["status"]["updatedReplicas"] == 3,
    );
    assert!(saw_progress);
}

fn recreate_never_runs_old_and_new_pods_together(a: &Api) {
    // Recreate: old pods all go first.
    let rc = json!({"type": "Recreate"});
    a.post(
        DEPLOYMENTS,
        deployment("recreate", 2, rc, preload_from("good")),
    );
    follow(a, "recreate", |_| {}, rolled_out);
    a.patch(
        &format!("{DEPLOYMENTS}/recreate"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}),
    );
    follow(
        a,
        "recreate",
        |s| {
            let (total, updated) = (
                s["replicas"].as_i64().unwrap_or(0),
                s["updatedReplicas"].as_i64().unwrap_or(0),
            );
            assert!(
                updated == 0 || total == updated,
                "old and new pods together under Recreate: {s}"
            );
        },
        |d| rolled_out(d) && d["status"]["updatedReplicas"] == 2,
    );
}

fn an_unloadable_model_misses_the_deadline_until_rolled_back(a: &Api) {
    // An unloadable model never gets ready: the deadline passes.
    a.patch(&format!("{DEPLOYMENTS}/roll"), "application/strategic-merge-patch+json", json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": [preload_from("bad")]}]}}}}));
    let stuck = follow(
        a,
        "roll",
        |_| {},
        |d| progressing(d) == ("False".into(), "ProgressDeadlineExceeded".into()),
    );
    assert_eq!(
        stuck["status"]["observedGeneration"],
        stuck["metadata"]["generation"]
    );
    assert_eq!(
        stuck["status"]["availableReplicas"], 3,
        "old pods keep serving"
    );
    // Rolling back to the previous template reuses its pods and completes.
    a.patch(&format!("{DEPLOYMENTS}/roll"), "application/strategic-merge-patch+json", json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": [preload_from("good")]}]}}}}));
    follow(
        a,
        "roll",
        |_| {},
        |d| rolled_out(d) && d["status"]["updatedReplicas"] == 3,
    );
}

fn a_missing_config_map_key_keeps_the_pod_from_starting(a: &Api) {
    // A missing ConfigMap key keeps the pod from starting at all.
    a.post(
        DEPLOYMENTS,
        deployment("nokey", 1, rolling_update(), preload_from("absent")),
    );
    let d = follow(
        a,
        "nokey",
        |_| {},
        |d| progressing(d).1 == "ProgressDeadlineExceeded",
    );
    assert!(d["status"].get("readyReplicas").is_none());
}

#[test]
fn deployment_validation_catches_client_mistakes() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let d = "/apis/apps/v1/namespaces/default/deployments";
    let both = json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": "x", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}}});
    let r = a.post(
        d,
        deployment("bad", 1, json!({"type": "RollingUpdate"}), both),
    );
    assert_eq!(r.code, 422);
    assert!(r.body["message"].as_str().unwrap().contains("valueFrom"));
    let r = a.post(
        d,
        deployment(
            "bad",
            1,
            json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}),
            json!({"name": "A", "value": "1"}),
        ),
    );
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .contains("spec.strategy.rollingUpdate: Forbidden"));
}

/// Leases as `leaseStrategy` serves them: no unconditional update
/// (`AllowUnconditionalUpdate` false: a PUT without
/// `metadata.resourceVersion` is 422), create on update
/// (`AllowCreateOnUpdate` true: a PUT to a missing Lease creates it, 409
/// if it carries a uid), and decoding as `coordination.Lease` decodes: a
/// bad MicroTime or a string duration is a 400, times come back in UTC.
#[test]
fn leases_follow_the_lease_strategy() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                "renewTime": "2026-12-01T01:30:00.000042+02:00"}})
    };
    let mut with_uid = lease("u");
    with_uid["metadata"]["uid"] = json!("6a1c0000-0000-4000-8000-000000000001");
    let r = a.put(&format!("{leases}/u"), with_uid);
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (409, Some("Conflict")),
        "{}",
        r.body
    );

    let r = a.put(&format!("{leases}/l"), lease("l"));
    assert_eq!(r.code, 201, "a PUT creates a missing Lease: {}", r.body);
    assert_eq!(r.body["spec"]["renewTime"], "2026-11-30T23:30:00.000042Z");

    let r = a.put(&format!("{leases}/l"), lease("l"));
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(
        r.body["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    let mut current = a.get(&format!("{leases}/l")).body;
    current["spec"]["holderIdentity"] = json!("b");
    assert_eq!(a.put(&format!("{leases}/l"), current.clone()).code, 200);

    for (field, value) in [
        ("renewTime", json!("2026-12-01T01:30:00Z")),
        ("leaseDurationSeconds", json!("15")),
    ] {
        let mut bad = lease("bad");
        bad["spec"][field] = value;
        let r = a.post(leases, bad);
        assert_eq!(
            (r.code, r.body["reason"].as_str()),
            (400, Some("BadRequest")),
            "{field}: {}",
            r.body
        );
    }
}

/// A namespace's deletion as upstream runs it: `Terminating` with the
/// `kubernetes` finalizer (namespace storage `Delete`), no new content
/// (NamespaceLifecycle admission: 403, cause `NamespaceTerminating`), the
/// content deleted by the namespace controller with finalizers honoured
/// (`NamespacedResourcesDeleter`), and the namespace gone once empty.
#[test]
fn a_deleted_namespace_terminates_then_goes() {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    let made = a.post("/api/v1/namespaces", json!({"metadata": {"name": "gone"}}));
    assert_eq!(made.body["spec"]["finalizers"], json!(["kubernetes"]));
    let cms = "/api/v1/namespaces/gone/configmaps";
    a.post(
        cms,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    );
    a.post(cms, json!({"metadata": {"name": "plain"}}));

    let r = a.delete("/api/v1/namespaces/gone", None);
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["status"]["phase"], "Terminating");
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    let r = a.post(cms, json!({"metadata": {"name": "late"}}));
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace gone because it is being terminated"
    );
    assert_eq!(
        r.body["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    // A client deleting the namespace's objects right after it finds them.
    assert_eq!(a.delete(&format!("{cms}/plain"), None).code, 200);

    let t = Instant::now();
    while a.get(&format!("{cms}/held")).body["metadata"]["deletionTimestamp"].is_null() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the content is never deleted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        a.get("/api/v1/namespaces/gone").code,
        200,
        "held by its content"
    );
    a.merge(
        &format!("{cms}/held"),
        json!({"metadata": {"finalizers": null}}),
    );
    let t = Instant::now();
    while a.get("/api/v1/namespaces/gone").code != 404 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the emptied namespace stays"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Tables carry what `includeObject` asks for (kubectl asks for whole
/// objects to `--sort-by`), and the Event `source` field selector falls
/// back to the reporting controller (`event.ToSelectableFields`).
#[test]
fn tables_include_objects_and_event_source_falls_back() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let events = "/api/v1/namespaces/default/events";
    let ev = json!({"metadata": {"name": "e1"}, "reason": "Started", "type": "Normal",
        "message": "m", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reportingComponent": "openmed-operator", "reportingInstance": "x",
        "lastTimestamp": "2026-12-03T10:00:00Z"});
    assert_eq!(a.post(events, ev).code, 201);
    let table = |include: &str| {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        a.get_as(&format!("{events}?includeObject={include}"), accept)
            .body
    };
    assert_eq!(
        table("Object")["rows"][0]["object"]["lastTimestamp"],
        "2026-12-03T10:00:00Z"
    );
    assert_eq!(
        table("Metadata")["rows"][0]["object"]["kind"],
        "PartialObjectMetadata"
    );
    assert!(table("None")["rows"][0].get("object").is_none());
    let by_source = a
        .get(&format!("{events}?fieldSelector=source%3Dopenmed-operator"))
        .body;
    assert_eq!(by_source["items"].as_array().unwrap().len(), 1);
}
