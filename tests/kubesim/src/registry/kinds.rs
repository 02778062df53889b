//! Per-kind defaulting and validation, as the real registry strategies do
//! it for the fields that matter to us: object metadata, Deployments,
//! ConfigMaps, Events, CRDs, and custom resources through their schema.

use crate::apiserver::errors::{ApiErr, Cause};
use crate::registry::resources::ResourceDef;
use crate::schema;
use crate::schema::structural;
use serde_json::{json, Value};

/// The `fieldValidation` query parameter. Absent, it is `Warn`, as
/// kube-apiserver's `fieldValidation` (endpoints/handlers/rest.go) resolves
/// it: unknown fields are pruned and named in a `Warning` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> FieldValidation {
        match s {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && ok(&b[0])
        && ok(&b[b.len() - 1])
        && b.iter().all(|c| ok(c) || *c == b'-')
}

pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|p| {
            let b = p.as_bytes();
            let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && ok(&b[0])
                && ok(&b[b.len() - 1])
                && b.iter().all(|c| ok(c) || *c == b'-')
        })
}

/// `[prefix/]name` with name like a label value and prefix a DNS subdomain.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.map(is_dns_subdomain).unwrap_or(true) && !name.is_empty() && is_label_value(name)
}

fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return true;
    }
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    b.len() <= 63
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || b"-_.".contains(c))
}

fn validate_metadata(def: &ResourceDef, obj: &Value, causes: &mut Vec<Cause>) {
    let meta = &obj["metadata"];
    validate_name(def, meta, causes);
    validate_labels_and_annotations(meta, causes);
    validate_finalizers(meta, causes);
    validate_owner_references(meta, causes);
}

