//! Objects decoded straight into typed views, field by field, without a
//! [`serde_json::Value`] tree in between: the hot kinds' watch events and
//! list items (docs/performance.md, allocations). Decoding is lenient as
//! the views' own reading of a `Value` is: a field of the wrong JSON type
//! reads as absent, and what no view reads is skipped without an
//! allocation.

use super::key::ObjectKey;
use super::shape::{Pruned, Shape};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// The visitor methods of the JSON types a visitor does not read, each
/// giving `$out` (a map or an array is skipped through first).
macro_rules! give {
    (scalars => $out:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
    (unit => $out:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
    (map => $out:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($out)
        }
    };
    (seq => $out:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($out)
        }
    };
}

/// What a list item or a watch event's object decodes into: a `Value`
/// kept as the resource's [`Shape`] says, or a typed view.
pub trait Decode: Sized {
    fn decode<'de, D: Deserializer<'de>>(d: D, shape: &'static Shape) -> Result<Self, D::Error>;
}

impl Decode for Value {
    fn decode<'de, D: Deserializer<'de>>(d: D, shape: &'static Shape) -> Result<Value, D::Error> {
        let v = Pruned::object(shape).deserialize(d)?;
        if !v.is_object() {
            return Err(serde::de::Error::custom("not a JSON object"));
        }
        Ok(v)
    }
}

/// An answer of which nothing is read (a posted Event's): checked to be
/// an object, and skipped without an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped;

impl Decode for Skipped {
    fn decode<'de, D: Deserializer<'de>>(d: D, _: &'static Shape) -> Result<Skipped, D::Error> {
        struct Nothing;
        impl<'de> Fill<'de> for Nothing {
            fn fill<A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
                skip(map)
            }
        }
        match object(d, Nothing)? {
            Filled::Object => Ok(Skipped),
            _ => Err(serde::de::Error::custom("not a JSON object")),
        }
    }
}

/// The seed of a `T: Decode`.
pub struct As<T>(pub &'static Shape, pub PhantomData<fn() -> T>);

impl<T> As<T> {
    pub fn new(shape: &'static Shape) -> As<T> {
        As(shape, PhantomData)
    }
}

impl<T> Clone for As<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for As<T> {}

impl<'de, T: Decode> DeserializeSeed<'de> for As<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::decode(d, self.0)
    }
}

/// A typed view filled from an object's fields: each field it reads
/// consumes its value from `map`; any other is skipped (with [`skip`]).
pub trait Fill<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

impl<'de, F: Fill<'de>> Fill<'de> for &mut F {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        (**self).fill(key, map)
    }
}

/// What a value filled into a view was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filled {
    /// An object: its fields filled the view.
    Object,
    /// `null`.
    Null,
    /// Another type: the view was left as it was.
    Other,
}

/// Fill `f` from a value: an object's fields fill it; a value of another
/// type leaves it as it was.
pub fn object<'de, D: Deserializer<'de>, F: Fill<'de>>(d: D, f: F) -> Result<Filled, D::Error> {
    d.deserialize_any(Into(f))
}

/// Fill `f` from the next value (see [`object`]).
pub fn fill_next<'de, A: MapAccess<'de>, F: Fill<'de>>(
    map: &mut A,
    f: F,
) -> Result<Filled, A::Error> {
    map.next_value_seed(Into(f))
}

/// A [`Fill`] for a wrapper of `&mut $view`: each key pattern (a guard
/// allowed) fills the view from its value; every other key is skipped.
/// With `identity`, the wrapper reads an object's metadata, and its
/// identity fills the view's `key`, `uid` and `resource_version` first
/// ([`identity`]).
macro_rules! fill {
    ($wrapper:ident, $view:ty, |$v:ident, $map:ident| {
        $($key:pat $(if $guard:expr)? => $e:expr,)*
    }) => {
        $crate::kube::fields::fill!(@ $wrapper, $view, |$v, $map, _key| {}, {
            $($key $(if $guard)? => $e,)*
        });
    };
    ($wrapper:ident, $view:ty, |$v:ident, $map:ident| identity {
        $($key:pat $(if $guard:expr)? => $e:expr,)*
    }) => {
        $crate::kube::fields::fill!(@ $wrapper, $view, |$v, $map, key| {
            let ids = [&mut $v.uid, &mut $v.resource_version];
            if $crate::kube::fields::identity(key, $map, &mut $v.key, ids)? {
                return Ok(());
            }
        }, {
            $($key $(if $guard)? => $e,)*
        });
    };
    (@ $wrapper:ident, $view:ty, |$v:ident, $map:ident, $k:ident| $first:block, {
        $($key:pat $(if $guard:expr)? => $e:expr,)*
    }) => {
        struct $wrapper<'v>(&'v mut $view);

        impl<'de> $crate::kube::fields::Fill<'de> for $wrapper<'_> {
            fn fill<A: serde::de::MapAccess<'de>>(
                &mut self,
                $k: &str,
                $map: &mut A,
            ) -> Result<(), A::Error> {
                let $v = &mut *self.0;
                $first
                match $k {
                    $($key $(if $guard)? => { $e; })*
                    _ => $crate::kube::fields::skip($map)?,
                }
                Ok(())
            }
        }
    };
}
pub(crate) use fill;

