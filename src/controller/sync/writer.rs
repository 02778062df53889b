//! How a sync writes: [`Writer`], the one path for a plan's writes and
//! its Events, and what the answers teach the caches.

use super::observe::read_config_map;
use super::{Action, Reconciler, Replan};
use crate::controller::events::Poster;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS};
use crate::kube::{Error, PatchType, Preconditions, ResourcePath, Retry};
use crate::outcome::Outcome;
use crate::reconcile::patches::StatusPatch;
use crate::reconcile::{
    execute, patches, Cluster, ConfigMapView, DeploymentView, EventSpec, Executed, ModelObject,
    ModelView, Plan, RefusedWrite,
};
use crate::runtime::ObjectKey;
use serde_json::Value;

/// Why carrying a plan out stopped.
pub(super) enum Failed {
    Api(Error),
    /// The API refused a Deployment or ConfigMap write with an error that
    /// retrying will not cure.
    Refused(RefusedWrite, Error),
}

impl Failed {
    pub fn of(e: Error, what: RefusedWrite) -> Failed {
        if e.is_refusal() {
            Failed::Refused(what, e)
        } else {
            Failed::Api(e)
        }
    }

    pub fn into_error(self) -> Error {
        match self {
            Failed::Api(e) | Failed::Refused(_, e) => e,
        }
    }
}

impl From<Error> for Failed {
    fn from(e: Error) -> Failed {
        Failed::Api(e)
    }
}

/// The one path by which a sync writes, for one model: every write of a
/// plan ([`execute`] orders them, docs/contract.md §6.16) and its Events,
/// through the API client, which holds the leader's write gate, so each
/// attempt is fenced. Every answer is remembered in the caches, every write
/// logged.
pub(super) struct Writer<'a> {
    reconciler: &'a Reconciler,
    model: &'a ModelView,
    model_path: ResourcePath,
    who: String,
    now: &'a str,
}

impl<'a> Writer<'a> {
    pub fn new(
        reconciler: &'a Reconciler,
        model: &'a ModelView,
        now: &'a str,
    ) -> Result<Writer<'a>, Error> {
        let model_path = ResourcePath::object(
            crate::model::RESOURCE,
            Some(model.namespace()),
            model.name(),
        )?;
        Ok(Writer {
            reconciler,
            model,
            model_path,
            who: model.qualified_name(),
            now,
        })
    }

    /// Create the ConfigMap. `Some(found)` when one of that name exists that
    /// the caches (which hold only ours) did not know: plan again with it.
    fn create_cm(&self, body: &Value) -> Result<Option<ConfigMapView>, Failed> {
        let name = body["metadata"]["name"].as_str().unwrap_or("");
        let ns = self.model.namespace();
        match self
            .reconciler
            .client
            .create_as(&ResourcePath::collection(CONFIG_MAPS, Some(ns))?, body)
        {
            Ok(resp) => {
                self.reconciler.caches.remember_config_map(resp);
                log::info!("{}: created ConfigMap {name}", self.who);
                Ok(None)
            }
            Err(e) if e.is_already_exists() => {
                // Gone again by now: the create is retried with the sync.
                let found = read_config_map(&self.reconciler.client, ns, name)?;
                Ok(Some(found.ok_or(e)?))
            }
            Err(e) => Err(Failed::of(e, RefusedWrite::ConfigMap)),
        }
    }

    fn delete_cm(&self, name: &str, uid: &str) -> Result<(), Failed> {
        let ns = self.model.namespace();
        let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
        let pre = Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        };
        match self.reconciler.client.delete(&path, Some(&pre)) {
            Ok(_) => log::info!("{}: deleted ConfigMap {name}", self.who),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        self.reconciler
            .caches
            .forget_config_map(&ObjectKey::new(ns, name));
        Ok(())
    }

    /// Post an Event for `model` in its current generation (see
    /// `events.rs`). A failure is logged with the namespace, counted, and
    /// returned: the sync is retried, the Event never dropped.
    fn post(
        &self,
        reason: crate::model::EventReason,
        tag: Option<&str>,
        generation: i64,
        message: &str,
        now: &str,
    ) -> Result<(), Error> {
        let level = if reason.is_warning() {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        log::log!(level, "{}: {reason}: {message}", self.who);
        let poster = Poster {
            client: &self.reconciler.client,
            posted: &self.reconciler.posted,
        };
        match poster.post(self.model, reason, tag, generation, message, now) {
            Ok((count, event_name)) => {
                self.reconciler.metrics.event_posted();
                let event = crate::live_view::RecordedEvent {
                    reason: reason.as_str(),
                    type_: if reason.is_warning() {
                        "Warning"
                    } else {
                        "Normal"
                    },
                    count,
                    last: now,
                    message,
                };
                let model = self.model.key();
                self.reconciler.recent.record(&model, &event_name, event);
                Ok(())
            }
            Err(e) => {
                self.reconciler.metrics.event_failed();
                log::warn!(reason = reason.as_str(); "{}: could not post Event {reason}: {e}", self.who);
                Err(e)
            }
        }
    }

    /// The Events the model's status says its last transition required
    /// (`status.lastEvents`) and that were not posted for this object: a
    /// post that failed, or a crash between the status write and the post.
    pub fn post_owed_events(&self) -> Result<(), Error> {
        let (rc, model) = (self.reconciler, self.model);
        let poster = Poster {
            client: &rc.client,
            posted: &rc.posted,
        };
        // Under the generation of the transition that owed it, even when the
        // spec has changed since without a new transition: the Event of the
        // state the status shows is still owed (docs/contract.md §9.7), as
        // after a status write whose answer a cut connection lost, then a
        // spec change that kept the same block.
        for owed in model.last_events() {
            if owed.generation > model.generation
                || poster.was_posted(model, owed.reason, owed.tag.as_deref(), owed.generation)
            {
                continue;
            }
            log::info!(reason = owed.reason.as_str(); "{}: posting the owed Event {}", self.who, owed.reason);
            let tag = owed.tag.as_deref();
            self.post(owed.reason, tag, owed.generation, &owed.message, self.now)?;
        }
        Ok(())
    }

    /// Carry `p` out: done, or planned again with a ConfigMap the caches
    /// did not know.
    pub fn carry_out(&mut self, p: &Plan) -> Result<Action, Failed> {
        if !p.writes.is_empty() {
            self.reconciler.remember_acted(self.model);
        }
        let rv = self.model.resource_version.clone();
        match execute(self, p, &rv)? {
            Executed::Done => Ok(Action::Done(Outcome::Applied)),
            Executed::Replan(cm) => Ok(Action::Replan(Replan::UnknownConfigMap(cm))),
        }
    }
}

