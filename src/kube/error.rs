//! Typed errors for everything the API client can run into.
//!
//! An API error keeps the HTTP code and the server's `Status` reason so callers
//! can branch on meaning (NotFound, Conflict, Expired) rather than on text.
//! Messages from the server are sanitized: cut short and stripped of control
//! characters, so a hostile or broken server cannot flood our logs.

use std::fmt;
use std::time::Duration;

/// The `reason` of a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiReason {
    NotFound,
    AlreadyExists,
    Conflict,
    Expired,
    Gone,
    TooManyRequests,
    Unauthorized,
    Forbidden,
    Invalid,
    BadRequest,
    MethodNotAllowed,
    UnsupportedMediaType,
    Timeout,
    InternalError,
    ServiceUnavailable,
    Other(String),
}

impl ApiReason {
    pub fn parse(s: &str) -> ApiReason {
        match s {
            "NotFound" => ApiReason::NotFound,
            "AlreadyExists" => ApiReason::AlreadyExists,
            "Conflict" => ApiReason::Conflict,
            "Expired" => ApiReason::Expired,
            "Gone" => ApiReason::Gone,
            "TooManyRequests" => ApiReason::TooManyRequests,
            "Unauthorized" => ApiReason::Unauthorized,
            "Forbidden" => ApiReason::Forbidden,
            "Invalid" => ApiReason::Invalid,
            "BadRequest" => ApiReason::BadRequest,
            "MethodNotAllowed" => ApiReason::MethodNotAllowed,
            "UnsupportedMediaType" => ApiReason::UnsupportedMediaType,
            "Timeout" => ApiReason::Timeout,
            "InternalError" => ApiReason::InternalError,
            "ServiceUnavailable" => ApiReason::ServiceUnavailable,
            other => ApiReason::Other(sanitize(other, 64)),
        }
    }

