//! Faults the real API server makes by itself.

use crate::harness::tmpdir;
use crate::plane::{from_env, OwnPlane, Plane};
use crate::story::{Story, MODEL, V1, V2};
use crate::{install, operator_on_real, shared};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The server ends every watch at the `timeoutSeconds` the operator asked
/// for (50 to 60 s; upstream `WatchServer.HandleHTTP`'s timeout): the
/// operator opens each again from where it was, and a change made after
/// that is acted on as promptly as one made before.
#[test]
fn watches_the_server_ends_are_opened_again_and_nothing_is_missed() {
    let Some(plane) = from_env() else { return };
    let _plane = shared();
    install::once(&plane);
    let ns = format!("watch-timeout-{}", std::process::id());
    let st = Story::new(&plane, &ns);
    st.deployment("svc", 1, true);
    let mut op = operator_on_real(&plane, &ns, &tmpdir("watch-timeout"), &[]);
    st.model("svc", "svc", V1, 600);
    st.wait_serving("svc", V1);
    let model_watches = || {
        plane
            .audit_events()
            .into_iter()
            .filter(|e| e["verb"] == "watch" && e["objectRef"]["resource"] == "openmedmodels")
            .filter(|e| e["objectRef"]["namespace"] == ns.as_str())
            .count()
    };
    assert_eq!(model_watches(), 1);
    let t = Instant::now();
    while model_watches() < 2 && t.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        model_watches() >= 2,
        "the server never ended the watch in 90 s"
    );
    eprintln!(
        "the server ended the first watch after about {:?}",
        t.elapsed()
    );
    let changed = Instant::now();
    st.patch_model("svc", json!({"spec": {"version": V2}}));
    st.wait_serving("svc", V2);
    eprintln!(
        "a change after the reopened watch served in {:?}",
        changed.elapsed()
    );
    op.assert_clean_exit();
}

/// A watch's `410 Gone`, made deterministic on a plane of its own: the watch
/// cache off, so every watch is served from etcd (upstream `Cacher`
/// bypassed), and compaction every second. The operator is stopped
/// (SIGSTOP) while kube-apiserver restarts, its model changes and the
/// revisions it last saw are compacted away; resumed, it reopens its watches
/// from those revisions, is told they are too old (etcd3 `watchChan`'s
/// `ErrCompacted`, as 410), lists again and acts on the change.
#[test]
fn a_watch_from_a_compacted_revision_lists_again_and_misses_nothing() {
    if from_env().is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/control-plane-gone");
    let _own = OwnPlane::up(&dir, "--watch-cache=false --etcd-compaction-interval=1s");
    let plane = Plane::open(&dir);
    install::apply(&plane).expect("installing on the plane without a watch cache");
    let ns = format!("gone-{}", std::process::id());
    let st = Story::new(&plane, &ns);
    st.deployment("svc", 1, true);
    let mut op = operator_on_real(&plane, &ns, &tmpdir("gone"), &[]);
    st.model("svc", "svc", V1, 600);
    st.wait_serving("svc", V1);
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &op.pid().to_string()])
            .status();
        assert!(ok.is_ok_and(|s| s.success()), "kill {sig}");
    };
    signal("-STOP");
    plane.control("stop", "apiserver");
    plane.control("start", "apiserver");
    crate::harness::wait_until("kube-apiserver ready again", || plane.ready());
    st.patch_model("svc", json!({"spec": {"version": V2}}));
    for i in 0..5 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("churn-{i}"), "namespace": ns}});
        crate::cluster::Cluster::create(&plane, cm).expect("a ConfigMap");
    }
    std::thread::sleep(Duration::from_secs(3));
    signal("-CONT");
    st.wait_serving("svc", V2);
    let log = op.log();
    assert!(
        log.contains("expired; relisting") || log.contains("watch expired in stream; relisting"),
        "no watch was refused as too old, so this test proved nothing:\n{log}"
    );
    op.assert_clean_exit();
}

/// A second writer edits the model's labels as fast as it can while the operator
/// rolls it out: the operator's status writes, conditional on the
/// resourceVersion it read, meet the real server's 409 Conflict
/// (`GuaranteedUpdate`'s precondition), plan again from what is there, and
/// finish with every Event posted once. A rollout whose writes all happened
/// to land between two of the second writer's is followed by another, up to
/// three, so that a 409 is met and the test can prove something.
#[test]
fn conflicts_from_a_second_writer_are_planned_again() {
    let Some(plane) = from_env() else { return };
    let _plane = shared();
    install::once(&plane);
    let ns = format!("conflict-{}", std::process::id());
    let st = Story::new(&plane, &ns);
    st.deployment("svc", 2, true);
    let mut op = operator_on_real(&plane, &ns, &tmpdir("conflict"), &[]);
    st.model("svc", "svc", V1, 600);
    st.wait_serving("svc", V1);
    let conflicts = || {
        plane
            .audit_events()
            .into_iter()
            .filter(|e| e["objectRef"]["namespace"] == ns.as_str())
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("openmed-operator")
            })
            .filter(|e| e["responseStatus"]["code"] == 409)
            .count()
    };
    let mut rollouts = 0;
    for version in [V2, V3, V4] {
        rollouts += 1;
        roll_out_beside_a_second_writer(&plane, &st, &ns, version);
        let started = 1 + rollouts;
        st.wait_events(
            "svc",
            &[("RolloutStarted", started), ("RolloutSucceeded", started)],
        );
        let events = st.events("svc");
        assert_eq!(events.get("RolloutStarted"), Some(&started), "{events:?}");
        assert_eq!(events.get("RolloutSucceeded"), Some(&started), "{events:?}");
        if conflicts() > 0 {
            break;
        }
    }
    let met = conflicts();
    eprintln!("the operator met {met} conflicts in {rollouts} rollouts");
    assert!(
        met > 0,
        "in {rollouts} rollouts the second writer never made the operator meet a 409: this test proved nothing"
    );
    op.assert_clean_exit();
}

/// More versions for the conflict test's rollouts: any version the
/// stand-in kubelet can load.
const V3: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3";
const V4: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v4";

/// Rolls model `svc` out to `version` while a second writer patches its
/// labels until it serves it (at most 60 s and 20,000 patches).
fn roll_out_beside_a_second_writer(plane: &Plane, st: &Story, ns: &str, version: &str) {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            for i in 0..20_000 {
                if done.load(std::sync::atomic::Ordering::Relaxed)
                    || t.elapsed() > Duration::from_secs(60)
                {
                    break;
                }
                let label = json!({"metadata": {"labels": {"second-writer": i.to_string()}}});
                let _ = crate::cluster::Cluster::merge_patch(
                    plane, MODEL.0, MODEL.1, ns, "svc", &label,
                );
            }
        });
        st.patch_model("svc", json!({"spec": {"version": version}}));
        st.wait_serving("svc", version);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}
