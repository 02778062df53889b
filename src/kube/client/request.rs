//! One request: its verb and shape, the attempts it gets (the server's
//! pace, the rate limit, the write gate, a re-read token, backoff) and how
//! a failed attempt becomes an [`Error`].

use super::Client;
use crate::kube::endpoint::TokenFile;
use crate::kube::error::{api_error_from_body, sanitize, Error, Result};
use crate::kube::fields::{As, Decode};
use crate::kube::guard::check_path;
use crate::kube::path::ResourcePath;
use crate::kube::shape::Shape;
use std::time::Duration;

pub(super) const JSON: &str = "application/json";

/// The API verb of a request, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

impl PatchType {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
        }
    }
}

/// When a failed request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Reads: on 429, 5xx, transport errors and timeouts.
    Read,
    /// Writes: only on 429 with Retry-After (the server did not act on it).
    Write,
    /// A write the caller knows is safe to repeat: retried like a read.
    Idempotent,
    /// Once (watch setup: the caller has its own backoff).
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

pub(super) struct Req<'a> {
    pub(super) verb: Verb,
    pub(super) method: Method,
    pub(super) path: String,
    /// What of the answer is decoded.
    pub(super) shape: &'static Shape,
    pub(super) query: Vec<(&'static str, String)>,
    pub(super) accept: &'a str,
    pub(super) body: Option<(&'static str, Vec<u8>)>,
    pub(super) retry: Retry,
    pub(super) timeout: Duration,
}

impl Client {
    /// A request for `path`, whose answer keeps what is registered for
    /// its resource ([`crate::kube::shape`]).
    pub(super) fn req(
        &self,
        verb: Verb,
        method: Method,
        path: &ResourcePath,
        retry: Retry,
    ) -> Req<'static> {
        let rt = path.resource_type();
        Req {
            verb,
            method,
            path: path.render(),
            shape: self.cfg.shapes.of(rt.group, rt.plural),
            query: Vec::new(),
            accept: JSON,
            body: None,
            retry,
            timeout: self.cfg.request_timeout,
        }
    }

    /// A JSON object answer, decoded as `O` (of a `Value`, what the
    /// request's shape names).
    pub(super) fn json<O: Decode>(&self, req: Req<'_>) -> Result<O> {
        self.decoded(req, decode_object::<O>).map(|(o, _)| o)
    }

    /// An answer decoded by `decode`, given the request's shape.
    pub(super) fn decoded<T>(
        &self,
        req: Req<'_>,
        decode: fn(&[u8], &'static Shape) -> serde_json::Result<T>,
    ) -> Result<(T, usize)> {
        let mut resp = self.send(&req)?;
        let limit = self.cfg.body_limit;
        let (v, len) = with_body(resp.body_mut(), limit, |bytes| {
            (decode(bytes, req.shape), bytes.len())
        })
        .map_err(|e| map_ureq(e, limit))?;
        let v = v.map_err(|e| {
            Error::Decode(format!(
                "{} {}: body is not a JSON object as expected ({e})",
                req.verb.as_str(),
                req.path
            ))
        })?;
        Ok((v, len))
    }

    /// Send with retries; a 2xx response is returned with its body unread.
    pub(super) fn send(&self, req: &Req<'_>) -> Result<ureq::http::Response<ureq::Body>> {
        check_path(&req.path)?;
        let mut attempt: u32 = 0;
        let mut reauthed = false;
        loop {
            self.check_pace()?;
            self.take_token();
            let mut timeout = req.timeout;
            if let (Some(gate), false) = (&self.write_gate, matches!(req.method, Method::Get)) {
                timeout = timeout.min(gate().ok_or(Error::NotLeader)?);
            }
            let err = match self.attempt(req, timeout) {
                Ok(resp) => return Ok(resp),
                Err(e) => e,
            };
            self.note_pace(&err);
            if err.code() == Some(401) && !reauthed {
                reauthed = true;
                if self
                    .token
                    .as_deref()
                    .map(TokenFile::reload)
                    .unwrap_or(false)
                {
                    log::info!("API server refused the token; re-read the token file and retrying");
                    continue;
                }
            }
            let retry = match req.retry {
                Retry::Read | Retry::Idempotent => err.is_transient(),
                Retry::Write => err.code() == Some(429) && err.retry_after().is_some(),
                Retry::Never => false,
            };
            attempt += 1;
            if !retry || attempt >= self.cfg.max_attempts {
                return Err(err);
            }
            let delay = self.cfg.backoff.delay_after(attempt - 1, err.retry_after());
            if err.retry_after().is_some() && delay > self.cfg.max_retry_sleep {
                return Err(err);
            }
            log::debug!(
                "{} {} failed ({err}); retry {attempt} in {} ms",
                req.verb.as_str(),
                req.path,
                delay.as_millis()
            );
            std::thread::sleep(delay);
        }
    }

    fn attempt(
        &self,
        req: &Req<'_>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let agent = self.current_agent()?;
        let mut url = format!("{}{}", self.base, req.path);
        if !req.query.is_empty() {
            let mut ser = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in &req.query {
                ser.append_pair(k, v);
            }
            url.push('?');
            url.push_str(&ser.finish());
        }
        let authorization = self.token.as_ref().map(|t| t.authorization());
        let mut headers = [("Accept", req.accept), ("", ""), ("", "")];
        let mut n = 1;
        if let Some(a) = &authorization {
            headers[n] = ("Authorization", a.expose());
            n += 1;
        }
        if let Some((ct, _)) = &req.body {
            headers[n] = ("Content-Type", ct);
            n += 1;
        }
        let body = req.body.as_ref().map(|(_, b)| b.as_slice());
        let result = dispatch(&agent, req.method, &url, &headers[..n], body, timeout);
        drop(authorization);
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                self.observe(req.verb, 0);
                return Err(map_ureq(e, self.cfg.body_limit));
            }
        };
        let code = resp.status().as_u16();
        self.observe(req.verb, code);
        self.note_warnings(req, resp.headers());
        if (200..300).contains(&code) {
            return Ok(resp);
        }
        if (300..400).contains(&code) {
            return Err(Error::Redirect { code });
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Error bodies are small Status objects; read at most 64 KiB of one.
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        Err(Error::Api(api_error_from_body(code, &body, retry_after)))
    }

    pub(super) fn observe(&self, verb: Verb, code: u16) {
        if let Some(o) = &self.observer {
            o(verb, code);
        }
    }
}

