//! The raw-HTTP client against a local server on 127.0.0.1: the simulated
//! API server for API behaviour, a bare tiny_http server for the misbehaving
//! answers no API server gives (redirects).

use kubesim::{Sim, SimConfig};
use openmed_operator::backoff::Backoff;
use openmed_operator::kube::path::{CONFIG_MAPS, NAMESPACES};
use openmed_operator::kube::{
    Client, ClientConfig, Endpoint, EndpointOptions, Error, ListParams, PatchType, Preconditions,
    ResourcePath, Retry, WatchEvent, WatchParams,
};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("omo-client-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fast() -> ClientConfig {
    ClientConfig {
        backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(50)),
        request_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

fn client(url: &str, token: Option<PathBuf>, ca: Option<PathBuf>, cfg: ClientConfig) -> Client {
    let opts = EndpointOptions {
        server: Some(url.to_string()),
        token_file: token,
        ca_file: ca,
        ..Default::default()
    };
    let ep = Endpoint::resolve(&opts, &|_| None).unwrap();
    Client::new(ep, cfg).unwrap()
}

fn cm(ns: &str, name: &str) -> ResourcePath {
    ResourcePath::object(CONFIG_MAPS, Some(ns), name).unwrap()
}

fn cms(ns: &str) -> ResourcePath {
    ResourcePath::collection(CONFIG_MAPS, Some(ns)).unwrap()
}

#[test]
fn crud_and_typed_errors() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    let created = c
        .create(&cms("default"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}))
        .unwrap();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let e = c
        .create(&cms("default"), &json!({"metadata": {"name": "a"}}))
        .unwrap_err();
    assert!(e.is_already_exists(), "{e}");
    assert!(c.get(&cm("default", "missing")).unwrap_err().is_not_found());

    for (kind, body) in [
        (PatchType::Merge, json!({"data": {"m": "1"}})),
        (PatchType::Strategic, json!({"data": {"s": "1"}})),
        (
            PatchType::Json,
            json!([{"op": "add", "path": "/data/j", "value": "1"}]),
        ),
    ] {
        c.patch(&cm("default", "a"), kind, &body, Retry::Write)
            .unwrap();
    }
    let got = c.get(&cm("default", "a")).unwrap();
    assert_eq!(got["data"], json!({"k": "v", "m": "1", "s": "1", "j": "1"}));
    let stale = json!({"metadata": {"resourceVersion": rv}, "data": {"k": "w"}});
    assert!(c
        .patch(&cm("default", "a"), PatchType::Merge, &stale, Retry::Write)
        .unwrap_err()
        .is_conflict());

    let pre = Preconditions {
        uid: Some("not-the-uid".into()),
        resource_version: None,
    };
    assert!(c
        .delete(&cm("default", "a"), Some(&pre))
        .unwrap_err()
        .is_conflict());
    let pre = Preconditions {
        uid: got["metadata"]["uid"].as_str().map(str::to_string),
        resource_version: None,
    };
    c.delete(&cm("default", "a"), Some(&pre)).unwrap();
    assert!(c.get(&cm("default", "a")).unwrap_err().is_not_found());

    // What went over the wire: our User-Agent, the three patch content types.
    let log = sim.requests();
    assert!(log
        .iter()
        .all(|r| r.user_agent == format!("openmed-operator/{}", env!("CARGO_PKG_VERSION"))));
    let types: Vec<&str> = log
        .iter()
        .filter(|r| r.verb == "patch")
        .map(|r| r.content_type.as_str())
        .collect();
    assert!(types.contains(&"application/merge-patch+json"));
    assert!(types.contains(&"application/strategic-merge-patch+json"));
    assert!(types.contains(&"application/json-patch+json"));
}

