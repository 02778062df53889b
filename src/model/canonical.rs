//! Canonical JSON and `sha256:` digests, byte for byte as the reference
//! operator computes them (Python's `json.dumps(sort_keys=True,
//! separators=(",", ":"), ensure_ascii=True)`), so hashes carry over.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
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
            let mut keys: Vec<&String> = m.keys().collect();
            // Python sorts by code point; Rust's str ordering is byte order,
            // which agrees for UTF-8.
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, &m[*k]);
            }
            out.push('}');
        }
    }
}

/// Everything outside printable ASCII is escaped as `\uXXXX` (surrogate
/// pairs above the BMP), as `ensure_ascii=True` does.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
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

pub fn sha256_hex(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `sha256:` + hex SHA-256 of the canonical JSON of `v`.
pub fn digest(v: &Value) -> String {
    format!("sha256:{}", sha256_hex(canonical_json(v).as_bytes()))
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

    #[test]
    fn digest_format() {
        let d = digest(&json!({}));
        assert_eq!(d, format!("sha256:{}", sha256_hex(b"{}")));
        assert_eq!(d.len(), 7 + 64);
    }
}
