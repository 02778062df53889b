//! The HTTP servers: health (/healthz, /readyz; plain, for the kubelet)
//! and metrics (/metrics; TLS and authenticated by default, issue 11).
//!
//! A small HTTP/1.1 server of our own, so that no client can hold the
//! probes hostage (issue 9): each connection gets its own thread, at most
//! [`MAX_CONNECTIONS`] at once per server (more are closed at once), and
//! must finish its TLS handshake and send its request head within
//! [`REQUEST_DEADLINE`]; a body is never read, and every answer closes the
//! connection. A client trickling bytes costs one slot for a few seconds,
//! and the kubelet's probes, on their own server, are answered meanwhile.

use crate::health::Health;
use crate::metrics::Metrics;
use crate::metrics_access::{TokenAccess, Verdict, METRICS_PATH};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections served at once; the rest are closed unanswered.
pub const MAX_CONNECTIONS: usize = 32;
/// Time a client has to send its request line and headers.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Largest request head read; a longer one is answered 431.
const MAX_HEAD: usize = 8 << 10;

/// What a handler is told of a request (the body is never read).
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// Without the query.
    pub path: String,
    /// The `Authorization` header, never logged.
    pub authorization: Option<String>,
    /// The `Host` header.
    pub host: Option<String>,
}

/// A handler's answer.
pub struct Answer {
    pub code: u16,
    pub body: String,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    /// Instead of `body`: written to for as long as it likes (a stream of
    /// Server-Sent Events); each write still has [`REQUEST_DEADLINE`].
    pub stream: Option<StreamBody>,
}

/// A body written as it comes, for as long as the writer likes.
pub type StreamBody = Box<dyn FnOnce(&mut dyn Write) + Send>;

