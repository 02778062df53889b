//! Faults the real API server makes by itself.

use crate::harness::tmpdir;
use crate::plane::from_env;
use crate::story::{Story, V1, V2};
use crate::{install, operator_on_real, shared};
use serde_json::json;
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
        let mut ids = std::collections::HashSet::new();
        plane
            .audit_events()
            .into_iter()
            .filter(|e| e["verb"] == "watch" && e["objectRef"]["resource"] == "openmedmodels")
            .filter(|e| e["objectRef"]["namespace"] == ns.as_str())
            .filter(|e| ids.insert(e["auditID"].as_str().unwrap_or("").to_string()))
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
