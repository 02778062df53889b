//! The OpenMedModel spec: validation of a raw body into a desired spec with
//! every default filled in. The operator checks again what the CRD schema
//! checks, because a resource can reach it without passing the schema.

use super::canonical::digest;
use super::names::default_config_map_name;
use crate::kube::names::{is_dns_label, is_dns_subdomain};
use serde_json::{json, Map, Value};
use std::fmt;

pub const DEFAULT_CONTAINER: &str = "openmed-service";
pub const MANIFEST_API_VERSION: &str = "openmed.ai/v1alpha1";
pub const MANIFEST_KIND: &str = "OpenMedModelManifest";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Tiny,
    Small,
    Medium,
    Base,
    Large,
    XLarge,
    AccurateXLarge,
}

const TIERS: [(Tier, &str); 7] = [
    (Tier::Tiny, "Tiny"),
    (Tier::Small, "Small"),
    (Tier::Medium, "Medium"),
    (Tier::Base, "Base"),
    (Tier::Large, "Large"),
    (Tier::XLarge, "XLarge"),
    (Tier::AccurateXLarge, "Accurate-XLarge"),
];

impl Tier {
    pub fn as_str(self) -> &'static str {
        TIERS
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, s)| *s)
            .unwrap_or("")
    }
    pub fn parse(s: &str) -> Option<Tier> {
        TIERS.iter().find(|(_, n)| *n == s).map(|(t, _)| *t)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyType {
    RollingUpdate,
    Recreate,
}

impl StrategyType {
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyType::RollingUpdate => "RollingUpdate",
            StrategyType::Recreate => "Recreate",
        }
    }
    pub fn parse(s: &str) -> Option<StrategyType> {
        [StrategyType::RollingUpdate, StrategyType::Recreate]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// maxUnavailable / maxSurge: integers stay integers, percentages strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i64),
    Percent(u32),
}

impl IntOrPercent {
    pub fn to_json(self) -> Value {
        match self {
            IntOrPercent::Int(i) => json!(i),
            IntOrPercent::Percent(p) => json!(format!("{p}%")),
        }
    }
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutStrategy {
    pub kind: StrategyType,
    pub max_unavailable: IntOrPercent,
    pub max_surge: IntOrPercent,
    pub rollback_on_failure: bool,
    pub progress_deadline_seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetRef {
    pub name: String,
    pub container_name: String,
}

/// A valid spec with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredSpec {
    pub family: String,
    pub version: String,
    pub tier: Tier,
    pub replicas: i64,
    pub rollout: RolloutStrategy,
    pub target: TargetRef,
    pub manifest_config_map_name: String,
}

/// Which field is wrong and why; rendered into the InvalidSpec condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub rule: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl std::error::Error for SpecError {}

fn err(field: &str, rule: &str) -> SpecError {
    SpecError {
        field: field.to_string(),
        rule: rule.to_string(),
    }
}

const INT32_MAX: i64 = 2_147_483_647;

impl DesiredSpec {
    /// The contract's desired-spec object (also stored in status).
    pub fn to_json(&self) -> Value {
        json!({
            "family": self.family,
            "version": self.version,
            "tier": self.tier.as_str(),
            "replicas": self.replicas,
            "rolloutStrategy": {
                "type": self.rollout.kind.as_str(),
                "maxUnavailable": self.rollout.max_unavailable.to_json(),
                "maxSurge": self.rollout.max_surge.to_json(),
                "rollbackOnFailure": self.rollout.rollback_on_failure,
                "progressDeadlineSeconds": self.rollout.progress_deadline_seconds,
            },
            "targetRef": {"name": self.target.name, "containerName": self.target.container_name},
            "manifestConfigMapName": self.manifest_config_map_name,
        })
    }

    /// specHash: the digest of [`DesiredSpec::to_json`], written without
    /// building it (a pass hashes several specs; the tests check the text).
    pub fn hash(&self) -> String {
        crate::model::canonical::digest_text(self.canonical().text())
    }

