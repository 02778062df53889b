//! A broken or hostile API server, a hostile neighbour on the health port,
//! and networks that cut and go quiet (issues 9 and 22): the real operator
//! binary against kubesim's faults, or against a small server of our own
//! that misbehaves on purpose. Bounds are generous: rates and counts, never
//! tight timings.

#[path = "common/operator.rs"]
mod harness;

use harness::*;
use kubesim::{Sim, SimConfig};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// kubesim without bookmarks: a quiet cluster sends nothing at all.
fn quiet() -> SimConfig {
    SimConfig {
        bookmark_interval: Duration::from_secs(3600),
        ..fast()
    }
}

fn lists_and_watches(sim: &Sim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.verb == "list" || r.verb == "watch")
        .count()
}

/// Issue 9, point 3: every watch answered with 410 (as HTTP, then in the
/// stream) used to relist at once, about 1,500 lists a second. Now each
/// loop backs off: a few dozen requests in six seconds over four loops.
#[test]
fn watch_loops_never_spin_on_410s() {
    let (sim, _, mut op) = cluster_with(fast(), "spin-410", "svc", &[]);
    for in_stream in [false, true] {
        sim.expire_next_watches(1_000_000, in_stream);
        sim.cut_watches();
        std::thread::sleep(Duration::from_millis(500));
        let before = lists_and_watches(&sim);
        let cpu_before = op.cpu_ms();
        std::thread::sleep(Duration::from_secs(6));
        let n = lists_and_watches(&sim) - before;
        assert!(
            n < 120,
            "{n} lists and watches in 6 s (in_stream: {in_stream})"
        );
        if let (Some(a), Some(b)) = (cpu_before, op.cpu_ms()) {
            assert!(b - a < 3000, "{} ms of CPU in 6 s", b - a);
        }
        let (code, body) = op.http_get("/readyz");
        assert_eq!(
            code, 503,
            "a watch that cannot stay open is not ready: {body}"
        );
    }
    sim.expire_next_watches(0, false);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    wait_until("ready again", || op.http_get("/readyz").0 == 200);
    op.assert_clean_exit();
}

/// Issue 22, point 2: watches cut while idle (a load balancer's idle
/// timeout) are resumed at once. Before, each cut counted as a failure and
/// the next change waited out a growing backoff (15.6 s behind 3 s cuts).
#[test]
fn idle_cuts_are_resumed_at_once() {
    let (sim, _, mut op) = cluster_with(quiet(), "idle-cuts", "svc", &[]);
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    // Three clean ends (the final chunk sent), then eight cuts, each of a
    // watch that has been open for 1.2 s.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1200));
        let opened = model_watches(&sim, 0).len();
        sim.end_watches();
        wait_for(
            "the models watch to be opened again",
            || model_watches(&sim, 0).len(),
            |n| *n > opened,
        );
    }
    for i in 0..8 {
        std::thread::sleep(Duration::from_millis(1200));
        let opened = model_watches(&sim, 0).len();
        sim.cut_watches();
        if i < 7 {
            wait_for(
                "the models watch to be opened again",
                || model_watches(&sim, 0).len(),
                |n| *n > opened,
            );
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    set_version(&sim, "svc", V2);
    wait_until("the change to reach the ConfigMap", || {
        sim.object("", "configmaps", NS, "svc-model-manifest")
            .is_some_and(|cm| cm["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] == V2)
    });
    // Eight failures in a row meant 12.8 s or more of backoff.
    eprintln!(
        "change seen {} ms after eight idle cuts",
        t.elapsed().as_millis()
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    op.assert_clean_exit();
}

/// Issue 22, point 5: a watch refused with 429 and Retry-After is tried
/// again no sooner than the server asked (0.2, 0.6, 1.2 s before).
#[test]
fn retry_after_is_honoured_when_opening_a_watch() {
    let (sim, _, mut op) = cluster_with(quiet(), "watch-429", "svc", &[]);
    sim.throttle_next_query(Some("GET"), "/openmedmodels$", "watch=", 3, 2);
    let start = sim.requests().len();
    sim.cut_watches();
    wait_until("the fourth watch of models", || {
        model_watches(&sim, start).len() >= 4
    });
    let at = model_watches(&sim, start);
    eprintln!("watch tries after 429 + Retry-After: 2 at {at:?} ms");
    for pair in at.windows(2).take(3) {
        assert!(pair[1] - pair[0] >= 1900, "tries at {at:?} ms");
    }
    op.assert_clean_exit();
}

fn model_watches(sim: &Sim, from: usize) -> Vec<u64> {
    sim.requests()[from..]
        .iter()
        .filter(|r| r.verb == "watch" && r.resource == "openmedmodels")
        .map(|r| r.at_ms)
        .collect()
}

/// Issue 22, point 1: on a quiet cluster (no events, no bookmarks) every
/// watch is fine and /healthz stays 200 past the liveness window; it turns
/// 503 only when lists and watches keep failing.
#[test]
fn liveness_holds_on_a_quiet_cluster_and_fails_when_nothing_works() {
    let (sim, _, mut op) = cluster_with(
        quiet(),
        "liveness",
        "svc",
        &["--liveness-window-seconds", "2"],
    );
    std::thread::sleep(Duration::from_secs(5));
    let (code, body) = op.http_get("/healthz");
    assert_eq!(code, 200, "{body}");
    sim.fail_next(Some("GET"), ".*", 500, 100_000, None);
    sim.cut_watches();
    wait_until("healthz to say the loops are stuck", || {
        let (code, body) = op.http_get("/healthz");
        code == 503 && body.contains("cannot list or watch")
    });
    sim.clear_faults();
    wait_until("healthz to recover", || op.http_get("/healthz").0 == 200);
    op.assert_clean_exit();
}

/// Issue 9, point 4: one client trickling its request, and hundreds of idle
/// connections, neither block the probes nor make a thread each.
#[test]
fn a_slow_client_does_not_block_the_probes() {
    let (_sim, _, mut op) = cluster_with(fast(), "trickle", "svc", &[]);
    let addr = op.health_addr();
    let trickler = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\n".iter().take(8) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(700));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(op.http_get("/healthz").0, 200);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let threads = op.threads().unwrap_or(0);
    assert!(
        threads < 80,
        "{threads} threads with {} idle connections",
        idle.len()
    );
    drop(idle);
    trickler.join().unwrap();
    wait_until("probes answered again", || op.http_get("/healthz").0 == 200);
    op.assert_clean_exit();
}

/// A server that answers every request with a 500 whose message echoes
/// the request head, as a broken proxy does, Authorization included.
fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || echo(conn));
        }
    });
    format!("http://{addr}")
}