/// `metadata.name`: the kind's name rule (a DNS label for namespaces, a
/// path segment for Events and the RBAC kinds, `ValidateRBACName`, so that
/// `system:aggregate-to-edit` is a name; a DNS subdomain otherwise).
fn validate_name(def: &ResourceDef, meta: &Value, causes: &mut Vec<Cause>) {
    let name = meta["name"].as_str().unwrap_or("");
    let name_ok = match def.plural.as_str() {
        "namespaces" => is_dns_label(name),
        // Events skip the strategy's name rule; only the generic
        // `ValidateObjectMetaAccessor` with `path.ValidatePathSegmentName` runs.
        "events" | "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings" => {
            if name == "." || name == ".." || name.contains(['/', '%']) {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &meta["name"],
                    "may not contain '/' or '%' or be '.' or '..'",
                ));
            }
            true
        }
        _ => is_dns_subdomain(name),
    };
    if name.is_empty() {
        causes.push(Cause::required("metadata.name"));
    } else if !name_ok {
        causes.push(Cause::invalid(
            "metadata.name",
            &meta["name"],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
}

/// Labels and annotations: maps of strings under qualified names; label
/// values are label values too.
fn validate_labels_and_annotations(meta: &Value, causes: &mut Vec<Cause>) {
    for (field, values_are_labels) in [("labels", true), ("annotations", false)] {
        match &meta[field] {
            Value::Null => {}
            Value::Object(m) => {
                for (k, v) in m {
                    let path = format!("metadata.{field}");
                    if !is_qualified_name(k) {
                        causes.push(Cause::invalid(
                            &path,
                            &json!(k),
                            "name part must consist of alphanumeric characters, '-', '_' or '.'",
                        ));
                    }
                    match v.as_str() {
                        None => causes.push(Cause::invalid(&path, v, "values must be strings")),
                        Some(s) if values_are_labels && !is_label_value(s) => {
                            causes.push(Cause::invalid(&path, v, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"))
                        }
                        _ => {}
                    }
                }
            }
            other => causes.push(Cause::invalid(
                &format!("metadata.{field}"),
                other,
                "must be a map of strings",
            )),
        }
    }
}

fn validate_finalizers(meta: &Value, causes: &mut Vec<Cause>) {
    if let Some(fs) = meta["finalizers"].as_array() {
        for (i, f) in fs.iter().enumerate() {
            if !f.as_str().map(is_qualified_name).unwrap_or(false) {
                causes.push(Cause::invalid(
                    &format!("metadata.finalizers[{i}]"),
                    f,
                    "must be a qualified name",
                ));
            }
        }
    }
}

/// Every reference names its owner fully; at most one is the controller.
fn validate_owner_references(meta: &Value, causes: &mut Vec<Cause>) {
    if let Some(refs) = meta["ownerReferences"].as_array() {
        let mut controllers = 0;
        for (i, r) in refs.iter().enumerate() {
            for k in ["apiVersion", "kind", "name", "uid"] {
                if r[k].as_str().map(str::is_empty).unwrap_or(true) {
                    causes.push(Cause::required(&format!(
                        "metadata.ownerReferences[{i}].{k}"
                    )));
                }
            }
            if r["controller"].as_bool() == Some(true) {
                controllers += 1;
            }
        }
        if controllers > 1 {
            causes.push(Cause::invalid(
                "metadata.ownerReferences",
                &json!(controllers),
                "Only one reference can have Controller set to true",
            ));
        }
    }
}

/// Default and validate an object about to be stored. Returns warnings.
pub fn prepare(
    def: &ResourceDef,
    obj: &mut Value,
    old: Option<&Value>,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiErr> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut causes = Vec::new();
    let mut warnings = Vec::new();
    if def.custom {
        let version = def.versions[0].clone();
        if let Some(s) = def.schemas.get(&version) {
            let mut unknown = Vec::new();
            schema::prune(obj, s, "", true, &mut unknown);
            if !unknown.is_empty() {
                let listed: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field {u:?}"))
                    .collect();
                match fv {
                    FieldValidation::Strict => {
                        return Err(ApiErr::bad_request(format!(
                            "{} in version {version:?} cannot be handled as a {}: strict decoding error: {}",
                            def.kind,
                            def.kind,
                            listed.join(", ")
                        )))
                    }
                    FieldValidation::Warn => warnings.extend(listed),
                    FieldValidation::Ignore => {}
                }
            }
            schema::apply_defaults(obj, s);
            schema::validate(obj, s, "", true, &mut causes);
            schema::cel::validate(obj, old, s, "", &mut causes);
        }
    }
    validate_metadata(def, obj, &mut causes);
    match def.key().as_str() {
        "apps/deployments" => {
            default_deployment(obj);
            validate_deployment(obj, old, &mut causes);
        }
        "/configmaps" => validate_configmap(obj, &mut causes),
        "/events" => validate_event(obj, &mut causes),
        "coordination.k8s.io/leases" => {
            decode_lease(obj)?;
            validate_lease(obj, &mut causes)
        }
        "apiextensions.k8s.io/customresourcedefinitions" => validate_crd(obj, &mut causes),
        "/namespaces" => {
            // namespaceStrategy: every namespace is created held by the
            // `kubernetes` finalizer, which only the namespace controller
            // removes (through /finalize), once its content is gone.
            obj["spec"]["finalizers"] = match old {
                None => json!(["kubernetes"]),
                Some(o) => o["spec"]["finalizers"].clone(),
            };
            if obj["status"]["phase"].is_null() {
                obj["status"] = json!({"phase": "Active"})
            }
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(warnings)
    } else {
        Err(ApiErr::invalid(def, &name, causes))
    }
}

/// `ValidateLeaseSpec` (pkg/apis/coordination/validation), and the decoding
/// of its `MicroTime` fields, which refuses anything but RFC3339 with
/// exactly six fractional digits (`metav1.MicroTime.UnmarshalJSON` parses
/// with `RFC3339Micro`; a layout's `.000000` needs every digit).
fn validate_lease(obj: &Value, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    if spec["leaseDurationSeconds"]
        .as_i64()
        .is_some_and(|d| d <= 0)
    {
        let d = &spec["leaseDurationSeconds"];
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            d,
            "must be greater than 0",
        ));
    }
    if spec["leaseTransitions"].as_i64().is_some_and(|t| t < 0) {
        let t = &spec["leaseTransitions"];
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            t,
            "must be greater than or equal to 0",
        ));
    }
}

/// A Lease as its JSON decodes into `coordination.Lease`: a field of the
/// wrong type, or a `MicroTime` that `metav1.MicroTime.UnmarshalJSON`
/// cannot parse, is a 400 (the body cannot be handled as a Lease), not a
/// validation error; a MicroTime is kept as `MarshalJSON` writes it again,
/// in UTC.
fn decode_lease(obj: &mut Value) -> Result<(), ApiErr> {
    let refuse = |why: String| {
        ApiErr::bad_request(format!(
            "Lease in version \"v1\" cannot be handled as a Lease: {why}"
        ))
    };
    let spec = &mut obj["spec"];
    let wrong_type = |field: &str, v: &Value, want: &str| {
        let got = match v {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            Value::Array(_) => "array",
            _ => "object",
        };
        refuse(format!(
            "json: cannot unmarshal {got} into Go struct field LeaseSpec.spec.{field} of type {want}"
        ))
    };
    for field in ["leaseDurationSeconds", "leaseTransitions"] {
        let v = &spec[field];
        let int32 = v.as_i64().is_some_and(|n| i32::try_from(n).is_ok());
        if !v.is_null() && !int32 {
            return Err(wrong_type(field, v, "int32"));
        }
    }
    for field in ["holderIdentity", "strategy", "preferredHolder"] {
        let v = &spec[field];
        if !v.is_null() && !v.is_string() {
            return Err(wrong_type(field, v, "string"));
        }
    }
    for field in ["acquireTime", "renewTime"] {
        let v = &spec[field];
        if v.is_null() {
            continue;
        }
        let Some(utc) = v.as_str().and_then(micro_time_utc) else {
            return Err(match v.as_str() {
                Some(t) => refuse(format!(
                    "parsing time {t:?} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse"
                )),
                None => wrong_type(field, v, "v1.MicroTime"),
            });
        };
        spec[field] = json!(utc);
    }
    Ok(())
}

/// A MicroTime (`2006-01-02T15:04:05.000000Z07:00`) written again in UTC,
/// as `MicroTime.MarshalJSON` writes it; None if it does not parse.
pub fn micro_time_utc(s: &str) -> Option<String> {
    if !is_micro_time(s) {
        return None;
    }
    let (clock, zone) = s.split_at(26);
    let offset = match zone {
        "Z" => 0,
        z => {
            let n = |r: std::ops::Range<usize>| z.get(r)?.parse::<i64>().ok();
            let secs = n(1..3)? * 3600 + n(4..6)? * 60;
            if z.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
    };
    let local = crate::apiserver::time::parse_rfc3339(&format!("{}Z", &clock[..19]))?;
    let utc = if offset >= 0 {
        local.checked_sub(std::time::Duration::from_secs(offset as u64))?
    } else {
        local.checked_add(std::time::Duration::from_secs((-offset) as u64))?
    };
    let base = crate::apiserver::time::rfc3339(utc);
    Some(format!("{}{}Z", &base[..base.len() - 1], &clock[19..26]))
}

/// `2006-01-02T15:04:05.000000Z07:00`: six fractional digits, then `Z` or
/// an offset.
pub fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let zone = match b.get(26..) {
        Some(b"Z") => true,
        Some(z) if z.len() == 6 => {
            (z[0] == b'+' || z[0] == b'-') && z[3] == b':' && digits(27..29) && digits(30..32)
        }
        _ => false,
    };
    digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26)
        && zone
}

