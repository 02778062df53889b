//! kubesim against the real kube-apiserver, its watches: bookmarks as the
//! watch cache sends them, metadata-only lists and watches, and watch lag,
//! each naming the upstream code it mirrors. Over HTTP, as a client sees it.

mod common;

use common::*;
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

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
