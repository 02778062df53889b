//! The OpenMedModel spec: validation of a raw body into a desired spec with
//! every default filled in. The operator checks again what the CRD schema
//! checks, because a resource can reach it without passing the schema.

use super::canonical::{canonical_json, digest};
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

    /// specHash.
    pub fn hash(&self) -> String {
        digest(&self.to_json())
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
        format!("{}\n", canonical_json(&self.manifest()))
    }

    pub fn manifest_hash(&self) -> String {
        digest(&self.manifest())
    }
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

fn known_fields(map: &Map<String, Value>, path: &str, known: &[&str]) -> Result<(), SpecError> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(&format!("{path}.{k}"), "unknown field")),
        None => Ok(()),
    }
}

/// A string field, trimmed; None when absent or null.
fn opt_string(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err(err(path, "must be a string")),
    }
}

fn req_string(map: &Map<String, Value>, key: &str, path: &str) -> Result<String, SpecError> {
    opt_string(map, key, path)?.ok_or_else(|| err(path, "required"))
}

/// A JSON integer (not a boolean, not a fraction) within bounds.
fn int_in(v: &Value, path: &str, min: i64, max: i64, rule: &str) -> Result<i64, SpecError> {
    match v.as_i64() {
        Some(i) if v.is_number() && (min..=max).contains(&i) => Ok(i),
        _ => Err(err(path, rule)),
    }
}

fn int_or_percent(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    default: i64,
) -> Result<IntOrPercent, SpecError> {
    const RULE: &str = "must be an integer >= 0 or a percentage string from 0% to 100%";
    match map.get(key) {
        None | Some(Value::Null) => Ok(IntOrPercent::Int(default)),
        Some(Value::String(s)) => {
            let s = s.trim();
            let digits = s.strip_suffix('%').ok_or_else(|| err(path, RULE))?;
            let well_formed = !digits.is_empty()
                && digits.len() <= 3
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            match digits.parse::<u32>() {
                Ok(p) if well_formed && p <= 100 => Ok(IntOrPercent::Percent(p)),
                _ => Err(err(path, RULE)),
            }
        }
        Some(v) => int_in(v, path, 0, INT32_MAX, RULE).map(IntOrPercent::Int),
    }
}

