//! The view of an OpenMedModel the caches hold: its metadata, and its spec
//! and status kept as packed text, parsed when a pass reads them. Copies are
//! cheap (the cache hands out one per read): they share what was decoded.

use super::{annotation, meta_str};
use crate::foreign::bounded;
use crate::kube::key::ObjectKey;
use crate::memory::pack::{pack, unpack, Dictionary};
use crate::model::status::{ModelStatus, OwedEvent, Phase, MAX_ROLLBACK_TARGET};
use crate::model::{DesiredSpec, SpecError, AUTOSCALED_ANNOTATION, ROLLBACK_ANNOTATION};
use serde_json::Value;

/// An OpenMedModel as the caches hold it. A copy shares what was decoded
/// ([`ModelData`], read through `Deref`): the cache hands out a copy at
/// every read, and a pass makes several.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelView {
    data: std::sync::Arc<ModelData>,
    parsed: Parsed<std::sync::Arc<ParsedParts>>,
    /// The spec validated for this copy, when [`ParsedParts`] hold it for
    /// another name (the defaults depend on the name). Boxed: every cached
    /// view carries the empty slot.
    desired: Parsed<Box<Result<DesiredSpec, SpecError>>>,
}

/// What a [`ModelView`] holds.
#[derive(Debug, Default, PartialEq)]
pub struct ModelData {
    /// Namespace and name, the one allocation the caches key it by.
    pub(super) key: ObjectKey,
    pub uid: String,
    pub generation: i64,
    pub resource_version: String,
    /// `openmed.ai/rollback-to`, trimmed and cut to 256 characters (9.15);
    /// None when absent or blank.
    pub rollback_to: Option<String>,
    /// `openmed.ai/autoscaled: "true"`: the target's replicas belong to an
    /// autoscaler (one the operator may not see, such as KEDA's).
    pub autoscaled: bool,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `status.phase`, read once: the metrics count phases at every scrape.
    pub phase: Option<Phase>,
    pub(super) spec: Option<RawJson>,
    pub(super) status: Option<RawJson>,
}

super::keyed_view!(ModelData);

/// An OpenMedModel as a list, a watch event or an answer carries it
/// ([`super::decode`]): its metadata decoded, its spec and status as their
/// text, packed only when it becomes a view. A watch's echo of the
/// operator's own write never does (the cache holds that version already),
/// and a pack is the dearest step of a decode (docs/performance.md).
#[derive(Debug, Default)]
pub struct ModelObject {
    pub(super) data: ModelData,
    pub(super) spec: Option<Box<str>>,
    pub(super) status: Option<Box<str>>,
}

impl std::ops::Deref for ModelObject {
    type Target = ModelData;
    fn deref(&self) -> &ModelData {
        &self.data
    }
}

impl ModelObject {
    /// Its view, the texts packed and the phase read: as
    /// [`ModelData::view`].
    pub fn view(self) -> Option<ModelView> {
        let mut data = self.data;
        data.phase = self.status.as_deref().and_then(phase_of_text);
        data.spec = self.spec.as_deref().and_then(RawJson::from_text);
        data.status = self.status.as_deref().and_then(RawJson::from_text);
        data.view()
    }
}

impl ModelData {
    /// The view of a model decoded straight from its text
    /// ([`super::decode`]); none without a name and a namespace, as
    /// [`ModelView::from_decoded`] gives none.
    pub fn view(mut self) -> Option<ModelView> {
        if self.name().is_empty() || self.namespace().is_empty() {
            return None;
        }
        if let Some(a) = self.rollback_to.take() {
            self.rollback_to =
                Some(bounded(a.trim(), MAX_ROLLBACK_TARGET)).filter(|a| !a.is_empty());
        }
        Some(self.into())
    }
}

impl std::ops::Deref for ModelView {
    type Target = ModelData;
    fn deref(&self) -> &ModelData {
        &self.data
    }
}

