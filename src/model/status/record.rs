//! The status the pass plans and writes (§5.1), as a typed struct: a field
//! or a condition is added here once, and a type mistake is a compile
//! error. Its JSON is the one the operator always wrote: the `/status`
//! merge patch names each field that changes, in key order, `null` for one
//! that goes (§5).

use super::{CondStatus, ConditionType, Conds, OwedEvent, Phase, Reason};
use crate::model::DesiredSpec;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `.status` of an OpenMedModel (§5.1). Fields another writer added are
/// not kept here: a merge patch never names them, so they stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ModelStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_spec_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_spec_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_deployment_generation: Option<i64>,
    #[serde(
        rename = "targetDeploymentUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_deployment_uid: Option<String>,
    /// Who sets the target's replicas instead of the operator (an
    /// autoscaler), absent when the operator does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas_managed_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_spec_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_successful_spec: Option<Snapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_successful_spec: Option<Snapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_spec: Option<Snapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_count: Option<i64>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "each_that_reads"
    )]
    pub conditions: Option<Vec<Condition>>,
    /// What a rejected `rollback-to` annotation replaced, restored when it
    /// goes (9.3, 9.24).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_rejection: Option<BeforeRejection>,
    /// The Events the last transition requires, so one lost to a failed
    /// post or a crash is posted on a later pass (9.7).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "each_that_reads"
    )]
    pub last_events: Option<Vec<OwedEvent>>,
}

/// A desired spec as status keeps it (§5.1: `lastSuccessfulSpec` and
/// friends): its JSON text, shared by every copy of the status and parsed
/// only when a pass asks for the spec.
#[derive(Debug, Clone)]
pub struct Snapshot(Arc<RawValue>);

impl Snapshot {
    /// The snapshot of a spec's JSON.
    pub fn of(v: &Value) -> Snapshot {
        Snapshot(Arc::from(
            RawValue::from_string(v.to_string()).unwrap_or_default(),
        ))
    }

    /// The JSON, parsed.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for Snapshot {
    /// The same JSON, however it was spelled (another writer's spacing or
    /// escapes).
    fn eq(&self, other: &Snapshot) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || self.0.get() == other.0.get()
            || self.value() == other.value()
    }
}

impl Serialize for Snapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Snapshot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Snapshot, D::Error> {
        Box::<RawValue>::deserialize(d).map(|raw| Snapshot(Arc::from(raw)))
    }
}

/// One element of `status.conditions`, kept by its type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: CondStatus,
    pub reason: Reason,
    #[serde(default)]
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Keys another writer added: kept until the condition is written again
    /// (§5), so a condition that has one is never taken as unchanged.
    #[serde(flatten)]
    pub foreign: Map<String, Value>,
}

/// What a rejected `rollback-to` replaced (9.3, 9.24), every key written,
/// `null` for one that was absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeforeRejection {
    pub phase: Option<Phase>,
    pub rollback_request: Option<String>,
    #[serde(default, deserialize_with = "each_that_reads")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, deserialize_with = "each_that_reads")]
    pub last_events: Option<Vec<OwedEvent>>,
}

/// A list whose elements that do not read as `T` (another writer's, or an
/// older operator's) are skipped, so one stray element costs only itself.
pub fn each_that_reads<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Element<T> {
        Reads(T),
        Not(serde::de::IgnoredAny),
    }
    let list = Option::<Vec<Element<T>>>::deserialize(d)?;
    Ok(list.map(|l| {
        l.into_iter()
            .filter_map(|e| match e {
                Element::Reads(t) => Some(t),
                Element::Not(_) => None,
            })
            .collect()
    }))
}

impl ModelStatus {
    /// The status of a JSON text. A field that does not read as its type
    /// (another writer's, or garbage) reads as absent; the others are kept.
    pub fn from_text(text: &str) -> ModelStatus {
        if !text.trim_start().starts_with('{') {
            return ModelStatus::default();
        }
        serde_json::from_str(text).unwrap_or_else(|_| lenient(serde_json::from_str(text).ok()))
    }

    /// As [`ModelStatus::from_text`], of a parsed value (`None` and a
    /// value that is no object are no status).
    pub fn from_value(v: Option<&Value>) -> ModelStatus {
        match v {
            Some(Value::Object(map)) => ModelStatus::deserialize(Value::Object(map.clone()))
                .unwrap_or_else(|_| lenient(Some(map.clone()))),
            _ => ModelStatus::default(),
        }
    }

    /// The status as JSON (what a GET reads back after the patch).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The merge patch turning `old` into `self`: each field that changes,
    /// `null` for one that goes; empty when nothing changes. Fields are
    /// compared as the text they serialize to, and only those that change
    /// are built as values (docs/performance.md). A field that compares
    /// equal serializes alike: a [`Snapshot`] the pass writes again as it
    /// stands is the one status held ([`ModelStatus::keep_snapshot`]).
    pub fn patch_from(&self, old: &ModelStatus) -> Map<String, Value> {
        if self == old {
            return Map::new();
        }
        let (Some(new_text), Some(old_text)) = (self.text(), old.text()) else {
            return Map::new();
        };
        let fields = |t| serde_json::from_slice::<BTreeMap<&str, &RawValue>>(t).unwrap_or_default();
        let (new, old) = (fields(&new_text), fields(&old_text));
        let mut patch: Map<String, Value> = new
            .iter()
            .filter(|(k, v)| old.get(*k).is_none_or(|o| o.get() != v.get()))
            .map(|(k, v)| {
                let v = serde_json::from_str(v.get()).unwrap_or(Value::Null);
                (k.to_string(), v)
            })
            .collect();
        let gone = old.keys().filter(|k| !new.contains_key(*k));
        patch.extend(gone.map(|k| (k.to_string(), Value::Null)));
        patch
    }

