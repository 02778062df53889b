//! kubesim against the real kube-apiserver: one test per
//! behaviour the operator relies on, each naming the upstream code it
//! mirrors (kubernetes/kubernetes, apimachinery under
//! staging/src/k8s.io/apimachinery). Over HTTP, as a client sees it.

mod common;

use common::*;
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

use std::time::Duration;

fn env_patch(entry: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [entry]}]}}}})
}

/// Behaviour 1. apimachinery `strategicpatch` (`mergeMap`, `mergeSlice`,
/// `normalizeElementOrder`/`mergeSortedSlice` in pkg/util/strategicpatch/
/// patch.go) applied to `env`, then the typed round trip (`EnvVar.value` is
/// `omitempty`) and `validateEnvVarValueFrom` (pkg/apis/core/validation/
/// validation.go): `value: null` beside a `valueFrom` switches an entry to the
/// ConfigMap, `valueFrom: null` beside `value: ""` switches it back (and the
/// empty value is not stored); a `valueFrom` landing on an entry that keeps
/// its `value` is a 422; an entry new to the list goes ahead of the entries
/// the patch does not name.
#[test]
fn smp_env_value_and_value_from_switch_as_upstream() {
    let sim = quiet_sim();
    let a = api(&sim);
    let env = json!([{"name": "LOG", "value": "info"}, {"name": "P", "value": "old"}]);
    assert_eq!(a.post(DEPLOYS, deployment("d", env)).code, 201);
    let path = format!("{DEPLOYS}/d");
    let cm_ref = json!({"configMapKeyRef": {"name": "cm", "key": "P"}});
    env_switches_between_value_and_value_from(&a, &path, &cm_ref);
    env_with_two_sources_or_none_is_refused(&a, &path, &cm_ref);
    env_entries_new_to_the_list_and_element_order(&a, &path, &cm_ref);
}

/// `SetDefaults_ObjectFieldSelector` (pkg/apis/core/v1/defaults.go): a
/// fieldRef without apiVersion is stored with v1, as the real server stores
/// the operator's own Deployment (which writes it, so that Helm's
/// server-side apply over a kustomize install finds the same value).
#[test]
fn a_field_refs_api_version_defaults_to_v1() {
    let sim = quiet_sim();
    let a = api(&sim);
    let env = json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    let r = a.post(DEPLOYS, deployment("f", env));
    assert_eq!(r.code, 201);
    assert_eq!(
        env_of(&r)[0]["valueFrom"]["fieldRef"],
        json!({"apiVersion": "v1", "fieldPath": "metadata.name"})
    );
}

fn env_of(r: &Resp) -> Value {
    r.body["spec"]["template"]["spec"]["containers"][0]["env"].clone()
}

fn env_names(r: &Resp) -> Vec<Value> {
    env_of(r)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect()
}

/// `value: null` beside a `valueFrom` switches P to the ConfigMap;
/// `valueFrom: null` beside `value: ""` switches it back.
fn env_switches_between_value_and_value_from(a: &Api, path: &str, cm_ref: &Value) {
    let r = a.patch(
        path,
        SMP,
        env_patch(json!({"name": "P", "value": null, "valueFrom": cm_ref})),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(
        env_of(&r),
        json!([{"name": "LOG", "value": "info"}, {"name": "P", "valueFrom": cm_ref}])
    );

    let r = a.patch(
        path,
        SMP,
        env_patch(json!({"name": "P", "value": "", "valueFrom": null})),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(
        env_of(&r),
        json!([{"name": "LOG", "value": "info"}, {"name": "P"}])
    );
}

/// A `valueFrom` on an entry that keeps its value, two sources, no source.
fn env_with_two_sources_or_none_is_refused(a: &Api, path: &str, cm_ref: &Value) {
    // valueFrom onto an entry that keeps a value: both, refused.
    let r = a.patch(
        path,
        SMP,
        env_patch(json!({"name": "LOG", "valueFrom": cm_ref})),
    );
    assert_eq!(r.code, 422);
    assert_eq!(
        r.body["message"],
        "Deployment.apps \"d\" is invalid: spec.template.spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"
    );
    assert_eq!(
        r.body["details"]["causes"][0],
        json!({"reason": "FieldValueInvalid", "field": "spec.template.spec.containers[0].env[0].valueFrom",
               "message": "Invalid value: \"\": may not be specified when `value` is not empty"})
    );
    // Two sources, no value; no source at all.
    let two = json!({"name": "P", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "P"}, "secretKeyRef": {"name": "s", "key": "k"}}});
    let r = a.patch(path, SMP, env_patch(two));
    assert_eq!(r.code, 422);
    assert!(r.body["message"].as_str().unwrap().ends_with(
        "env[1].valueFrom: Invalid value: \"\": may not have more than one field specified at a time"
    ));
    let r = a.patch(path, SMP, env_patch(json!({"name": "P", "valueFrom": {}})));
    assert_eq!(r.code, 422);
    assert!(r.body["message"].as_str().unwrap().ends_with(
        "env[1].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
    ));
}

