//! How a Deployment's progress is judged, as upstream's deployment util
//! does it (pkg/controller/deployment/util: `DeploymentComplete`,
//! `DeploymentProgressing`, `DeploymentTimedOut`) and its conditions kept
//! (`SetDeploymentCondition`, `checkPausedConditions` of progress.go).

use super::*;

/// `DeploymentComplete`: every replica updated and available, nothing
/// old left, and the controller has seen this generation.
pub fn deployment_complete(spec: &Spec, status: &Value) -> bool {
    let n = |k: &str| status[k].as_i64().unwrap_or(0);
    n("updatedReplicas") == spec.replicas
        && n("replicas") == spec.replicas
        && n("availableReplicas") == spec.replicas
        && n("observedGeneration") >= spec.generation
}

/// `DeploymentProgressing`: more updated, fewer old, more ready or more
/// available pods than the last status said.
pub fn deployment_progressing(old: &Value, new: &Value) -> bool {
    let n = |s: &Value, k: &str| s[k].as_i64().unwrap_or(0);
    let old_old = n(old, "replicas") - n(old, "updatedReplicas");
    let new_old = n(new, "replicas") - n(new, "updatedReplicas");
    n(new, "updatedReplicas") > n(old, "updatedReplicas")
        || new_old < old_old
        || n(new, "readyReplicas") > n(old, "readyReplicas")
        || n(new, "availableReplicas") > n(old, "availableReplicas")
}

/// `DeploymentTimedOut`: the Progressing condition's lastUpdateTime plus
/// the deadline is before now; a timeout stays timed out.
pub fn deployment_timed_out(spec: &Spec, status: &Value, wall: SystemTime) -> bool {
    let Some(deadline) = spec.progress_deadline else {
        return false;
    };
    let Some(c) = condition(status, "Progressing") else {
        return false;
    };
    match c["reason"].as_str() {
        Some("NewReplicaSetAvailable") => return false,
        Some("ProgressDeadlineExceeded") => return true,
        _ => {}
    }
    let Some(from) = c["lastUpdateTime"].as_str().and_then(parse_rfc3339) else {
        return false;
    };
    from + Duration::from_secs(deadline.max(0) as u64) < wall
}

/// `checkPausedConditions`: pausing and resuming show on Progressing
/// (status Unknown), unless the rollout has already timed out.
pub fn check_paused_conditions(spec: &Spec, status: &mut Value, wall: SystemTime) {
    if spec.progress_deadline.is_none() {
        return;
    }
    let reason =
        condition(status, "Progressing").and_then(|c| c["reason"].as_str().map(str::to_string));
    if reason.as_deref() == Some("ProgressDeadlineExceeded") {
        return;
    }
    let paused_shown = reason.as_deref() == Some("DeploymentPaused");
    if spec.paused && !paused_shown {
        set_condition(
            status,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused",
            wall,
        );
    } else if !spec.paused && paused_shown {
        set_condition(
            status,
            "Progressing",
            "Unknown",
            "DeploymentResumed",
            "Deployment is resumed",
            wall,
        );
    }
}

pub(super) fn condition(status: &Value, ty: &str) -> Option<Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

pub(super) fn condition_mut<'a>(status: &'a mut Value, ty: &str) -> Option<&'a mut Value> {
    status["conditions"]
        .as_array_mut()?
        .iter_mut()
        .find(|c| c["type"] == ty)
}

pub(super) fn remove_condition(status: &mut Value, ty: &str) {
    if let Some(cs) = status["conditions"].as_array_mut() {
        cs.retain(|c| c["type"] != ty);
    }
}

/// `SetDeploymentCondition`: the same status and reason change nothing
/// (not even lastUpdateTime); the same status keeps lastTransitionTime; the
/// condition moves to the end.
pub fn set_condition(
    status: &mut Value,
    ty: &str,
    st: &str,
    reason: &str,
    message: &str,
    wall: SystemTime,
) {
    let now = rfc3339(wall);
    let current = condition(status, ty);
    if current
        .as_ref()
        .is_some_and(|c| c["status"] == st && c["reason"] == reason)
    {
        return;
    }
    let transition = current
        .filter(|c| c["status"] == st)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now));
    remove_condition(status, ty);
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    if let Some(cs) = status["conditions"].as_array_mut() {
        cs.push(json!({"type": ty, "status": st, "lastUpdateTime": now, "lastTransitionTime": transition,
                       "reason": reason, "message": message}));
    }
}

/// Zero counts are omitted, as the real API server serialises them.
pub(super) fn prune_zero_counts(mut status: Value) -> Value {
    if let Some(m) = status.as_object_mut() {
        let zero: Vec<String> = m
            .iter()
            .filter(|(k, v)| k.as_str() != "observedGeneration" && v.as_i64() == Some(0))
            .map(|(k, _)| k.clone())
            .collect();
        for k in zero {
            m.remove(&k);
        }
        if m.get("conditions")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            m.remove("conditions");
        }
    }
    status
}
