//! kubesim against the real kube-apiserver, its Deployments: validation as
//! `ValidateDeploymentSpec` and the scale subresource as `ScaleREST`, each
//! naming the upstream code it mirrors. Over HTTP, as a client sees it.

mod common;

use common::*;
use kubesim::Sim;
use serde_json::{json, Value};

/// A Deployment named `d` with `spec` fields set over the test's own.
fn deployment_with(spec: Value) -> Value {
    let mut d = deployment("d", json!([]));
    if let (Some(m), Some(extra)) = (d["spec"].as_object_mut(), spec.as_object()) {
        m.extend(extra.clone());
    }
    d
}

fn rolling(max_unavailable: Value, max_surge: Value) -> Value {
    json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}}})
}

/// Refused Deployment specs and the causes upstream gives, in its order.
fn invalid_deployment_specs() -> Vec<(Value, Vec<String>)> {
    let pct = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
    let neg = "must be greater than or equal to 0";
    let zero = "may not be 0 when `maxSurge` is 0";
    let mu = "spec.strategy.rollingUpdate.maxUnavailable: Invalid value:";
    let ms = "spec.strategy.rollingUpdate.maxSurge: Invalid value:";
    let pd = "spec.progressDeadlineSeconds: Invalid value:";
    let pd_min = "must be greater than minReadySeconds";
    vec![
        (
            rolling(json!("101%"), json!(1)),
            vec![format!("{mu} \"101%\": must not be greater than 100%")],
        ),
        (
            rolling(json!(1), json!("5")),
            vec![format!("{ms} \"5\": {pct}")],
        ),
        (
            rolling(json!("1.5%"), json!(1)),
            vec![format!("{mu} \"1.5%\": {pct}")],
        ),
        (
            rolling(json!(1), json!(-1)),
            vec![format!("{ms} -1: {neg}")],
        ),
        (
            rolling(json!("0%"), json!(0)),
            vec![format!("{mu} \"0%\": {zero}")],
        ),
        (
            rolling(json!("x"), json!(0)),
            vec![format!("{mu} \"x\": {pct}"), format!("{mu} \"x\": {zero}")],
        ),
        (
            json!({"replicas": -1}),
            vec![format!("spec.replicas: Invalid value: -1: {neg}")],
        ),
        (
            json!({"minReadySeconds": -1}),
            vec![format!("spec.minReadySeconds: Invalid value: -1: {neg}")],
        ),
        (
            json!({"revisionHistoryLimit": -1}),
            vec![format!(
                "spec.revisionHistoryLimit: Invalid value: -1: {neg}"
            )],
        ),
        (
            json!({"minReadySeconds": 10, "progressDeadlineSeconds": 10}),
            vec![format!("{pd} 10: {pd_min}")],
        ),
        (
            json!({"minReadySeconds": 700}),
            vec![format!("{pd} 600: {pd_min}")],
        ),
        (
            json!({"progressDeadlineSeconds": -5}),
            vec![format!("{pd} -5: {neg}"), format!("{pd} -5: {pd_min}")],
        ),
    ]
}

