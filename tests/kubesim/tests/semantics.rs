//! kubesim's own tests, over HTTP as a client sees it: discovery, object
//! metadata, list, watch, patches, schemas, auth, faults and garbage
//! collection (the controllers: controllers.rs).

mod common;

use common::{api, Api, Resp};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                    }},
                    "status": {"type": "object", "properties": {"seen": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[test]
fn discovery_follows_crds() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    assert_eq!(a.get("/api").body["versions"], json!(["v1"]));
    assert_eq!(a.get("/version").body["minor"], "32");
    let groups = |a: &Api| -> Vec<String> {
        a.get("/apis").body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(groups(&a).contains(&"apps".to_string()));
    assert!(!groups(&a).contains(&"example.com".to_string()));
    assert_eq!(
        a.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd()
        )
        .code,
        201
    );
    assert!(groups(&a).contains(&"example.com".to_string()));
    let rl = a.get("/apis/example.com/v1").body;
    let w = &rl["resources"][0];
    assert_eq!(
        (w["name"].as_str(), w["namespaced"].as_bool()),
        (Some("widgets"), Some(true))
    );
    assert_eq!(w["shortNames"], json!(["wd"]));
    assert_eq!(w["categories"], json!(["all"]));
    assert_eq!(rl["resources"][1]["name"], "widgets/status");
    let deploys = a.get("/apis/apps/v1").body;
    assert!(deploys["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "deployments/status"));
    let crd_obj = a
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
        .body;
    assert!(crd_obj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True"));
    assert!(a.get("/openapi/v3").body["paths"]["apis/example.com/v1"].is_object());
    assert_eq!(
        a.delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            None
        )
        .code,
        200
    );
    assert!(!groups(&a).contains(&"example.com".to_string()));
    assert_eq!(a.get(WIDGETS).code, 404);
}

/// The structural-schema rules of apiextensions-apiserver
/// (`ValidateStructural`, `ValidateCustomResourceDefinitionOpenAPISchema`)
/// over HTTP: a single-version CRD's errors name `spec.validation`.
#[test]
fn crds_the_real_server_refuses_are_refused() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let refused = |mutate: &dyn Fn(&mut Value)| {
        let mut bad = crd();
        mutate(&mut bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]);
        let r = a.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            bad,
        );
        assert_eq!(r.code, 422, "{}", r.body);
        r.body["message"].as_str().unwrap_or_default().to_string()
    };
    let msg = refused(&|spec| spec["additionalProperties"] = json!(false));
    assert!(msg.contains("spec.validation.openAPIV3Schema.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"), "{msg}");
    // Bounds inside int-or-string branches: what a real server refused in our CRD.
    let msg = refused(&|spec| {
        spec["properties"]["surge"] = json!({"x-kubernetes-int-or-string": true, "anyOf": [
            {"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}]})
    });
    assert!(msg.contains("spec.validation.openAPIV3Schema.properties[spec].properties[surge].anyOf[0].type: Forbidden: must be empty to be structural"), "{msg}");
    assert!(
        msg.contains("properties[surge].anyOf[1].type: Forbidden: must be empty to be structural"),
        "{msg}"
    );
    // The structural form of the same rules is accepted and enforced.
    let mut good = crd();
    good["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["surge"] = json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
               "minimum": 0, "pattern": "^[0-9]+%$"});
    let r = a.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        good,
    );
    assert_eq!(r.code, 201, "{}", r.body);
    let widget = |surge: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"generateName": "w-"}, "spec": {"size": 1, "surge": surge}})
    };
    for ok in [json!(3), json!("25%")] {
        assert_eq!(a.post(WIDGETS, widget(ok)).code, 201);
    }
    for (bad, why) in [
        (json!(-1), "greater than or equal to 0"),
        (json!("x%"), "should match"),
        (json!(true), "integer,string"),
    ] {
        let r = a.post(WIDGETS, widget(bad));
        assert_eq!(r.code, 422);
        assert!(
            r.body["message"].as_str().unwrap_or_default().contains(why),
            "{}",
            r.body
        );
    }
}

