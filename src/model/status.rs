//! Status vocabulary (phases, conditions, reasons, event reasons), rendered
//! in one place, and the status document the reconcile plan edits.

use crate::kube::fields::Scalar;
use conditions::CondRef;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use stored::Stored;

mod conditions;
mod owed;
mod stored;

pub use owed::OwedEvent;

macro_rules! vocabulary {
    ($(#[$m:meta])* $name:ident { $($variant:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),* }
            }
            pub fn parse(s: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary!(
    /// `status.phase`.
    Phase { Pending, RollingOut, Ready, Failed, RolledBack }
);

vocabulary!(
    /// The four conditions, in the order they are written.
    ConditionType { Ready, Progressing, Degraded, RolledBack }
);

vocabulary!(
    /// Every condition reason the operator writes.
    Reason {
        InvalidSpec, Blocked, NotRequested, TargetNotFound, ContainerNotFound, TargetConflict,
        ConfigMapConflict, RollbackTargetUnavailable, RollbackRejected, ManualRollback,
        RollbackInProgress, RolledBack, RolloutFailed, ProgressDeadlineExceeded, RollbackDisabled,
        RolloutSucceeded, RolloutComplete, Healthy, RolloutInProgress, DeploymentProgressing,
        RollbackFailed, RollbackComplete, DesiredVersionFailed, RollbackSucceeded, RolloutStarted,
        SpecChanged, InitialRollout, DriftCorrected, TargetPaused, TargetPatchRejected,
        ConfigMapRejected, TargetRecreated, TargetDegraded, TargetNotOptedIn,
    }
);

vocabulary!(
    /// Every Event reason the operator posts.
    EventReason {
        TargetNotFound, ContainerNotFound, TargetConflict, ConfigMapConflict, RollbackRejected,
        RollbackStarted, RolloutStarted, RolloutFailed, RolloutSucceeded, RollbackFailed,
        RollbackSucceeded, ModelRemoved, ModelRemovalSkipped, TargetPatchRejected,
        ConfigMapRejected, TargetReleased, TargetAdopted, TargetDegraded, TargetNotOptedIn,
        InvalidSpec,
    }
);

impl EventReason {
    /// Warning or Normal, fixed per reason.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventReason::TargetNotFound
                | EventReason::ContainerNotFound
                | EventReason::TargetConflict
                | EventReason::ConfigMapConflict
                | EventReason::RollbackRejected
                | EventReason::RolloutFailed
                | EventReason::RollbackFailed
                | EventReason::ModelRemovalSkipped
                | EventReason::TargetPatchRejected
                | EventReason::ConfigMapRejected
                | EventReason::TargetDegraded
                | EventReason::TargetNotOptedIn
                | EventReason::InvalidSpec
        )
    }
}

/// Status fields, by their JSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    ObservedGeneration,
    Phase,
    DesiredVersion,
    ActiveVersion,
    DesiredSpecHash,
    ManifestHash,
    AppliedSpecHash,
    TargetDeploymentGeneration,
    TargetDeploymentUid,
    /// Who sets the target's replicas instead of the operator (an
    /// autoscaler), absent when the operator does.
    ReplicasManagedBy,
    FailedSpecHash,
    LastSuccessfulSpec,
    PreviousSuccessfulSpec,
    RollbackSpec,
    RollbackRequest,
    RollbackCount,
    Conditions,
    /// What a rejected `rollback-to` annotation replaced, restored when it
    /// goes (9.3, 9.24): phase, rollbackRequest and conditions.
    BeforeRejection,
    /// The Events the last transition requires, so one lost to a failed
    /// post or a crash is posted on a later pass (9.7).
    LastEvents,
}

