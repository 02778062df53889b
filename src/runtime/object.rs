//! What the runtime knows of an object: where it lives ([`ObjectKey`]) and
//! how old a view of it is ([`Versioned`]). Nothing of any kind's fields.

pub use crate::kube::key::ObjectKey;

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
    fn resource_versions_compare_as_numbers() {
        assert!(newer("10", "9") && !newer("9", "10") && !newer("x", "1"));
    }
}
