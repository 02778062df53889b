//! Lists: one page, or every page followed through `continue` within the
//! bounds of [`super::ClientConfig`].

use super::request::{Method, Req};
use super::{Client, Retry, Verb};
use crate::kube::error::{Error, Result};
use crate::kube::fields::{As, Decode, Key};
use crate::kube::path::ResourcePath;
use crate::kube::shape::Shape;
use crate::lock::lock;
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::marker::PhantomData;

const META_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    /// Ask for `PartialObjectMetadata` only (a cheap metadata-only view).
    pub metadata_only: bool,
}

/// One page of a list, or all pages joined, its items decoded as `O`.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectList<O = Value> {
    pub items: Vec<O>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    /// The length of the body (bodies, for [`Client::list_all`]) it came in.
    pub bytes: usize,
}

impl Client {
    /// One page of a list ([`Client::list_all`] follows `continue`). Like
    /// every list, it waits for the list in flight.
    pub fn list(&self, path: &ResourcePath, params: &ListParams) -> Result<ObjectList> {
        let _one_at_a_time = lock(&self.list_gate);
        self.list_page(path, params)
    }

    fn list_page<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &ListParams,
    ) -> Result<ObjectList<O>> {
        let (mut list, bytes) = self.decoded(self.page_request(path, params), decode_list)?;
        list.bytes = bytes;
        Ok(list)
    }

    /// The request for one page (apart from the decoding: one copy for
    /// every kind).
    #[inline(never)]
    fn page_request(&self, path: &ResourcePath, params: &ListParams) -> Req<'static> {
        let mut req = self.req(Verb::List, Method::Get, path, Retry::Read);
        push_selectors(
            &mut req.query,
            &params.label_selector,
            &params.field_selector,
        );
        if let Some(l) = params.limit {
            req.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &params.continue_token {
            req.query.push(("continue", c.clone()));
        }
        if params.metadata_only {
            req.accept = META_LIST;
        }
        req
    }

    /// Every page of a list, in order. If a continue token expires midway
    /// (410) the list starts over, as client-go's pager does. At most
    /// `max_list_pages` pages, `max_list_items` items and `max_list_bytes`
    /// bytes of bodies; a `continue`
    /// token seen before is an error. One list at a time across the client,
    /// all its pages: the items of lists in flight never add up.
    pub fn list_all(&self, path: &ResourcePath, params: &ListParams) -> Result<ObjectList> {
        self.list_all_as(path, params)
    }

    /// [`Client::list_all`], each item decoded as `O`.
    pub fn list_all_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &ListParams,
    ) -> Result<ObjectList<O>> {
        let _one_at_a_time = lock(&self.list_gate);
        let mut restarts = 0;
        'outer: loop {
            let mut p = params.clone();
            p.limit = Some(p.limit.unwrap_or(self.cfg.page_size));
            p.continue_token = None;
            let mut all = Vec::new();
            let mut bytes = 0usize;
            let mut seen = std::collections::HashSet::new();
            for _ in 0..self.cfg.max_list_pages {
                let page = match self.list_page(path, &p) {
                    Ok(page) => page,
                    Err(e) if e.is_gone() && p.continue_token.is_some() && restarts < 3 => {
                        restarts += 1;
                        continue 'outer;
                    }
                    Err(e) => return Err(e),
                };
                all.extend(page.items);
                bytes = bytes.saturating_add(page.bytes);
                self.within_bounds(all.len(), bytes)?;
                let Some(c) = page.continue_token else {
                    return Ok(ObjectList {
                        items: all,
                        resource_version: page.resource_version,
                        continue_token: None,
                        bytes,
                    });
                };
                if !seen.insert(digest_of(&c)) {
                    return Err(Error::ListBound(
                        "the server repeated a continue token".into(),
                    ));
                }
                p.continue_token = Some(c);
            }
            let max = self.cfg.max_list_pages;
            return Err(Error::ListBound(format!("more than {max} pages")));
        }
    }
}

