//! Where an object lives ([`ObjectKey`]): the one key the caches, the
//! queue and the views share.

use crate::lock::lock;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Keys up to this long are joined without a second allocation.
const KEY_ON_STACK: usize = 320;

/// Where an object lives: namespace (empty for cluster-scoped) and name.
///
/// One shared allocation, `namespace/name`: a resource's key sits in a
/// dozen maps (caches, indexes, the queue, the settled set), and every key
/// of one text shares it ([`shared`]), whichever decode or lookup made it.
/// The namespace ends at the text's first `/`: a namespace is an RFC 1123
/// label (upstream `ValidateNamespaceName`), so it holds none, and the key
/// is no wider than its pointer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    text: Arc<str>,
}

/// The texts of the keys in use. Each object's key is made anew at every
/// watch event, answer and lookup that names it, and kept by whichever
/// map took it then: shared here, they are one allocation, not one a
/// holder (docs/performance.md, memory per resource).
struct Texts {
    set: HashSet<Arc<str>>,
    /// How many the set held after its last sweep.
    swept: usize,
}

/// Below this many texts, the set is never swept.
const TEXTS_UNSWEPT: usize = 1024;

static TEXTS: Mutex<Option<Texts>> = Mutex::new(None);

/// `text` as the one allocation every key of it shares. A text no key
/// holds any more goes at the next sweep, made when the set has doubled
/// since the last: at most twice the keys in use are kept.
fn shared(text: &str) -> Arc<str> {
    let mut guard = lock(&TEXTS);
    let texts = guard.get_or_insert_with(|| Texts {
        set: HashSet::new(),
        swept: 0,
    });
    if let Some(t) = texts.set.get(text) {
        return t.clone();
    }
    if texts.set.len() >= 2 * texts.swept.max(TEXTS_UNSWEPT) {
        texts.set.retain(|t| Arc::strong_count(t) > 1);
        texts.swept = texts.set.len();
    }
    let t: Arc<str> = text.into();
    texts.set.insert(t.clone());
    t
}

impl ObjectKey {
    /// The shared text of `namespace/name` ([`shared`]), joined on the
    /// stack first: a namespace is 63 bytes at most, a name 253.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> ObjectKey {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        let mut buf = [0u8; KEY_ON_STACK];
        let len = namespace.len() + 1 + name.len();
        let text = match buf.get_mut(..len) {
            Some(joined) => {
                let (ns, rest) = joined.split_at_mut(namespace.len());
                ns.copy_from_slice(namespace.as_bytes());
                rest[0] = b'/';
                rest[1..].copy_from_slice(name.as_bytes());
                // Two strings joined by '/' are UTF-8.
                match std::str::from_utf8(joined) {
                    Ok(t) => shared(t),
                    Err(_) => shared(&format!("{namespace}/{name}")),
                }
            }
            None => shared(&format!("{namespace}/{name}")),
        };
        ObjectKey { text }
    }

    /// This key in `namespace` instead.
    pub fn in_namespace(&self, namespace: &str) -> ObjectKey {
        ObjectKey::new(namespace, self.name())
    }

    /// This key with `name` instead.
    pub fn named(&self, name: &str) -> ObjectKey {
        ObjectKey::new(self.namespace(), name)
    }

    pub fn namespace(&self) -> &str {
        self.text.split_once('/').map_or("", |(ns, _)| ns)
    }

    pub fn name(&self) -> &str {
        self.text.split_once('/').map_or("", |(_, name)| name)
    }

    /// `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key of a JSON object, from its metadata.
    pub fn of(o: &serde_json::Value) -> Option<ObjectKey> {
        let name = o["metadata"]["name"].as_str()?;
        Some(ObjectKey::new(
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            name,
        ))
    }
}

/// The key of no object (empty namespace and name), shared: every view
/// being decoded starts from it.
impl Default for ObjectKey {
    fn default() -> ObjectKey {
        static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
        ObjectKey {
            text: EMPTY.get_or_init(|| "/".into()).clone(),
        }
    }
}

/// By namespace, then name (not by the joined text: `a-b/x` sorts after
/// `a/x`).
impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectKey")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .finish()
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_sort_and_print_by_namespace_then_name() {
        let k = ObjectKey::new("a", "n");
        assert_eq!((k.namespace(), k.name(), k.as_str()), ("a", "n", "a/n"));
        assert_eq!(k.to_string(), "a/n");
        assert!(ObjectKey::new("a", "x") < ObjectKey::new("a-b", "x"));
        let o = serde_json::json!({"metadata": {"name": "c"}});
        assert_eq!(ObjectKey::of(&o), Some(ObjectKey::new("", "c")));
        // Each map entry, view and read holds one: its pointer and length.
        assert_eq!(std::mem::size_of::<ObjectKey>(), 16);
    }

    /// Keys of one text, made apart (two decodes, a lookup), are one
    /// allocation; the texts of keys no longer held go at a sweep.
    #[test]
    fn keys_of_one_text_share_it_and_dropped_ones_go() {
        let a = ObjectKey::new("shared-ns", "m");
        let o = serde_json::json!({"metadata": {"namespace": "shared-ns", "name": "m"}});
        let b = ObjectKey::of(&o).expect("a key");
        assert!(Arc::ptr_eq(&a.text, &b.text), "two allocations of one text");
        assert!(Arc::ptr_eq(&a.text, &a.named("m").text));
        const DROPPED: usize = 20_000;
        for i in 0..DROPPED {
            drop(ObjectKey::new("dropped-ns", format!("m-{i}")));
        }
        let held = lock(&TEXTS).as_ref().map_or(0, |t| t.set.len());
        assert!(
            held < DROPPED / 2,
            "{held} texts kept after {DROPPED} dropped"
        );
        assert!(Arc::ptr_eq(&a.text, &ObjectKey::new("shared-ns", "m").text));
    }

    #[test]
    fn keys_of_every_length_and_alphabet_keep_both_parts() {
        let long = "é".repeat(400);
        for (ns, name) in [
            ("", ""),
            ("ns", &long[..]),
            (&long[..200], "n"),
            ("ns", "ñ/x"),
        ] {
            let k = ObjectKey::new(ns, name);
            assert_eq!((k.namespace(), k.name()), (ns, name));
            assert_eq!(k.as_str(), format!("{ns}/{name}"));
            let o = serde_json::json!({"metadata": {"namespace": ns, "name": name}});
            assert_eq!(Some(k), ObjectKey::of(&o));
        }
    }
}