/// Behaviour 7. Deployment validation as `ValidateDeploymentSpec`,
/// `ValidateDeploymentStrategy`, `ValidateRollingUpdateDeployment`,
/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`
/// (pkg/apis/apps/validation/validation.go) with `IsValidPercent`
/// (apimachinery pkg/util/validation): `maxSurge` may exceed 100%,
/// `maxUnavailable` may not; a percent must match `^[0-9]+%$`; a negative
/// int is refused; `getIntOrPercentValue` reads a non-percent string as its
/// `Atoi` (so "x" counts as 0 beside a zero `maxSurge`); replicas,
/// minReadySeconds, revisionHistoryLimit and progressDeadlineSeconds are not
/// negative, and progressDeadlineSeconds (defaulted to 600) must exceed
/// minReadySeconds. Values are quoted as kubesim quotes every string.
#[test]
fn deployment_validation_as_validate_deployment_spec() {
    let sim = quiet_sim();
    let a = api(&sim);
    let r = a.post(DEPLOYS, deployment_with(rolling(json!(0), json!("200%"))));
    assert_eq!(r.code, 201, "{}", r.body);
    let surge = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": "150%"}}}});
    let r = a.merge(&format!("{DEPLOYS}/d"), surge);
    assert_eq!(r.code, 200, "{}", r.body);
    a.delete(&format!("{DEPLOYS}/d"), None);

    for (spec, want) in invalid_deployment_specs() {
        let r = a.post(DEPLOYS, deployment_with(spec.clone()));
        assert_eq!(r.code, 422, "{spec}: {}", r.body);
        let body = match want.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let message = format!("Deployment.apps \"d\" is invalid: {body}");
        assert_eq!(r.body["message"], message, "{spec}");
    }
    let ok = json!({"minReadySeconds": 5, "progressDeadlineSeconds": 6, "revisionHistoryLimit": 0});
    assert_eq!(a.post(DEPLOYS, deployment_with(ok)).code, 201);
}

/// A quiet cluster with Deployment `web` (2 replicas, `app=web`) whose
/// status says 2 replicas; its path and the Deployment.
fn web_deployment(sim: &Sim) -> (String, Value) {
    let a = api(sim);
    let mut d = deployment("web", json!([]));
    d["spec"]["replicas"] = json!(2);
    assert_eq!(a.post(DEPLOYS, d).code, 201);
    let path = format!("{DEPLOYS}/web");
    let r = a.merge(
        &format!("{path}/status"),
        json!({"status": {"replicas": 2}}),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    (path, r.body)
}

/// Behaviour 8. The Deployment `scale` subresource read as `ScaleREST.Get`
/// (pkg/registry/apps/deployment/storage/storage.go) answers it:
/// `scaleFromDeployment`, an autoscaling/v1 `Scale` with the Deployment's
/// name, namespace, uid, resourceVersion and creationTimestamp, its
/// `spec.replicas`, its `status.replicas` and its selector as
/// `LabelSelectorAsSelector(..).String()`; the Deployment's 404 when it is
/// missing (every verb); `deployments/scale` in discovery with the Scale's
/// group and version, which `kubectl scale` looks for.
#[test]
fn deployment_scale_reads_as_scale_rest_get() {
    let sim = quiet_sim();
    let a = api(&sim);
    let (path, dep) = web_deployment(&sim);
    let meta = &dep["metadata"];
    let r = a.get(&format!("{path}/scale"));
    assert_eq!(r.code, 200);
    assert_eq!(
        r.body,
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
               "metadata": {"name": "web", "namespace": "default", "uid": meta["uid"],
                            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
               "spec": {"replicas": 2}, "status": {"replicas": 2, "selector": "app=web"}})
    );
    let rl = a.get("/apis/apps/v1").body;
    let entry = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "deployments/scale")
        .cloned();
    assert_eq!(
        entry,
        Some(
            json!({"name": "deployments/scale", "singularName": "", "namespaced": true,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]})
        )
    );
    let missing = format!("{DEPLOYS}/nope/scale");
    for r in [
        a.get(&missing),
        a.merge(&missing, json!({"spec": {"replicas": 1}})),
        a.put(
            &missing,
            json!({"metadata": {"name": "nope"}, "spec": {"replicas": 1}}),
        ),
    ] {
        assert_eq!(
            (r.code, r.body["message"].as_str()),
            (404, Some("deployments.apps \"nope\" not found"))
        );
    }
    assert_eq!(a.get(&format!("{CMS}/x/scale")).code, 404);
}

/// Behaviour 9. Scale writes as `ScaleREST.Update` with
/// `scaleUpdatedObjectInfo` (same file): PATCH (merge, strategic merge,
/// JSON patch) applies to the current Scale, PUT sends one; `ValidateScale`
/// (pkg/apis/autoscaling/validation) refuses negative replicas as
/// `Scale.autoscaling`; a UID precondition is a conflict on
/// `deployments/scale.apps`; the replicas and resourceVersion move into the
/// Deployment, so a stale resourceVersion is the store's 409 and the spec
/// change bumps the generation (an unchanged one writes nothing); the
/// answer is the new Scale, `spec.replicas` omitted at 0 (`omitempty`).
#[test]
fn deployment_scale_writes_as_scale_rest_update() {
    let sim = quiet_sim();
    let a = api(&sim);
    let (path, _) = web_deployment(&sim);
    let scale = format!("{path}/scale");
    let patches = [
        (MERGE, json!({"spec": {"replicas": 5}}), 5),
        (SMP, json!({"spec": {"replicas": 3}}), 3),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]),
            4,
        ),
    ];
    for (i, (ct, body, want)) in patches.into_iter().enumerate() {
        let r = a.patch(&scale, ct, body);
        assert_eq!(
            (r.code, r.body["spec"]["replicas"].as_i64()),
            (200, Some(want)),
            "{ct}: {}",
            r.body
        );
        let now = a.get(&path).body;
        assert_eq!(now["spec"]["replicas"], want);
        assert_eq!(now["metadata"]["generation"], 2 + i as u64);
        assert_eq!(
            r.body["metadata"]["resourceVersion"],
            now["metadata"]["resourceVersion"]
        );
    }
    assert_eq!(sim.count(Some("patch"), Some("deployments/scale")), 3);

    let current = a.get(&scale).body;
    let mut stale = current.clone();
    stale["spec"]["replicas"] = json!(1);
    stale["metadata"]["resourceVersion"] = json!("1");
    let r = a.put(&scale, stale);
    assert_eq!(r.code, 409);
    assert_eq!(r.body["message"], "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again");
    let stale_patch = json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 1}});
    assert_eq!(a.merge(&scale, stale_patch).code, 409);
    let mut fresh = current.clone();
    fresh["spec"]["replicas"] = json!(0);
    let r = a.put(&scale, fresh);
    assert_eq!((r.code, &r.body["spec"]), (200, &json!({})), "{}", r.body);
    assert_eq!(a.get(&path).body["spec"]["replicas"], 0);
    let rv_before = sim.resource_version();
    assert_eq!(a.merge(&scale, json!({"spec": {"replicas": 0}})).code, 200);
    assert_eq!(
        sim.resource_version(),
        rv_before,
        "an unchanged scale writes nothing"
    );

    let r = a.merge(&scale, json!({"spec": {"replicas": -1}}));
    assert_eq!(r.code, 422);
    assert_eq!(r.body["message"], "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0");
    assert_eq!(
        (
            r.body["details"]["group"].as_str(),
            r.body["details"]["kind"].as_str()
        ),
        (Some("autoscaling"), Some("Scale"))
    );
    let r = a.merge(
        &scale,
        json!({"metadata": {"uid": "other"}, "spec": {"replicas": 1}}),
    );
    assert_eq!(r.code, 409);
    assert!(r.body["message"].as_str().unwrap().starts_with(
        "Operation cannot be fulfilled on deployments/scale.apps \"web\": Precondition failed: UID in precondition: other, UID in object meta: "
    ));
}
