//! The vocabulary of a reconcile pass: what it observes ([`Observed`],
//! [`Lookups`]), what it decides ([`Plan`]: [`Write`]s in order, the status,
//! [`EventSpec`]s). The pass that makes a plan (`reconcile::decide`) is in
//! `pass/mod.rs`, its steps in `pass/blocked.rs`, `pass/rollout.rs`,
//! `pass/rollback.rs` and `pass/targets.rs`; a model being deleted is
//! planned by `delete.rs`.

use super::observed::{ConfigMapView, DeploymentView, ModelView};
use super::patches::{PatchMetadata, StatusPatch};
use crate::model::spec::DesiredSpec;
use crate::model::status::{EventReason, ModelStatus};
use crate::model::AUTOSCALED_ANNOTATION;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

/// Everything one pass looks at. `deployments` and `config_maps` hold
/// whichever of the names from [`lookups`] exist.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub model: &'a ModelView,
    pub deployments: &'a [DeploymentView],
    pub config_maps: &'a [ConfigMapView],
    /// Owners (`<namespace>/<name>`) named on observed Deployments that are
    /// confirmed to exist no more: their Deployments are orphans, adopted
    /// rather than reported as a conflict (9.16).
    pub orphans: &'a [String],
    /// RFC 3339 UTC, seconds.
    pub now: &'a str,
    /// Which Deployments may become targets (9.8).
    pub targets: &'a TargetPolicy,
}

/// Which Deployments may become targets (docs/contract.md 9.8): those that
/// opt in with the label `openmed.ai/managed-target: "true"` or already
/// name this resource as their owner; never the operator's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// `--allow-any-target`: the reference operator's rule, any Deployment.
    pub allow_any: bool,
    /// The operator's own Deployment, `(namespace, name)`.
    pub own: Option<(String, String)>,
}

impl<'a> Observed<'a> {
    pub(super) fn deployment(&self, name: &str) -> Option<&'a DeploymentView> {
        self.deployments.iter().find(|d| d.name() == name)
    }
    pub(super) fn config_map(&self, name: &str) -> Option<&'a ConfigMapView> {
        self.config_maps.iter().find(|c| c.name() == name)
    }
}

/// The Deployments and ConfigMaps a pass may need: those of the desired
/// spec and of every spec retained in status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookups {
    pub deployments: Vec<String>,
    pub config_maps: Vec<String>,
}

/// The model's word that its target is autoscaled (`openmed.ai/autoscaled`)
/// written onto the observed target, as if its autoscaler had been seen; an
/// autoscaler the shell did see is kept. Both shells call this.
pub fn note_autoscaled(m: &ModelView, ds: &mut [DeploymentView]) {
    if !m.autoscaled {
        return;
    }
    let Ok(s) = m.desired() else {
        return;
    };
    for d in ds.iter_mut().filter(|d| d.name() == s.target.name) {
        d.autoscaler
            .get_or_insert_with(|| format!("annotation {AUTOSCALED_ANNOTATION}"));
    }
}

pub fn lookups(m: &ModelView) -> Lookups {
    let mut out = Lookups::default();
    let mut add = |s: &DesiredSpec| {
        if !out.deployments.contains(&s.target.name) {
            out.deployments.push(s.target.name.clone());
        }
        if !out.config_maps.contains(&s.manifest_config_map_name) {
            out.config_maps.push(s.manifest_config_map_name.clone());
        }
    };
    if let Ok(s) = m.desired() {
        add(s);
    }
    for s in m.retained_specs() {
        add(&s);
    }
    out
}

/// One write, in the order it must happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Merge patch of the OpenMedModel's finalizers (the full new list),
    /// conditional on its resourceVersion.
    AddFinalizer {
        finalizers: Vec<String>,
    },
    CreateConfigMap {
        body: Value,
    },
    PatchConfigMap {
        name: String,
        body: Value,
    },
    /// Strategic merge patch. With `sets_target`, the generation it returns
    /// becomes `status.targetDeploymentGeneration`.
    PatchDeployment {
        name: String,
        body: Value,
        sets_target: bool,
    },
    /// Delete, on condition that the uid is still this one.
    DeleteConfigMap {
        name: String,
        uid: String,
    },
    /// As AddFinalizer, with ours (and Kopf's) taken out.
    RemoveFinalizers {
        finalizers: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub reason: EventReason,
    pub message: String,
    /// Told apart in the Event's name beside the reason (§2.6): which
    /// rollback, so that two in one generation keep two records.
    pub tag: Option<String>,
}