/// A simulator holding ConfigMaps c0..c{n-1} (labelled `even`), and a
/// client that lists `page_size` at a time.
fn paged(page_size: u32, n: usize) -> (Sim, Client) {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let mut cfg = fast();
    cfg.page_size = page_size;
    let c = client(&sim.url(), None, None, cfg);
    for i in 0..n {
        let even = (i % 2 == 0).to_string();
        c.create(
            &cms("default"),
            &json!({"metadata": {"name": format!("c{i}"), "labels": {"even": even}}}),
        )
        .unwrap();
    }
    (sim, c)
}

#[test]
fn paged_list_follows_continue() {
    let (sim, c) = paged(3, 7);
    sim.reset_stats();
    let all = c.list_all(&cms("default"), &ListParams::default()).unwrap();
    let names: Vec<&str> = all
        .items
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);
    assert_eq!(sim.count(Some("list"), Some("configmaps")), 3);

    let evens = c
        .list_all(
            &cms("default"),
            &ListParams {
                label_selector: Some("even=true".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(evens.items.len(), 4);
    let meta = c
        .list_all(
            &cms("default"),
            &ListParams {
                metadata_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(meta.items[0]["kind"], "PartialObjectMetadata");
    assert!(meta.items[0].get("data").is_none());
}

#[test]
fn paged_list_restarts_when_continue_expires() {
    let (sim, c) = paged(2, 5);
    // A continue token older than the retained history is 410 Expired ...
    let p = ListParams {
        limit: Some(2),
        ..Default::default()
    };
    let first = c.list(&cms("default"), &p).unwrap();
    c.create(&cms("default"), &json!({"metadata": {"name": "c5"}}))
        .unwrap();
    sim.compact();
    let e = c
        .list(
            &cms("default"),
            &ListParams {
                continue_token: first.continue_token.clone(),
                ..p.clone()
            },
        )
        .unwrap_err();
    assert!(e.is_gone(), "{e}");
    // ... and the pager then starts over rather than returning half a list.
    sim.reset_stats();
    sim.fail_next_query(Some("GET"), "/configmaps$", "continue=", 410, 1);
    let all = c.list_all(&cms("default"), &ListParams::default()).unwrap();
    assert_eq!(all.items.len(), 6);
    assert_eq!(sim.count(Some("list"), Some("configmaps")), 5);
}

#[test]
fn watch_streams_events_and_bookmarks() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(100),
        ..SimConfig::default()
    })
    .unwrap();
    let c = client(&sim.url(), None, None, fast());
    let start = c
        .list(&cms("default"), &ListParams::default())
        .unwrap()
        .resource_version;
    let params = WatchParams {
        resource_version: start,
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let mut stream = c.watch(&cms("default"), &params).unwrap();
    c.create(&cms("default"), &json!({"metadata": {"name": "w"}}))
        .unwrap();
    c.patch(
        &cm("default", "w"),
        PatchType::Merge,
        &json!({"data": {"a": "b"}}),
        Retry::Write,
    )
    .unwrap();
    c.delete(&cm("default", "w"), None).unwrap();
    let mut kinds = Vec::new();
    let mut bookmarks = 0;
    for ev in stream.by_ref() {
        match ev.unwrap() {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)
                if o["metadata"]["name"] != "w" => {}
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            WatchEvent::Bookmark { .. } => bookmarks += 1,
        }
        if kinds.len() == 3 && bookmarks > 0 {
            break;
        }
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    let q = &sim
        .requests()
        .into_iter()
        .find(|r| r.verb == "watch")
        .unwrap()
        .query;
    assert!(
        q.contains("allowWatchBookmarks=true")
            && q.contains("timeoutSeconds=5")
            && q.contains("watch=1"),
        "{q}"
    );
}

#[test]
fn too_old_resource_version_arrives_both_ways() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    let params = WatchParams {
        resource_version: "1".into(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    // As an ERROR event inside a 200 stream, as the watch cache answers ...
    sim.compact();
    let mut s = c.watch(&cms("default"), &params).unwrap();
    let e = s.next().unwrap().unwrap_err();
    assert!(e.is_gone(), "{e}");
    assert!(s.next().is_none());
    // ... and as HTTP 410 on the watch request (a server without one).
    sim.expire_next_watches(1, false);
    let fresh = WatchParams {
        resource_version: sim.resource_version().to_string(),
        ..params
    };
    let e = c.watch(&cms("default"), &fresh).err().unwrap();
    assert!(e.is_gone(), "{e}");
}

#[test]
fn cut_watch_ends_the_stream() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    let params = WatchParams {
        resource_version: sim.resource_version().to_string(),
        timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let s = c.watch(&cms("default"), &params).unwrap();
    let t = std::thread::spawn(move || (s.collect::<Vec<_>>(), Instant::now()));
    // An event first, so the stream is shown open before the cut.
    c.create(
        &cms("default"),
        &json!({"metadata": {"name": "before-cut"}, "data": {"k": "v"}}),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cut = Instant::now();
    sim.cut_watches();
    let (evs, ended) = t.join().unwrap();
    // It ends at the cut, not at its 30 s timeout: a clean end or a
    // transport error; never a hang or a panic.
    let after = ended.saturating_duration_since(cut);
    assert!(
        after < Duration::from_secs(5),
        "ended {after:?} after the cut"
    );
    assert!(
        matches!(evs.first(), Some(Ok(WatchEvent::Added(o))) if o["metadata"]["name"] == "before-cut"),
        "{evs:?}"
    );
    assert!(evs[1..].iter().all(|e| e.is_err()), "{evs:?}");
}

#[test]
fn reads_retry_throttling_and_server_errors_honouring_retry_after() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    c.create(&cms("default"), &json!({"metadata": {"name": "r"}}))
        .unwrap();
    sim.reset_stats();
    sim.fail_next(Some("GET"), "/configmaps/r$", 429, 1, Some(1));
    sim.fail_next(Some("GET"), "/configmaps/r$", 503, 1, None);
    let t = Instant::now();
    c.get(&cm("default", "r")).unwrap();
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was not honoured"
    );
    assert_eq!(sim.count(Some("get"), Some("configmaps")), 3);

    // Reads give up after max_attempts.
    sim.fail_next(Some("GET"), "/configmaps/r$", 500, 10, None);
    let e = c.get(&cm("default", "r")).unwrap_err();
    assert_eq!(e.code(), Some(500));
    sim.clear_faults();
}

#[test]
fn writes_retry_only_when_safe() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    sim.fail_next(Some("POST"), "/configmaps$", 500, 1, None);
    let e = c
        .create(&cms("default"), &json!({"metadata": {"name": "w"}}))
        .unwrap_err();
    assert_eq!(e.code(), Some(500));
    sim.fail_next(Some("POST"), "/configmaps$", 429, 1, Some(0));
    c.create(&cms("default"), &json!({"metadata": {"name": "w"}}))
        .unwrap();
    sim.fail_next(Some("PATCH"), "/configmaps/w$", 503, 1, None);
    c.patch(
        &cm("default", "w"),
        PatchType::Merge,
        &json!({"data": {"a": "1"}}),
        Retry::Idempotent,
    )
    .unwrap();
    // Each fault was met, and each safe retry made.
    let statuses: Vec<u16> = sim
        .requests()
        .iter()
        .filter(|r| r.path.contains("/configmaps"))
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [500, 429, 201, 503, 200]);
}

