//! Which fields of an object are worth decoding. A list page, a watch event
//! or a write's answer is decoded straight into a [`Value`] holding only
//! the fields its [`Shape`] names; the rest of the text is skipped without
//! an allocation (managedFields, the last-applied annotation, the pod
//! template's volumes and probes). Decoding whole objects made most of the
//! operator's allocations (docs/performance.md). The client knows no kind:
//! whoever reads an answer registers what it reads ([`Shapes`]).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// What to keep of a JSON value.
#[derive(Debug)]
pub enum Shape {
    /// The whole value.
    All,
    /// Of an object, these fields, each with its own shape; of an array,
    /// each element so; a scalar is kept as it is.
    Fields(&'static [(&'static str, Shape)]),
    /// The value's JSON text, as a string: for what is kept as text and
    /// parsed only when read (a model's spec and status), so no tree is
    /// built and dropped on every event.
    Text,
}

/// The fields of an API Status kept on every object: a watch's ERROR
/// event carries a Status where the object would be (`api_error_from_body`
/// reads these).
const STATUS_FIELDS: [&str; 4] = ["code", "message", "reason", "details"];

/// The metadata kept of every object whatever its shape: the caches key,
/// order and delete objects by them (`runtime::ObjectKey::of`, the
/// reflector).
const IDENTITY: [&str; 4] = ["name", "namespace", "uid", "resourceVersion"];

