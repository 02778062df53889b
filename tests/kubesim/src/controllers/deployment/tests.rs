//! The upstream Deployment controller's table tests, replayed through
//! kubesim (rows from `deployment_util_test.go`, `sync_test.go`,
//! `rolling_test.go`, `progress_test.go`: their inputs and expected outputs;
//! the test code is ours), then whole rollouts for the rules the tables do
//! not reach (paused, minReadySeconds, deadlines, Recreate, history).

use super::*;
use std::cell::Cell;

mod rollout_status;
mod scale;

fn never(_: &Value) -> PodOutcome {
    PodOutcome::NeverReady
}

/// An apps/v1 Deployment; the upstream helper's defaults are surge 0 and
/// unavailable 0 (which resolve to 0 and 1).
fn dep(replicas: i64, surge: Value, unavailable: Value) -> Value {
    json!({
        "metadata": {"name": "foo", "generation": 1},
        "spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
            "template": {"spec": {"containers": [{"name": "c"}]}}},
    })
}

fn recreate(replicas: i64) -> Value {
    let mut d = dep(replicas, json!(0), json!(0));
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    d
}

/// A ReplicaSet of `spec` replicas with `pods` pods, `available` of them
/// available; its hash is its name.
fn rs(name: &str, spec: i64, pods: i64, available: i64, created: u64) -> ReplicaSet {
    let st = RsStatus {
        replicas: pods,
        ready: available,
        available,
    };
    ReplicaSet::with_status(name, spec, st, created)
}

fn ctx<'a>(d: &'a Value, hash: &str, wall: SystemTime) -> Ctx<'a> {
    Ctx {
        deployment: d,
        spec: Spec::from_deployment(d),
        name: "foo".into(),
        hash: hash.into(),
        now: Instant::now(),
        wall,
        outcome: &never,
    }
}

fn state(sets: Vec<ReplicaSet>) -> State {
    let seq = sets.iter().map(|r| r.created).max().unwrap_or(0);
    State { sets, seq }
}

#[test]
fn test_resolve_fenceposts() {
    let rows = [
        (json!("0%"), json!("0%"), 0, (0, 1)),
        (json!("39%"), json!("39%"), 10, (4, 3)),
        (Value::Null, json!("39%"), 10, (0, 3)),
        (json!("39%"), Value::Null, 10, (4, 0)),
        (Value::Null, Value::Null, 10, (0, 1)),
    ];
    for (surge, unavailable, desired, want) in rows {
        assert_eq!(
            resolve_fenceposts(&surge, &unavailable, desired),
            want,
            "{surge} {unavailable}"
        );
    }
}

#[test]
fn test_max_unavailable_and_min_available() {
    // (replicas, maxUnavailable, MaxUnavailable, MinAvailable); maxSurge 1.
    let rows = [
        (10, json!(5), 5, 5),
        (10, json!(10), 10, 0),
        (5, json!(10), 5, 0),
        (0, json!(10), 0, 0),
        (10, json!("50%"), 5, 5),
        (10, json!("60%"), 6, 4),
        (10, json!("100%"), 10, 0),
        (5, json!("100%"), 5, 0),
    ];
    for (r, mu, max_unavailable, min_available) in rows {
        let s = Spec::from_deployment(&dep(r, json!(1), mu.clone()));
        assert_eq!(s.max_unavailable(), max_unavailable, "{r} {mu}");
        assert_eq!(s.replicas - s.max_unavailable(), min_available, "{r} {mu}");
    }
    assert_eq!(Spec::from_deployment(&recreate(10)).max_unavailable(), 0);
}

#[test]
fn test_new_rs_new_replicas() {
    // allRSs is one ReplicaSet of 5; the new set is not in it.
    let other = rs("other", 5, 5, 5, 1);
    let rows = [
        (
            "can not scale up - to newRSReplicas",
            dep(1, json!(1), json!(1)),
            5,
            5,
        ),
        (
            "scale up - to depReplicas",
            dep(6, json!(10), json!(1)),
            2,
            6,
        ),
        ("recreate - to depReplicas", recreate(3), 1, 3),
    ];
    for (name, d, new, want) in rows {
        let got = new_rs_new_replicas(&Spec::from_deployment(&d), &[&other], new);
        assert_eq!(got, want, "{name}");
    }
}

fn status(replicas: i64, updated: i64, ready: i64, available: i64) -> Value {
    json!({"observedGeneration": 0, "replicas": replicas, "updatedReplicas": updated,
           "readyReplicas": ready, "availableReplicas": available})
}

