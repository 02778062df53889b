//! kubesim against the real kube-apiserver: one test per
//! behaviour the operator relies on, each naming the upstream code it
//! mirrors (kubernetes/kubernetes, apimachinery under
//! staging/src/k8s.io/apimachinery). Over HTTP, as a client sees it.

mod common;

use common::{api, Api, Resp};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

use std::time::{Duration, Instant};

const JSON: &str = "application/json";
const SMP: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META_ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const EVENTS: &str = "/api/v1/namespaces/default/events";

fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn deployment(name: &str, env: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
            {"name": "app", "image": "i:1", "env": env}]}},
    }})
}

fn env_patch(entry: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [entry]}]}}}})
}

/// A cluster whose Deployment controller and garbage collector stay idle
/// (one tick at start, the next an hour later): only the API's own writes.
/// Waits out that first tick, which runs when its thread gets going.
fn quiet_sim() -> Sim {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_secs(3600),
        ..SimConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    sim
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// Behaviour 5. Watch bookmarks: the cacher's bookmark is an empty object of
/// the watched kind with only `metadata.resourceVersion` (apiserver
/// pkg/storage/cacher), sent only with `allowWatchBookmarks=true`, never
/// behind an event already sent, transformed like any event object
/// (handlers/response.go `doTransformObject`), and for `sendInitialEvents`
/// (`validateWatchOptions`, apimachinery meta/internalversion/validation) one
/// bookmark annotated `k8s.io/initial-events-end` after the initial state.
#[test]
fn watch_bookmarks_as_the_cacher_sends_them() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(150),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    a.post(CMS, json!({"metadata": {"name": "before"}}));
    let start = sim.resource_version();
    let writer = create_config_maps_meanwhile(sim.url());
    let (full, plain, partial, initial) = watch_four_ways(&a, start);
    writer.join().unwrap();
    bookmarks_never_lag_behind_events(&full, start);
    bookmarks_only_when_allowed_and_transformed(&plain, &partial);
    initial_events_end_with_one_annotated_bookmark(&initial);
    initial_events_need_not_older_than_and_a_watch(&a);
}

/// Six ConfigMaps, one every 120 ms, through a client of its own.
fn create_config_maps_meanwhile(url: String) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .build()
            .new_agent();
        for i in 0..6 {
            std::thread::sleep(Duration::from_millis(120));
            let body = json!({"metadata": {"name": format!("c{i}")}}).to_string();
            let _ = agent
                .post(&format!("{url}{CMS}"))
                .header("Content-Type", JSON)
                .send(body);
        }
    })
}

/// One second each of watches with bookmarks, without, metadata-only, and
/// with the initial events.
fn watch_four_ways(a: &Api, start: u64) -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>) {
    let q = |extra: &str| format!("resourceVersion={start}{extra}");
    std::thread::scope(|s| {
        let full = s.spawn(|| a.watch_as(CMS, &q("&allowWatchBookmarks=true"), JSON, 1));
        let plain = s.spawn(|| a.watch_as(CMS, &q(""), JSON, 1));
        let partial = s.spawn(|| a.watch_as(CMS, &q("&allowWatchBookmarks=true"), META_ONE, 1));
        let initial = s.spawn(|| {
            a.watch_as(
                CMS,
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                JSON,
                1,
            )
        });
        (
            full.join().unwrap(),
            plain.join().unwrap(),
            partial.join().unwrap(),
            initial.join().unwrap(),
        )
    })
}

fn bookmarks_never_lag_behind_events(full: &[Value], start: u64) {
    let mut highest = 0;
    let mut marks = 0;
    for e in full {
        let o = &e["object"];
        if e["type"] == "BOOKMARK" {
            marks += 1;
            assert_eq!(
                o,
                &json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": o["metadata"]["resourceVersion"]}})
            );
            assert!(
                rv(o) >= highest,
                "bookmark {} behind an event at {highest}",
                rv(o)
            );
        } else {
            highest = highest.max(rv(o));
        }
    }
    assert!(marks >= 1 && highest > start, "{full:?}");
}

fn bookmarks_only_when_allowed_and_transformed(plain: &[Value], partial: &[Value]) {
    // The plain watch saw the writes, so its lack of bookmarks means something.
    assert!(
        plain.iter().any(|e| e["type"] == "ADDED"),
        "the plain watch saw nothing: {plain:?}"
    );
    assert!(
        plain.iter().all(|e| e["type"] != "BOOKMARK"),
        "no bookmarks unless allowed"
    );
    assert!(partial.iter().any(|e| e["type"] == "BOOKMARK"));
    for e in partial {
        assert_eq!(
            (
                e["object"]["kind"].as_str(),
                e["object"]["apiVersion"].as_str()
            ),
            (Some("PartialObjectMetadata"), Some("meta.k8s.io/v1"))
        );
    }
}