#[test]
fn metadata_generation_and_status_subresource() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    a.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd(),
    );
    let w = a.post(WIDGETS, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"seen": 9}})).body;
    assert_eq!(w["metadata"]["generation"], 1);
    assert!(w.get("status").is_none(), "status is ignored on create");
    assert_eq!(w["spec"]["color"], "red", "defaults applied");
    let rv1 = w["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Metadata-only change: new resourceVersion, same generation.
    let w = a
        .merge(
            &format!("{WIDGETS}/w"),
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .body;
    assert_eq!(w["metadata"]["generation"], 1);
    assert_ne!(w["metadata"]["resourceVersion"], rv1.as_str());
    // Spec change bumps generation; status in a main-resource write is ignored.
    let w = a
        .merge(
            &format!("{WIDGETS}/w"),
            json!({"spec": {"size": 2}, "status": {"seen": 1}}),
        )
        .body;
    assert_eq!(w["metadata"]["generation"], 2);
    assert!(w.get("status").is_none());
    // /status takes status only.
    let w = a
        .merge(
            &format!("{WIDGETS}/w/status"),
            json!({"spec": {"size": 99}, "status": {"seen": 1}}),
        )
        .body;
    assert_eq!(w["status"]["seen"], 1);
    assert_eq!(w["spec"]["size"], 2);
    assert_eq!(w["metadata"]["generation"], 2);
    // A write that changes nothing changes nothing.
    let rv = w["metadata"]["resourceVersion"].clone();
    let same = a
        .merge(&format!("{WIDGETS}/w"), json!({"spec": {"size": 2}}))
        .body;
    assert_eq!(same["metadata"]["resourceVersion"], rv);
    // PUT with a stale resourceVersion: 409; custom resources need one at all.
    let mut stale = same.clone();
    stale["metadata"]["resourceVersion"] = json!(rv1);
    stale["spec"]["size"] = json!(5);
    assert_eq!(a.put(&format!("{WIDGETS}/w"), stale.clone()).code, 409);
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(a.put(&format!("{WIDGETS}/w"), stale).code, 422);
    // generateName.
    let g = a
        .post(CMS, json!({"metadata": {"generateName": "gen-"}}))
        .body;
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("gen-"));
    assert_eq!(
        a.post(CMS, json!({"metadata": {"name": g["metadata"]["name"]}}))
            .body["reason"],
        "AlreadyExists"
    );
}

#[test]
fn schema_violations_name_the_field() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    a.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd(),
    );
    let r = a.post(
        WIDGETS,
        json!({"metadata": {"name": "w"}, "spec": {"size": 0, "color": "green"}}),
    );
    assert_eq!(r.code, 422);
    assert_eq!(r.body["reason"], "Invalid");
    let msg = r.body["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.size") && msg.contains("spec.color"),
        "{msg}"
    );
    let mut fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    fields.sort();
    assert_eq!(fields, ["spec.color", "spec.size"]);
    assert_eq!(
        a.post(WIDGETS, json!({"metadata": {"name": "w"}, "spec": {}}))
            .body["details"]["causes"][0]["field"],
        "spec.size"
    );
    // Unknown fields: pruned, a warning under Warn, refused under Strict.
    let r = a.post(
        &format!("{WIDGETS}?fieldValidation=Strict"),
        json!({"metadata": {"name": "s"}, "spec": {"size": 1, "bogus": 1}}),
    );
    assert_eq!(r.code, 400);
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .contains("unknown field \"spec.bogus\""));
    let r = a.post(
        &format!("{WIDGETS}?fieldValidation=Warn"),
        json!({"metadata": {"name": "w1"}, "spec": {"size": 1, "bogus": 1}}),
    );
    assert_eq!(r.code, 201);
    assert!(r.warnings.iter().any(|w| w.contains("spec.bogus")));
    assert!(r.body["spec"].get("bogus").is_none());
}

