//! Strings from outside (a user's annotation, an API server's message)
//! made safe to copy into a log line, a status message or an Event
//! (docs/contract.md §9.15): every character that could end a line, move
//! the cursor or reorder text is shown as a visible escape, and the length
//! is bounded. One rule, so that a log line, a condition and an Event never
//! disagree about what a user wrote.

use std::borrow::Cow;

/// Whether `c` must not be copied raw: C0 controls, DEL and C1 controls
/// (Unicode's `Cc`), the line and paragraph separators (U+2028, U+2029:
/// line ends to JavaScript and to many log viewers), and the bidirectional
/// embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) that
/// make a terminal show text in an order other than its own.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The visible form of an unsafe character: `\n`, `\r`, `\t`, `\0`, else
/// `\u{XX}` (Rust's escape syntax); a safe one is returned as it is.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\0' => out.push_str("\\0"),
        c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        c => out.push(c),
    }
}

/// `s` with every unsafe character escaped (borrowed when there is none).
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// `s` escaped and cut to at most `max` characters, with `...` marking a
/// cut; an escape is never cut in two.
/// A clean, short owned string is returned as it is, without a copy.
pub fn bounded<'a>(s: impl Into<Cow<'a, str>>, max: usize) -> String {
    let s: Cow<'a, str> = s.into();
    if s.chars().count() <= max && !s.chars().any(is_unsafe) {
        return s.into_owned();
    }
    if escape(&s).chars().count() <= max {
        return escape(&s).into_owned();
    }
    let room = max.saturating_sub(3);
    let (mut out, mut n) = (String::with_capacity(room + 3), 0);
    let mut one = String::new();
    for c in s.chars() {
        one.clear();
        push_escaped(&mut one, c);
        let width = one.chars().count();
        if n + width > room {
            break;
        }
        out.push_str(&one);
        n += width;
    }
    out.push_str("...");
    out
}

/// A serialized JSON text with the unsafe characters that JSON allows raw
/// (DEL, C1, the separators and bidi controls; the encoder already escapes
/// C0) written as `\uXXXX`: the decoded value is unchanged, the line holds
/// none of them.
pub fn escape_json_text(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 12);
    for c in json.chars() {
        if is_unsafe(c) {
            // Outside strings JSON has only ASCII white space, which the
            // encoder never writes raw but as separators it does not use.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unsafe_character_is_shown_escaped() {
        for (input, want) in [
            ("OpenMed/v1", "OpenMed/v1"),
            (
                "evil\n2026-12-01T00:00:00Z ERROR forged",
                "evil\\n2026-12-01T00:00:00Z ERROR forged",
            ),
            ("a\r\nb", "a\\r\\nb"),
            ("tab\there", "tab\\there"),
            ("nul\0", "nul\\0"),
            ("esc\u{1b}[31mred", "esc\\u{1b}[31mred"),
            ("bell\u{7}", "bell\\u{7}"),
            ("del\u{7f}", "del\\u{7f}"),
            ("next line\u{85}c1", "next line\\u{85}c1"),
            ("csi\u{9b}", "csi\\u{9b}"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
            ("para\u{2029}sep", "para\\u{2029}sep"),
            ("rtl\u{202e}txt", "rtl\\u{202e}txt"),
            ("isolate\u{2066}x\u{2069}", "isolate\\u{2066}x\\u{2069}"),
            ("é ü 漢字 emoji 🙂", "é ü 漢字 emoji 🙂"),
            ("back\\slash stays", "back\\slash stays"),
        ] {
            assert_eq!(escape(input), want, "{input:?}");
            assert!(!escape(input).chars().any(is_unsafe), "{input:?}");
        }
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_bound_counts_the_escapes_and_never_splits_one() {
        assert_eq!(bounded("short", 10), "short");
        let long = "x".repeat(2000);
        assert_eq!(bounded(&long, 1024).chars().count(), 1024);
        assert_eq!(bounded("ééééé", 4), "é...");
        // Ten newlines are twenty characters once escaped.
        let cut = bounded("\n".repeat(10), 10);
        assert_eq!(cut, "\\n\\n\\n...");
        let cut = bounded("ab\u{85}cdef", 8);
        assert_eq!(
            cut, "ab...",
            "the six-character escape does not fit in five"
        );
        assert!(bounded("\u{2028}".repeat(500), 256).chars().count() <= 256);
    }

    #[test]
    fn json_text_keeps_its_value_and_loses_its_raw_separators() {
        let v = serde_json::json!({"msg": "a\nb\u{2028}c\u{85}d\u{7f}"});
        let text = v.to_string();
        let safe = escape_json_text(&text);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
    }
}
