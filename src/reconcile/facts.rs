//! What recorded status says against what is observed, asked by several
//! steps of the pass: plain functions of the status and the views, with no
//! plan to write.

use super::observed::{DeploymentView, ModelView};
use crate::model::status::{spec_of, ModelStatus};

/// `hash` is the spec status records as having served last.
pub(super) fn has_served(st: &ModelStatus, hash: &str, name: &str) -> bool {
    spec_of(&st.last_successful_spec, name).is_some_and(|l| l.hash() == hash)
}

/// The Deployment's uid differs from the one status recorded (9.18).
pub(super) fn recreated(old: &ModelStatus, d: &DeploymentView) -> bool {
    old.target_deployment_uid
        .as_deref()
        .is_some_and(|u| !d.uid.is_empty() && u != d.uid)
}

/// The status as it was before a rejected `rollback-to`, once the
/// annotation is gone or back at the request it replaced.
pub(super) fn before_rejection(base: &ModelStatus, m: &ModelView) -> Option<ModelStatus> {
    let snapshot = base.before_rejection.as_ref()?;
    let request = snapshot.rollback_request.as_deref();
    let back = match &m.rollback_to {
        None => true,
        Some(t) => request == Some(format!("manual:{t}").as_str()),
    };
    if !back {
        return None;
    }
    let mut restored = base.clone();
    restored.restore(snapshot.clone());
    Some(restored)
}
