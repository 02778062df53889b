//! The live status view: one row per OpenMedModel in scope, built
//! from the operator's own caches (no API request per viewer or per update),
//! served as a page, as JSON (`/api/models`) and as a stream of changes
//! (Server-Sent Events, `/events`).
//!
//! Only what status already shows goes out: versions, phase, conditions and
//! their reasons, the target's replica counts, rollback count and request,
//! and the Events the operator itself wrote (reason, type, count, time,
//! message). No env values, no ConfigMap data, no spec beyond the model
//! coordinates; user strings are cut to [`MAX_TEXT`].

pub mod hub;
pub mod page;

use crate::lock::lock;
use crate::memory::pack::{pack, unpack, Dictionary};
use crate::reconcile::{DeploymentView, ModelView};
use crate::runtime::{ObjectKey, Reader};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

/// Longest string copied from a resource into the view.
pub const MAX_TEXT: usize = 256;
/// Events kept per model, newest first: each a distinct Event object, so
/// every rollout and rollback of a model's recent past shows (§2.6 names
/// them apart), and a bump replaces the record it bumps.
const EVENTS_PER_MODEL: usize = 10;
/// Models whose Events are kept (the oldest entry goes beyond it).
const EVENT_MODELS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Badge {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub desired: i64,
    pub updated: i64,
    pub ready: i64,
    pub available: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub reason: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub count: i64,
    /// RFC 3339; the page shows the age.
    pub last: String,
    pub message: String,
}

impl EventRow {
    pub fn seen(&self) -> RecordedEvent<'_> {
        RecordedEvent {
            reason: &self.reason,
            type_: &self.type_,
            count: self.count,
            last: &self.last,
            message: &self.message,
        }
    }
}

/// An Event as it is recorded: borrowed, and copied into its row once.
#[derive(Debug, Clone, Copy)]
pub struct RecordedEvent<'a> {
    pub reason: &'a str,
    pub type_: &'a str,
    pub count: i64,
    pub last: &'a str,
    pub message: &'a str,
}

/// One OpenMedModel, as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub family: String,
    pub tier: String,
    pub desired: String,
    pub active: String,
    pub phase: String,
    pub conditions: Vec<Badge>,
    pub target: String,
    pub progress: Option<Progress>,
    pub rollbacks: i64,
    pub rollback_request: String,
    /// The latest condition transition (RFC 3339), if any.
    pub since: String,
    pub deleting: bool,
    pub events: Vec<EventRow>,
}

/// `s` cut to [`MAX_TEXT`] characters, control characters escaped.
fn bounded(s: &str) -> String {
    crate::foreign::bounded(s, MAX_TEXT)
}

fn text(v: &Value) -> String {
    v.as_str().map(bounded).unwrap_or_default()
}

/// The conditions as stored, whoever wrote them: the page shows what a
/// `kubectl get -o yaml` would, known reasons or not.
#[derive(serde::Deserialize)]
struct Shown {
    conditions: Vec<Value>,
}

/// The row of `model`, with its target from `deployments` (if claimed).
pub fn row(model: &ModelView, deployment: Option<&DeploymentView>, events: Vec<EventRow>) -> Row {
    let spec = model.spec().cloned().unwrap_or(Value::Null);
    let status = model.status();
    let conditions = model
        .status_fields::<Shown>()
        .map(|s| s.conditions)
        .unwrap_or_default();
    let since = conditions
        .iter()
        .filter_map(|c| c["lastTransitionTime"].as_str())
        .max()
        .map(bounded)
        .unwrap_or_default();
    let progress = deployment.map(|d| Progress {
        desired: d.replicas.unwrap_or(1),
        updated: d.updated_replicas,
        ready: d.ready_replicas,
        available: d.available_replicas,
    });
    let str_of = |f: &Option<String>| f.as_deref().map(bounded).unwrap_or_default();
    Row {
        key: format!("{}/{}", model.namespace(), model.name()),
        namespace: model.namespace().to_string(),
        name: model.name().to_string(),
        family: text(&spec["family"]),
        tier: text(&spec["tier"]),
        desired: text(&spec["version"]),
        active: str_of(&status.active_version),
        phase: model
            .phase
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "Pending".into()),
        conditions: conditions
            .iter()
            .take(8)
            .map(|c| Badge {
                type_: text(&c["type"]),
                status: text(&c["status"]),
                reason: text(&c["reason"]),
            })
            .collect(),
        target: text(&spec["targetRef"]["name"]),
        progress,
        rollbacks: status.rollback_count.unwrap_or(0),
        rollback_request: str_of(&status.rollback_request),
        since,
        deleting: model.deleting,
        events,
    }
}

/// Rows from the caches, each rebuilt only when its model, its target or
/// its Events changed (unpacking a model's status costs more than copying a
/// row), and a whole pass skipped when no cache changed at all.
pub struct Rows {
    models: Reader<ModelView>,
    deployments: Reader<DeploymentView>,
    recent: std::sync::Arc<RecentEvents>,
    built: Mutex<HashMap<String, Built>>,
}