fn env_entries_new_to_the_list_and_element_order(a: &Api, path: &str, cm_ref: &Value) {
    // An entry new to the list lands before the ones the patch leaves alone.
    let r = a.patch(
        path,
        SMP,
        env_patch(json!({"name": "NEW", "valueFrom": cm_ref})),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(env_names(&r), [json!("NEW"), json!("LOG"), json!("P")]);
    // $setElementOrder (what kubectl apply sends) puts them in its order.
    let ordered = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
        "$setElementOrder/env": [{"name": "LOG"}, {"name": "P"}, {"name": "NEW"}],
        "env": [{"name": "P", "value": "x"}]}]}}}});
    let r = a.patch(path, SMP, ordered);
    assert_eq!(env_names(&r), [json!("LOG"), json!("P"), json!("NEW")]);
}

fn widget_crd(name: &str, plural: &str, kind: &str, status: bool) -> Value {
    let mut v = json!({
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            "status": {"type": "object", "properties": {"seen": {"type": "integer"}}},
        }}},
    });
    if status {
        v["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                 "versions": [v]},
    })
}

/// Behaviour 2. resourceVersion and generation: deployment strategy
/// `PrepareForUpdate` (pkg/registry/apps/deployment/strategy.go: spec *or
/// annotations* bump generation; `deploymentStatusStrategy` resets only
/// spec and labels), customresource strategy `PrepareForUpdate` and
/// `statusStrategy.PrepareForUpdate` (apiextensions-apiserver
/// pkg/registry/customresource/strategy.go, status_strategy.go: anything
/// outside metadata bumps generation; the main resource keeps the stored
/// status, /status keeps everything else), and `GuaranteedUpdate`'s no-op
/// short cut (no new resourceVersion, no watch event).
#[test]
fn generation_and_resource_version_follow_the_registry_strategies() {
    let sim = quiet_sim();
    let a = api(&sim);
    let d = a.post(DEPLOYS, deployment("g", json!([]))).body;
    assert_eq!(d["metadata"]["generation"], 1);
    let path = format!("{DEPLOYS}/g");
    deployment_generation_follows_metadata_and_spec(&a, &path, &d);
    deployment_status_keeps_its_annotations_only(&a, &path);
    writes_that_change_nothing_are_no_ops(&sim, &a, &path);
    // The start of a delete held by a finalizer bumps it once
    // (`markAsDeleting`); a second delete changes nothing.
    let r = a.delete(&path, None);
    assert_eq!(r.body["metadata"]["generation"], 4);
    assert_eq!(a.delete(&path, None).body["metadata"]["generation"], 4);

    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    custom_resource_with_a_status_subresource(&a, crds);
    custom_resource_without_a_status_subresource(&a, crds);
}

fn generation(a: &Api, path: &str) -> i64 {
    a.get(path).body["metadata"]["generation"].as_i64().unwrap()
}

fn deployment_generation_follows_metadata_and_spec(a: &Api, path: &str, d: &Value) {
    // Labels and finalizers: new resourceVersion, same generation.
    let r = a.patch(
        path,
        MERGE,
        json!({"metadata": {"labels": {"x": "1"}, "finalizers": ["example.com/f"]}}),
    );
    assert!(rv(&r.body) > rv(d));
    assert_eq!(generation(a, path), 1, "{}", r.body["metadata"]);
    // Annotations of a Deployment: a new generation.
    a.patch(
        path,
        MERGE,
        json!({"metadata": {"annotations": {"a": "1"}}}),
    );
    assert_eq!(generation(a, path), 2);
    // Spec: a new generation.
    a.patch(path, MERGE, json!({"spec": {"replicas": 2}}));
    assert_eq!(generation(a, path), 3);
}