#[test]
fn test_deployment_complete() {
    // (desired, replicas, updated, available, maxUnavailable, maxSurge)
    let rows = [
        (
            "min but not all pods become available",
            (5, 5, 5, 4, 1, 0),
            false,
        ),
        ("min availability is not honored", (5, 5, 5, 3, 1, 0), false),
        ("complete", (5, 5, 5, 5, 0, 0), true),
        (
            "all pods are available but not updated",
            (5, 5, 4, 5, 0, 0),
            false,
        ),
        ("still running old pods", (1, 2, 1, 1, 0, 1), false),
        (
            "one replica deployment never comes up",
            (1, 1, 1, 0, 1, 1),
            false,
        ),
    ];
    for (name, (r, replicas, updated, available, mu, ms), want) in rows {
        let mut d = dep(r, json!(ms), json!(mu));
        d["metadata"]["generation"] = json!(0);
        let st = status(replicas, updated, available, available);
        assert_eq!(
            deployment_complete(&Spec::from_deployment(&d), &st),
            want,
            "{name}"
        );
    }
}

#[test]
fn test_deployment_progressing() {
    let rows = [
        ("updated pods", (10, 4, 4, 4), (10, 6, 4, 4), true),
        ("not progressing", (10, 4, 4, 4), (10, 4, 4, 4), false),
        ("old pods removed", (10, 4, 6, 6), (8, 4, 6, 6), true),
        ("less new pods", (10, 7, 3, 3), (10, 6, 3, 3), false),
        (
            "less overall but more new pods",
            (10, 4, 7, 7),
            (8, 8, 5, 5),
            true,
        ),
        ("more ready pods", (10, 10, 9, 8), (10, 10, 10, 8), true),
        (
            "more available pods",
            (10, 10, 10, 9),
            (10, 10, 10, 10),
            true,
        ),
    ];
    for (name, o, n, want) in rows {
        let (old, new) = (status(o.0, o.1, o.2, o.3), status(n.0, n.1, n.2, n.3));
        assert_eq!(deployment_progressing(&old, &new), want, "{name}");
    }
}

fn at(s: &str) -> SystemTime {
    parse_rfc3339(s).expect("a timestamp")
}

#[test]
fn test_deployment_timed_out() {
    let now = at("2016-01-01T00:01:20Z");
    let rows = [
        (
            "infinite progressDeadlineSeconds",
            "ReplicaSetUpdated",
            "2016-01-01T00:01:09Z",
            2147483647,
            false,
        ),
        (
            "10s, 11s since the last update",
            "ReplicaSetUpdated",
            "2016-01-01T00:01:09Z",
            10,
            true,
        ),
        (
            "10s, 9s since the last update",
            "ReplicaSetUpdated",
            "2016-01-01T00:01:11Z",
            10,
            false,
        ),
        (
            "previous status was a complete deployment",
            "NewReplicaSetAvailable",
            "2016-01-01T00:01:09Z",
            10,
            false,
        ),
    ];
    for (name, reason, updated, pds, want) in rows {
        let mut d = dep(1, json!(1), json!(0));
        d["spec"]["progressDeadlineSeconds"] = json!(pds);
        let st = json!({"conditions": [{"type": "Progressing", "status": "True", "reason": reason, "lastUpdateTime": updated}]});
        assert_eq!(
            deployment_timed_out(&Spec::from_deployment(&d), &st, now),
            want,
            "{name}"
        );
    }
}

#[test]
fn test_get_replica_set_fraction() {
    // (replicas, maxSurge, deployment status.replicas, set replicas, max-replicas annotation, fraction)
    let rows = [
        (
            "empty deployment always scales to 0",
            (0, 0, 0, 10, None),
            -10,
        ),
        ("unsynced, max-replicas missing", (10, 0, 0, 5, None), 0),
        ("unsynced, max-replicas 0", (10, 0, 0, 5, Some(0)), 0),
        ("up by 1/5, annotation missing", (120, 0, 100, 50, None), 10),
        ("up by 1/5, annotation 0", (120, 0, 100, 50, Some(0)), 10),
        ("up by 1/5", (120, 0, 0, 50, Some(100)), 10),
        (
            "up with maxSurge by about 1/5",
            (120, 10, 0, 50, Some(110)),
            9,
        ),
        ("down by 1/6", (10, 0, 0, 6, Some(12)), -1),
        (
            "down with maxSurge by about 1/6",
            (100, 10, 0, 50, Some(130)),
            -8,
        ),
    ];
    for (name, (r, surge, status_replicas, size, max), want) in rows {
        let spec = Spec::from_deployment(&dep(r, json!(surge), json!(1)));
        let mut set = rs("x", size, size, size, 1);
        set.max_annotation = max;
        assert_eq!(
            replica_set_fraction(&set, &spec, status_replicas),
            want,
            "{name}"
        );
    }
}