#[cfg(test)]
mod lease_tests {
    use super::*;

    /// `metav1.MicroTime.UnmarshalJSON` (`time.Parse(RFC3339Micro, ...)`):
    /// exactly six fractional digits, then `Z` or an offset.
    #[test]
    fn micro_times_as_the_api_server_decodes_them() {
        for ok in [
            "2026-11-30T23:59:01.123456Z",
            "2026-11-30T23:59:01.000000+01:00",
        ] {
            assert!(is_micro_time(ok), "{ok}");
        }
        for bad in [
            "2026-11-30T23:59:01Z",
            "2026-11-30T23:59:01.123Z",
            "2026-11-30T23:59:01.1234567Z",
            "2026-11-30 23:59:01.123456Z",
            "2026-11-30T23:59:01.123456",
            "",
        ] {
            assert!(!is_micro_time(bad), "{bad}");
        }
    }

    /// `ValidateLeaseSpec` (pkg/apis/coordination/validation): duration > 0,
    /// transitions >= 0.
    #[test]
    fn lease_spec_fields_are_validated() {
        let mut causes = Vec::new();
        let lease = json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1,
            "acquireTime": "2026-11-30T23:59:01.000001Z"}});
        validate_lease(&lease, &mut causes);
        let fields: Vec<String> = causes.iter().map(|c| c.field.clone()).collect();
        assert_eq!(
            fields,
            ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
        );
    }

    /// Decoding into `coordination.Lease`: a bad MicroTime or a field of the
    /// wrong type is a 400, and `MicroTime.MarshalJSON` writes UTC.
    #[test]
    fn a_lease_decodes_as_the_api_server_decodes_it() {
        let bad = |spec: Value| decode_lease(&mut json!({"spec": spec})).map_err(|e| e.code);
        assert_eq!(bad(json!({"renewTime": "2026-11-30T23:59:01Z"})), Err(400));
        assert_eq!(bad(json!({"leaseDurationSeconds": "15"})), Err(400));
        assert_eq!(bad(json!({"leaseDurationSeconds": 1.5})), Err(400));
        assert_eq!(
            bad(json!({"leaseTransitions": 4_294_967_296_i64})),
            Err(400)
        );
        assert_eq!(bad(json!({"holderIdentity": 7})), Err(400));
        assert_eq!(
            bad(json!({"leaseDurationSeconds": 15, "holderIdentity": null})),
            Ok(())
        );
        let mut lease = json!({"spec": {"renewTime": "2026-12-01T01:30:00.000042+02:00",
            "acquireTime": "2026-11-30T23:59:01.123456-00:30"}});
        decode_lease(&mut lease).unwrap();
        assert_eq!(lease["spec"]["renewTime"], "2026-11-30T23:30:00.000042Z");
        assert_eq!(lease["spec"]["acquireTime"], "2026-12-01T00:29:01.123456Z");
    }
}

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        if m.get(key).map(Value::is_null).unwrap_or(true) {
            m.insert(key.to_string(), v);
        }
    }
}