    /// The canonical JSON of [`DesiredSpec::to_json`], keys in byte order.
    fn canonical(&self) -> crate::model::canonical::Canonical {
        let r = &self.rollout;
        let mut w = crate::model::canonical::Canonical::new();
        w.open(None)
            .str("family", &self.family)
            .str("manifestConfigMapName", &self.manifest_config_map_name)
            .raw("replicas", self.replicas)
            .open(Some("rolloutStrategy"));
        amount(&mut w, "maxSurge", r.max_surge);
        amount(&mut w, "maxUnavailable", r.max_unavailable);
        w.raw("progressDeadlineSeconds", r.progress_deadline_seconds)
            .raw("rollbackOnFailure", r.rollback_on_failure)
            .str("type", r.kind.as_str())
            .close()
            .open(Some("targetRef"))
            .str("containerName", &self.target.container_name)
            .str("name", &self.target.name)
            .close()
            .str("tier", self.tier.as_str())
            .str("version", &self.version)
            .close();
        w
    }

    /// A spec stored in status (lastSuccessfulSpec and friends), if valid.
    pub fn from_snapshot(resource_name: &str, v: &Value) -> Option<DesiredSpec> {
        validate(resource_name, Some(v)).ok()
    }

    pub fn manifest(&self) -> Value {
        json!({
            "apiVersion": MANIFEST_API_VERSION,
            "kind": MANIFEST_KIND,
            "models": [{"family": self.family, "tier": self.tier.as_str(), "version": self.version}],
        })
    }

    /// The `manifest.json` ConfigMap value.
    pub fn manifest_json(&self) -> String {
        format!("{}\n", self.manifest_canonical().text())
    }

    pub fn manifest_hash(&self) -> String {
        crate::model::canonical::digest_text(self.manifest_canonical().text())
    }

    /// The canonical JSON of [`DesiredSpec::manifest`].
    fn manifest_canonical(&self) -> crate::model::canonical::Canonical {
        let mut w = crate::model::canonical::Canonical::new();
        w.open(None)
            .str("apiVersion", MANIFEST_API_VERSION)
            .str("kind", MANIFEST_KIND)
            .open_array(Some("models"))
            .open(None)
            .str("family", &self.family)
            .str("tier", self.tier.as_str())
            .str("version", &self.version)
            .close()
            .close_array()
            .close();
        w
    }
}

/// maxSurge or maxUnavailable, as [`IntOrPercent::to_json`] writes it.
fn amount(w: &mut crate::model::canonical::Canonical, key: &str, a: IntOrPercent) {
    match a {
        IntOrPercent::Int(i) => w.raw(key, i),
        IntOrPercent::Percent(p) => w.str(key, &format!("{p}%")),
    };
}

/// The digest a decommissioned Deployment's pod template carries.
pub fn empty_manifest_hash() -> String {
    digest(&json!({"apiVersion": MANIFEST_API_VERSION, "kind": MANIFEST_KIND, "models": []}))
}

fn is_family(s: &str) -> bool {
    let b = s.as_bytes();
    let mid = |c: &u8| c.is_ascii_alphanumeric() || b"._-".contains(c);
    (1..=63).contains(&b.len())
        && b[0].is_ascii_alphabetic()
        && (b.len() == 1 || b[b.len() - 1].is_ascii_alphanumeric())
        && b.iter().all(mid)
}

fn is_version(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=253).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._:@/+~-".contains(c))
}

const FAMILY_RULE: &str = "must start with a letter, end with a letter or digit, hold only letters, digits, '.', '_' or '-', and be at most 63 characters";
const VERSION_RULE: &str = "must start with a letter or digit, hold only letters, digits and . _ : @ / + ~ - (no whitespace), and be at most 253 characters";
const AMOUNT_RULE: &str = "must be an integer >= 0 or a percentage string from 0% to 100%";
const SUBDOMAIN_RULE: &str =
    "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)";
const LABEL_RULE: &str =
    "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)";
const REQUIRED: fn(&str) -> Option<Val> = |_| None;