/// The shape registered for each resource (by API group and plural); an
/// unregistered resource is decoded whole.
#[derive(Debug, Clone, Default)]
pub struct Shapes(pub Vec<(&'static str, &'static str, &'static Shape)>);

impl Shapes {
    pub fn of(&self, group: &str, plural: &str) -> &'static Shape {
        self.0
            .iter()
            .find(|(g, p, _)| *g == group && *p == plural)
            .map_or(&Shape::All, |(_, _, s)| s)
    }
}

/// A shape naming no field (of metadata: only its identity is kept).
const NO_FIELDS: Shape = Shape::Fields(&[]);

/// A [`DeserializeSeed`] that decodes a value as its shape says: one
/// object or, with [`Pruned::list`], a list whose items have the shape.
#[derive(Clone, Copy)]
pub struct Pruned {
    shape: &'static Shape,
    /// The value is a list: `items` has the shape, the rest is kept.
    list: bool,
    /// The top of an object: Status fields are kept too.
    top: bool,
    /// An object's metadata: its [`IDENTITY`] is kept too.
    meta: bool,
}

impl Pruned {
    pub fn object(shape: &'static Shape) -> Pruned {
        Pruned {
            shape,
            list: false,
            top: true,
            meta: false,
        }
    }

    pub fn list(shape: &'static Shape) -> Pruned {
        Pruned {
            list: true,
            ..Pruned::object(shape)
        }
    }

    fn inner(shape: &'static Shape) -> Pruned {
        Pruned {
            top: false,
            ..Pruned::object(shape)
        }
    }

    /// What to do with the field `key` of an object of this shape.
    fn field(&self, key: &str) -> Option<Pruned> {
        if self.list {
            return Some(match key {
                "items" => Pruned::object(self.shape),
                _ => Pruned::inner(&Shape::All),
            });
        }
        match self.shape {
            Shape::All | Shape::Text => Some(Pruned::inner(&Shape::All)),
            Shape::Fields(fields) => {
                let named = fields.iter().find(|(k, _)| *k == key).map(|(_, s)| s);
                let kept_anyway = (self.top && STATUS_FIELDS.contains(&key))
                    || (self.meta && IDENTITY.contains(&key));
                match named {
                    Some(s) if self.top && key == "metadata" => Some(Pruned {
                        meta: true,
                        ..Pruned::inner(s)
                    }),
                    Some(s) => Some(Pruned::inner(s)),
                    None if self.top && key == "metadata" => Some(Pruned {
                        meta: true,
                        ..Pruned::inner(&NO_FIELDS)
                    }),
                    None => kept_anyway.then(|| Pruned::inner(&Shape::All)),
                }
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match (self.shape, self.list) {
            (Shape::All, false) => serde::Deserialize::deserialize(d),
            (Shape::Text, false) => {
                let raw: &serde_json::value::RawValue = serde::Deserialize::deserialize(d)?;
                Ok(Value::String(raw.get().to_string()))
            }
            _ => d.deserialize_any(self),
        }
    }
}

/// An object key, matched against the shape without an allocation; kept
/// keys are copied once.
struct ShapeKey(Pruned);

impl<'de> DeserializeSeed<'de> for ShapeKey {
    type Value = Option<(String, Pruned)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for ShapeKey {
    type Value = Option<(String, Pruned)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.field(key).map(|p| (key.to_string(), p)))
    }
}

impl<'de> Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(kept) = map.next_key_seed(ShapeKey(self))? {
            match kept {
                Some((key, p)) => {
                    let v = map.next_value_seed(p)?;
                    out.insert(key, v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        // A list's items are objects at the top, as a watch event's is.
        let each = Pruned {
            meta: false,
            ..self
        };
        while let Some(v) = seq.next_element_seed(each)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// `bytes` decoded as `seed` says; trailing text is an error, as
/// `serde_json::from_slice` makes it.
pub fn decode(bytes: &[u8], seed: Pruned) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHAPE: Shape = Shape::Fields(&[
        (
            "metadata",
            Shape::Fields(&[
                ("name", Shape::All),
                ("annotations", Shape::Fields(&[("keep", Shape::All)])),
            ]),
        ),
        (
            "spec",
            Shape::Fields(&[("items", Shape::Fields(&[("a", Shape::All)]))]),
        ),
        ("status", Shape::All),
        ("text", Shape::Text),
    ]);

    fn object() -> Value {
        json!({"metadata": {"name": "n", "managedFields": [{"big": "x"}],
                "annotations": {"keep": "k", "last-applied": "{...}"}},
               "spec": {"items": [{"a": 1, "b": 2}, {"b": 3}, 7], "other": {"x": [1, 2]}},
               "status": {"any": {"deep": [true, null, 1.5]}}})
    }

    #[test]
    fn only_the_named_fields_are_kept() {
        let text = object().to_string();
        let v = decode(text.as_bytes(), Pruned::object(&SHAPE)).unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"name": "n", "annotations": {"keep": "k"}},
                   "spec": {"items": [{"a": 1}, {}, 7]},
                   "status": {"any": {"deep": [true, null, 1.5]}}})
        );
    }

    #[test]
    fn an_objects_identity_is_kept_whatever_its_shape() {
        const BARE: Shape = Shape::Fields(&[("spec", Shape::All)]);
        let o = json!({"metadata": {"name": "n", "namespace": "ns", "uid": "u",
            "resourceVersion": "7", "labels": {"a": "b"}}, "spec": {"x": 1}, "status": {}});
        let v = decode(o.to_string().as_bytes(), Pruned::object(&BARE)).unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"name": "n", "namespace": "ns", "uid": "u",
                "resourceVersion": "7"}, "spec": {"x": 1}})
        );
        let v = decode(o.to_string().as_bytes(), Pruned::object(&SHAPE)).unwrap();
        assert_eq!(v["metadata"]["uid"], "u");
        assert!(v["metadata"].get("labels").is_none());
    }

    #[test]
    fn a_list_keeps_its_metadata_and_prunes_its_items() {
        let list = json!({"kind": "L", "metadata": {"resourceVersion": "9", "continue": "c"},
                          "items": [object(), object()]});
        let v = decode(list.to_string().as_bytes(), Pruned::list(&SHAPE)).unwrap();
        assert_eq!(v["metadata"], list["metadata"]);
        assert_eq!(v["items"].as_array().unwrap().len(), 2);
        assert!(v["items"][1]["metadata"].get("managedFields").is_none());
        const BARE: Shape = Shape::Fields(&[("spec", Shape::All)]);
        let mut item = object();
        item["metadata"]["uid"] = json!("u-1");
        let list = json!({"metadata": {"resourceVersion": "9"}, "items": [item]});
        let v = decode(list.to_string().as_bytes(), Pruned::list(&BARE)).unwrap();
        assert_eq!(
            v["items"][0]["metadata"],
            json!({"name": "n", "uid": "u-1"})
        );
    }

    #[test]
    fn a_status_in_place_of_an_object_keeps_what_errors_read() {
        let status = json!({"kind": "Status", "code": 410, "reason": "Expired",
                            "message": "too old", "details": {"retryAfterSeconds": 1}});
        let v = decode(status.to_string().as_bytes(), Pruned::object(&SHAPE)).unwrap();
        assert_eq!(v["code"], 410);
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        assert_eq!(v["message"], "too old");
    }

    #[test]
    fn a_text_field_is_kept_as_its_json_text() {
        let line = br#"{"text": {"b": [1, "x\n"], "a": null}, "other": 1}"#;
        let v = decode(line, Pruned::object(&SHAPE)).unwrap();
        assert_eq!(v, json!({"text": r#"{"b": [1, "x\n"], "a": null}"#}));
    }

    #[test]
    fn bad_text_is_an_error() {
        for bad in ["{", "{\"a\":1} x", "[1,]", ""] {
            assert!(
                decode(bad.as_bytes(), Pruned::object(&SHAPE)).is_err(),
                "{bad}"
            );
        }
    }
}
