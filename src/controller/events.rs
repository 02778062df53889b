//! Posting Events (docs/contract.md §9.7): at least once, to the right
//! object, never lost silently.
//!
//! - What was posted is remembered by (namespace, Event name) with the
//!   object's uid and the count last written, and seeded at start from a
//!   list of this operator's Events, so a restart neither repeats nor loses.
//! - A name is fixed by (resource, reason, generation). When that name is
//!   taken by an Event of another object (a deleted resource of the same
//!   name), the Event takes a name qualified by the uid instead.
//! - A count bump that meets 404 creates the Event; a create that meets
//!   AlreadyExists bumps it (if it is ours).
//! - A failed post is an error of the sync (retried with backoff); the
//!   Events a transition requires are also recorded in the status the same
//!   write carries (`status.lastEvents`), so a crash between the status write
//!   and the post is repaired on the next pass.

use crate::kube::fields::Skipped;
use crate::kube::path::EVENTS;
use crate::kube::{Client, Error, PatchType, ResourcePath, Retry};
use crate::lock::lock;
use crate::model::names::{event_name, name_reason};
use crate::model::EventReason;
use crate::reconcile::{patches, ModelView};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// What posting an Event reads of one: whose it is and its count (an
/// answer is otherwise ignored).
pub const EVENT: crate::kube::shape::Shape = {
    use crate::kube::shape::Shape::{All, Fields};
    Fields(&[
        ("metadata", Fields(&[])),
        ("involvedObject", Fields(&[("uid", All)])),
        ("count", All),
    ])
};

/// One Event this operator wrote: a digest of its object's uid, and the
/// count last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    uid: u64,
    count: i64,
}

/// What has been posted, by (namespace, Event name), bounded.
///
/// Names and uids are kept as 64-bit digests keyed per process: tens of
/// thousands of Events are remembered, and their text cost five times the
/// memory (docs/performance.md, memory per resource). Two names that share a
/// digest by chance (odds about 1 in 10^10 at the cap) would at worst leave
/// one Event unposted; a neighbour cannot aim at one, the key being random.
pub struct Posted {
    events: HashMap<u64, Written>,
    order: VecDeque<u64>,
    digest: std::hash::RandomState,
}

impl Default for Posted {
    fn default() -> Posted {
        Posted {
            events: HashMap::new(),
            order: VecDeque::new(),
            digest: std::hash::RandomState::new(),
        }
    }
}

const POSTED_CAP: usize = 20_000;

impl Posted {
    fn name_digest(&self, namespace: &str, name: &str) -> u64 {
        use std::hash::BuildHasher;
        self.digest.hash_one((namespace, name))
    }

    fn uid_digest(&self, uid: &str) -> u64 {
        use std::hash::BuildHasher;
        self.digest.hash_one(uid)
    }

    /// What was written under `namespace/name`, and whether it was for
    /// the object of `uid`.
    fn get(&self, namespace: &str, name: &str, uid: &str) -> Option<(Written, bool)> {
        let w = *self.events.get(&self.name_digest(namespace, name))?;
        Some((w, w.uid == self.uid_digest(uid)))
    }

    fn set(&mut self, namespace: &str, name: &str, uid: &str, count: i64) {
        let k = self.name_digest(namespace, name);
        let w = Written {
            uid: self.uid_digest(uid),
            count,
        };
        if self.events.insert(k, w).is_none() {
            self.order.push_back(k);
            while self.order.len() > POSTED_CAP {
                if let Some(old) = self.order.pop_front() {
                    self.events.remove(&old);
                }
            }
        }
    }

    /// Remember every Event of a list (ours, listed at start).
    pub fn seed(&mut self, items: &[Value]) {
        for e in items {
            let meta = &e["metadata"];
            let Some(name) = meta["name"].as_str() else {
                continue;
            };
            let namespace = meta["namespace"].as_str().unwrap_or("");
            let uid = e["involvedObject"]["uid"].as_str().unwrap_or("");
            let count = e["count"].as_i64().unwrap_or(1);
            self.set(namespace, name, uid, count);
        }
    }
}

/// The Event name for `model`'s `reason` (with a rollback's `tag`, §2.6) at
/// `generation`: the contract's name, or (when another object holds that
/// name) one qualified by the uid.
fn names(
    model: &ModelView,
    reason: EventReason,
    tag: Option<&str>,
    generation: i64,
) -> [String; 2] {
    let base = event_name(model.name(), &name_reason(reason.as_str(), tag), generation);
    let tag = model.uid.bytes().filter(u8::is_ascii_alphanumeric).take(8);
    let mut qualified = String::with_capacity(base.len() + 9);
    qualified.extend(base.chars().take(253 - tag.clone().count() - 1));
    qualified.truncate(qualified.trim_end_matches('-').len());
    qualified.push('-');
    qualified.extend(tag.map(char::from));
    [base, qualified]
}