/// Where `status.targetDeploymentGeneration` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TargetGen {
    Unchanged,
    Known(i64),
    FromPatch,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub events: Vec<EventSpec>,
    /// The status as stored: what the status patch is computed against.
    /// (`old` and `base` are never edited; shared, a pass that looks at
    /// them from several steps does not copy them.)
    pub(super) old: Arc<ModelStatus>,
    /// The status the pass reasons from: as stored, or as it was before a
    /// rejected `rollback-to` annotation that has since gone (9.3, 9.24).
    pub(super) base: Arc<ModelStatus>,
    pub(super) new: ModelStatus,
    pub(super) target: TargetGen,
    /// Deletion posts its Event whatever happens to status.
    pub(super) events_always: bool,
    /// The pass reports a transition its conditions do not show: a new
    /// generation that is invalid again (§6.1), a rollout started over the
    /// last one's "started" conditions (§6.13).
    pub(super) new_report: bool,
}

impl Plan {
    /// The status after this pass, given the generation the Deployment
    /// patch returned (if one was sent).
    pub fn status(&self, patched_generation: Option<i64>) -> Cow<'_, ModelStatus> {
        match self.target_generation(patched_generation) {
            Some(g) if self.new.target_deployment_generation != Some(g) => {
                let mut st = self.new.clone();
                st.target_deployment_generation = Some(g);
                Cow::Owned(st)
            }
            _ => Cow::Borrowed(&self.new),
        }
    }

    /// The `targetDeploymentGeneration` the pass writes, if it writes one.
    fn target_generation(&self, patched_generation: Option<i64>) -> Option<i64> {
        match (self.target, patched_generation) {
            (TargetGen::Known(g), _) | (TargetGen::FromPatch, Some(g)) => Some(g),
            _ => None,
        }
    }

    /// What [`Plan::status`] changes of the stored status.
    fn status_changes(&self, patched_generation: Option<i64>) -> Map<String, Value> {
        self.status(patched_generation).patch_from(&self.old)
    }

    /// The `/status` merge patch, or None when the status would not change.
    pub fn status_patch<'a>(
        &'a self,
        patched_generation: Option<i64>,
        resource_version: &'a str,
    ) -> Option<StatusPatch<'a>> {
        let status = self.status_changes(patched_generation);
        (!status.is_empty()).then_some(StatusPatch {
            metadata: PatchMetadata { resource_version },
            status,
        })
    }

    /// An Event announces a transition (9.1, 9.24): it is posted when a
    /// condition's status or reason changes from the state the pass reasoned
    /// from, never because some other field (a message, a version) did.
    /// (The generation [`Plan::status`] adds is no condition: `new`'s
    /// conditions are the ones written.)
    pub fn events_to_post(&self) -> &[EventSpec] {
        let moved = self.new.transitions() != self.base.transitions();
        if self.events_always || self.new_report || moved {
            &self.events
        } else {
            &[]
        }
    }

    /// Nothing to write at all.
    pub fn is_noop(&self) -> bool {
        self.writes.is_empty() && *self.status(None) == *self.old
    }

    pub(crate) fn bare(old: Arc<ModelStatus>) -> Plan {
        Plan {
            writes: Vec::new(),
            events: Vec::new(),
            new: ModelStatus::clone(&old),
            base: old.clone(),
            old,
            target: TargetGen::Unchanged,
            events_always: false,
            new_report: false,
        }
    }

    pub(crate) fn push_event(&mut self, reason: EventReason, message: String) {
        self.push(reason, message, None);
    }

    /// An Event of one rollback: its kind and target in the name (§2.6).
    pub(crate) fn push_tagged_event(&mut self, reason: EventReason, message: String, tag: String) {
        self.push(reason, message, Some(tag));
    }

    /// The message is bounded and escaped (§9.15): it may quote a user.
    fn push(&mut self, reason: EventReason, message: String, tag: Option<String>) {
        let message = crate::foreign::bounded(message, crate::model::status::MAX_MESSAGE);
        self.events.push(EventSpec {
            reason,
            message,
            tag,
        });
    }

    /// Deletion plans post their Event regardless of status.
    pub(crate) fn always_post_events(&mut self) {
        self.events_always = true;
    }
}
