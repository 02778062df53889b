//! The Deployment and ConfigMap views decoded straight from an object's
//! text ([`crate::kube::fields`]): what `from_json` reads of a `Value`,
//! field for field, without the tree (docs/performance.md, allocations).
//! The tests check that both read the same of the same text.

use super::model::ModelObject;
use super::ModelData;
use super::{manifest_digest, ConfigMapView, ContainerView, DeployCondition, DeploymentView};
use super::{word, Word};
use super::{EnvView, OwnerRef};
use crate::kube::fields::{self, boolean, elements, fill, fill_next, int, skip, string};
use crate::kube::fields::{Decode, Fill, Filled, Scalar};
use crate::kube::shape::Shape;
use crate::model::canonical::parse_digest;
use crate::model::{
    AUTOSCALED_ANNOTATION, CLAIM_LABEL, FAMILY_LABEL, HASH_ANNOTATION, MANAGED_BY_LABEL,
    MANIFEST_KEY, OPT_IN_LABEL, OWNER_ANNOTATION, PRELOAD_ENV, ROLLBACK_ANNOTATION,
};
use serde::de::{Deserializer, MapAccess};
use serde_json::value::RawValue;
use serde_json::Value;

/// A view's top level must be an object, as a list item's or a watch
/// event's is.
fn top<T, E: serde::de::Error>(seen: Filled, t: T) -> Result<T, E> {
    match seen {
        Filled::Object => Ok(t),
        _ => Err(E::custom("not a JSON object")),
    }
}

impl Decode for DeploymentView {
    fn decode<'de, D: Deserializer<'de>>(d: D, _: &'static Shape) -> Result<Self, D::Error> {
        let mut v = DeploymentView::default();
        top(fields::object(d, Deployment(&mut v))?, v)
    }
}

fill!(Deployment, DeploymentView, |v, map| {
    "metadata" => fill_next(map, DeployMeta(v))?,
    "spec" => fill_next(map, DeploySpec(v))?,
    "status" => fill_next(map, DeployStatus(v))?,
});

fill!(DeployMeta, DeploymentView, |v, map| identity {
    "generation" => v.generation = int(map)?.unwrap_or(0),
    "labels" => fill_next(map, DeployLabels(v))?,
    "annotations" => fill_next(map, OwnerOf(&mut v.owner))?,
});

fill!(DeployLabels, DeploymentView, |v, map| {
    k if k == CLAIM_LABEL.0 => v.claimed = Scalar::next(map)?.as_str() == Some(CLAIM_LABEL.1),
    k if k == OPT_IN_LABEL.0 => v.opted_in = Scalar::next(map)?.as_str() == Some(OPT_IN_LABEL.1),
});

fill!(OwnerOf, Option<String>, |owner, map| {
    k if k == OWNER_ANNOTATION => *owner = string(map)?,
});

fill!(DeploySpec, DeploymentView, |v, map| {
    "replicas" => v.replicas = int(map)?,
    "progressDeadlineSeconds" => v.progress_deadline_seconds = int(map)?,
    "minReadySeconds" => v.min_ready_seconds = int(map)?.unwrap_or(0),
    "paused" => v.paused = boolean(map)?.unwrap_or(false),
    "strategy" => fill_next(map, Strategy(v))?,
    "template" => fill_next(map, Template(v))?,
});

fill!(Strategy, DeploymentView, |v, map| {
    "type" => v.strategy_type = Scalar::next(map)?.as_str().map(word),
    "rollingUpdate" => {
        // `max_*` are of the last `rollingUpdate` only, as a `Value` keeps.
        (v.max_unavailable, v.max_surge) = (None, None);
        v.has_rolling_update = fill_next(map, RollingUpdate(v))? != Filled::Null
    },
});

fill!(RollingUpdate, DeploymentView, |v, map| {
    "maxUnavailable" => v.max_unavailable = Some(map.next_value::<Value>()?),
    "maxSurge" => v.max_surge = Some(map.next_value::<Value>()?),
});

fill!(Template, DeploymentView, |v, map| {
    "metadata" => fill_next(map, TemplateMeta(v))?,
    "spec" => fill_next(map, TemplateSpec(v))?,
});

fill!(TemplateMeta, DeploymentView, |v, map| {
    "annotations" => fill_next(map, TemplateAnnotations(v))?,
});

fill!(TemplateAnnotations, DeploymentView, |v, map| {
    k if k == OWNER_ANNOTATION => v.template_owner = string(map)?,
    k if k == HASH_ANNOTATION => {
        let text: Option<String> = string(map)?;
        v.template_hash = text.as_deref().and_then(parse_digest)
    },
});

