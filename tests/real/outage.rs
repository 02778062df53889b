//! Outages of the real control plane in the middle of a rollout:
//! kube-apiserver killed and started again; etcd stopped for 10 s. The
//! operator recovers by itself: it does not restart, posts no Event twice and
//! loses none, every model reaches its right phase, and /readyz is false
//! during each outage and true again soon after the API server is ready.
//! During the API server's its lists and watches fail; during etcd's the
//! watches stay open, served from the watch cache, and the probe of a
//! consistent read is what fails (§9.D20).

use crate::harness::{tmpdir, wait_until, Operator};
use crate::plane::{from_env, Plane};
use crate::story::{Story, V1, V2};
use crate::{exclusive, install, operator_on_real};
use serde_json::json;
use std::time::{Duration, Instant};

/// A generous bound on the time from the API server's /readyz to the
/// operator's; the goal, 15 s, is measured and printed.
const BACK_WITHIN: Duration = Duration::from_secs(60);

/// A component taken away; started again when dropped, so that a failing
/// test never leaves the plane down for the others.
struct Down<'a> {
    plane: &'a Plane,
    component: &'a str,
    up: bool,
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if !self.up {
            self.plane.control("start", self.component);
        }
    }
}

/// Takes `component` away for `down`, mid-rollout, and returns how long the
/// operator's /readyz took to be 200 after the API server's. The operator
/// must be unready meanwhile.
fn outage(plane: &Plane, op: &mut Operator, component: &str, down: Duration) -> Duration {
    plane.control("stop", component);
    // kube-apiserver drains before it exits: the outage starts when `stop` returns.
    let t = Instant::now();
    let mut guard = Down {
        plane,
        component,
        up: false,
    };
    while op.http_get("/readyz").0 != 503 {
        assert!(
            t.elapsed() < down,
            "{component} down {:?}: the operator's /readyz still answers 200",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{component} down: the operator unready after {:?}",
        t.elapsed()
    );
    std::thread::sleep(down.saturating_sub(t.elapsed()));
    eprintln!(
        "{component} down: the operator's /readyz answered {}",
        op.http_get("/readyz").0
    );
    plane.control("start", component);
    guard.up = true;
    wait_until("kube-apiserver ready again", || plane.ready());
    let back = Instant::now();
    while op.http_get("/readyz").0 != 200 && back.elapsed() < BACK_WITHIN {
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = back.elapsed();
    eprintln!("{component} down {down:?}: the operator was ready {took:?} after the API server");
    assert!(
        took < BACK_WITHIN,
        "not ready {took:?} after the API server: {}",
        op.http_get("/readyz").1
    );
    took
}

#[test]
fn outages_of_the_apiserver_and_of_etcd_mid_rollout_are_survived() {
    let Some(plane) = from_env() else { return };
    let _plane = exclusive();
    install::once(&plane);
    let ns = format!("outage-{}", std::process::id());
    let st = Story::new(&plane, &ns);
    for name in ["a", "b"] {
        st.deployment(name, 2, true);
        st.model(name, name, V1, 600);
    }
    let dir = tmpdir("outage");
    let mut op = operator_on_real(&plane, &ns, &dir, &[]);
    // Both models serve `version` after their `n`-th rollout, each announced once.
    let serving_after = |version: &str, n: i64| {
        for name in ["a", "b"] {
            st.wait_serving(name, version);
            st.wait_events(name, &[("RolloutStarted", n), ("RolloutSucceeded", n)]);
        }
    };
    serving_after(V1, 1);

    for name in ["a", "b"] {
        st.patch_model(name, json!({"spec": {"version": V2}}));
    }
    outage(&plane, &mut op, "apiserver", Duration::from_secs(5));
    serving_after(V2, 2);

    for name in ["a", "b"] {
        st.patch_model(name, json!({"spec": {"version": V1}}));
    }
    outage(&plane, &mut op, "etcd", Duration::from_secs(10));
    serving_after(V1, 3);
    for name in ["a", "b"] {
        assert_eq!(
            st.events(name),
            [
                ("RolloutStarted".to_string(), 3),
                ("RolloutSucceeded".to_string(), 3)
            ]
            .into(),
            "{name}: an Event lost or posted twice"
        );
    }
    assert!(op.exited().is_none(), "the operator exited: {}", op.log());
    op.assert_clean_exit();
}
