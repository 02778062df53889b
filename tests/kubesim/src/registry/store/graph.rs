//! The garbage collector's owner graph, kept from the store's own writes:
//! which uids exist and how many owner references name each. Upstream's
//! `GraphBuilder.processGraphChanges` keeps `uidToNode` from informer
//! events and queues `attemptToDeleteItem` only for the dependents of an
//! owner that went away or is absent (a "virtual" owner); it never walks
//! every object on a timer. With this graph the store starts a pass only
//! then, not at every delete of an object nobody owns (a pod of a
//! rollout), which at 10,000 Deployments made each tick a walk of every
//! object under the store's lock.

use serde_json::Value;
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct OwnerGraph {
    /// uid → how many owner references name it, and whether it exists.
    nodes: HashMap<String, Node>,
}

#[derive(Debug, Default)]
struct Node {
    dependents: usize,
    live: bool,
}

/// The owner uids `obj` names.
fn owners(obj: &Value) -> impl Iterator<Item = &str> {
    let refs = obj["metadata"]["ownerReferences"].as_array();
    refs.into_iter().flatten().filter_map(|r| r["uid"].as_str())
}

fn uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["uid"].as_str()
}

impl OwnerGraph {
    /// A write seen: `old` replaced by `new` (None: deleted). Returns
    /// whether the collector has work: an object others name is gone, or
    /// `new` names an owner that does not exist.
    pub fn write(&mut self, old: Option<&Value>, new: Option<&Value>) -> bool {
        let mut work = false;
        for owner in old.into_iter().flat_map(owners) {
            self.forget_reference(owner);
        }
        if let (Some(old), None) = (old, new) {
            if let Some(u) = uid(old) {
                let node = self.nodes.entry(u.to_string()).or_default();
                node.live = false;
                work |= node.dependents > 0;
                if node.dependents == 0 {
                    self.nodes.remove(u);
                }
            }
        }
        if let Some(new) = new {
            if let Some(u) = uid(new) {
                self.nodes.entry(u.to_string()).or_default().live = true;
            }
            for owner in owners(new) {
                let node = self.nodes.entry(owner.to_string()).or_default();
                node.dependents += 1;
                work |= !node.live;
            }
        }
        work
    }

    fn forget_reference(&mut self, owner: &str) {
        if let Some(node) = self.nodes.get_mut(owner) {
            node.dependents = node.dependents.saturating_sub(1);
            if node.dependents == 0 && !node.live {
                self.nodes.remove(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners.iter().map(|o| json!({"uid": o})).collect();
        json!({"metadata": {"uid": uid, "ownerReferences": refs}})
    }

    /// Upstream's `GraphBuilder.processGraphChanges` queues
    /// `attemptToDeleteItem` for the dependents of a deleted owner and for
    /// an object whose owner is absent (a virtual node); nothing else.
    #[test]
    fn only_the_loss_of_an_owner_or_a_missing_owner_is_work() {
        let mut g = OwnerGraph::default();
        let (rs, pod) = (obj("rs", &[]), obj("pod", &["rs"]));
        assert!(!g.write(None, Some(&rs)));
        assert!(!g.write(None, Some(&pod)), "its owner exists");
        assert!(!g.write(Some(&pod), Some(&pod)));
        assert!(g.write(Some(&rs), None), "the pod's owner is gone");
        assert!(
            g.write(None, Some(&obj("late", &["rs"]))),
            "an absent owner"
        );
        assert!(!g.write(Some(&pod), None), "nothing names the pod");
        let lone = obj("lone", &[]);
        assert!(!g.write(None, Some(&lone)));
        assert!(!g.write(Some(&lone), None));
    }
}