/// Posts Events for the reconciler.
pub struct Poster<'a> {
    pub client: &'a Client,
    pub posted: &'a Mutex<Posted>,
}

impl Poster<'_> {
    /// Post an occurrence of `reason` for `model`: create it, or bump the
    /// count of the one already written for this object. Returns the
    /// Event's count and the name it was written under.
    pub fn post(
        &self,
        model: &ModelView,
        reason: EventReason,
        tag: Option<&str>,
        generation: i64,
        message: &str,
        now: &str,
    ) -> Result<(i64, String), Error> {
        let ns = model.namespace();
        for name in names(model, reason, tag, generation) {
            let known = lock(self.posted).get(ns, &name, &model.uid);
            let count = match known {
                Some((_, false)) => continue,
                Some((w, true)) => self.bump(model, &name, reason, w.count, message, now)?,
                None => match self.create(model, &name, reason, message, now)? {
                    Some(count) => count,
                    None => continue,
                },
            };
            lock(self.posted).set(ns, &name, &model.uid, count);
            return Ok((count, name));
        }
        Err(Error::Config(format!(
            "both names for Event {reason} of {} are taken by other objects",
            model.qualified_name()
        )))
    }

    /// Whether `reason` at `generation` was written for this very object.
    pub fn was_posted(
        &self,
        model: &ModelView,
        reason: EventReason,
        tag: Option<&str>,
        generation: i64,
    ) -> bool {
        let posted = lock(self.posted);
        names(model, reason, tag, generation).iter().any(|n| {
            posted
                .get(model.namespace(), n, &model.uid)
                .is_some_and(|(_, ours)| ours)
        })
    }

    /// Create the Event. `Ok(None)` when the name belongs to another
    /// object; an Event of ours under that name is bumped instead.
    fn create(
        &self,
        model: &ModelView,
        name: &str,
        reason: EventReason,
        message: &str,
        now: &str,
    ) -> Result<Option<i64>, Error> {
        let body = patches::event(model, name, reason, message, now);
        let path = ResourcePath::collection(EVENTS, Some(model.namespace()))?;
        match self.client.create_as::<Skipped>(&path, &body) {
            Ok(_) => Ok(Some(1)),
            Err(e) if e.is_already_exists() => {
                let existing = self.client.get(&ResourcePath::object(
                    EVENTS,
                    Some(model.namespace()),
                    name,
                )?)?;
                if existing["involvedObject"]["uid"] != model.uid.as_str() {
                    return Ok(None);
                }
                let count = existing["count"].as_i64().unwrap_or(1);
                self.bump(model, name, reason, count, message, now)
                    .map(Some)
            }
            Err(e) => Err(e),
        }
    }

    /// Record another occurrence; an Event that has gone is created again.
    fn bump(
        &self,
        model: &ModelView,
        name: &str,
        reason: EventReason,
        count: i64,
        message: &str,
        now: &str,
    ) -> Result<i64, Error> {
        let path = ResourcePath::object(EVENTS, Some(model.namespace()), name)?;
        let body = patches::event_repeat(count + 1, message, now);
        match self
            .client
            .patch_as::<Skipped>(&path, PatchType::Merge, &body, Retry::Write)
        {
            Ok(_) => Ok(count + 1),
            Err(e) if e.is_not_found() => {
                let body = patches::event(model, name, reason, message, now);
                let events = ResourcePath::collection(EVENTS, Some(model.namespace()))?;
                self.client.create_as::<Skipped>(&events, &body)?;
                Ok(1)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(name: &str) -> ModelView {
        ModelView::from_json(&json!({"metadata": {"name": name, "namespace": "ml",
            "uid": "1a2b-3c4d-5e6f-7a8b", "resourceVersion": "1"}, "spec": {}}))
        .unwrap()
    }

    /// The qualified name is the contract's name, cut to leave room, then
    /// the first eight letters and digits of the uid (§9.7).
    #[test]
    fn a_qualified_name_is_the_name_cut_to_fit_and_eight_characters_of_the_uid() {
        let [base, qualified] = names(&model("onc"), EventReason::RolloutStarted, None, 3);
        assert_eq!(qualified, format!("{base}-1a2b3c4d"));
        let [base, qualified] = names(
            &model(&"a".repeat(250)),
            EventReason::RolloutStarted,
            None,
            3,
        );
        let cut: String = base.chars().take(253 - 9).collect();
        assert_eq!(qualified, format!("{}-1a2b3c4d", cut.trim_end_matches('-')));
        assert!(qualified.len() <= 253);
    }
}
