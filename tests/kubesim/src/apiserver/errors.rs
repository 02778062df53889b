//! API errors rendered as real `Status` objects.

use crate::registry::resources::ResourceDef;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct ApiErr {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
    pub retry_after: Option<u64>,
}

/// One field problem inside a 422.
#[derive(Debug, Clone)]
pub struct Cause {
    pub field: String,
    pub reason: &'static str,
    pub message: String,
}

impl Cause {
    pub fn new(
        field: impl Into<String>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Cause {
        Cause {
            field: field.into(),
            reason,
            message: message.into(),
        }
    }
    pub fn invalid(field: &str, value: &Value, why: &str) -> Cause {
        Cause::new(
            field,
            "FieldValueInvalid",
            format!("Invalid value: {}: {why}", show(value)),
        )
    }
    pub fn required(field: &str) -> Cause {
        Cause::new(field, "FieldValueRequired", "Required value")
    }
    /// `field.Required` with a detail, rendered as the real server renders it.
    pub fn required_because(field: &str, why: &str) -> Cause {
        Cause::new(
            field,
            "FieldValueRequired",
            format!("Required value: {why}"),
        )
    }
    /// `field.NotSupported`: `Unsupported value: "x": supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Cause {
        let listed: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause::new(
            field,
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                listed.join(", ")
            ),
        )
    }
    pub fn forbidden(field: &str, why: &str) -> Cause {
        Cause::new(field, "FieldValueForbidden", format!("Forbidden: {why}"))
    }
    pub fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// `ToAggregate().Error()`: one cause as it is, several in brackets.
fn render_causes(causes: &[Cause]) -> String {
    let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
    match rendered.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// How the API server quotes a value inside a message.
pub fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// `configmaps` for the core group, `deployments.apps` otherwise.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiErr {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiErr {
        ApiErr {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
            retry_after: None,
        }
    }

    fn with_details(mut self, def: &ResourceDef, name: &str) -> ApiErr {
        self.details = json!({"name": name, "group": def.group, "kind": def.plural});
        self
    }

    pub fn not_found(def: &ResourceDef, name: &str) -> ApiErr {
        ApiErr::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified(&def.group, &def.plural)),
        )
        .with_details(def, name)
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> ApiErr {
        ApiErr::new(
            409,
            "AlreadyExists",
            format!(
                "{} {name:?} already exists",
                qualified(&def.group, &def.plural)
            ),
        )
        .with_details(def, name)
    }

    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> ApiErr {
        ApiErr::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                qualified(&def.group, &def.plural)
            ),
        )
        .with_details(def, name)
    }

    /// `NewConflict` with the kind as the resource, as `rest.BeforeDelete`
    /// words a failed delete precondition (`Deployment.apps "x"`).
    pub fn conflict_on_kind(def: &ResourceDef, name: &str, why: &str) -> ApiErr {
        let mut e = ApiErr::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                def.qualified_kind()
            ),
        );
        e.details = json!({"name": name, "group": def.group, "kind": def.kind});
        e
    }

    pub fn modified(def: &ResourceDef, name: &str) -> ApiErr {
        ApiErr::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> ApiErr {
        ApiErr::invalid_kind(&def.group, &def.kind, name, causes)
    }

    /// `NewInvalid(schema.GroupKind{Group: group, Kind: kind}, name, errs)`
    /// for a kind that is not a stored resource (`Scale.autoscaling`).
    pub fn invalid_kind(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiErr {
        let body = render_causes(&causes);
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut e = ApiErr::new(
            422,
            "Invalid",
            format!("{qualified} {name:?} is invalid: {body}"),
        );
        e.details = json!({
            "name": name,
            "group": group,
            "kind": kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
        });
        e
    }

    /// `NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: kind}, "", errs)`:
    /// how the server refuses bad `DeleteOptions` or `ListOptions`.
    pub fn invalid_options(kind: &str, causes: Vec<Cause>) -> ApiErr {
        let body = render_causes(&causes);
        let mut e = ApiErr::new(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: {body}"),
        );
        e.details = json!({
            "group": "meta.k8s.io",
            "kind": kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
        });
        e
    }

    pub fn bad_request(msg: impl Into<String>) -> ApiErr {
        ApiErr::new(400, "BadRequest", msg)
    }

    pub fn expired(msg: impl Into<String>) -> ApiErr {
        ApiErr::new(410, "Expired", msg)
    }

    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.details.is_null() {
            s["details"] = self.details.clone();
        }
        if let Some(ra) = self.retry_after {
            s["details"]["retryAfterSeconds"] = json!(ra);
        }
        s
    }
}
