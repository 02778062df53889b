//! The sync handler: read the caches, ask the core for a plan, carry its
//! writes out in order, then the status, then the Events.

use super::cache::{Key, MetaView, Store};
use crate::kube::endpoint::lock;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS, EVENTS};
use crate::kube::{Client, Error, PatchType, Preconditions, ResourcePath, Retry};
use crate::metrics::{Metrics, Outcome};
use crate::model::names::event_name;
use crate::reconcile::{
    lookups, patches, plan, ConfigMapView, DeploymentView, ModelView, Observed, Write,
};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Events already posted, by name, with the count last written, so each
/// name is POSTed once and a repeat occurrence only bumps its count.
#[derive(Default)]
pub struct Posted {
    counts: HashMap<String, i64>,
    order: VecDeque<String>,
}

const POSTED_CAP: usize = 20_000;

impl Posted {
    fn get(&self, n: &str) -> Option<i64> {
        self.counts.get(n).copied()
    }
    fn set(&mut self, n: String, count: i64) {
        if self.counts.insert(n.clone(), count).is_none() {
            self.order.push_back(n);
            while self.order.len() > POSTED_CAP {
                if let Some(old) = self.order.pop_front() {
                    self.counts.remove(&old);
                }
            }
        }
    }
}

pub struct Ctx {
    pub client: Arc<Client>,
    pub models: Arc<Store<ModelView>>,
    /// Deployments the operator has claimed: full (compact) views.
    pub deployments: Arc<Store<DeploymentView>>,
    /// Every Deployment in scope, metadata only.
    pub deployment_meta: Arc<Store<MetaView>>,
    /// Unclaimed Deployments read on demand, reused while their
    /// resourceVersion in `deployment_meta` is unchanged.
    pub fetched: Mutex<HashMap<Key, DeploymentView>>,
    pub config_maps: Arc<Store<ConfigMapView>>,
    pub posted: Mutex<Posted>,
    pub metrics: Arc<Metrics>,
}

/// How many times a pass is replanned after a conflict before backing off.
const MAX_REPLANS: usize = 4;

enum Pass {
    Done(Outcome),
    /// A write met a newer object (409) or a ConfigMap the caches did not
    /// know: plan again from fresh observations.
    Replan,
}