fn deployment_status_keeps_its_annotations_only(a: &Api, path: &str) {
    // /status: its annotations are kept, spec and labels are not; no new generation.
    let mut s = a.get(path).body;
    s["status"] = json!({"observedGeneration": 3});
    s["spec"]["replicas"] = json!(9);
    s["metadata"]["labels"] = json!({"x": "changed"});
    s["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("1");
    let r = a.put(&format!("{path}/status"), s);
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["metadata"]["generation"], 3);
    assert_eq!(r.body["spec"]["replicas"], 2);
    assert_eq!(r.body["metadata"]["labels"], json!({"x": "1"}));
    assert_eq!(
        r.body["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(r.body["status"]["observedGeneration"], 3);
}

fn writes_that_change_nothing_are_no_ops(sim: &Sim, a: &Api, path: &str) {
    // A write that changes nothing: same resourceVersion, no event.
    let before = a.get(path).body;
    let r = a.put(path, before.clone());
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let r = a.patch(path, MERGE, json!({"metadata": {"labels": {"x": "1"}}}));
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(sim.resource_version(), rv(&before));
    let evs = a.watch_as(
        DEPLOYS,
        &format!("resourceVersion={}", rv(&before)),
        JSON,
        1,
    );
    assert!(evs.is_empty(), "{evs:?}");
}

fn custom_resource_with_a_status_subresource(a: &Api, crds: &str) {
    assert_eq!(
        a.post(
            crds,
            widget_crd("widgets.example.com", "widgets", "Widget", true)
        )
        .code,
        201
    );
    let ws = "/apis/example.com/v1/namespaces/default/widgets";
    let w = a
        .post(
            ws,
            json!({"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"seen": 5}}),
        )
        .body;
    assert!(w.get("status").is_none(), "create drops status");
    let wp = format!("{ws}/w");
    let r = a.patch(&wp, MERGE, json!({"status": {"seen": 1}}));
    assert_eq!(
        r.body["metadata"]["resourceVersion"], w["metadata"]["resourceVersion"],
        "status ignored: a no-op"
    );
    let r = a.patch(&wp, MERGE, json!({"metadata": {"annotations": {"a": "1"}}}));
    assert_eq!(r.body["metadata"]["generation"], 1, "metadata only");
    let r = a.patch(
        &format!("{wp}/status"),
        MERGE,
        json!({"spec": {"size": 7}, "metadata": {"labels": {"l": "1"}}, "status": {"seen": 2}}),
    );
    assert_eq!(r.body["spec"]["size"], 1);
    assert!(r.body["metadata"].get("labels").is_none());
    assert_eq!(
        (
            r.body["status"]["seen"].as_i64(),
            r.body["metadata"]["generation"].as_i64()
        ),
        (Some(2), Some(1))
    );
    let r = a.patch(&wp, MERGE, json!({"spec": {"size": 2}}));
    assert_eq!(
        (
            r.body["metadata"]["generation"].as_i64(),
            r.body["status"]["seen"].as_i64()
        ),
        (Some(2), Some(2))
    );
}

fn custom_resource_without_a_status_subresource(a: &Api, crds: &str) {
    // Without a status subresource, status is content like any other.
    assert_eq!(
        a.post(
            crds,
            widget_crd("gadgets.example.com", "gadgets", "Gadget", false)
        )
        .code,
        201
    );
    let gs = "/apis/example.com/v1/namespaces/default/gadgets";
    a.post(gs, json!({"metadata": {"name": "g"}, "spec": {"size": 1}}));
    let r = a.patch(&format!("{gs}/g"), MERGE, json!({"status": {"seen": 1}}));
    assert_eq!(
        (
            r.body["metadata"]["generation"].as_i64(),
            r.body["status"]["seen"].as_i64()
        ),
        (Some(2), Some(1))
    );
}

/// Behaviour 3. Delete: the generic registry's `Store.Delete`,
/// `updateForGracefulDeletionAndFinalizers`, `markAsDeleting`,
/// `deletionFinalizersForGarbageCollection` and `finalizeDelete`
/// (apiserver pkg/registry/generic/registry/store.go), `rest.BeforeDelete`
/// (pkg/registry/rest/delete.go) for preconditions, `ValidateDeleteOptions`
/// (apimachinery pkg/apis/meta/v1/validation) for `propagationPolicy`,
/// `ValidateNoNewFinalizers` (apimachinery pkg/api/validation/objectmeta.go),
/// and the garbage collector's background, orphan and foreground handling
/// (pkg/controller/garbagecollector).
#[test]
fn delete_finalizers_owner_references_and_propagation() {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    finalizers_hold_a_deleted_object(&a);
    a_delete_that_removes_answers_a_status(&a);
    delete_options_and_preconditions_are_checked(&a);
    dependents_follow_the_propagation_policy(&a);
}

/// Create ConfigMap `name` with metadata `meta`.
fn cm(a: &Api, name: &str, meta: Value) -> Value {
    let mut m = meta;
    m["name"] = json!(name);
    let r = a.post(CMS, json!({"metadata": m}));
    assert_eq!(r.code, 201, "{}", r.body);
    r.body
}

/// Metadata naming ConfigMap `o` as the controlling owner.
fn owned_by(o: &Value, block: bool) -> Value {
    json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
           "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": block}]})
}