#[test]
fn patches_and_their_failures() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    a.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd(),
    );
    a.post(
        WIDGETS,
        json!({"metadata": {"name": "w"}, "spec": {"size": 1}}),
    );
    let r = a.patch(
        &format!("{WIDGETS}/w"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"size": 2}}),
    );
    assert_eq!(
        r.code, 415,
        "strategic merge patch is not for custom resources"
    );
    let r = a.merge(
        &format!("{WIDGETS}/w"),
        json!({"metadata": {"resourceVersion": "1"}, "spec": {"size": 2}}),
    );
    assert_eq!(
        r.code, 409,
        "a resourceVersion in a merge patch is a precondition"
    );
    let r = a.patch(&format!("{WIDGETS}/w"), "application/json-patch+json", json!([{"op": "test", "path": "/spec/size", "value": 7}, {"op": "replace", "path": "/spec/size", "value": 3}]));
    assert_eq!(r.code, 422);
    let r = a.patch(&format!("{WIDGETS}/w"), "application/json-patch+json", json!([{"op": "test", "path": "/spec/size", "value": 1}, {"op": "replace", "path": "/spec/size", "value": 3}]));
    assert_eq!(r.body["spec"]["size"], 3);
    assert_eq!(a.merge(&format!("{WIDGETS}/nope"), json!({})).code, 404);
}

#[test]
fn list_selectors_paging_and_representations() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    for (i, tier) in ["fe", "be", "fe"].iter().enumerate() {
        a.post(CMS, json!({"metadata": {"name": format!("c{i}"), "labels": {"tier": tier}}, "data": {"k": "v"}}));
    }
    let names = |r: Resp| -> Vec<String> {
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(a.get(&format!("{CMS}?labelSelector=tier%3Dfe"))),
        ["c0", "c2"]
    );
    assert_eq!(
        names(a.get(&format!("{CMS}?labelSelector=tier+notin+(fe)"))),
        ["c1"]
    );
    assert_eq!(
        names(a.get(&format!("{CMS}?fieldSelector=metadata.name%3Dc1"))),
        ["c1"]
    );
    assert_eq!(a.get(&format!("{CMS}?fieldSelector=data.k%3Dv")).code, 400);
    let p1 = a.get(&format!("{CMS}?limit=2")).body;
    assert_eq!(p1["items"].as_array().unwrap().len(), 2);
    let cont = p1["metadata"]["continue"].as_str().unwrap();
    assert_eq!(
        names(a.get(&format!("{CMS}?limit=2&continue={cont}"))),
        ["c2"]
    );
    assert_eq!(
        names(a.get("/api/v1/configmaps")).len(),
        3,
        "all namespaces"
    );
    let t = a
        .get_as(
            CMS,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body;
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"][1]["name"], "Data");
    assert_eq!(t["rows"][0]["cells"][1], 1);
    let m = a
        .get_as(
            CMS,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body;
    assert_eq!(m["items"][0]["kind"], "PartialObjectMetadata");
    assert!(m["items"][0].get("data").is_none());
}

#[test]
fn watch_replays_translates_selectors_bookmarks_and_expires() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(200),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    let rv = a.get(CMS).body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    a.post(
        CMS,
        json!({"metadata": {"name": "w", "labels": {"on": "yes"}}}),
    );
    a.merge(
        &format!("{CMS}/w"),
        json!({"metadata": {"labels": {"on": "no"}}}),
    );
    a.merge(
        &format!("{CMS}/w"),
        json!({"metadata": {"labels": {"on": "yes"}}}),
    );
    a.delete(&format!("{CMS}/w"), None);
    let evs = a.watch(
        CMS,
        &format!("resourceVersion={rv}&labelSelector=on%3Dyes&allowWatchBookmarks=true"),
        1,
    );
    let types: Vec<&str> = evs
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| *t != "BOOKMARK")
        .collect();
    // Leaving the selector is a DELETED, entering it an ADDED.
    assert_eq!(types, ["ADDED", "DELETED", "ADDED", "DELETED"]);
    // `cacheWatcher.convertToWatchEvent`: the DELETED of an object leaving
    // the selector carries its previous state, at the new resourceVersion.
    let left = evs.iter().find(|e| e["type"] == "DELETED").unwrap();
    assert_eq!(left["object"]["metadata"]["labels"]["on"], "yes");
    let added_rv = &evs[0]["object"]["metadata"]["resourceVersion"];
    let rv_of = |v: &Value| v.as_str().unwrap().parse::<u64>().unwrap();
    assert!(rv_of(&left["object"]["metadata"]["resourceVersion"]) > rv_of(added_rv));
    assert!(
        evs.iter()
            .any(|e| e["type"] == "BOOKMARK"
                && e["object"]["metadata"]["resourceVersion"].is_string())
    );
    // Without a resourceVersion: the current state first.
    a.post(CMS, json!({"metadata": {"name": "x"}}));
    let evs = a.watch(CMS, "", 1);
    assert_eq!(evs[0]["type"], "ADDED");
    assert_eq!(evs[0]["object"]["metadata"]["name"], "x");
    // Older than the retained history: the watch cache answers 200 and one
    // ERROR event with the 410 Status (`Cacher.Watch`, `newErrWatcher`).
    sim.compact();
    let evs = a.watch(CMS, &format!("resourceVersion={rv}"), 5);
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0]["type"], "ERROR");
    let status = &evs[0]["object"];
    assert_eq!(
        (&status["code"], &status["reason"]),
        (&json!(410), &json!("Expired"))
    );
    let msg = status["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("too old resource version: {rv} (")),
        "{msg}"
    );
}