fn default_deployment(obj: &mut Value) {
    if !obj["spec"].is_object() {
        return;
    }
    let spec = &mut obj["spec"];
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    set_default(spec, "strategy", json!({"type": "RollingUpdate"}));
    let strategy = &mut spec["strategy"];
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        set_default(strategy, "rollingUpdate", json!({}));
        let ru = &mut strategy["rollingUpdate"];
        set_default(ru, "maxUnavailable", json!("25%"));
        set_default(ru, "maxSurge", json!("25%"));
    }
    let pod = &mut spec["template"]["spec"];
    if pod.is_object() {
        set_default(pod, "restartPolicy", json!("Always"));
        set_default(pod, "terminationGracePeriodSeconds", json!(30));
        set_default(pod, "dnsPolicy", json!("ClusterFirst"));
        set_default(pod, "schedulerName", json!("default-scheduler"));
        set_default(pod, "securityContext", json!({}));
        // The typed round trip: `EnvVar.value` is `omitempty`, so an empty
        // value is not kept (a strategic merge patch may leave one).
        for list in ["initContainers", "containers"] {
            let Some(cs) = pod.get_mut(list).and_then(Value::as_array_mut) else {
                continue;
            };
            let envs = cs
                .iter_mut()
                .filter_map(|c| c.get_mut("env").and_then(Value::as_array_mut));
            for env in envs {
                for e in env.iter_mut().filter_map(Value::as_object_mut) {
                    if e.get("value").and_then(Value::as_str) == Some("") {
                        e.remove("value");
                    }
                    // `SetDefaults_ObjectFieldSelector`: a fieldRef's apiVersion is v1.
                    if let Some(r) = e.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef")) {
                        if r.is_object() {
                            set_default(r, "apiVersion", json!("v1"));
                        }
                    }
                }
            }
        }
        if let Some(cs) = pod["containers"].as_array_mut() {
            for c in cs.iter_mut().filter(|c| c.is_object()) {
                let latest = c["image"]
                    .as_str()
                    .map(|i| i.ends_with(":latest") || !i.contains(':'))
                    .unwrap_or(false);
                set_default(
                    c,
                    "imagePullPolicy",
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
                set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "terminationMessagePolicy", json!("File"));
                set_default(c, "resources", json!({}));
            }
        }
    }
}