#[test]
fn token_rotation_is_survived() {
    let sim = Sim::start(SimConfig {
        tokens: Some(vec!["first".into()]),
        ..SimConfig::default()
    })
    .unwrap();
    let dir = tmpdir("rotation");
    let tok = dir.join("token");
    std::fs::write(&tok, "first\n").unwrap();
    let c = client(&sim.url(), Some(tok.clone()), None, fast());
    c.get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap();
    // The kubelet writes a new projected token; the server stops taking the old one.
    std::fs::write(&tok, "second\n").unwrap();
    sim.set_tokens(Some(vec!["second".into()]));
    sim.reset_stats();
    c.get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap();
    let codes: Vec<u16> = sim.requests().iter().map(|r| r.status).collect();
    assert_eq!(codes, [401, 200]);
    // With no valid token at all, the error says so and does not loop.
    sim.set_tokens(Some(vec!["third".into()]));
    let e = c
        .get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap_err();
    assert_eq!(e.code(), Some(401));
    assert!(
        !format!("{e} {e:?} {c:?}").contains("second"),
        "token leaked into an error"
    );
}

#[test]
fn https_with_a_test_ca_and_ip_san() {
    let sim = Sim::start(SimConfig {
        tls: true,
        ..SimConfig::default()
    })
    .unwrap();
    let dir = tmpdir("tls");
    let good = dir.join("ca.crt");
    std::fs::write(&good, sim.ca_pem().unwrap()).unwrap();
    let c = client(&sim.url(), None, Some(good.clone()), fast());
    c.get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap();

    // Under a CA that did not sign the server's certificate, nothing is sent.
    let wrong = dir.join("wrong.crt");
    std::fs::write(&wrong, kubesim::tls::unrelated_ca_pem().unwrap()).unwrap();
    let mut cfg = fast();
    cfg.max_attempts = 1;
    cfg.ca_check_interval = Duration::ZERO;
    let bad = client(&sim.url(), None, Some(wrong.clone()), cfg);
    let e = bad
        .get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::Transport(_)), "{e}");
    assert!(
        e.to_string().to_lowercase().contains("certificate")
            || e.to_string().contains("UnknownIssuer"),
        "{e}"
    );

    // CA rotation: the file now holds the right CA; no restart needed.
    std::fs::write(&wrong, sim.ca_pem().unwrap()).unwrap();
    bad.get(&ResourcePath::object(NAMESPACES, None, "default").unwrap())
        .unwrap();

    // Plain http to a TLS port is refused for non-loopback before connecting;
    // https without a CA file is refused at start.
    let opts = EndpointOptions {
        server: Some(sim.url()),
        ..Default::default()
    };
    assert!(Endpoint::resolve(&opts, &|_| None).is_err());
}