#[test]
fn test_reconcile_new_replica_set() {
    // (replicas, maxSurge, old, new, scaled, new afterwards); maxUnavailable 0.
    let rows = [
        (10, 0, 10, 0, false, 0),
        (10, 2, 10, 0, true, 2),
        (10, 2, 5, 0, true, 7),
        (10, 2, 10, 2, false, 2),
        (10, 2, 2, 11, true, 10),
    ];
    for (r, surge, old, new, scaled, want) in rows {
        let d = dep(r, json!(surge), json!(0));
        let mut s = state(vec![
            rs("old", old, old, old, 1),
            rs("new", new, new, new, 2),
        ]);
        let c = ctx(&d, "new", SystemTime::now());
        assert_eq!(
            s.reconcile_new_replica_set(&c, 1),
            scaled,
            "{r} {surge} {old} {new}"
        );
        assert_eq!(s.sets[1].replicas, want);
    }
}

#[test]
fn test_reconcile_old_replica_sets() {
    // (replicas, maxUnavailable, old, new, old available, new available, scaled, old afterwards); maxSurge 0.
    let rows = [
        (10, 0, 10, 0, 10, 0, true, 9),
        (10, 2, 10, 0, 10, 0, true, 8),
        (10, 2, 10, 0, 8, 0, true, 8),
        (10, 2, 10, 0, 9, 0, true, 8),
        (10, 2, 8, 2, 8, 0, false, 8),
    ];
    for (r, mu, old, new, old_avail, new_avail, scaled, want) in rows {
        let d = dep(r, json!(0), json!(mu));
        let mut s = state(vec![
            rs("old", old, old, old_avail, 1),
            rs("new", new, new, new_avail, 2),
        ]);
        let c = ctx(&d, "new", SystemTime::now());
        assert_eq!(
            s.reconcile_old_replica_sets(&c, 1),
            scaled,
            "{r} {mu} {old} {old_avail}"
        );
        assert_eq!(s.sets[0].replicas, want, "{r} {mu} {old} {old_avail}");
    }
}

#[test]
fn test_cleanup_unhealthy_replicas() {
    // One old set of 10; (available, maxCleanup, cleaned up).
    for (available, max, want) in [(8, 1, 1), (8, 3, 2), (8, 0, 0), (10, 3, 0)] {
        let d = dep(10, json!(2), json!(2));
        let mut s = state(vec![rs("old", 10, 10, available, 1)]);
        let c = ctx(&d, "new", SystemTime::now());
        assert_eq!(s.cleanup_unhealthy_replicas(&c, &[0], max), want);
    }
}

#[test]
fn test_scale_down_old_replica_sets_for_rolling_update() {
    // (replicas, maxUnavailable, available, old, scaled down by); maxSurge 0.
    for (r, mu, available, old, want) in [
        (10, 0, 10, 10, 1),
        (10, 2, 10, 10, 2),
        (10, 2, 8, 10, 0),
        (10, 2, 10, 0, 0),
        (10, 2, 1, 10, 0),
    ] {
        let d = dep(r, json!(0), json!(mu));
        let mut s = state(vec![rs("old", old, available, available, 1)]);
        let c = ctx(&d, "new", SystemTime::now());
        assert_eq!(
            s.scale_down_old_for_rolling_update(&c, &[0]),
            want,
            "{r} {mu} {available} {old}"
        );
        assert_eq!(s.sets[0].replicas, old - want);
    }
}

/// `calculateStatus`: unavailable counts the sets' replicas, surge pods
/// included, minus available ones (the old kubesim said desired - ready).
#[test]
fn surge_pod_that_never_gets_ready_is_unavailable() {
    let d = dep(1, json!(1), json!(0));
    let s = state(vec![rs("old", 1, 1, 1, 1), rs("new", 1, 1, 0, 2)]);
    let c = ctx(&d, "new", SystemTime::now());
    let st = prune_zero_counts(s.calculate_status(&c, Some(1), &json!({})));
    assert_eq!(
        (
            st["replicas"].clone(),
            st["updatedReplicas"].clone(),
            st["availableReplicas"].clone(),
            st["unavailableReplicas"].clone()
        ),
        (json!(2), json!(1), json!(1), json!(1))
    );
}