impl Client {
    /// A list of `items` in `bytes` of bodies so far is within the bounds.
    #[inline(never)]
    fn within_bounds(&self, items: usize, bytes: usize) -> Result<()> {
        if items > self.cfg.max_list_items {
            let max = self.cfg.max_list_items;
            return Err(Error::ListBound(format!("more than {max} items")));
        }
        if bytes > self.cfg.max_list_bytes {
            let mib = self.cfg.max_list_bytes >> 20;
            return Err(Error::ListBound(format!("more than {mib} MiB")));
        }
        Ok(())
    }
}

pub(super) fn push_selectors(
    q: &mut Vec<(&'static str, String)>,
    label: &Option<String>,
    field: &Option<String>,
) {
    if let Some(l) = label.as_ref().filter(|l| !l.is_empty()) {
        q.push(("labelSelector", l.clone()));
    }
    if let Some(f) = field.as_ref().filter(|f| !f.is_empty()) {
        q.push(("fieldSelector", f.clone()));
    }
}

/// A list page: its items decoded as `O` (of a `Value`, what `shape`
/// names), its metadata's resourceVersion and continue token.
fn decode_list<O: Decode>(
    bytes: &[u8],
    shape: &'static Shape,
) -> serde_json::Result<ObjectList<O>> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let list = de.deserialize_map(Page(shape, PhantomData))?;
    de.end()?;
    Ok(list)
}

struct Page<O>(&'static Shape, PhantomData<fn() -> O>);

impl<'de, O: Decode> Visitor<'de> for Page<O> {
    type Value = ObjectList<O>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let (mut items, mut meta) = (Vec::new(), Value::Null);
        while let Some(Key(key)) = map.next_key()? {
            match key.as_ref() {
                "items" => items = map.next_value_seed(ListItems(self.0, PhantomData))?,
                "metadata" => meta = map.next_value()?,
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        let resource_version = meta["resourceVersion"]
            .as_str()
            .ok_or_else(|| A::Error::custom("list without metadata.resourceVersion"))?
            .to_string();
        let continue_token = meta["continue"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        Ok(ObjectList {
            items,
            resource_version,
            continue_token,
            bytes: 0,
        })
    }
}

/// A list's items: `null` is none; each must be an object.
struct ListItems<O>(&'static Shape, PhantomData<fn() -> O>);

impl<'de, O: Decode> DeserializeSeed<'de> for ListItems<O> {
    type Value = Vec<O>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Vec<O>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, O: Decode> Visitor<'de> for ListItems<O> {
    type Value = Vec<O>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("list items as an array")
    }

    fn visit_unit<E>(self) -> std::result::Result<Vec<O>, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Vec<O>, A::Error> {
        let mut items = Vec::new();
        while let Some(o) = seq.next_element_seed(As::<O>::new(self.0))? {
            items.push(o);
        }
        Ok(items)
    }
}

/// A short fingerprint of a continue token: the set of tokens seen stays
/// small however long the tokens are.
fn digest_of(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_shape_is_checked() {
        let page = |v: Value| decode_list::<Value>(v.to_string().as_bytes(), &Shape::All);
        let ok = page(
            json!({"items": [{"a": 1}], "metadata": {"resourceVersion": "7", "continue": "c"}}),
        )
        .unwrap();
        assert_eq!(ok.resource_version, "7");
        assert_eq!(ok.continue_token.as_deref(), Some("c"));
        assert_eq!(ok.items, vec![json!({"a": 1})]);
        let empty =
            page(json!({"items": null, "metadata": {"resourceVersion": "7", "continue": ""}}))
                .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
        assert!(page(json!({"items": {}, "metadata": {"resourceVersion": "1"}})).is_err());
        assert!(page(json!({"items": [1], "metadata": {"resourceVersion": "1"}})).is_err());
        assert!(page(json!({"items": []})).is_err());
        assert!(decode_list::<Value>(b"{\"items\": []} x", &Shape::All).is_err());
    }
}