    /// The status's JSON text, written into one buffer of about its size.
    fn text(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(2048);
        serde_json::to_writer(&mut out, self).ok()?;
        Some(out)
    }

    /// `snapshot`, or the one `held` already when it is the same spec, so
    /// that writing a spec again as it stands changes nothing (§5.1).
    pub fn keep_snapshot(held: &Option<Snapshot>, snapshot: Snapshot) -> Snapshot {
        match held {
            Some(h) if *h == snapshot => h.clone(),
            _ => snapshot,
        }
    }

    /// The conditions, none when absent.
    pub fn conditions(&self) -> &[Condition] {
        self.conditions.as_deref().unwrap_or_default()
    }

    /// The reason of condition `ty`, if it is there.
    pub fn condition_reason(&self, ty: ConditionType) -> Option<Reason> {
        self.conditions()
            .iter()
            .find(|c| c.type_ == ty)
            .map(|c| c.reason)
    }

    /// The reason of the Ready condition.
    pub fn ready_reason(&self) -> Option<Reason> {
        self.condition_reason(ConditionType::Ready)
    }

    /// Each condition's (type, status, reason): what a transition changes.
    pub fn transitions(&self) -> Vec<(ConditionType, CondStatus, Reason)> {
        self.conditions()
            .iter()
            .map(|c| (c.type_, c.status, c.reason))
            .collect()
    }

    /// Write the conditions, in [`ConditionType::ALL`]'s order, keeping a
    /// lastTransitionTime where status, reason and message are unchanged
    /// (§5).
    pub fn set_conditions(&mut self, conds: Conds, generation: i64, now: &str) {
        let mut old = self.conditions.take().unwrap_or_default();
        let out = conds
            .into_each()
            .map(|(ty, c)| {
                let since = old
                    .iter_mut()
                    .find(|o| o.type_ == ty)
                    .filter(|o| {
                        o.status == c.status && o.reason == c.reason && o.message == c.message
                    })
                    .and_then(|o| o.last_transition_time.take());
                Condition {
                    type_: ty,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    observed_generation: Some(generation),
                    last_transition_time: Some(since.unwrap_or_else(|| now.to_string())),
                    foreign: Map::new(),
                }
            })
            .collect();
        self.conditions = Some(out);
    }

    /// Every condition carries the generation this status describes.
    pub fn stamp_generation(&mut self, generation: i64) {
        for c in self.conditions.iter_mut().flatten() {
            c.observed_generation = Some(generation);
        }
    }

    /// The specs status retains: rollbackSpec, lastSuccessfulSpec,
    /// previousSuccessfulSpec, in that order, those still valid.
    pub fn retained_specs(&self, resource_name: &str) -> Vec<DesiredSpec> {
        [
            &self.rollback_spec,
            &self.last_successful_spec,
            &self.previous_successful_spec,
        ]
        .into_iter()
        .filter_map(|v| spec_of(v, resource_name))
        .collect()
    }

    /// No rollback stands and no spec is recorded as failed: a rollout
    /// starts (§6.13), or the desired spec serves (§6 step 10).
    pub fn forget_rollback(&mut self) {
        self.failed_spec_hash = None;
        self.rollback_spec = None;
        self.rollback_request = None;
    }

    /// What a rejected `rollback-to` replaces (9.3, 9.24).
    pub fn rejection_snapshot(&self) -> BeforeRejection {
        BeforeRejection {
            phase: self.phase,
            rollback_request: self.rollback_request.clone(),
            conditions: self.conditions.clone(),
            last_events: self.last_events.clone(),
        }
    }

    /// This status with what a rejected `rollback-to` replaced put back.
    pub fn restore(&mut self, b: BeforeRejection) {
        self.phase = b.phase;
        self.rollback_request = b.rollback_request;
        self.conditions = b.conditions;
        self.last_events = b.last_events;
        self.before_rejection = None;
    }
}

/// A desired spec stored in status (lastSuccessfulSpec and friends), if it
/// is there and still valid.
pub fn spec_of(v: &Option<Snapshot>, resource_name: &str) -> Option<DesiredSpec> {
    v.as_ref()
        .and_then(|v| DesiredSpec::from_snapshot(resource_name, &v.value()))
}

/// A status some field of which does not read: each field that reads on
/// its own is kept.
fn lenient(map: Option<Map<String, Value>>) -> ModelStatus {
    let reads = |k: &String, v: &Value| {
        let one = Map::from_iter([(k.clone(), v.clone())]);
        ModelStatus::deserialize(Value::Object(one)).is_ok()
    };
    let kept: Map<String, Value> = map
        .into_iter()
        .flatten()
        .filter(|(k, v)| reads(k, v))
        .collect();
    ModelStatus::deserialize(Value::Object(kept)).unwrap_or_default()
}
