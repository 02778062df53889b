//! Log lines: readable text by default, one JSON object per line with
//! `--log-format json`. `RUST_LOG` sets the level (default `info`). Every
//! line passes through [`crate::redact`], and no line holds a raw control
//! character (§9.15): a user's string can never start a forged line. Text
//! lines show them escaped ([`crate::foreign::escape`]); JSON lines leave
//! it to the encoder, with the few it allows raw escaped as `\uXXXX`.
//!
//! JSON lines carry `namespace` and `name` when they were logged while a
//! worker reconciled that OpenMedModel ([`for_resource`]), and any key-value
//! pairs of the call (`reason`), so a log pipeline can filter by resource.

use crate::config::LogFormat;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::io::Write;

thread_local! {
    /// The OpenMedModel this thread is reconciling, if any.
    static RESOURCE: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// Runs `f` with every log line of this thread tagged with the resource.
pub fn for_resource<T>(namespace: &str, name: &str, f: impl FnOnce() -> T) -> T {
    let before = RESOURCE.with(|r| r.replace(Some((namespace.to_string(), name.to_string()))));
    let out = f();
    RESOURCE.with(|r| *r.borrow_mut() = before);
    out
}

/// The key-value pairs of a log call (`log::info!(reason = "X"; "...")`),
/// scrubbed as messages are.
fn key_values(r: &log::Record<'_>) -> Map<String, Value> {
    struct Collect<'a>(&'a mut Map<String, Value>);
    impl<'kvs> log::kv::VisitSource<'kvs> for Collect<'_> {
        fn visit_pair(
            &mut self,
            key: log::kv::Key<'kvs>,
            value: log::kv::Value<'kvs>,
        ) -> Result<(), log::kv::Error> {
            let text = crate::redact::redact(&value.to_string()).into_owned();
            let key = crate::foreign::escape(key.as_str()).into_owned();
            self.0.insert(key, Value::String(text));
            Ok(())
        }
    }
    let mut out = Map::new();
    let _ = r.key_values().visit(&mut Collect(&mut out));
    out
}

/// The structured fields of a JSON line: the resource, then the key-values.
fn fields(r: &log::Record<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some((ns, name)) = RESOURCE.with(|r| r.borrow().clone()) {
        out.insert("namespace".into(), ns.into());
        out.insert("name".into(), name.into());
    }
    out.extend(key_values(r));
    out
}

pub fn init(format: LogFormat) {
    let mut b = env_logger::Builder::new();
    b.filter_level(log::LevelFilter::Info);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    // The HTTP and TLS crates dump raw requests, headers included, at debug
    // and trace: never below info, whatever RUST_LOG asks.
    for noisy in ["ureq", "ureq_proto", "rustls", "tiny_http"] {
        b.filter_module(noisy, log::LevelFilter::Info);
    }
    b.target(env_logger::Target::Stderr);
    match format {
        LogFormat::Text => b.format(|f, r| writeln!(f, "{}", text_line(r, &crate::time::now()))),
        LogFormat::Json => b.format(|f, r| writeln!(f, "{}", json_line(r, &crate::time::now()))),
    };
    let _ = b.try_init();
}

/// One text line: time, level, target, message and key-values, escaped.
fn text_line(r: &log::Record<'_>, now: &str) -> String {
    let kv: String = key_values(r)
        .iter()
        .map(|(k, v)| format!(" {k}={}", v.as_str().unwrap_or("")))
        .collect();
    let msg = crate::redact::redact(&r.args().to_string()).into_owned();
    format!(
        "{now} {:<5} {}: {}",
        r.level(),
        r.target(),
        crate::foreign::escape(&(msg + &kv))
    )
}

/// One JSON line; the decoded message is the message, the line is one line.
fn json_line(r: &log::Record<'_>, now: &str) -> String {
    let mut line = Map::new();
    line.insert("ts".into(), now.into());
    line.insert("level".into(), r.level().as_str().into());
    line.insert("target".into(), r.target().into());
    let msg = crate::redact::redact(&r.args().to_string()).into_owned();
    line.insert("msg".into(), msg.into());
    line.extend(fields(r));
    let text = Value::Object(line).to_string();
    crate::foreign::escape_json_text(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `kubectl annotate ... rollback-to=$'evil\n...'` puts in a line.
    const FORGED: &str =
        "evil\n2026-12-01T00:00:00Z ERROR openmed_operator: FORGED\u{2028}x\u{85}y";

    fn with_record<T>(f: impl FnOnce(&log::Record<'_>) -> T) -> T {
        let kvs = [("reason", "r\nR")];
        f(&log::Record::builder()
            .args(format_args!("rollback to {FORGED} refused"))
            .level(log::Level::Warn)
            .target("openmed_operator")
            .key_values(&kvs)
            .build())
    }

    #[test]
    fn a_user_string_cannot_start_a_line_of_its_own() {
        let text = with_record(|r| text_line(r, "T"));
        assert!(!text.chars().any(crate::foreign::is_unsafe), "{text:?}");
        assert!(
            text.contains("evil\\n2026-12-01T00:00:00Z ERROR"),
            "shown as the two characters: {text}"
        );
        assert!(text.ends_with("refused reason=r\\nR"), "{text}");
        let json = with_record(|r| json_line(r, "T"));
        assert!(!json.chars().any(crate::foreign::is_unsafe), "{json:?}");
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["msg"], format!("rollback to {FORGED} refused"));
        assert_eq!(v["reason"], "r\nR");
    }
}