/// `ValidateNonnegativeField`'s words.
const NEGATIVE_MSG: &str = "must be greater than or equal to 0";

/// `IsValidPercent`'s words (apimachinery util/validation, `RegexError`).
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";

/// `getPercentValue`: the number of a string matching `^[0-9]+%$` (Go's
/// `Atoi` saturates on overflow).
fn percent_value(v: &Value) -> Option<i64> {
    let digits = v.as_str()?.strip_suffix('%')?;
    let valid = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| digits.parse().unwrap_or(i64::MAX))
}

/// `getIntOrPercentValue`: a percentage's number, else `IntValue()` (a
/// string that is no number reads as 0).
fn int_or_percent_value(v: &Value) -> i64 {
    match (percent_value(v), v) {
        (Some(n), _) => n,
        (None, Value::String(s)) => s.parse().unwrap_or(0),
        (None, other) => other.as_i64().unwrap_or(0),
    }
}

/// `ValidatePositiveIntOrPercent`: a percent string, or an int not below 0.
fn positive_int_or_percent(v: &Value, path: &str, causes: &mut Vec<Cause>) {
    match v {
        Value::String(_) if percent_value(v).is_none() => {
            causes.push(Cause::invalid(path, v, PERCENT_MSG))
        }
        Value::String(_) | Value::Null => {}
        Value::Number(n) if n.as_i64().is_some() => {
            if n.as_i64().is_some_and(|x| x < 0) {
                causes.push(Cause::invalid(path, v, NEGATIVE_MSG));
            }
        }
        _ => causes.push(Cause::invalid(
            path,
            v,
            "must be an integer or percentage (e.g '5%%')",
        )),
    }
}

/// `ValidateNonnegativeField` on an optional integer field of `spec`.
fn nonnegative(spec: &Value, field: &str, causes: &mut Vec<Cause>) {
    if let Some(v) = spec.get(field).filter(|v| !v.is_null()) {
        if v.as_i64().map(|x| x < 0).unwrap_or(true) {
            causes.push(Cause::invalid(&format!("spec.{field}"), v, NEGATIVE_MSG));
        }
    }
}

/// `ValidateDeploymentSpec` and the update strategy's immutable selector
/// (pkg/apis/apps/validation/validation.go, pkg/registry/apps/deployment),
/// in upstream's order: replicas, selector, template, strategy,
/// minReadySeconds, revisionHistoryLimit, progressDeadlineSeconds.
fn validate_deployment(obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    if !spec.is_object() {
        causes.push(Cause::required("spec"));
        return;
    }
    nonnegative(spec, "replicas", causes);
    validate_deployment_selector(spec, causes);
    validate_containers(spec, causes);
    validate_deployment_strategy(&spec["strategy"], causes);
    nonnegative(spec, "minReadySeconds", causes);
    nonnegative(spec, "revisionHistoryLimit", causes);
    let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
    if let Some(pd) = spec.get("progressDeadlineSeconds").filter(|v| !v.is_null()) {
        nonnegative(spec, "progressDeadlineSeconds", causes);
        if pd.as_i64().map(|p| p <= min_ready).unwrap_or(true) {
            causes.push(Cause::invalid(
                "spec.progressDeadlineSeconds",
                pd,
                "must be greater than minReadySeconds",
            ));
        }
    }
    if let Some(old) = old {
        if old["spec"]["selector"] != spec["selector"] {
            causes.push(Cause::invalid(
                "spec.selector",
                &spec["selector"],
                "field is immutable",
            ));
        }
    }
}