/// Validate `spec` of the resource called `name` into a desired spec.
pub fn validate(name: &str, spec: Option<&Value>) -> Result<DesiredSpec, SpecError> {
    let spec = match spec {
        Some(Value::Object(m)) => m,
        _ => return Err(err("spec", "required; must be an object")),
    };
    known_fields(
        spec,
        "spec",
        &[
            "family",
            "version",
            "tier",
            "replicas",
            "rolloutStrategy",
            "targetRef",
            "manifestConfigMapName",
        ],
    )?;

    let family = req_string(spec, "family", "spec.family")?;
    if !is_family(&family) {
        return Err(err(
            "spec.family",
            "must start with a letter, end with a letter or digit, hold only letters, digits, '.', '_' or '-', and be at most 63 characters",
        ));
    }
    let version = req_string(spec, "version", "spec.version")?;
    if !is_version(&version) {
        return Err(err(
            "spec.version",
            "must start with a letter or digit, hold only letters, digits and . _ : @ / + ~ - (no whitespace), and be at most 253 characters",
        ));
    }
    let tier_s = req_string(spec, "tier", "spec.tier")?;
    let tier = Tier::parse(&tier_s).ok_or_else(|| {
        err(
            "spec.tier",
            "must be one of Tiny, Small, Medium, Base, Large, XLarge, Accurate-XLarge",
        )
    })?;
    let replicas = match spec.get("replicas") {
        None | Some(Value::Null) => return Err(err("spec.replicas", "required")),
        Some(v) => int_in(
            v,
            "spec.replicas",
            1,
            1000,
            "must be an integer from 1 to 1000",
        )?,
    };

    let rs = match spec.get("rolloutStrategy") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => return Err(err("spec.rolloutStrategy", "required")),
        Some(_) => return Err(err("spec.rolloutStrategy", "must be an object")),
    };
    known_fields(
        rs,
        "spec.rolloutStrategy",
        &[
            "type",
            "maxUnavailable",
            "maxSurge",
            "rollbackOnFailure",
            "progressDeadlineSeconds",
        ],
    )?;
    let kind = match req_string(rs, "type", "spec.rolloutStrategy.type")?.as_str() {
        "RollingUpdate" => StrategyType::RollingUpdate,
        "Recreate" => StrategyType::Recreate,
        _ => {
            return Err(err(
                "spec.rolloutStrategy.type",
                "must be RollingUpdate or Recreate",
            ))
        }
    };
    let max_unavailable = int_or_percent(
        rs,
        "maxUnavailable",
        "spec.rolloutStrategy.maxUnavailable",
        0,
    )?;
    let max_surge = int_or_percent(rs, "maxSurge", "spec.rolloutStrategy.maxSurge", 1)?;
    let rollback_on_failure = match rs.get("rollbackOnFailure") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(err(
                "spec.rolloutStrategy.rollbackOnFailure",
                "must be a boolean",
            ))
        }
    };
    let progress_deadline_seconds = match rs.get("progressDeadlineSeconds") {
        None | Some(Value::Null) => 600,
        Some(v) => int_in(
            v,
            "spec.rolloutStrategy.progressDeadlineSeconds",
            1,
            INT32_MAX,
            "must be an integer >= 1",
        )?,
    };
    if kind == StrategyType::RollingUpdate && max_unavailable.is_zero() && max_surge.is_zero() {
        return Err(err(
            "spec.rolloutStrategy",
            "RollingUpdate needs maxUnavailable or maxSurge above zero, or the rollout can never progress",
        ));
    }

    let (target_name, container_name) = match spec.get("targetRef") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(t)) => {
            known_fields(t, "spec.targetRef", &["name", "containerName"])?;
            (
                opt_string(t, "name", "spec.targetRef.name")?,
                opt_string(t, "containerName", "spec.targetRef.containerName")?,
            )
        }
        Some(_) => return Err(err("spec.targetRef", "must be an object")),
    };
    let target_name = target_name.unwrap_or_else(|| name.to_string());
    if !is_dns_subdomain(&target_name) {
        return Err(err(
            "spec.targetRef.name",
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ));
    }
    let container_name = container_name.unwrap_or_else(|| DEFAULT_CONTAINER.to_string());
    if !is_dns_label(&container_name) {
        return Err(err(
            "spec.targetRef.containerName",
            "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
        ));
    }
    let manifest_config_map_name =
        match opt_string(spec, "manifestConfigMapName", "spec.manifestConfigMapName")? {
            Some(n) => n,
            None => default_config_map_name(name),
        };
    if !is_dns_subdomain(&manifest_config_map_name) {
        return Err(err(
            "spec.manifestConfigMapName",
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ));
    }

    Ok(DesiredSpec {
        family,
        version,
        tier,
        replicas,
        rollout: RolloutStrategy {
            kind,
            max_unavailable,
            max_surge,
            rollback_on_failure,
            progress_deadline_seconds,
        },
        target: TargetRef {
            name: target_name,
            container_name,
        },
        manifest_config_map_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Value {
        json!({"family": "PII", "version": "v1", "tier": "Small", "replicas": 2, "rolloutStrategy": {"type": "RollingUpdate"}})
    }

    fn with(path: &[&str], v: Value) -> Value {
        let mut s = base();
        let mut cur = &mut s;
        for p in &path[..path.len() - 1] {
            cur = &mut cur[*p];
        }
        cur[path[path.len() - 1]] = v;
        s
    }

    #[test]
    fn strings_are_trimmed_before_use() {
        let s = validate(
            "m",
            Some(&with(&["version"], json!("  OpenMed/x@sha256:ab \n"))),
        )
        .unwrap();
        assert_eq!(s.version, "OpenMed/x@sha256:ab");
        let s = validate("m", Some(&with(&["tier"], json!(" Large ")))).unwrap();
        assert_eq!(s.tier, Tier::Large);
        let s = validate(
            "m",
            Some(&with(&["rolloutStrategy", "maxSurge"], json!(" 25% "))),
        )
        .unwrap();
        assert_eq!(s.rollout.max_surge, IntOrPercent::Percent(25));
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            (with(&["family"], json!("")), "spec.family"),
            (with(&["family"], json!("a-")), "spec.family"),
            (with(&["family"], json!(7)), "spec.family"),
            (with(&["version"], json!("-x")), "spec.version"),
            (with(&["tier"], json!("small")), "spec.tier"),
            (with(&["replicas"], json!(2.5)), "spec.replicas"),
            (with(&["replicas"], json!("2")), "spec.replicas"),
            (
                with(&["rolloutStrategy", "maxUnavailable"], json!("5")),
                "spec.rolloutStrategy.maxUnavailable",
            ),
            (
                with(&["rolloutStrategy", "maxUnavailable"], json!("050%")),
                "spec.rolloutStrategy.maxUnavailable",
            ),
            (
                with(&["rolloutStrategy", "maxSurge"], json!(true)),
                "spec.rolloutStrategy.maxSurge",
            ),
            (
                with(&["rolloutStrategy", "bogus"], json!(1)),
                "spec.rolloutStrategy.bogus",
            ),
            (with(&["bogus"], json!(1)), "spec.bogus"),
            (
                with(&["targetRef"], json!({"nam": "x"})),
                "spec.targetRef.nam",
            ),
            (with(&["targetRef"], json!("x")), "spec.targetRef"),
            (
                with(&["manifestConfigMapName"], json!("Bad")),
                "spec.manifestConfigMapName",
            ),
            (
                with(
                    &["rolloutStrategy", "progressDeadlineSeconds"],
                    json!(2_147_483_648i64),
                ),
                "spec.rolloutStrategy.progressDeadlineSeconds",
            ),
        ];
        for (spec, field) in cases {
            let e = validate("m", Some(&spec)).unwrap_err();
            assert_eq!(e.field, field, "{spec}: {e}");
        }
        assert_eq!(validate("m", None).unwrap_err().field, "spec");
    }

    #[test]
    fn recreate_ignores_zero_zero_and_percent_bounds() {
        let s = with(
            &["rolloutStrategy"],
            json!({"type": "Recreate", "maxSurge": 0, "maxUnavailable": "0%"}),
        );
        assert!(validate("m", Some(&s)).is_ok());
        let s = with(
            &["rolloutStrategy"],
            json!({"type": "RollingUpdate", "maxSurge": "100%", "maxUnavailable": "0%"}),
        );
        assert!(validate("m", Some(&s)).is_ok());
    }

    #[test]
    fn defaults_come_from_the_resource_name() {
        let s = validate("svc.a", Some(&base())).unwrap();
        assert_eq!(s.target.name, "svc.a");
        assert_eq!(s.target.container_name, "openmed-service");
        assert_eq!(s.manifest_config_map_name, "svc.a-model-manifest");
        assert_eq!(DesiredSpec::from_snapshot("other", &s.to_json()), Some(s));
    }
}
