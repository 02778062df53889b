//! One observation of one OpenMedModel, gathered in one step before the
//! core is asked for a plan: the model from its cache, the Deployments and
//! ConfigMaps its lookups name and every other one it still claims, each
//! Deployment's autoscaler, and the owners named on them that are gone.
//! The caches answer; the API is read only for what they do not hold (an
//! unclaimed target, a foreign ConfigMap, an orphan's owner).

use super::Grounds;
use crate::controller::caches::{CacheRead, Caches, Recorder};
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS};
use crate::kube::{Client, Error, ResourcePath};
use crate::reconcile::{
    lookups, note_autoscaled, ConfigMapView, DeploymentView, ModelObject, ModelView, Observed,
    TargetPolicy,
};
use crate::runtime::ObjectKey;

/// The status already reports a foreign ConfigMap of our name. The caches
/// hold only ours, so the shell reads that name each pass rather than retry a
/// create bound to meet AlreadyExists on every resync: a read, not a write.
fn reports_config_map_conflict(model: &ModelView) -> bool {
    use crate::model::status::Reason::ConfigMapConflict;
    let was = model.status().ready_reason();
    was == Some(ConfigMapConflict)
}

/// What the observer reads from the API when the caches do not hold it:
/// through the shell's client ([`Api`]), or from the contract tests'
/// in-memory World.
pub trait ApiReads {
    /// A Deployment by name (None: there is none).
    fn deployment(&self, ns: &str, name: &str) -> Result<Option<DeploymentView>, Error>;
    /// Whether an OpenMedModel of that name exists.
    fn model_exists(&self, ns: &str, name: &str) -> Result<bool, Error>;
    /// A ConfigMap by name (None: there is none).
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMapView>, Error>;
}

/// The shell's API reads, through its client.
pub struct Api<'a>(pub &'a Client);