/// A row and what it was built from: the model's and the Deployment's
/// resourceVersions and the model's Events' version.
struct Built {
    from: (String, String, u64),
    row: Row,
}

impl Rows {
    pub fn new(
        models: Reader<ModelView>,
        deployments: Reader<DeploymentView>,
        recent: std::sync::Arc<RecentEvents>,
    ) -> Rows {
        Rows {
            models,
            deployments,
            recent,
            built: Mutex::new(HashMap::new()),
        }
    }
}

impl hub::Source for Rows {
    /// Grows with every change a row could show.
    fn version(&self) -> u64 {
        self.models.changes() + self.deployments.changes() + self.recent.version()
    }

    fn idle(&self) {
        *lock(&self.built) = HashMap::new();
    }

    /// Every model in scope, by key. The store's lock is held only to list
    /// the models and copy the ones that changed; rows are built after.
    fn rows(&self) -> BTreeMap<String, Row> {
        let mut listed = Vec::new();
        {
            let built = lock(&self.built);
            self.models.for_each(|stored| {
                let key = stored.key();
                let same = built
                    .get(key.as_str())
                    .is_some_and(|b| b.from.0 == stored.resource_version);
                // A copy: parsing the stored view would keep its parsed
                // spec and status in the cache for good (the memo is the
                // view's).
                listed.push((key, (!same).then(|| stored.clone())));
            });
        }
        let mut built = lock(&self.built);
        let mut rows = BTreeMap::new();
        for (key, copy) in listed {
            let Some(row) = self.row_of(&mut built, &key, copy) else {
                continue;
            };
            rows.insert(key.as_str().to_string(), row);
        }
        built.retain(|k, _| rows.contains_key(k));
        rows
    }
}

impl Rows {
    /// The row of the model at `key`: the one built before if nothing it
    /// shows changed, else a new one (from `copy`, or a fresh copy).
    fn row_of(
        &self,
        built: &mut HashMap<String, Built>,
        key: &ObjectKey,
        copy: Option<ModelView>,
    ) -> Option<Row> {
        let (ns, name) = (key.namespace(), key.name());
        let mut copy = copy;
        let known = built.get(key.as_str());
        let target = match (&copy, known) {
            (None, Some(b)) => b.row.target.clone(),
            _ => {
                let m = match copy.take() {
                    Some(m) => m,
                    None => self.models.get(key)?,
                };
                let t = m
                    .spec()
                    .map(|s| text(&s["targetRef"]["name"]))
                    .unwrap_or_default();
                copy = Some(m);
                t
            }
        };
        let d = Some(&target)
            .filter(|t| !t.is_empty())
            .and_then(|t| self.deployments.get(&ObjectKey::new(ns, t)));
        let model_version = match (&copy, known) {
            (Some(m), _) => m.resource_version.clone(),
            (None, Some(b)) => b.from.0.clone(),
            (None, None) => return None,
        };
        let from = (
            model_version,
            d.as_ref()
                .map(|d| d.resource_version.clone())
                .unwrap_or_default(),
            self.recent.version_of(ns, name),
        );
        if let Some(b) = built.get(key.as_str()).filter(|b| b.from == from) {
            return Some(b.row.clone());
        }
        let m = match copy {
            Some(m) => m,
            None => self.models.get(key)?,
        };
        let row = row(&m, d.as_ref(), self.recent.of(ns, name));
        built.insert(
            key.as_str().to_string(),
            Built {
                from,
                row: row.clone(),
            },
        );
        Some(row)
    }
}

/// What a model's recorded Events usually hold: the packer's preset
/// dictionary ([`crate::memory::pack`]).
const EVENT_TEXT: &str = concat!(
    "RolloutStarted\0Normal\02026-01-01T00:00:00Z\0Rolling out OpenMed/OpenMed-",
    " to Deployment  (spec changed)\0-rolloutstarted-1-\01\n",
    "RolloutSucceeded\0Normal\02026-01-01T00:00:00Z\0Deployment  is serving OpenMed/OpenMed-",
    "\0-rolloutsucceeded-1-\01\nRolloutFailed\0Warning\0RollbackStarted\0",
    "RollbackSucceeded\0TargetAdopted\0TargetDegraded\0-rollbackstarted-",
);

/// [`EVENT_TEXT`], hashed once.
fn event_dictionary() -> &'static Dictionary {
    static DICT: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
    DICT.get_or_init(|| Dictionary::new(EVENT_TEXT))
}

/// One model's recorded Events, newest first, in one packed allocation:
/// a row a line, each row its reason, type, time, message, Event name and
/// count joined by NULs (each part bounded and escaped, so none holds a NUL
/// or a line break). The rows of one model repeat its name, its version and
/// the time; rows of their own cost 4x the memory at thousands of models
/// (docs/performance.md, memory per resource).
#[derive(Default)]
struct KeptEvents {
    /// The count of records when they last changed.
    version: u64,
    packed: Box<[u8]>,
}