impl Field {
    pub fn key(self) -> &'static str {
        match self {
            Field::ObservedGeneration => "observedGeneration",
            Field::Phase => "phase",
            Field::DesiredVersion => "desiredVersion",
            Field::ActiveVersion => "activeVersion",
            Field::DesiredSpecHash => "desiredSpecHash",
            Field::ManifestHash => "manifestHash",
            Field::AppliedSpecHash => "appliedSpecHash",
            Field::TargetDeploymentGeneration => "targetDeploymentGeneration",
            Field::TargetDeploymentUid => "targetDeploymentUID",
            Field::ReplicasManagedBy => "replicasManagedBy",
            Field::FailedSpecHash => "failedSpecHash",
            Field::LastSuccessfulSpec => "lastSuccessfulSpec",
            Field::PreviousSuccessfulSpec => "previousSuccessfulSpec",
            Field::RollbackSpec => "rollbackSpec",
            Field::RollbackRequest => "rollbackRequest",
            Field::RollbackCount => "rollbackCount",
            Field::Conditions => "conditions",
            Field::BeforeRejection => "beforeRejection",
            Field::LastEvents => "lastEvents",
        }
    }
}

/// A condition's status: True, False, or Unknown (a judgement the operator
/// cannot make yet, such as a rollout on a paused Deployment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondStatus {
    True,
    False,
    Unknown,
}

impl CondStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }

    pub fn parse(s: &str) -> Option<CondStatus> {
        [CondStatus::True, CondStatus::False, CondStatus::Unknown]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// A stored condition read back (type-checked), as the pass would write it.
pub fn stored_cond(v: &Value) -> Option<Cond> {
    let status = CondStatus::parse(v["status"].as_str()?)?;
    let reason = Reason::parse(v["reason"].as_str()?)?;
    Some(cond(status, reason, v["message"].as_str().unwrap_or("")))
}

impl From<bool> for CondStatus {
    fn from(b: bool) -> CondStatus {
        if b {
            CondStatus::True
        } else {
            CondStatus::False
        }
    }
}

/// One condition as the plan wants it; lastTransitionTime is decided on merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub status: CondStatus,
    pub reason: Reason,
    pub message: String,
}

/// Whether `old` holds exactly the four conditions `conds` would be
/// written as, in order, for `generation` (nothing else in them).
fn same_conditions(old: &[CondRef], conds: &[Cond; 4], generation: i64) -> bool {
    old.len() == 4
        && old
            .iter()
            .zip(ConditionType::ALL.iter().zip(conds))
            .all(|(o, (ty, c))| {
                o.has_exactly_the_known_keys()
                    && o.ty.as_str() == Some(ty.as_str())
                    && o.status.as_str() == Some(c.status.as_str())
                    && o.reason.as_str() == Some(c.reason.as_str())
                    && o.message.as_str() == Some(c.message.as_str())
                    && o.observed_generation.int() == Some(generation)
                    && o.last_transition_time.as_str().is_some()
            })
}

/// The message is bounded and escaped (§9.15): it may quote a user.
pub fn cond(status: impl Into<CondStatus>, reason: Reason, message: impl Into<String>) -> Cond {
    Cond {
        status: status.into(),
        reason,
        message: crate::foreign::bounded(message.into(), MAX_MESSAGE),
    }
}

/// A state's four conditions without their messages: (status, reason) for
/// Ready, Progressing, Degraded and RolledBack. Each state is named once,
/// in [`states`], and used by the core and the tests alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CondSet(pub [(CondStatus, Reason); 4]);

/// A state's four messages, one for each condition, named so that no two can be
/// swapped unnoticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Messages {
    pub ready: String,
    pub progressing: String,
    pub degraded: String,
    pub rolled_back: String,
}

impl Messages {
    /// One sentence for all four conditions: a state that one cause
    /// explains. `Messages { rolled_back, ..Messages::all(m) }` varies one.
    pub fn all(message: impl Into<String>) -> Messages {
        let m = message.into();
        Messages {
            ready: m.clone(),
            progressing: m.clone(),
            degraded: m.clone(),
            rolled_back: m,
        }
    }
}

