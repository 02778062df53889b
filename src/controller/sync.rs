//! The sync handler: read the caches, ask the core for a plan, carry its
//! writes out in order, then the status, then the Events.

use super::cache::{AutoscalerView, Fetched, MetaView};
use super::error::SyncError;
use super::events::{Posted, Poster};
use crate::controller::outcome::Outcome;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS};
use crate::kube::{Client, Error, PatchType, Preconditions, ResourcePath, Retry};
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::reconcile::{
    execute, lookups, note_autoscaled, patches, plan, plan_refused, Cluster, ConfigMapView,
    DeploymentView, EventSpec, Executed, ModelView, Observed, Plan, RefusedWrite, TargetPolicy,
};
use crate::runtime::{ObjectKey, Store};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The sync handler (sample-controller's `syncHandler`): one OpenMedModel
/// from the caches to a plan, carried out.
pub struct Reconciler {
    pub client: Arc<Client>,
    pub models: Arc<Store<ModelView>>,
    /// Deployments the operator has claimed: full (compact) views.
    pub deployments: Arc<Store<DeploymentView>>,
    /// Every Deployment in scope, metadata only.
    pub deployment_meta: Arc<Store<MetaView>>,
    /// Unclaimed Deployments read on demand, reused while their
    /// resourceVersion in `deployment_meta` is unchanged.
    pub fetched: Fetched,
    pub config_maps: Arc<Store<ConfigMapView>>,
    /// HorizontalPodAutoscalers in scope: a Deployment one scales keeps its
    /// replicas (the autoscaler's, not the spec's).
    pub autoscalers: Arc<Store<AutoscalerView>>,
    /// Events written, by (namespace, name), with their object's uid.
    pub posted: Mutex<Posted>,
    /// The Events written lately, per model, for the live view.
    pub recent: Arc<crate::live_view::RecentEvents>,
    pub metrics: Arc<Metrics>,
    /// The highest generation of each OpenMedModel (by uid) a pass has
    /// written for: a view older than that is never acted on (9.17).
    pub acted: Mutex<HashMap<ObjectKey, (String, i64)>>,
    /// Which Deployments may become targets (9.8).
    pub targets: TargetPolicy,
    /// Resources whose last pass changed nothing, with where the caches
    /// stood then ([`Reconciler::sync`]).
    settled: Mutex<HashMap<ObjectKey, [u64; 5]>>,
}

/// The plan reports a block about the target that the status did not
/// show yet: TargetNotFound, ContainerNotFound, TargetConflict or
/// TargetNotOptedIn.
fn newly_blocked(model: &ModelView, p: &Plan) -> bool {
    use crate::model::status::Reason::{
        ContainerNotFound, TargetConflict, TargetNotFound, TargetNotOptedIn,
    };
    let was = model.status().ready_reason();
    let now = p.status(None).ready_reason();
    matches!(
        now,
        Some(TargetNotFound | ContainerNotFound | TargetConflict | TargetNotOptedIn)
    ) && now != was
}

/// The status already reports a foreign ConfigMap of our name. The caches
/// hold only ours, so the shell reads that name each pass rather than retry a
/// create bound to meet AlreadyExists on every resync: a read, not a write.
fn reports_config_map_conflict(model: &ModelView) -> bool {
    use crate::model::status::Reason::ConfigMapConflict;
    let was = model.status().ready_reason();
    was == Some(ConfigMapConflict)
}

/// The owners a claimed Deployment names (metadata and pod template): the
/// index by which a pass finds every Deployment its resource still claims.
fn deployment_owners(d: &DeploymentView) -> Vec<String> {
    let mut out: Vec<String> = d.owner.iter().chain(&d.template_owner).cloned().collect();
    out.dedup();
    out
}

/// The owner of one of our ConfigMaps.
fn config_map_owner(c: &ConfigMapView) -> Vec<String> {
    c.owner.iter().cloned().collect()
}

/// What the shell gathered for one pass.
struct Seen {
    deployments: Vec<DeploymentView>,
    config_maps: Vec<ConfigMapView>,
    orphans: Vec<String>,
}

impl Seen {
    fn observed<'a>(
        &'a self,
        model: &'a ModelView,
        now: &'a str,
        targets: &'a TargetPolicy,
    ) -> Observed<'a> {
        Observed {
            model,
            deployments: &self.deployments,
            config_maps: &self.config_maps,
            orphans: &self.orphans,
            now,
            targets,
        }
    }
}