/// A buffer a thread keeps this large at most between answers.
const BODY_KEEP: usize = 256 * 1024;

thread_local! {
    /// Each thread's buffer for answers: an answer is decoded from it and
    /// never outlives it, so a read needs no fresh buffer (answers are
    /// mostly past the allocator's per-thread cache, docs/performance.md).
    static BODY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's answer buffer goes back to the allocator: for a thread
/// about to wait long ([`crate::memory::thread_idle`]).
pub fn release_buffer() {
    let _ = BODY.try_with(|cell| {
        if let Ok(mut buf) = cell.try_borrow_mut() {
            *buf = Vec::new();
        }
    });
}

/// Read a whole answer, bounded by `limit`, and hand its bytes to `f`.
fn with_body<T>(
    body: &mut ureq::Body,
    limit: u64,
    f: impl FnOnce(&[u8]) -> T,
) -> std::result::Result<T, ureq::Error> {
    use std::io::Read;
    let mut read = |buf: &mut Vec<u8>| {
        buf.clear();
        let r = body.with_config().limit(limit).reader().read_to_end(buf);
        r.map_err(ureq::Error::from)
    };
    BODY.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            let out = read(&mut buf).map(|_| f(&buf));
            if buf.capacity() > BODY_KEEP {
                *buf = Vec::new();
            }
            out
        }
        Err(_) => {
            let mut buf = Vec::new();
            read(&mut buf).map(|_| f(&buf))
        }
    })
}

fn dispatch(
    agent: &ureq::Agent,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    macro_rules! finish {
        ($b:expr) => {{
            let mut b = $b;
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.config().timeout_global(Some(timeout)).build()
        }};
    }
    let body = body.unwrap_or_default();
    match method {
        Method::Get => finish!(agent.get(url)).call(),
        Method::Post => finish!(agent.post(url)).send(body),
        Method::Put => finish!(agent.put(url)).send(body),
        Method::Patch => finish!(agent.patch(url)).send(body),
        Method::Delete => finish!(agent.delete(url).force_send_body()).send(body),
    }
}

fn map_ureq(e: ureq::Error, limit: u64) -> Error {
    match e {
        ureq::Error::Timeout(t) => Error::Timeout(t.to_string()),
        ureq::Error::BodyExceedsLimit(_) => Error::BodyTooLarge { limit },
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            Error::Timeout(io.to_string())
        }
        other => Error::Transport(with_hint(sanitize(&other.to_string(), 300))),
    }
}

/// rustls refuses a server certificate that is itself a CA (self-signed,
/// `CA:TRUE`), which kubectl and curl accept when it is given as the CA:
/// say what to do, since the error names only webpki's reason.
fn with_hint(msg: String) -> String {
    if msg.contains("CaUsedAsEndEntity") {
        return format!(
            "{msg} (the API server presents a CA certificate as its own; serve a leaf \
             certificate, CA:FALSE with the server's names, signed by that CA)"
        );
    }
    msg
}

/// One object's text decoded as `O`; trailing text is an error.
fn decode_object<O: Decode>(bytes: &[u8], shape: &'static Shape) -> serde_json::Result<O> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let o = As::<O>::new(shape).deserialize(&mut de)?;
    de.end()?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_used_as_the_server_certificate_says_what_to_do() {
        let msg = "rustls: invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        let hinted = with_hint(msg.to_string());
        assert!(
            hinted.starts_with(msg) && hinted.contains("serve a leaf"),
            "{hinted}"
        );
        assert_eq!(with_hint("connection refused".into()), "connection refused");
    }
}