/// The spec, object by object, in the order it is checked: the first
/// refusal is the one reported, so the order is part of the behaviour.
const SCHEMA: [SpecObject; 4] = [
    SpecObject {
        path: "spec",
        optional: false,
        rule: None,
        fields: &[
            SpecField {
                path: "spec.family",
                read: Decoding::Text,
                default: REQUIRED,
                rule: |v| text(v, is_family),
                message: FAMILY_RULE,
            },
            SpecField {
                path: "spec.version",
                read: Decoding::Text,
                default: REQUIRED,
                rule: |v| text(v, is_version),
                message: VERSION_RULE,
            },
            SpecField {
                path: "spec.tier",
                read: Decoding::Text,
                default: REQUIRED,
                rule: |v| text(v, |s| Tier::parse(s).is_some()),
                message: "must be one of Tiny, Small, Medium, Base, Large, XLarge, Accurate-XLarge",
            },
            SpecField {
                path: "spec.replicas",
                read: Decoding::Int,
                default: REQUIRED,
                rule: |v| int_in(v, 1, 1000),
                message: "must be an integer from 1 to 1000",
            },
        ],
    },
    SpecObject {
        path: "spec.rolloutStrategy",
        optional: false,
        rule: Some((
            rollout_can_progress,
            "RollingUpdate needs maxUnavailable or maxSurge above zero, or the rollout can never progress",
        )),
        fields: &[
            SpecField {
                path: "spec.rolloutStrategy.type",
                read: Decoding::Text,
                default: REQUIRED,
                rule: |v| text(v, |s| StrategyType::parse(s).is_some()),
                message: "must be RollingUpdate or Recreate",
            },
            SpecField {
                path: "spec.rolloutStrategy.maxUnavailable",
                read: Decoding::Amount,
                default: |_| Some(Val::Amount(IntOrPercent::Int(0))),
                rule: amount_in_bounds,
                message: AMOUNT_RULE,
            },
            SpecField {
                path: "spec.rolloutStrategy.maxSurge",
                read: Decoding::Amount,
                default: |_| Some(Val::Amount(IntOrPercent::Int(1))),
                rule: amount_in_bounds,
                message: AMOUNT_RULE,
            },
            SpecField {
                path: "spec.rolloutStrategy.rollbackOnFailure",
                read: Decoding::Flag,
                default: |_| Some(Val::Flag(true)),
                rule: |_| true,
                message: "must be a boolean",
            },
            SpecField {
                path: "spec.rolloutStrategy.progressDeadlineSeconds",
                read: Decoding::Int,
                default: |_| Some(Val::Int(600)),
                rule: |v| int_in(v, 1, INT32_MAX),
                message: "must be an integer >= 1",
            },
        ],
    },
    SpecObject {
        path: "spec.targetRef",
        optional: true,
        rule: None,
        fields: &[
            SpecField {
                path: "spec.targetRef.name",
                read: Decoding::Text,
                default: |name| Some(Val::Text(name.to_string())),
                rule: |v| text(v, is_dns_subdomain),
                message: SUBDOMAIN_RULE,
            },
            SpecField {
                path: "spec.targetRef.containerName",
                read: Decoding::Text,
                default: |_| Some(Val::Text(DEFAULT_CONTAINER.to_string())),
                rule: |v| text(v, is_dns_label),
                message: LABEL_RULE,
            },
        ],
    },
    SpecObject {
        path: "spec",
        optional: false,
        rule: None,
        fields: &[SpecField {
            path: "spec.manifestConfigMapName",
            read: Decoding::Text,
            default: |name| Some(Val::Text(default_config_map_name(name))),
            rule: |v| text(v, is_dns_subdomain),
            message: SUBDOMAIN_RULE,
        }],
    },
];

/// An object of the spec and its fields.
struct SpecObject {
    path: &'static str,
    /// May be absent or null, and then every field takes its default. Its
    /// fields are all read before any is checked, as they always were.
    optional: bool,
    fields: &'static [SpecField],
    /// A rule across the fields read so far, checked after this block's.
    rule: Option<CrossRule>,
}

