//! The health and metrics endpoint: /healthz, /readyz, /metrics.
//!
//! A small HTTP/1.1 server of our own, so that no client can hold the
//! probes hostage (issue 9): each connection gets its own thread, at most
//! [`MAX_CONNECTIONS`] at once (more are closed at once), and must send its
//! request head within [`REQUEST_DEADLINE`]; a body is never read, and
//! every answer closes the connection. A client trickling bytes costs one
//! slot for a few seconds, and the kubelet's probes are answered meanwhile.

use crate::health::Health;
use crate::metrics::Metrics;
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

/// Serve until the process exits. Binding failure is returned to the caller.
pub fn start(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("health-server".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => admit(stream, &active, &health, &metrics),
                    // Out of descriptors, say: do not spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })
        .map_err(|e| format!("cannot start the health server: {e}"))?;
    Ok(bound)
}

/// Serve `stream` on a thread of its own, or close it when every slot is
/// taken (a slot is released when its thread ends).
fn admit(
    stream: TcpStream,
    active: &Arc<AtomicUsize>,
    health: &Arc<Health>,
    metrics: &Arc<Metrics>,
) {
    if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let (slot, health, metrics) = (active.clone(), health.clone(), metrics.clone());
    let spawned = std::thread::Builder::new()
        .name("health-conn".into())
        .spawn(move || {
            serve(stream, &health, &metrics);
            slot.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve(mut stream: TcpStream, health: &Health, metrics: &Metrics) {
    let (code, body, ctype) = match read_head(&mut stream) {
        Head::Line(line) => route(&line, health, metrics),
        Head::TooLarge => (431, "request head too large\n".into(), "text/plain"),
        Head::Gone => return,
    };
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}

/// The answer to a request line such as `GET /healthz HTTP/1.1`.
fn route(line: &str, health: &Health, metrics: &Metrics) -> (u16, String, &'static str) {
    let mut parts = line.split_ascii_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return (405, "only GET\n".into(), "text/plain");
    }
    match target.split('?').next().unwrap_or("") {
        "/healthz" => match health.check() {
            Ok(()) => (200, "ok\n".into(), "text/plain"),
            Err(e) => (503, format!("unhealthy: {e}\n"), "text/plain"),
        },
        "/readyz" => match health.readiness() {
            Ok(()) => (200, "ok\n".into(), "text/plain"),
            Err(e) => (503, format!("not ready: {e}\n"), "text/plain"),
        },
        "/metrics" => (200, metrics.render(), "text/plain; version=0.0.4"),
        _ => (404, "not found\n".into(), "text/plain"),
    }
}

enum Head {
    /// The request line of a complete head.
    Line(String),
    TooLarge,
    /// Closed, timed out or not HTTP: nothing to answer.
    Gone,
}

/// Read up to the blank line ending the head, within the deadline.
fn read_head(stream: &mut TcpStream) -> Head {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() > MAX_HEAD {
            return Head::TooLarge;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::Gone;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(line) => Head::Line(line.trim_end().to_string()),
        Err(_) => Head::Gone,
    }
}
