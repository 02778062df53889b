//! What the caches hold of each kind: the views' keys and ages for the
//! generic stores of [`crate::runtime`], the autoscaler and metadata views,
//! and the Deployments read on demand.

use crate::kube::fields::{self, fill, Decode, Filled};
use crate::kube::shape::Shape;
use crate::lock::lock;
use crate::reconcile::observed::{ModelData, ModelObject};
use crate::reconcile::{ConfigMapView, DeploymentView, ModelView};
use crate::runtime::{Item, ObjectKey, Versioned};
use serde::de::{Deserializer, Error as _};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the operator reads of each kind, by API group and plural, for
/// the API client ([`crate::kube::shape`]): the views' shapes, and of an
/// Event what posting one reads back.
pub fn shapes() -> crate::kube::shape::Shapes {
    use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS, EVENTS, HORIZONTAL_POD_AUTOSCALERS};
    use crate::reconcile::observed::shapes::{AUTOSCALER, CONFIG_MAP, DEPLOYMENT, MODEL};
    let rt = |r: crate::kube::ResourceType, s| (r.group, r.plural, s);
    crate::kube::shape::Shapes(vec![
        rt(crate::model::RESOURCE, &MODEL),
        rt(DEPLOYMENTS, &DEPLOYMENT),
        rt(CONFIG_MAPS, &CONFIG_MAP),
        rt(HORIZONTAL_POD_AUTOSCALERS, &AUTOSCALER),
        rt(EVENTS, &super::events::EVENT),
    ])
}

impl Versioned for ModelView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn order(&self) -> Option<(&str, i64, i64)> {
        Some((&self.uid, self.generation, 0))
    }
}
impl Versioned for DeploymentView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn order(&self) -> Option<(&str, i64, i64)> {
        Some((&self.uid, self.generation, self.observed_generation))
    }
}
impl Versioned for ConfigMapView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
}

/// The views decoded straight from a watch or a list
/// ([`crate::kube::fields`]) are their own items; one without a name is
/// none (as `from_json` gives none).
macro_rules! item {
    ($($view:ty),*) => {$(
        impl Item for $view {
            fn key(&self) -> Option<ObjectKey> {
                (!self.name().is_empty()).then(|| <$view>::key(self))
            }
            fn version(&self) -> Option<&str> {
                Some(&self.resource_version)
            }
            fn uid(&self) -> &str {
                &self.uid
            }
        }
    )*};
}
item!(DeploymentView, ConfigMapView, ModelData);

/// A model as decoded is the item of its metadata.
impl Item for ModelObject {
    fn key(&self) -> Option<ObjectKey> {
        Item::key(&**self)
    }
    fn version(&self) -> Option<&str> {
        Item::version(&**self)
    }
    fn uid(&self) -> &str {
        Item::uid(&**self)
    }
}

/// What the operator keeps of a HorizontalPodAutoscaler: the Deployment it
/// scales, if it scales one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerView {
    pub name: String,
    pub resource_version: String,
    /// `spec.scaleTargetRef.name` when its kind is Deployment (apps group).
    pub deployment: Option<String>,
}

impl AutoscalerView {
    pub fn from_json(v: &serde_json::Value) -> Option<AutoscalerView> {
        let target = &v["spec"]["scaleTargetRef"];
        let apps = target["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("apps/"));
        Some(AutoscalerView {
            name: v["metadata"]["name"].as_str()?.to_string(),
            resource_version: v["metadata"]["resourceVersion"].as_str()?.to_string(),
            deployment: (apps && target["kind"] == "Deployment")
                .then(|| target["name"].as_str().map(str::to_string))
                .flatten(),
        })
    }
}

impl Versioned for AutoscalerView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// What the cheap metadata-only watch keeps of every Deployment not
/// claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaView {
    pub resource_version: String,
}

impl Versioned for MetaView {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// A Deployment as the metadata-only watch delivers it, decoded straight
/// from its text ([`crate::kube::fields`]): where it lives, and what its
/// [`MetaView`] keeps (none without a resourceVersion).
#[derive(Debug, Default)]
pub struct DeploymentMeta {
    namespace: String,
    name: String,
    uid: String,
    resource_version: Option<String>,
}

impl DeploymentMeta {
    pub fn view(self) -> Option<MetaView> {
        Some(MetaView {
            resource_version: self.resource_version?,
        })
    }
}

impl Item for DeploymentMeta {
    fn key(&self) -> Option<ObjectKey> {
        (!self.name.is_empty()).then(|| ObjectKey::new(&self.namespace, &self.name))
    }
    fn version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn uid(&self) -> &str {
        &self.uid
    }
}

impl Decode for DeploymentMeta {
    fn decode<'de, D: Deserializer<'de>>(d: D, _: &'static Shape) -> Result<Self, D::Error> {
        let mut m = DeploymentMeta::default();
        match fields::object(d, Top(&mut m))? {
            Filled::Object => Ok(m),
            _ => Err(D::Error::custom("not a JSON object")),
        }
    }
}

fill!(Top, DeploymentMeta, |m, map| {
    "metadata" => fields::fill_next(map, Meta(m))?,
});

fill!(Meta, DeploymentMeta, |m, map| {
    "namespace" => m.namespace = fields::string(map)?.unwrap_or_default(),
    "name" => m.name = fields::string(map)?.unwrap_or_default(),
    "uid" => m.uid = fields::string(map)?.unwrap_or_default(),
    "resourceVersion" => m.resource_version = fields::string(map)?,
});

/// Unclaimed Deployments read on demand (not watched in full), each reused
/// while the metadata watch shows the same resourceVersion. Most are
/// claimed soon after and dropped; the table shrinks with them, so the
/// burst of a cold start does not stay resident as empty slots.
#[derive(Default)]
pub struct Fetched(Mutex<HashMap<ObjectKey, Box<DeploymentView>>>);

impl Fetched {
    /// The copy read at `resource_version`, if that is the one held.
    pub fn get(&self, k: &ObjectKey, resource_version: &str) -> Option<DeploymentView> {
        lock(&self.0)
            .get(k)
            .filter(|d| d.resource_version == resource_version)
            .map(|d| DeploymentView::clone(d))
    }