fn preload(d: &mut Value, v: &str) {
    d["spec"]["template"]["metadata"]["annotations"]["v"] = json!(v);
    let g = d["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
    d["metadata"]["generation"] = json!(g);
}

fn progressing_of(d: &Value) -> (String, String) {
    let c = condition(&d["status"], "Progressing").unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
    )
}

fn run(r: &mut Rollouts<impl Fn(&Value) -> PodOutcome>, d: &mut Value, seconds: u64) {
    for _ in 0..seconds {
        d["status"] = r.step(d, Duration::from_secs(1));
    }
}

/// Ready after 2 s unless the template's annotation `v` says "bad".
fn outcome(t: &Value) -> PodOutcome {
    if t["metadata"]["annotations"]["v"] == "bad" {
        PodOutcome::NeverReady
    } else {
        PodOutcome::ReadyAfter(Duration::from_secs(2))
    }
}

/// `checkPausedConditions` and `sync` while paused: no new ReplicaSet, no
/// deadline; resuming restarts the deadline and the rollout.
#[test]
fn a_paused_deployment_neither_rolls_nor_times_out() {
    let mut r = Rollouts::new(outcome);
    let mut d = dep(2, json!(1), json!(0));
    d["spec"]["progressDeadlineSeconds"] = json!(5);
    run(&mut r, &mut d, 5);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
    d["spec"]["paused"] = json!(true);
    preload(&mut d, "v2");
    run(&mut r, &mut d, 20);
    assert_eq!(
        progressing_of(&d),
        ("Unknown".into(), "DeploymentPaused".into())
    );
    assert_eq!(r.state.sets.len(), 1, "no new ReplicaSet while paused");
    assert_eq!(
        d["status"]["observedGeneration"],
        d["metadata"]["generation"]
    );
    d["spec"]["paused"] = json!(false);
    d["status"] = r.step(&d, Duration::from_millis(10));
    assert_eq!(r.state.sets.len(), 2, "the rollout starts on resume");
    run(&mut r, &mut d, 10);
    assert_eq!(
        progressing_of(&d).1,
        "NewReplicaSetAvailable",
        "{:#}",
        d["status"]
    );
}

/// `IsPodAvailable`: a ready pod counts as available only after minReadySeconds.
#[test]
fn min_ready_seconds_delays_availability() {
    let mut r = Rollouts::new(outcome);
    let mut d = dep(1, json!(1), json!(0));
    d["spec"]["minReadySeconds"] = json!(4);
    // The pod is ready at 3 s and available once 4 s have passed since.
    run(&mut r, &mut d, 7);
    assert_eq!(d["status"]["readyReplicas"], 1);
    let available = d["status"].get("availableReplicas");
    assert!(available.is_none(), "{:#}", d["status"]);
    assert_eq!(progressing_of(&d).1, "ReplicaSetUpdated");
    run(&mut r, &mut d, 1);
    assert_eq!(d["status"]["availableReplicas"], 1);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
}

/// `DeploymentTimedOut` counts from the last progress; a timeout stays
/// through spec writes that are not progress, and real progress clears it.
#[test]
fn a_timeout_stays_until_real_progress() {
    let mut r = Rollouts::new(outcome);
    let mut d = dep(2, json!(1), json!(0));
    d["spec"]["progressDeadlineSeconds"] = json!(3);
    run(&mut r, &mut d, 5);
    preload(&mut d, "bad");
    run(&mut r, &mut d, 3);
    assert_eq!(
        progressing_of(&d).1,
        "ReplicaSetUpdated",
        "not before the deadline"
    );
    run(&mut r, &mut d, 3);
    assert_eq!(progressing_of(&d).1, "ProgressDeadlineExceeded");
    d["spec"]["progressDeadlineSeconds"] = json!(600);
    d["metadata"]["generation"] = json!(d["metadata"]["generation"].as_i64().unwrap_or(0) + 1);
    run(&mut r, &mut d, 2);
    assert_eq!(
        progressing_of(&d).1,
        "ProgressDeadlineExceeded",
        "a spec write is not progress"
    );
    preload(&mut d, "v1-again");
    run(&mut r, &mut d, 6);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
}

/// `syncRolloutStatus` does not judge progress once complete: scaling up a
/// complete Deployment whose new pods never get ready never times out.
#[test]
fn a_complete_deployment_scaled_up_is_not_judged_again() {
    let broken = Cell::new(false);
    let mut r = Rollouts::new(|t: &Value| {
        if broken.get() {
            PodOutcome::NeverReady
        } else {
            outcome(t)
        }
    });
    let mut d = dep(2, json!(1), json!(0));
    d["spec"]["progressDeadlineSeconds"] = json!(2);
    run(&mut r, &mut d, 4);
    broken.set(true);
    d["spec"]["replicas"] = json!(4);
    run(&mut r, &mut d, 10);
    assert_eq!(d["status"]["availableReplicas"], 2);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
}

