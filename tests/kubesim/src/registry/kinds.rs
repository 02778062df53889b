//! Per-kind defaulting and validation, as the real registry strategies do
//! it for the fields that matter to us: object metadata, Deployments,
//! ConfigMaps, Events, CRDs, and custom resources through their schema.

use crate::apiserver::errors::{ApiErr, Cause};
use crate::registry::resources::ResourceDef;
use crate::schema;
use crate::schema::structural;
use serde_json::{json, Value};

mod deployment;
use deployment::{default_deployment, validate_deployment};

mod lease;
use lease::{decode_lease, validate_lease};
pub use lease::{is_micro_time, micro_time_utc};

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

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        if m.get(key).map(Value::is_null).unwrap_or(true) {
            m.insert(key.to_string(), v);
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