    pub fn insert(&self, k: ObjectKey, d: DeploymentView) {
        lock(&self.0).insert(k, Box::new(d));
    }

    pub fn remove(&self, k: &ObjectKey) {
        let mut map = lock(&self.0);
        if map.remove(k).is_some() && map.capacity() > 4 * map.len().max(8) {
            map.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::fields::tests::{decoded, variants};
    use crate::runtime::{Stale, Store};

    /// What the metadata watch keeps of a Deployment, read from its
    /// `Value`: its key and its resourceVersion.
    #[test]
    fn deployment_metadata_decoded_from_its_text_reads_as_from_its_value() {
        let d = serde_json::json!({"kind": "PartialObjectMetadata", "metadata": {"name": "d",
            "namespace": "a", "uid": "u", "resourceVersion": "5", "generation": 2,
            "labels": {"openmed.ai/managed": "true", "app": "x"}, "managedFields": [{}]}});
        for v in variants(&d) {
            let from_value = ObjectKey::of(&v).filter(|k| !k.name().is_empty()).map(|k| {
                let m = &v["metadata"];
                let rv = m["resourceVersion"].as_str().map(str::to_string);
                (
                    k,
                    rv.map(|r| MetaView {
                        resource_version: r,
                    }),
                )
            });
            let typed = decoded::<DeploymentMeta>(&v).and_then(|m| Some((m.key()?, m.view())));
            assert_eq!(typed, from_value, "{v}");
        }
    }

    fn model(uid: &str, generation: i64, rv: &str) -> ModelView {
        ModelView::from_json(&serde_json::json!({"metadata": {
            "name": "m", "namespace": "a", "uid": uid, "generation": generation, "resourceVersion": rv}}))
        .unwrap()
    }

    fn deployment(generation: i64, observed: i64, rv: &str) -> DeploymentView {
        DeploymentView::from_json(&serde_json::json!({
            "metadata": {"name": "d", "namespace": "a", "uid": "d1",
                         "generation": generation, "resourceVersion": rv},
            "spec": {"template": {"spec": {"containers": []}}},
            "status": {"observedGeneration": observed}}))
        .unwrap()
    }

    /// docs/contract.md §9.17, as the views order themselves: a model by
    /// generation, a Deployment by generation then observedGeneration.
    #[test]
    fn an_autoscaler_decoded_to_its_shape_keeps_its_key_and_target() {
        use crate::kube::shape::{decode, Pruned};
        let hpa = serde_json::json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"},
                "minReplicas": 1, "maxReplicas": 5, "metrics": [{"type": "Resource"}]},
            "status": {"currentReplicas": 2}});
        let shapes = shapes();
        let shape = shapes.of("autoscaling", "horizontalpodautoscalers");
        let small = decode(hpa.to_string().as_bytes(), Pruned::object(shape)).unwrap();
        assert_eq!(
            AutoscalerView::from_json(&small),
            AutoscalerView::from_json(&hpa)
        );
        assert_eq!(ObjectKey::of(&small), ObjectKey::of(&hpa));
        assert_eq!(small["metadata"]["uid"], "u");
        assert!(small.get("status").is_none() && small["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn views_order_by_generation_so_the_stores_never_go_backwards() {
        let models: Store<ModelView> = Store::default();
        let m = models.writer();
        m.put(model("u1", 4, "40").key(), model("u1", 4, "40"))
            .unwrap();
        assert_eq!(
            m.put(ObjectKey::new("a", "m"), model("u1", 3, "50")),
            Err(Stale)
        );
        assert!(m
            .put(ObjectKey::new("a", "m"), model("u2", 1, "60"))
            .is_ok());
        let deployments: Store<DeploymentView> = Store::default();
        let key = deployment(2, 2, "10").key();
        assert!(deployments.put_if_newer(key.clone(), deployment(2, 2, "10")));
        assert!(!deployments.put_if_newer(key.clone(), deployment(2, 1, "11")));
        assert!(deployments.put_if_newer(key.clone(), deployment(3, 2, "12")));
        assert_eq!(deployments.get(&key).unwrap().generation, 3);
    }
}
