//! Credentials never leave the process: every log line (of every crate)
//! and every message the API server sends back passes through [`redact`],
//! which removes the bearer tokens the operator holds, by value, and
//! anything shaped like a credential, by pattern (`Bearer …`,
//! `Authorization: …`), in case a server or proxy echoes a request.

use crate::lock::lock;
use std::borrow::Cow;
use std::sync::Mutex;

pub const REDACTED: &str = "[redacted]";

/// The token values seen lately (a rotated token may still be in flight).
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());
const KEEP: usize = 4;
/// Shorter values are not matched by value (they would blank common words);
/// the patterns still catch them in headers.
const MIN_LEN: usize = 8;

/// Remember a credential so that it is redacted by value from now on.
pub fn remember(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_LEN {
        return;
    }
    let mut s = lock(&SECRETS);
    if !s.iter().any(|x| x == secret) {
        if s.len() >= KEEP {
            s.remove(0);
        }
        s.push(secret.to_string());
    }
}

/// Credentials fixed for the life of the process (a proxy's user and
/// password): never pushed out by token rotations.
static PINNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
const PIN_MAX: usize = 8;

/// Remember a credential that never changes, redacted by value for good.
pub fn remember_for_good(secret: &str) {
    let secret = secret.trim();
    let mut s = lock(&PINNED);
    if secret.len() >= MIN_LEN && s.len() < PIN_MAX && !s.iter().any(|x| x == secret) {
        s.push(secret.to_string());
    }
}

/// `s` without any remembered credential or credential-shaped text.
pub fn redact(s: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(s);
    for list in [&SECRETS, &PINNED] {
        for secret in lock(list).iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
    }
    for key in ["authorization", "bearer"] {
        if contains_ignore_case(&out, key) {
            out = Cow::Owned(blank_after(&out, key));
        }
    }
    out
}

fn contains_ignore_case(s: &str, key: &str) -> bool {
    find_ignore_case(s, key, 0).is_some()
}

fn find_ignore_case(s: &str, key: &str, from: usize) -> Option<usize> {
    let (h, k) = (s.as_bytes(), key.as_bytes());
    // Every log line is searched: the first byte is checked alone first.
    let first = k.first()?.to_ascii_lowercase();
    (from..=h.len().checked_sub(k.len())?)
        .find(|&i| h[i].to_ascii_lowercase() == first && h[i..i + k.len()].eq_ignore_ascii_case(k))
}

/// Replace the value that follows each `key` (after separators such as
/// `": ="`, and after an auth scheme word) with [`REDACTED`].
fn blank_after(s: &str, key: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(i) = find_ignore_case(s, key, from) {
        let mut j = skip(b, i + key.len(), is_separator);
        // `Authorization: Bearer x`: the scheme stays, its value goes.
        let word_end = skip(b, j, is_value);
        if key == "authorization" && is_scheme(&s[j..word_end]) {
            j = skip(b, word_end, is_separator);
        }
        let end = if s[j..].starts_with(REDACTED) {
            j + REDACTED.len()
        } else {
            skip(b, j, is_value)
        };
        if end > j && &s[j..end] != REDACTED {
            out.push_str(&s[copied..j]);
            out.push_str(REDACTED);
            copied = end;
        }
        from = end.max(i + key.len());
    }
    out.push_str(&s[copied..]);
    out
}

fn skip(b: &[u8], mut i: usize, f: fn(u8) -> bool) -> usize {
    while i < b.len() && f(b[i]) {
        i += 1;
    }
    i
}

fn is_separator(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b':' | b'=' | b'"' | b'\'' | b'\\')
}

/// What a credential is made of: anything up to whitespace, a quote, a
/// comma or a bracket. Multi-byte characters count as part of it, so a
/// cut never falls inside one.
fn is_value(c: u8) -> bool {
    !c.is_ascii_whitespace() && !matches!(c, b'"' | b'\'' | b',' | b'\\' | b']' | b'}' | b')')
}

fn is_scheme(w: &str) -> bool {
    ["bearer", "basic", "digest", "negotiate"]
        .iter()
        .any(|s| w.eq_ignore_ascii_case(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_redacted_wherever_they_appear() {
        for (input, want) in [
            (
                "500: GET /api authorization: Bearer abc.def-123 host: x",
                "500: GET /api authorization: Bearer [redacted] host: x",
            ),
            (
                r#"{"Authorization":"Bearer eyJhb.x.y"}"#,
                r#"{"Authorization":"Bearer [redacted]"}"#,
            ),
            (
                "AUTHORIZATION=Basic dXNlcjpwYXNz",
                "AUTHORIZATION=Basic [redacted]",
            ),
            (
                "bearer tok1 and bearer tok2",
                "bearer [redacted] and bearer [redacted]",
            ),
            ("authorization:secret", "authorization:[redacted]"),
            ("no credentials here", "no credentials here"),
            ("ends with Bearer", "ends with Bearer"),
            ("Bearer é-ü-token", "Bearer [redacted]"),
        ] {
            assert_eq!(redact(input), want, "{input}");
        }
    }

    #[test]
    fn remembered_values_are_redacted_without_a_pattern() {
        remember("s3cr3t-value-for-test");
        let r = redact("echo: token=s3cr3t-value-for-test; again s3cr3t-value-for-test");
        assert!(!r.contains("s3cr3t"), "{r}");
        remember("short");
        assert_eq!(redact("a short word"), "a short word");
    }
}