impl From<ModelData> for ModelView {
    fn from(data: ModelData) -> ModelView {
        ModelView {
            data: std::sync::Arc::new(data),
            parsed: Parsed::default(),
            desired: Parsed::default(),
        }
    }
}

/// A model's spec and status, each parsed when first read.
#[derive(Debug, Default)]
pub struct ParsedParts {
    /// Shared with the parts of every recent text of the same spec: a
    /// status write leaves the spec as it was, and a pass should not
    /// validate it again.
    spec: std::sync::Arc<SpecParts>,
    status: std::sync::OnceLock<std::sync::Arc<ModelStatus>>,
    /// The valid specs the status retains, for the name of the first view
    /// that asked.
    retained: std::sync::OnceLock<(String, Vec<DesiredSpec>)>,
}

/// A spec's text, parsed and validated when first read.
#[derive(Debug, Default)]
pub struct SpecParts {
    value: std::sync::OnceLock<Option<Value>>,
    /// The spec validated for the name of the first view that asked.
    desired: std::sync::OnceLock<(String, Result<DesiredSpec, SpecError>)>,
}

/// A value worked out from a view on first use and kept with it: a pass
/// reads a model's spec and status several times and should parse each
/// once. A copy starts without it (the cache hands out copies, so what it
/// holds stays packed), and it takes no part in comparisons.
pub struct Parsed<T>(std::sync::OnceLock<T>);

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed(std::sync::OnceLock::new())
    }
}

impl<T> Parsed<T> {
    fn get(&self, f: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(f)
    }
}

impl<T> Clone for Parsed<T> {
    fn clone(&self) -> Self {
        Parsed(std::sync::OnceLock::new())
    }
}

impl<T> PartialEq for Parsed<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> std::fmt::Debug for Parsed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parsed")
    }
}

/// A JSON value kept as its text, packed ([`crate::memory::pack`]). Every
/// model is held in the cache all the time but its spec and status are
/// read only when a pass runs: packed text is a small fraction of a parsed
/// value, at the cost of unpacking and parsing it then (docs/performance.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Box<[u8]>);

/// What the text of a model's spec and status usually holds, in the order
/// serde_json writes it (keys sorted): the packer's preset dictionary, so
/// even the first occurrence of a key in a model costs a few bytes.
const MODEL_TEXT: &str = concat!(
    r#"{"family":"PII","manifestConfigMapName":"-model-manifest","replicas":1,"#,
    r#""rolloutStrategy":{"maxSurge":1,"maxUnavailable":0,"progressDeadlineSeconds":600,"#,
    r#""rollbackOnFailure":true,"type":"RollingUpdate"},"targetRef":{"containerName":"#,
    r#""openmed-service","name":""},"tier":"Small","version":"OpenMed/OpenMed-"}"#,
    r#"{"activeVersion":"OpenMed/OpenMed-","appliedSpecHash":"sha256:","#,
    r#""conditions":[{"lastTransitionTime":"2026-01-01T00:00:00Z","message":"#,
    r#"" is serving","observedGeneration":1,"reason":"RolloutSucceeded","status":"True","#,
    r#""type":"Ready"},{"lastTransitionTime":"","message":"rollout of  complete","#,
    r#""observedGeneration":1,"reason":"RolloutComplete","status":"False","#,
    r#""type":"Progressing"},{"lastTransitionTime":"","message":"no failure","#,
    r#""observedGeneration":1,"reason":"Healthy","status":"False","type":"Degraded"},"#,
    r#"{"lastTransitionTime":"","message":"no rollback requested","observedGeneration":1,"#,
    r#""reason":"NotRequested","status":"False","type":"RolledBack"}],"#,
    r#""desiredSpecHash":"sha256:","desiredVersion":"OpenMed/OpenMed-","#,
    r#""lastEvents":[{"generation":1,"message":"Deployment  is serving ","#,
    r#""reason":"RolloutSucceeded"}],"lastSuccessfulSpec":{"family":"PII","#,
    r#""manifestConfigMapName":"-model-manifest","previousSuccessfulSpec":{"#,
    r#""manifestHash":"sha256:","observedGeneration":1,"phase":"Ready","rollbackCount":0,"#,
    r#""targetDeploymentGeneration":2,"targetDeploymentUID":"}"#,
);

