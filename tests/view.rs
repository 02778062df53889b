//! Issue 13: the live status view, end to end against kubesim: the page,
//! `/api/models`, and the change stream as an EventSource reads it; a stuck
//! viewer does not delay reconciling. (The browser test is
//! tests/ui/view.test.mjs, run by scripts/ui-e2e.sh.)

#[path = "common/operator.rs"]
mod harness;

use harness::*;
use kubesim::Sim;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A viewer of `/events`: everything the stream sent, read on a thread.
struct Viewer(Arc<Mutex<String>>);

impl Viewer {
    fn connect(addr: SocketAddr) -> Viewer {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let seen = Arc::new(Mutex::new(String::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Viewer(seen)
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Wait until what came after byte `from` contains `needle`; how long.
    fn wait(&self, from: usize, needle: &str) -> Duration {
        let t = Instant::now();
        wait_until(&format!("{needle:?} on the stream"), || {
            self.0
                .lock()
                .unwrap()
                .get(from..)
                .is_some_and(|s| s.contains(needle))
        });
        t.elapsed()
    }
}

/// When the Deployment was first patched at or after `since` (sim clock).
fn patched_after(sim: &Sim, since: u64) -> Option<u64> {
    sim.requests()
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/deployments/svc") && r.at_ms >= since)
        .map(|r| r.at_ms - since)
}

#[test]
fn the_view_shows_models_and_streams_their_changes() {
    let sim = start_sim(fast());
    let dir = tmpdir("view");
    let mut op = Operator::start(&sim.url(), &dir, &[]);
    sim.create(deployment("svc", 2)).unwrap();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    wait_event(&sim, "svc", "RolloutSucceeded");
    let addr = op.view_addr();
    the_page_is_self_contained(addr);
    the_snapshot_comes_from_the_caches(addr);
    let v = Viewer::connect(addr);
    the_stream_sends_a_snapshot_then_each_change(&sim, &v);
    stuck_viewers_do_not_delay_the_operator(&sim, addr);
    a_deleted_model_leaves_the_view(&sim, &v, addr);
    op.assert_clean_exit();
}

fn the_page_is_self_contained(addr: SocketAddr) {
    // The page: self-contained, nothing fetched from elsewhere.
    let (code, page) = http_get_at(addr, "/");
    assert_eq!(code, 200);
    assert!(
        page.contains("<table") || page.contains("EventSource"),
        "{page}"
    );
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page names another origin"
    );
}

fn the_snapshot_comes_from_the_caches(addr: SocketAddr) {
    // The snapshot as JSON, from the caches.
    let (code, body) = http_get_at(addr, "/api/models");
    assert_eq!(code, 200);
    let rows: Value = serde_json::from_str(&body).unwrap();
    let r = &rows[0];
    assert_eq!(
        (r["key"].as_str(), r["phase"].as_str()),
        (Some("openmed/svc"), Some("Ready"))
    );
    assert_eq!(r["active"], V1);
    assert_eq!(r["progress"]["desired"], 2);
    assert!(r["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["reason"] == "RolloutSucceeded"));
}

fn the_stream_sends_a_snapshot_then_each_change(sim: &Sim, v: &Viewer) {
    // The stream: a snapshot, then each change within a second or so.
    v.wait(0, "event: snapshot");
    // A stream has no length: a browser's EventSource would end at one.
    let head =
        v.0.lock()
            .unwrap()
            .split("\r\n\r\n")
            .next()
            .unwrap_or("")
            .to_string();
    assert!(head.contains("Content-Type: text/event-stream"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    let mark = v.len();
    set_version(sim, "svc", V2);
    let rolling = v.wait(mark, "\"phase\":\"RollingOut\"");
    let mark = v.len();
    wait_serving(sim, "svc", V2);
    v.wait(mark, &format!("\"active\":\"{V2}\""));
    eprintln!("a version change reached the stream as RollingOut in {rolling:?}");
    assert!(rolling < Duration::from_secs(5), "{rolling:?}");
}

/// A viewer that reads its stream's head, then never reads again.
fn stuck_viewer(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "a viewer was refused");
    s
}

fn stuck_viewers_do_not_delay_the_operator(sim: &Sim, addr: SocketAddr) {
    // Viewers that never read do not delay the operator: a change is
    // patched into the Deployment as fast with them attached.
    let stuck: Vec<TcpStream> = (0..10).map(|_| stuck_viewer(addr)).collect();
    let mut lat = Vec::new();
    for (i, version) in [V1, V2, V1, V2, V1].iter().enumerate() {
        let since = sim.clock_ms();
        set_version(sim, "svc", version);
        wait_until("the Deployment patched", || {
            patched_after(sim, since).is_some()
        });
        lat.push(patched_after(sim, since).unwrap_or(0));
        wait_serving(sim, "svc", version);
        let _ = i;
    }
    eprintln!("change -> Deployment patch with 10 stuck viewers: {lat:?} ms");
    assert!(lat.iter().all(|ms| *ms < 2_000), "{lat:?}");
    // They were viewers all along: with them and the test's own, five more
    // fill the live view's sixteen places, and the next is refused.
    let more: Vec<TcpStream> = (0..5).map(|_| stuck_viewer(addr)).collect();
    let (code, _) = http_get_at(addr, "/events");
    assert_eq!(
        code, 503,
        "a 17th viewer was let in: the stuck ones had gone"
    );
    drop((stuck, more));
}

fn a_deleted_model_leaves_the_view(sim: &Sim, v: &Viewer, addr: SocketAddr) {
    // A deleted model leaves the view.
    let mark = v.len();
    sim.delete("openmed.ai/v1alpha1", "OpenMedModel", NS, "svc")
        .unwrap();
    v.wait(mark, "\"remove\":[\"openmed/svc\"]");
    let (_, body) = http_get_at(addr, "/api/models");
    assert_eq!(body.trim(), "[]");
}

/// Off loopback the view needs the metrics' authentication, or the
/// operator refuses to start.
#[test]
fn the_view_off_loopback_without_authentication_is_refused() {
    let sim = start_sim(fast());
    let dir = tmpdir("view-open");
    let mut op = Operator::start(
        &sim.url(),
        &dir,
        &[
            "--ui-addr",
            "0.0.0.0:0",
            "--metrics-secure=false",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    wait_until("the refusal in the log", || {
        op.log().contains("port-forward")
    });
    let st = op.terminate(Duration::from_secs(10));
    assert!(st.is_some_and(|s| !s.success()), "{st:?}");
}