impl Answer {
    pub fn text(code: u16, body: impl Into<String>) -> Answer {
        Answer {
            code,
            body: body.into(),
            content_type: "text/plain",
            headers: Vec::new(),
            stream: None,
        }
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

/// Serve `handler` on `addr` (over TLS with `tls`) until the process
/// exits. Binding failure is returned to the caller.
pub fn start(
    name: &'static str,
    addr: SocketAddr,
    tls: Option<Arc<ServerConfig>>,
    handler: Handler,
) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name(format!("{name}-server"))
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => admit(stream, &active, &tls, &handler),
                    // Out of descriptors, say: do not spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })
        .map_err(|e| format!("cannot start the {name} server: {e}"))?;
    Ok(bound)
}

/// /healthz and /readyz.
pub fn health(health: Arc<Health>) -> Handler {
    Arc::new(move |r: &Request| {
        if r.method != "GET" {
            return Answer::text(405, "only GET\n");
        }
        let verdict = match r.path.as_str() {
            "/healthz" => health.check().map_err(|e| format!("unhealthy: {e}\n")),
            "/readyz" => health.readiness().map_err(|e| format!("not ready: {e}\n")),
            _ => return Answer::text(404, "not found\n"),
        };
        match verdict {
            Ok(()) => Answer::text(200, "ok\n"),
            Err(e) => Answer::text(503, e),
        }
    })
}

/// /metrics, for callers `access` allows (everyone without it).
pub fn metrics(metrics: Arc<Metrics>, access: Option<Arc<TokenAccess>>) -> Handler {
    Arc::new(move |r: &Request| {
        if r.method != "GET" {
            return Answer::text(405, "only GET\n");
        }
        if r.path != METRICS_PATH {
            return Answer::text(404, "not found\n");
        }
        let verdict = access
            .as_ref()
            .map_or(Verdict::Allowed, |a| a.check(r.authorization.as_deref()));
        metrics.metrics_access(verdict.as_str());
        refusal(verdict).unwrap_or_else(|| Answer {
            content_type: "text/plain; version=0.0.4",
            ..Answer::text(200, metrics.render())
        })
    })
}

/// The answer to a caller `verdict` does not let in (None: let in).
pub fn refusal(verdict: Verdict) -> Option<Answer> {
    Some(match verdict {
        Verdict::Allowed => return None,
        Verdict::Unauthenticated => Answer {
            headers: vec![("WWW-Authenticate", "Bearer")],
            ..Answer::text(401, "Unauthorized: a bearer token the API server knows\n")
        },
        Verdict::Forbidden => Answer::text(403, "Forbidden: your user may not get this path\n"),
        Verdict::Throttled => Answer {
            headers: vec![("Retry-After", "1")],
            ..Answer::text(429, "Too many new callers; retry in a second\n")
        },
        Verdict::Unavailable => Answer::text(503, "cannot review the token now\n"),
    })
}

/// The socket with a deadline that every read checks, so that no reader
/// above it can wait past it: rustls reads in a loop of its own until a
/// record is complete, and a client sending a byte every few seconds would
/// otherwise keep a TLS connection (and its slot) for ever.
struct Deadlined {
    sock: TcpStream,
    deadline: Option<Instant>,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            self.sock.set_read_timeout(Some(left))?;
        }
        self.sock.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// A connection, plain or TLS, over a [`Deadlined`] socket.
trait Conn: Read + Write {
    fn socket(&mut self) -> &mut Deadlined;
    /// Ends the connection cleanly (TLS: close_notify).
    fn finish(&mut self) {}
}

impl Conn for Deadlined {
    fn socket(&mut self) -> &mut Deadlined {
        self
    }
}

impl Conn for StreamOwned<ServerConnection, Deadlined> {
    fn socket(&mut self) -> &mut Deadlined {
        &mut self.sock
    }
    fn finish(&mut self) {
        self.conn.send_close_notify();
        let _ = self.flush();
    }
}

/// Serve `stream` on a thread of its own, or close it when every slot is
/// taken (a slot is released when its thread ends).
fn admit(
    stream: TcpStream,
    active: &Arc<AtomicUsize>,
    tls: &Option<Arc<ServerConfig>>,
    handler: &Handler,
) {
    if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let (slot, tls, handler) = (active.clone(), tls.clone(), handler.clone());
    let spawned = std::thread::Builder::new()
        .name("http-conn".into())
        .spawn(move || {
            let sock = Deadlined {
                sock: stream,
                deadline: Some(Instant::now() + REQUEST_DEADLINE),
            };
            match tls.map(ServerConnection::new) {
                None => serve(sock, &handler),
                Some(Ok(conn)) => serve(StreamOwned::new(conn, sock), &handler),
                Some(Err(e)) => log::warn!("TLS connection refused: {e}"),
            }
            slot.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve(mut stream: impl Conn, handler: &Handler) {
    let answer = match read_head(&mut stream) {
        Head::Request(r) => handler(&r),
        Head::TooLarge => Answer::text(431, "request head too large\n"),
        Head::Gone => return,
    };
    // The head is in: reads are no longer bounded by the deadline (a
    // stream's reader never reads), each write is.
    let sock = stream.socket();
    sock.deadline = None;
    let _ = sock.sock.set_write_timeout(Some(REQUEST_DEADLINE));
    let reason = match answer.code {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nConnection: close\r\n",
        answer.code, answer.content_type,
    );
    if answer.stream.is_none() {
        head.push_str(&format!("Content-Length: {}\r\n", answer.body.len()));
    }
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(answer.body.as_bytes());
    let _ = stream.flush();
    if let Some(body) = answer.stream {
        body(&mut stream);
    }
    stream.finish();
}

enum Head {
    /// A complete head.
    Request(Request),
    TooLarge,
    /// Closed, timed out or not HTTP: nothing to answer.
    Gone,
}

/// Read up to the blank line ending the head, within the socket's deadline
/// (which covers a TLS handshake: rustls does it in the first read).
fn read_head(stream: &mut impl Conn) -> Head {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() > MAX_HEAD {
            return Head::TooLarge;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    match std::str::from_utf8(&buf) {
        Ok(head) => parse_head(head).map_or(Head::Gone, Head::Request),
        Err(_) => Head::Gone,
    }
}

/// The request line and the one header a handler needs.
fn parse_head(head: &str) -> Option<Request> {
    let mut lines = head.lines();
    let mut parts = lines.next()?.split_ascii_whitespace();
    let (method, target) = (parts.next()?, parts.next()?);
    let headers: Vec<(&str, &str)> = lines
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_string())
    };
    Some(Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or("").to_string(),
        authorization: header("authorization"),
        host: header("host"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_its_method_path_and_authorization_only() {
        let r = parse_head(
            "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:  Bearer t0k \r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer t0k"));
        let r = parse_head("GET /healthz HTTP/1.0\nHOST: localhost:8081\n\n").unwrap();
        assert_eq!(r.authorization, None);
        assert_eq!(r.host.as_deref(), Some("localhost:8081"));
        assert!(parse_head("\r\n").is_none());
    }
}