/// The selector: required, not empty, matching the template's labels.
fn validate_deployment_selector(spec: &Value, causes: &mut Vec<Cause>) {
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    let match_labels = selector["matchLabels"].as_object();
    let expressions = selector["matchExpressions"].as_array();
    let empty = match_labels.map_or(0, |m| m.len()) + expressions.map_or(0, Vec::len) == 0;
    if !selector.is_object() {
        causes.push(Cause::required("spec.selector"));
    } else if empty {
        causes.push(Cause::invalid(
            "spec.selector",
            selector,
            "empty selector is invalid for deployment",
        ));
    }
    if let Some(ml) = match_labels {
        if ml.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            causes.push(Cause::invalid(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            ));
        }
    }
}

fn validate_containers(spec: &Value, causes: &mut Vec<Cause>) {
    let Some(cs) = spec["template"]["spec"]["containers"]
        .as_array()
        .filter(|cs| !cs.is_empty())
    else {
        causes.push(Cause::required("spec.template.spec.containers"));
        return;
    };
    let mut seen = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let p = format!("spec.template.spec.containers[{i}]");
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{p}.name")));
        } else if !is_dns_label(name) {
            causes.push(Cause::invalid(&format!("{p}.name"), &c["name"], "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"));
        } else if seen.contains(&name) {
            causes.push(Cause::new(
                format!("{p}.name"),
                "FieldValueDuplicate",
                format!("Duplicate value: {name:?}"),
            ));
        }
        seen.push(name);
        if c["image"].as_str().map(str::is_empty).unwrap_or(true) {
            causes.push(Cause::required(&format!("{p}.image")));
        }
        validate_env(c, &p, causes);
    }
}

