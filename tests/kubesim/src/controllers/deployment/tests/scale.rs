//! `TestScale` and `TestCleanupDeployment` of upstream's
//! pkg/controller/deployment/sync_test.go, row for row.

use super::*;

/// A TestScale row: sets newest first as (name, replicas, desired-replicas
/// annotation, available); `new` names the set of the current template.
struct ScaleRow {
    name: &'static str,
    replicas: i64,
    surge: i64,
    unavailable: i64,
    /// The old Deployment's maxSurge, for the max-replicas annotation.
    old_surge: i64,
    new: Option<&'static str>,
    sets: Vec<(&'static str, i64, i64, i64)>,
    want: Vec<i64>,
}

fn run_scale(row: &ScaleRow) -> Vec<i64> {
    let d = dep(row.replicas, json!(row.surge), json!(row.unavailable));
    let n = row.sets.len() as u64;
    let sets = row
        .sets
        .iter()
        .enumerate()
        .map(|(i, (name, replicas, desired, available))| {
            let mut r = rs(name, *replicas, *replicas, *available, n - i as u64);
            r.desired_annotation = Some(*desired);
            let old = Spec::from_deployment(&dep(*desired, json!(row.old_surge), json!(0)));
            r.max_annotation = Some(desired + old.max_surge());
            r
        })
        .collect();
    let mut s = state(sets);
    let c = ctx(&d, row.new.unwrap_or("none"), SystemTime::now());
    let total: i64 = row.sets.iter().map(|x| x.1).sum();
    let new = row.new.and_then(|h| s.new_index(h));
    s.scale(&c, new, &json!({"replicas": total}));
    row.sets
        .iter()
        .map(|(name, ..)| {
            s.sets
                .iter()
                .find(|r| r.name == *name)
                .map(|r| r.replicas)
                .unwrap_or(-1)
        })
        .collect()
}

/// A TestScale row with no surge and no unavailability allowed.
fn scale_row(
    name: &'static str,
    replicas: i64,
    new: Option<&'static str>,
    sets: Vec<(&'static str, i64, i64, i64)>,
    want: Vec<i64>,
) -> ScaleRow {
    ScaleRow {
        name,
        replicas,
        surge: 0,
        unavailable: 0,
        old_surge: 0,
        new,
        sets,
        want,
    }
}

/// TestScale's rows, in its order.
fn scale_rows() -> Vec<ScaleRow> {
    let mut rows = scaling_event_rows();
    rows.extend(scale_rows_to_and_from_nothing());
    rows.extend(scale_rows_with_surge());
    rows
}

/// A plain resize, and proportional scaling with its leftover distribution.
fn scaling_event_rows() -> Vec<ScaleRow> {
    vec![
        scale_row(
            "normal scaling event: 10 -> 12",
            12,
            Some("v1"),
            vec![("v1", 10, 10, 10)],
            vec![12],
        ),
        scale_row(
            "normal scaling event: 10 -> 5",
            5,
            Some("v1"),
            vec![("v1", 10, 10, 10)],
            vec![5],
        ),
        scale_row(
            "proportional scaling: 5 -> 10",
            10,
            Some("v2"),
            vec![("v2", 2, 5, 2), ("v1", 3, 5, 3)],
            vec![4, 6],
        ),
        scale_row(
            "proportional scaling: 5 -> 3",
            3,
            Some("v2"),
            vec![("v2", 2, 5, 2), ("v1", 3, 5, 3)],
            vec![1, 2],
        ),
        scale_row(
            "proportional scaling: 9 -> 4",
            4,
            Some("v2"),
            vec![("v2", 8, 9, 8), ("v1", 1, 9, 1)],
            vec![4, 0],
        ),
        scale_row(
            "proportional scaling: 7 -> 10",
            10,
            Some("v3"),
            vec![("v3", 2, 7, 2), ("v2", 3, 7, 3), ("v1", 2, 7, 2)],
            vec![3, 4, 3],
        ),
        scale_row(
            "proportional scaling: 13 -> 8",
            8,
            Some("v3"),
            vec![("v3", 2, 13, 2), ("v2", 8, 13, 8), ("v1", 3, 13, 3)],
            vec![1, 5, 2],
        ),
        scale_row(
            "leftover distribution: 3 -> 4",
            4,
            Some("v3"),
            vec![("v3", 1, 3, 1), ("v2", 1, 3, 1), ("v1", 1, 3, 1)],
            vec![2, 1, 1],
        ),
        scale_row(
            "leftover distribution: 3 -> 2",
            2,
            Some("v3"),
            vec![("v3", 1, 3, 1), ("v2", 1, 3, 1), ("v1", 1, 3, 1)],
            vec![1, 1, 0],
        ),
    ]
}

/// No new set, scaling to and from 0, a failed update, size and template
/// changed together.
fn scale_rows_to_and_from_nothing() -> Vec<ScaleRow> {
    vec![
        scale_row(
            "proportional scaling (no new rs): 4 -> 5",
            5,
            None,
            vec![("v2", 2, 4, 2), ("v1", 2, 4, 2)],
            vec![3, 2],
        ),
        scale_row(
            "proportional scaling: 6 -> 0",
            0,
            Some("v3"),
            vec![("v3", 3, 6, 3), ("v2", 2, 6, 2), ("v1", 1, 6, 1)],
            vec![0, 0, 0],
        ),
        scale_row(
            "proportional scaling: 0 -> 6",
            6,
            Some("v3"),
            vec![("v3", 0, 6, 0), ("v2", 0, 6, 0), ("v1", 0, 6, 0)],
            vec![6, 0, 0],
        ),
        scale_row(
            "failed rs update",
            5,
            Some("v3"),
            vec![("v3", 2, 5, 2), ("v2", 1, 3, 1), ("v1", 1, 5, 1)],
            vec![2, 2, 1],
        ),
        scale_row(
            "change both size and template",
            14,
            None,
            vec![("v2", 7, 10, 7), ("v1", 3, 10, 3)],
            vec![10, 4],
        ),
    ]
}

/// Rows with maxSurge (and maxUnavailable) set, old and new.
fn scale_rows_with_surge() -> Vec<ScaleRow> {
    vec![
        ScaleRow {
            surge: 2,
            old_surge: 2,
            ..scale_row(
                "deployment with surge pods",
                20,
                Some("v2"),
                vec![("v2", 6, 10, 6), ("v1", 6, 10, 6)],
                vec![11, 11],
            )
        },
        ScaleRow {
            surge: 6,
            old_surge: 3,
            ..scale_row(
                "change both surge and size",
                50,
                Some("v2"),
                vec![("v2", 5, 10, 5), ("v1", 8, 10, 8)],
                vec![22, 34],
            )
        },
        ScaleRow {
            surge: 1,
            unavailable: 1,
            old_surge: 1,
            ..scale_row(
                "saturated but broken new replica set does not affect old pods",
                2,
                Some("v2"),
                vec![("v2", 2, 2, 0), ("v1", 1, 2, 1)],
                vec![2, 1],
            )
        },
    ]
}

#[test]
fn test_scale() {
    for r in &scale_rows() {
        assert_eq!(run_scale(r), r.want, "{}", r.name);
    }
}

/// Sets (name, spec replicas, pods, revision).
type CleanupSets = Vec<(&'static str, i64, i64, i64)>;

/// TestCleanupDeployment's rows: sets, limit, the sets that go.
fn cleanup_rows() -> Vec<(CleanupSets, i64, Vec<&'static str>)> {
    vec![
        (
            vec![("foo-1", 0, 0, 1), ("foo-2", 0, 0, 2), ("foo-3", 0, 0, 3)],
            1,
            vec!["foo-1", "foo-2"],
        ),
        (
            vec![
                ("foo-1", 0, 0, 1),
                ("foo-2", 0, 1, 2),
                ("foo-3", 1, 0, 3),
                ("foo-4", 1, 1, 4),
            ],
            0,
            vec!["foo-1"],
        ),
        (
            vec![("foo-1", 0, 0, 1), ("foo-2", 0, 0, 2)],
            0,
            vec!["foo-1", "foo-2"],
        ),
        (vec![("foo-1", 1, 1, 1), ("foo-2", 1, 1, 2)], 0, vec![]),
        (
            vec![("foo-1", 0, 0, 1), ("foo-2", 0, 0, 2), ("foo-3", 0, 0, 3)],
            2147483647,
            vec![],
        ),
        // cleanupDeploymentOrder: by revision, a missing one counting 0.
        (
            vec![("foo-1", 0, 0, 2), ("foo-2", 0, 0, 1)],
            1,
            vec!["foo-2"],
        ),
        (
            vec![("foo-1", 0, 0, 1), ("foo-2", 0, 0, 0)],
            1,
            vec!["foo-2"],
        ),
        (
            vec![("foo-1", 1, 1, 1), ("foo-2", 0, 0, 2), ("foo-3", 0, 0, 3)],
            1,
            vec!["foo-2"],
        ),
        (
            vec![("foo-1", 1, 1, 1), ("foo-2", 1, 1, 2), ("foo-3", 0, 0, 3)],
            1,
            vec![],
        ),
        (
            vec![
                ("foo-1", 0, 0, 3),
                ("foo-2", 0, 0, 1),
                ("foo-3", 0, 0, 4),
                ("foo-4", 0, 0, 2),
            ],
            2,
            vec!["foo-2", "foo-4"],
        ),
    ]
}

#[test]
fn test_cleanup_deployment() {
    let rows = cleanup_rows();
    for (sets, limit, gone) in rows {
        let mut d = dep(1, json!(1), json!(0));
        d["spec"]["revisionHistoryLimit"] = json!(limit);
        let made: Vec<ReplicaSet> = sets
            .iter()
            .enumerate()
            .map(|(i, (name, spec, pods, revision))| {
                let mut r = rs(name, *spec, *pods, *pods, i as u64 + 1);
                r.revision = *revision;
                r
            })
            .collect();
        let mut s = state(made);
        s.cleanup(&ctx(&d, "current", SystemTime::now()));
        let left: Vec<&str> = s.sets.iter().map(|r| r.name.as_str()).collect();
        let want: Vec<&str> = sets
            .iter()
            .map(|x| x.0)
            .filter(|n| !gone.contains(n))
            .collect();
        assert_eq!(left, want, "{sets:?} limit {limit}");
    }
}