impl CondSet {
    /// The conditions with the pass's messages.
    pub fn with(self, messages: Messages) -> [Cond; 4] {
        let Messages {
            ready,
            progressing,
            degraded,
            rolled_back,
        } = messages;
        let [(sa, ra), (sb, rb), (sc, rc), (sd, rd)] = self.0;
        [
            cond(sa, ra, ready),
            cond(sb, rb, progressing),
            cond(sc, rc, degraded),
            cond(sd, rd, rolled_back),
        ]
    }

    /// `T:RolloutSucceeded`-style labels, as the tests spell a state.
    pub fn labels(self) -> [String; 4] {
        self.0.map(|(s, r)| format!("{}:{r}", &s.as_str()[..1]))
    }
}

/// Every state the operator reports (docs/contract.md §6.14).
pub mod states {
    use super::CondSet;
    use super::CondStatus::{False as F, True as T, Unknown as U};
    use super::Reason::{self, *};

    pub const INVALID_SPEC: CondSet = CondSet([
        (F, InvalidSpec),
        (F, Blocked),
        (T, InvalidSpec),
        (F, NotRequested),
    ]);
    /// An environmental block (§6.2-§6.4, 9.2, 9.19) of this reason.
    pub const fn blocked(r: Reason) -> CondSet {
        CondSet([(F, r), (F, Blocked), (T, r), (F, NotRequested)])
    }
    pub const ROLLBACK_REJECTED: CondSet = CondSet([
        (F, RollbackTargetUnavailable),
        (F, Blocked),
        (T, RollbackTargetUnavailable),
        (F, RollbackRejected),
    ]);
    /// A rollout started for this reason (SpecChanged, InitialRollout, ...).
    pub const fn started(r: Reason) -> CondSet {
        CondSet([(F, RolloutStarted), (T, r), (F, Healthy), (F, NotRequested)])
    }
    pub const ROLLING_OUT: CondSet = CondSet([
        (F, RolloutInProgress),
        (T, DeploymentProgressing),
        (F, Healthy),
        (F, NotRequested),
    ]);
    /// Rolling out on a paused Deployment (9.20).
    pub const ROLLING_OUT_PAUSED: CondSet = CondSet([
        (F, RolloutInProgress),
        (U, TargetPaused),
        (F, Healthy),
        (F, NotRequested),
    ]);
    pub const READY: CondSet = CondSet([
        (T, RolloutSucceeded),
        (F, RolloutComplete),
        (F, Healthy),
        (F, NotRequested),
    ]);
    pub const FAILED_NO_ROLLBACK: CondSet = CondSet([
        (F, RolloutFailed),
        (F, ProgressDeadlineExceeded),
        (T, RolloutFailed),
        (F, RollbackDisabled),
    ]);
    pub const AUTOMATIC_ROLLBACK_STARTED: CondSet = CondSet([
        (F, RolledBack),
        (T, RollbackInProgress),
        (T, RolloutFailed),
        (F, RollbackInProgress),
    ]);
    pub const MANUAL_ROLLBACK_STARTED: CondSet = CondSet([
        (F, ManualRollback),
        (T, RollbackInProgress),
        (T, ManualRollback),
        (F, RollbackInProgress),
    ]);
    /// A rollback under way: by hand or after a failure; paused or not.
    pub const fn rolling_back(manual: bool, paused: bool) -> CondSet {
        let progressing = if paused {
            (U, TargetPaused)
        } else {
            (T, RollbackInProgress)
        };
        CondSet([
            (F, RolledBack),
            progressing,
            degraded(manual),
            (F, RollbackInProgress),
        ])
    }
    /// A rollback that serves: by hand (9.22) or after a failure.
    pub const fn rolled_back(manual: bool) -> CondSet {
        CondSet([
            (F, RolledBack),
            (F, RollbackComplete),
            degraded(manual),
            (T, RollbackSucceeded),
        ])
    }
    const fn degraded(manual: bool) -> (super::CondStatus, Reason) {
        if manual {
            (T, ManualRollback)
        } else {
            (T, DesiredVersionFailed)
        }
    }
    pub const ROLLBACK_FAILED: CondSet = CondSet([
        (F, RollbackFailed),
        (F, ProgressDeadlineExceeded),
        (T, RollbackFailed),
        (F, RollbackFailed),
    ]);
    /// The Deployment fails with no rollout of ours (9.21); a rollback that
    /// had served still says so.
    pub const fn target_degraded(after_rollback: bool) -> CondSet {
        let rolled_back = if after_rollback {
            (T, RollbackSucceeded)
        } else {
            (F, NotRequested)
        };
        CondSet([
            (F, TargetDegraded),
            (F, TargetDegraded),
            (T, TargetDegraded),
            rolled_back,
        ])
    }
}