fill!(TemplateSpec, DeploymentView, |v, map| {
    "containers" => {
        let all: Vec<Container> = elements(map)?;
        v.containers = all
            .into_iter()
            .filter_map(|c| Some(ContainerView { name: c.name?, preload: c.preload }))
            .collect()
    },
});

/// A container as decoded: one without a name is no container of ours.
#[derive(Default)]
struct Container {
    name: Option<String>,
    preload: Option<EnvView>,
}

impl<'de> Fill<'de> for Container {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = string(map)?,
            "env" => {
                let env: Vec<Env<'de>> = elements(map)?;
                self.preload = env.into_iter().find(|e| e.preload).map(Env::view);
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// One variable of a container's env: its value is copied only if it is
/// the preload variable.
#[derive(Default)]
struct Env<'de> {
    preload: bool,
    value: Scalar<'de>,
    value_from: Option<Filled>,
    config_map_ref: Option<(Option<String>, Option<String>)>,
}

impl<'de> Env<'de> {
    fn view(self) -> EnvView {
        EnvView {
            value: self.value.string(),
            config_map_ref: self.config_map_ref.and_then(|(n, k)| Some((n?, k?))),
            has_value_from: matches!(self.value_from, Some(Filled::Object | Filled::Other)),
        }
    }
}

impl<'de> Fill<'de> for Env<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.preload = Scalar::next(map)?.as_str() == Some(PRELOAD_ENV),
            "value" => self.value = Scalar::next(map)?,
            "valueFrom" => {
                self.config_map_ref = None;
                self.value_from = Some(fill_next(map, ValueFrom(&mut self.config_map_ref))?);
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

type KeyRef = Option<(Option<String>, Option<String>)>;

fill!(ValueFrom, KeyRef, |r, map| {
    "configMapKeyRef" => {
        let mut both = (None, None);
        *r = (fill_next(map, KeyRefOf(&mut both))? == Filled::Object).then_some(both)
    },
});

fill!(KeyRefOf, (Option<String>, Option<String>), |r, map| {
    "name" => r.0 = string(map)?,
    "key" => r.1 = string(map)?,
});

fill!(DeployStatus, DeploymentView, |v, map| {
    "observedGeneration" => v.observed_generation = int(map)?.unwrap_or(0),
    "replicas" => v.status_replicas = int(map)?.unwrap_or(0),
    "updatedReplicas" => v.updated_replicas = int(map)?.unwrap_or(0),
    "readyReplicas" => v.ready_replicas = int(map)?.unwrap_or(0),
    "availableReplicas" => v.available_replicas = int(map)?.unwrap_or(0),
    "unavailableReplicas" => v.unavailable_replicas = int(map)?.unwrap_or(0),
    "conditions" => v.conditions = elements(map)?,
});

impl<'de> Fill<'de> for DeployCondition {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "type" => &mut self.type_,
            "status" => &mut self.status,
            "reason" => &mut self.reason,
            _ => return skip(map),
        };
        *slot = word_next(map)?;
        Ok(())
    }
}

/// The next value as a [`Word`] (empty if it is no string).
fn word_next<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Word, A::Error> {
    Ok(word(Scalar::next(map)?.as_str().unwrap_or("")))
}

impl Decode for ModelObject {
    fn decode<'de, D: Deserializer<'de>>(d: D, _: &'static Shape) -> Result<Self, D::Error> {
        let mut m = ModelObject::default();
        top(fields::object(d, Model(&mut m))?, m)
    }
}

/// A model's spec and status are kept as their text (`null` is none).
fn text_of(raw: &RawValue) -> Option<Box<str>> {
    (raw.get() != "null").then(|| raw.get().into())
}

fill!(Model, ModelObject, |m, map| {
    "metadata" => fill_next(map, ModelMeta(&mut m.data))?,
    "spec" => m.spec = text_of(map.next_value()?),
    "status" => m.status = text_of(map.next_value()?),
});

fill!(ModelMeta, ModelData, |m, map| identity {
    "generation" => m.generation = int(map)?.unwrap_or(0),
    "deletionTimestamp" => m.deleting = Scalar::next(map)?.as_str().is_some(),
    "annotations" => fill_next(map, ModelAnnotations(m))?,
    "finalizers" => m.finalizers = fields::strings(map)?,
});

fill!(ModelAnnotations, ModelData, |m, map| {
    ROLLBACK_ANNOTATION => m.rollback_to = string(map)?,
    AUTOSCALED_ANNOTATION => m.autoscaled = Scalar::next(map)?.as_str() == Some("true"),
});

impl Decode for ConfigMapView {
    fn decode<'de, D: Deserializer<'de>>(d: D, _: &'static Shape) -> Result<Self, D::Error> {
        let mut v = ConfigMapView::default();
        top(fields::object(d, ConfigMap(&mut v))?, v)
    }
}