/// etcd3 store's `GetList`: every page of a paged list is read at the first
/// page's revision, so objects created, changed or deleted meanwhile do not
/// show on later pages.
#[test]
fn a_paged_list_is_a_snapshot_at_its_first_page() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    for name in ["a", "c", "e"] {
        a.post(CMS, json!({"metadata": {"name": name}, "data": {"v": "1"}}));
    }
    let first = a.get(&format!("{CMS}?limit=1")).body;
    assert_eq!(first["items"][0]["metadata"]["name"], "a");
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    a.post(CMS, json!({"metadata": {"name": "b"}}));
    a.merge(&format!("{CMS}/c"), json!({"data": {"v": "2"}}));
    a.delete(&format!("{CMS}/e"), None);
    let rest = a.get(&format!("{CMS}?limit=10&continue={token}")).body;
    let seen: Vec<(&str, &str)> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let name = o["metadata"]["name"].as_str().unwrap();
            (name, o["data"]["v"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(seen, [("c", "1"), ("e", "1")]);
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    // Once that revision is compacted away, the token is too old.
    sim.compact();
    let r = a.get(&format!("{CMS}?limit=10&continue={token}"));
    assert_eq!((r.code, r.body["reason"].as_str()), (410, Some("Expired")));
}

/// The history is kept by time, as the API server's etcd compaction every
/// 5 minutes keeps it, within a bound of events and bytes: a burst of
/// writes far past the old 10,000-event cap leaves a recent
/// resourceVersion watchable and a paged list continuable.
#[test]
fn history_is_kept_by_time_within_its_bounds() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    a.post(CMS, json!({"metadata": {"name": "a"}}));
    a.post(CMS, json!({"metadata": {"name": "b"}}));
    let first = a.get(&format!("{CMS}?limit=1")).body;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let filler = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "filler"}, "data": {"n": "0"}});
    sim.create(filler).unwrap();
    for i in 0..12_000 {
        let patch = json!({"data": {"n": i.to_string()}});
        sim.merge_patch("v1", "ConfigMap", "default", "filler", &patch)
            .unwrap();
    }
    let r = a.get(&format!("{CMS}?limit=10&continue={token}"));
    assert_eq!(r.code, 200, "{}", r.body);
    let evs = a.watch(
        CMS,
        &format!("resourceVersion={rv}&fieldSelector=metadata.name%3Db"),
        1,
    );
    assert!(
        evs.iter().all(|e| e["type"] != "ERROR"),
        "{:?}",
        evs.first()
    );

    // A small window, bytes or count bound expires what is past it.
    let small = |cfg: SimConfig| {
        let sim = Sim::start(cfg).unwrap();
        let a = api(&sim);
        let rv = a.get(CMS).body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        for i in 0..50 {
            a.post(
                CMS,
                json!({"metadata": {"name": format!("c{i}")}, "data": {"x": "y".repeat(100)}}),
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        a.post(CMS, json!({"metadata": {"name": "last"}}));
        let evs = a.watch(CMS, &format!("resourceVersion={rv}"), 1);
        evs.first().map(|e| e["type"] == "ERROR").unwrap_or(false)
    };
    let by_time = SimConfig {
        history_window: Duration::from_millis(200),
        ..SimConfig::default()
    };
    let by_bytes = SimConfig {
        history_bytes: 4096,
        ..SimConfig::default()
    };
    let by_count = SimConfig {
        history: 10,
        ..SimConfig::default()
    };
    assert!(small(by_time) && small(by_bytes) && small(by_count));
    assert!(!small(SimConfig::default()));
}

#[test]
fn finalizers_hold_deletion_and_gc_follows_owners() {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .unwrap();
    let a = api(&sim);
    let owner = a
        .post(
            CMS,
            json!({"metadata": {"name": "owner", "finalizers": ["example.com/hold"]}}),
        )
        .body;
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    a.post(CMS, json!({"metadata": {"name": "dep", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": true}]}}));
    let r = a.delete(
        &format!("{CMS}/owner"),
        Some(json!({"preconditions": {"uid": "wrong"}})),
    );
    assert_eq!(r.code, 409);
    let r = a.delete(&format!("{CMS}/owner"), None);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    let r = a.merge(
        &format!("{CMS}/owner"),
        json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}),
    );
    assert_eq!(r.code, 422, "no new finalizer once deleting");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(a.get(&format!("{CMS}/dep")).code, 200, "owner still there");
    a.merge(
        &format!("{CMS}/owner"),
        json!({"metadata": {"finalizers": null}}),
    );
    assert_eq!(a.get(&format!("{CMS}/owner")).code, 404);
    let t = Instant::now();
    while a.get(&format!("{CMS}/dep")).code == 200 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "dependent not collected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn auth_and_faults() {
    let sim = Sim::start(SimConfig {
        tokens: Some(vec!["t1".into()]),
        ..SimConfig::default()
    })
    .unwrap();
    let mut a = api(&sim);
    assert_eq!(a.get(CMS).code, 401);
    assert_eq!(a.get("/version").code, 200, "version is public");
    a.token = Some("t1".into());
    assert_eq!(a.get(CMS).code, 200);
    sim.set_tokens(Some(vec!["t2".into()]));
    assert_eq!(a.get(CMS).code, 401);
    sim.set_tokens(None);
    sim.fail_next(Some("GET"), "/configmaps$", 429, 1, Some(3));
    let r = a.get(CMS);
    assert_eq!(
        (r.code, r.body["details"]["retryAfterSeconds"].as_u64()),
        (429, Some(3))
    );
    assert_eq!(a.get(CMS).code, 200, "only the next one");
    // 401, 200, 401, 429, 200: every attempt is counted, with its code.
    assert_eq!(sim.count(Some("list"), Some("configmaps")), 5);
    // Control endpoint: same faults over HTTP.
    let r = a.post(
        "/__sim/fail",
        json!({"method": "POST", "path": "/configmaps$", "code": 503, "count": 1}),
    );
    assert_eq!(r.code, 200);
    assert_eq!(a.post(CMS, json!({"metadata": {"name": "x"}})).code, 503);
    assert_eq!(a.post(CMS, json!({"metadata": {"name": "x"}})).code, 201);
    assert!(a
        .get("/__sim/requests")
        .body
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["status"] == 503));
    // A pause refuses connections and keeps state.
    sim.pause(Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(100));
    assert!(std::net::TcpStream::connect(sim.addr()).is_err());
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(a.get(&format!("{CMS}/x")).code, 200);
}