/// The longest message copied into status or an Event (docs/contract.md §9.15).
pub const MAX_MESSAGE: usize = 1024;
/// The longest `rollback-to` target kept (§9.15): longer than any valid
/// version, so a cut one is still rejected, and never copied whole.
pub const MAX_ROLLBACK_TARGET: usize = 256;

/// The status document: the observed status, edited field by field, so
/// fields a state does not mention keep their previous value untouched.
/// The observed fields are shared, and the edits kept beside them: a pass
/// starts from the stored status without copying it, and its patch is the
/// edits that change something.
#[derive(Debug, Clone, Default)]
pub struct StatusDoc {
    /// The status as read (shared by every copy, never edited), each
    /// field parsed when first read.
    stored: std::sync::Arc<Stored>,
    /// Fields set since, and cleared ones as `null`.
    edits: Map<String, Value>,
}

impl PartialEq for StatusDoc {
    /// Equal when every field reads the same (`null` and absent apart, as
    /// a merge patch tells them apart).
    fn eq(&self, other: &StatusDoc) -> bool {
        let mine: Vec<_> = self.fields().collect();
        mine.len() == other.fields().count() && mine.iter().all(|(k, v)| other.raw(k) == Some(*v))
    }
}

impl StatusDoc {
    pub fn from_value(v: Option<&Value>) -> StatusDoc {
        StatusDoc::from_owned(v.filter(|v| v.is_object()).cloned())
    }

    /// As [`StatusDoc::from_value`], taking the value (no copy).
    pub fn from_owned(v: Option<Value>) -> StatusDoc {
        match v {
            Some(Value::Object(map)) => StatusDoc {
                stored: std::sync::Arc::new(Stored::from_map(map)),
                edits: Map::new(),
            },
            _ => StatusDoc::default(),
        }
    }

    /// The status of a JSON text, its fields parsed as they are read; a
    /// text that is not an object is no status.
    pub fn from_text(text: String) -> StatusDoc {
        StatusDoc {
            stored: std::sync::Arc::new(Stored::from_text(text).unwrap_or_default()),
            edits: Map::new(),
        }
    }

    /// A field as it reads now, `null` included.
    fn raw(&self, key: &str) -> Option<&Value> {
        self.edits.get(key).or_else(|| self.stored.get(key))
    }

    /// Every field as it reads now, `null`s included: the stored ones not
    /// edited, then the edits.
    fn fields(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.stored
            .iter()
            .filter(|(k, _)| !self.edits.contains_key(*k))
            .chain(self.edits.iter().map(|(k, v)| (k.as_str(), v)))
    }

    pub fn get(&self, f: Field) -> Option<&Value> {
        self.raw(f.key()).filter(|v| !v.is_null())
    }

    pub fn str(&self, f: Field) -> Option<&str> {
        self.get(f).and_then(Value::as_str)
    }

    pub fn int(&self, f: Field) -> Option<i64> {
        self.get(f).and_then(Value::as_i64)
    }