fn initial_events_end_with_one_annotated_bookmark(initial: &[Value]) {
    // sendInitialEvents: the state as ADDED, then the one annotated bookmark.
    let end = initial
        .iter()
        .position(|e| {
            e["type"] == "BOOKMARK"
                && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
        })
        .expect("an initial-events-end bookmark");
    assert!(end >= 1 && initial[..end].iter().all(|e| e["type"] == "ADDED"));
    assert_eq!(initial[0]["object"]["metadata"]["name"], "before");
    let end_rv = rv(&initial[end]["object"]);
    assert!(initial[..end].iter().all(|e| rv(&e["object"]) <= end_rv));
    assert_eq!(
        initial
            .iter()
            .filter(|e| !e["object"]["metadata"]["annotations"].is_null())
            .count(),
        1
    );
}

fn initial_events_need_not_older_than_and_a_watch(a: &Api) {
    // ...and only with resourceVersionMatch=NotOlderThan; never on a list.
    let r = a.get(&format!("{CMS}?watch=1&sendInitialEvents=true"));
    assert_eq!(r.code, 422);
    assert_eq!(
        r.body["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let r = a.get(&format!("{CMS}?sendInitialEvents=false"));
    assert_eq!(r.code, 422);
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .ends_with("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"));
}

/// Behaviour 6. Metadata-only lists and watches: `asPartialObjectMetadata`
/// and `asPartialObjectMetadataList` (apiserver pkg/endpoints/handlers/
/// response.go): each item is a whole `PartialObjectMetadata` with its own
/// kind and apiVersion and the full metadata; the list keeps
/// resourceVersion, continue and remainingItemCount; the wrong shape for
/// the request is a 406; a watch transforms each event object, and with
/// `as=PartialObjectMetadataList` that transform fails and the object goes
/// out whole.
#[test]
fn partial_object_metadata_lists_and_watches() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    for n in ["a", "b", "c"] {
        a.post(CMS, json!({"metadata": {"name": n, "labels": {"l": n}, "annotations": {"x": "y"}}, "data": {"k": "v"}}));
    }
    let r = a.get_as(&format!("{CMS}?limit=2"), META_LIST);
    assert_eq!(r.code, 200);
    let l = r.body;
    assert_eq!(
        (l["kind"].as_str(), l["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(
        l["metadata"]["resourceVersion"],
        sim.resource_version().to_string()
    );
    assert_eq!(l["metadata"]["remainingItemCount"], 1);
    let items = l["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let full = a.get(&format!("{CMS}/a")).body;
    assert_eq!(
        items[0],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full["metadata"]})
    );
    let cont = l["metadata"]["continue"].as_str().unwrap();
    let next = a
        .get_as(&format!("{CMS}?limit=2&continue={cont}"), META_LIST)
        .body;
    assert_eq!(next["items"][0]["metadata"]["name"], "c");
    assert!(next["metadata"].get("continue").is_none());
    // One object as metadata; the wrong shape either way is a 406.
    let one = a.get_as(&format!("{CMS}/a"), META_ONE).body;
    assert_eq!(
        one,
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full["metadata"]})
    );
    let r = a.get_as(CMS, META_ONE);
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (406, Some("NotAcceptable"))
    );
    assert_eq!(r.body["message"], "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)");
    let r = a.get_as(&format!("{CMS}/a"), META_LIST);
    assert_eq!(r.code, 406);
    assert_eq!(r.body["message"], "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)");
    // Watches: each event object as PartialObjectMetadata...
    let evs = a.watch_as(CMS, "", META_ONE, 1);
    assert_eq!(evs.len(), 3);
    assert_eq!(
        evs[0]["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full["metadata"]})
    );
    // ...but a list target cannot transform one object: it goes out whole.
    let evs = a.watch_as(CMS, "", META_LIST, 1);
    assert_eq!(evs[0]["object"]["kind"], "ConfigMap");
    assert_eq!(evs[0]["object"]["data"], json!({"k": "v"}));
}

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

