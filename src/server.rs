//! The health and metrics endpoint: /healthz, /readyz, /metrics.

use crate::health::Health;
use crate::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serve until the process exits. Binding failure is returned to the caller.
pub fn start(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> Result<SocketAddr, String> {
    let server =
        tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("cannot listen on {addr}: not an IP address"))?;
    std::thread::Builder::new()
        .name("health-server".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let (code, body, ctype) = match req.url().split('?').next().unwrap_or("") {
                    "/healthz" => match health.check() {
                        Ok(()) => (200, "ok\n".to_string(), "text/plain"),
                        Err(e) => (503, format!("unhealthy: {e}\n"), "text/plain"),
                    },
                    "/readyz" => match health.readiness() {
                        Ok(()) => (200, "ok\n".to_string(), "text/plain"),
                        Err(e) => (503, format!("not ready: {e}\n"), "text/plain"),
                    },
                    "/metrics" => (200, metrics.render(), "text/plain; version=0.0.4"),
                    _ => (404, "not found\n".to_string(), "text/plain"),
                };
                let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes());
                let mut resp = tiny_http::Response::from_string(body).with_status_code(code);
                if let Ok(h) = header {
                    resp = resp.with_header(h);
                }
                let _ = req.respond(resp);
            }
        })
        .map_err(|e| format!("cannot start the health server: {e}"))?;
    Ok(bound)
}