/// [`MODEL_TEXT`], hashed once.
fn model_dictionary() -> &'static Dictionary {
    static DICT: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
    DICT.get_or_init(|| Dictionary::new(MODEL_TEXT))
}

impl RawJson {
    fn of(v: Option<&Value>) -> Option<RawJson> {
        v.filter(|v| !v.is_null())
            .map(|v| RawJson(pack(&v.to_string(), model_dictionary())))
    }

    /// Of a field the client kept as its JSON text ([`shapes::MODEL`]); a
    /// field given as a value is taken as [`RawJson::of`] takes it.
    fn of_text(v: Option<&Value>) -> Option<RawJson> {
        match v {
            Some(Value::String(text)) => RawJson::from_text(text),
            other => RawJson::of(other),
        }
    }

    /// A value's JSON text, packed; `null` is none.
    pub(super) fn from_text(text: &str) -> Option<RawJson> {
        (text != "null").then(|| RawJson(pack(text, model_dictionary())))
    }

    /// The value again (it was packed and serialized by us, so it parses).
    fn value(&self) -> Option<Value> {
        serde_json::from_str(&self.text()?).ok()
    }

    /// The JSON text again.
    fn text(&self) -> Option<String> {
        unpack(&self.0, model_dictionary())
    }
}

/// How many parsed models [`recent_parts`] keeps: a few passes' worth.
const RECENT_PARTS: usize = 32;

/// Where the spec and status of the packed texts given are parsed: one of
/// the last [`RECENT_PARTS`] used, or a new one. One pass reads a model
/// through several copies (observation, plan, Events), and consecutive
/// passes mostly see the same text: each copy would unpack and parse it
/// again (docs/performance.md). The texts themselves are the key, so a
/// hit is exact.
fn recent_parts(spec: Option<&RawJson>, status: Option<&RawJson>) -> std::sync::Arc<ParsedParts> {
    type RecentParse = (
        Option<RawJson>,
        Option<RawJson>,
        std::sync::Arc<ParsedParts>,
    );
    static RECENT: std::sync::Mutex<std::collections::VecDeque<RecentParse>> =
        std::sync::Mutex::new(std::collections::VecDeque::new());
    let same = |e: &&RecentParse| e.0.as_ref() == spec && e.1.as_ref() == status;
    let mut recent = crate::lock::lock(&RECENT);
    if let Some(hit) = recent.iter().find(same) {
        return hit.2.clone();
    }
    let spec_parts = recent.iter().rev().find(|e| e.0.as_ref() == spec);
    let parts = std::sync::Arc::new(ParsedParts {
        spec: spec_parts.map(|e| e.2.spec.clone()).unwrap_or_default(),
        ..ParsedParts::default()
    });
    if recent.len() >= RECENT_PARTS {
        recent.pop_front();
    }
    recent.push_back((spec.cloned(), status.cloned(), parts.clone()));
    parts
}

/// `status.phase` of a status kept as text, read without a tree.
fn phase_of_text(status: &str) -> Option<Phase> {
    #[derive(serde::Deserialize)]
    struct PhaseOnly<'a> {
        #[serde(borrow, default)]
        phase: Option<std::borrow::Cow<'a, str>>,
    }
    let p: PhaseOnly = serde_json::from_str(status).ok()?;
    Phase::parse(p.phase.as_deref()?)
}

impl ModelView {
    /// A model as the API client decodes it ([`shapes::MODEL`]): spec and
    /// status as their JSON text.
    pub fn from_decoded(v: &Value) -> Option<ModelView> {
        let mut m = ModelData::from_meta(v)?;
        if let Some(Value::String(status)) = v.get("status") {
            m.phase = phase_of_text(status);
        } else {
            m.phase = v["status"]["phase"].as_str().and_then(Phase::parse);
        }
        m.spec = RawJson::of_text(v.get("spec"));
        m.status = RawJson::of_text(v.get("status"));
        Some(m.into())
    }

