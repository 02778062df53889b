//! A status as it was read: its text, and where each top-level field lies
//! in it, each field parsed the first time a pass reads it. A pass reads a
//! few fields of a status it got whole; parsing all of them built a tree of
//! some 130 allocations a pass, the largest single share of the operator's
//! allocations (docs/performance.md).

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::ops::Range;
use std::sync::OnceLock;

/// The top-level fields of a status, in the order they were read.
#[derive(Debug, Default)]
pub(super) struct Stored {
    text: String,
    fields: Vec<StoredField>,
}

#[derive(Debug)]
struct StoredField {
    key: StoredKey,
    /// The field's value as text, in [`Stored::text`] (empty when given
    /// parsed).
    at: Range<usize>,
    value: OnceLock<Value>,
}

/// A key: where it lies in the text, or (escaped, or given parsed) itself.
#[derive(Debug)]
enum StoredKey {
    At(Range<usize>),
    Owned(String),
}

impl Stored {
    /// The fields of `text`, a JSON object; None for anything else.
    pub(super) fn from_text(text: String) -> Option<Stored> {
        let spans = {
            let mut de = serde_json::Deserializer::from_str(&text);
            let spans = de.deserialize_map(Spans(&text)).ok()?;
            de.end().ok()?;
            spans
        };
        let mut stored = Stored {
            text,
            fields: Vec::with_capacity(spans.len()),
        };
        for (key, at) in spans {
            let field = StoredField {
                key,
                at,
                value: OnceLock::new(),
            };
            // A key given twice reads as its last value, as serde_json's map.
            match stored.position(stored.key_of(&field)) {
                Some(i) => stored.fields[i] = field,
                None => stored.fields.push(field),
            }
        }
        Some(stored)
    }

    /// Fields already parsed.
    pub(super) fn from_map(map: Map<String, Value>) -> Stored {
        let fields = map
            .into_iter()
            .map(|(k, v)| StoredField {
                key: StoredKey::Owned(k),
                at: 0..0,
                value: OnceLock::from(v),
            })
            .collect();
        Stored {
            text: String::new(),
            fields,
        }
    }

    fn key_of<'a>(&'a self, f: &'a StoredField) -> &'a str {
        match &f.key {
            StoredKey::At(r) => self.text.get(r.clone()).unwrap_or(""),
            StoredKey::Owned(k) => k,
        }
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.fields.iter().position(|f| self.key_of(f) == key)
    }

    fn value_of<'a>(&'a self, f: &'a StoredField) -> &'a Value {
        f.value.get_or_init(|| {
            let raw = self.text.get(f.at.clone()).unwrap_or("null");
            // The text parsed as a whole already: a field's part parses.
            serde_json::from_str(raw).unwrap_or(Value::Null)
        })
    }

    /// A field parsed if a pass parsed it already, else its text (None:
    /// no such field).
    pub(super) fn parsed_or_text(&self, key: &str) -> Option<Result<&Value, &str>> {
        let f = &self.fields[self.position(key)?];
        match (f.value.get(), self.text.get(f.at.clone())) {
            (None, Some(text)) if !f.at.is_empty() => Some(Err(text)),
            _ => Some(Ok(self.value_of(f))),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        let f = &self.fields[self.position(key)?];
        Some(self.value_of(f))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.fields
            .iter()
            .map(|f| (self.key_of(f), self.value_of(f)))
    }
}

/// Reads an object's keys and where each value lies in `text`, which the
/// deserializer reads from.
struct Spans<'t>(&'t str);

/// A key as the text spells it: borrowed where it has no escapes.
struct KeyText<'t>(std::borrow::Cow<'t, str>);

impl<'de> serde::Deserialize<'de> for KeyText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyText<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<KeyText<'de>, E> {
                Ok(KeyText(s.into()))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(s.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Where `part`, a slice of `text`, lies in it.
fn span(text: &str, part: &str) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
    if start <= text.len() && part.len() <= text.len() - start {
        start..start + part.len()
    } else {
        0..0
    }
}

impl<'de> Visitor<'de> for Spans<'de> {
    type Value = Vec<(StoredKey, Range<usize>)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(20));
        while let Some((key, value)) = map.next_entry::<KeyText<'de>, &'de RawValue>()? {
            let key = match key.0 {
                std::borrow::Cow::Borrowed(k) => StoredKey::At(span(self.0, k)),
                std::borrow::Cow::Owned(k) => StoredKey::Owned(k),
            };
            out.push((key, span(self.0, value.get())));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_field_reads_as_the_whole_parse_reads_it() {
        let text = r#"{"phase":"Ready","conditions":[{"type":"Ready","status":"True"}],
            "n":3,"e\u0041":"escaped key","phase":"Failed","x":null}"#;
        let stored = Stored::from_text(text.to_string()).unwrap();
        let whole: Map<String, Value> = serde_json::from_str(text).unwrap();
        for (k, v) in &whole {
            assert_eq!(stored.get(k), Some(v), "{k}");
        }
        assert_eq!(
            stored.iter().count(),
            whole.len(),
            "a key given twice is one field"
        );
        assert_eq!(stored.get("eA"), Some(&json!("escaped key")));
        assert_eq!(
            stored.get("phase"),
            Some(&json!("Failed")),
            "the last value wins"
        );
        assert_eq!(stored.get("absent"), None);
    }

    #[test]
    fn anything_but_an_object_is_no_status() {
        for text in ["[1]", "\"s\"", "null", "{\"a\":1} x", "{\"a\":", ""] {
            assert!(Stored::from_text(text.to_string()).is_none(), "{text}");
        }
    }

    #[test]
    fn given_fields_read_as_given() {
        let map = json!({"a": 1, "b": {"c": "d"}});
        let Value::Object(map) = map else {
            unreachable!()
        };
        let stored = Stored::from_map(map.clone());
        let got: Map<String, Value> = stored
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        assert_eq!(got, map);
    }
}
