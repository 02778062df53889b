//! Which OpenMedModels care about a given Deployment or ConfigMap, so a
//! change to either wakes exactly those resources.

use crate::lock::lock;
use crate::reconcile::Lookups;
use crate::runtime::ObjectKey;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LookedUp {
    Deployment,
    ConfigMap,
}

/// A target is looked up by one model or a few, so its models are a short
/// list: a hash set per target would cost a table for its one key.
///
/// Targets are kept as 64-bit digests of (kind, namespace, name), keyed per
/// process, not as keys: every model looks up two, and their text cost
/// twice the memory (docs/performance.md, memory per resource). Two targets
/// that share a digest by chance only wake a model that did not need it; a
/// change never misses a model that looks its object up.
#[derive(Default)]
struct Maps {
    by_target: HashMap<u64, Vec<ObjectKey>>,
    by_model: HashMap<ObjectKey, Box<[u64]>>,
}

#[derive(Default)]
pub struct TargetIndex {
    maps: Mutex<Maps>,
    digest: std::hash::RandomState,
}

impl TargetIndex {
    fn target(&self, kind: LookedUp, namespace: &str, name: &str) -> u64 {
        self.digest.hash_one((kind, namespace, name))
    }

    /// Record what `model` looks up now (None: the model is gone).
    pub fn update(&self, model: &ObjectKey, lookups: Option<&Lookups>) {
        let ns = model.namespace();
        let targets: Box<[u64]> = lookups
            .map(|l| {
                let deployments = l
                    .deployments
                    .iter()
                    .map(|d| (LookedUp::Deployment, d.as_str()));
                let config_maps = l
                    .config_maps
                    .iter()
                    .map(|c| (LookedUp::ConfigMap, c.as_str()));
                deployments
                    .chain(config_maps)
                    .map(|(kind, name)| self.target(kind, ns, name))
                    .collect()
            })
            .unwrap_or_default();
        let mut maps = lock(&self.maps);
        if let Some(old) = maps.by_model.remove(model) {
            for t in old.iter() {
                if let Some(set) = maps.by_target.get_mut(t) {
                    set.retain(|k| k != model);
                    if set.is_empty() {
                        maps.by_target.remove(t);
                    }
                }
            }
        }
        if lookups.is_none() {
            return;
        }
        for t in targets.iter() {
            let models = maps.by_target.entry(*t).or_default();
            if !models.contains(model) {
                models.push(model.clone());
                models.shrink_to_fit();
            }
        }
        maps.by_model.insert(model.clone(), targets);
    }

    pub fn models_for(&self, namespace: &str, kind: LookedUp, name: &str) -> Vec<ObjectKey> {
        let target = self.target(kind, namespace, name);
        let maps = lock(&self.maps);
        let mut out: Vec<ObjectKey> = maps.by_target.get(&target).cloned().unwrap_or_default();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_targets_per_model() {
        let idx = TargetIndex::default();
        let a = ObjectKey::new("ns", "a");
        let b = ObjectKey::new("ns", "b");
        let l = |d: &str| Lookups {
            deployments: vec![d.to_string()],
            config_maps: vec![format!("{d}-cm")],
        };
        idx.update(&a, Some(&l("svc")));
        idx.update(&b, Some(&l("svc")));
        assert_eq!(
            idx.models_for("ns", LookedUp::Deployment, "svc"),
            vec![a.clone(), b.clone()]
        );
        assert_eq!(
            idx.models_for("other", LookedUp::Deployment, "svc"),
            Vec::<ObjectKey>::new()
        );
        idx.update(&a, Some(&l("other")));
        assert_eq!(
            idx.models_for("ns", LookedUp::Deployment, "svc"),
            vec![b.clone()]
        );
        assert_eq!(
            idx.models_for("ns", LookedUp::ConfigMap, "other-cm"),
            vec![a.clone()]
        );
        idx.update(&b, None);
        assert!(idx.models_for("ns", LookedUp::Deployment, "svc").is_empty());
    }
}