/// The identity every object's metadata holds: its namespace and name in
/// `object`, its uid and resourceVersion (in that order in `ids`); false if
/// `key` is not one of its fields.
pub fn identity<'de, A: MapAccess<'de>>(
    key: &str,
    map: &mut A,
    object: &mut ObjectKey,
    [uid, rv]: [&mut String; 2],
) -> Result<bool, A::Error> {
    let slot = match key {
        "namespace" | "name" => {
            let text = Scalar::next(map)?;
            let text = text.as_str().unwrap_or("");
            *object = match key {
                "namespace" => object.in_namespace(text),
                _ => object.named(text),
            };
            return Ok(true);
        }
        "uid" => uid,
        "resourceVersion" => rv,
        _ => return Ok(false),
    };
    *slot = string(map)?.unwrap_or_default();
    Ok(true)
}

/// Skip the next value without keeping any of it.
pub fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

struct Into<F>(F);

impl<'de, F: Fill<'de>> DeserializeSeed<'de> for Into<F> {
    type Value = Filled;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Filled, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: Fill<'de>> Visitor<'de> for Into<F> {
    type Value = Filled;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Filled, A::Error> {
        while let Some(Key(key)) = map.next_key()? {
            self.0.fill(&key, &mut map)?;
        }
        Ok(Filled::Object)
    }

    give!(seq => Filled::Other);
    give!(scalars => Filled::Other);
    give!(unit => Filled::Null);
}

/// An object's key, borrowed from the text unless it holds an escape
/// (serde's own `Cow<str>` always copies).
pub struct Key<'de>(pub Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(Text)
    }
}

/// Every element of an array, each filled into a fresh `T` by its
/// [`Fill`] (an element that is not an object gives `T::default()`);
/// anything but an array gives none.
pub fn elements<'de, A, T>(map: &mut A) -> Result<Vec<T>, A::Error>
where
    A: MapAccess<'de>,
    T: Default + Fill<'de>,
{
    map.next_value_seed(Elements(PhantomData))
}

/// [`elements`] of a whole text, a JSON array.
pub fn elements_in<'de, T>(text: &'de str) -> Result<Vec<T>, serde_json::Error>
where
    T: Default + Fill<'de>,
{
    let mut de = serde_json::Deserializer::from_str(text);
    let out = Elements(PhantomData).deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// A list as a view keeps it: cached views hold their lists for as long
/// as they are cached, and a list grows to room for 4 at its first element
/// (docs/performance.md, memory per resource).
fn exact<T>(mut list: Vec<T>) -> Vec<T> {
    list.shrink_to_fit();
    list
}

struct Elements<T>(PhantomData<fn() -> T>);

impl<'de, T> DeserializeSeed<'de> for Elements<T>
where
    T: Default + Fill<'de>,
{
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T> Visitor<'de> for Elements<T>
where
    T: Default + Fill<'de>,
{
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let mut t = T::default();
            match seq.next_element_seed(Into(&mut t))? {
                Some(_) => out.push(t),
                None => return Ok(exact(out)),
            }
        }
    }

    give!(map => Vec::new());
    give!(scalars => Vec::new());
    give!(unit => Vec::new());
}

/// A JSON scalar as the views read one (`Value::as_str`, `as_i64`,
/// `as_bool`): of another type, `None`.
#[derive(Debug, Default, Clone, PartialEq)]
pub enum Scalar<'de> {
    #[default]
    Other,
    Str(Cow<'de, str>),
    Int(i64),
    Bool(bool),
    Null,
}

impl<'de> Scalar<'de> {
    pub fn next<A: MapAccess<'de>>(map: &mut A) -> Result<Scalar<'de>, A::Error> {
        map.next_value::<Scalar<'de>>()
    }

