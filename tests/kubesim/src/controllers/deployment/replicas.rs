//! The replica arithmetic of upstream's deployment util
//! (pkg/controller/deployment/util: `ResolveFenceposts`,
//! `NewRSNewReplicas`, `GetProportion`, `getReplicaSetFraction`).

use super::*;

/// `intstr.GetScaledValueFromIntOrPercent`: a percentage of `total`,
/// rounded up or down.
pub fn scaled_value(v: &Value, total: i64, round_up: bool) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let x = pct.saturating_mul(total);
            if round_up {
                x.saturating_add(99).div_euclid(100)
            } else {
                x.div_euclid(100)
            }
        }
        _ => 0,
    }
}

/// `ResolveFenceposts`: surge rounds up, unavailable down; both zero makes
/// unavailable 1 so a rollout can progress.
pub fn resolve_fenceposts(surge: &Value, unavailable: &Value, desired: i64) -> (i64, i64) {
    let s = scaled_value(surge, desired, true);
    let u = scaled_value(unavailable, desired, false);
    if s == 0 && u == 0 {
        (0, 1)
    } else {
        (s, u)
    }
}

pub(super) fn replica_count(sets: &[&ReplicaSet]) -> i64 {
    sets.iter().map(|r| r.replicas).sum()
}

/// `NewRSNewReplicas`: how far the new ReplicaSet may grow now.
pub fn new_rs_new_replicas(spec: &Spec, all: &[&ReplicaSet], new_replicas: i64) -> i64 {
    if spec.recreate {
        return spec.replicas;
    }
    let current = replica_count(all);
    let max_total = spec.replicas + spec.max_surge();
    if current >= max_total {
        return new_replicas;
    }
    let up = (max_total - current)
        .min(spec.replicas - new_replicas)
        .max(0);
    new_replicas + up
}

/// `getReplicaSetFraction`: this set's share of a resize, from the size it
/// was made for (`max-replicas`, else the Deployment's status replicas).
pub(super) fn replica_set_fraction(rs: &ReplicaSet, spec: &Spec, status_replicas: i64) -> i64 {
    if spec.replicas == 0 {
        return -rs.replicas;
    }
    let target = spec.replicas + spec.max_surge();
    let annotated = rs
        .max_annotation
        .filter(|m| *m > 0)
        .unwrap_or(status_replicas);
    if annotated <= 0 {
        return 0;
    }
    let size = (rs.replicas * target) as f64 / annotated as f64;
    size.round() as i64 - rs.replicas
}

/// `GetProportion`: the part of `to_add` this set takes, bounded by what
/// is left to add.
pub fn get_proportion(
    rs: &ReplicaSet,
    spec: &Spec,
    status_replicas: i64,
    to_add: i64,
    added: i64,
) -> i64 {
    if rs.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(rs, spec, status_replicas);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}