/// A rule over several fields, and the error when it fails.
type CrossRule = (fn(&Values) -> bool, &'static str);

/// One field: where it is, how it is read, its default, its rule and the
/// error when the rule fails.
struct SpecField {
    /// From the top of the resource; also the error's field.
    path: &'static str,
    read: Decoding,
    /// The value when absent or null, given the resource name; None: required.
    default: fn(&str) -> Option<Val>,
    /// What the value, read or defaulted, must satisfy.
    rule: fn(&Val) -> bool,
    message: &'static str,
}

/// How a field's JSON is read. A value of the wrong JSON type is refused
/// with "must be a string" for text and with the field's message otherwise.
#[derive(Clone, Copy)]
enum Decoding {
    /// A string, trimmed.
    Text,
    /// A JSON integer: not a boolean, not a fraction.
    Int,
    /// An integer, or a percentage string such as "25%".
    Amount,
    Flag,
}

/// A field's value once read or defaulted.
#[derive(Debug)]
enum Val {
    Text(String),
    Int(i64),
    Amount(IntOrPercent),
    Flag(bool),
}

/// The fields read so far, by path.
#[derive(Default)]
struct Values(Vec<(&'static str, Val)>);

impl Values {
    fn get(&self, path: &str) -> Option<&Val> {
        self.0.iter().find(|(p, _)| *p == path).map(|(_, v)| v)
    }
    fn text(&self, path: &str) -> Option<&str> {
        match self.get(path)? {
            Val::Text(s) => Some(s),
            _ => None,
        }
    }
    /// A text taken out (it is read once, into the desired spec).
    fn take_text(&mut self, path: &str) -> Option<String> {
        match self.0.iter_mut().find(|(p, _)| *p == path)? {
            (_, Val::Text(s)) => Some(std::mem::take(s)),
            _ => None,
        }
    }
    fn int(&self, path: &str) -> Option<i64> {
        match self.get(path)? {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }
    fn amount(&self, path: &str) -> Option<IntOrPercent> {
        match self.get(path)? {
            Val::Amount(a) => Some(*a),
            _ => None,
        }
    }
    fn flag(&self, path: &str) -> Option<bool> {
        match self.get(path)? {
            Val::Flag(b) => Some(*b),
            _ => None,
        }
    }
}

fn text(v: &Val, ok: fn(&str) -> bool) -> bool {
    matches!(v, Val::Text(s) if ok(s))
}

fn int_in(v: &Val, min: i64, max: i64) -> bool {
    matches!(v, Val::Int(i) if (min..=max).contains(i))
}

fn amount_in_bounds(v: &Val) -> bool {
    matches!(
        v,
        Val::Amount(IntOrPercent::Int(0..=INT32_MAX) | IntOrPercent::Percent(0..=100))
    )
}

/// RollingUpdate with nothing unavailable and nothing surging never moves.
fn rollout_can_progress(v: &Values) -> bool {
    let rolling =
        matches!(v.get("spec.rolloutStrategy.type"), Some(Val::Text(t)) if t == "RollingUpdate");
    let zero = |path| v.amount(path).is_some_and(IntOrPercent::is_zero);
    !(rolling
        && zero("spec.rolloutStrategy.maxUnavailable")
        && zero("spec.rolloutStrategy.maxSurge"))
}

/// "N%" written plainly: digits only, no leading zero, at most three.
fn percent(s: &str) -> Option<u32> {
    let digits = s.strip_suffix('%')?;
    let plain = !digits.is_empty()
        && digits.len() <= 3
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    digits.parse().ok().filter(|_| plain)
}

impl Decoding {
    fn parse(self, v: &Value) -> Option<Val> {
        match (self, v) {
            (Decoding::Text, Value::String(s)) => Some(Val::Text(s.trim().to_string())),
            (Decoding::Text, _) => None,
            (Decoding::Int, _) => v.as_i64().map(Val::Int),
            (Decoding::Amount, Value::String(s)) => {
                percent(s.trim()).map(|p| Val::Amount(IntOrPercent::Percent(p)))
            }
            (Decoding::Amount, _) => v.as_i64().map(|i| Val::Amount(IntOrPercent::Int(i))),
            (Decoding::Flag, _) => v.as_bool().map(Val::Flag),
        }
    }
}

impl SpecField {
    /// The field's value in `obj` (None: its optional block is absent).
    fn read(&self, obj: Option<&Map<String, Value>>, name: &str) -> Result<Val, SpecError> {
        let key = self
            .path
            .rfind('.')
            .map_or(self.path, |i| &self.path[i + 1..]);
        match obj.and_then(|o| o.get(key)).filter(|v| !v.is_null()) {
            None => (self.default)(name).ok_or_else(|| err(self.path, "required")),
            Some(v) => self.read.parse(v).ok_or_else(|| match self.read {
                Decoding::Text => err(self.path, "must be a string"),
                _ => err(self.path, self.message),
            }),
        }
    }

    fn check(&self, v: &Val) -> Result<(), SpecError> {
        match (self.rule)(v) {
            true => Ok(()),
            false => Err(err(self.path, self.message)),
        }
    }
}

impl SpecObject {
    /// The block's object, holding no field the schema lacks; None when an
    /// optional block is absent or null.
    fn open<'a>(
        &self,
        spec: &'a Map<String, Value>,
    ) -> Result<Option<&'a Map<String, Value>>, SpecError> {
        let obj = match self.path.strip_prefix("spec.") {
            None => spec,
            Some(key) => match spec.get(key) {
                Some(Value::Object(m)) => m,
                None | Some(Value::Null) if self.optional => return Ok(None),
                None | Some(Value::Null) => return Err(err(self.path, "required")),
                Some(_) => return Err(err(self.path, "must be an object")),
            },
        };
        match obj.keys().find(|k| !is_known(self.path, k)) {
            Some(k) => Err(err(&format!("{}.{k}", self.path), "unknown field")),
            None => Ok(Some(obj)),
        }
    }

    /// Reads and checks this block's fields into `values`.
    fn read(
        &self,
        spec: &Map<String, Value>,
        name: &str,
        values: &mut Values,
    ) -> Result<(), SpecError> {
        let obj = self.open(spec)?;
        let start = values.0.len();
        for f in self.fields {
            let v = f.read(obj, name)?;
            if !self.optional {
                f.check(&v)?;
            }
            values.0.push((f.path, v));
        }
        if self.optional {
            for (f, (_, v)) in self.fields.iter().zip(&values.0[start..]) {
                f.check(v)?;
            }
        }
        match self.rule {
            Some((rule, message)) if !rule(values) => Err(err(self.path, message)),
            _ => Ok(()),
        }
    }
}

/// Whether the object at `path` may hold `key`: some field of the schema
/// lies at or below `path.key`. Every spec a pass reads is checked, so the
/// keys of each block are worked out from [`SCHEMA`] once.
fn is_known(path: &str, key: &str) -> bool {
    type Known = Vec<(&'static str, Vec<&'static str>)>;
    static KNOWN: std::sync::OnceLock<Known> = std::sync::OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        let below = |path: &str| -> Vec<&'static str> {
            let mut keys: Vec<&'static str> = (SCHEMA.iter().flat_map(|b| b.fields))
                .filter_map(|f| f.path.strip_prefix(path)?.strip_prefix('.'))
                .filter_map(|r| r.split('.').next())
                .collect();
            keys.dedup();
            keys
        };
        SCHEMA.iter().map(|b| (b.path, below(b.path))).collect()
    });
    (known.iter().find(|(p, _)| *p == path)).is_some_and(|(_, keys)| keys.contains(&key))
}