/// A watch read line by line: each line with the time it arrived (since
/// `t0`), until `events` non-bookmark events or the end of the stream.
fn timed_watch(
    a: &Api,
    path: &str,
    query: &str,
    events: usize,
    t0: Instant,
) -> Vec<(Duration, Value)> {
    use std::io::{BufRead, BufReader};
    let req = ureq::http::Request::builder()
        .uri(format!("{}{path}?watch=1&timeoutSeconds=3&{query}", a.base))
        .body(())
        .unwrap();
    let resp = a.agent.run(req).unwrap();
    let mut out = Vec::new();
    let mut seen = 0;
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["type"] != "BOOKMARK" {
            seen += 1;
        }
        out.push((t0.elapsed(), v));
        if seen == events {
            break;
        }
    }
    out
}

/// Create ConfigMap `c` with `k: v1`, then set `v2` and `v3`; when each
/// write started (since `t0`).
fn three_configmap_writes(a: &Api, t0: Instant) -> Vec<Duration> {
    let mut started = Vec::new();
    for (i, v) in ["v1", "v2", "v3"].iter().enumerate() {
        started.push(t0.elapsed());
        let r = if i == 0 {
            a.post(CMS, json!({"metadata": {"name": "c"}, "data": {"k": v}}))
        } else {
            a.merge(&format!("{CMS}/c"), json!({"data": {"k": v}}))
        };
        assert!(r.code < 300, "{}", r.body);
    }
    started
}

/// Behaviour 10. A fault, not an upstream rule: watches matching
/// `POST /__sim/watch-lag` (or `Sim::set_watch_lag`) deliver each event only
/// the lag after it happened, in order, with bookmarks (whose
/// resourceVersion the cacher never lets pass an event it has not sent,
/// apiserver pkg/storage/cacher) kept behind the held-back events; other
/// watches are unaffected, and a lag of 0 lifts the rule.
#[test]
fn watch_lag_delays_matching_watches_only() {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_secs(3600),
        bookmark_interval: Duration::from_millis(100),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    let lag = Duration::from_millis(500);
    let r = a.post(
        "/__sim/watch-lag",
        json!({"path": "/configmaps$", "ms": 500}),
    );
    assert_eq!(r.code, 200);
    let from = sim.resource_version();
    let t0 = Instant::now();
    let written = three_configmap_writes(&a, t0);
    let dep_written = t0.elapsed();
    assert_eq!(a.post(DEPLOYS, deployment("d", json!([]))).code, 201);
    let q = format!("resourceVersion={from}&allowWatchBookmarks=true");
    let (cms, deps) = std::thread::scope(|s| {
        let cms = s.spawn(|| timed_watch(&a, CMS, &q, 3, t0));
        let deps = s.spawn(|| timed_watch(&a, DEPLOYS, &q, 1, t0));
        (cms.join().unwrap(), deps.join().unwrap())
    });
    let dep_event = deps.iter().find(|(_, e)| e["type"] == "ADDED").unwrap();
    assert!(
        dep_event.0 - dep_written < lag,
        "deployments lagged: {deps:?}"
    );

    let is_event = |e: &Value| e["type"] != "BOOKMARK";
    let events: Vec<&(Duration, Value)> = cms.iter().filter(|(_, e)| is_event(e)).collect();
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|(_, e)| (text(&e["type"]), text(&e["object"]["data"]["k"])))
        .collect();
    let want = [("ADDED", "v1"), ("MODIFIED", "v2"), ("MODIFIED", "v3")];
    assert_eq!(seen, want.map(|(t, k)| (t.to_string(), k.to_string())));
    for ((at, e), w) in events.iter().zip(&written) {
        assert!(
            *at - *w >= lag,
            "{e} arrived {:?} after its write",
            *at - *w
        );
    }
    // Bookmarks sent while the events are held back stay behind them.
    assert!(!is_event(&cms[0].1), "a bookmark while held back: {cms:?}");
    for (i, (_, mark)) in cms.iter().enumerate().filter(|(_, (_, e))| !is_event(e)) {
        let later = cms[i + 1..].iter().filter(|(_, e)| is_event(e));
        assert!(
            later
                .map(|(_, e)| rv(&e["object"]))
                .all(|r| r > rv(&mark["object"])),
            "{cms:?}"
        );
    }

    sim.set_watch_lag("/configmaps$", Duration::ZERO);
    let from = sim.resource_version();
    let before = t0.elapsed();
    a.merge(&format!("{CMS}/c"), json!({"data": {"k": "v4"}}));
    let got = timed_watch(&a, CMS, &format!("resourceVersion={from}"), 1, t0);
    assert_eq!(got[0].1["object"]["data"]["k"], "v4");
    assert!(got[0].0 - before < lag, "still lagging: {got:?}");
}
