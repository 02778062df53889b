//! Canonical JSON and `sha256:` digests, byte for byte as the reference
//! operator computes them (Python's `json.dumps(sort_keys=True,
//! separators=(",", ":"), ensure_ascii=True)`), so hashes carry over.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

pub fn canonical_json(v: &Value) -> String {
    let mut out = String::with_capacity(512);
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            // serde_json's map (without `preserve_order`) is a BTreeMap:
            // its keys come in byte order, which for UTF-8 is the code-point
            // order Python sorts by.
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, x);
            }
            out.push('}');
        }
    }
}

/// Everything outside printable ASCII is escaped as `\uXXXX` (surrogate
/// pairs above the BMP), as `ensure_ascii=True` does.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut rest = s;
    while !rest.is_empty() {
        // Printable ASCII but the two escaped characters is copied as a run.
        let plain = rest
            .bytes()
            .position(|b| !(b' '..=b'~').contains(&b) || b == b'"' || b == b'\\')
            .unwrap_or(rest.len());
        out.push_str(&rest[..plain]);
        rest = &rest[plain..];
        let mut chars = rest.chars();
        let Some(c) = chars.next() else { break };
        rest = chars.as_str();
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// The SHA-256 of `data`, raw: what a view keeps of a text it only
/// compares.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Whether `digest` (`sha256:` + hex, as [`digest_text`] writes it) is
/// the raw SHA-256 `raw`.
pub fn digest_is(digest: &str, raw: &[u8; 32]) -> bool {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return false;
    };
    hex.len() == 64
        && (hex.as_bytes().chunks_exact(2))
            .zip(raw)
            .all(|(h, &b)| h == hex_pair(b))
}

/// The raw SHA-256 a digest written as [`digest_text`] writes it names
/// (`sha256:` + 64 lower-case hex digits); None for any other text, which
/// no digest of ours equals.
pub fn parse_digest(digest: &str) -> Option<[u8; 32]> {
    let hex = digest.strip_prefix("sha256:")?.as_bytes();
    let nibble = |h: u8| match h {
        b'0'..=b'9' => Some(h - b'0'),
        b'a'..=b'f' => Some(h - b'a' + 10),
        _ => None,
    };
    let mut raw = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (b, pair) in raw.iter_mut().zip(hex.chunks_exact(2)) {
        *b = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(raw)
}

/// A byte as two lower-case hex digits.
fn hex_pair(b: u8) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]
}

pub fn sha256_hex(data: &[u8]) -> String {
    let digest = sha256(data);
    let mut s = String::with_capacity(64);
    for b in digest {
        let [high, low] = hex_pair(b);
        s.push(char::from(high));
        s.push(char::from(low));
    }
    s
}

/// `sha256:` + hex SHA-256 of the canonical JSON of `v`.
pub fn digest(v: &Value) -> String {
    digest_text(&canonical_json(v))
}

/// How many of its latest digests each thread keeps: a pass hashes the
/// same few specs several times, and models mostly share a manifest
/// (docs/performance.md, where the instructions go).
const RECENT_DIGESTS: usize = 8;

type Recent = std::collections::VecDeque<(Box<str>, Box<str>)>;

thread_local! {
    static RECENT: std::cell::RefCell<Recent> = const {
        std::cell::RefCell::new(std::collections::VecDeque::new())
    };
}

/// [`digest`] of text that is canonical JSON already. The text is the key
/// of the thread's recent digests, so a hit is exact.
pub fn digest_text(canonical: &str) -> String {
    let recent = |r: &std::cell::RefCell<Recent>| {
        let mut r = r.try_borrow_mut().ok()?;
        if let Some((_, d)) = r.iter().find(|(t, _)| &**t == canonical) {
            return Some(d.to_string());
        }
        let d = digest_now(canonical);
        if r.len() >= RECENT_DIGESTS {
            r.pop_back();
        }
        r.push_front((canonical.into(), d.as_str().into()));
        Some(d)
    };
    (RECENT.try_with(recent).ok().flatten()).unwrap_or_else(|| digest_now(canonical))
}

fn digest_now(canonical: &str) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    s.push_str(&sha256_hex(canonical.as_bytes()));
    s
}

/// Canonical JSON written field by field, for values the operator hashes
/// on every pass: the same text as [`canonical_json`] of the value, without
/// building it. Fields must be added in byte order of their keys.
pub struct Canonical {
    out: String,
    /// Whether the object being written has a field yet, per level.
    first: Vec<bool>,
}

impl Canonical {
    pub fn new() -> Canonical {
        Canonical {
            out: String::with_capacity(256),
            first: Vec::with_capacity(4),
        }
    }