    /// A desired spec stored in status (lastSuccessfulSpec and friends), if
    /// it is there and still valid.
    pub fn spec(&self, f: Field, resource_name: &str) -> Option<super::DesiredSpec> {
        self.get(f)
            .and_then(|v| super::DesiredSpec::from_snapshot(resource_name, v))
    }

    /// Every spec status retains: rollbackSpec, lastSuccessfulSpec,
    /// previousSuccessfulSpec, in that order.
    pub fn retained_specs(&self, resource_name: &str) -> Vec<super::DesiredSpec> {
        [
            Field::RollbackSpec,
            Field::LastSuccessfulSpec,
            Field::PreviousSuccessfulSpec,
        ]
        .iter()
        .filter_map(|f| self.spec(*f, resource_name))
        .collect()
    }

    pub fn phase(&self) -> Option<Phase> {
        self.str(Field::Phase).and_then(Phase::parse)
    }

    /// The reason of the Ready condition, if it is one we know.
    pub fn ready_reason(&self) -> Option<Reason> {
        self.condition_reason(ConditionType::Ready)
    }

    /// The reason of condition `ty`, if it is one we know.
    pub fn condition_reason(&self, ty: ConditionType) -> Option<Reason> {
        self.conditions()
            .iter()
            .find(|c| c.ty.as_str() == Some(ty.as_str()))
            .and_then(|c| c.reason.as_str())
            .and_then(Reason::parse)
    }

