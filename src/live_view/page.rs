//! The view's HTTP routes: the page (`/`), the snapshot as JSON
//! (`/api/models`) and the change stream (`/events`).

use super::hub::Hub;
use crate::server::{Answer, Handler, Request};
use crate::token_access::{TokenAccess, Verdict};
use std::sync::Arc;

/// One self-contained page: its CSS and script inline, nothing fetched from
/// anywhere (it must work in an air-gapped cluster).
pub const PAGE: &str = include_str!("page.html");

/// Inline script and style only; no other origin, no frames.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'";

/// The routes, for callers `access` allows (everyone on loopback, where
/// there is none).
pub fn handler(hub: Arc<Hub>, access: Option<Arc<TokenAccess>>) -> Handler {
    Arc::new(move |r: &Request| {
        if r.method != "GET" {
            return Answer::text(405, "only GET\n");
        }
        let verdict = match &access {
            Some(a) => a.check(r.authorization.as_deref(), r.peer),
            // Open on loopback, to this machine's names only: a page of
            // another site whose name was made to point at 127.0.0.1 (DNS
            // rebinding) sends its own name and is refused.
            None if !local_host(r.host.as_deref()) => {
                return Answer::text(403, "Forbidden: not a loopback host name\n")
            }
            None => Verdict::Allowed,
        };
        if let Some(no) = verdict.refusal() {
            return no;
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

/// Whether a `Host` header names this machine's loopback (any port); a
/// request without one (HTTP/1.0) is taken as local.
fn local_host(host: Option<&str>) -> bool {
    let Some(h) = host else { return true };
    let name = match h.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => h.rsplit_once(':').map_or(h, |(n, _)| n),
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_access::Reviewer;

    /// Knows one token, allowed.
    struct One;

    impl Reviewer for One {
        fn review(&self, token: &str) -> Result<Verdict, String> {
            Ok(match token {
                "viewer" => Verdict::Allowed,
                _ => Verdict::Unauthenticated,
            })
        }
    }

    struct NoRows;

    impl super::super::hub::Source for NoRows {
        fn rows(&self) -> std::collections::BTreeMap<String, super::super::Row> {
            Default::default()
        }
        fn version(&self) -> u64 {
            0
        }
    }

    fn get(h: &Handler, path: &str, token: Option<&str>) -> Answer {
        h(&Request {
            method: "GET".into(),
            path: path.into(),
            authorization: token.map(|t| format!("Bearer {t}")),
            host: Some("127.0.0.1:8081".into()),
            peer: [127, 0, 0, 1].into(),
        })
    }

    #[test]
    fn off_loopback_every_route_needs_a_token_the_api_server_allows() {
        let access = Arc::new(TokenAccess::new(Box::new(One)));
        let h = handler(Hub::new(Box::new(NoRows)), Some(access));
        for path in ["/", "/api/models", "/events"] {
            assert_eq!(get(&h, path, None).code, 401, "{path}");
            assert_eq!(get(&h, path, Some("forged")).code, 401, "{path}");
        }
        let page = get(&h, "/", Some("viewer"));
        assert_eq!(page.code, 200);
        assert!(page
            .headers
            .iter()
            .any(|(k, v)| *k == "Content-Security-Policy" && v.contains("default-src 'none'")));
        assert_eq!(get(&h, "/api/models", Some("viewer")).body, "[]");
        assert!(get(&h, "/events", Some("viewer")).stream.is_some());
    }

    #[test]
    fn on_loopback_the_routes_are_open_and_nothing_else_is_served() {
        let h = handler(Hub::new(Box::new(NoRows)), None);
        assert_eq!(get(&h, "/", None).code, 200);
        assert_eq!(get(&h, "/metrics", None).code, 404);
        let post = h(&Request {
            method: "POST".into(),
            path: "/".into(),
            authorization: None,
            host: None,
            peer: [127, 0, 0, 1].into(),
        });
        assert_eq!(post.code, 405);
        let at = |host: &str| {
            h(&Request {
                method: "GET".into(),
                path: "/api/models".into(),
                authorization: None,
                host: Some(host.into()),
                peer: [127, 0, 0, 1].into(),
            })
            .code
        };
        for ok in ["localhost:8081", "127.0.0.1", "[::1]:8081", "LOCALHOST"] {
            assert_eq!(at(ok), 200, "{ok}");
        }
        for rebound in [
            "evil.example:8081",
            "evil.example",
            "127.0.0.1.nip.io",
            "[::2]:80",
        ] {
            assert_eq!(at(rebound), 403, "{rebound}");
        }
    }
}
