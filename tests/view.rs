//! The live status view (docs/operations.md), end to end against kubesim: the page,
//! `/api/models`, and the change stream as an EventSource reads it; a stuck
//! viewer does not delay reconciling. (The browser test is
//! tests/ui/view.test.mjs, run by scripts/ui-e2e.sh.)

use openmed_test_support as harness;

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
    // The Event reaches the operator's cache by its own watch, a moment
    // after the simulator holds it.
    let rows = wait_for(
        "the model's row with its RolloutSucceeded Event",
        || {
            let (code, body) = http_get_at(addr, "/api/models");
            assert_eq!(code, 200);
            serde_json::from_str::<Value>(&body).unwrap()
        },
        |rows| {
            rows[0]["events"]
                .as_array()
                .is_some_and(|es| es.iter().any(|e| e["reason"] == "RolloutSucceeded"))
        },
    );
    let r = &rows[0];
    assert_eq!(
        (r["key"].as_str(), r["phase"].as_str()),
        (Some("openmed/svc"), Some("Ready"))
    );
    assert_eq!(r["active"], V1);
    assert_eq!(r["progress"]["desired"], 2);
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

/// A viewer that reads its stream's head, then never reads again. Its
/// receive buffer is the kernel's least, so that a few changes fill its
/// socket and the view's writer blocks on it.
fn stuck_viewer(addr: SocketAddr) -> TcpStream {
    let mut s = small_buffer_socket(addr);
    write!(s, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "a viewer was refused");
    s
}

/// A TCP connection to `addr` whose receive buffer is set small before
/// the connection is made (the window is fixed then).
fn small_buffer_socket(addr: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(a) = addr else {
        panic!("the view listens on IPv4 loopback here: {addr}")
    };
    let len = |n: usize| libc::socklen_t::try_from(n).expect("a small size");
    // SAFETY: a new socket owned by the TcpStream at once; the option and
    // the address are plain values of the sizes given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let size: libc::c_int = 1024;
        let opt = std::ptr::addr_of!(size).cast();
        let rc = libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, opt, len(4));
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let to = std::ptr::addr_of!(sin).cast();
        let rc = libc::connect(fd, to, len(std::mem::size_of::<libc::sockaddr_in>()));
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

/// Whether the view lets in `n` more viewers now and refuses the next.
fn places_free(addr: SocketAddr, n: usize) -> bool {
    let admitted: Vec<Option<TcpStream>> = (0..n).map(|_| join_events(addr, b"200")).collect();
    let all = admitted.iter().all(Option::is_some);
    all && join_events(addr, b"503").is_some()
}

/// A request for `/events` whose answer starts with `status`, read as
/// far as the status code only: an admitted stream never ends, so a probe
/// must not read it to its end.
fn join_events(addr: SocketAddr, status: &[u8; 3]) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    write!(s, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    (head.starts_with(b"HTTP/1.1 ") && &head[9..] == status).then_some(s)
}

/// Everything left on `s` up to its end, or None if it has not ended
/// within `limit`.
fn drain_to_end(mut s: TcpStream, limit: Duration) -> Option<usize> {
    let until = Instant::now() + limit;
    let mut total = 0;
    let mut buf = [0u8; 16 * 1024];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n,
            Err(e) => {
                eprintln!("drain: {e} after {total} bytes");
                return None;
            }
        }
    }
    None
}

fn stuck_viewers_do_not_delay_the_operator(sim: &Sim, addr: SocketAddr) {
    // Ten viewers that never read, and five readers: with the test's own,
    // they fill the view's sixteen places, and a 17th is refused.
    let stuck: Vec<TcpStream> = (0..10).map(|_| stuck_viewer(addr)).collect();
    let readers: Vec<Viewer> = (0..5).map(|_| Viewer::connect(addr)).collect();
    // A reader has its place once its head has come: the view joins a
    // viewer before it answers.
    for r in &readers {
        r.wait(0, "HTTP/1.1 200");
    }
    assert!(
        places_free(addr, 0),
        "a 17th viewer was let in: the stuck ones are not attached"
    );
    // Changes, until a reader has been sent far more than a stuck viewer's
    // socket holds; meanwhile each is patched into the Deployment as fast
    // as ever.
    let mut lat = Vec::new();
    let mut last = V2;
    for version in [V1, V2].iter().cycle().take(MAX_CHANGES) {
        let since = sim.clock_ms();
        set_version(sim, "svc", version);
        wait_until("the Deployment patched", || {
            patched_after(sim, since).is_some()
        });
        lat.push(patched_after(sim, since).unwrap_or(0));
        wait_serving(sim, "svc", version);
        last = version;
        if readers[0].len() >= STUCK_AFTER {
            break;
        }
    }
    let sent = readers[0].len();
    eprintln!("change -> Deployment patch with 10 stuck viewers: {lat:?} ms; {sent} bytes sent");
    assert!(lat.iter().all(|ms| *ms < 2_000), "{lat:?}");
    assert!(
        sent >= STUCK_AFTER,
        "{} changes sent only {sent} bytes",
        lat.len()
    );
    // A write blocked past the server's deadline (5 s) cuts its viewer off:
    // each stuck one ends after what its socket held, and its place is free.
    std::thread::sleep(Duration::from_secs(6));
    for s in stuck {
        let got = drain_to_end(s, Duration::from_secs(10));
        eprintln!("a stuck viewer held {got:?} bytes when it was cut off");
        assert!(
            got.is_some_and(|n| n < sent),
            "a stuck viewer was not cut off: {got:?} of {sent} bytes"
        );
    }
    assert!(
        places_free(addr, 10),
        "the stuck viewers' places were not freed"
    );
    // The readers were never cut off: each one's latest row serves the
    // last version.
    for r in &readers {
        let seen = r.0.lock().unwrap().clone();
        let latest = seen.rsplit("\"active\":\"").next().unwrap_or("");
        assert!(
            latest.starts_with(last),
            "a reader was cut off: {latest:.80}"
        );
    }
}

/// Bytes a reader is sent before the stuck viewers count as stuck: about
/// three times what a socket with the least receive buffer (2.3 KiB) and
/// the stream's send buffer (32 KiB as the kernel counts it) may hold; 16
/// KiB is what one held here.
const STUCK_AFTER: usize = 96 * 1024;
const MAX_CHANGES: usize = 60;

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