    /// A model given whole.
    pub fn from_json(v: &Value) -> Option<ModelView> {
        let mut m = ModelData::from_meta(v)?;
        m.phase = v["status"]["phase"].as_str().and_then(Phase::parse);
        m.spec = RawJson::of(v.get("spec"));
        m.status = RawJson::of(v.get("status"));
        Some(m.into())
    }

    /// `spec`, parsed (once per copy).
    pub fn spec(&self) -> Option<&Value> {
        let spec = self.spec.as_ref();
        self.parts()
            .spec
            .value
            .get_or_init(|| spec.and_then(RawJson::value))
            .as_ref()
    }

    /// The desired spec, validated with every default filled in: the
    /// lookups, the plan and the autoscaler note all ask, through several
    /// copies. Once for the copies of one text and name ([`ParsedParts`]).
    pub fn desired(&self) -> Result<&DesiredSpec, &SpecError> {
        let validate = || crate::model::validate(self.name(), self.spec());
        let (name, shared) = self
            .parts()
            .spec
            .desired
            .get_or_init(|| (self.name().to_string(), validate()));
        if *name == self.name() {
            return shared.as_ref();
        }
        self.desired.get(|| Box::new(validate())).as_ref().as_ref()
    }

    /// `status`, parsed (once per copy).
    pub fn status(&self) -> &ModelStatus {
        self.shared_status()
    }

    /// `status`, parsed, to share with a plan (which never edits it).
    pub fn shared_status(&self) -> &std::sync::Arc<ModelStatus> {
        let status = self.status.as_ref();
        self.parts().status.get_or_init(|| {
            let text = status.and_then(RawJson::text).unwrap_or_default();
            std::sync::Arc::new(ModelStatus::from_text(&text))
        })
    }

    /// Where spec and status are parsed, once per copy, and shared with
    /// the other copies of the same text made lately ([`recent_parts`]).
    fn parts(&self) -> &std::sync::Arc<ParsedParts> {
        self.parsed
            .get(|| recent_parts(self.spec.as_ref(), self.status.as_ref()))
    }

    /// The valid specs status retains (`rollbackSpec`, `lastSuccessfulSpec`,
    /// `previousSuccessfulSpec`), as [`ModelStatus::retained_specs`] reads
    /// them. Unless a pass has parsed the status already, only these three
    /// fields are: the index asks at every event of a model, and a whole
    /// status is most of a model's text (docs/performance.md).
    pub fn retained_specs(&self) -> Vec<DesiredSpec> {
        let (name, shared) = self
            .parts()
            .retained
            .get_or_init(|| (self.name().to_string(), self.read_retained_specs()));
        if *name == self.name() {
            return shared.clone();
        }
        self.read_retained_specs()
    }