fn finalizers_hold_a_deleted_object(a: &Api) {
    // Finalizers hold the object: deletionTimestamp, grace period 0.
    cm(a, "held", json!({"finalizers": ["example.com/a"]}));
    let r = a.delete(&format!("{CMS}/held"), None);
    assert_eq!(r.code, 200);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 0);
    let again = a.delete(&format!("{CMS}/held"), None);
    assert_eq!(
        again.body["metadata"]["resourceVersion"], r.body["metadata"]["resourceVersion"],
        "a second delete changes nothing"
    );
    let r = a.patch(
        &format!("{CMS}/held"),
        MERGE,
        json!({"metadata": {"finalizers": ["example.com/a", "example.com/z", "example.com/b"]}}),
    );
    assert_eq!(r.code, 422);
    assert_eq!(
        r.body["message"],
        "ConfigMap \"held\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\", \"example.com/z\"}"
    );
    a.patch(
        &format!("{CMS}/held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
    );
    assert_eq!(
        a.get(&format!("{CMS}/held")).code,
        404,
        "the last finalizer gone, the object goes"
    );
}

fn a_delete_that_removes_answers_a_status(a: &Api) {
    // Gone at once: a Status, not the object.
    let gone = cm(a, "gone", json!({}));
    let r = a.delete(
        &format!("{CMS}/gone"),
        Some(
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}),
        ),
    );
    assert_eq!(r.code, 200);
    assert_eq!(
        r.body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "gone", "kind": "configmaps", "uid": gone["metadata"]["uid"]}})
    );
}