fn echo(mut conn: TcpStream) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("upstream refused: {text}"), "reason": "InternalError", "code": 500});
    let body = status.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Issue 9, point 1: the token never reaches a log line, whatever the
/// server echoes and whatever RUST_LOG asks, in both formats.
#[test]
fn the_token_never_reaches_the_logs() {
    const TOKEN: &str = "tok-3f9c2a7b41d8e6a0-secret";
    let url = echo_server();
    let dir = tmpdir("token-echo");
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    for format in ["text", "json"] {
        let log = dir.join(format!("{format}.log"));
        let bin = std::env::var("OMO_OPERATOR_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_openmed-operator").to_string());
        let mut child = Command::new(bin)
            .args(["--server", &url, "--health-addr", "127.0.0.1:0"])
            .args([
                "--token-file",
                token.to_str().unwrap(),
                "--log-format",
                format,
            ])
            .env("RUST_LOG", "trace")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        wait_until("the echoed request in the log", || {
            read().to_ascii_lowercase().contains("authorization")
        });
        std::thread::sleep(Duration::from_secs(2));
        let _ = child.kill();
        let _ = child.wait();
        let text = read();
        assert!(!text.contains(TOKEN), "{format}: the token is in the log");
        assert!(
            !text.contains(&TOKEN[4..20]),
            "{format}: part of the token is in the log"
        );
        assert!(text.contains("[redacted]"), "{format}: {text}");
    }
}

/// Issue 9, point 7: the initial lists of the four kinds, each up to the
/// 32 MiB body cap, no longer run at once: one page is in flight at a time,
/// so their bodies never add up. With 400 ms of latency on every request,
/// no two list requests overlap.
#[test]
fn the_initial_lists_run_one_at_a_time() {
    let sim = start_sim(fast());
    sim.set_latency(Duration::from_millis(400));
    let dir = tmpdir("one-list");
    let mut op = Operator::start(&sim.url(), &dir, &[]);
    op.wait_ready();
    let mut at: Vec<u64> = sim
        .requests()
        .iter()
        .filter(|r| r.verb == "list")
        .map(|r| r.at_ms)
        .collect();
    at.sort();
    assert!(at.len() >= 4, "{at:?}");
    for pair in at.windows(2) {
        assert!(pair[1] - pair[0] >= 350, "lists overlapped: {at:?}");
    }
    sim.set_latency(Duration::ZERO);
    op.assert_clean_exit();
}
