//! The view's HTTP routes: the page (`/`), the snapshot as JSON
//! (`/api/models`) and the change stream (`/events`).

use super::hub::Hub;
use crate::metrics_access::{MetricsAccess, Verdict};
use crate::server::{Answer, Handler, Request};
use std::sync::Arc;

/// One self-contained page: its CSS and script inline, nothing fetched from
/// anywhere (it must work in an air-gapped cluster).
pub const PAGE: &str = include_str!("page.html");

/// Inline script and style only; no other origin, no frames.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'";

/// The routes, for callers `access` allows (everyone on loopback, where
/// there is none).
pub fn handler(hub: Arc<Hub>, access: Option<Arc<MetricsAccess>>) -> Handler {
    Arc::new(move |r: &Request| {
        if r.method != "GET" {
            return Answer::text(405, "only GET\n");
        }
        if let Some(a) = &access {
            match a.check(r.authorization.as_deref()) {
                Verdict::Allowed => {}
                Verdict::Unauthenticated => return Answer::text(401, "Unauthorized\n"),
                Verdict::Forbidden => return Answer::text(403, "Forbidden\n"),
                Verdict::Throttled => return Answer::text(429, "Too many new callers\n"),
                Verdict::Unavailable => return Answer::text(503, "cannot review the token\n"),
            }
        }
        let secure = vec![
            ("Content-Security-Policy", CSP),
            ("X-Content-Type-Options", "nosniff"),
        ];
        match r.path.as_str() {
            "/" => Answer {
                content_type: "text/html; charset=utf-8",
                headers: secure,
                ..Answer::text(200, PAGE)
            },
            "/api/models" => {
                let rows: Vec<_> = hub.rows().into_values().collect();
                Answer {
                    content_type: "application/json",
                    headers: secure,
                    ..Answer::text(200, serde_json::to_string(&rows).unwrap_or_default())
                }
            }
            "/events" => match hub.join() {
                Some(viewer) => Answer {
                    content_type: "text/event-stream",
                    headers: vec![
                        ("Cache-Control", "no-cache"),
                        ("X-Content-Type-Options", "nosniff"),
                    ],
                    stream: Some(Box::new(move |out| viewer.serve(out))),
                    ..Answer::text(200, "")
                },
                None => Answer::text(503, "too many viewers\n"),
            },
            _ => Answer::text(404, "not found\n"),
        }
    })
}
