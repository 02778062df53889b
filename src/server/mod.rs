//! The HTTP servers: health (/healthz, /readyz; plain, for the kubelet),
//! metrics (/metrics; TLS and authenticated by default) and the live view.
//!
//! A small HTTP/1.1 server of our own, so that no client can hold the
//! probes hostage: one event loop per server ([`event_loop`]) over
//! non-blocking sockets, where an idle or trickling connection costs a
//! table entry and its buffered bytes, never a thread. Each connection must
//! finish its TLS handshake and send its request head within
//! [`REQUEST_DEADLINE`], and take its answer within as long again; a body
//! is never read, and every answer closes the connection. At capacity the
//! oldest connection makes room for the newest.

mod conn;
mod event_loop;

use rustls::ServerConfig;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

/// Connections one server holds open at most (fewer when the process may
/// open few descriptors: see [`capacity`]).
pub const MAX_OPEN: usize = 1024;
/// Time a client has to send its request line and headers, and again to
/// take its answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Descriptors left to the rest of the process (API connections, files).
const RESERVED_FDS: u64 = 256;
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
    /// The client's address (its share of the token reviews).
    pub peer: IpAddr,
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
    event_loop::spawn(name, listener, tls, handler, capacity())?;
    Ok(bound)
}

/// Connections one server may hold: a quarter of the descriptors the
/// process may open beyond [`RESERVED_FDS`] (three servers and room to
/// spare), at most [`MAX_OPEN`]. The soft limit is raised to the hard one
/// first, as Go's runtime does at start, since container runtimes often
/// leave it at 1,024.
fn capacity() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 16;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    (soft.saturating_sub(RESERVED_FDS) / 4).clamp(16, MAX_OPEN as u64) as usize
}

/// The status line and headers of `answer` (its body follows, or its
/// stream does).
fn head_bytes(answer: &Answer) -> Vec<u8> {
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
    let mut head = Vec::with_capacity(160);
    let _ = write!(
        head,
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nConnection: close\r\n",
        answer.code, answer.content_type,
    );
    if answer.stream.is_none() {
        let _ = write!(head, "Content-Length: {}\r\n", answer.body.len());
    }
    for (k, v) in &answer.headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// The request line and the headers a handler needs.
fn parse_head(head: &str, peer: IpAddr) -> Option<Request> {
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
        peer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_its_method_path_and_authorization_only() {
        let peer = IpAddr::from([127, 0, 0, 2]);
        let r = parse_head(
            "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:  Bearer t0k \r\n\r\n",
            peer,
        )
        .unwrap();
        assert_eq!(r.peer, peer);
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer t0k"));
        let r = parse_head("GET /healthz HTTP/1.0\nHOST: localhost:8081\n\n", peer).unwrap();
        assert_eq!(r.authorization, None);
        assert_eq!(r.host.as_deref(), Some("localhost:8081"));
        assert!(parse_head("\r\n", peer).is_none());
    }
}