/// One row of [`KeptEvents`]' text.
struct Line<'a>([&'a str; 6]);

impl<'a> Line<'a> {
    fn parse(line: &'a str) -> Line<'a> {
        let mut parts = [""; 6];
        for (slot, part) in parts.iter_mut().zip(line.split('\0')) {
            *slot = part;
        }
        Line(parts)
    }

    /// The Event object's name: what tells two records apart.
    fn id(&self) -> &str {
        self.0[4]
    }

    fn row(&self) -> EventRow {
        let [reason, type_, last, message, _, count] = self.0;
        EventRow {
            reason: reason.into(),
            type_: type_.into(),
            last: last.into(),
            message: message.into(),
            count: count.parse().unwrap_or(1),
        }
    }
}

impl KeptEvents {
    fn text(&self) -> String {
        unpack(&self.packed, event_dictionary()).unwrap_or_default()
    }

    /// Event `id` recorded: first, in place of an earlier record of it.
    fn record(&mut self, version: u64, id: &str, e: &RecordedEvent) {
        let old = self.text();
        let parts = [e.reason, e.type_, e.last, e.message, id].map(bounded);
        let mut text = parts.join("\0");
        text.push('\0');
        text.push_str(&e.count.to_string());
        let earlier = old.lines().filter(|l| Line::parse(l).id() != parts[4]);
        for line in earlier.take(EVENTS_PER_MODEL - 1) {
            text.push('\n');
            text.push_str(line);
        }
        self.packed = pack(&text, event_dictionary());
        self.version = version;
    }

    fn rows(&self) -> Vec<EventRow> {
        self.text().lines().map(|l| Line::parse(l).row()).collect()
    }
}

/// The Events the operator wrote lately, per model (it does not watch
/// Events: these are what it posted, and what it listed at start).
#[derive(Default)]
pub struct RecentEvents(Mutex<Recent>);

#[derive(Default)]
struct Recent {
    by_model: HashMap<ObjectKey, KeptEvents>,
    order: VecDeque<ObjectKey>,
    records: u64,
}

impl RecentEvents {
    /// The Event `id` (its object's name) written or bumped for the model
    /// of `key` (kept: a copy of the model's own key shares its text).
    pub fn record(&self, key: &ObjectKey, id: &str, e: RecordedEvent) {
        let key = key.clone();
        let mut r = lock(&self.0);
        if !r.by_model.contains_key(&key) {
            r.order.push_back(key.clone());
            while r.order.len() > EVENT_MODELS {
                if let Some(old) = r.order.pop_front() {
                    r.by_model.remove(&old);
                }
            }
        }
        r.records += 1;
        let records = r.records;
        r.by_model.entry(key).or_default().record(records, id, &e);
    }

    /// An Event object as listed from the API server, if it is about an
    /// OpenMedModel.
    pub fn record_object(&self, ev: &Value) {
        let about = &ev["involvedObject"];
        if about["kind"] != "OpenMedModel" {
            return;
        }
        let (Some(ns), Some(name), Some(id)) = (
            about["namespace"].as_str(),
            about["name"].as_str(),
            ev["metadata"]["name"].as_str(),
        ) else {
            return;
        };
        let last = ev["lastTimestamp"]
            .as_str()
            .or(ev["eventTime"].as_str())
            .unwrap_or_default();
        let row = EventRow {
            reason: text(&ev["reason"]),
            type_: text(&ev["type"]),
            count: ev["count"].as_i64().unwrap_or(1),
            last: last.to_string(),
            message: text(&ev["message"]),
        };
        self.record(&ObjectKey::new(ns, name), id, row.seen());
    }

    pub fn of(&self, namespace: &str, name: &str) -> Vec<EventRow> {
        let r = lock(&self.0);
        r.by_model
            .get(&ObjectKey::new(namespace, name))
            .map(KeptEvents::rows)
            .unwrap_or_default()
    }

    /// Grows with every Event recorded.
    pub fn version(&self) -> u64 {
        lock(&self.0).records
    }

    /// Changes when this model's Events do.
    pub fn version_of(&self, namespace: &str, name: &str) -> u64 {
        let r = lock(&self.0);
        r.by_model
            .get(&ObjectKey::new(namespace, name))
            .map_or(0, |k| k.version)
    }
}

/// What changed between two snapshots: rows to show, keys to drop.
pub fn diff(old: &BTreeMap<String, Row>, new: &BTreeMap<String, Row>) -> (Vec<Row>, Vec<String>) {
    let changed = new
        .iter()
        .filter(|(k, r)| old.get(*k) != Some(r))
        .map(|(_, r)| r.clone())
        .collect();
    let gone = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    (changed, gone)
}

#[cfg(test)]
mod tests;