#[test]
fn oversized_bodies_are_refused() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let big = "x".repeat(64 * 1024);
    let c = client(&sim.url(), None, None, fast());
    c.create(
        &cms("default"),
        &json!({"metadata": {"name": "big"}, "data": {"k": big}}),
    )
    .unwrap();
    let mut cfg = fast();
    cfg.body_limit = 16 * 1024;
    let small = client(&sim.url(), None, None, cfg);
    let e = small.get(&cm("default", "big")).unwrap_err();
    assert!(matches!(e, Error::BodyTooLarge { limit: 16384 }), "{e}");
    // A watch event over the cap ends the watch with the same error.
    let params = WatchParams {
        resource_version: "0".into(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let mut s = small.watch(&cms("default"), &params).unwrap();
    assert!(matches!(s.next(), Some(Err(Error::BodyTooLarge { .. }))));
}

#[test]
fn redirects_are_never_followed() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let t = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(3)) {
            seen.push(req.url().to_string());
            let resp = tiny_http::Response::empty(302).with_header(
                "Location: http://127.0.0.1:1/elsewhere"
                    .parse::<tiny_http::Header>()
                    .unwrap(),
            );
            let _ = req.respond(resp);
        }
        seen
    });
    let c = client(&format!("http://127.0.0.1:{port}"), None, None, fast());
    let e = c.get(&cm("default", "x")).unwrap_err();
    assert!(matches!(e, Error::Redirect { code: 302 }), "{e}");
    let seen = t.join().unwrap();
    assert_eq!(seen, ["/api/v1/namespaces/default/configmaps/x"]);
}