    /// The conditions as they read now, without parsing the stored ones
    /// into a tree.
    fn conditions(&self) -> Vec<CondRef<'_>> {
        let key = Field::Conditions.key();
        if let Some(v) = self.edits.get(key) {
            return CondRef::all_of(Some(v));
        }
        match self.stored.parsed_or_text(key) {
            Some(Err(text)) => {
                CondRef::all_in(text).unwrap_or_else(|| CondRef::all_of(self.stored.get(key)))
            }
            Some(Ok(v)) => CondRef::all_of(Some(v)),
            None => Vec::new(),
        }
    }

    pub fn set(&mut self, f: Field, v: Value) {
        self.edits.insert(f.key().to_string(), v);
    }

    /// Clear a field (rendered as `null` in the merge patch).
    pub fn clear(&mut self, f: Field) {
        self.set(f, Value::Null);
    }

    pub fn set_phase(&mut self, p: Phase) {
        self.set(Field::Phase, json!(p.as_str()));
    }

    /// Write the four conditions, keeping lastTransitionTime where status,
    /// reason and message are unchanged.
    pub fn set_conditions(&mut self, conds: [Cond; 4], generation: i64, now: &str) {
        if same_conditions(&self.conditions(), &conds, generation) {
            // What the rebuild would write again, to the byte: most passes
            // change no condition, and a rebuild is some fifty allocations.
            return;
        }
        let old: &[Value] = self
            .get(Field::Conditions)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let mut out = Vec::with_capacity(4);
        for (ty, c) in ConditionType::ALL.iter().zip(conds) {
            let status = c.status.as_str();
            let prev = old.iter().find(|o| o["type"] == ty.as_str());
            let unchanged = prev
                .map(|p| {
                    p["status"] == status
                        && p["reason"] == c.reason.as_str()
                        && p["message"] == c.message.as_str()
                })
                .unwrap_or(false);
            let since = prev
                .filter(|_| unchanged)
                .and_then(|p| p.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            out.push(json!({
                "type": ty.as_str(),
                "status": status,
                "reason": c.reason.as_str(),
                "message": c.message,
                "observedGeneration": generation,
                "lastTransitionTime": since,
            }));
        }
        self.set(Field::Conditions, Value::Array(out));
    }

    /// The Events the last transition requires (`lastEvents`).
    pub fn last_events(&self) -> Vec<OwedEvent> {
        OwedEvent::all_of(self.get(Field::LastEvents))
    }

    /// Each condition's (type, status, reason): what a transition changes.
    pub fn transitions(&self) -> Vec<[Cow<'_, str>; 3]> {
        fn field<'a>(s: &Scalar<'a>) -> Cow<'a, str> {
            match s {
                Scalar::Str(Cow::Borrowed(s)) => Cow::Borrowed(s),
                Scalar::Str(Cow::Owned(s)) => Cow::Owned(s.clone()),
                _ => Cow::Borrowed(""),
            }
        }
        self.conditions()
            .iter()
            .map(|c| [field(&c.ty), field(&c.status), field(&c.reason)])
            .collect()
    }

    /// Every condition carries the generation this status describes.
    pub fn stamp_generation(&mut self, generation: i64) {
        let key = Field::Conditions.key();
        if !self.edits.contains_key(key) {
            // Already stamped (or none): a copy would be edited into itself.
            let stamped = self
                .conditions()
                .iter()
                .all(|c| c.is_empty() || c.observed_generation.int() == Some(generation));
            if stamped {
                return;
            }
            match self.stored.get(key) {
                Some(cs @ Value::Array(_)) => self.edits.insert(key.to_string(), cs.clone()),
                _ => return,
            };
        }
        if let Some(Value::Array(cs)) = self.edits.get_mut(key) {
            for c in cs.iter_mut().filter(|c| c.is_object()) {
                c["observedGeneration"] = json!(generation);
            }
        }
    }

    /// The merge-patch body turning `old` into `self`, borrowed: changed
    /// keys in order, and `null` for keys that went away. Empty when
    /// nothing changed.
    pub fn diff<'a>(&'a self, old: &'a StatusDoc) -> Vec<(&'a str, Cow<'a, Value>)> {
        let mut patch: Vec<_> = self
            .changes(old)
            .map(|(k, v)| (k, Cow::Borrowed(v)))
            .collect();
        patch.sort_unstable_by(|a, b| a.0.cmp(b.0));
        patch
    }

    /// Whether a key other than `except` changes from `old` (what
    /// [`StatusDoc::diff`] would name, without copying a value).
    pub fn differs(&self, old: &StatusDoc, except: Option<&str>) -> bool {
        self.changes(old).any(|(k, _)| Some(k) != except)
    }

    /// The changed keys with their new values, `null` for removed ones.
    /// When `self` is `old` edited, only the edits are compared.
    fn changes<'a>(&'a self, old: &'a StatusDoc) -> Box<dyn Iterator<Item = FieldEntry<'a>> + 'a> {
        static NULL: Value = Value::Null;
        let changed = move |(k, v): &FieldEntry<'a>| old.raw(k).unwrap_or(&Value::Null) != *v;
        if std::sync::Arc::ptr_eq(&self.stored, &old.stored) && old.edits.is_empty() {
            return Box::new(
                self.edits
                    .iter()
                    .map(|(k, v)| (k.as_str(), v))
                    .filter(changed),
            );
        }
        let removed = old
            .fields()
            .filter(|(k, _)| self.raw(k).is_none())
            .map(|(k, _)| (k, &NULL));
        Box::new(self.fields().filter(changed).chain(removed))
    }

    /// The status as it will read after the patch (nulls dropped).
    pub fn normalized(&self) -> Value {
        Value::Object(
            self.fields()
                .filter(|(_, v)| !v.is_null())
                .map(clone_entry)
                .collect(),
        )
    }

    /// Whether `f` reads `v` now, `null` included (what a merge patch of
    /// `v` would leave unchanged).
    pub fn reads(&self, f: Field, v: &Value) -> bool {
        self.raw(f.key()) == Some(v)
    }
}

/// A field of a status document, borrowed.
type FieldEntry<'a> = (&'a str, &'a Value);

fn clone_entry((k, v): FieldEntry) -> (String, Value) {
    (k.to_string(), v.clone())
}

#[cfg(test)]
mod tests;
