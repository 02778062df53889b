//! Which OpenMedModels care about a given Deployment or ConfigMap, so a
//! change to either wakes exactly those resources.

use crate::lock::lock;
use crate::reconcile::Lookups;
use crate::runtime::ObjectKey;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LookedUp {
    Deployment,
    ConfigMap,
}

type Target = (LookedUp, ObjectKey);

/// A target is looked up by one model or a few, so its models are a short
/// list: a hash set per target would cost a table for its one key.
#[derive(Default)]
struct Maps {
    by_target: HashMap<Target, Vec<ObjectKey>>,
    by_model: HashMap<ObjectKey, Vec<Target>>,
}

#[derive(Default)]
pub struct TargetIndex {
    maps: Mutex<Maps>,
}

impl TargetIndex {
    /// Record what `model` looks up now (None: the model is gone).
    pub fn update(&self, model: &ObjectKey, lookups: Option<&Lookups>) {
        let mut maps = lock(&self.maps);
        if let Some(old) = maps.by_model.remove(model) {
            for t in old {
                if let Some(set) = maps.by_target.get_mut(&t) {
                    set.retain(|k| k != model);
                    if set.is_empty() {
                        maps.by_target.remove(&t);
                    }
                }
            }
        }
        let Some(l) = lookups else { return };
        let ns = model.namespace();
        let targets: Vec<Target> = l
            .deployments
            .iter()
            .map(|d| (LookedUp::Deployment, ObjectKey::new(ns, d)))
            .chain(
                l.config_maps
                    .iter()
                    .map(|c| (LookedUp::ConfigMap, ObjectKey::new(ns, c))),
            )
            .collect();
        for t in &targets {
            let models = maps.by_target.entry(t.clone()).or_default();
            if !models.contains(model) {
                models.push(model.clone());
            }
        }
        maps.by_model.insert(model.clone(), targets);
    }

    pub fn models_for(&self, namespace: &str, kind: LookedUp, name: &str) -> Vec<ObjectKey> {
        let maps = lock(&self.maps);
        let mut out: Vec<ObjectKey> = maps
            .by_target
            .get(&(kind, ObjectKey::new(namespace, name)))
            .cloned()
            .unwrap_or_default();
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