#[test]
fn garbage_bodies_are_errors_not_panics() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    std::thread::spawn(move || {
        let bodies = [
            "not json",
            "[1,2]",
            r#"{"items": 5, "metadata": {}}"#,
            "{\"type\":\"ADDED\"}\n",
        ];
        let mut i = 0;
        while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(3)) {
            let _ = req.respond(tiny_http::Response::from_string(bodies[i % bodies.len()]));
            i += 1;
        }
    });
    let c = client(&format!("http://127.0.0.1:{port}"), None, None, fast());
    assert!(matches!(c.get(&cm("default", "x")), Err(Error::Decode(_))));
    assert!(matches!(c.get(&cm("default", "x")), Err(Error::Decode(_))));
    assert!(matches!(
        c.list(&cms("default"), &ListParams::default()),
        Err(Error::Decode(_))
    ));
    let mut w = c
        .watch(
            &cms("default"),
            &WatchParams {
                timeout: Duration::from_secs(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(matches!(w.next(), Some(Err(Error::Decode(_)))));
}

#[test]
fn unreachable_server_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut cfg = fast();
    cfg.max_attempts = 2;
    let c = client(&format!("http://127.0.0.1:{port}"), None, None, cfg);
    let e = c.get(&cm("default", "x")).unwrap_err();
    assert!(matches!(e, Error::Transport(_) | Error::Timeout(_)), "{e}");
    assert!(e.is_transient());
}

/// A server that pages for ever (the same continue token, or a
/// new one each time) is refused after a bounded number of pages, not
/// followed until memory runs out (3.6 GB in 15 s before).
#[test]
fn a_list_that_pages_for_ever_is_refused() {
    for repeat in [true, false] {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut pages = 0u32;
            while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(2)) {
                pages += 1;
                let token = if repeat {
                    "same".to_string()
                } else {
                    format!("t{pages}")
                };
                let items: Vec<_> = (0..10)
                    .map(|i| json!({"metadata": {"name": format!("cm-{pages}-{i}"), "namespace": "default"}}))
                    .collect();
                let body = json!({"kind": "ConfigMapList", "metadata": {"resourceVersion": "1", "continue": token}, "items": items});
                let _ = req.respond(tiny_http::Response::from_string(body.to_string()));
            }
            pages
        });
        let cfg = ClientConfig {
            max_list_pages: 40,
            max_list_items: 1_000_000,
            ..fast()
        };
        let c = client(&format!("http://127.0.0.1:{port}"), None, None, cfg);
        let e = c
            .list_all(&cms("default"), &ListParams::default())
            .unwrap_err();
        let pages = t.join().unwrap();
        if repeat {
            assert!(e.to_string().contains("repeated a continue token"), "{e}");
            assert_eq!(pages, 2);
        } else {
            assert!(e.to_string().contains("more than 40 pages"), "{e}");
            assert_eq!(pages, 40);
        }
    }
    // Items are bounded too, whatever the page count.
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    std::thread::spawn(move || {
        let mut n = 0;
        while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(2)) {
            n += 1;
            let items: Vec<_> = (0..100)
                .map(|i| json!({"metadata": {"name": format!("c{n}-{i}")}}))
                .collect();
            let body = json!({"metadata": {"resourceVersion": "1", "continue": format!("n{n}")}, "items": items});
            let _ = req.respond(tiny_http::Response::from_string(body.to_string()));
        }
    });
    let cfg = ClientConfig {
        max_list_items: 250,
        ..fast()
    };
    let c = client(&format!("http://127.0.0.1:{port}"), None, None, cfg);
    let e = c
        .list_all(&cms("default"), &ListParams::default())
        .unwrap_err();
    assert!(e.to_string().contains("more than 250 items"), "{e}");
}

