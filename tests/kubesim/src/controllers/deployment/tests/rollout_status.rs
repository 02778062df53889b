//! `TestSyncRolloutStatus` of upstream's
//! pkg/controller/deployment/progress_test.go, row for row.

use super::*;

/// The time of TestSyncRolloutStatus's conditions.
const TEST_TIME: &str = "2017-02-15T18:49:00Z";

fn progressing_cond(st: &str, reason: &str) -> Value {
    json!({"type": "Progressing", "status": st, "reason": reason,
    "lastUpdateTime": TEST_TIME, "lastTransitionTime": TEST_TIME})
}

/// An old set scaled down and a new one rolling.
fn bar_foo() -> Vec<ReplicaSet> {
    vec![rs("bar", 0, 1, 1, 1), rs("foo", 3, 2, 2, 2)]
}

/// A TestSyncRolloutStatus row: name, progressDeadlineSeconds, (replicas,
/// status replicas, updated, available), the old condition, the sets, the
/// new set, the Progressing condition (status, reason) afterwards.
type RolloutStatusRow = (
    &'static str,
    i64,
    (i64, i64, i64, i64),
    Option<Value>,
    Vec<ReplicaSet>,
    Option<&'static str>,
    Option<(&'static str, &'static str)>,
);

/// TestSyncRolloutStatus's rows, in its order.
fn rollout_status_rows() -> Vec<RolloutStatusRow> {
    let mut rows = rollout_status_rows_while_progressing();
    rows.extend(rollout_status_rows_complete_or_timed_out());
    rows
}

/// No deadline, a lone set, and rollouts still progressing.
fn rollout_status_rows_while_progressing() -> Vec<RolloutStatusRow> {
    vec![
        (
            "no deadline: no condition",
            2147483647,
            (3, 2, 2, 2),
            Some(progressing_cond("True", "ReplicaSetUpdated")),
            bar_foo(),
            Some("foo"),
            None,
        ),
        (
            "only one active set, no new one",
            60,
            (3, 3, 3, 3),
            Some(progressing_cond("True", "NewReplicaSetAvailable")),
            vec![rs("bar", 3, 3, 3, 1)],
            None,
            Some(("True", "NewReplicaSetAvailable")),
        ),
        (
            "progressing, already True",
            60,
            (3, 2, 2, 2),
            Some(progressing_cond("True", "ReplicaSetUpdated")),
            bar_foo(),
            Some("foo"),
            Some(("True", "ReplicaSetUpdated")),
        ),
        (
            "progressing clears a timeout",
            60,
            (3, 2, 2, 2),
            Some(progressing_cond("False", "ProgressDeadlineExceeded")),
            bar_foo(),
            Some("foo"),
            Some(("True", "ReplicaSetUpdated")),
        ),
        (
            "progressing, no condition yet",
            60,
            (3, 2, 2, 2),
            None,
            bar_foo(),
            Some("foo"),
            Some(("True", "ReplicaSetUpdated")),
        ),
    ]
}

/// Rollouts complete, and rollouts past their deadline.
fn rollout_status_rows_complete_or_timed_out() -> Vec<RolloutStatusRow> {
    vec![
        (
            "complete, was True",
            60,
            (3, 3, 3, 3),
            Some(progressing_cond("True", "ReplicaSetUpdated")),
            vec![rs("foo", 3, 3, 3, 1)],
            Some("foo"),
            Some(("True", "NewReplicaSetAvailable")),
        ),
        (
            "complete, was timed out",
            60,
            (3, 3, 3, 3),
            Some(progressing_cond("False", "ProgressDeadlineExceeded")),
            vec![rs("foo", 3, 3, 3, 1)],
            Some("foo"),
            Some(("True", "NewReplicaSetAvailable")),
        ),
        (
            "complete, no condition yet",
            60,
            (3, 3, 3, 3),
            None,
            vec![rs("foo", 3, 3, 3, 1)],
            Some("foo"),
            Some(("True", "NewReplicaSetAvailable")),
        ),
        (
            "times out",
            60,
            (3, 2, 2, 2),
            Some(progressing_cond("True", "ReplicaSetUpdated")),
            vec![rs("foo", 3, 2, 2, 1)],
            Some("foo"),
            Some(("False", "ProgressDeadlineExceeded")),
        ),
        (
            "stays timed out",
            60,
            (3, 2, 2, 2),
            Some(progressing_cond("False", "ProgressDeadlineExceeded")),
            vec![rs("foo", 3, 2, 2, 1)],
            Some("foo"),
            Some(("False", "ProgressDeadlineExceeded")),
        ),
    ]
}

/// `TestSyncRolloutStatus`: (old status, old condition, sets (name, spec,
/// pods, available), the new set) → the Progressing condition afterwards.
#[test]
fn test_sync_rollout_status() {
    let rows = rollout_status_rows();
    let wall = at(TEST_TIME) + Duration::from_secs(3600);
    for (name, pds, (r, replicas, updated, available), old_cond, sets, new, want) in rows {
        let mut d = dep(r, json!(1), json!(0));
        d["spec"]["progressDeadlineSeconds"] = json!(pds);
        let mut old = status(replicas, updated, available, available);
        old["observedGeneration"] = json!(1);
        if let Some(c) = &old_cond {
            old["conditions"] = json!([c]);
        }
        let s = state(sets);
        let c = ctx(&d, new.unwrap_or("none"), wall);
        let got = s.sync_rollout_status(&c, new.and_then(|h| s.new_index(h)), &old);
        let progressing = condition(&got, "Progressing");
        let seen = progressing.as_ref().map(|p| {
            (
                p["status"].as_str().unwrap_or(""),
                p["reason"].as_str().unwrap_or(""),
            )
        });
        assert_eq!(seen, want, "{name}: {got:#}");
        // Progress keeps lastTransitionTime only when Progressing was already True.
        if name == "progressing, already True" {
            assert_eq!(
                progressing
                    .as_ref()
                    .map(|p| p["lastTransitionTime"].clone()),
                Some(json!(TEST_TIME))
            );
            assert_ne!(
                progressing.as_ref().map(|p| p["lastUpdateTime"].clone()),
                Some(json!(TEST_TIME))
            );
        }
    }
}
