//! What the runtime knows of an object: where it lives ([`ObjectKey`]) and
//! how old a view of it is ([`Versioned`]). Nothing of any kind's fields.

/// Where an object lives: namespace (empty for cluster-scoped) and name.
///
/// One shared allocation, `namespace/name`: a resource's key sits in a
/// dozen maps (caches, indexes, the queue, the settled set), and clones
/// share it instead of copying two strings each.
/// Keys up to this long are joined without a second allocation.
const KEY_ON_STACK: usize = 320;

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    text: std::sync::Arc<str>,
    /// Where the namespace ends in `text`.
    split: usize,
}

impl ObjectKey {
    /// One allocation, the shared text: a key of a namespace (63 bytes at
    /// most) and a name (253) is joined on the stack first.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> ObjectKey {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        let mut buf = [0u8; KEY_ON_STACK];
        let len = namespace.len() + 1 + name.len();
        let text: std::sync::Arc<str> = match buf.get_mut(..len) {
            Some(joined) => {
                let (ns, rest) = joined.split_at_mut(namespace.len());
                ns.copy_from_slice(namespace.as_bytes());
                rest[0] = b'/';
                rest[1..].copy_from_slice(name.as_bytes());
                // Two strings joined by '/' are UTF-8.
                match std::str::from_utf8(joined) {
                    Ok(t) => t.into(),
                    Err(_) => format!("{namespace}/{name}").into(),
                }
            }
            None => format!("{namespace}/{name}").into(),
        };
        ObjectKey {
            text,
            split: namespace.len(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.text[..self.split]
    }

    pub fn name(&self) -> &str {
        &self.text[self.split + 1..]
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

/// An object as a list or a watch delivers it, before it is a view:
/// where it lives, how old it is, and which object it is.
pub trait Item {
    /// None without a name: no object a store can hold.
    fn key(&self) -> Option<ObjectKey>;
    fn version(&self) -> Option<&str>;
    fn uid(&self) -> &str;
}

impl Item for serde_json::Value {
    fn key(&self) -> Option<ObjectKey> {
        ObjectKey::of(self)
    }
    fn version(&self) -> Option<&str> {
        self["metadata"]["resourceVersion"].as_str()
    }
    fn uid(&self) -> &str {
        self["metadata"]["uid"].as_str().unwrap_or("")
    }
}

/// A cached view's age: what a store compares before it lets one view
/// replace another.
pub trait Versioned {
    fn resource_version(&self) -> &str;
    /// `metadata.uid`, when the view keeps it.
    fn uid(&self) -> &str {
        ""
    }
    /// The object's uid and the ordered counters it carries, if any
    /// (`metadata.generation`, and `status.observedGeneration` where the
    /// status has one): resourceVersions are opaque, these are not.
    fn order(&self) -> Option<(&str, i64, i64)> {
        None
    }
}

/// `new` is an older view of the same object than `old`
/// (docs/contract.md §9.17): never let it replace `old`, whatever order the
/// watch and our writes deliver them in.
pub fn regresses<V: Versioned>(new: &V, old: &V) -> bool {
    match (new.order(), old.order()) {
        (Some((uid, g, o)), Some((old_uid, old_g, old_o))) => {
            uid == old_uid && !uid.is_empty() && (g, o) < (old_g, old_o)
        }
        _ => false,
    }
}

/// Whether resourceVersion `a` is newer than `b`. Kubernetes calls them
/// opaque; in practice they are etcd revisions, and this is only used to
/// avoid putting an older copy from our own write over a newer watch event.
pub fn newer(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x > y,
        _ => false,
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
        assert!(newer("10", "9") && !newer("9", "10") && !newer("x", "1"));
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
