//! A fake API server that misbehaves on purpose: refused, cut, garbled,
//! endless or silent watches and lists, each request counted.

use super::*;
use std::net::TcpListener;

/// What the fake server does wrong.
#[derive(Clone, Copy, Debug)]
pub enum Misbehaviour {
    /// Every watch is refused with HTTP 410 Gone.
    Gone,
    /// Every watch opens (200), sends one in-stream 410 and ends.
    GoneInStream,
    /// Every watch opens (200) and ends at once, cleanly.
    CloseAtOnce,
    /// Every watch opens (200), sends a line that is not JSON and ends.
    Garbage,
    /// Every list page hands back a new `continue` token, for ever.
    EndlessPages,
    /// As [`Misbehaviour::EndlessPages`], with 200 items of 2 KB a page.
    EndlessLargePages,
    /// Every watch opens (200) and then says nothing and never closes, as a
    /// half-open connection behind NAT does.
    Silent,
}

/// Requests the fake server has answered, by kind.
#[derive(Default)]
pub struct FakeSeen {
    pub lists: std::sync::atomic::AtomicUsize,
    pub watches: std::sync::atomic::AtomicUsize,
    /// When each watch was opened, and its request target.
    pub opened: std::sync::Mutex<Vec<(Instant, String)>>,
}

/// Starts the fake server on 127.0.0.1; returns its URL and its counters.
/// Lists are empty (or endless); every watch misbehaves as asked.
pub fn fake_server(how: Misbehaviour) -> (String, std::sync::Arc<FakeSeen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(FakeSeen::default());
    let counters = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || answer(conn, how, &seen));
        }
    });
    (format!("http://{addr}"), counters)
}

/// Answers one request on `conn` and closes it.
fn answer(mut conn: TcpStream, how: Misbehaviour, seen: &FakeSeen) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(head) = read_head(&mut conn) else {
        return;
    };
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (code, body) = if target.contains("watch=") {
        seen.watches.fetch_add(1, Relaxed);
        seen.opened
            .lock()
            .unwrap()
            .push((Instant::now(), target.clone()));
        if matches!(how, Misbehaviour::Silent) {
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        watch_answer(how)
    } else {
        let n = seen.lists.fetch_add(1, Relaxed);
        (200, list_page(how, n))
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn watch_answer(how: Misbehaviour) -> (u16, String) {
    let gone = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "too old resource version: 1 (9)", "reason": "Expired", "code": 410});
    match how {
        Misbehaviour::Gone => (410, gone.to_string()),
        Misbehaviour::GoneInStream => (
            200,
            format!("{}\n", serde_json::json!({"type": "ERROR", "object": gone})),
        ),
        Misbehaviour::Garbage => (200, "<html>502 Bad Gateway</html>\n".to_string()),
        Misbehaviour::CloseAtOnce
        | Misbehaviour::EndlessPages
        | Misbehaviour::EndlessLargePages
        | Misbehaviour::Silent => (200, String::new()),
    }
}

/// An empty list; or, for [`Misbehaviour::EndlessPages`], 100 ConfigMaps
/// with a `continue` token never seen before (200 of 2 KB each for
/// [`Misbehaviour::EndlessLargePages`]).
fn list_page(how: Misbehaviour, n: usize) -> String {
    let (items, next) = match how {
        Misbehaviour::EndlessLargePages => {
            let data = "x".repeat(2000);
            let items: Vec<serde_json::Value> = (0..200)
                .map(|i| {
                    serde_json::json!({"metadata": {"name": format!("cm-{n}-{i}"),
                    "namespace": "x", "resourceVersion": "7", "uid": format!("u-{n}-{i}")},
                    "data": {"big": data}})
                })
                .collect();
            (items, Some(format!("page-{n}")))
        }
        Misbehaviour::EndlessPages => {
            let items: Vec<serde_json::Value> = (0..100)
                .map(|i| {
                    serde_json::json!({"metadata": {"name": format!("cm-{n}-{i}"),
                    "namespace": "x", "resourceVersion": "7", "uid": format!("u-{n}-{i}")}})
                })
                .collect();
            (items, Some(format!("page-{n}")))
        }
        _ => (Vec::new(), None),
    };
    serde_json::json!({"kind": "List", "apiVersion": "v1",
        "metadata": {"resourceVersion": "7", "continue": next}, "items": items})
    .to_string()
}