impl Cluster for Writer<'_> {
    type Error = Failed;

    fn set_finalizers(
        &mut self,
        rv: &str,
        finalizers: &[String],
    ) -> Result<Option<String>, Failed> {
        let body = patches::finalizers_patch(rv, finalizers);
        let resp: ModelObject = self.reconciler.client.patch_as(
            &self.model_path,
            PatchType::Merge,
            &body,
            Retry::Write,
        )?;
        let adding = finalizers.iter().any(|f| f == crate::model::FINALIZER);
        log::info!(
            "{}: finalizer {}",
            self.who,
            if adding { "added" } else { "released" }
        );
        if finalizers.is_empty() && self.model.deleting {
            // The server deletes it now: the answer is a last view of a
            // gone object, never to be cached (docs/contract.md §9.17).
            let key = self.model.key();
            let caches = &self.reconciler.caches;
            caches.forget_model_object(&key, &self.model.uid);
            return Ok(None);
        }
        Ok(Some(
            self.reconciler
                .caches
                .remember_model(resp)
                .unwrap_or_else(|| rv.to_string()),
        ))
    }

    fn create_config_map(&mut self, body: &Value) -> Result<Option<ConfigMapView>, Failed> {
        self.create_cm(body)
    }

    fn patch_config_map(&mut self, name: &str, body: &Value) -> Result<(), Failed> {
        let path = ResourcePath::object(CONFIG_MAPS, Some(self.model.namespace()), name)?;
        let resp = self
            .reconciler
            .client
            .patch_as(&path, PatchType::Merge, body, Retry::Idempotent)
            .map_err(|e| Failed::of(e, RefusedWrite::ConfigMap))?;
        self.reconciler.caches.remember_config_map(resp);
        log::info!("{}: updated ConfigMap {name}", self.who);
        Ok(())
    }

    fn patch_deployment(&mut self, name: &str, body: &Value) -> Result<i64, Failed> {
        let path = ResourcePath::object(DEPLOYMENTS, Some(self.model.namespace()), name)?;
        let resp: DeploymentView = self
            .reconciler
            .client
            .patch_as(&path, PatchType::Strategic, body, Retry::Idempotent)
            .map_err(|e| Failed::of(e, RefusedWrite::Deployment))?;
        let generation = resp.generation;
        self.reconciler.caches.remember_deployment(resp, false);
        log::info!(
            "{}: patched Deployment {name} (generation {generation})",
            self.who
        );
        Ok(generation)
    }

    fn delete_config_map(&mut self, name: &str, uid: &str) -> Result<(), Failed> {
        self.delete_cm(name, uid)
    }

    fn patch_status(&mut self, body: &StatusPatch) -> Result<(), Failed> {
        let path = self.model_path.clone().status();
        let resp = self
            .reconciler
            .client
            .patch_as(&path, PatchType::Merge, body, Retry::Write)?;
        self.reconciler.caches.remember_model(resp);
        self.reconciler.remember_acted(self.model);
        if let Some(phase) = body.get("phase").and_then(Value::as_str) {
            let reason = ready_reason(body).unwrap_or_default();
            log::info!(reason; "{}: phase {phase} ({reason})", self.who);
        }
        Ok(())
    }

    fn post_event(&mut self, e: &EventSpec) -> Result<(), Failed> {
        self.post(
            e.reason,
            e.tag.as_deref(),
            self.model.generation,
            &e.message,
            self.now,
        )
        .map_err(Failed::Api)
    }
}

/// The reason of the Ready condition a status patch writes, if it writes one.
fn ready_reason<'a>(body: &'a StatusPatch) -> Option<&'a str> {
    body.get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .get("reason")?
        .as_str()
}
