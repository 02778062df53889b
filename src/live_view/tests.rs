use super::hub::{Hub, Source, MAX_VIEWERS, QUEUE};
use super::*;
use crate::runtime::Store;
use serde_json::json;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

fn model(name: &str, phase: &str, version: &str) -> ModelView {
    ModelView::from_json(&json!({
        "metadata": {"namespace": "team-a", "name": name, "uid": format!("u-{name}"),
                     "generation": 2, "resourceVersion": "7"},
        "spec": {"family": "PII", "tier": "Small", "version": version,
                 "targetRef": {"name": "svc", "containerName": "svc"}},
        "status": {"phase": phase, "activeVersion": "OpenMed/v1", "rollbackCount": 1,
                   "rollbackRequest": "OpenMed/v0",
                   "conditions": [
                       {"type": "Ready", "status": "False", "reason": "RolloutInProgress",
                        "lastTransitionTime": "2026-12-01T00:00:05Z"},
                       {"type": "Progressing", "status": "True", "reason": "NewVersion",
                        "lastTransitionTime": "2026-12-01T00:00:09Z"}]},
    }))
    .unwrap()
}

fn deployment() -> DeploymentView {
    DeploymentView::from_json(&json!({
        "metadata": {"namespace": "team-a", "name": "svc", "uid": "d", "resourceVersion": "3",
                     "generation": 4},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "svc",
            "env": [{"name": "SECRET_TOKEN", "value": "hunter2"}]}]}}},
        "status": {"observedGeneration": 4, "replicas": 4, "updatedReplicas": 2,
                   "readyReplicas": 3, "availableReplicas": 3},
    }))
    .unwrap()
}

#[test]
fn a_row_shows_what_status_shows_and_nothing_of_the_pod_template() {
    let r = row(
        &model("m", "RollingOut", "OpenMed/v2"),
        Some(&deployment()),
        vec![],
    );
    assert_eq!(r.key, "team-a/m");
    assert_eq!(
        (r.desired.as_str(), r.active.as_str()),
        ("OpenMed/v2", "OpenMed/v1")
    );
    assert_eq!((r.phase.as_str(), r.tier.as_str()), ("RollingOut", "Small"));
    assert_eq!(
        r.progress,
        Some(Progress {
            desired: 3,
            updated: 2,
            ready: 3,
            available: 3
        })
    );
    assert_eq!(r.conditions[1].reason, "NewVersion");
    assert_eq!(r.since, "2026-12-01T00:00:09Z");
    assert_eq!(
        (r.rollbacks, r.rollback_request.as_str()),
        (1, "OpenMed/v0")
    );
    let out = serde_json::to_string(&r).unwrap();
    assert!(
        !out.contains("hunter2") && !out.contains("SECRET_TOKEN"),
        "{out}"
    );
    // No target yet: no progress, and the page says so.
    assert_eq!(
        row(&model("m", "Pending", "x"), None, vec![]).progress,
        None
    );
}

#[test]
fn user_strings_are_bounded_and_stripped_of_control_characters() {
    let long = format!("OpenMed/{}\u{1b}[2J", "x".repeat(5000));
    let r = row(&model("m", "Ready", &long), None, vec![]);
    assert_eq!(r.desired.chars().count(), MAX_TEXT);
    assert!(!r.desired.contains('\u{1b}'));
}

#[test]
fn changes_are_the_rows_that_differ_and_the_keys_that_went() {
    let one = |m: &ModelView| (format!("team-a/{}", m.name()), row(m, None, vec![]));
    let old: BTreeMap<_, _> = [
        one(&model("a", "Ready", "v1")),
        one(&model("b", "Ready", "v1")),
    ]
    .into();
    let new: BTreeMap<_, _> = [
        one(&model("a", "RollingOut", "v2")),
        one(&model("c", "Pending", "v1")),
    ]
    .into();
    let (changed, gone) = diff(&old, &new);
    let keys: Vec<&str> = changed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["team-a/a", "team-a/c"]);
    assert_eq!(gone, ["team-a/b"]);
    assert_eq!(diff(&new, &new), (vec![], vec![]));
}

fn event(reason: &str, n: i64) -> EventRow {
    EventRow {
        reason: reason.into(),
        type_: "Normal".into(),
        count: n,
        last: format!("2026-12-01T00:00:{n:02}Z"),
        message: "m".into(),
    }
}

#[test]
fn recent_events_keep_every_event_object_newest_first_and_few() {
    let r = RecentEvents::default();
    // The last one bumps an Event: its record is replaced. The two
    // rollouts' Events of one reason both stay.
    for (id, reason, count) in [
        ("m-started-1", "RolloutStarted", 1),
        ("m-succeeded-1", "RolloutSucceeded", 1),
        ("m-started-2", "RolloutStarted", 1),
        ("m-succeeded-1", "RolloutSucceeded", 2),
    ] {
        r.record(&ObjectKey::new("ns", "m"), id, event(reason, count).seen());
    }
    let got: Vec<(String, i64)> = r
        .of("ns", "m")
        .into_iter()
        .map(|e| (e.reason, e.count))
        .collect();
    assert_eq!(
        got,
        [
            ("RolloutSucceeded".into(), 2),
            ("RolloutStarted".into(), 1),
            ("RolloutStarted".into(), 1)
        ]
    );
    for i in 0..20 {
        r.record(
            &ObjectKey::new("ns", "m"),
            &format!("e{i}"),
            event("RolloutStarted", i).seen(),
        );
    }
    assert_eq!(r.of("ns", "m").len(), EVENTS_PER_MODEL);
    // Listed Events about other kinds are not the view's business.
    r.record_object(&json!({"metadata": {"name": "p.1"},
                "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p"},
                "reason": "Pulled"}));
    assert!(r.of("ns", "p").is_empty());
    let listed = json!({"metadata": {"name": "x-rolloutfailed-3-abc"},
                        "involvedObject": {"kind": "OpenMedModel", "namespace": "ns", "name": "x"},
                        "reason": "RolloutFailed", "type": "Warning", "count": 2,
                        "lastTimestamp": "2026-12-01T00:00:00Z", "message": "missed"});
    r.record_object(&listed);
    r.record_object(&listed);
    assert_eq!(r.of("ns", "x").len(), 1);
    assert_eq!(r.of("ns", "x")[0].type_, "Warning");
}