    /// The reason a bare HTTP code implies when the body carries none.
    pub fn from_code(code: u16) -> ApiReason {
        match code {
            400 => ApiReason::BadRequest,
            401 => ApiReason::Unauthorized,
            403 => ApiReason::Forbidden,
            404 => ApiReason::NotFound,
            405 => ApiReason::MethodNotAllowed,
            409 => ApiReason::Conflict,
            410 => ApiReason::Gone,
            415 => ApiReason::UnsupportedMediaType,
            422 => ApiReason::Invalid,
            429 => ApiReason::TooManyRequests,
            500 => ApiReason::InternalError,
            503 => ApiReason::ServiceUnavailable,
            504 => ApiReason::Timeout,
            _ => ApiReason::Other(String::new()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ApiReason::NotFound => "NotFound",
            ApiReason::AlreadyExists => "AlreadyExists",
            ApiReason::Conflict => "Conflict",
            ApiReason::Expired => "Expired",
            ApiReason::Gone => "Gone",
            ApiReason::TooManyRequests => "TooManyRequests",
            ApiReason::Unauthorized => "Unauthorized",
            ApiReason::Forbidden => "Forbidden",
            ApiReason::Invalid => "Invalid",
            ApiReason::BadRequest => "BadRequest",
            ApiReason::MethodNotAllowed => "MethodNotAllowed",
            ApiReason::UnsupportedMediaType => "UnsupportedMediaType",
            ApiReason::Timeout => "Timeout",
            ApiReason::InternalError => "InternalError",
            ApiReason::ServiceUnavailable => "ServiceUnavailable",
            ApiReason::Other(s) => s,
        }
    }
}

/// A non-success answer from the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: ApiReason,
    pub message: String,
    /// From the `Retry-After` header or `details.retryAfterSeconds`.
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The server answered with a non-2xx status.
    Api(ApiError),
    /// Connecting, TLS or the connection itself failed.
    Transport(String),
    /// A connect, request or read timeout expired.
    Timeout(String),
    /// The body was not JSON, or not the shape we expected.
    Decode(String),
    /// The body was larger than the configured cap.
    BodyTooLarge { limit: u64 },
    /// The server answered with a redirect, which we never follow.
    Redirect { code: u16 },
    /// Not sent: the server's Retry-After is still running.
    Throttled { retry_after: Duration },
    /// A paged list broke a bound: too many pages or items, or a
    /// `continue` token handed back twice (a server that pages forever).
    ListBound(String),
    /// A write not sent: this process does not hold the leader lease (or
    /// has not renewed it within the renew deadline).
    NotLeader,
    /// The endpoint, a guard or a credential file is unusable.
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(a) => Some(a),
            _ => None,
        }
    }

    pub fn code(&self) -> Option<u16> {
        self.api().map(|a| a.code)
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self.api(), Some(a) if a.code == 404)
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self.api(), Some(a) if a.code == 409 && a.reason != ApiReason::AlreadyExists)
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self.api(), Some(a) if a.reason == ApiReason::AlreadyExists)
    }

    /// "Resource version too old": the caller must relist.
    pub fn is_gone(&self) -> bool {
        matches!(self.api(), Some(a) if a.code == 410 || a.reason == ApiReason::Expired || a.reason == ApiReason::Gone)
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Throttled { retry_after } => Some(*retry_after),
            _ => self.api().and_then(|a| a.retry_after),
        }
    }

    /// A refusal that retrying will not cure (9.19): a 4xx other than
    /// 401 (credentials rotate), 404 (the object went), 408, 409, 410 and 429.
    pub fn is_refusal(&self) -> bool {
        matches!(self.api(), Some(a) if (400..500).contains(&a.code)
            && !matches!(a.code, 401 | 404 | 408 | 409 | 410 | 429))
    }

    /// The `kind` label of `reconcile_errors_total`: `api_<code>`,
    /// `transport`, `timeout` or `other`.
    pub fn kind_label(&self) -> String {
        match self {
            Error::Api(a) => format!("api_{}", a.code),
            Error::Timeout(_) => "timeout".into(),
            Error::Transport(_) => "transport".into(),
            Error::Throttled { .. } => "throttled".into(),
            _ => "other".into(),
        }
    }

    /// Worth another try for a read: throttling, server trouble, network trouble.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Api(a) => a.code == 429 || (500..600).contains(&a.code) && a.code != 501,
            Error::Transport(_) | Error::Timeout(_) | Error::Throttled { .. } => true,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(a) => {
                write!(f, "API error {} {}", a.code, a.reason.as_str())?;
                if !a.message.is_empty() {
                    write!(f, ": {}", a.message)?;
                }
                Ok(())
            }
            Error::Transport(m) => write!(f, "transport error: {m}"),
            Error::Timeout(m) => write!(f, "timed out: {m}"),
            Error::Decode(m) => write!(f, "malformed response: {m}"),
            Error::BodyTooLarge { limit } => {
                write!(f, "response body larger than the {limit}-byte cap; refused")
            }
            Error::Redirect { code } => write!(
                f,
                "server answered with redirect {code}; redirects are never followed"
            ),
            Error::Config(m) => write!(f, "{m}"),
            Error::ListBound(m) => write!(f, "list refused: {m}"),
            Error::NotLeader => write!(f, "write not sent: not the leader"),
            Error::Throttled { retry_after } => write!(
                f,
                "not sent: the API server asked for a pause of {} ms more (Retry-After)",
                retry_after.as_millis()
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Redact credentials (a server may echo the request it refused), then
/// escape control characters and cut to `max` characters.
pub fn sanitize(s: &str, max: usize) -> String {
    crate::foreign::bounded(crate::redact::redact(s), max)
}

/// Build an [`ApiError`] from a status code and whatever body came with it.
/// A body that is not a `Status` object still yields an error classified by code.
pub fn api_error_from_body(code: u16, body: &[u8], retry_after: Option<Duration>) -> ApiError {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let status = parsed
        .as_ref()
        .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some("Status"));
    let reason = status
        .and_then(|s| s.get("reason"))
        .and_then(|r| r.as_str())
        .filter(|r| !r.is_empty())
        .map(ApiReason::parse)
        .unwrap_or_else(|| ApiReason::from_code(code));
    let message = status
        .and_then(|s| s.get("message"))
        .and_then(|m| m.as_str())
        .map(|m| sanitize(m, 400))
        .unwrap_or_default();
    let detail_retry = status
        .and_then(|s| s.pointer("/details/retryAfterSeconds"))
        .and_then(|v| v.as_u64())
        .map(Duration::from_secs);
    ApiError {
        code,
        reason,
        message,
        // Capped, so no key waits longer than a minute on what a server
        // (or a proxy) asks.
        retry_after: retry_after
            .or(detail_retry)
            .map(|d| d.min(crate::backoff::RETRY_AFTER_CAP)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_capped_at_a_minute() {
        let e = api_error_from_body(429, b"", Some(Duration::from_secs(3600)));
        assert_eq!(e.retry_after, Some(Duration::from_secs(60)));
        let e = api_error_from_body(429, b"", Some(Duration::from_secs(3)));
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn status_body_keeps_code_reason_and_message() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","code":404}"#;
        let e = api_error_from_body(404, body, None);
        assert_eq!(e.code, 404);
        assert_eq!(e.reason, ApiReason::NotFound);
        assert_eq!(e.message, "configmaps \"x\" not found");
        assert!(Error::Api(e).is_not_found());
    }

    #[test]
    fn non_status_body_is_classified_by_code() {
        let e = api_error_from_body(503, b"<html>busy</html>", Some(Duration::from_secs(3)));
        assert_eq!(e.reason, ApiReason::ServiceUnavailable);
        assert_eq!(e.message, "");
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
        assert!(Error::Api(e).is_transient());
    }

    #[test]
    fn expired_and_gone_both_mean_relist() {
        for (code, reason) in [(410, "Expired"), (410, "Gone"), (200, "Expired")] {
            let body = format!(r#"{{"kind":"Status","reason":"{reason}","code":{code}}}"#);
            let e = Error::Api(api_error_from_body(code, body.as_bytes(), None));
            assert!(e.is_gone(), "{code} {reason}");
        }
    }

    #[test]
    fn conflict_is_not_already_exists() {
        let ae = Error::Api(api_error_from_body(
            409,
            br#"{"kind":"Status","reason":"AlreadyExists","code":409}"#,
            None,
        ));
        let c = Error::Api(api_error_from_body(
            409,
            br#"{"kind":"Status","reason":"Conflict","code":409}"#,
            None,
        ));
        assert!(ae.is_already_exists() && !ae.is_conflict());
        assert!(c.is_conflict() && !c.is_already_exists());
    }

    #[test]
    fn messages_are_cut_and_cleaned() {
        let long = format!("a\u{1b}[31mb{}", "x".repeat(1000));
        let s = sanitize(&long, 20);
        assert!(!s.contains('\u{1b}'));
        assert_eq!(s.chars().count(), 20);
        assert!(s.starts_with("a\\u{1b}[31mb"), "{s}");
    }
}