    /// A comma before every member of an object or array but its first.
    fn separate(&mut self) {
        if let Some(first) = self.first.last_mut() {
            if !std::mem::replace(first, false) {
                self.out.push(',');
            }
        }
    }

    fn key(&mut self, k: &str) {
        self.separate();
        write_string(&mut self.out, k);
        self.out.push(':');
    }

    /// `{` or `[` as the value of `key`, or (None) at the top or as an
    /// array's element.
    fn begin(&mut self, key: Option<&str>, bracket: char) -> &mut Canonical {
        match key {
            Some(k) => self.key(k),
            None => self.separate(),
        }
        self.out.push(bracket);
        self.first.push(true);
        self
    }

    /// An object (see [`Canonical::begin`] for `key`).
    pub fn open(&mut self, key: Option<&str>) -> &mut Canonical {
        self.begin(key, '{')
    }

    /// An array (see [`Canonical::begin`] for `key`).
    pub fn open_array(&mut self, key: Option<&str>) -> &mut Canonical {
        self.begin(key, '[')
    }

    pub fn close(&mut self) -> &mut Canonical {
        self.out.push('}');
        self.first.pop();
        self
    }

    pub fn close_array(&mut self) -> &mut Canonical {
        self.out.push(']');
        self.first.pop();
        self
    }

    pub fn str(&mut self, key: &str, v: &str) -> &mut Canonical {
        self.key(key);
        write_string(&mut self.out, v);
        self
    }

    /// A number, a boolean or null: text that is its own JSON.
    pub fn raw(&mut self, key: &str, v: impl std::fmt::Display) -> &mut Canonical {
        self.key(key);
        let _ = write!(self.out, "{v}");
        self
    }

    pub fn text(&mut self) -> &str {
        &self.out
    }
}

impl Default for Canonical {
    fn default() -> Self {
        Canonical::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorted_compact_ascii() {
        let v =
            json!({"b": 1, "a": [true, null, "é\u{1F600}\"\\\n\u{7f}"], "A": {"z": -2, "y": "x"}});
        assert_eq!(
            canonical_json(&v),
            r#"{"A":{"y":"x","z":-2},"a":[true,null,"\u00e9\ud83d\ude00\"\\\n\u007f"],"b":1}"#
        );
    }

    /// The short escapes are Python's (`json.dumps(..., ensure_ascii=True)`,
    /// §2.3), not `\u00XX`: a spec whose strings hold them hashes as the
    /// reference operator's does, so an adopted resource is not rolled again.
    #[test]
    fn control_characters_escape_as_python_does() {
        let v = json!({"a": "\r\t\u{08}\u{0c}\u{01}"});
        assert_eq!(canonical_json(&v), r#"{"a":"\r\t\b\f\u0001"}"#);
    }

    /// The thread's recent digests answer only for their own text: twenty
    /// texts asked in turn, each again after the others moved it out.
    #[test]
    fn recent_digests_answer_only_for_their_own_text() {
        let texts: Vec<String> = (0..20).map(|i| format!("{{\"n\":{i}}}")).collect();
        for round in 0..3 {
            for i in 0..20 {
                let t = &texts[(i * 7 + round) % 20];
                assert_eq!(digest_text(t), digest_now(t));
                assert_eq!(digest_text(t), digest_now(t), "asked again at once");
            }
        }
    }

    #[test]
    fn digest_is_the_raw_digest_in_hex() {
        let raw = sha256(b"{}");
        assert!(digest_is(&digest(&json!({})), &raw));
        assert!(!digest_is(&digest(&json!({"a": 1})), &raw));
        assert!(!digest_is(&sha256_hex(b"{}"), &raw), "without its prefix");
        assert!(!digest_is("sha256:", &raw));
    }

    #[test]
    fn a_digest_of_ours_parses_to_its_raw_digest_and_nothing_else_does() {
        let d = digest(&json!({}));
        assert_eq!(parse_digest(&d), Some(sha256(b"{}")));
        let upper = format!("sha256:{}", sha256_hex(b"{}").to_uppercase());
        for other in [
            &upper,
            &sha256_hex(b"{}"),
            "sha256:",
            &d[..70],
            &format!("{d}0"),
        ] {
            assert_eq!(parse_digest(other), None, "{other}");
        }
    }

    #[test]
    fn digest_format() {
        let d = digest(&json!({}));
        assert_eq!(d, format!("sha256:{}", sha256_hex(b"{}")));
        assert_eq!(d.len(), 7 + 64);
    }
}