fill!(ConfigMap, ConfigMapView, |v, map| {
    "metadata" => fill_next(map, ConfigMapMeta(v))?,
    "data" => fill_next(map, ConfigMapData(v))?,
});

fill!(ConfigMapMeta, ConfigMapView, |v, map| identity {
    "annotations" => fill_next(map, OwnerOf(&mut v.owner))?,
    "labels" => fill_next(map, ConfigMapLabels(v))?,
    "ownerReferences" => v.owner_refs = elements(map)?,
});

fill!(ConfigMapLabels, ConfigMapView, |v, map| {
    k if k == MANAGED_BY_LABEL.0 => v.managed_by = Scalar::next(map)?.as_str().map(word),
    k if k == FAMILY_LABEL => v.family = string(map)?,
});

fill!(ConfigMapData, ConfigMapView, |v, map| {
    k if k == MANIFEST_KEY => v.manifest = string(map)?.as_deref().and_then(manifest_digest),
    k if k == PRELOAD_ENV => v.preload = string(map)?,
});

impl<'de> Fill<'de> for OwnerRef {
    fn fill<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "apiVersion" => {
                self.api_version = word_next(map)?;
                return Ok(());
            }
            "kind" => {
                self.kind = word_next(map)?;
                return Ok(());
            }
            "name" => &mut self.name,
            "uid" => &mut self.uid,
            "controller" => {
                self.controller = boolean(map)?.unwrap_or(false);
                return Ok(());
            }
            "blockOwnerDeletion" => {
                self.block_owner_deletion = boolean(map)?.unwrap_or(false);
                return Ok(());
            }
            _ => return skip(map),
        };
        *slot = string(map)?.unwrap_or_default();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::fields::tests::{decoded, variants};
    use crate::reconcile::observed::tests::{full_config_map, full_deployment};
    use crate::reconcile::observed::ModelView;
    use serde_json::json;

    #[test]
    fn a_deployment_decoded_from_its_text_reads_as_from_its_value() {
        let all = variants(&full_deployment());
        assert!(all.len() > 1000, "{}", all.len());
        for v in &all {
            let typed = decoded::<DeploymentView>(v).filter(|d| !d.name().is_empty());
            assert_eq!(typed, DeploymentView::from_json(v), "{v}");
        }
        for not_an_object in [json!([]), json!("x"), json!(null)] {
            assert_eq!(decoded::<DeploymentView>(&not_an_object), None);
        }
    }

    #[test]
    fn a_config_map_decoded_from_its_text_reads_as_from_its_value() {
        let all = variants(&full_config_map());
        assert!(all.len() > 200, "{}", all.len());
        for v in &all {
            let typed = decoded::<ConfigMapView>(v).filter(|c| !c.name().is_empty());
            assert_eq!(typed, ConfigMapView::from_json(v), "{v}");
        }
    }

    #[test]
    fn a_model_decoded_from_its_text_reads_as_from_its_pruned_value() {
        use crate::kube::shape::{decode, Pruned};
        use crate::reconcile::observed::model::tests::converged;
        use crate::reconcile::observed::shapes::MODEL;
        let mut m = converged();
        m["metadata"]["annotations"] = json!({"openmed.ai/rollback-to": " OpenMed/v1 ",
            "openmed.ai/autoscaled": "true", "other": "x"});
        m["metadata"]["finalizers"] = json!(["openmed.ai/finalizer", 3, "b"]);
        m["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        m["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        let all = variants(&m);
        assert!(all.len() > 1000, "{}", all.len());
        for v in &all {
            let text = v.to_string();
            let pruned = decode(text.as_bytes(), Pruned::object(&MODEL)).ok();
            let typed = decoded::<ModelObject>(v).and_then(ModelObject::view);
            assert_eq!(
                typed,
                pruned.as_ref().and_then(ModelView::from_decoded),
                "{v}"
            );
        }
    }

    #[test]
    fn escaped_strings_and_skipped_fields_decode() {
        let mut d = full_deployment();
        d["metadata"]["name"] = json!("s\u{e9}\"vc\n");
        d["spec"]["template"]["spec"]["containers"][1]["env"][1]["valueFrom"] =
            json!({"configMapKeyRef": {"name": "m\\u", "key": "K"}});
        d["spec"]["template"]["metadata"]["annotations"]["big"] =
            json!({"deep": [[1], {"a": null}]});
        let typed: DeploymentView = decoded(&d).unwrap();
        assert_eq!(typed.name(), "s\u{e9}\"vc\n");
        let preload = typed.containers[1].preload.as_ref().unwrap();
        assert_eq!(preload.config_map_ref, Some(("m\\u".into(), "K".into())));
        assert_eq!(Some(typed), DeploymentView::from_json(&d));
    }
}
