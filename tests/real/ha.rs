//! Two replicas on the real Lease (`openmed-system/openmed-operator`, the
//! one name the shipped Role lets the operator update): a SIGKILLed leader
//! is replaced within a lease duration and a retry period; a Lease deleted
//! by hand makes the leader step down and never two writers. Every write is
//! attributed to a replica by the User-Agent the audit log records.

use crate::harness::{tmpdir, wait_for, Operator};
use crate::plane::{from_env, Plane};
use crate::story::{Story, V1, V2};
use crate::{exclusive, install, operator_on_real_as};
use std::time::{Duration, Instant};

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/openmed-system/leases/openmed-operator";
const TIMINGS: [&str; 8] = [
    "--leader-elect",
    "--lease-namespace=openmed-system",
    "--lease-duration-seconds",
    "3",
    "--renew-deadline-seconds",
    "2",
    "--retry-period-seconds",
    "1",
];

/// The Lease's holder's pod name ("" when released or absent).
fn holder(plane: &Plane) -> String {
    let (code, lease) = plane.request("GET", LEASE, None);
    if code != 200 {
        return String::new();
    }
    let id = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
    id.split('_').next().unwrap_or("").to_string()
}

fn wait_holder(plane: &Plane, pod: &str) -> Duration {
    let t = Instant::now();
    wait_for(
        &format!("{pod} to hold the Lease"),
        || holder(plane),
        |h| h == pod,
    );
    t.elapsed()
}

/// The replicas that wrote in `ns`, in the order their writes reached the
/// API server, one entry per turn.
fn writers_in_turn(plane: &Plane, ns: &str) -> Vec<String> {
    let mut writes: Vec<(String, String)> = plane
        .audit_events()
        .into_iter()
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            )
        })
        .filter_map(|e| {
            let ua = e["userAgent"].as_str()?;
            let pod = ua.split_once('(')?.1.split('_').next()?.to_string();
            Some((e["requestReceivedTimestamp"].as_str()?.to_string(), pod))
        })
        .collect();
    writes.sort();
    let mut turns: Vec<String> = Vec::new();
    for (_, pod) in writes {
        if turns.last() != Some(&pod) {
            turns.push(pod);
        }
    }
    turns
}

fn replica(plane: &Plane, ns: &str, pod: &str) -> Operator {
    let dir = tmpdir(&format!("ha-{pod}"));
    operator_on_real_as(plane, ns, &dir, &TIMINGS, pod)
}

#[test]
fn a_killed_leader_is_replaced_and_a_deleted_lease_never_makes_two_writers() {
    let Some(plane) = from_env() else { return };
    let _plane = exclusive();
    install::once(&plane);
    let _ = plane.request("DELETE", LEASE, None);
    let ns = format!("ha-{}", std::process::id());
    let st = Story::new(&plane, &ns);
    st.deployment("svc", 2, true);
    let mut a = replica(&plane, &ns, "op-a");
    wait_holder(&plane, "op-a");
    let mut b = replica(&plane, &ns, "op-b");
    st.model("svc", "svc", V1, 600);
    st.wait_serving("svc", V1);

    st.patch_model("svc", serde_json::json!({"spec": {"version": V2}}));
    a.kill();
    let took = wait_holder(&plane, "op-b");
    eprintln!("takeover after SIGKILL on the real Lease: {took:?}");
    assert!(
        took <= Duration::from_secs(3 + 1 + 2),
        "takeover took {took:?}"
    );
    st.wait_serving("svc", V2);
    st.wait_events("svc", &[("RolloutStarted", 2), ("RolloutSucceeded", 2)]);

    let (code, body) = plane.request("DELETE", LEASE, None);
    assert_eq!(code, 200, "deleting the Lease: {body}");
    let t = Instant::now();
    let exited = loop {
        if let Some(st) = b.exited() {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        exited.is_some_and(|s| !s.success()),
        "op-b kept running without its Lease: {exited:?}\n{}",
        b.log()
    );
    let mut c = replica(&plane, &ns, "op-c");
    wait_holder(&plane, "op-c");
    st.patch_model("svc", serde_json::json!({"spec": {"version": V1}}));
    st.wait_serving("svc", V1);
    st.wait_events("svc", &[("RolloutStarted", 3), ("RolloutSucceeded", 3)]);
    let ours = crate::cluster::Cluster::objects(&plane, "", "events", Some(&ns));
    let ours: Vec<_> = ours
        .iter()
        .filter(|e| e["reportingComponent"] == "openmed-operator")
        .collect();
    assert!(ours.len() >= 6, "the operator's Events: {ours:?}");
    for e in ours {
        assert!(
            e["count"].as_i64().unwrap_or(1) <= 1,
            "an Event posted twice: {e}"
        );
    }
    let turns = writers_in_turn(&plane, &ns);
    assert_eq!(turns, ["op-a", "op-b", "op-c"], "writers in turn");
    c.assert_clean_exit();
    let _ = plane.request("DELETE", LEASE, None);
}
