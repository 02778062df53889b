//! What recorded status says against what is observed, asked by several
//! steps of the pass: plain functions of the status and the views, with no
//! plan to write.

use super::observed::{DeploymentView, ModelView};
use crate::model::status::{Field, StatusDoc};
use serde_json::{json, Value};

/// `hash` is the spec status records as having served last.
pub(super) fn has_served(st: &StatusDoc, hash: &str, name: &str) -> bool {
    st.spec(Field::LastSuccessfulSpec, name)
        .is_some_and(|l| l.hash() == hash)
}

/// The Deployment's uid differs from the one status recorded (9.18).
pub(super) fn recreated(old: &StatusDoc, d: &DeploymentView) -> bool {
    old.str(Field::TargetDeploymentUid)
        .is_some_and(|u| !d.uid.is_empty() && u != d.uid)
}

/// What a rejected `rollback-to` replaces (9.3, 9.24), kept in
/// `beforeRejection` so that [`before_rejection`] can restore it.
pub(super) fn rejection_snapshot(b: &StatusDoc) -> Value {
    json!({
        "phase": b.get(Field::Phase),
        "rollbackRequest": b.get(Field::RollbackRequest),
        "conditions": b.get(Field::Conditions),
        "lastEvents": b.get(Field::LastEvents),
    })
}

/// The status as it was before a rejected `rollback-to`, once the
/// annotation is gone or back at the request it replaced.
pub(super) fn before_rejection(base: &StatusDoc, m: &ModelView) -> Option<StatusDoc> {
    let snapshot = base.get(Field::BeforeRejection)?;
    let request = snapshot["rollbackRequest"].as_str();
    let back = match &m.rollback_to {
        None => true,
        Some(t) => request == Some(format!("manual:{t}").as_str()),
    };
    if !back {
        return None;
    }
    let mut restored = base.clone();
    for f in [
        Field::Phase,
        Field::RollbackRequest,
        Field::Conditions,
        Field::LastEvents,
    ] {
        match snapshot.get(f.key()).filter(|v| !v.is_null()) {
            Some(v) => restored.set(f, v.clone()),
            None => restored.clear(f),
        }
    }
    restored.clear(Field::BeforeRejection);
    Some(restored)
}