    /// [`ModelView::retained_specs`], read and validated.
    fn read_retained_specs(&self) -> Vec<DesiredSpec> {
        if let Some(st) = self.parts().status.get() {
            return st.retained_specs(self.name());
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Retained {
            rollback_spec: Option<Value>,
            last_successful_spec: Option<Value>,
            previous_successful_spec: Option<Value>,
        }
        let Some(r) = self.status_fields::<Retained>() else {
            return Vec::new();
        };
        [
            r.rollback_spec,
            r.last_successful_spec,
            r.previous_successful_spec,
        ]
        .iter()
        .flatten()
        .filter_map(|v| DesiredSpec::from_snapshot(self.name(), v))
        .collect()
    }

    /// The Events the last transition requires, as
    /// `ModelStatus::last_events` holds them. Unless a pass has parsed the
    /// status, only `lastEvents` is: the writer asks after each status write,
    /// before any pass has parsed the status it wrote.
    pub fn last_events(&self) -> Vec<OwedEvent> {
        if let Some(st) = self.parts().status.get() {
            return st.last_events.clone().unwrap_or_default();
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Owed {
            #[serde(default, deserialize_with = "crate::model::status::each_that_reads")]
            last_events: Option<Vec<OwedEvent>>,
        }
        let owed = self.status_fields::<Owed>().and_then(|o| o.last_events);
        owed.unwrap_or_default()
    }

    /// Some fields of the status, decoded from its text; the others are
    /// skipped without building anything.
    pub fn status_fields<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        let text = unpack(&self.status.as_ref()?.0, model_dictionary())?;
        serde_json::from_str(&text).ok()
    }

    /// `<namespace>/<name>`: the value of the owner annotation.
    pub fn qualified_name(&self) -> String {
        self.key.as_str().to_string()
    }
}

impl ModelData {
    /// The metadata; spec, status and phase are left empty.
    fn from_meta(v: &Value) -> Option<ModelData> {
        let key = ObjectKey::of(v)?;
        if key.name().is_empty() || key.namespace().is_empty() {
            return None;
        }
        Some(ModelData {
            key,
            uid: meta_str(v, "uid"),
            generation: v["metadata"]["generation"].as_i64().unwrap_or(0),
            resource_version: meta_str(v, "resourceVersion"),
            rollback_to: annotation(v, ROLLBACK_ANNOTATION)
                .map(|a| bounded(a.trim(), MAX_ROLLBACK_TARGET))
                .filter(|a| !a.is_empty()),
            autoscaled: annotation(v, AUTOSCALED_ANNOTATION).as_deref() == Some("true"),
            finalizers: v["metadata"]["finalizers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            deleting: v["metadata"]["deletionTimestamp"].is_string(),
            phase: None,
            spec: None,
            status: None,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// A converged model as the operator leaves it (values unlike the
    /// dictionary's: another version, real-looking hashes and uids).
    pub(crate) fn converged() -> Value {
        let v = "OpenMed/OpenMed-NER-Oncology-Base-220M-v3";
        let spec = json!({"family": "NER", "manifestConfigMapName": "onc-model-manifest",
            "replicas": 3, "rolloutStrategy": {"maxSurge": 1, "maxUnavailable": 0,
            "progressDeadlineSeconds": 900, "rollbackOnFailure": true, "type": "RollingUpdate"},
            "targetRef": {"containerName": "openmed-service", "name": "onc-api"},
            "tier": "Base", "version": v});
        let hash = "sha256:9c1185a5c5e9fc54612808977ee8f548b2258d31a6b4f5e0f6a1a5c3e1d2b3c4";
        let cond = |t: &str, s: &str, r: &str, m: String| {
            json!({"lastTransitionTime":
            "2026-11-30T21:04:17Z", "message": m, "observedGeneration": 4, "reason": r,
            "status": s, "type": t})
        };
        json!({"metadata": {"name": "onc", "namespace": "clinic-7", "uid": "u", "generation": 4},
            "spec": spec.clone(),
            "status": {"activeVersion": v, "appliedSpecHash": hash, "conditions": [
                cond("Ready", "True", "RolloutSucceeded", format!("{v} is serving")),
                cond("Progressing", "False", "RolloutComplete", format!("rollout of {v} complete")),
                cond("Degraded", "False", "Healthy", "no failure".into()),
                cond("RolledBack", "False", "NotRequested", "no rollback requested".into())],
              "desiredSpecHash": hash, "desiredVersion": v, "lastEvents": [{"generation": 4,
                "message": format!("Deployment onc-api is serving {v}"), "reason": "RolloutSucceeded"}],
              "lastSuccessfulSpec": spec,
              "manifestHash": "sha256:1ecb6f1b4e1beae6703ed08f7d73ff5bfc0cadd43420314e7d416279ac7f30b1",
              "observedGeneration": 4, "phase": "Ready", "rollbackCount": 0,
              "targetDeploymentGeneration": 7,
              "targetDeploymentUID": "fe039636-6598-4d64-a52c-bb15d180ed57"}})
    }

    #[test]
    fn owed_events_read_from_the_text_are_those_of_the_parsed_status() {
        let mut m = converged();
        m["status"]["lastEvents"] = json!([
            {"generation": 4, "reason": "RolloutSucceeded", "message": "done"},
            {"generation": 4, "reason": "NoSuchReason"},
        ]);
        let fresh = ModelView::from_json(&m).unwrap();
        let from_text = fresh.last_events();
        assert!(
            fresh.parts().status.get().is_none(),
            "the status was parsed"
        );
        assert_eq!(
            from_text,
            fresh.status().last_events.clone().unwrap_or_default()
        );
        assert_eq!(from_text.len(), 1);
        assert_eq!(from_text[0].message, "done");
    }

    /// The defaults depend on the name: two models of the same text share
    /// the parse, never each other's validated spec.
    #[test]
    fn models_of_one_text_get_the_defaults_of_their_own_names() {
        let mut m = converged();
        m["spec"]
            .as_object_mut()
            .unwrap()
            .remove("manifestConfigMapName");
        let a = ModelView::from_json(&m).unwrap();
        m["metadata"]["name"] = json!("other");
        let b = ModelView::from_json(&m).unwrap();
        assert!(std::sync::Arc::ptr_eq(a.parts(), b.parts()), "one parse");
        let manifest = |m: &ModelView| m.desired().unwrap().manifest_config_map_name.clone();
        assert_eq!(manifest(&a), "onc-model-manifest");
        assert_eq!(manifest(&b), "other-model-manifest");
        assert_eq!(manifest(&a.clone()), "onc-model-manifest");
    }

    /// A status write leaves the spec as it was: the copies made after it
    /// read the spec validated before it, not a parse of their own.
    #[test]
    fn a_new_status_keeps_the_spec_validated_before_it() {
        let mut m = converged();
        m["spec"]["version"] = json!("OpenMed/spec-kept-across-status");
        let before = ModelView::from_json(&m).unwrap();
        let desired = before.desired().unwrap() as *const DesiredSpec;
        m["status"]["observedGeneration"] = json!(5);
        let after = ModelView::from_json(&m).unwrap();
        assert!(!std::sync::Arc::ptr_eq(before.parts(), after.parts()));
        assert!(
            std::ptr::eq(after.desired().unwrap(), desired),
            "the spec was validated again"
        );
    }

    #[test]
    fn retained_specs_read_from_the_text_are_those_of_the_parsed_status() {
        let mut m = converged();
        let mut other = m["spec"].clone();
        other["targetRef"]["name"] = json!("old-api");
        m["status"]["previousSuccessfulSpec"] = other;
        m["status"]["rollbackSpec"] = json!({"family": 7});
        // A copy of its own: nothing parsed yet (the recent parses are
        // keyed by text, and this text is new).
        let fresh = ModelView::from_json(&m).unwrap();
        let from_text = fresh.retained_specs();
        assert!(
            fresh.parts().status.get().is_none(),
            "the status was parsed"
        );
        assert_eq!(from_text.len(), 2);
        assert_eq!(from_text, fresh.status().retained_specs("onc"));
        assert_eq!(from_text[1].target.name, "old-api");
    }

    #[test]
    fn a_cached_model_gives_back_its_spec_and_status_in_a_fraction_of_the_text() {
        let m = converged();
        let view = ModelView::from_json(&m).unwrap();
        assert_eq!(view.spec(), Some(&m["spec"]));
        assert_eq!(view.status(), &ModelStatus::from_value(Some(&m["status"])));
        let text = m["spec"].to_string().len() + m["status"].to_string().len();
        let held = view.spec.as_ref().map_or(0, |r| r.0.len())
            + view.status.as_ref().map_or(0, |r| r.0.len());
        assert!(held * 3 < text, "{text} bytes of text held in {held}");
    }
}