/// `ValidateDeploymentStrategy`.
fn validate_deployment_strategy(strategy: &Value, causes: &mut Vec<Cause>) {
    match strategy["type"].as_str() {
        Some("Recreate") => {
            if !strategy["rollingUpdate"].is_null() {
                causes.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        Some("RollingUpdate") => validate_rolling_update(&strategy["rollingUpdate"], causes),
        _ => causes.push(Cause::new(
            "spec.strategy.type",
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: \"Recreate\", \"RollingUpdate\"",
                strategy["type"]
            ),
        )),
    }
}

/// `ValidateRollingUpdateDeployment`: both fields an int not below 0 or a
/// percentage; not both 0; `maxUnavailable` (only) at most 100%, so a
/// `maxSurge` of "200%" is valid.
fn validate_rolling_update(ru: &Value, causes: &mut Vec<Cause>) {
    const MU: &str = "spec.strategy.rollingUpdate.maxUnavailable";
    const MS: &str = "spec.strategy.rollingUpdate.maxSurge";
    let (mu, ms) = (&ru["maxUnavailable"], &ru["maxSurge"]);
    positive_int_or_percent(mu, MU, causes);
    positive_int_or_percent(ms, MS, causes);
    if int_or_percent_value(mu) == 0 && int_or_percent_value(ms) == 0 {
        causes.push(Cause::invalid(MU, mu, "may not be 0 when `maxSurge` is 0"));
    }
    if percent_value(mu).is_some_and(|n| n > 100) {
        causes.push(Cause::invalid(MU, mu, "must not be greater than 100%"));
    }
}

/// `ValidateEnv` and `validateEnvVarValueFrom` (pkg/apis/core/validation):
/// one error for a `valueFrom` with no source or with a non-empty `value`,
/// another for several sources, checked in that order.
fn validate_env(c: &Value, p: &str, causes: &mut Vec<Cause>) {
    let Some(env) = c["env"].as_array() else {
        return;
    };
    for (j, e) in env.iter().enumerate() {
        let ep = format!("{p}.env[{j}]");
        if e["name"].as_str().map(str::is_empty).unwrap_or(true) {
            causes.push(Cause::required(&format!("{ep}.name")));
        }
        let Some(vf) = e["valueFrom"].as_object() else {
            continue;
        };
        let vp = format!("{ep}.valueFrom");
        let sources = [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
        ];
        let n = sources
            .iter()
            .filter(|s| vf.get(**s).is_some_and(|v| !v.is_null()))
            .count();
        for r in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(sel) = vf.get(r).filter(|v| !v.is_null()) {
                validate_key_selector(sel, &format!("{vp}.{r}"), causes);
            }
        }
        let has_value = e["value"].as_str().is_some_and(|v| !v.is_empty());
        if n == 0 {
            causes.push(Cause::invalid(&vp, &json!(""), "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
        } else if has_value {
            causes.push(Cause::invalid(
                &vp,
                &json!(""),
                "may not be specified when `value` is not empty",
            ));
        } else if n > 1 {
            causes.push(Cause::invalid(
                &vp,
                &json!(""),
                "may not have more than one field specified at a time",
            ));
        }
    }
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `validateConfigMapKeySelector` / `validateSecretKeySelector`: the name
/// must be a DNS subdomain (so an empty name is Invalid, not Required), the
/// key is required and a valid config key.
fn validate_key_selector(sel: &Value, path: &str, causes: &mut Vec<Cause>) {
    let name = sel["name"].as_str().unwrap_or("");
    if !is_dns_subdomain(name) {
        causes.push(Cause::invalid(
            &format!("{path}.name"),
            &json!(name),
            DNS1123_SUBDOMAIN_MSG,
        ));
    }
    match sel["key"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required(&format!("{path}.key"))),
        k if !is_config_key(k) => causes.push(Cause::invalid(
            &format!("{path}.key"),
            &json!(k),
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        )),
        _ => {}
    }
}

fn is_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        && k != "."
        && k != ".."
        && !k.starts_with("..")
}

fn validate_configmap(obj: &Value, causes: &mut Vec<Cause>) {
    if let Some(data) = obj["data"].as_object() {
        for (k, v) in data {
            let key_ok = !k.is_empty()
                && k.len() <= 253
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
            if !key_ok {
                causes.push(Cause::invalid(
                    &format!("data[{k}]"),
                    &json!(k),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                ));
            }
            if !v.is_string() {
                causes.push(Cause::invalid(&format!("data[{k}]"), v, "must be a string"));
            }
        }
    } else if !obj["data"].is_null() {
        causes.push(Cause::invalid(
            "data",
            &obj["data"],
            "must be a map of strings",
        ));
    }
}

/// `legacyValidateEvent` (pkg/apis/core/validation/events.go), all that
/// `ValidateEventCreate`/`ValidateEventUpdate` check for a core/v1 request:
/// without `eventTime` only the namespaces; with it also the reporting
/// fields (`reportingComponent` being the core/v1 name of
/// `reportingController`), `action`, `reason` and the length limits.
/// `type`, `count` and the timestamps are not checked for core/v1.
fn validate_event(obj: &Value, causes: &mut Vec<Cause>) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let io_ns = obj["involvedObject"]["namespace"].as_str().unwrap_or("");
    let s = |k: &str| obj[k].as_str().unwrap_or("");
    let mismatch = || {
        Cause::invalid(
            "involvedObject.namespace",
            &json!(io_ns),
            "does not match event.namespace",
        )
    };
    if s("eventTime").is_empty() {
        if io_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                causes.push(mismatch());
            }
        } else if ns != io_ns {
            causes.push(mismatch());
        }
    } else {
        if io_ns.is_empty() && ns != "default" && ns != "kube-system" {
            causes.push(mismatch());
        }
        let controller = s("reportingComponent");
        if controller.is_empty() {
            causes.push(Cause::required("reportingComponent"));
        }
        for msg in qualified_name_errors(controller) {
            causes.push(Cause::invalid(
                "reportingComponent",
                &json!(controller),
                &msg,
            ));
        }
        let too_long = |field: &str, limit: usize| {
            Cause::invalid(
                field,
                &json!(""),
                &format!("can have at most {limit} characters"),
            )
        };
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            if s(field).is_empty() {
                causes.push(Cause::required(field));
            }
            if s(field).len() > limit {
                causes.push(too_long(field, limit));
            }
        }
        if s("message").len() > 1024 {
            causes.push(too_long("message", 1024));
        }
    }
    if !is_dns_subdomain(ns) {
        causes.push(Cause::invalid(
            "namespace",
            &json!(ns),
            DNS1123_SUBDOMAIN_MSG,
        ));
    }
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// apimachinery's `IsQualifiedName`, messages included.
fn qualified_name_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if !is_dns_subdomain(prefix) {
                errs.push(format!("prefix part {DNS1123_SUBDOMAIN_MSG}"));
            }
            name
        }
        _ => {
            return vec![format!("a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    let ok = !b.is_empty()
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || b"-_.".contains(c));
    if !ok {
        errs.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    errs
}

fn validate_crd(obj: &mut Value, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if spec["names"]["kind"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced") | Some("Cluster") => {}
        _ => causes.push(Cause::new(
            "spec.scope",
            "FieldValueNotSupported",
            "Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
        )),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    if versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(versions.len()),
            "must have exactly one version marked as storage version",
        ));
    }
    crd_schemas(&versions, causes);
}