impl ApiReads for Api<'_> {
    fn deployment(&self, ns: &str, name: &str) -> Result<Option<DeploymentView>, Error> {
        let path = ResourcePath::object(DEPLOYMENTS, Some(ns), name)?;
        match self.0.get_as::<DeploymentView>(&path) {
            Ok(d) if d.name().is_empty() => Ok(None),
            Ok(d) => Ok(Some(d)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn model_exists(&self, ns: &str, name: &str) -> Result<bool, Error> {
        let path = ResourcePath::object(crate::model::RESOURCE, Some(ns), name)?;
        match self.0.get(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMapView>, Error> {
        read_config_map(self.0, ns, name)
    }
}

/// Everything one plan is made from (docs/contract.md §6).
pub struct Observation {
    pub model: ModelView,
    pub deployments: Vec<DeploymentView>,
    pub config_maps: Vec<ConfigMapView>,
    pub orphans: Vec<String>,
    /// The time the plan stamps on what it writes.
    pub now: String,
    /// Whether it rests on the caches alone.
    pub(super) grounds: Grounds,
    /// What it read from the caches, to tell later whether it still holds.
    pub(super) reads: Vec<CacheRead>,
}

/// What observing a key found.
pub enum Observing {
    /// The model is not in its cache: nothing to do.
    Gone,
    /// Its view is older than one already acted on (a lagging watch): read
    /// it afresh and observe again, rather than apply an older spec (9.17).
    Behind,
    Found(Box<Observation>),
}

impl Observation {
    /// The core's view of it.
    pub fn observed<'a>(&'a self, targets: &'a TargetPolicy) -> Observed<'a> {
        Observed {
            model: &self.model,
            deployments: &self.deployments,
            config_maps: &self.config_maps,
            orphans: &self.orphans,
            now: &self.now,
            targets,
        }
    }
}

/// The one observer of a pass: it reads the caches only through its
/// [`Recorder`], so every read is recorded, and the API for what they do not
/// hold.
pub struct Observer<'a, A: ApiReads> {
    api: &'a A,
    reads: Recorder<'a>,
}

impl<'a, A: ApiReads> Observer<'a, A> {
    pub fn new(api: &'a A, reads: Recorder<'a>) -> Observer<'a, A> {
        Observer { api, reads }
    }

    /// The observation a plan for `key` is made from, in one step.
    /// `extra_cms`: ConfigMaps an earlier attempt found that the caches do
    /// not hold. `is_behind`: whether a view is older than one acted on.
    pub fn observe(
        mut self,
        key: &ObjectKey,
        extra_cms: &[ConfigMapView],
        is_behind: impl Fn(&ModelView) -> bool,
    ) -> Result<Observing, Error> {
        let Some(model) = self.reads.model(key) else {
            return Ok(Observing::Gone);
        };
        if is_behind(&model) {
            return Ok(Observing::Behind);
        }
        let o = self.gather(model, extra_cms)?;
        let reads = self.reads.into_reads();
        Ok(Observing::Found(Box::new(Observation { reads, ..o })))
    }

    /// A Deployment by name: from the claimed cache, else (if the metadata
    /// watch says it exists) from the API, cached by resourceVersion.
    fn deployment(&mut self, ns: &str, name: &str) -> Result<Option<DeploymentView>, Error> {
        let k = ObjectKey::new(ns, name);
        if let Some(d) = self.reads.claimed_deployment(&k) {
            return Ok(Some(d));
        }
        match self.reads.unclaimed_deployment(&k) {
            None => return Ok(None),
            Some(Some(d)) => return Ok(Some(d)),
            Some(None) => {}
        }
        let d = self.api.deployment(ns, name)?;
        if let Some(d) = &d {
            self.reads.keep_fetched(d.clone());
        }
        Ok(d)
    }

    /// What one pass looks at: the Deployments and ConfigMaps its lookups
    /// name, every other one this owner still claims (to release them), and
    /// the owners named on them that are gone (orphans, to adopt).
    fn gather(
        &mut self,
        seen: ModelView,
        extra_cms: &[ConfigMapView],
    ) -> Result<Observation, Error> {
        let model = &seen;
        let ns = model.namespace();
        let owner = model.qualified_name();
        // Read first: it parses the status, which the lookups then read
        // rather than parse a part of it again.
        let conflict = reports_config_map_conflict(model);
        let l = lookups(model);
        let mut deployments = Vec::new();
        for name in &l.deployments {
            if let Some(d) = self.deployment(ns, name)? {
                deployments.push(d);
            }
        }
        let claimed = self.reads.deployments_of(&owner, |d| {
            d.namespace() == ns && !deployments.iter().any(|x| x.name() == d.name())
        });
        deployments.extend(claimed);
        let mut config_maps: Vec<ConfigMapView> = Vec::new();
        for n in &l.config_maps {
            config_maps.extend(self.reads.config_map(&ObjectKey::new(ns, n)));
        }
        for cm in extra_cms {
            if !config_maps.iter().any(|c| c.name() == cm.name()) {
                config_maps.push(cm.clone());
            }
        }
        let extra = self.reads.config_maps_of(&owner, |c| {
            c.namespace() == ns && !config_maps.iter().any(|x| x.name() == c.name())
        });
        config_maps.extend(extra);
        let mut grounds = if extra_cms.is_empty() {
            Grounds::Caches
        } else {
            Grounds::Reads
        };
        if conflict {
            grounds = Grounds::ForeignConfigMap;
            for name in &l.config_maps {
                if !config_maps.iter().any(|c| c.name() == name) {
                    config_maps.extend(self.api.config_map(ns, name)?);
                }
            }
        }
        for d in deployments.iter_mut() {
            d.autoscaler = self.reads.autoscaler_of(ns, d.name());
        }
        note_autoscaled(model, &mut deployments);
        let (orphans, read) = self.orphans(&owner, &deployments)?;
        if read && grounds == Grounds::Caches {
            grounds = Grounds::Reads;
        }
        Ok(Observation {
            model: seen,
            deployments,
            config_maps,
            orphans,
            now: crate::time::now(),
            grounds,
            reads: Vec::new(),
        })
    }

    /// Owners named on these Deployments, other than `owner`, whose
    /// OpenMedModel is gone: not in the cache and confirmed by a read; and
    /// whether any was read.
    fn orphans(
        &mut self,
        owner: &str,
        deployments: &[DeploymentView],
    ) -> Result<(Vec<String>, bool), Error> {
        let mut out = Vec::new();
        let mut read = false;
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
            if ns.is_empty() || name.is_empty() || self.reads.has_model(&ObjectKey::new(ns, name)) {
                continue;
            }
            read = true;
            if !self.api.model_exists(ns, name)? {
                out.push(other);
            }
        }
        Ok((out, read))
    }
}

/// Read the model afresh into the caches (a conflict, or a lagging watch:
/// 9.17).
pub(super) fn refresh_model(
    client: &Client,
    caches: &Caches,
    key: &ObjectKey,
) -> Result<(), Error> {
    let path = ResourcePath::object(crate::model::RESOURCE, Some(key.namespace()), key.name())?;
    match client.get_as::<ModelObject>(&path) {
        Ok(m) => {
            caches.remember_model(m);
            Ok(())
        }
        Err(e) if e.is_not_found() => {
            caches.forget_model(key);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Before reporting a block the caches suggest (9.14), read the target
/// Deployments: true when what is there differs from what was seen (the
/// caches are put right).
pub(super) fn confirm_targets(
    client: &Client,
    caches: &Caches,
    model: &ModelView,
    seen: &[DeploymentView],
) -> Result<bool, Error> {
    let ns = model.namespace();
    let mut changed = false;
    for name in lookups(model).deployments {
        let path = ResourcePath::object(DEPLOYMENTS, Some(ns), &name)?;
        let was = seen.iter().find(|d| d.name() == name);
        match client.get_as::<DeploymentView>(&path) {
            Ok(d) if d.name().is_empty() => continue,
            Ok(d) => {
                if was.is_none_or(|w| w.resource_version != d.resource_version) {
                    caches.remember_deployment(d, true);
                    changed = true;
                }
            }
            Err(e) if e.is_not_found() => {
                if let Some(w) = was {
                    caches.forget_deployment(&ObjectKey::new(ns, name.clone()), &w.uid);
                    changed = true;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(changed)
}

/// Read one ConfigMap the caches do not hold (they hold only ours).
pub(super) fn read_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<ConfigMapView>, Error> {
    let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
    match client.get_as::<ConfigMapView>(&path) {
        Ok(cm) => Ok(Some(cm).filter(|cm| !cm.name().is_empty())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}