impl Ctx {
    /// Reconcile one OpenMedModel.
    pub fn sync(&self, key: &Key) -> Result<Outcome, Error> {
        let mut extra_cms: Vec<ConfigMapView> = Vec::new();
        for _ in 0..MAX_REPLANS {
            let Some(model) = self.models.get(key) else {
                return Ok(Outcome::Unchanged);
            };
            match self.pass(&model, &mut extra_cms) {
                Ok(Pass::Done(o)) => return Ok(o),
                Ok(Pass::Replan) => {}
                Err(e) if e.is_conflict() => {
                    log::debug!("{}/{}: conflict, re-reading: {e}", key.0, key.1);
                    self.refresh_model(&model)?;
                }
                Err(e) if e.is_not_found() && !self.models.contains(key) => {
                    return Ok(Outcome::Unchanged)
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Api(crate::kube::ApiError {
            code: 409,
            reason: crate::kube::Reason::Conflict,
            message: "still conflicting after re-reading; will retry".into(),
            retry_after: None,
        }))
    }

    fn refresh_model(&self, model: &ModelView) -> Result<(), Error> {
        let path =
            ResourcePath::object(crate::model::RESOURCE, Some(&model.namespace), &model.name)?;
        match self.client.get(&path) {
            Ok(v) => {
                if let Some(m) = ModelView::from_json(&v) {
                    self.models.put((m.namespace.clone(), m.name.clone()), m);
                }
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.models
                    .remove(&(model.namespace.clone(), model.name.clone()));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A Deployment by name: from the claimed cache, else (if the metadata
    /// watch says it exists) from the API, cached by resourceVersion.
    fn deployment(&self, ns: &str, name: &str) -> Result<Option<DeploymentView>, Error> {
        let k = (ns.to_string(), name.to_string());
        if let Some(d) = self.deployments.get(&k) {
            return Ok(Some(d));
        }
        let Some(meta) = self.deployment_meta.get(&k) else {
            return Ok(None);
        };
        if let Some(d) = lock(&self.fetched).get(&k) {
            if d.resource_version == meta.resource_version {
                return Ok(Some(d.clone()));
            }
        }
        match self
            .client
            .get(&ResourcePath::object(DEPLOYMENTS, Some(ns), name)?)
        {
            Ok(v) => {
                let d = DeploymentView::from_json(&v);
                if let Some(d) = &d {
                    lock(&self.fetched).insert(k, d.clone());
                }
                Ok(d)
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn pass(&self, model: &ModelView, extra_cms: &mut Vec<ConfigMapView>) -> Result<Pass, Error> {
        let ns = model.namespace.as_str();
        let l = lookups(model);
        let mut deployments = Vec::new();
        for name in &l.deployments {
            if let Some(d) = self.deployment(ns, name)? {
                deployments.push(d);
            }
        }
        let mut config_maps: Vec<ConfigMapView> = l
            .config_maps
            .iter()
            .filter_map(|n| self.config_maps.get(&(ns.to_string(), n.clone())))
            .collect();
        for cm in extra_cms.iter() {
            if !config_maps.iter().any(|c| c.name == cm.name) {
                config_maps.push(cm.clone());
            }
        }
        let now = crate::time::now();
        let p = plan(Observed {
            model,
            deployments: &deployments,
            config_maps: &config_maps,
            now: &now,
        });
        if p.is_noop() {
            return Ok(Pass::Done(Outcome::Unchanged));
        }
        let who = model.owner();
        let model_path = ResourcePath::object(crate::model::RESOURCE, Some(ns), &model.name)?;
        let mut rv = model.resource_version.clone();
        let mut patched_gen = None;
        for w in &p.writes {
            match w {
                Write::AddFinalizer { finalizers } | Write::RemoveFinalizers { finalizers } => {
                    let body = patches::finalizers_patch(&rv, finalizers);
                    let resp =
                        self.client
                            .patch(&model_path, PatchType::Merge, &body, Retry::Write)?;
                    rv = self.remember_model(&resp).unwrap_or(rv);
                    let what = if matches!(w, Write::AddFinalizer { .. }) {
                        "added"
                    } else {
                        "released"
                    };
                    log::info!("{who}: finalizer {what}");
                }
                Write::CreateConfigMap { body } => {
                    let name = body["metadata"]["name"].as_str().unwrap_or("");
                    match self
                        .client
                        .create(&ResourcePath::collection(CONFIG_MAPS, Some(ns))?, body)
                    {
                        Ok(resp) => {
                            self.remember_cm(&resp);
                            log::info!("{who}: created ConfigMap {name}");
                        }
                        // The ConfigMap cache holds only ConfigMaps with our
                        // label: one without it exists. Plan again with it.
                        Err(e) if e.is_already_exists() => {
                            let found = self.client.get(&ResourcePath::object(
                                CONFIG_MAPS,
                                Some(ns),
                                name,
                            )?)?;
                            if let Some(cm) = ConfigMapView::from_json(&found) {
                                extra_cms.retain(|c| c.name != cm.name);
                                extra_cms.push(cm);
                            }
                            return Ok(Pass::Replan);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Write::PatchConfigMap { name, body } => {
                    let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
                    let resp =
                        self.client
                            .patch(&path, PatchType::Merge, body, Retry::Idempotent)?;
                    self.remember_cm(&resp);
                    log::info!("{who}: updated ConfigMap {name}");
                }
                Write::PatchDeployment {
                    name,
                    body,
                    sets_target,
                } => {
                    let path = ResourcePath::object(DEPLOYMENTS, Some(ns), name)?;
                    let resp =
                        self.client
                            .patch(&path, PatchType::Strategic, body, Retry::Idempotent)?;
                    if *sets_target {
                        patched_gen = resp["metadata"]["generation"].as_i64();
                    }
                    self.remember_deployment(&resp);
                    log::info!(
                        "{who}: patched Deployment {name} (generation {})",
                        resp["metadata"]["generation"].as_i64().unwrap_or(0)
                    );
                }
                Write::DeleteConfigMap { name, uid } => {
                    let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
                    let pre = Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    };
                    match self.client.delete(&path, Some(&pre)) {
                        Ok(_) => log::info!("{who}: deleted ConfigMap {name}"),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                    self.config_maps.remove(&(ns.to_string(), name.clone()));
                }
            }
        }
        if let Some(body) = p.status_patch(patched_gen, &rv) {
            let resp = self.client.patch(
                &model_path.clone().status(),
                PatchType::Merge,
                &body,
                Retry::Write,
            )?;
            self.remember_model(&resp);
            if let Some(phase) = body["status"]["phase"].as_str() {
                log::info!("{who}: phase {phase}");
            }
        }
        for e in p.events_to_post(patched_gen) {
            self.post_event(model, e.reason, &e.message, &now);
        }
        Ok(Pass::Done(Outcome::Applied))
    }

    /// Post an Event. Its name is fixed by (resource, reason, generation),
    /// so a retried or restarted pass cannot duplicate it: the name is POSTed
    /// once, and a later occurrence with the same name bumps the existing
    /// Event's count, time and message, as Kubernetes' event recorder does.
    /// A failure is logged and never blocks convergence.
    fn post_event(
        &self,
        model: &ModelView,
        reason: crate::model::EventReason,
        message: &str,
        now: &str,
    ) {
        let name = event_name(&model.name, reason.as_str(), model.generation);
        let level = if reason.is_warning() {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        log::log!(level, "{}: {reason}: {message}", model.owner());
        let result = match lock(&self.posted).get(&name) {
            None => self.create_event(model, &name, reason, message, now),
            Some(count) => self.bump_event(model, &name, Some(count), message, now),
        };
        match result {
            Ok(count) => lock(&self.posted).set(name, count),
            Err(e) => log::warn!("{}: could not post Event {reason}: {e}", model.owner()),
        }
    }

    fn create_event(
        &self,
        model: &ModelView,
        name: &str,
        reason: crate::model::EventReason,
        message: &str,
        now: &str,
    ) -> Result<i64, Error> {
        let body = patches::event(model, name, reason, message, now);
        match self.client.create(
            &ResourcePath::collection(EVENTS, Some(&model.namespace))?,
            &body,
        ) {
            Ok(_) => {
                self.metrics.event_posted();
                Ok(1)
            }
            Err(e) if e.is_already_exists() => self.bump_event(model, name, None, message, now),
            Err(e) => Err(e),
        }
    }

    fn bump_event(
        &self,
        model: &ModelView,
        name: &str,
        known: Option<i64>,
        message: &str,
        now: &str,
    ) -> Result<i64, Error> {
        let path = ResourcePath::object(EVENTS, Some(&model.namespace), name)?;
        let count = match known {
            Some(c) => c,
            None => self.client.get(&path)?["count"].as_i64().unwrap_or(1),
        };
        let body = patches::event_repeat(count + 1, message, now);
        self.client
            .patch(&path, PatchType::Merge, &body, Retry::Write)?;
        Ok(count + 1)
    }

    fn remember_model(&self, v: &Value) -> Option<String> {
        let m = ModelView::from_json(v)?;
        let rv = m.resource_version.clone();
        self.models
            .put_if_newer((m.namespace.clone(), m.name.clone()), m);
        Some(rv)
    }

    fn remember_cm(&self, v: &Value) {
        if let Some(cm) = ConfigMapView::from_json(v) {
            if cm.managed_by.as_deref() == Some(crate::model::MANAGED_BY_LABEL.1) {
                self.config_maps
                    .put_if_newer((cm.namespace.clone(), cm.name.clone()), cm);
            }
        }
    }

    fn remember_deployment(&self, v: &Value) {
        let Some(d) = DeploymentView::from_json(v) else {
            return;
        };
        let k = (d.namespace.clone(), d.name.clone());
        if d.claimed {
            self.deployments.put_if_newer(k, d);
        } else {
            self.deployments.remove(&k);
            lock(&self.fetched).insert(k, d);
        }
    }
}
