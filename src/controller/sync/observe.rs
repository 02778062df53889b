//! One observation of one OpenMedModel, gathered in one step before the
//! core is asked for a plan: the model from its cache, the Deployments and
//! ConfigMaps its lookups name and every other one it still claims, each
//! Deployment's autoscaler, and the owners named on them that are gone.
//! The caches answer; the API is read only for what they do not hold (an
//! unclaimed target, a foreign ConfigMap, an orphan's owner).

use super::settled::CacheRead;
use super::{Grounds, Reconciler};
use crate::controller::cache::MetaView;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS};
use crate::kube::{Error, ResourcePath};
use crate::lock::lock;
use crate::reconcile::{
    lookups, note_autoscaled, ConfigMapView, DeploymentView, ModelData, ModelView, Observed,
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

/// Everything one plan is made from (docs/contract.md §6).
pub(super) struct Observation {
    pub model: ModelView,
    pub deployments: Vec<DeploymentView>,
    pub config_maps: Vec<ConfigMapView>,
    pub orphans: Vec<String>,
    /// The time the plan stamps on what it writes.
    pub now: String,
    /// Whether it rests on the caches alone.
    pub grounds: Grounds,
    /// What it read from the caches, to tell later whether it still holds.
    pub reads: Vec<CacheRead>,
}

/// What observing a key found.
pub(super) enum Observing {
    /// The model is not in its cache: nothing to do.
    Gone,
    /// Its view was older than one already acted on, and has been read
    /// afresh (9.17): observe again.
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

impl Reconciler {
    /// The observation a plan for `key` is made from, in one step.
    /// `extra_cms`: ConfigMaps an earlier attempt found that the caches do
    /// not hold.
    pub(super) fn observe(
        &self,
        key: &ObjectKey,
        extra_cms: &[ConfigMapView],
    ) -> Result<Observing, Error> {
        let Some((model, stamp)) = self.models.get_stamped(key) else {
            return Ok(Observing::Gone);
        };
        if self.is_behind(&model) {
            // An older view than one already acted on (a lagging watch):
            // read the model afresh rather than apply an older spec (9.17).
            self.refresh_model(key)?;
            return Ok(Observing::Behind);
        }
        let mut reads = vec![CacheRead::Model(key.clone(), Some(stamp))];
        let o = self.gather(model, extra_cms, &mut reads)?;
        Ok(Observing::Found(Box::new(Observation { reads, ..o })))
    }

    /// Read the model afresh into the cache (a conflict, or a lagging
    /// watch: 9.17).
    pub(super) fn refresh_model(&self, key: &ObjectKey) -> Result<(), Error> {
        let path = ResourcePath::object(crate::model::RESOURCE, Some(key.namespace()), key.name())?;
        match self.client.get_as::<ModelData>(&path) {
            Ok(m) => {
                if let Some(m) = m.view() {
                    self.models.put_if_newer(m.key(), m);
                }
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.models.remove(key);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A Deployment by name: from the claimed cache, else (if the metadata
    /// watch says it exists) from the API, cached by resourceVersion.
    fn deployment(
        &self,
        ns: &str,
        name: &str,
        reads: &mut Vec<CacheRead>,
    ) -> Result<Option<DeploymentView>, Error> {
        let k = ObjectKey::new(ns, name);
        let claimed = self.deployments.get_stamped(&k);
        reads.push(CacheRead::Deployment(
            k.clone(),
            claimed.as_ref().map(|c| c.1),
        ));
        if let Some((d, _)) = claimed {
            // Claimed now: its read-on-demand copy is not needed again.
            self.fetched.remove(&k);
            return Ok(Some(d));
        }
        let meta = self.deployment_meta.get_stamped(&k);
        reads.push(CacheRead::DeploymentMeta(
            k.clone(),
            meta.as_ref().map(|m| m.1),
        ));
        let Some((meta, _)) = meta else {
            return Ok(None);
        };
        if let Some(d) = self.fetched.get(&k, &meta.resource_version) {
            return Ok(Some(d));
        }
        let path = ResourcePath::object(DEPLOYMENTS, Some(ns), name)?;
        match self.client.get_as::<DeploymentView>(&path) {
            Ok(d) if d.name.is_empty() => Ok(None),
            Ok(d) => {
                self.fetched.insert(k, d.clone());
                Ok(Some(d))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What one pass looks at: the Deployments and ConfigMaps its lookups
    /// name, every other one this owner still claims (to release them), and
    /// the owners named on them that are gone (orphans, to adopt).
    fn gather(
        &self,
        seen: ModelView,
        extra_cms: &[ConfigMapView],
        reads: &mut Vec<CacheRead>,
    ) -> Result<Observation, Error> {
        let model = &seen;
        let ns = model.namespace.as_str();
        let owner = model.qualified_name();
        // Read first: it parses the status, which the lookups then read
        // rather than parse a part of it again.
        let conflict = reports_config_map_conflict(model);
        let l = lookups(model);
        let mut deployments = Vec::new();
        for name in &l.deployments {
            if let Some(d) = self.deployment(ns, name, reads)? {
                deployments.push(d);
            }
        }
        let (claimed, stamp) = self.deployments.by_index_stamped(&owner, |d| {
            d.namespace == ns && !deployments.iter().any(|x| x.name == d.name)
        });
        reads.push(CacheRead::DeploymentsOfOwner(stamp));
        deployments.extend(claimed);
        let mut config_maps: Vec<ConfigMapView> = Vec::new();
        for n in &l.config_maps {
            let k = ObjectKey::new(ns, n);
            let cm = self.config_maps.get_stamped(&k);
            reads.push(CacheRead::ConfigMap(k, cm.as_ref().map(|c| c.1)));
            config_maps.extend(cm.map(|c| c.0));
        }
        for cm in extra_cms {
            if !config_maps.iter().any(|c| c.name == cm.name) {
                config_maps.push(cm.clone());
            }
        }
        let (extra, stamp) = self.config_maps.by_index_stamped(&owner, |c| {
            c.namespace == ns && !config_maps.iter().any(|x| x.name == c.name)
        });
        reads.push(CacheRead::ConfigMapsOfOwner(stamp));
        config_maps.extend(extra);
        let mut grounds = if extra_cms.is_empty() {
            Grounds::Caches
        } else {
            Grounds::Reads
        };
        if conflict {
            grounds = Grounds::ForeignConfigMap;
            for name in &l.config_maps {
                if !config_maps.iter().any(|c| &c.name == name) {
                    config_maps.extend(self.read_config_map(ns, name)?);
                }
            }
        }
        reads.push(CacheRead::Autoscalers(self.autoscalers.changes()));
        for d in deployments.iter_mut() {
            d.autoscaler = self.autoscaler_of(ns, &d.name);
        }
        note_autoscaled(model, &mut deployments);
        let (orphans, read) = self.orphans(&owner, &deployments, reads)?;
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
    /// OpenMedModel is gone: not in the cache and confirmed by a read; and
    /// whether any was read.
    fn orphans(
        &self,
        owner: &str,
        deployments: &[DeploymentView],
        reads: &mut Vec<CacheRead>,
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
            if ns.is_empty() || name.is_empty() {
                continue;
            }
            let key = ObjectKey::new(ns, name);
            let stamp = self.models.stamp(&key);
            reads.push(CacheRead::Model(key, stamp));
            if stamp.is_some() {
                continue;
            }
            let path = ResourcePath::object(crate::model::RESOURCE, Some(ns), name)?;
            read = true;
            match self.client.get(&path) {
                Err(e) if e.is_not_found() => out.push(other),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        Ok((out, read))
    }

    /// Before reporting a block the caches suggest (9.14), read the target
    /// Deployments: true when what is there differs from what was seen
    /// (the caches are put right).
    pub(super) fn confirm_targets(
        &self,
        model: &ModelView,
        seen: &[DeploymentView],
    ) -> Result<bool, Error> {
        let ns = model.namespace.as_str();
        let mut changed = false;
        for name in lookups(model).deployments {
            let path = ResourcePath::object(DEPLOYMENTS, Some(ns), &name)?;
            let was = seen.iter().find(|d| d.name == name);
            let key = ObjectKey::new(ns, name.clone());
            match self.client.get_as::<DeploymentView>(&path) {
                Ok(d) if d.name.is_empty() => continue,
                Ok(d) => {
                    if was.is_none_or(|w| w.resource_version != d.resource_version) {
                        let meta = MetaView {
                            resource_version: d.resource_version.clone(),
                            claimed: d.claimed,
                        };
                        self.deployment_meta.put_if_newer(key, meta);
                        self.remember_deployment(d);
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

    /// Read one ConfigMap the caches do not hold (they hold only ours).
    pub(super) fn read_config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ConfigMapView>, Error> {
        let path = ResourcePath::object(CONFIG_MAPS, Some(ns), name)?;
        match self.client.get_as::<ConfigMapView>(&path) {
            Ok(cm) => Ok(Some(cm).filter(|cm| !cm.name.is_empty())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