    pub fn string(self) -> Option<String> {
        match self {
            Scalar::Str(s) => Some(s.into_owned()),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn boolean(&self) -> Option<bool> {
        match self {
            Scalar::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// The next value as a string (`Value::as_str`, owned).
pub fn string<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<String>, A::Error> {
    Scalar::next(map).map(Scalar::string)
}

/// The strings of an array (`as_array` then `as_str` of each): other
/// elements, or a value that is no array, give none.
pub fn strings<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Vec<String>, A::Error> {
    struct Strings;
    impl<'de> Visitor<'de> for Strings {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<Scalar<'de>>()? {
                out.extend(s.string());
            }
            Ok(exact(out))
        }
        give!(map => Vec::new());
        give!(scalars => Vec::new());
        give!(unit => Vec::new());
    }
    impl<'de> DeserializeSeed<'de> for Strings {
        type Value = Vec<String>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
            d.deserialize_any(self)
        }
    }
    map.next_value_seed(Strings)
}

/// The next value as an integer (`Value::as_i64`).
pub fn int<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<i64>, A::Error> {
    Scalar::next(map).map(|s| s.int())
}

/// The next value as a boolean (`Value::as_bool`).
pub fn boolean<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<bool>, A::Error> {
    Scalar::next(map).map(|s| s.boolean())
}

impl<'de> serde::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar<'de>, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }

    fn visit_string<E>(self, v: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(i64::try_from(v).map_or(Scalar::Other, Scalar::Int))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(v))
    }

    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }

    give!(seq => Scalar::Other);
    give!(map => Scalar::Other);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// `v`'s text decoded as `T`, or None if it does not decode.
    pub(crate) fn decoded<T: Decode>(v: &Value) -> Option<T> {
        let text = v.to_string();
        let mut de = serde_json::Deserializer::from_str(&text);
        T::decode(&mut de, &Shape::All).ok()
    }

    /// Every path of `v`, objects' fields and arrays' elements alike.
    fn paths(v: &Value, at: String, out: &mut Vec<String>) {
        let children: Vec<(String, &Value)> = match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, c)| (k.replace('~', "~0").replace('/', "~1"), c))
                .collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, c)| (i.to_string(), c))
                .collect(),
            _ => return,
        };
        for (k, c) in children {
            let p = format!("{at}/{k}");
            out.push(p.clone());
            paths(c, p, out);
        }
    }

    /// `v` with each of its fields and elements in turn replaced by a value
    /// of every JSON type, and with each removed.
    pub(crate) fn variants(v: &Value) -> Vec<Value> {
        let mut all = vec![v.clone()];
        let mut ps = Vec::new();
        paths(v, String::new(), &mut ps);
        let others = [
            json!(null),
            json!(7),
            json!(-1),
            json!(2.5),
            json!("x"),
            json!(true),
            json!([]),
            json!([{"name": "c"}]),
            json!({}),
            json!(18446744073709551615u64),
        ];
        for p in &ps {
            for o in &others {
                let mut w = v.clone();
                if let Some(slot) = w.pointer_mut(p) {
                    *slot = o.clone();
                }
                all.push(w);
            }
            let (parent, last) = p.rsplit_once('/').unwrap_or(("", p));
            let mut w = v.clone();
            if let Some(Value::Object(m)) = w.pointer_mut(parent) {
                m.remove(&last.replace("~1", "/").replace("~0", "~"));
                all.push(w);
            }
        }
        all
    }

    #[test]
    fn scalars_read_as_a_value_reads_them() {
        let read = |v: Value| decoded::<Probe>(&json!({"x": v})).map(|p| p.0);
        #[derive(Default)]
        struct Probe(Option<(Option<String>, Option<i64>, Option<bool>)>);
        impl<'de> Fill<'de> for Probe {
            fn fill<A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
                let s = Scalar::next(map)?;
                self.0 = Some((s.as_str().map(str::to_string), s.int(), s.boolean()));
                Ok(())
            }
        }
        impl Decode for Probe {
            fn decode<'de, D: Deserializer<'de>>(
                d: D,
                _: &'static Shape,
            ) -> Result<Self, D::Error> {
                let mut p = Probe::default();
                object(d, &mut p)?;
                Ok(p)
            }
        }
        for v in [
            json!("a\"b"),
            json!(1),
            json!(-1),
            json!(u64::MAX),
            json!(1.0),
            json!(true),
            json!(null),
            json!([1]),
            json!({"a": 1}),
        ] {
            let want = (v.as_str().map(str::to_string), v.as_i64(), v.as_bool());
            assert_eq!(read(v.clone()).flatten(), Some(want), "{v}");
        }
        assert_eq!(
            decoded::<Skipped>(&json!({"a": [1, {"b": null}]})),
            Some(Skipped)
        );
        assert_eq!(decoded::<Skipped>(&json!([1])), None);
    }
}