/// Why carrying a plan out stopped.
enum Failed {
    Api(Error),
    /// The API refused a Deployment or ConfigMap write with an error that
    /// retrying will not cure.
    Refused(RefusedWrite, Error),
}

impl Failed {
    fn of(e: Error, what: RefusedWrite) -> Failed {
        if e.is_refusal() {
            Failed::Refused(what, e)
        } else {
            Failed::Api(e)
        }
    }

    fn into_error(self) -> Error {
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

/// How many times a pass is replanned after a conflict before backing off.
const MAX_REPLANS: usize = 4;

enum Pass {
    Done(Outcome),
    /// A write met a newer object (409) or a ConfigMap the caches did not
    /// know: plan again from fresh observations.
    Replan,
}

impl Reconciler {
    /// A reconciler with empty stores, over `client`.
    pub fn new(client: Arc<Client>, metrics: Arc<Metrics>) -> Reconciler {
        Reconciler {
            client,
            models: Arc::new(Store::default()),
            deployments: Arc::new(Store::indexed(deployment_owners)),
            deployment_meta: Arc::new(Store::default()),
            fetched: Fetched::default(),
            config_maps: Arc::new(Store::indexed(config_map_owner)),
            autoscalers: Arc::new(Store::default()),
            posted: Mutex::new(Default::default()),
            recent: Default::default(),
            metrics,
            acted: Mutex::new(Default::default()),
            targets: TargetPolicy::default(),
            settled: Mutex::new(HashMap::new()),
        }
    }

    /// With this rule for which Deployments may become targets.
    pub fn with_targets(mut self, targets: TargetPolicy) -> Reconciler {
        self.targets = targets;
        self
    }

    /// Reconcile one OpenMedModel. One whose last pass changed nothing is
    /// not planned again until something in the caches changes: a pass is a
    /// function of what they hold (docs/contract.md §6), so a resync of a
    /// converged cluster costs next to nothing (docs/performance.md).
    /// [`Reconciler::unsettle_all`] forces full passes now and then, for
    /// what no cache shows (a foreign ConfigMap, an owner in a namespace not
    /// watched).
    pub fn sync(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let world = self.world();
        if lock(&self.settled).get(key) == Some(&world) {
            return Ok(Outcome::Unchanged);
        }
        lock(&self.settled).remove(key);
        let out = self.sync_now(key)?;
        let quiet = matches!(out, Outcome::Unchanged) && self.world() == world;
        let model = self.models.get(key);
        if quiet && model.is_some_and(|m| !reports_config_map_conflict(&m)) {
            lock(&self.settled).insert(key.clone(), world);
        }
        Ok(out)
    }

    /// Forget which resources are settled: the next sync of each is a full
    /// pass.
    pub fn unsettle_all(&self) {
        lock(&self.settled).clear();
    }

    /// Where every cache stands: equal readings mean nothing changed.
    fn world(&self) -> [u64; 5] {
        [
            self.models.changes(),
            self.deployments.changes(),
            self.deployment_meta.changes(),
            self.config_maps.changes(),
            self.autoscalers.changes(),
        ]
    }

    fn sync_now(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let mut extra_cms: Vec<ConfigMapView> = Vec::new();
        let mut last_conflict = None;
        for _ in 0..MAX_REPLANS {
            let Some(model) = self.models.get(key) else {
                return Ok(Outcome::Unchanged);
            };
            match self.pass(&model, &mut extra_cms) {
                Ok(Pass::Done(o)) => {
                    self.post_owed_events(key)?;
                    return Ok(o);
                }
                Ok(Pass::Replan) => {}
                Err(e) if e.is_conflict() => {
                    log::debug!("{key}: conflict, re-reading: {e}");
                    self.refresh_model(&model)?;
                    last_conflict = Some(e);
                }
                Err(e) if e.is_not_found() && !self.models.contains(key) => {
                    return Ok(Outcome::Unchanged)
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SyncError::NotSettled {
            replans: MAX_REPLANS,
            last: last_conflict,
        })
    }

    fn refresh_model(&self, model: &ModelView) -> Result<(), Error> {
        let path =
            ResourcePath::object(crate::model::RESOURCE, Some(&model.namespace), &model.name)?;
        match self.client.get(&path) {
            Ok(v) => {
                if let Some(m) = ModelView::from_json(&v) {
                    self.models.put_if_newer(m.key(), m);
                }
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.models.remove(&model.key());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A Deployment by name: from the claimed cache, else (if the metadata
    /// watch says it exists) from the API, cached by resourceVersion.
    fn deployment(&self, ns: &str, name: &str) -> Result<Option<DeploymentView>, Error> {
        let k = ObjectKey::new(ns, name);
        if let Some(d) = self.deployments.get(&k) {
            // Claimed now: its read-on-demand copy is not needed again.
            self.fetched.remove(&k);
            return Ok(Some(d));
        }
        let Some(meta) = self.deployment_meta.get(&k) else {
            return Ok(None);
        };
        if let Some(d) = self.fetched.get(&k, &meta.resource_version) {
            return Ok(Some(d));
        }
        match self
            .client
            .get(&ResourcePath::object(DEPLOYMENTS, Some(ns), name)?)
        {
            Ok(v) => {
                let d = DeploymentView::from_json(&v);
                if let Some(d) = &d {
                    self.fetched.insert(k, d.clone());
                }
                Ok(d)
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What one pass looks at: the Deployments and ConfigMaps its lookups
    /// name, every other one this owner still claims (to release them), and
    /// the owners named on them that are gone (orphans, to adopt).
    fn observe(&self, model: &ModelView, extra_cms: &[ConfigMapView]) -> Result<Seen, Error> {
        let ns = model.namespace.as_str();
        let owner = model.qualified_name();
        let l = lookups(model);
        let mut deployments = Vec::new();
        for name in &l.deployments {
            if let Some(d) = self.deployment(ns, name)? {
                deployments.push(d);
            }
        }
        let claimed = self.deployments.by_index(&owner);
        for d in claimed.into_iter().filter(|d| d.namespace == ns) {
            if !deployments.iter().any(|x| x.name == d.name) {
                deployments.push(d);
            }
        }
        let mut config_maps: Vec<ConfigMapView> = l
            .config_maps
            .iter()
            .filter_map(|n| self.config_maps.get(&ObjectKey::new(ns, n.clone())))
            .collect();
        let extra = self
            .config_maps
            .by_index(&owner)
            .into_iter()
            .filter(|c| c.namespace == ns);
        for cm in extra_cms.iter().cloned().chain(extra) {
            if !config_maps.iter().any(|c| c.name == cm.name) {
                config_maps.push(cm);
            }
        }
        if reports_config_map_conflict(model) {
            for name in &l.config_maps {
                if !config_maps.iter().any(|c| &c.name == name) {
                    config_maps.extend(self.read_config_map(ns, name)?);
                }
            }
        }
        for d in deployments.iter_mut() {
            d.autoscaler = self.autoscaler_of(ns, &d.name);
        }
        note_autoscaled(model, &mut deployments);
        let orphans = self.orphans(&owner, &deployments)?;
        Ok(Seen {
            deployments,
            config_maps,
            orphans,
        })
    }

    /// The HorizontalPodAutoscaler scaling Deployment `ns/name`, as
    /// `HorizontalPodAutoscaler/<name>` (the first by name if several).
    fn autoscaler_of(&self, ns: &str, name: &str) -> Option<String> {
        let mut by: Vec<String> = self
            .autoscalers
            .select(|k, a| k.namespace() == ns && a.deployment.as_deref() == Some(name))
            .into_iter()
            .map(|a| a.name)
            .collect();
        by.sort();
        by.first().map(|n| format!("HorizontalPodAutoscaler/{n}"))
    }

    /// Owners named on these Deployments, other than `owner`, whose
    /// OpenMedModel is gone: not in the cache and confirmed by a read.
    fn orphans(&self, owner: &str, deployments: &[DeploymentView]) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        let named = deployments
            .iter()
            .flat_map(|d| [d.owner.clone(), d.template_owner.clone()])
            .flatten();
        for other in named {
            if other == owner || out.contains(&other) {
                continue;
            }
            let Some((ns, name)) = other.split_once('/') else {
                continue;
            };
            let key = ObjectKey::new(ns, name);
            if ns.is_empty() || name.is_empty() || self.models.contains(&key) {
                continue;
            }
            let path = ResourcePath::object(crate::model::RESOURCE, Some(ns), name)?;
            match self.client.get(&path) {
                Err(e) if e.is_not_found() => out.push(other),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        Ok(out)
    }

    fn pass(&self, model: &ModelView, extra_cms: &mut Vec<ConfigMapView>) -> Result<Pass, Error> {
        if self.is_behind(model) {
            // An older view than one already acted on (a lagging watch):
            // read the model afresh rather than apply an older spec (9.17).
            self.refresh_model(model)?;
            return Ok(Pass::Replan);
        }
        let seen = self.observe(model, extra_cms)?;
        let now = crate::time::now();
        let obs = seen.observed(model, &now, &self.targets);
        let p = plan(obs);
        if p.is_noop() {
            return Ok(Pass::Done(Outcome::Unchanged));
        }
        if newly_blocked(model, &p) && self.confirm_targets(model, &seen.deployments)? {
            // The caches were behind (9.14): plan again from what is there.
            return Ok(Pass::Replan);
        }
        match self.carry_out(model, &p, extra_cms, &now) {
            Ok(pass) => Ok(pass),
            Err(Failed::Api(e)) => Err(e),
            Err(Failed::Refused(what, e)) => {
                // A write the API refuses every time (9.19): say so in status,
                // then back off (the caller's error) instead of retrying at once.
                let refused = plan_refused(obs, what, &e.to_string());
                self.carry_out(model, &refused, extra_cms, &now)
                    .map_err(Failed::into_error)?;
                Err(e)
            }
        }
    }

    /// Before reporting a block the caches suggest (9.14), read the target
    /// Deployments: true when what is there differs from what was seen
    /// (the caches are put right).
    fn confirm_targets(&self, model: &ModelView, seen: &[DeploymentView]) -> Result<bool, Error> {
        let ns = model.namespace.as_str();
        let mut changed = false;
        for name in lookups(model).deployments {
            let path = ResourcePath::object(DEPLOYMENTS, Some(ns), &name)?;
            let was = seen.iter().find(|d| d.name == name);
            let key = ObjectKey::new(ns, name.clone());
            match self.client.get(&path) {
                Ok(v) => {
                    let Some(d) = DeploymentView::from_json(&v) else {
                        continue;
                    };
                    if was.is_none_or(|w| w.resource_version != d.resource_version) {
                        let meta = MetaView {
                            resource_version: d.resource_version.clone(),
                            claimed: d.claimed,
                        };
                        self.deployment_meta.put_if_newer(key, meta);
                        self.remember_deployment(&v);
                        changed = true;
                    }
                }
                Err(e) if e.is_not_found() => {
                    if let Some(w) = was {
                        self.deployment_meta.remove_object(&key, &w.uid);
                        self.deployments.remove_object(&key, &w.uid);
                        self.fetched.remove(&key);
                        changed = true;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(changed)
    }

    /// A view of `model` older than one a previous pass acted on.
    fn is_behind(&self, model: &ModelView) -> bool {
        lock(&self.acted)
            .get(&model.key())
            .is_some_and(|(uid, g)| *uid == model.uid && model.generation < *g)
    }

    fn remember_acted(&self, model: &ModelView) {
        let k = model.key();
        let mut acted = lock(&self.acted);
        let newer = acted
            .get(&k)
            .is_none_or(|(uid, g)| *uid != model.uid || model.generation > *g);
        if newer {
            acted.insert(k, (model.uid.clone(), model.generation));
        }
    }

    /// Carry a plan out through the API ([`execute`] fixes the order).
    fn carry_out(
        &self,
        model: &ModelView,
        p: &Plan,
        extra_cms: &mut Vec<ConfigMapView>,
        now: &str,
    ) -> Result<Pass, Failed> {
        if !p.writes.is_empty() {
            self.remember_acted(model);
        }
        let model_path =
            ResourcePath::object(crate::model::RESOURCE, Some(&model.namespace), &model.name)?;
        let mut api = ApiCluster {
            reconciler: self,
            model,
            model_path,
            who: model.qualified_name(),
            now,
        };
        match execute(&mut api, p, &model.resource_version)? {
            Executed::Done => Ok(Pass::Done(Outcome::Applied)),
            Executed::Replan(cm) => {
                extra_cms.retain(|c| c.name != cm.name);
                extra_cms.push(*cm);
                Ok(Pass::Replan)
            }
        }
    }

    /// Read one ConfigMap the caches do not hold (they hold only ours).
    fn read_config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMapView>, Error> {
        match self
            .client
            .get(&ResourcePath::object(CONFIG_MAPS, Some(ns), name)?)
        {
            Ok(v) => Ok(ConfigMapView::from_json(&v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Create the ConfigMap. `Some(found)` when one of that name exists that
    /// the caches (which hold only ours) did not know: plan again with it.
    fn create_config_map(
        &self,
        ns: &str,
        body: &Value,
        who: &str,
    ) -> Result<Option<ConfigMapView>, Failed> {
        let name = body["metadata"]["name"].as_str().unwrap_or("");
        match self
            .client
            .create(&ResourcePath::collection(CONFIG_MAPS, Some(ns))?, body)
        {
            Ok(resp) => {
                self.remember_cm(&resp);
                log::info!("{who}: created ConfigMap {name}");
                Ok(None)
            }
            Err(e) if e.is_already_exists() => {
                // Gone again by now: the create is retried with the sync.
                let found = self.read_config_map(ns, name)?;
                Ok(Some(found.ok_or(e)?))
            }
            Err(e) => Err(Failed::of(e, RefusedWrite::ConfigMap)),
        }
    }

    fn delete_config_map(&self, ns: &str, name: &str, uid: &str, who: &str) -> Result<(), Failed> {
        let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
        let pre = Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        };
        match self.client.delete(&path, Some(&pre)) {
            Ok(_) => log::info!("{who}: deleted ConfigMap {name}"),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        self.config_maps.remove(&ObjectKey::new(ns, name));
        Ok(())
    }

    /// Post an Event for `model` in its current generation (see
    /// `events.rs`). A failure is logged with the namespace, counted, and
    /// returned: the sync is retried, the Event never dropped.
    fn post_event(
        &self,
        model: &ModelView,
        reason: crate::model::EventReason,
        generation: i64,
        message: &str,
        now: &str,
    ) -> Result<(), Error> {
        let level = if reason.is_warning() {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        log::log!(level, "{}: {reason}: {message}", model.qualified_name());
        let poster = Poster {
            client: &self.client,
            posted: &self.posted,
        };
        match poster.post(model, reason, generation, message, now) {
            Ok(count) => {
                self.metrics.event_posted();
                let event = crate::live_view::EventRow {
                    reason: reason.as_str().to_string(),
                    type_: if reason.is_warning() {
                        "Warning"
                    } else {
                        "Normal"
                    }
                    .to_string(),
                    count,
                    last: now.to_string(),
                    message: message.to_string(),
                };
                self.recent.record(&model.namespace, &model.name, event);
                Ok(())
            }
            Err(e) => {
                self.metrics.event_failed();
                log::warn!(reason = reason.as_str(); "{}: could not post Event {reason}: {e}", model.qualified_name());
                Err(e)
            }
        }
    }

    /// The Events the model's status says its last transition required
    /// (`status.lastEvents`) and that were not posted for this object: a
    /// post that failed, or a crash between the status write and the post.
    fn post_owed_events(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(model) = self.models.get(key) else {
            return Ok(());
        };
        let st = model.status();
        let poster = Poster {
            client: &self.client,
            posted: &self.posted,
        };
        let now = crate::time::now();
        // Under the generation of the transition that owed it, even when the
        // spec has changed since without a new transition: the Event of the
        // state the status shows is still owed (docs/contract.md §9.7), as
        // after a status write whose answer a cut connection lost, then a
        // spec change that kept the same block.
        for owed in st.last_events() {
            if owed.generation > model.generation
                || poster.was_posted(&model, owed.reason, owed.generation)
            {
                continue;
            }
            log::info!(reason = owed.reason.as_str(); "{}: posting the owed Event {}", model.qualified_name(), owed.reason);
            self.post_event(&model, owed.reason, owed.generation, &owed.message, &now)?;
        }
        Ok(())
    }

    fn remember_model(&self, v: &Value) -> Option<String> {
        let m = ModelView::from_json(v)?;
        let rv = m.resource_version.clone();
        self.models.put_if_newer(m.key(), m);
        Some(rv)
    }

    fn remember_cm(&self, v: &Value) {
        if let Some(cm) = ConfigMapView::from_json(v) {
            if cm.managed_by.as_deref() == Some(crate::model::MANAGED_BY_LABEL.1) {
                self.config_maps.put_if_newer(cm.key(), cm);
            }
        }
    }

    fn remember_deployment(&self, v: &Value) {
        let Some(d) = DeploymentView::from_json(v) else {
            return;
        };
        let k = d.key();
        if d.claimed {
            self.deployments.put_if_newer(k, d);
        } else {
            self.deployments.remove(&k);
            self.fetched.insert(k, d);
        }
    }
}

/// The API server as [`execute`] sees it, for one model: every answer is
/// remembered in the caches, every write logged.
struct ApiCluster<'a> {
    reconciler: &'a Reconciler,
    model: &'a ModelView,
    model_path: ResourcePath,
    who: String,
    now: &'a str,
}

impl Cluster for ApiCluster<'_> {
    type Error = Failed;

    fn set_finalizers(
        &mut self,
        rv: &str,
        finalizers: &[String],
    ) -> Result<Option<String>, Failed> {
        let body = patches::finalizers_patch(rv, finalizers);
        let resp = self.reconciler.client.patch(
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
            self.reconciler.models.remove_object(&key, &self.model.uid);
            return Ok(None);
        }
        Ok(Some(
            self.reconciler
                .remember_model(&resp)
                .unwrap_or_else(|| rv.to_string()),
        ))
    }

    fn create_config_map(&mut self, body: &Value) -> Result<Option<ConfigMapView>, Failed> {
        self.reconciler
            .create_config_map(&self.model.namespace, body, &self.who)
    }

    fn patch_config_map(&mut self, name: &str, body: &Value) -> Result<(), Failed> {
        let path = ResourcePath::object(CONFIG_MAPS, Some(&self.model.namespace), name)?;
        let resp = self
            .reconciler
            .client
            .patch(&path, PatchType::Merge, body, Retry::Idempotent)
            .map_err(|e| Failed::of(e, RefusedWrite::ConfigMap))?;
        self.reconciler.remember_cm(&resp);
        log::info!("{}: updated ConfigMap {name}", self.who);
        Ok(())
    }

    fn patch_deployment(&mut self, name: &str, body: &Value) -> Result<i64, Failed> {
        let path = ResourcePath::object(DEPLOYMENTS, Some(&self.model.namespace), name)?;
        let resp = self
            .reconciler
            .client
            .patch(&path, PatchType::Strategic, body, Retry::Idempotent)
            .map_err(|e| Failed::of(e, RefusedWrite::Deployment))?;
        let generation = resp["metadata"]["generation"].as_i64().unwrap_or(0);
        self.reconciler.remember_deployment(&resp);
        log::info!(
            "{}: patched Deployment {name} (generation {generation})",
            self.who
        );
        Ok(generation)
    }

    fn delete_config_map(&mut self, name: &str, uid: &str) -> Result<(), Failed> {
        self.reconciler
            .delete_config_map(&self.model.namespace, name, uid, &self.who)
    }

    fn patch_status(&mut self, body: &Value) -> Result<(), Failed> {
        let path = self.model_path.clone().status();
        let resp = self
            .reconciler
            .client
            .patch(&path, PatchType::Merge, body, Retry::Write)?;
        self.reconciler.remember_model(&resp);
        self.reconciler.remember_acted(self.model);
        if let Some(phase) = body["status"]["phase"].as_str() {
            let reason = ready_reason(body).unwrap_or_default();
            log::info!(reason; "{}: phase {phase} ({reason})", self.who);
        }
        Ok(())
    }

    fn post_event(&mut self, e: &EventSpec) -> Result<(), Failed> {
        self.reconciler
            .post_event(
                self.model,
                e.reason,
                self.model.generation,
                &e.message,
                self.now,
            )
            .map_err(Failed::Api)
    }
}

/// The reason of the Ready condition a status patch writes, if it writes one.
fn ready_reason(body: &Value) -> Option<&str> {
    body["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .get("reason")?
        .as_str()
}
