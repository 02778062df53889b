//! The conditions of a status read in place: from the stored text, each
//! string borrowed from it, or from a parsed value. Most passes only ask
//! for a reason or whether the four conditions stand as the plan would
//! write them, and the tree a parse builds (some sixty allocations) was
//! the largest share of a pass's allocations (docs/performance.md).

use crate::kube::fields::{skip, Fill, Scalar};
use serde::de::MapAccess;
use serde_json::Value;
use std::borrow::Cow;

/// One element of `status.conditions`, its known keys as scalars.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct CondRef<'a> {
    pub ty: Scalar<'a>,
    pub status: Scalar<'a>,
    pub reason: Scalar<'a>,
    pub message: Scalar<'a>,
    pub last_transition_time: Scalar<'a>,
    pub observed_generation: Scalar<'a>,
    /// Which of the six known keys it has, a bit each (a key given twice
    /// reads as its last value, as a parse does).
    known: u8,
    /// Whether it has any other key.
    others: bool,
}

/// The six known keys, in the order of their bits.
const KEYS: [&str; 6] = [
    "type",
    "status",
    "reason",
    "message",
    "lastTransitionTime",
    "observedGeneration",
];

impl<'a> Fill<'a> for CondRef<'a> {
    fn fill<A: MapAccess<'a>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match self.slot(key) {
            Some(slot) => *slot = Scalar::next(map)?,
            None => skip(map)?,
        }
        Ok(())
    }
}

/// A JSON value as the scalar a view reads (borrowed).
fn scalar(v: &Value) -> Scalar<'_> {
    match v {
        Value::String(s) => Scalar::Str(Cow::Borrowed(s)),
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Null => Scalar::Null,
        Value::Number(n) => n.as_i64().map_or(Scalar::Other, Scalar::Int),
        _ => Scalar::Other,
    }
}

impl<'a> CondRef<'a> {
    /// The slot of `key`, noted as present; None for another key.
    fn slot(&mut self, key: &str) -> Option<&mut Scalar<'a>> {
        let Some(bit) = KEYS.iter().position(|k| *k == key) else {
            self.others = true;
            return None;
        };
        self.known |= 1 << bit;
        Some(match bit {
            0 => &mut self.ty,
            1 => &mut self.status,
            2 => &mut self.reason,
            3 => &mut self.message,
            4 => &mut self.last_transition_time,
            _ => &mut self.observed_generation,
        })
    }

    /// No key at all (an empty object, or no object).
    pub fn is_empty(&self) -> bool {
        self.known == 0 && !self.others
    }

    /// The six known keys and no other.
    pub fn has_exactly_the_known_keys(&self) -> bool {
        self.known == 0b11_1111 && !self.others
    }

    /// One element of a parsed conditions array (not an object: no keys).
    pub fn of(v: &'a Value) -> CondRef<'a> {
        let mut c = CondRef::default();
        for (k, v) in v.as_object().into_iter().flatten() {
            if let Some(slot) = c.slot(k) {
                *slot = scalar(v);
            }
        }
        c
    }

    /// The elements of a parsed `conditions` value (none if no array).
    pub fn all_of(v: Option<&'a Value>) -> Vec<CondRef<'a>> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(CondRef::of)
            .collect()
    }

    /// The elements of a `conditions` value's text, or None if it does
    /// not parse.
    pub fn all_in(text: &'a str) -> Option<Vec<CondRef<'a>>> {
        crate::kube::fields::elements_in(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read from the text or from its parse, the conditions are the same:
    /// escapes, odd types, extra keys and elements that are no objects.
    #[test]
    fn the_text_reads_as_its_parse() {
        let texts = [
            r#"[{"type":"Ready","status":"True","reason":"RolloutComplete","message":"a \"quoted\" \u00e9","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":3}]"#,
            r#"[{"type":7,"status":null,"reason":true,"observedGeneration":1.5,"extra":{"a":[1]}},"x",[],{}]"#,
            r#"[{"type":"Ready","observedGeneration":18446744073709551615,"type":"Degraded"}]"#,
            r#"{"type":"Ready"}"#,
            "null",
        ];
        for text in texts {
            let parsed: Value = serde_json::from_str(text).unwrap();
            let from_text = CondRef::all_in(text).unwrap();
            assert_eq!(from_text, CondRef::all_of(Some(&parsed)), "{text}");
        }
        assert!(CondRef::all_in("[{").is_none());
    }

    /// Each known key reads into its own field, and which keys a condition
    /// holds is told exactly: all six and no other, or none at all.
    #[test]
    fn each_key_reads_into_its_own_field() {
        let read = |text: &'static str| {
            let parsed: &'static Value = Box::leak(Box::new(serde_json::from_str(text).unwrap()));
            let from_text = CondRef::all_in(text).unwrap();
            assert_eq!(from_text, CondRef::all_of(Some(parsed)), "{text}");
            from_text.into_iter().next().unwrap()
        };
        let c = read(
            r#"[{"type":"t","status":"s","reason":"r","message":"m","lastTransitionTime":"l","observedGeneration":6}]"#,
        );
        let strings = [
            &c.ty,
            &c.status,
            &c.reason,
            &c.message,
            &c.last_transition_time,
        ];
        let strings = strings.map(|s| s.as_str());
        assert_eq!(strings, ["t", "s", "r", "m", "l"].map(Some));
        assert_eq!(c.observed_generation.int(), Some(6));
        assert!(c.has_exactly_the_known_keys() && !c.is_empty());
        let fewer = read(
            r#"[{"type":"t","status":"s","reason":"r","message":"m","observedGeneration":6}]"#,
        );
        assert!(!fewer.has_exactly_the_known_keys() && !fewer.is_empty());
        let more = read(
            r#"[{"type":"t","status":"s","reason":"r","message":"m","lastTransitionTime":"l","observedGeneration":6,"x":1}]"#,
        );
        assert!(!more.has_exactly_the_known_keys());
        assert!(read("[{}]").is_empty() && !read(r#"[{"x":1}]"#).is_empty());
        assert!(!read(r#"[{"status":"s"}]"#).is_empty());
    }
}
