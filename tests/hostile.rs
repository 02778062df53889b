//! A broken or hostile API server, a hostile neighbour on the health port,
//! and networks that cut and go quiet (issues 9 and 22): the real operator
//! binary against kubesim's faults, or against a small server of our own
//! that misbehaves on purpose. Bounds are generous: rates and counts, never
//! tight timings.

use openmed_test_support as harness;

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

/// Every watch answered with 410 (as HTTP, then in the
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
        let (a, b) = (
            cpu_before.expect("reading the operator's CPU time"),
            op.cpu_ms().expect("reading the operator's CPU time"),
        );
        assert!(b - a < 3000, "{} ms of CPU in 6 s", b - a);
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

/// Watches cut while idle (a load balancer's idle
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

/// A watch refused with 429 and Retry-After is tried
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

/// On a quiet cluster (no events, no bookmarks) every
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

/// A TLS client trickling its handshake a byte a second is cut off at the
/// 5 s request deadline like a plain one: rustls reads in a loop of its own
/// until a record is complete, and without a deadline on every read such a
/// client would hold its connection slot for as long as it kept trickling.
#[test]
fn a_trickling_tls_client_is_cut_off_at_the_deadline() {
    let (_sim, _, mut op) = cluster_with(
        fast(),
        "tls-trickle",
        "svc",
        &["--metrics-addr", "127.0.0.1:0"],
    );
    let addr = op.metrics_addr();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // The start of a ClientHello record, then one byte a second.
    let hello = [
        0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0,
    ];
    let t = Instant::now();
    let mut closed = None;
    for b in hello {
        if s.write_all(&[b]).is_err() {
            closed = Some(t.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {
                closed = Some(t.elapsed());
                break;
            }
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut =>
            {
                closed = Some(t.elapsed());
                break;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(800));
    }
    let closed = closed.expect("the trickling client was never cut off");
    assert!(closed < Duration::from_secs(8), "cut off after {closed:?}");
    assert!(
        closed >= Duration::from_secs(4),
        "cut off too early: {closed:?}"
    );
    op.assert_clean_exit();
}

/// One client trickling its request, and hundreds of idle
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
    assert_eq!(idle.len(), 300, "idle connections opened");
    std::thread::sleep(Duration::from_millis(500));
    let threads = op.threads().expect("reading the operator's threads");
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

/// Keeps `n` sockets open against `addr`, from `sources` loopback
/// addresses, and opens each again as soon as the server cuts it, until
/// `until`: what a neighbour does to hold a port. Returns the sockets
/// opened in all.
fn hold_sockets(addr: std::net::SocketAddr, n: usize, sources: u8, until: Instant) -> usize {
    let source = |i: usize| std::net::Ipv4Addr::new(127, 0, 0, 1 + (i % sources as usize) as u8);
    let open = |i: usize| {
        let s = connect_from(source(i), addr).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut socks: Vec<Option<TcpStream>> = (0..n).map(open).collect();
    let mut opened = socks.iter().flatten().count();
    while Instant::now() < until {
        for (i, slot) in socks.iter_mut().enumerate() {
            let mut b = [0u8; 512];
            let cut = match slot {
                Some(s) => {
                    !matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                }
                None => true,
            };
            if cut {
                *slot = open(i);
                opened += usize::from(slot.is_some());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    opened
}

/// No neighbour can take the health, metrics or live-view port: 1,000
/// sockets held open against each (from eight addresses, each reopened as
/// it is cut), and 16 viewers of the live view that never read, while new
/// clients ask every half second. Each is answered within a second. Before,
/// 32 sockets per port held every slot: 0 of 15 probes answered.
#[test]
fn a_socket_flood_cannot_hold_any_port() {
    let (sim, _, mut op) = cluster_with(
        fast(),
        "socket-flood",
        "svc",
        &["--metrics-addr", "127.0.0.1:0"],
    );
    let token = metrics_scraper(&sim);
    let (health, metrics, view) = (op.health_addr(), op.metrics_addr(), op.view_addr());
    assert_eq!(
        tls_get(metrics, "/metrics", Some(&token), None).map(|a| a.code),
        Ok(200)
    );
    let rss_before = op.rss_kib().expect("reading the operator's RSS");
    let threads_before = op.threads().expect("reading the operator's threads");
    let mut stuck_viewers = Vec::new();
    for _ in 0..16 {
        let mut v = TcpStream::connect(view).unwrap();
        v.write_all(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        stuck_viewers.push(v);
    }
    let until = Instant::now() + Duration::from_secs(12);
    let (opened, probes, rss, threads) = std::thread::scope(|s| {
        let floods: Vec<_> = [health, metrics, view]
            .into_iter()
            .map(|addr| s.spawn(move || hold_sockets(addr, 1000, 8, until)))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let mut probes = Vec::new();
        let (mut rss, mut threads) = (0, 0);
        while Instant::now() + Duration::from_secs(1) < until {
            let t = Instant::now();
            let h = http_get_at(health, "/healthz").0;
            let m = tls_get(metrics, "/metrics", Some(&token), None).map_or(0, |a| a.code);
            let v = http_get_at(view, "/api/models").0;
            probes.push(((h, m, v), t.elapsed()));
            rss = rss.max(op.rss_kib().expect("reading the operator's RSS"));
            threads = threads.max(op.threads().expect("reading the operator's threads"));
            std::thread::sleep(Duration::from_millis(500));
        }
        let opened: Vec<usize> = floods.into_iter().map(|f| f.join().unwrap()).collect();
        (opened, probes, rss, threads)
    });
    let slowest = probes.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!(
        "sockets opened against health, metrics, view: {opened:?}; {} rounds of probes, slowest \
         round {slowest:?}; operator threads {threads_before} -> {threads}, RSS {} -> {} KiB",
        probes.len(),
        rss_before,
        rss
    );
    for ((h, m, v), took) in &probes {
        assert_eq!((*h, *m, *v), (200, 200, 200), "probes: {probes:?}");
        assert!(
            *took < Duration::from_secs(3),
            "three probes took {took:?}: {probes:?}"
        );
    }
    assert!(probes.len() >= 10, "{probes:?}");
    assert!(opened.iter().all(|n| *n >= 1000), "{opened:?}");
    // A thread per viewer streamed to (16 at most), none per socket.
    assert!(
        threads <= threads_before + 16 + 4,
        "{threads_before} -> {threads} threads"
    );
    drop(stuck_viewers);
    op.assert_clean_exit();
}

/// /healthz alone, under the same flood, asked every 100 ms: every probe
/// is answered within a second.
#[test]
fn a_socket_flood_never_delays_a_probe_past_a_second() {
    let (_sim, _, mut op) = cluster_with(fast(), "probe-flood", "svc", &[]);
    let health = op.health_addr();
    let until = Instant::now() + Duration::from_secs(8);
    let probes = std::thread::scope(|s| {
        let flood = s.spawn(move || hold_sockets(health, 1000, 1, until));
        std::thread::sleep(Duration::from_secs(1));
        let mut probes = Vec::new();
        while Instant::now() + Duration::from_secs(1) < until {
            let t = Instant::now();
            probes.push((http_get_at(health, "/healthz").0, t.elapsed()));
            std::thread::sleep(Duration::from_millis(100));
        }
        let opened = flood.join().unwrap();
        assert!(opened >= 1000, "the flood opened {opened} sockets");
        probes
    });
    assert!(probes.len() >= 40, "{} probes", probes.len());
    let slowest = probes.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!(
        "{} probes under 1,000 held sockets from one address, slowest {slowest:?}",
        probes.len()
    );
    for (code, took) in &probes {
        assert_eq!(*code, 200, "{probes:?}");
        assert!(*took < Duration::from_secs(1), "a probe took {took:?}");
    }
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
    let Some(text) = read_head(&mut conn) else {
        return;
    };
    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("upstream refused: {text}"), "reason": "InternalError", "code": 500});
    let body = status.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The token never reaches a log line, whatever the
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

/// The initial lists of the four kinds, each up to the
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
        // The readiness probe's read (§9.D20) fills no cache.
        .filter(|r| r.verb == "list" && r.query != "limit=1")
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

/// Against a server that misbehaves on purpose, a 410 or an empty watch is
/// never retried at once, and an endless list never grows without bound.
/// Over eight seconds of each misbehaviour: a bounded number of
/// requests, little CPU, bounded memory, probes answered, and not ready.
#[test]
fn a_misbehaving_server_gets_backoff_and_bounded_memory() {
    let dir = tmpdir("fake-server");
    std::thread::scope(|s| {
        for how in [
            Misbehaviour::Gone,
            Misbehaviour::GoneInStream,
            Misbehaviour::CloseAtOnce,
            Misbehaviour::Garbage,
            Misbehaviour::EndlessPages,
        ] {
            let dir = &dir;
            s.spawn(move || eight_seconds_of(how, dir));
        }
    });
}

fn eight_seconds_of(how: Misbehaviour, dir: &std::path::Path) {
    use std::sync::atomic::Ordering::Relaxed;
    let (url, seen) = fake_server(how);
    let mut op = Operator::start(&url, dir, &[]);
    wait_until("the first request", || seen.lists.load(Relaxed) > 0);
    std::thread::sleep(Duration::from_secs(8));
    let (lists, watches) = (seen.lists.load(Relaxed), seen.watches.load(Relaxed));
    let cpu = op.cpu_ms().expect("reading the operator's CPU time");
    let rss_mib = op.peak_rss_kib().expect("reading the operator's peak RSS") / 1024;
    eprintln!("{how:?}: {lists} list pages, {watches} watches, {cpu} ms CPU, {rss_mib} MiB peak RSS in 8 s");
    if matches!(how, Misbehaviour::EndlessPages) {
        // Each of the five kinds given up at 1,000 pages, one list at a
        // time, then not tried again for 5 s or more: at most two lists of
        // each in 8 s, however fast the pages are read.
        assert!(lists <= 2 * 5 * 1_000, "{lists} pages");
    } else {
        assert!(lists + watches < 200, "{lists} lists, {watches} watches");
        assert!(cpu < 4_000, "{cpu} ms of CPU in 8 s ({how:?})");
    }
    assert!(rss_mib < 256, "{rss_mib} MiB peak RSS ({how:?})");
    assert_eq!(op.http_get("/healthz").0, 200, "{how:?}");
    let (code, body) = op.http_get("/readyz");
    assert_eq!(code, 503, "{how:?}: {body}");
    op.assert_clean_exit();
}

/// A server paging for ever with large items (200 of 2 KB a page): the
/// item bound alone let about 440 MB of items in, and peak RSS reached
/// 835 MB in 15 s. The byte budget (64 MiB of bodies a list) gives each
/// list up long before that, and it is tried again with backoff.
#[test]
fn endless_pages_of_large_items_are_given_up_within_the_byte_budget() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tmpdir("large-pages");
    let (url, seen) = fake_server(Misbehaviour::EndlessLargePages);
    let mut op = Operator::start(&url, &dir, &[]);
    wait_until("the first request", || seen.lists.load(Relaxed) > 0);
    std::thread::sleep(Duration::from_secs(15));
    let lists = seen.lists.load(Relaxed);
    let rss_mib = op.peak_rss_kib().expect("reading the operator's peak RSS") / 1024;
    eprintln!("endless 400 KB pages: {lists} pages in 15 s, {rss_mib} MiB peak RSS");
    assert!(rss_mib < 200, "{rss_mib} MiB peak RSS");
    assert!(
        op.log().contains("list refused: more than 64 MiB"),
        "a list given up names the byte budget"
    );
    assert_eq!(op.http_get("/healthz").0, 200);
    assert_eq!(op.http_get("/readyz").0, 503);
    op.assert_clean_exit();
}

/// A write throttled with a long Retry-After used to
/// sleep inside a worker (up to 300 s, four times), so two throttled writes
/// stopped every model for minutes. Now the key waits on the queue, the
/// client sends nothing until the server's pace has passed, and the
/// workers go on with the work that needs no request (edits planned from
/// the caches); the throttled models converge once the pace is over.
#[test]
fn throttled_writes_do_not_put_the_workers_to_sleep() {
    let (sim, _, mut op) = cluster_with(fast(), "throttled-writes", "a", &[]);
    let names = ["a", "b", "c", "d"];
    for name in &names[1..] {
        sim.create(deployment(name, 2)).unwrap();
    }
    for name in names {
        sim.create(model(name, name, V1, 600)).unwrap();
    }
    for name in names {
        wait_serving(&sim, name, V1);
    }
    let unchanged = |op: &mut Operator| {
        let m = op.http_get("/metrics").1;
        sample(
            &m,
            "openmed_operator_reconciles_total{result=\"unchanged\"}",
        )
        .unwrap_or(0.0)
    };
    sim.throttle_next_query(None, "/configmaps/(a|b)-model-manifest$", "", 2, 12);
    set_version(&sim, "a", V2);
    set_version(&sim, "b", V2);
    let throttled_at = wait_for(
        "a throttled write",
        || {
            sim.requests()
                .iter()
                .find(|r| r.status == 429)
                .map(|r| r.at_ms)
        },
        Option::is_some,
    )
    .unwrap_or(0);
    let before = unchanged(&mut op);
    // Edits of c and d that need no request: a worker awake plans each to
    // nothing while a and b wait out the pace.
    for i in 0..6 {
        for name in ["c", "d"] {
            let note = serde_json::json!({"metadata": {"annotations": {"example.com/note": i.to_string()}}});
            sim.merge_patch(MODEL.0, MODEL.1, NS, name, &note).unwrap();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let during = unchanged(&mut op) - before;
    assert!(during >= 4.0, "{during} reconciles in 6 s of throttling");
    let sent: Vec<String> = sim
        .requests()
        .iter()
        .filter(|r| r.at_ms > throttled_at + 500 && r.at_ms < throttled_at + 10_000)
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert!(sent.len() <= 1, "sent while paced: {sent:?}");
    assert_eq!(op.http_get("/healthz").0, 200);
    wait_serving(&sim, "a", V2);
    wait_serving(&sim, "b", V2);
    eprintln!(
        "{during} quiet passes in 6 s of throttling; a and b serving V2 {} ms after the 429",
        sim.clock_ms() - throttled_at
    );
    op.assert_clean_exit();
}

/// `HTTPS_PROXY` is honoured as client-go honours it
/// (before, it was ignored). The API server's name resolves only at the
/// proxy, so the operator converges only through the CONNECT tunnel, with
/// the proxy's credentials, which never reach its log even at trace.
/// `NO_PROXY` naming the server, or `--no-proxy`, goes around the proxy.
#[test]
fn the_api_server_is_reached_through_an_https_proxy() {
    let sim = start_sim(SimConfig {
        tls: true,
        ..fast()
    });
    sim.create(deployment("svc", 2)).unwrap();
    let dir = tmpdir("proxy");
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
    let (port, seen) = connect_proxy();
    let server = sim.url().replace("127.0.0.1", "kubesim.test");
    let proxy = format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{port}");
    let args = ["--ca-file", ca.to_str().unwrap()];
    let env = [("HTTPS_PROXY", proxy.as_str()), ("RUST_LOG", "trace")];
    let mut op = Operator::start_with_env(&server, &dir, &args, &env);
    op.wait_ready();
    sim.create(model("svc", "svc", V1, 600)).unwrap();
    wait_serving(&sim, "svc", V1);
    let connects = seen.lock().unwrap().clone();
    let target = server.trim_start_matches("https://");
    assert!(!connects.is_empty(), "nothing went through the proxy");
    assert!(
        connects.iter().all(|c| c.starts_with(target)),
        "{connects:?}"
    );
    let log = op.log();
    assert!(log.contains("through the proxy http://127.0.0.1"), "{log}");
    assert!(
        !log.contains(PROXY_PASSWORD),
        "the proxy password is in the log"
    );
    assert!(!log.contains(&base64(&format!("{PROXY_USER}:{PROXY_PASSWORD}"))));
    op.assert_clean_exit();

    // Around the proxy: nothing reaches it (and the name does not resolve).
    let no_proxy = [("NO_PROXY", "10.0.0.0/8,.test"), env[0]];
    let flag = [args[0], args[1], "--no-proxy"];
    for (args, env) in [(&args[..], &no_proxy[..]), (&flag[..], &env[..1])] {
        let before = seen.lock().unwrap().len();
        let mut op = Operator::start_with_env(&server, &dir, args, env);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(seen.lock().unwrap().len(), before, "{args:?} {env:?}");
        assert_eq!(op.http_get("/readyz").0, 503);
        op.assert_clean_exit();
    }
}

/// A watch whose connection goes silent without closing
/// (half-open behind NAT) was noticed only after about five minutes. Each
/// watch now asks the server to end it within 60 s and is given up 10 s
/// after that, then reopened at once: within about 70 s, whatever the
/// network does.
#[test]
fn a_silent_watch_connection_is_given_up_within_about_a_minute() {
    let (url, seen) = fake_server(Misbehaviour::Silent);
    let dir = tmpdir("half-open");
    let mut op = Operator::start(&url, &dir, &[]);
    let first = |seen: &harness::FakeSeen| seen.opened.lock().unwrap().first().cloned();
    wait_until("a first watch", || first(&seen).is_some());
    let (t0, target) = first(&seen).unwrap();
    let path = target.split('?').next().unwrap_or("").to_string();
    // The same watch again: two watches share the Deployments path (claimed
    // ones by label, all of them metadata only); the resourceVersion moves
    // and the timeout is jittered.
    let same_watch = |t: &str| {
        let query = |t: &str| -> Vec<String> {
            t.split(['?', '&'])
                .filter(|kv| {
                    !kv.starts_with("resourceVersion=") && !kv.starts_with("timeoutSeconds=")
                })
                .map(str::to_string)
                .collect()
        };
        query(t) == query(&target)
    };
    let timeout: u64 = target
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!((1..=60).contains(&timeout), "{target}");
    let again = loop {
        let opened = seen.opened.lock().unwrap().clone();
        let reopened = opened.iter().skip(1).find(|(_, t)| same_watch(t));
        if let Some((t, _)) = reopened {
            break t.duration_since(t0);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "{target} never watched again: {opened:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{path}: silent watch (timeoutSeconds={timeout}) reopened after {again:?}");
    assert!(again >= Duration::from_secs(timeout), "{again:?}");
    assert!(again <= Duration::from_secs(timeout + 15), "{again:?}");
    assert_eq!(op.http_get("/healthz").0, 200);
    op.assert_clean_exit();
}
