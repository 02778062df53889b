//! The store alone, on views made up here: the rules are the store's, not
//! any kind's.

use super::*;

/// A view ordered by uid and generation, as a resource with a spec is.
#[derive(Debug, Clone, PartialEq)]
struct Obj {
    uid: String,
    generation: i64,
    resource_version: String,
    phase: String,
}

impl Versioned for Obj {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn order(&self) -> Option<(&str, i64, i64)> {
        Some((&self.uid, self.generation, 0))
    }
}

/// A view with nothing but its resourceVersion.
#[derive(Debug, Clone, PartialEq)]
struct Plain {
    resource_version: String,
}

impl Versioned for Plain {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

fn mv(rv: &str) -> Plain {
    Plain {
        resource_version: rv.into(),
    }
}

fn model(uid: &str, generation: i64, rv: &str, phase: &str) -> Obj {
    Obj {
        uid: uid.into(),
        generation,
        resource_version: rv.into(),
        phase: phase.into(),
    }
}

/// An index by phase, the name an index test files a view under.
fn by_phase(o: &Obj) -> Vec<String> {
    vec![o.phase.clone()]
}

fn k(ns: &str, n: &str) -> ObjectKey {
    ObjectKey::new(ns, n)
}

#[test]
fn own_writes_never_regress_the_cache() {
    let s: Store<Plain> = Store::default();
    s.writer().put(k("a", "x"), mv("10")).unwrap();
    assert!(!s.put_if_newer(k("a", "x"), mv("9")));
    assert!(s.put_if_newer(k("a", "x"), mv("11")));
    assert_eq!(s.get(&k("a", "x")).unwrap().resource_version, "11");
    assert!(s.put_if_newer(k("a", "y"), mv("1")));
}

/// The index follows every change: a new name, a changed one, a
/// removal, and a list replacing everything.
#[test]
fn the_index_follows_puts_removes_and_lists() {
    let s: Store<Obj> = Store::indexed(by_phase);
    let w = s.writer();
    let names = |s: &Store<Obj>, i: &str| {
        let mut v: Vec<String> = s.by_index(i).into_iter().map(|m| m.uid).collect();
        v.sort();
        v
    };
    w.put(k("a", "m1"), model("u1", 1, "1", "Ready")).unwrap();
    w.put(k("a", "m2"), model("u2", 1, "2", "Ready")).unwrap();
    assert_eq!(names(&s, "Ready"), ["u1", "u2"]);
    w.put(k("a", "m1"), model("u1", 2, "3", "Failed")).unwrap();
    assert_eq!(names(&s, "Ready"), ["u2"]);
    assert_eq!(names(&s, "Failed"), ["u1"]);
    s.remove(&k("a", "m2"));
    assert!(names(&s, "Ready").is_empty());
    w.replace(None, vec![(k("a", "m3"), model("u3", 1, "4", "Ready"))]);
    assert_eq!(names(&s, "Ready"), ["u3"]);
    assert!(names(&s, "Failed").is_empty());
}

/// docs/contract.md §9.17: a lagging watch never takes an object back to
/// an older generation.
#[test]
fn an_older_generation_never_replaces_a_newer_one() {
    let s: Store<Obj> = Store::default();
    let w = s.writer();
    assert!(s.put_if_newer(k("a", "m"), model("u1", 4, "40", "RollingOut")));
    assert_eq!(
        w.put(k("a", "m"), model("u1", 3, "30", "Ready")),
        Err(Stale)
    );
    assert_eq!(s.get(&k("a", "m")).unwrap().generation, 4);
    // The same generation with a new status is taken; so is a new incarnation.
    assert!(w.put(k("a", "m"), model("u1", 4, "41", "Ready")).is_ok());
    assert!(w.put(k("a", "m"), model("u2", 1, "50", "Pending")).is_ok());
    // A late deletion of the old incarnation removes nothing.
    assert!(w.remove_object(&k("a", "m"), "u1").is_none());
    assert!(w.remove_object(&k("a", "m"), "u2").is_some());
    // A relist of an older view keeps the newer one too.
    w.put(k("a", "m"), model("u3", 5, "60", "Ready")).unwrap();
    w.replace(
        Some("a"),
        vec![(k("a", "m"), model("u3", 2, "20", "Ready"))],
    );
    assert_eq!(s.get(&k("a", "m")).unwrap().generation, 5);
}

/// A DELETED event is final for that uid against our own write
/// responses and re-reads (docs/contract.md §9.17: a deletion removes
/// the incarnation it names); only a later event of the same watch
/// brings it back. The store is synced only when every loop filling it
/// has listed (§6: workers start only then).
#[test]
fn deletes_are_final_and_sync_needs_every_loop() {
    let s: Store<Obj> = Store::default();
    let w = s.writer();
    w.put(k("a", "m"), model("u1", 1, "10", "Ready")).unwrap();
    w.remove_object(&k("a", "m"), "u1");
    // Our finalizer-release response arrives after the DELETED event.
    assert!(!s.put_if_newer(k("a", "m"), model("u1", 2, "12", "Ready")));
    assert!(s.is_empty());
    assert!(
        s.put_if_newer(k("a", "m"), model("u2", 1, "20", "Pending")),
        "a new object of that name"
    );
    // A selector watch: the object left the selector (DELETED) and came
    // back (ADDED, same uid). The stream is ordered, so it is live again
    // and our write responses for it are kept.
    w.remove_object(&k("a", "d"), "d1");
    assert!(!s.put_if_newer(k("a", "d"), model("d1", 1, "30", "Ready")));
    assert!(w.put(k("a", "d"), model("d1", 2, "31", "Ready")).is_ok());
    assert!(s.put_if_newer(k("a", "d"), model("d1", 3, "32", "Ready")));
    assert_eq!(s.get(&k("a", "d")).unwrap().generation, 3);
    assert!(!s.is_synced(), "no loop: not synced");
    w.register_loop("models/a");
    w.register_loop("models/b");
    w.mark_synced("models/a");
    assert!(!s.is_synced());
    assert_eq!(s.unsynced(), ["models/b"]);
    w.mark_synced("models/b");
    assert!(s.is_synced());
}

/// The applier alone, no server: events in, changes out.
#[test]
fn the_applier_reports_exactly_what_changed() {
    let s: Store<Obj> = Store::default();
    let w = s.writer();
    let m1 = model("u1", 1, "10", "Pending");
    let add = w.apply(Event::Applied(k("a", "m"), m1.clone()));
    assert_eq!(
        add,
        vec![Change {
            key: k("a", "m"),
            old: None,
            new: Some(Arc::new(m1.clone()))
        }]
    );
    assert!(
        w.apply(Event::Applied(k("a", "m"), m1.clone())).is_empty(),
        "no change"
    );
    let m2 = model("u1", 2, "11", "RollingOut");
    let upd = w.apply(Event::Applied(k("a", "m"), m2.clone()));
    assert_eq!(upd[0].old.as_deref(), Some(&m1));
    assert!(
        w.apply(Event::Applied(k("a", "m"), m1.clone())).is_empty(),
        "older: kept"
    );
    let del = w.apply(Event::Deleted(k("a", "m"), "u1".into()));
    assert_eq!(del[0].new, None);
    // A relist of namespace a: n appears; b is untouched.
    w.apply(Event::Applied(k("b", "x"), model("u9", 1, "1", "Ready")));
    let n = model("u2", 1, "12", "Ready");
    let listed = w.apply(Event::Listed(
        Some("a".into()),
        vec![(k("a", "n"), n.clone())],
    ));
    assert_eq!(
        listed,
        vec![Change {
            key: k("a", "n"),
            old: None,
            new: Some(Arc::new(n))
        }]
    );
    assert!(s.contains(&k("b", "x")));
    assert_eq!(k("a", "n").to_string(), "a/n");
}

#[test]
fn replace_is_scoped_to_a_namespace_and_reports_changes() {
    let s: Store<Plain> = Store::default();
    let w = s.writer();
    for key in [k("a", "x"), k("a", "gone"), k("b", "y")] {
        w.put(key, mv("1")).unwrap();
    }
    let ch = w.replace(
        Some("a"),
        vec![(k("a", "x"), mv("1")), (k("a", "new"), mv("2"))],
    );
    assert_eq!(ch.len(), 2);
    assert!(s.contains(&k("b", "y")));
    assert!(!s.contains(&k("a", "gone")));
    assert!(s.contains(&k("a", "new")));
    assert!(newer("10", "9") && !newer("9", "10") && !newer("x", "1"));
}

/// A reader sees every change made through the other handles, and a
/// change counter that moves with each.
#[test]
fn a_reader_sees_what_the_writer_and_the_owner_put() {
    let s: Store<Plain> = Store::default();
    let r = s.reader();
    let before = r.changes();
    s.writer().put(k("a", "x"), mv("1")).unwrap();
    assert!(s.put_if_newer(k("a", "y"), mv("2")));
    assert_eq!(r.len(), 2);
    assert_eq!(r.get(&k("a", "y")), Some(mv("2")));
    assert_eq!(r.select(|key, _| key.name() == "x"), vec![mv("1")]);
    assert_eq!(r.changes(), before + 2);
}

/// What a settled pass read (§6) is judged by stamps: the same view again
/// (a relist) keeps an entry's stamp, a new one moves it and leaves the
/// other entries' alone, and an index name's stamp moves when a key joins
/// or leaves it.
#[test]
fn stamps_move_only_with_what_changed() {
    let s: Store<Obj> = Store::indexed(by_phase);
    let w = s.writer();
    w.put(k("a", "x"), model("u1", 1, "1", "Ready")).unwrap();
    w.put(k("a", "y"), model("u2", 1, "2", "Ready")).unwrap();
    let (x, y) = (s.stamp(&k("a", "x")), s.stamp(&k("a", "y")));
    let ready = s.index_stamp("Ready");
    assert!(x.is_some() && ready.is_some());
    assert_eq!(s.stamp(&k("a", "z")), None);

    w.replace(
        None,
        vec![
            (k("a", "x"), model("u1", 1, "1", "Ready")),
            (k("a", "y"), model("u2", 1, "2", "Ready")),
        ],
    );
    assert_eq!((s.stamp(&k("a", "x")), s.index_stamp("Ready")), (x, ready));

    w.put(k("a", "y"), model("u2", 2, "3", "Failed")).unwrap();
    assert_eq!(s.stamp(&k("a", "x")), x, "another entry changed");
    assert_ne!(s.stamp(&k("a", "y")), y);
    assert_ne!(s.index_stamp("Ready"), ready, "y left Ready");
    assert!(s.index_stamp("Failed").is_some());
    let (values, stamp) = s.by_index_stamped("Failed", |_| true);
    assert_eq!((values.len(), stamp), (1, s.index_stamp("Failed")));

    s.remove(&k("a", "y"));
    assert_eq!(s.index_stamp("Failed"), None);
    assert_eq!(s.stamp(&k("a", "y")), None);
}

/// A watch's echo of our own write and the write's answer (the same
/// incarnation at the same resourceVersion), whichever comes second, are
/// known held, so neither is made a view again; anything else is not.
#[test]
fn the_echo_of_a_write_is_known_held() {
    let s: Store<Obj> = Store::default();
    let w = s.writer();
    w.put(k("a", "e"), model("u0", 1, "40", "Ready")).unwrap();
    assert!(
        s.holds(&k("a", "e"), "u0", Some("40")),
        "the echo came first"
    );
    assert!(s.put_if_newer(k("a", "m"), model("u1", 2, "41", "Ready")));
    assert!(
        w.holds(&k("a", "m"), "u1", Some("41")),
        "the answer came first"
    );
    assert!(!w.holds(&k("a", "m"), "u1", Some("42")), "a newer version");
    assert!(
        !w.holds(&k("a", "m"), "u2", Some("41")),
        "another incarnation"
    );
    assert!(!w.holds(&k("a", "n"), "u1", Some("41")), "another object");
    assert!(!w.holds(&k("a", "m"), "u1", None), "no version");
    assert!(!w.holds(&k("a", "m"), "", Some("41")), "no uid");
    // A view without its uid is never taken for the echo.
    let p: Store<Plain> = Store::default();
    p.writer().put(k("a", "m"), mv("41")).unwrap();
    assert!(!p.writer().holds(&k("a", "m"), "u1", Some("41")));
}

/// A deleted uid is remembered as a digest, not its text: a watch whose
/// selector every claimed Deployment leaves buries one a model
/// (docs/performance.md, memory per resource).
#[cfg(feature = "alloc-count")]
#[test]
fn a_buried_uid_keeps_a_few_bytes() {
    use crate::memory::count::thread_live;
    const UIDS: usize = 5_000;
    let uids: Vec<String> = (0..UIDS)
        .map(|i| format!("00000002-6598-4d64-a52c-{i:012x}"))
        .collect();
    let s: Store<Obj> = Store::default();
    let w = s.writer();
    let before = thread_live();
    for uid in &uids {
        w.remove_object(&k("a", "gone"), uid);
    }
    let each = (thread_live() - before) / UIDS as i64;
    eprintln!("a buried uid: {each} B");
    assert!(each <= 40, "a buried uid keeps {each} B");
    assert!(!s.put_if_newer(k("a", "gone"), model(&uids[0], 1, "1", "Ready")));
}