/// A Retry-After longer than `max_retry_sleep` is not slept out
/// in the caller (a worker): the error comes back at once with the delay,
/// and every request until then fails fast without reaching the server.
#[test]
fn a_long_retry_after_paces_every_caller_without_sleeping() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let c = client(&sim.url(), None, None, fast());
    c.create(&cms("default"), &json!({"metadata": {"name": "p"}}))
        .unwrap();
    sim.reset_stats();
    sim.fail_next(Some("PATCH"), "/configmaps/p$", 429, 1, Some(3));
    let t = Instant::now();
    let e = c
        .patch(
            &cm("default", "p"),
            PatchType::Merge,
            &json!({"data": {"a": "1"}}),
            Retry::Write,
        )
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "slept {:?}",
        t.elapsed()
    );
    assert!(e.retry_after() >= Some(Duration::from_secs(3)), "{e}");
    let e = c.get(&cm("default", "p")).unwrap_err();
    assert!(matches!(e, Error::Throttled { .. }), "{e}");
    assert!(e.retry_after().is_some_and(|d| d <= Duration::from_secs(3)));
    assert_eq!(
        sim.count(None, Some("configmaps")),
        1,
        "the paced read was never sent"
    );
    std::thread::sleep(Duration::from_millis(3100));
    c.get(&cm("default", "p")).unwrap();
}

/// A real API server prunes an unknown field under the
/// default `fieldValidation=Warn` and says so only in a `Warning` header
/// (a status field after a CRD/operator version skew, say). kubesim does
/// the same; the client counts every warning and keeps each distinct one.
#[test]
fn warning_headers_are_counted_and_kept_once() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let crd: serde_json::Value =
        serde_json::from_str(include_str!("../manifests/base/crd.json")).unwrap();
    sim.create(crd).unwrap();
    let c = client(&sim.url(), None, None, fast());
    let models =
        ResourcePath::collection(openmed_operator::model::RESOURCE, Some("default")).unwrap();
    let m = json!({"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel", "metadata": {"name": "w"},
        "spec": {"family": "PII", "version": "v1", "tier": "Small", "replicas": 1,
            "rolloutStrategy": {"type": "Recreate"}}});
    c.create(&models, &m).unwrap();
    assert_eq!(c.warnings().0, 0);
    let path =
        ResourcePath::object(openmed_operator::model::RESOURCE, Some("default"), "w").unwrap();
    for _ in 0..2 {
        let v = c
            .patch(
                &path,
                PatchType::Merge,
                &json!({"metadata": {"annotations": {"a": "b"}}, "spec": {"colour": "red"}}),
                Retry::Write,
            )
            .unwrap();
        assert!(v["spec"].get("colour").is_none(), "pruned");
    }
    let (total, seen) = c.warnings();
    assert_eq!(total, 2);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("colour"), "{seen:?}");
}

/// A watch whose connection stops delivering without
/// closing (half-open) is given up a grace period after its server-side
/// timeout, not hung on for ever (it took 4.6 minutes before; the operator
/// now asks for 50-60 s watches and a 10 s grace).
#[test]
fn a_silent_watch_connection_is_given_up() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
            // Then nothing, and the connection stays open.
            std::thread::sleep(Duration::from_secs(60));
        }
    });
    let cfg = ClientConfig {
        watch_grace: Duration::from_secs(1),
        ..fast()
    };
    let c = client(&format!("http://127.0.0.1:{port}"), None, None, cfg);
    let wp = WatchParams {
        label_selector: None,
        field_selector: None,
        resource_version: "1".into(),
        timeout: Duration::from_secs(1),
        metadata_only: false,
    };
    let t = Instant::now();
    let mut stream = c.watch(&cms("default"), &wp).unwrap();
    let end = stream.next();
    // Given up as a timeout, after the 1 s timeout and its 1 s grace, not
    // at once for some other reason, and not hung on.
    assert!(matches!(end, Some(Err(Error::Timeout(_)))), "{end:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(1800),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}