/// `MaxUnavailable` is 0 for Recreate: Available needs every replica, and
/// no old pod runs beside a new one (`rolloutRecreate`).
#[test]
fn recreate_is_unavailable_while_it_replaces_pods() {
    let mut r = Rollouts::new(outcome);
    let mut d = recreate(3);
    run(&mut r, &mut d, 4);
    preload(&mut d, "v2");
    d["status"] = r.step(&d, Duration::from_secs(1));
    let available = condition(&d["status"], "Available").unwrap_or_default();
    assert_eq!(available["reason"], "MinimumReplicasUnavailable");
    let sets: Vec<i64> = r.state.sets.iter().map(|s| s.pods.len() as i64).collect();
    assert!(sets.iter().filter(|n| **n > 0).count() <= 1, "{sets:?}");
    run(&mut r, &mut d, 4);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
}

/// `cleanupDeployment` and revisions: with revisionHistoryLimit 1, older
/// sets go; a template seen before takes the next revision.
#[test]
fn history_is_limited_and_revisions_advance() {
    let mut r = Rollouts::new(outcome);
    let mut d = dep(1, json!(1), json!(0));
    d["spec"]["revisionHistoryLimit"] = json!(1);
    let mut names = Vec::new();
    for v in ["a", "b", "c", "b"] {
        preload(&mut d, v);
        run(&mut r, &mut d, 5);
        assert!(r.state.sets.len() <= 2, "limit 1 keeps one old set");
        let current = r
            .state
            .sets
            .iter()
            .max_by_key(|s| s.revision)
            .map(|s| (s.name.clone(), s.revision));
        names.push(current.unwrap_or_default());
    }
    assert_eq!(
        names.iter().map(|n| n.1).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(names[3].0, names[1].0, "the kept set of b is reused");
}

/// kubernetes#125568, as `isScalingEvent` and `scale` (sync.go) compute it:
/// mid-way through a rolling update (two active sets), one write that
/// switches to Recreate and resizes leaves every sync in `scale`, which
/// resizes nothing under Recreate with two active sets; no new set, and the
/// deadline is never judged. The switch alone, then the resize, completes.
#[test]
fn a_switch_to_recreate_with_a_resize_wedges_a_rolling_update() {
    let slow = |t: &Value| {
        if t["metadata"]["annotations"]["v"] == "v2" {
            PodOutcome::ReadyAfter(Duration::from_secs(30))
        } else {
            outcome(t)
        }
    };
    let mid_rollout = |r: &mut Rollouts<_>, d: &mut Value| {
        d["spec"]["progressDeadlineSeconds"] = json!(5);
        run(r, d, 4);
        preload(d, "v2");
        run(r, d, 1);
        let active = r.state.sets.iter().filter(|s| s.replicas > 0).count();
        assert_eq!(active, 2, "a rolling update under way");
    };
    let switch = |d: &mut Value| {
        d["spec"]["strategy"] = json!({"type": "Recreate"});
        preload(d, "v3");
    };
    let mut r = Rollouts::new(slow);
    let mut d = dep(3, json!(1), json!(0));
    mid_rollout(&mut r, &mut d);
    switch(&mut d);
    d["spec"]["replicas"] = json!(4);
    run(&mut r, &mut d, 30);
    assert_eq!(r.state.sets.len(), 2, "no set for v3 is ever made");
    assert_ne!(progressing_of(&d).1, "ProgressDeadlineExceeded");
    assert_ne!(progressing_of(&d).1, "NewReplicaSetAvailable");

    let mut r = Rollouts::new(slow);
    let mut d = dep(3, json!(1), json!(0));
    mid_rollout(&mut r, &mut d);
    switch(&mut d);
    run(&mut r, &mut d, 1);
    assert_eq!(
        d["status"]["observedGeneration"],
        d["metadata"]["generation"]
    );
    d["spec"]["replicas"] = json!(4);
    d["metadata"]["generation"] = json!(d["metadata"]["generation"].as_i64().unwrap_or(0) + 1);
    run(&mut r, &mut d, 10);
    assert_eq!(progressing_of(&d).1, "NewReplicaSetAvailable");
    assert_eq!(d["status"]["availableReplicas"], 4);
}
