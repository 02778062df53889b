//! Deployments as the real registry strategy defaults and validates them
//! (pkg/apis/apps/v1 `SetDefaults_Deployment`, pkg/apis/apps/validation
//! `ValidateDeploymentSpec`), with the pod template fields that matter to us.

use super::*;

pub(super) fn default_deployment(obj: &mut Value) {
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
pub(super) fn validate_deployment(obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
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
