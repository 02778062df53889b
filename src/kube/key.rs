//! Where an object lives ([`ObjectKey`]): the one key the caches, the
//! queue and the views share.

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

    /// This key in `namespace` instead.
    pub fn in_namespace(&self, namespace: &str) -> ObjectKey {
        ObjectKey::new(namespace, self.name())
    }

    /// This key with `name` instead.
    pub fn named(&self, name: &str) -> ObjectKey {
        ObjectKey::new(self.namespace(), name)
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

/// The key of no object (empty namespace and name), shared: every view
/// being decoded starts from it.
impl Default for ObjectKey {
    fn default() -> ObjectKey {
        static EMPTY: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
        ObjectKey {
            text: EMPTY.get_or_init(|| "/".into()).clone(),
            split: 0,
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