/// The desired spec from checked values; None only if the schema above and
/// this function disagree about a field's path or kind.
fn desired(mut v: Values) -> Option<DesiredSpec> {
    Some(DesiredSpec {
        tier: Tier::parse(v.text("spec.tier")?)?,
        replicas: v.int("spec.replicas")?,
        rollout: RolloutStrategy {
            kind: StrategyType::parse(v.text("spec.rolloutStrategy.type")?)?,
            max_unavailable: v.amount("spec.rolloutStrategy.maxUnavailable")?,
            max_surge: v.amount("spec.rolloutStrategy.maxSurge")?,
            rollback_on_failure: v.flag("spec.rolloutStrategy.rollbackOnFailure")?,
            progress_deadline_seconds: v.int("spec.rolloutStrategy.progressDeadlineSeconds")?,
        },
        target: TargetRef {
            name: v.take_text("spec.targetRef.name")?,
            container_name: v.take_text("spec.targetRef.containerName")?,
        },
        manifest_config_map_name: v.take_text("spec.manifestConfigMapName")?,
        family: v.take_text("spec.family")?,
        version: v.take_text("spec.version")?,
    })
}

/// Validate `spec` of the resource called `name` into a desired spec.
pub fn validate(name: &str, spec: Option<&Value>) -> Result<DesiredSpec, SpecError> {
    let Some(Value::Object(spec)) = spec else {
        return Err(err("spec", "required; must be an object"));
    };
    let fields = SCHEMA.iter().map(|b| b.fields.len()).sum();
    let mut values = Values(Vec::with_capacity(fields));
    for block in &SCHEMA {
        block.read(spec, name, &mut values)?;
    }
    desired(values).ok_or_else(|| err("spec", "the operator's field table is inconsistent"))
}

#[cfg(test)]
mod tests;