fn delete_options_and_preconditions_are_checked(a: &Api) {
    // DeleteOptions and preconditions, refused as the real server words it.
    let x = cm(a, "x", json!({}));
    let r = a.delete(
        &format!("{CMS}/x"),
        Some(json!({"propagationPolicy": "Later"})),
    );
    assert_eq!(r.code, 422);
    assert_eq!(
        r.body["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Later\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    let r = a.delete(
        &format!("{CMS}/x"),
        Some(json!({"propagationPolicy": "Orphan", "orphanDependents": true})),
    );
    assert_eq!(r.code, 422);
    assert!(r.body["message"].as_str().unwrap().ends_with("propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set"));
    let r = a.delete(
        &format!("{CMS}/x"),
        Some(json!({"preconditions": {"resourceVersion": "1"}})),
    );
    assert_eq!(r.code, 409);
    assert_eq!(
        r.body["message"],
        format!("Operation cannot be fulfilled on ConfigMap \"x\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({}). The object might have been modified", rv(&x))
    );
}

/// Background, orphan and foreground deletion of an owner.
fn dependents_follow_the_propagation_policy(a: &Api) {
    // Background (the operator's policy): the dependent follows its owner.
    let owner = cm(a, "bg-owner", json!({}));
    cm(a, "bg-dep", owned_by(&owner, true));
    a.delete(
        &format!("{CMS}/bg-owner"),
        Some(json!({"propagationPolicy": "Background"})),
    );
    wait_for("background GC", || {
        a.get(&format!("{CMS}/bg-dep")).code == 404
    });

    // Orphan: the owner waits on the `orphan` finalizer, the dependent stays
    // without the reference.
    let owner = cm(a, "or-owner", json!({}));
    cm(a, "or-dep", owned_by(&owner, true));
    let r = a.delete(
        &format!("{CMS}/or-owner"),
        Some(json!({"propagationPolicy": "Orphan"})),
    );
    assert_eq!(r.body["metadata"]["finalizers"], json!(["orphan"]));
    wait_for("orphaning", || {
        a.get(&format!("{CMS}/or-owner")).code == 404
    });
    let dep = a.get(&format!("{CMS}/or-dep"));
    assert_eq!(dep.code, 200);
    assert!(
        dep.body["metadata"].get("ownerReferences").is_none(),
        "{}",
        dep.body
    );

    // Foreground: the owner waits on `foregroundDeletion` until its blocking
    // dependents are gone.
    let owner = cm(a, "fg-owner", json!({}));
    cm(a, "fg-dep", owned_by(&owner, true));
    let r = a.delete(
        &format!("{CMS}/fg-owner"),
        Some(json!({"propagationPolicy": "Foreground"})),
    );
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    wait_for("foreground GC", || {
        a.get(&format!("{CMS}/fg-dep")).code == 404 && a.get(&format!("{CMS}/fg-owner")).code == 404
    });
}

fn event(name: &str, ns: &str, involved_ns: Option<&str>) -> Value {
    let mut io = json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u"});
    if let Some(n) = involved_ns {
        io["namespace"] = json!(n);
    }
    json!({"metadata": {"name": name, "namespace": ns}, "involvedObject": io, "reason": "R", "message": "m",
           "type": "Normal", "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
           "count": 1, "source": {"component": "c"}, "reportingComponent": "c", "reportingInstance": "i"})
}

/// Behaviour 4. core/v1 Events: `ValidateEventCreate` and
/// `legacyValidateEvent` (pkg/apis/core/validation/events.go). For a core/v1
/// request only the legacy rules apply: without `eventTime` the
/// involvedObject's namespace must be the event's (or, empty, the event must
/// be in "default"); with `eventTime` also reportingComponent (the core/v1
/// name of reportingController), reportingInstance, action and reason are
/// required. `type`, `count` and the timestamps are not checked for core/v1,
/// and the event name is only a path segment.
#[test]
fn core_v1_event_validation() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    a.post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}));
    // The operator's shape.
    assert_eq!(
        a.post(EVENTS, event("w.1", "default", Some("default")))
            .code,
        201
    );
    let r = a.post(EVENTS, event("w.2", "default", Some("team")));
    assert_eq!(r.code, 422);
    assert_eq!(
        r.body["message"],
        "Event \"w.2\" is invalid: involvedObject.namespace: Invalid value: \"team\": does not match event.namespace"
    );
    // No involvedObject namespace: only "default" (or none) will do.
    assert_eq!(a.post(EVENTS, event("w.3", "default", None)).code, 201);
    let r = a.post("/api/v1/namespaces/team/events", event("w.4", "team", None));
    assert_eq!(r.code, 422);
    assert!(r.body["message"].as_str().unwrap().ends_with(
        "involvedObject.namespace: Invalid value: \"\": does not match event.namespace"
    ));
    // Not checked for core/v1: type, count, timestamps, no involvedObject, name case.
    let mut loose = event("W.Upper", "default", Some("default"));
    loose["type"] = json!("Odd");
    loose["count"] = json!(-3);
    loose.as_object_mut().unwrap().remove("firstTimestamp");
    assert_eq!(a.post(EVENTS, loose).code, 201);
    assert_eq!(
        a.post(EVENTS, json!({"metadata": {"name": "bare"}})).code,
        201
    );
    // With eventTime: the reporting fields are required.
    let mut new_style = event("w.5", "default", Some("default"));
    new_style["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
    let r = a.post(EVENTS, new_style.clone());
    assert_eq!(r.code, 422);
    let fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["action"], "{}", r.body);
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .ends_with("action: Required value"));
    new_style["action"] = json!("Reconciling");
    new_style["reportingComponent"] = json!("");
    new_style["reason"] = json!("x".repeat(129));
    let r = a.post(EVENTS, new_style);
    let fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "reportingComponent",
            "reportingComponent",
            "reportingComponent",
            "reason"
        ],
        "{}",
        r.body
    );
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .contains("reason: Invalid value: \"\": can have at most 128 characters"));
}