/// Each version's schema through the structural rules. The real server first
/// converts to its internal type, which holds one shared schema at
/// `spec.validation` when every version's schema is the same, so errors for a
/// single-version CRD name `spec.validation.openAPIV3Schema`.
fn crd_schemas(versions: &[Value], causes: &mut Vec<Cause>) {
    let schema_of = |v: &Value| v.pointer("/schema/openAPIV3Schema").cloned();
    let shared = versions
        .first()
        .map(schema_of)
        .filter(|first| first.is_some() && versions.iter().all(|v| schema_of(v) == *first));
    let with_status = |v: &Value| v.pointer("/subresources/status").is_some();
    if let Some(Some(s)) = shared {
        let status = versions.iter().any(with_status);
        structural::check_crd_schema(&s, "spec.validation.openAPIV3Schema", status, causes);
        crate::schema::cel::check_rules(&s, "spec.validation.openAPIV3Schema", causes);
        return;
    }
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match schema_of(v) {
            Some(s) => {
                structural::check_crd_schema(&s, &path, with_status(v), causes);
                crate::schema::cel::check_rules(&s, &path, causes);
            }
            None => causes.push(Cause::required_because(&path, "schemas are required")),
        }
    }
}

/// The status the apiextensions controller gives an accepted CRD.
pub fn established_crd_status(crd: &Value, now: &str) -> Value {
    let storage: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
        ],
        "storedVersions": storage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    fn deploy_def() -> ResourceDef {
        Registry::builtin()
            .find("apps", "v1", "deployments")
            .cloned()
            .unwrap()
    }

    fn deploy() -> Value {
        json!({"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
        }})
    }

    #[test]
    fn deployment_defaults() {
        let mut d = deploy();
        prepare(&deploy_def(), &mut d, None, FieldValidation::Ignore).unwrap();
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    }

    #[test]
    fn deployment_rules_the_operator_must_respect() {
        let mut d = deploy();
        d["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}});
        let e = prepare(&deploy_def(), &mut d, None, FieldValidation::Ignore).unwrap_err();
        assert!(
            e.message.contains("spec.strategy.rollingUpdate: Forbidden"),
            "{}",
            e.message
        );

        let mut d = deploy();
        d["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "P", "value": "x", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}}}]);
        let e = prepare(&deploy_def(), &mut d, None, FieldValidation::Ignore).unwrap_err();
        assert!(e.message.contains("env[0].valueFrom"), "{}", e.message);

        let mut d = deploy();
        d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": 0}});
        let e = prepare(&deploy_def(), &mut d, None, FieldValidation::Ignore).unwrap_err();
        assert!(
            e.message.contains("may not be 0 when `maxSurge` is 0"),
            "{}",
            e.message
        );
        assert_eq!(e.code, 422);
    }
}