#[test]
fn a_recorded_event_reads_back_whole_with_its_control_characters_escaped() {
    let r = RecentEvents::default();
    let e = EventRow {
        message: "line\0one\nline two".into(),
        ..event("RolloutFailed", 7)
    };
    r.record(&ObjectKey::new("ns", "m"), "m-failed", e.seen());
    let got = r.of("ns", "m");
    let want = EventRow {
        message: "line\\0one\\nline two".into(),
        ..event("RolloutFailed", 7)
    };
    assert_eq!(got, [want]);
}

/// Rows the test sets; every look a new version.
struct Set(Arc<Mutex<BTreeMap<String, Row>>>, AtomicU64);

impl Source for Set {
    fn rows(&self) -> BTreeMap<String, Row> {
        lock(&self.0).clone()
    }
    fn version(&self) -> u64 {
        self.1.fetch_add(1, SeqCst)
    }
}

fn hub() -> (Arc<Hub>, Arc<Mutex<BTreeMap<String, Row>>>) {
    let rows = Arc::new(Mutex::new(BTreeMap::new()));
    (
        Hub::new(Box::new(Set(rows.clone(), AtomicU64::new(0)))),
        rows,
    )
}

/// Counts the looks at the rows it passes on.
struct Counted(Rows, Arc<AtomicUsize>);

impl Source for Counted {
    fn rows(&self) -> BTreeMap<String, Row> {
        self.1.fetch_add(1, SeqCst);
        self.0.rows()
    }
    fn version(&self) -> u64 {
        self.0.version()
    }
}

fn set(rows: &Mutex<BTreeMap<String, Row>>, m: &ModelView) {
    let r = row(m, None, vec![]);
    lock(rows).insert(r.key.clone(), r);
}

#[test]
fn a_viewer_gets_a_snapshot_then_only_changes() {
    let (hub, rows) = hub();
    set(&rows, &model("a", "Ready", "v1"));
    let v = hub.join().unwrap();
    assert!(v.snapshot.contains("event: snapshot") && v.snapshot.contains("team-a/a"));
    hub.publish();
    assert!(v.queue.try_recv().is_err(), "nothing changed, nothing sent");
    set(&rows, &model("a", "RollingOut", "v2"));
    lock(&rows).insert(
        "team-a/b".into(),
        row(&model("b", "Ready", "v1"), None, vec![]),
    );
    hub.publish();
    let msg = v.queue.try_recv().unwrap();
    assert!(
        msg.starts_with("event: changes") && msg.contains("RollingOut") && msg.contains("team-a/b")
    );
    lock(&rows).remove("team-a/a");
    hub.publish();
    assert!(v
        .queue
        .try_recv()
        .unwrap()
        .contains(r#""remove":["team-a/a"]"#));
}

#[test]
fn a_stuck_viewer_is_dropped_and_never_blocks_the_publisher() {
    let (hub, rows) = hub();
    let stuck = hub.join().unwrap();
    let t = std::time::Instant::now();
    for i in 0..(QUEUE + 5) {
        set(&rows, &model("a", "Ready", &format!("v{i}")));
        hub.publish();
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(hub.viewers(), 0);
    // Its queue holds what it was sent, then it ends.
    assert_eq!(stuck.queue.try_iter().count(), QUEUE);
}

#[test]
fn viewers_are_bounded() {
    let (hub, _) = hub();
    let all: Vec<_> = (0..MAX_VIEWERS).map(|_| hub.join().unwrap()).collect();
    assert!(hub.join().is_none());
    drop(all);
    assert!(hub.join().is_some(), "a viewer that left frees its place");
}

#[test]
fn nothing_is_rebuilt_or_sent_while_no_cache_changes() {
    let models = Store::<ModelView>::default();
    let deployments = Store::<DeploymentView>::default();
    let recent = Arc::new(RecentEvents::default());
    let m = model("a", "Ready", "v1");
    models
        .writer()
        .put(ObjectKey::new("team-a", "a"), m.clone())
        .unwrap();
    let looks = Arc::new(AtomicUsize::new(0));
    let rows = Rows::new(models.reader(), deployments.reader(), recent.clone());
    let hub = Hub::new(Box::new(Counted(rows, looks.clone())));
    let viewer = hub.join().unwrap();
    for _ in 0..10 {
        hub.publish();
    }
    assert_eq!(looks.load(SeqCst), 1, "the caches did not change");
    // An Event recorded for the model: one look, one message.
    recent.record(
        &ObjectKey::new("team-a", "a"),
        "a-ok",
        event("RolloutSucceeded", 1).seen(),
    );
    hub.publish();
    hub.publish();
    assert_eq!(looks.load(SeqCst), 2);
    assert!(viewer
        .queue
        .try_recv()
        .unwrap()
        .contains("RolloutSucceeded"));
    assert!(viewer.queue.try_recv().is_err());
}
